//! awa bulk-enqueue peer of harel-jobs' `enqueue_batch20000` figure. See README.md.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use awa::model::insert::params;
use awa::{InsertParams, JobArgs, QueueStorage, QueueStorageConfig};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgConnection, PgPool};

/// The awa version this peer is pinned to (`awa = "=0.6.9"` in Cargo.toml).
const VERSION: &str = "0.6.9";

type Error = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, Error>;

/// A job with no arguments: its args serialize to `{}`.
#[derive(Serialize, Deserialize, JobArgs)]
struct Noop {}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `QueueStorage::enqueue_params_copy`: COPY straight into queue storage.
    StorageCopy,
    /// `insert_many_copy_from_pool`: COPY into a temp staging table, then
    /// `awa.insert_job_compat` per row.
    CompatCopy,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::StorageCopy => "storage-copy",
            Mode::CompatCopy => "compat-copy",
        }
    }
}

struct Args {
    url: String,
    seconds: f64,
    batch: usize,
    mode: Mode,
    check_claim: bool,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        url: std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        seconds: 5.0,
        batch: 20_000,
        mode: Mode::StorageCopy,
        check_claim: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--database-url" => args.url = value()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--batch" => args.batch = value()?.parse()?,
            "--mode" => {
                args.mode = match value()?.as_str() {
                    "storage-copy" => Mode::StorageCopy,
                    "compat-copy" => Mode::CompatCopy,
                    other => return Err(format!("unknown mode {other}").into()),
                }
            }
            "--check-claim" => args.check_claim = true,
            "-h" | "--help" => {
                eprintln!(
                    "usage: harel-peer-awa [--database-url URL] [--seconds S] [--batch N] \
                     [--mode storage-copy|compat-copy] [--check-claim]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    Ok(args)
}

fn random_suffix() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}", (nanos as u64) ^ ((std::process::id() as u64) << 32))
}

/// One batch of `n` no-op jobs, built the way an application would: `params(&args)`
/// per job (serializes the args to JSON, default `InsertOpts`: queue `default`).
fn make_batch(n: usize) -> Res<Vec<InsertParams>> {
    let mut jobs = Vec::with_capacity(n);
    for _ in 0..n {
        jobs.push(params(&Noop {})?);
    }
    Ok(jobs)
}

async fn insert_batch(mode: Mode, pool: &PgPool, store: &QueueStorage, n: usize) -> Res<usize> {
    let jobs = make_batch(n)?;
    let inserted = match mode {
        Mode::StorageCopy => store.enqueue_params_copy(pool, &jobs).await?,
        Mode::CompatCopy => awa::insert_many_copy_from_pool(pool, &jobs).await?.len(),
    };
    if inserted != n {
        return Err(format!("inserted {inserted} of {n} jobs").into());
    }
    Ok(inserted)
}

/// Jobs awa holds: the ready rows of queue storage (no job here is deferred).
async fn count_jobs(pool: &PgPool, store: &QueueStorage) -> Res<i64> {
    let schema = store.schema();
    let (ready, deferred): (i64, i64) = sqlx::query_as(&format!(
        "SELECT (SELECT count(*) FROM {schema}.ready_entries),
                (SELECT count(*) FROM {schema}.deferred_jobs)"
    ))
    .fetch_one(pool)
    .await?;
    if deferred != 0 {
        return Err(format!("{deferred} deferred jobs, expected none").into());
    }
    Ok(ready)
}

async fn bench(args: &Args, opts: PgConnectOptions) -> Res<()> {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(opts)
        .await?;
    awa::migrations::run(&pool).await?;
    // What a 0.6 `Client` does on a fresh database: install the queue-storage engine
    // (default config, schema `awa`) and make it the active backend.
    let store = QueueStorage::new(QueueStorageConfig::default())?;
    store.install(&pool).await?;
    let version: i32 = awa::migrations::current_version(&pool).await?;
    eprintln!(
        "# awa {VERSION} schema_version={version} mode={} batch={} seconds={} storage_schema={}",
        args.mode.name(),
        args.batch,
        args.seconds,
        store.schema()
    );

    // warm-up: one batch (connections, prepared statements, plan caches), then empty
    insert_batch(args.mode, &pool, &store, args.batch).await?;
    if args.check_claim {
        check_claim(&pool, &store, args.batch).await?;
    }
    store.reset(&pool).await?;
    if count_jobs(&pool, &store).await? != 0 {
        return Err("queue storage not empty after reset".into());
    }

    let deadline = Duration::from_secs_f64(args.seconds);
    let mut inserted = 0u64;
    let mut batches = 0u64;
    let started = Instant::now();
    while started.elapsed() < deadline {
        inserted += insert_batch(args.mode, &pool, &store, args.batch).await? as u64;
        batches += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();

    let found = count_jobs(&pool, &store).await?;
    if found != inserted as i64 {
        return Err(format!("inserted {inserted} jobs, found {found} in queue storage").into());
    }
    println!(
        "awa_enqueue_batch{} jobs_per_s={:.0} batches={batches} seconds={elapsed:.3} version={VERSION} mode={}",
        args.batch,
        inserted as f64 / elapsed,
        args.mode.name()
    );
    pool.close().await;
    Ok(())
}

/// Right after the batch's call returned (so committed): a claim from another
/// transaction sees its jobs.
async fn check_claim(pool: &PgPool, store: &QueueStorage, batch: usize) -> Res<()> {
    let claimed = store.claim_batch(pool, "default", 10).await?;
    eprintln!(
        "# check-claim: claim_batch(\"default\", 10) right after the warm-up batch returned {} jobs",
        claimed.len()
    );
    if claimed.is_empty() && batch > 0 {
        return Err("the committed batch is not claimable".into());
    }
    Ok(())
}

async fn run() -> Res<()> {
    let args = parse_args()?;
    let admin_opts = PgConnectOptions::from_str(&args.url)?;
    let db_name = format!("harel_peer_awa_{}", random_suffix());
    let mut admin = admin_opts.connect().await?;
    sqlx::query(&format!("CREATE DATABASE {db_name}"))
        .execute(&mut admin)
        .await?;
    let bench_opts = admin_opts.clone().database(&db_name);

    let outcome = tokio::select! {
        r = bench(&args, bench_opts) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        _ = sigterm() => Err("terminated".into()),
    };
    let dropped = drop_db(&mut admin, &db_name).await;
    outcome?;
    dropped
}

async fn sigterm() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

async fn drop_db(admin: &mut PgConnection, name: &str) -> Res<()> {
    sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut *admin)
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
