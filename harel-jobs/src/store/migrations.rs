//! The schema's life: creating and upgrading it (the bookkeeping, each migration and
//! function file with its row), and dropping it (the test helpers).
//!
//! What to apply is decided in `migrate.rs`, from what [`Store::migrations_applied`] reads;
//! the statements that do it are here. The migration's store is built with
//! [`PreparedStatements::Unnamed`](super::PreparedStatements::Unnamed), and each of its
//! statements runs in a transaction: it works through a transaction pooler as well as
//! directly.

use sqlx::{AssertSqlSafe, PgConnection, PgExecutor};

use super::{Statement, Store};

/// Creates the schema and the bookkeeping tables if missing, and takes the migration lock
/// (see `migrate.rs`'s `lock_bookkeeping`). `ADD COLUMN` (for the first releases'
/// `_migrations`) only when the column is missing: it would take an `ACCESS EXCLUSIVE`
/// lock, waiting for readers.
pub(super) const LOCK: &str = "
    CREATE SCHEMA IF NOT EXISTS @schema@;
    CREATE TABLE IF NOT EXISTS @schema@._migrations (
        version    INT         PRIMARY KEY,
        name       TEXT        NOT NULL,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        checksum   TEXT);
    LOCK TABLE @schema@._migrations IN EXCLUSIVE MODE;
    DO $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                        WHERE attrelid = '@schema@._migrations'::pg_catalog.regclass
                          AND attname = 'checksum' AND NOT attisdropped) THEN
            ALTER TABLE @schema@._migrations ADD COLUMN checksum TEXT;
        END IF;
    END $$;
    CREATE TABLE IF NOT EXISTS @schema@._functions (
        name       TEXT        PRIMARY KEY,
        checksum   TEXT        NOT NULL,
        release    TEXT        NOT NULL,
        applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
    -- versions and checksums only: every role may read them (workers check them at start-up)
    GRANT SELECT ON @schema@._migrations, @schema@._functions TO PUBLIC;";

pub(super) const APPLIED: &str =
    "SELECT 'm', version::text, checksum, NULL::text FROM @schema@._migrations
     UNION ALL
     SELECT 'f', name, checksum, release FROM @schema@._functions
     UNION ALL
     SELECT 'o', k.key, md5(k.sql), NULL FROM unnest($1::text[], $2::text[]) AS k (key, sql)";

pub(super) const MIGRATION_RECORD: &str = "INSERT INTO @schema@._migrations (version, name, checksum) \
     VALUES ($1, $2, md5($3))";

/// (`excluded.applied_at`, the column's default, rather than `now()`: Citus takes no
/// function but an immutable one in `DO UPDATE SET`.)
pub(super) const FUNCTION_RECORD: &str =
    "INSERT INTO @schema@._functions AS f (name, checksum, release)
     VALUES ($1, md5($2), $3)
     ON CONFLICT (name) DO UPDATE
        SET checksum = excluded.checksum, release = excluded.release,
            applied_at = excluded.applied_at";

/// On Citus only (the extension present), after the function files:
/// - every function of the schema that forces generic plans is altered to
///   `plan_cache_mode = auto`. Citus cannot build a distributed plan of a generic plan with
///   parameters ("could not create distributed plan … parameters in SQL functions"); left to
///   choose, PostgreSQL takes the custom plans Citus steers it to;
/// - `harel_claim` gets `citus.propagate_set_commands = 'local'`, so that its `SET LOCAL
///   lock_timeout` reaches the worker node holding the queue's row (a function's own `SET`
///   clause is not sent to the nodes: a limited queue's lock wait would not be bounded).
///
/// Plain PostgreSQL is left as the files say.
pub(super) const CITUS_SETTINGS: &str = "
    DO $$
    DECLARE
        f regprocedure;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
            RETURN;
        END IF;
        FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                  WHERE p.pronamespace = '@schema@'::regnamespace
                    AND 'plan_cache_mode=force_generic_plan' = ANY (p.proconfig) LOOP
            EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = auto', f);
        END LOOP;
        FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
                  WHERE p.pronamespace = '@schema@'::regnamespace
                    AND p.proname = 'harel_claim' LOOP
            EXECUTE format('ALTER FUNCTION %s SET citus.propagate_set_commands = local', f);
        END LOOP;
    END $$";

pub(super) const SCHEMA_DROP: &str = "DROP SCHEMA IF EXISTS @schema@ CASCADE";

/// Runs `sql`'s statements one at a time on `tx`, by the simple query protocol (no
/// parameters): Citus refuses a DDL string of several statements in a distributed schema
/// (see [`statements`](super::statements)).
async fn run_each(tx: &mut PgConnection, sql: &str) -> Result<(), sqlx::Error> {
    for statement in super::statements::split(sql) {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// One row of [`Store::migrations_applied`]: what it is (`m`igration, `f`unction, `o`ur
/// checksum), its key, a checksum and (functions) the release that applied it.
pub(crate) type AppliedRow = (String, String, Option<String>, Option<String>);

impl Store {
    /// Creates the schema and its bookkeeping tables if missing, and locks `_migrations`
    /// in `EXCLUSIVE` mode until the end of the caller's transaction (`tx`).
    ///
    /// Its statements one at a time, by the simple query protocol (see [`run_each`]).
    pub(crate) async fn migrations_lock(&self, tx: &mut PgConnection) -> Result<(), sqlx::Error> {
        run_each(tx, &self.sql(Statement::MigrationsLock).0).await
    }

    /// Reads the bookkeeping (applied migrations and functions) and the checksums the
    /// server computes of `texts` (this release's, under `keys`).
    pub(crate) async fn migrations_applied<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        keys: &[String],
        texts: &[&str],
    ) -> Result<Vec<AppliedRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::MigrationsApplied))
            .bind(keys)
            .bind(texts)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// Runs a migration file (`sql`, with `@schema@` to render) and records it as
    /// `version` `name`, with its checksum, in the caller's transaction.
    ///
    /// The file's statements one at a time, by the simple query protocol (see
    /// [`run_each`]).
    pub(crate) async fn migration_apply(
        &self,
        tx: &mut PgConnection,
        version: i32,
        name: &str,
        sql: &str,
    ) -> Result<(), sqlx::Error> {
        run_each(tx, &self.schema().render(sql)).await?;
        sqlx::query(self.sql(Statement::MigrationRecord))
            .bind(version)
            .bind(name)
            .bind(sql)
            .persistent(self.persistent())
            .execute(&mut *tx)
            .await?;
        Ok(())
    }

    /// Runs a function file (`sql`, with `@schema@` to render) and records it as `name`,
    /// with its checksum and the `release` that applied it, in the caller's transaction.
    ///
    /// The file's statements one at a time, by the simple query protocol (see
    /// [`run_each`]).
    pub(crate) async fn function_apply(
        &self,
        tx: &mut PgConnection,
        name: &str,
        sql: &str,
        release: &str,
    ) -> Result<(), sqlx::Error> {
        run_each(tx, &self.schema().render(sql)).await?;
        sqlx::query(self.sql(Statement::FunctionRecord))
            .bind(name)
            .bind(sql)
            .bind(release)
            .persistent(self.persistent())
            .execute(&mut *tx)
            .await?;
        Ok(())
    }

    /// On Citus, the settings the schema's functions need there (see [`CITUS_SETTINGS`]).
    pub(crate) async fn citus_settings(&self, tx: &mut PgConnection) -> Result<(), sqlx::Error> {
        let sql = self.schema().render(CITUS_SETTINGS);
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await?;
        Ok(())
    }

    /// Drops the schema with everything in it. (The test helpers', feature `testing`.)
    #[cfg(feature = "testing")]
    pub(crate) async fn schema_drop<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(self.sql(Statement::SchemaDrop))
            .persistent(self.persistent())
            .execute(executor)
            .await?;
        Ok(())
    }
}
