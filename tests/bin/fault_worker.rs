//! `harel-fault-worker`: one worker process of the fault-injection suite
//! (`tests/reliability`). Not a product: the suite starts it, kills it, stops it and
//! restarts it, and reads what it did from the ledger table and from its output.
//!
//! Configured by environment variables (all optional but the first two):
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `HAREL_FW_DSN` | the database URL | required |
//! | `HAREL_FW_NAME` | this incarnation's name, recorded with every execution | required |
//! | `HAREL_FW_CONCURRENCY` | handlers at once | 16 |
//! | `HAREL_FW_POOL` | database pool size | concurrency + 4 |
//! | `HAREL_FW_MIN_POOL` | connections the pool keeps open | 0 |
//! | `HAREL_FW_LEASE_MS` | lease | 30000 |
//! | `HAREL_FW_HEARTBEAT_MS` | heartbeat interval | a third of the lease |
//! | `HAREL_FW_POLL_MS` | poll interval | 1000 |
//! | `HAREL_FW_MAX_ATTEMPTS` | attempts per job | 10 |
//! | `HAREL_FW_BACKOFF_MS` | fixed retry backoff | the library's default |
//! | `HAREL_FW_TIMEOUT_MS` | timeout of one attempt | none |
//! | `HAREL_FW_GRACE_MS` | shutdown grace period | 30000 |
//! | `HAREL_FW_CONNECT_WAIT_MS` | how long `connect_with` waits for the database | 30000 |
//! | `HAREL_FW_MIGRATE` | `0`: do not call `migrate` (least-privilege roles) | 1 |
//! | `HAREL_FW_DEBUG_DUMP` | `1`: print the `Debug` of the worker, handle and errors | 0 |
//! | `HAREL_FW_DURABLE_OUTCOMES` | `1`: outcomes commit with `synchronous_commit = on` (`WorkerBuilder::durable_outcomes`) | 0 |
//! | `HAREL_FW_LEDGER_DSN` | where the ledger is written, if not in the queue's database (the failover scenario: a ledger on the failed primary would be lost with it) | `HAREL_FW_DSN` |
//!
//! SIGTERM (or SIGINT) runs the graceful `shutdown()`; the final counters are printed on
//! stdout as one `FAULT_WORKER_STATS …` line. Logs go to stderr (`RUST_LOG`). If the pool
//! stops on its own (one of its tasks failed), the worker exits 6.

use std::str::FromStr;
use std::time::Duration;

use harel_jobs::{
    Backoff, ConnectConfig, Handler, JobContext, JobError, JobResult, Worker, WorkerStats,
};
use sqlx::PgPool;
use tokio::signal::unix::{SignalKind, signal};
use uuid::Uuid;

#[path = "../reliability/jobs.rs"]
mod jobs;

use jobs::{Aborts, Cooperative, Hangs, Panics, Work};

/// What every handler of this process shares.
struct State {
    /// The ledger's database.
    pool: PgPool,
    worker: String,
    pid: i32,
}

/// Runs a ledger write until it succeeds (the database may be restarting), for up to two
/// minutes; then the attempt fails and the job is retried like any failure.
async fn retrying<F, Fut>(what: &str, mut write: F) -> Result<(), JobError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<sqlx::postgres::PgQueryResult, sqlx::Error>>,
{
    let started = std::time::Instant::now();
    let mut backoff = Duration::from_millis(50);
    loop {
        match write().await {
            Ok(_) => return Ok(()),
            Err(error) if started.elapsed() < Duration::from_secs(120) => {
                tracing::debug!(%error, what, "ledger write failed, retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(error) => return Err(JobError::retry(format!("ledger {what} failed: {error}"))),
        }
    }
}

impl State {
    /// Records the start of an execution; returns its id.
    async fn started(
        &self,
        ctx: &JobContext<State>,
        key: i64,
        note: Option<&str>,
    ) -> Result<Uuid, JobError> {
        let exec = Uuid::new_v4();
        let note = note.map(|text| text.as_bytes().to_vec());
        retrying("insert", || {
            sqlx::query(
                "INSERT INTO rel.ledger
                     (exec_id, key, message_id, group_id, kind, attempt, worker, pid, note)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (exec_id) DO NOTHING",
            )
            .bind(exec)
            .bind(key)
            .bind(ctx.job_id().get())
            .bind(ctx.group())
            .bind(ctx.kind())
            .bind(ctx.attempt() as i32)
            .bind(&self.worker)
            .bind(self.pid)
            .bind(note.as_deref())
            .execute(&self.pool)
        })
        .await?;
        Ok(exec)
    }

    /// Records the end of an execution.
    async fn ended(&self, exec: Uuid) -> Result<(), JobError> {
        retrying("update", || {
            sqlx::query(
                "UPDATE rel.ledger SET ended_at = clock_timestamp()
                  WHERE exec_id = $1 AND ended_at IS NULL",
            )
            .bind(exec)
            .execute(&self.pool)
        })
        .await
    }
}

impl Handler<State> for Work {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        let state = ctx.state();
        let exec = state.started(&ctx, self.key, self.text.as_deref()).await?;
        if self.sleep_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        }
        state.ended(exec).await
    }
}

impl Handler<State> for Cooperative {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        let state = ctx.state();
        let exec = state.started(&ctx, self.key, None).await?;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(self.sleep_ms)) => {}
            () = ctx.cancelled() => {}
        }
        state.ended(exec).await
    }
}

/// Records the end of an execution whose handler is dropped: a timeout drops it, a panic
/// unwinds through it.
struct EndOnDrop {
    pool: PgPool,
    exec: Uuid,
}

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        // the end is when the handler was dropped, not when the write gets a connection: a
        // busy pool can delay the write past the next attempt's start (a retry's backoff is
        // 200 ms in the poison scenario), which would read as an overlap that never was
        let (pool, exec, ended) = (self.pool.clone(), self.exec, chrono::Utc::now());
        tokio::spawn(async move {
            let _ = sqlx::query(
                "UPDATE rel.ledger SET ended_at = $2
                  WHERE exec_id = $1 AND ended_at IS NULL",
            )
            .bind(exec)
            .bind(ended)
            .execute(&pool)
            .await;
        });
    }
}

impl Handler<State> for Panics {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        let exec = ctx.state().started(&ctx, self.key, None).await?;
        let _end = EndOnDrop {
            pool: ctx.state().pool.clone(),
            exec,
        };
        panic!("poison job {} panics on purpose", self.key);
    }
}

impl Handler<State> for Hangs {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        let exec = ctx.state().started(&ctx, self.key, None).await?;
        let _end = EndOnDrop {
            pool: ctx.state().pool.clone(),
            exec,
        };
        std::future::pending::<()>().await;
        Ok(())
    }
}

impl Handler<State> for Aborts {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        ctx.state().started(&ctx, self.key, None).await?;
        eprintln!("poison job {} aborts its worker process", self.key);
        std::process::abort();
    }
}

fn env_or<T: FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}: cannot parse {value:?}")),
        Err(_) => default,
    }
}

fn env_ms(name: &str) -> Option<Duration> {
    std::env::var(name)
        .ok()
        .map(|value| Duration::from_millis(value.parse().expect(name)))
}

fn stats_line(name: &str, stats: &WorkerStats) -> String {
    format!(
        "FAULT_WORKER_STATS name={name} claimed={} succeeded={} retried={} snoozed={} \
         dead_lettered={} released={} leases_lost={} database_errors={}",
        stats.claimed,
        stats.succeeded,
        stats.retried,
        stats.snoozed,
        stats.dead_lettered,
        stats.released,
        stats.leases_lost,
        stats.database_errors
    )
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let code = runtime.block_on(run());
    std::process::exit(code);
}

async fn run() -> i32 {
    let dsn = std::env::var("HAREL_FW_DSN").expect("HAREL_FW_DSN");
    let name = std::env::var("HAREL_FW_NAME").expect("HAREL_FW_NAME");
    let concurrency: usize = env_or("HAREL_FW_CONCURRENCY", 16);
    let pool_size: u32 = env_or("HAREL_FW_POOL", concurrency as u32 + 4);
    let lease = env_ms("HAREL_FW_LEASE_MS").unwrap_or(Duration::from_secs(30));
    let debug_dump = env_or("HAREL_FW_DEBUG_DUMP", 0u8) == 1;

    // from here on, never print `dsn`: it may hold a password
    let config = ConnectConfig::default()
        .max_connections(pool_size)
        .min_connections(env_or("HAREL_FW_MIN_POOL", 0))
        .wait(env_ms("HAREL_FW_CONNECT_WAIT_MS").unwrap_or(Duration::from_secs(30)));
    // SIGTERM while still waiting for the database: stop at once, cleanly (nothing is held)
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    let pool = tokio::select! {
        started = connect_and_migrate(&name, &dsn, &config, debug_dump) => match started {
            Ok(pool) => pool,
            Err(code) => return code,
        },
        _ = term.recv() => {
            println!("FAULT_WORKER_STOPPED name={name} before it could connect");
            return 0;
        }
        _ = int.recv() => return 0,
    };
    let ledger = match std::env::var("HAREL_FW_LEDGER_DSN") {
        Ok(ledger_dsn) => {
            match harel_jobs::connect_with(&ledger_dsn, &ConnectConfig::default()).await {
                Ok(ledger) => ledger,
                Err(error) => {
                    eprintln!("FAULT_WORKER_CONNECT_FAILED {name} (ledger): {error}");
                    return 2;
                }
            }
        }
        Err(_) => pool.clone(),
    };
    let state = State {
        pool: ledger,
        worker: name.clone(),
        pid: std::process::id() as i32,
    };
    let mut builder = Worker::builder(pool.clone(), state)
        .register::<Work>()
        .register::<Cooperative>()
        .register::<Panics>()
        .register::<Hangs>()
        .register::<Aborts>()
        .concurrency(concurrency)
        .lease(lease)
        .poll_interval(env_ms("HAREL_FW_POLL_MS").unwrap_or(Duration::from_secs(1)))
        .max_attempts(env_or("HAREL_FW_MAX_ATTEMPTS", 10))
        .shutdown_grace(env_ms("HAREL_FW_GRACE_MS").unwrap_or(Duration::from_secs(30)));
    if let Some(heartbeat) = env_ms("HAREL_FW_HEARTBEAT_MS") {
        builder = builder.heartbeat_interval(heartbeat);
    }
    if let Some(backoff) = env_ms("HAREL_FW_BACKOFF_MS") {
        builder = builder.backoff(Backoff::fixed(backoff));
    }
    if let Some(timeout) = env_ms("HAREL_FW_TIMEOUT_MS") {
        builder = builder.timeout(timeout);
    }
    if env_or("HAREL_FW_DURABLE_OUTCOMES", 0u8) == 1 {
        builder = builder.durable_outcomes(true);
    }
    let worker = match builder.build() {
        Ok(worker) => worker,
        Err(error) => {
            eprintln!("FAULT_WORKER_CONFIG_FAILED {name}: {error}");
            return 4;
        }
    };
    if debug_dump {
        eprintln!("debug: worker = {worker:?}");
        eprintln!("debug: connect config = {config:?}");
    }
    let mut handle = worker.start();
    println!("FAULT_WORKER_READY name={name} pid={}", std::process::id());
    if debug_dump {
        eprintln!("debug: handle = {handle:?}");
    }

    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        // the pool stopped on its own: one of its tasks failed (never expected here)
        stopped = handle.stopped() => {
            let error = stopped.err().map(|e| e.to_string()).unwrap_or_default();
            eprintln!("FAULT_WORKER_POOL_STOPPED {name}: {error}");
            return 6;
        }
    }
    tracing::info!("SIGTERM: shutting down gracefully");
    match handle.shutdown().await {
        Ok(stats) => {
            println!("{}", stats_line(&name, &stats));
            pool.close().await;
            0
        }
        Err(error) => {
            eprintln!("FAULT_WORKER_SHUTDOWN_FAILED {name}: {error}");
            5
        }
    }
}

/// Connects (waiting for the database) and migrates; `Err` is the exit code.
async fn connect_and_migrate(
    name: &str,
    dsn: &str,
    config: &ConnectConfig,
    debug_dump: bool,
) -> Result<PgPool, i32> {
    let pool = match harel_jobs::connect_with(dsn, config).await {
        Ok(pool) => pool,
        Err(error) => {
            eprintln!("FAULT_WORKER_CONNECT_FAILED {name}: {error}");
            if debug_dump {
                eprintln!("debug: connect error = {error:?}");
            }
            return Err(2);
        }
    };
    if env_or("HAREL_FW_MIGRATE", 1u8) == 1 {
        let mut backoff = Duration::from_millis(100);
        loop {
            match harel_jobs::migrate(&pool).await {
                Ok(()) => break,
                Err(harel_jobs::MigrateError::Database(error)) if error.is_connection() => {
                    tracing::warn!(%error, "migrating: database not reachable, retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(error) => {
                    eprintln!("FAULT_WORKER_MIGRATE_FAILED {name}: {error}");
                    return Err(3);
                }
            }
        }
    }

    Ok(pool)
}
