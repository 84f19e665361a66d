//! Counters of what a worker pool did, for logs, tests and dashboards.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::retry::Decision;
use crate::telemetry::Labels;

/// A snapshot of a worker pool's counters since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs that succeeded and were acked.
    pub succeeded: u64,
    /// Failed attempts scheduled for a retry.
    pub retried: u64,
    /// Jobs snoozed (rescheduled without using an attempt).
    pub snoozed: u64,
    /// Jobs moved to the dead letters.
    pub dead_lettered: u64,
    /// Jobs ended as cancelled: their cancel was asked for while they ran
    /// (`Client::cancel`), whatever their handler returned.
    pub cancelled: u64,
    /// Jobs given back unfinished (shutdown).
    pub released: u64,
    /// Leases found lost (by the heartbeat or when writing an outcome).
    pub leases_lost: u64,
    /// Database operations that failed (and were retried, or split: see
    /// `outcomes_dropped`).
    pub database_errors: u64,
    /// Outcomes the database refused even alone (and, but for acks, as a plain dead
    /// letter): their jobs run again after their lease. Logged as errors.
    pub outcomes_dropped: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    claimed: AtomicU64,
    succeeded: AtomicU64,
    retried: AtomicU64,
    snoozed: AtomicU64,
    dead_lettered: AtomicU64,
    cancelled: AtomicU64,
    released: AtomicU64,
    leases_lost: AtomicU64,
    database_errors: AtomicU64,
    outcomes_dropped: AtomicU64,
    /// The same by queue, for each queue the pool serves (its lanes: at most 1,000), made
    /// when the pool starts and only read after: jobs succeeded, attempts failed, jobs dead.
    by_queue: HashMap<Arc<str>, QueueCounters>,
}

/// A queue's counters: what its throughput in the pool's report is taken from.
#[derive(Debug, Default)]
struct QueueCounters {
    succeeded: AtomicU64,
    failed: AtomicU64,
    dead: AtomicU64,
}

/// A queue's totals since the pool started: the queue, jobs succeeded, attempts failed
/// (retried or dead-lettered), jobs dead-lettered.
pub(crate) type QueueTotals = (Arc<str>, u64, u64, u64);

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Stats {
    /// Counters for a pool serving `queues` (counted by queue too).
    pub fn for_queues(queues: impl IntoIterator<Item = Arc<str>>) -> Self {
        Self {
            by_queue: queues
                .into_iter()
                .map(|queue| (queue, QueueCounters::default()))
                .collect(),
            ..Self::default()
        }
    }

    /// The queue's counters (none for a queue the pool does not serve: the report counts
    /// what no queue took under no queue).
    fn queue(&self, labels: &Labels) -> Option<&QueueCounters> {
        self.by_queue.get(&labels.queue)
    }

    /// A job (with its metrics labels) was claimed.
    pub fn claimed(&self, labels: &Labels) {
        bump(&self.claimed, 1);
        crate::telemetry::claimed(labels);
    }
    /// An outcome was written: counted by what was decided.
    pub fn settled(&self, labels: &Labels, decision: &Decision) {
        let counter = match decision {
            Decision::Succeeded => {
                crate::telemetry::succeeded(labels);
                if let Some(queue) = self.queue(labels) {
                    bump(&queue.succeeded, 1);
                }
                &self.succeeded
            }
            Decision::Retry { .. } => {
                crate::telemetry::retried(labels);
                if let Some(queue) = self.queue(labels) {
                    bump(&queue.failed, 1);
                }
                &self.retried
            }
            Decision::Snooze(_) => {
                crate::telemetry::snoozed(labels);
                &self.snoozed
            }
            Decision::Dead { .. } => {
                crate::telemetry::dead_lettered(labels);
                self.queue_dead(labels);
                &self.dead_lettered
            }
            Decision::Released { .. } => &self.released,
        };
        bump(counter, 1);
    }
    pub fn dead_lettered(&self, labels: &Labels) {
        // (the queue's counters first, the total's after: see `by_queue`)
        self.queue_dead(labels);
        bump(&self.dead_lettered, 1);
        crate::telemetry::dead_lettered(labels);
    }
    /// A dead letter counts as a failed attempt too (as in the report's totals).
    fn queue_dead(&self, labels: &Labels) {
        if let Some(queue) = self.queue(labels) {
            bump(&queue.failed, 1);
            bump(&queue.dead, 1);
        }
    }

    /// Each served queue's totals, by name. A queue's counters are bumped before the
    /// pool's: read after `snapshot`, they hold at least what it counted (the report's
    /// queues never count less than its totals, and no settle counts as "not by queue").
    pub fn by_queue(&self) -> Vec<QueueTotals> {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let mut totals: Vec<QueueTotals> = self
            .by_queue
            .iter()
            .map(|(queue, counters)| {
                (
                    Arc::clone(queue),
                    read(&counters.succeeded),
                    read(&counters.failed),
                    read(&counters.dead),
                )
            })
            .collect();
        totals.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        totals
    }
    pub fn cancelled(&self, labels: &Labels) {
        bump(&self.cancelled, 1);
        crate::telemetry::cancelled(labels);
    }
    pub fn outcome_dropped(&self) {
        bump(&self.outcomes_dropped, 1);
    }
    pub fn released(&self) {
        bump(&self.released, 1);
    }
    pub fn lease_lost(&self, labels: &Labels) {
        bump(&self.leases_lost, 1);
        crate::telemetry::lease_lost(labels);
    }
    pub fn database_error(&self) {
        bump(&self.database_errors, 1);
    }

    pub fn snapshot(&self) -> WorkerStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        WorkerStats {
            claimed: read(&self.claimed),
            succeeded: read(&self.succeeded),
            retried: read(&self.retried),
            snoozed: read(&self.snoozed),
            dead_lettered: read(&self.dead_lettered),
            cancelled: read(&self.cancelled),
            released: read(&self.released),
            leases_lost: read(&self.leases_lost),
            database_errors: read(&self.database_errors),
            outcomes_dropped: read(&self.outcomes_dropped),
        }
    }
}
