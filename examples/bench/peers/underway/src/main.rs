//! underway bulk-enqueue peer of harel-jobs' `enqueue_batch20000` figure. See README.md.

use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgConnection, PgPool, Postgres, Transaction};
use underway::{Queue, Task};

/// The underway version this peer is pinned to (`underway = "=0.2.0"` in Cargo.toml).
const VERSION: &str = "0.2.0";
/// The queue the jobs go to.
const QUEUE: &str = "noop";
/// `Queue::enqueue_multi`'s chunk size (rows per INSERT statement).
const DEFAULT_CHUNK: usize = 5000;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = Result<T, Error>;

/// The task's input: no fields, so it serializes to `{}`.
#[derive(Clone, Serialize, Deserialize)]
struct Noop {}

/// A task that does nothing (never run here: the peer only enqueues).
struct NoopTask;

impl Task for NoopTask {
    type Input = Noop;
    type Output = ();

    async fn execute(
        &self,
        _tx: Transaction<'_, Postgres>,
        _input: Self::Input,
    ) -> underway::task::Result<Self::Output> {
        Ok(())
    }
}

struct Args {
    url: String,
    seconds: f64,
    batch: usize,
    /// `None`: `enqueue_multi` (chunks of 5,000); `Some(c)`: `enqueue_multi_wth_chunk_size(c)`.
    chunk: Option<usize>,
    check_claim: bool,
}

impl Args {
    fn mode(&self) -> String {
        match self.chunk {
            None => format!("enqueue_multi_chunk{DEFAULT_CHUNK}"),
            Some(c) => format!("enqueue_multi_chunk{c}"),
        }
    }
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        url: std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        seconds: 5.0,
        batch: 20_000,
        chunk: None,
        check_claim: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--database-url" => args.url = value()?,
            "--seconds" => args.seconds = value()?.parse()?,
            "--batch" => args.batch = value()?.parse()?,
            "--chunk-size" => args.chunk = Some(value()?.parse()?),
            "--check-claim" => args.check_claim = true,
            "-h" | "--help" => {
                eprintln!(
                    "usage: harel-peer-underway [--database-url URL] [--seconds S] [--batch N] \
                     [--chunk-size C] [--check-claim]"
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

async fn insert_batch(args: &Args, pool: &PgPool, queue: &Queue<NoopTask>) -> Res<usize> {
    // the inputs of one batch, built per call as an application would
    let inputs: Vec<Noop> = (0..args.batch).map(|_| Noop {}).collect();
    let inserted = match args.chunk {
        None => queue.enqueue_multi(pool, &NoopTask, &inputs).await?,
        Some(c) => {
            queue
                .enqueue_multi_wth_chunk_size(pool, &NoopTask, &inputs, c)
                .await?
        }
    };
    if inserted != args.batch {
        return Err(format!("inserted {inserted} of {} jobs", args.batch).into());
    }
    Ok(inserted)
}

async fn count_jobs(pool: &PgPool) -> Res<i64> {
    let (total, pending): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE state = 'pending') FROM underway.task",
    )
    .fetch_one(pool)
    .await?;
    if total != pending {
        return Err(format!("{} of {total} tasks not pending", total - pending).into());
    }
    Ok(total)
}

async fn bench(args: &Args, opts: PgConnectOptions) -> Res<()> {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(opts)
        .await?;
    underway::run_migrations(&pool).await?;
    let queue: Queue<NoopTask> = Queue::builder().name(QUEUE).pool(pool.clone()).build().await?;
    eprintln!(
        "# underway {VERSION} mode={} batch={} seconds={}",
        args.mode(),
        args.batch,
        args.seconds
    );

    // warm-up: one batch (connections, prepared statements, plan caches), then empty
    insert_batch(args, &pool, &queue).await?;
    if args.check_claim {
        let task = queue.dequeue().await?;
        eprintln!(
            "# check-claim: dequeue() right after the warm-up batch returned {}",
            if task.is_some() { "a task" } else { "nothing" }
        );
        if task.is_none() {
            return Err("the committed batch is not claimable".into());
        }
    }
    sqlx::query("TRUNCATE underway.task_attempt, underway.task")
        .execute(&pool)
        .await?;

    let deadline = Duration::from_secs_f64(args.seconds);
    let mut inserted = 0u64;
    let mut batches = 0u64;
    let started = Instant::now();
    while started.elapsed() < deadline {
        inserted += insert_batch(args, &pool, &queue).await? as u64;
        batches += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();

    let found = count_jobs(&pool).await?;
    if found != inserted as i64 {
        return Err(format!("inserted {inserted} jobs, found {found} in underway.task").into());
    }
    println!(
        "underway_enqueue_batch{} jobs_per_s={:.0} batches={batches} seconds={elapsed:.3} version={VERSION} mode={}",
        args.batch,
        inserted as f64 / elapsed,
        args.mode()
    );
    pool.close().await;
    Ok(())
}

async fn run() -> Res<()> {
    let args = parse_args()?;
    let admin_opts = PgConnectOptions::from_str(&args.url)?;
    let db_name = format!("harel_peer_underway_{}", random_suffix());
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
