//! The worker pools as an operator sees them: which are up, where, serving what, and what
//! they did over the last minutes ([`Client::workers`], [`Client::throughput`],
//! [`Client::throughput_by_queue`]), from the
//! reports each pool writes about every 10 seconds.

use std::time::Duration;

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::vocabulary::{
    MAX_THROUGHPUT_MINUTES, MAX_THROUGHPUT_QUEUES, MAX_WORKER_QUEUES_LISTED, MAX_WORKERS_LISTED,
};
use chrono::{DateTime, Utc};

/// A worker pool, as its last report described it ([`Client::workers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// The pool's id (new at each start).
    pub id: uuid::Uuid,
    /// The host it runs on (`HOSTNAME`, or the kernel's host name).
    pub host: String,
    /// Its process id.
    pub pid: i32,
    /// The queues it serves, the first [`MAX_WORKER_QUEUES_LISTED`] of them.
    pub queues: Vec<String>,
    /// How many queues it serves (more than `queues` holds when over
    /// [`MAX_WORKER_QUEUES_LISTED`]).
    pub queue_count: u32,
    /// Handlers it may run at once, over all its queues.
    pub concurrency: u32,
    /// Jobs it held at its last report.
    pub running: u32,
    /// Jobs it completed since it started.
    pub succeeded: u64,
    /// Attempts that failed since it started (retried or dead-lettered).
    pub failed: u64,
    /// Jobs it moved to the dead letters since it started.
    pub dead: u64,
    /// When it started reporting.
    pub started_at: DateTime<Utc>,
    /// Its last report (about every 10 seconds while it runs).
    pub seen_at: DateTime<Utc>,
    /// When it shut down gracefully (`None`: running, or it died).
    pub stopped_at: Option<DateTime<Utc>>,
}

/// The worker pools a [`Client::workers`] listing found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerList {
    /// The pools, oldest first, at most the listing's limit.
    pub workers: Vec<WorkerInfo>,
    /// How many pools reported within the period, counted up to 10,001 (housekeeping keeps
    /// the 10,000 seen last): more than `workers` holds when the limit cut the listing
    /// short.
    pub total: u64,
}

impl WorkerList {
    /// How many pools the listing did not show.
    pub fn not_shown(&self) -> u64 {
        self.total.saturating_sub(self.workers.len() as u64)
    }
}

/// What every worker pool together did in one minute ([`Client::throughput`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThroughputMinute {
    /// The minute's start (database clock).
    pub minute: DateTime<Utc>,
    /// Jobs completed.
    pub succeeded: u64,
    /// Attempts failed (retried or dead-lettered).
    pub failed: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
}

/// What the worker pools did per minute, by queue ([`Client::throughput_by_queue`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThroughputByQueue {
    /// A series per queue, the busiest over the period first (succeeded + failed + dead),
    /// at most the `top` asked for, then, when more queues did something, one of the
    /// others together ([`QueueSeries::queue`] `None`). Empty when no pool reported
    /// anything over the period. Each minute's figures over every series add up to
    /// [`Client::throughput`]'s of that minute.
    pub series: Vec<QueueSeries>,
    /// How many queues the series of the others holds (0: none was folded).
    pub folded: u32,
}

/// One queue's minutes ([`ThroughputByQueue::series`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSeries {
    /// The queue; `Some("")` for what was counted not by queue (by pools of a release
    /// before this one, that serve more than one queue); `None` for the series of the
    /// other queues together ([`ThroughputByQueue::folded`] of them).
    pub queue: Option<String>,
    /// One entry per minute, oldest first, zeros included; the last is the current
    /// minute, still filling.
    pub minutes: Vec<ThroughputMinute>,
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl Client {
    /// The worker pools that reported within `within` (a running pool reports about every
    /// 10 seconds: 30 s shows the live ones; at most a day), oldest first, at most `limit`
    /// of them (1 to [`MAX_WORKERS_LISTED`]); [`WorkerList::total`] counts them all. One
    /// round trip.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a period over a day or under a millisecond, or a
    /// limit out of range; [`ClientError::Database`].
    pub async fn workers(&self, within: Duration, limit: u32) -> Result<WorkerList, ClientError> {
        let within_ms = i64::try_from(within.as_millis()).unwrap_or(i64::MAX);
        if !(1..=86_400_000).contains(&within_ms) {
            return Err(ClientError::InvalidArgument(
                "workers are listed within 1 ms to 1 day",
            ));
        }
        if !(1..=MAX_WORKERS_LISTED).contains(&limit) {
            return Err(ClientError::InvalidArgument(
                "workers are listed 1 to 1,000 at a time",
            ));
        }
        let rows = self
            .store()
            .workers_list(
                self.pool(),
                within_ms,
                limit as i32,
                MAX_WORKER_QUEUES_LISTED as i32,
            )
            .await
            .map_err(DatabaseError::new)?;
        let total = rows.first().map_or(0, |row| count(row.13));
        Ok(WorkerList {
            workers: rows
                .into_iter()
                .map(|row| WorkerInfo {
                    id: row.0,
                    host: row.1,
                    pid: row.2,
                    queues: row.3,
                    queue_count: u32::try_from(row.4).unwrap_or(0),
                    concurrency: u32::try_from(row.5).unwrap_or(0),
                    running: u32::try_from(row.6).unwrap_or(0),
                    succeeded: count(row.7),
                    failed: count(row.8),
                    dead: count(row.9),
                    started_at: row.10,
                    seen_at: row.11,
                    stopped_at: row.12,
                })
                .collect(),
            total,
        })
    }

    /// Jobs succeeded, attempts failed and jobs dead-lettered per minute over the last
    /// `minutes` (1 to [`MAX_THROUGHPUT_MINUTES`]), every pool together, oldest first, one
    /// entry per minute (zeros included); the last is the current minute, still filling.
    /// From the pools' reports: a minute's figures arrive up to 10 seconds late, and what a
    /// pool did after its last report before it died is not counted. One round trip.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for `minutes` out of range, [`ClientError::Database`].
    pub async fn throughput(&self, minutes: u32) -> Result<Vec<ThroughputMinute>, ClientError> {
        if !(1..=MAX_THROUGHPUT_MINUTES).contains(&minutes) {
            return Err(ClientError::InvalidArgument(
                "throughput is read over 1 to 1,440 minutes",
            ));
        }
        let rows = self
            .store()
            .throughput_list(self.pool(), minutes as i32)
            .await
            .map_err(DatabaseError::new)?;
        Ok(rows
            .into_iter()
            .map(|(minute, succeeded, failed, dead)| ThroughputMinute {
                minute,
                succeeded: count(succeeded),
                failed: count(failed),
                dead: count(dead),
            })
            .collect())
    }

    /// [`Client::throughput`] split by queue: a series per queue for the `top` busiest
    /// over the last `minutes` (`top` 1 to [`MAX_THROUGHPUT_QUEUES`], `minutes` 1 to
    /// [`MAX_THROUGHPUT_MINUTES`]) and one of the other queues together, saying how many
    /// it folded. Counted by the pools per queue they serve; a pool of the release before
    /// this one counts under its queue if it serves one, else under `""`. One round trip.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for `minutes` or `top` out of range,
    /// [`ClientError::Database`].
    pub async fn throughput_by_queue(
        &self,
        minutes: u32,
        top: u32,
    ) -> Result<ThroughputByQueue, ClientError> {
        if !(1..=MAX_THROUGHPUT_MINUTES).contains(&minutes) {
            return Err(ClientError::InvalidArgument(
                "throughput is read over 1 to 1,440 minutes",
            ));
        }
        if !(1..=MAX_THROUGHPUT_QUEUES).contains(&top) {
            return Err(ClientError::InvalidArgument(
                "throughput is split into 1 to 100 queues and the others",
            ));
        }
        let rows = self
            .store()
            .throughput_by_queue_list(self.pool(), minutes as i32, top as i32)
            .await
            .map_err(DatabaseError::new)?;
        let folded = rows
            .first()
            .map_or(0, |row| u32::try_from(row.5).unwrap_or(0));
        // (the rows come series by series, each series' minutes together)
        let mut series: Vec<QueueSeries> = Vec::new();
        for (minute, queue, succeeded, failed, dead, _) in rows {
            let entry = ThroughputMinute {
                minute,
                succeeded: count(succeeded),
                failed: count(failed),
                dead: count(dead),
            };
            match series.last_mut() {
                Some(last) if last.queue == queue => last.minutes.push(entry),
                _ => series.push(QueueSeries {
                    queue,
                    minutes: vec![entry],
                }),
            }
        }
        Ok(ThroughputByQueue { series, folded })
    }
}
