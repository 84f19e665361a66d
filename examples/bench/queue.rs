//! Filling, resetting, counting and draining the queue.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::transport::{OutgoingMessage, Transport};
use harel_jobs::{Job, Worker, WorkerStats};
use sqlx::PgPool;

use crate::jobs::{Noop, Probe, Stamped, State, Tenant};
use crate::{Res, bail};

/// Messages per `publish_many` round trip when filling.
pub const FILL_CHUNK: usize = 10_000;

/// Empties the queue's tables (a fresh start for each run: no dead rows left by the last).
pub async fn reset(pool: &PgPool) -> Res<()> {
    sqlx::query(
        "TRUNCATE harel.transport_messages, harel.transport_groups, harel.dead_letters,
                  harel.job_history, harel.job_waits, harel.job_dependencies,
                  harel.workflows, harel.workflow_tasks, harel.dependency_backlog",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Updates the planner statistics of the queue's tables (what autovacuum's analyze does).
pub async fn analyze(pool: &PgPool) -> Res<()> {
    sqlx::query("ANALYZE harel.transport_messages, harel.transport_groups")
        .execute(pool)
        .await?;
    Ok(())
}

/// Resets, fills with `make`, analyzes, and checkpoints, so every measured run starts from
/// the same state: fresh tables, current statistics, no checkpoint debt from the fill.
pub async fn prepare(pool: &PgPool, fill: impl AsyncFnOnce() -> Res<u64>) -> Res<u64> {
    reset(pool).await?;
    let n = fill().await?;
    analyze(pool).await?;
    sqlx::query("CHECKPOINT").execute(pool).await?;
    Ok(n)
}

/// Publishes `n` no-op messages, each in a group of its own (as ungrouped jobs are), in
/// chunks of [`FILL_CHUNK`].
pub async fn fill_single(pool: &PgPool, transport: &Transport, n: u64) -> Res<u64> {
    let mut next = 0u64;
    while next < n {
        let end = (next + FILL_CHUNK as u64).min(n);
        let chunk: Vec<OutgoingMessage> = (next..end)
            .map(|_| match std::env::var("HAREL_BENCH_FILL").as_deref() {
                // a named group per job, as the first releases named the group of a job
                // without one (for comparisons with them)
                Ok("uuid") => OutgoingMessage::new(
                    format!("noop:{}", uuid::Uuid::new_v4().simple()),
                    Noop::KIND,
                    "{}",
                ),
                _ => OutgoingMessage::new("-", Noop::KIND, "{}").in_own_group(),
            })
            .collect();
        transport.publish_many(pool, &chunk).await?;
        next = end;
    }
    Ok(n)
}

/// Publishes `per_group` no-op messages into each of `groups` groups (FIFO chains),
/// interleaved so every chunk touches many groups.
pub async fn fill_groups(
    pool: &PgPool,
    transport: &Transport,
    groups: u64,
    per_group: u64,
) -> Res<u64> {
    let total = groups * per_group;
    let mut next = 0u64;
    while next < total {
        let end = (next + FILL_CHUNK as u64).min(total);
        let chunk: Vec<OutgoingMessage> = (next..end)
            .map(|i| OutgoingMessage::new(format!("g{}", i % groups), Noop::KIND, "{}"))
            .collect();
        transport.publish_many(pool, &chunk).await?;
        next = end;
    }
    Ok(total)
}

/// What the queue holds: (jobs, group rows, dead letters).
pub async fn counts(pool: &PgPool) -> Res<(i64, i64, i64)> {
    let counts = sqlx::query_as(
        "SELECT (SELECT count(*) FROM harel.jobs),
                (SELECT count(*) FROM harel.transport_groups),
                (SELECT count(*) FROM harel.dead_letters)",
    )
    .fetch_one(pool)
    .await?;
    Ok(counts)
}

/// Fails unless the queue is empty (no message, no group row, no dead letter).
pub async fn expect_empty(pool: &PgPool, what: &str) -> Res<()> {
    let (messages, groups, dead) = counts(pool).await?;
    if messages != 0 || groups != 0 || dead != 0 {
        bail!(
            "{what}: the queue is not drained: {messages} messages, {groups} groups, {dead} dead letters left"
        );
    }
    Ok(())
}

/// What a pool drain measured.
pub struct DrainOutcome {
    /// From `start` to the last ack committed.
    pub elapsed: Duration,
    /// The pool's counters at the end.
    pub stats: WorkerStats,
}

impl DrainOutcome {
    pub fn rate(&self) -> f64 {
        self.stats.succeeded as f64 / self.elapsed.as_secs_f64()
    }
}

/// A worker pool with the bench's jobs registered, at `concurrency`, defaults otherwise.
pub fn worker(pool: &PgPool, state: State, concurrency: usize) -> Res<Worker<State>> {
    worker_retaining(pool, state, concurrency, None)
}

/// [`worker`], keeping completed jobs in the history for `retain` when it is set.
pub fn worker_retaining(
    pool: &PgPool,
    state: State,
    concurrency: usize,
    retain: Option<Duration>,
) -> Res<Worker<State>> {
    let mut builder = Worker::builder(pool.clone(), state)
        .register::<Noop>()
        .register::<Stamped>()
        .register::<Tenant>()
        .concurrency(concurrency);
    // `HAREL_BENCH_PIPELINES=n`: claims and settle batches in flight (default: the pool's)
    if let Some(pipelines) = std::env::var("HAREL_BENCH_PIPELINES")
        .ok()
        .and_then(|n| n.parse().ok())
    {
        builder = builder.pipelines(pipelines);
    }
    // `HAREL_BENCH_POOL_THREAD=1`: the pool on a thread of its own (`own_thread`)
    if std::env::var_os("HAREL_BENCH_POOL_THREAD").is_some_and(|v| v == "1") {
        builder = builder.own_thread(true);
    }
    if let Some(period) = retain {
        builder = builder.retain_completed(period);
    }
    Ok(builder.build()?)
}

/// Starts a worker pool on `pool` and waits until it has acked `expect` jobs; the time is
/// from `start` to the moment its counters show the last ack applied (so the queue is
/// empty, which the callers check by counting rows). Fails unless exactly `expect` jobs
/// were acked, with no retry, lost lease or database error.
pub async fn drain(
    pool: &PgPool,
    state: State,
    concurrency: usize,
    expect: u64,
) -> Res<DrainOutcome> {
    drain_retaining(pool, state, concurrency, expect, None).await
}

/// [`drain`] with a pool that keeps completed jobs for `retain` when it is set.
pub async fn drain_retaining(
    pool: &PgPool,
    state: State,
    concurrency: usize,
    expect: u64,
    retain: Option<Duration>,
) -> Res<DrainOutcome> {
    let worker = worker_retaining(pool, state, concurrency, retain)?;
    let outcome = drain_worker(worker, expect).await?;
    let stats = outcome.stats;
    if stats.succeeded != expect {
        bail!("the pool acked {} jobs, expected {expect}", stats.succeeded);
    }
    if stats.retried + stats.dead_lettered > 0 {
        bail!("jobs failed during the drain: {stats:?}");
    }
    note_errors(
        &stats,
        &format!("drain of {expect} at concurrency {concurrency}"),
    );
    Ok(outcome)
}

/// Database errors and lost leases the worker pools reported (and survived: the pool
/// retries), over the whole bench.
pub static WORKER_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Prints and counts the errors a pool survived (they cost time: a deadlock is detected
/// after `deadlock_timeout`, 1 s by default).
pub fn note_errors(stats: &WorkerStats, what: &str) {
    let errors = stats.database_errors + stats.leases_lost;
    if errors > 0 {
        WORKER_ERRORS.fetch_add(errors, Ordering::Relaxed);
        println!(
            "# note: {what}: the pool survived database_errors={} leases_lost={} (see stderr)",
            stats.database_errors, stats.leases_lost
        );
    }
}

/// Starts a worker pool and stops it (gracefully) once it has acked `at_least` jobs.
pub async fn drain_at_least(
    pool: &PgPool,
    state: State,
    concurrency: usize,
    at_least: u64,
) -> Res<DrainOutcome> {
    drain_worker(worker(pool, state, concurrency)?, at_least).await
}

/// Starts `worker` and stops it (gracefully) once it has acked `at_least` jobs.
async fn drain_worker(worker: Worker<State>, at_least: u64) -> Res<DrainOutcome> {
    let started = Instant::now();
    let handle = worker.start();
    let waited = wait_for_acks(&handle, at_least, started).await;
    let elapsed = started.elapsed();
    let stats = handle.shutdown().await?;
    waited?;
    Ok(DrainOutcome { elapsed, stats })
}

/// Polls the pool's counters (every millisecond, in-process) until `expect` acks.
pub async fn wait_for_acks(
    handle: &harel_jobs::WorkerHandle,
    expect: u64,
    started: Instant,
) -> Res<()> {
    let stall = Duration::from_secs(60);
    // `HAREL_BENCH_POLL_MS=n`: how often the counters are read (default every millisecond)
    let poll = Duration::from_millis(
        std::env::var("HAREL_BENCH_POLL_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
    );
    let mut last = 0;
    let mut last_change = Instant::now();
    loop {
        let done = handle.stats().succeeded;
        if done >= expect {
            return Ok(());
        }
        if done != last {
            last = done;
            last_change = Instant::now();
        } else if last_change.elapsed() > stall {
            bail!(
                "no progress for {stall:?}: {done} of {expect} acked after {:?} ({:?})",
                started.elapsed(),
                handle.stats()
            );
        }
        tokio::time::sleep(poll).await;
    }
}

/// After the producers of `total` jobs stopped: waits for every handler to have started
/// (failing after 60 s without progress), then for the pool to ack them all; shuts the pool
/// down and checks that each job ran once and the queue is empty. Returns the time from
/// the call to the last handler start (how long the backlog took to drain).
pub async fn finish(
    pool: &PgPool,
    handle: harel_jobs::WorkerHandle,
    probe: &Probe,
    total: u64,
    what: &str,
) -> Res<Duration> {
    let waiting = Instant::now();
    let mut last = (probe.started(), Instant::now());
    while probe.started() < total {
        let started = probe.started();
        if started != last.0 {
            last = (started, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(60) {
            bail!("{what}: stuck at {started} of {total} jobs started");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drained = waiting.elapsed();
    wait_for_acks(&handle, total, waiting).await?;
    let stats = handle.shutdown().await?;
    note_errors(&stats, what);
    expect_empty(pool, what).await?;
    if stats.succeeded != total || probe.started() != total {
        bail!(
            "{what}: {total} published, {} acked, {} handler runs",
            stats.succeeded,
            probe.started()
        );
    }
    Ok(drained)
}
