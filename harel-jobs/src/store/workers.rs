//! Worker pools: their reports of themselves, the listing of them, and what they did per
//! minute.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::{Statement, Store};

pub(super) const LIST: &str =
    "SELECT id, host, pid, queues, queue_count, concurrency, running, succeeded, failed,
            dead, started_at, seen_at, stopped_at, total
       FROM @schema@.harel_workers($1, $2, $3)";

pub(super) const REPORT: &str =
    "SELECT @schema@.harel_worker_report($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                                         $13, $14)";

pub(super) const THROUGHPUT: &str =
    "SELECT minute, succeeded, failed, dead FROM @schema@.harel_throughput($1)";

pub(super) const THROUGHPUT_BY_QUEUE: &str = "SELECT minute, queue, succeeded, failed, dead, folded
       FROM @schema@.harel_throughput_by_queue($1, $2)";

/// A row of `harel_workers`: id, host, pid, queues, queue count, concurrency, running,
/// succeeded, failed, dead, started, seen, stopped, total.
pub(crate) type WorkerRow = (
    Uuid,
    String,
    i32,
    Vec<String>,
    i32,
    i32,
    i32,
    i64,
    i64,
    i64,
    DateTime<Utc>,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    i64,
);

/// A row of `harel_throughput`: the minute, jobs succeeded, attempts failed, jobs dead.
pub(crate) type ThroughputRow = (DateTime<Utc>, i64, i64, i64);

/// A row of `harel_throughput_by_queue`: the minute, the queue (`None`: the folded ones),
/// jobs succeeded, attempts failed, jobs dead, how many queues were folded.
pub(crate) type ThroughputByQueueRow = (DateTime<Utc>, Option<String>, i64, i64, i64, i32);

/// A pool's report of itself, for `harel_worker_report`.
#[derive(Debug)]
pub(crate) struct Report<'a> {
    /// The pool's id.
    pub id: Uuid,
    /// The host it runs on.
    pub host: &'a str,
    /// Its process id.
    pub pid: i32,
    /// The queues it serves.
    pub queues: &'a [&'a str],
    /// Handlers it may run at once.
    pub concurrency: i32,
    /// Jobs it holds now.
    pub running: i32,
    /// Jobs it completed since it started.
    pub succeeded: i64,
    /// Attempts that failed since it started.
    pub failed: i64,
    /// Jobs it moved to the dead letters since it started.
    pub dead: i64,
    /// Whether this is its last report (a graceful shutdown).
    pub stopping: bool,
    /// Its totals since it started by queue: the queues, and aligned with them jobs
    /// completed, attempts failed, jobs dead-lettered.
    pub counted_queues: &'a [&'a str],
    /// Jobs completed per queue of `counted_queues`.
    pub counted_succeeded: &'a [i64],
    /// Attempts failed per queue of `counted_queues`.
    pub counted_failed: &'a [i64],
    /// Jobs dead-lettered per queue of `counted_queues`.
    pub counted_dead: &'a [i64],
}

impl Store {
    /// `harel_workers`: the pools that reported within `within_ms`, oldest first, at most
    /// `limit`, each with at most `queues_listed` queue names; each row carries the total.
    pub(crate) async fn workers_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        within_ms: i64,
        limit: i32,
        queues_listed: i32,
    ) -> Result<Vec<WorkerRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::WorkersList))
            .bind(within_ms)
            .bind(limit)
            .bind(queues_listed)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_worker_report`: records a pool's report of itself.
    pub(crate) async fn worker_report<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        report: &Report<'_>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(self.sql(Statement::WorkerReport))
            .bind(report.id)
            .bind(report.host)
            .bind(report.pid)
            .bind(report.queues)
            .bind(report.concurrency)
            .bind(report.running)
            .bind(report.succeeded)
            .bind(report.failed)
            .bind(report.dead)
            .bind(report.stopping)
            .bind(report.counted_queues)
            .bind(report.counted_succeeded)
            .bind(report.counted_failed)
            .bind(report.counted_dead)
            .persistent(self.persistent())
            .execute(executor)
            .await?;
        Ok(())
    }

    /// `harel_throughput`: what every pool together did per minute over the last
    /// `minutes`, oldest first.
    pub(crate) async fn throughput_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        minutes: i32,
    ) -> Result<Vec<ThroughputRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::ThroughputList))
            .bind(minutes)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_throughput_by_queue`: what every pool together did per minute over the last
    /// `minutes`, a series per queue of the `top` busiest and one of the others folded,
    /// busiest first, each oldest first.
    pub(crate) async fn throughput_by_queue_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        minutes: i32,
        top: i32,
    ) -> Result<Vec<ThroughputByQueueRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::ThroughputByQueueList))
            .bind(minutes)
            .bind(top)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }
}
