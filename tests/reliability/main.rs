//! The fault-injection reliability suite: real worker processes (`harel-fault-worker`)
//! against a private PostgreSQL cluster, broken the ways production breaks, checked with
//! counts over a ledger of every execution (see `checks.rs` and RELIABILITY.md).
//!
//! Each scenario starts its own cluster (initdb in a temporary directory, a free port), so
//! it can stop, kill and restart the server without touching the machine's. Scenarios run
//! one at a time (they measure a shared 2-core machine). `HAREL_RELIABILITY_KEEP=1` keeps
//! the cluster directories (server log, worker logs) for a look after a failure.

// Each scenario holds the `serial()` guard for its whole run, across awaits, on purpose:
// the tests run on separate threads, each on its own runtime.
#![allow(clippy::await_holding_lock)]

mod checks;
mod fleet;
mod jobs;
mod proxy;

mod connections;
mod controls;
mod crashes;
mod db_kill;
mod db_restart;
mod dependencies;
mod failover;
mod hostile;
mod lease;
mod poison;
mod security;
mod shutdown;
mod steady;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use harel_jobs::JobBatch;
// the private clusters are shared with other tests (tests/support/cluster.rs); the scenarios
// name them `crate::cluster::…`
use harel_jobs_suite::cluster;
use sqlx::{AssertSqlSafe, PgPool};

use cluster::{Cluster, ClusterOptions};
use fleet::Fleet;
use jobs::Work;

/// Scenarios take turns: each loads the machine on its own.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A private cluster, migrated, with the ledger, and a superuser pool on it.
pub struct Setup {
    pub cluster: Cluster,
    pub admin: PgPool,
}

impl Setup {
    pub async fn new(options: ClusterOptions) -> Setup {
        let cluster = Cluster::start(options);
        let admin = cluster.admin_pool(8).await;
        harel_jobs::migrate(&admin).await.expect("migrate");
        sqlx::raw_sql(AssertSqlSafe(jobs::LEDGER_DDL))
            .execute(&admin)
            .await
            .expect("create the ledger");
        Setup { cluster, admin }
    }

    /// A fleet of workers connecting as the superuser, with `env` on top of the defaults.
    pub fn fleet(&self, prefix: &str, env: &[(&str, String)]) -> Fleet {
        let mut base = vec![("HAREL_FW_DSN", self.cluster.url("postgres"))];
        base.extend(env.iter().cloned());
        Fleet::new(self.cluster.dir().join("workers"), prefix, &base)
    }
}

/// `(key, group, sleep_ms)` of a work job.
pub type Spec = (i64, String, u64);

/// Enqueues work jobs in batches of `batch`, in order (jobs of one group keep their order),
/// and records them as expected.
pub async fn enqueue_work(pool: &PgPool, specs: &[Spec], batch: usize) {
    for chunk in specs.chunks(batch) {
        let mut jobs = JobBatch::new();
        for (key, group, sleep_ms) in chunk {
            let job = Work {
                key: *key,
                sleep_ms: *sleep_ms,
                text: None,
            };
            jobs.push_with(job, &harel_jobs::EnqueueOptions::new().group(group.clone()))
                .expect("push");
        }
        let mut tx = pool.begin().await.expect("begin");
        jobs.enqueue(&mut *tx).await.expect("enqueue");
        expect_keys(&mut *tx, chunk).await;
        tx.commit().await.expect("commit");
    }
}

/// Records keys as expected to complete.
pub async fn expect_keys<'e, E: sqlx::PgExecutor<'e>>(executor: E, specs: &[Spec]) {
    let keys: Vec<i64> = specs.iter().map(|s| s.0).collect();
    let groups: Vec<&str> = specs.iter().map(|s| s.1.as_str()).collect();
    sqlx::query(
        "INSERT INTO rel.expected (key, group_id)
         SELECT * FROM unnest($1::bigint[], $2::text[])",
    )
    .bind(keys)
    .bind(groups)
    .execute(executor)
    .await
    .expect("record expected keys");
}

/// `count` jobs over `groups` groups, interleaved: job `i` is in group `i % groups`, so
/// each group's jobs are enqueued in key order.
pub fn interleaved(
    first_key: i64,
    count: i64,
    groups: i64,
    prefix: &str,
    sleep_ms: u64,
) -> Vec<Spec> {
    (0..count)
        .map(|i| (first_key + i, format!("{prefix}-{}", i % groups), sleep_ms))
        .collect()
}

/// Executions recorded so far.
pub async fn executions(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM rel.ledger")
        .fetch_one(pool)
        .await
        .unwrap_or(0)
}

/// Executions ended so far.
pub async fn ended(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM rel.ledger WHERE ended_at IS NOT NULL")
        .fetch_one(pool)
        .await
        .unwrap_or(0)
}

/// Waits until `condition` holds (polling every 100 ms), failing after `limit`.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The env pair for a duration in milliseconds.
pub fn ms(name: &'static str, duration: Duration) -> (&'static str, String) {
    (name, duration.as_millis().to_string())
}

/// `n` scaled by `HAREL_RELIABILITY_SCALE` (default 1; e.g. 0.1 for a quick run), at least 1.
pub fn scaled(n: i64) -> i64 {
    let scale: f64 = std::env::var("HAREL_RELIABILITY_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    ((n as f64 * scale).round() as i64).max(1)
}

/// Executions per worker name prefix-slot, for spread checks.
pub async fn per_worker(pool: &PgPool) -> Vec<(String, i64)> {
    sqlx::query_as("SELECT worker, count(*) FROM rel.ledger GROUP BY worker ORDER BY worker")
        .fetch_all(pool)
        .await
        .expect("per worker")
}
