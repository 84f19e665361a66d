#!/usr/bin/env bash
# Static checks of the queue's PL/pgSQL functions with plpgsql_check: applies the rendered
# SQL of migrations/ (as a tool other than harel_jobs::migrate would) to a scratch
# database, then checks every function of the schema. Any finding fails the run.
#
# Needs psql, and the plpgsql_check extension installed on the server's host
# (.ci/run installs Debian's postgresql-<major>-plpgsql-check).
set -euo pipefail
cd "$(dirname "$0")/.."

url="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
db="harel_plpgsql_check_$$"
base="${url%/*}"
psql_admin() { psql -X -q -v ON_ERROR_STOP=1 "$url" "$@"; }
psql_db() { psql -X -q -v ON_ERROR_STOP=1 "$base/$db" "$@"; }

psql_admin -c "CREATE DATABASE $db"
trap 'psql_admin -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null' EXIT

# the helpers (internal/) before the entry points that call them (api/), as migrate does
files=(migrations/[0-9][0-9][0-9][0-9]_*.sql migrations/functions/internal/*.sql
       migrations/functions/api/*.sql)
{
    echo "BEGIN;"
    echo "CREATE SCHEMA harel;"
    for file in "${files[@]}"; do
        echo "\\i $file"
    done
    echo "COMMIT;"
} | psql_db -c "SET client_min_messages = warning" -f -

findings=$(psql_db -At -F ' | ' <<'SQL'
CREATE EXTENSION plpgsql_check;
SELECT p.oid::regprocedure, c.level, c.message, coalesce(c.detail, ''), coalesce(c.hint, '')
  FROM pg_proc p
  CROSS JOIN LATERAL plpgsql_check_function_tb(
        p.oid, fatal_errors => false, extra_warnings => true, performance_warnings => true,
        security_warnings => true) AS c
 WHERE p.pronamespace = 'harel'::regnamespace
   AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
 ORDER BY 1, 2;
SQL
)
checked=$(psql_db -At -c "SELECT count(*) FROM pg_proc WHERE pronamespace = 'harel'::regnamespace")
if [ -n "$findings" ]; then
    echo "plpgsql_check found problems in the queue's functions:" >&2
    echo "$findings" >&2
    exit 1
fi
echo "plpgsql_check: $checked functions, no findings"
