#!/usr/bin/env bash
# A new user's first minutes, from the packaged crates: in an empty directory, `cargo new`,
# the README's "Install" lines run as written (but for harel-jobs itself, which comes from the
# tarball `cargo package` just built, since it is not on crates.io from here), the README's
# "A complete worker" as src/main.rs, then the program run against a database of its own:
# it must enqueue its job, run it (the handler logs), and stop gracefully on SIGTERM.
#
# Run by .ci/run after `cargo package`; by hand: bash .ci/new-user.sh (after cargo package).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

log() { printf '[new-user] %s\n' "$*" >&2; }

version=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "harel-jobs"))')
package="$repo/target/package"
[ -d "$package/harel-jobs-$version" ] && [ -d "$package/harel-jobs-macros-$version" ] || {
    log "run cargo package -p harel-jobs-macros -p harel-jobs first"
    exit 1
}

work=$(mktemp -d)
database="harel_new_user_$$"
base_url="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
admin() { psql "$base_url" -qAtX -v ON_ERROR_STOP=1 -c "$1" >/dev/null; }
cleanup() {
    [ -n "${app_pid:-}" ] && kill "$app_pid" 2>/dev/null || true
    admin "DROP DATABASE IF EXISTS $database WITH (FORCE)" || true
    rm -rf "$work"
}
trap cleanup EXIT

cd "$work"
cargo new --quiet --bin app
cd app
# the packaged harel-jobs names harel-jobs-macros by version, as on crates.io: the patch
# points that name at the packaged macros crate
cat >>Cargo.toml <<EOF

[patch.crates-io]
harel-jobs-macros = { path = "$package/harel-jobs-macros-$version" }
EOF

# the README's install lines, as written, but for the source of harel-jobs
install=$(awk '/^## Install/{f=1} f&&/^```sh/{b=1;next} b&&/^```/{exit} b' "$repo/README.md")
[ -n "$install" ] || { log "no install block in README.md"; exit 1; }
while IFS= read -r line; do
    line="${line%%#*}"
    [ -n "${line// /}" ] || continue
    case "$line" in
    "cargo add harel-jobs"*) line="${line/cargo add harel-jobs/cargo add --path $package/harel-jobs-$version}" ;;
    esac
    log "$line"
    eval "$line --quiet"
done <<<"$install"

# the README's complete worker
awk '/^## A complete worker/{f=1} f&&/^```rust/{b=1;next} b&&/^```/{exit} b' "$repo/README.md" >src/main.rs
[ -s src/main.rs ] || { log "no complete worker in README.md"; exit 1; }

log "building the app (its own target directory)"
CARGO_TARGET_DIR="$repo/target/new-user" cargo build --quiet

admin "CREATE DATABASE $database"
url="${base_url%/*}/$database"
out="$work/app.log"
DATABASE_URL="$url" RUST_LOG=info "$repo/target/new-user/debug/app" >"$out" 2>&1 &
app_pid=$!
for _ in $(seq 1 60); do
    grep -q "sending the welcome mail" "$out" && break
    kill -0 "$app_pid" 2>/dev/null || break
    sleep 1
done
grep -q "sending the welcome mail" "$out" || { cat "$out" >&2; log "the job did not run"; exit 1; }
kill -TERM "$app_pid"
# a graceful stop takes a moment; one that never comes is a failure, not a hung CI
for _ in $(seq 1 30); do
    kill -0 "$app_pid" 2>/dev/null || break
    sleep 1
done
if kill -0 "$app_pid" 2>/dev/null; then
    cat "$out" >&2
    log "still running 30 s after SIGTERM"
    exit 1
fi
status=0
wait "$app_pid" || status=$?
app_pid=
grep -q "stopped" "$out" || { cat "$out" >&2; log "no graceful stop on SIGTERM"; exit 1; }
[ "$status" -eq 0 ] || { cat "$out" >&2; log "exit status $status after SIGTERM"; exit 1; }
log "ok: installed from the packaged crates, ran its job, stopped gracefully on SIGTERM"
