//! Counters of what a worker pool did, for logs, tests and dashboards.

use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Jobs given back unfinished (shutdown).
    pub released: u64,
    /// Leases found lost (by the heartbeat or when writing an outcome).
    pub leases_lost: u64,
    /// Database operations that failed (and were retried).
    pub database_errors: u64,
}

/// The live counters.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    claimed: AtomicU64,
    succeeded: AtomicU64,
    retried: AtomicU64,
    snoozed: AtomicU64,
    dead_lettered: AtomicU64,
    released: AtomicU64,
    leases_lost: AtomicU64,
    database_errors: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Stats {
    pub fn claimed(&self, n: u64) {
        bump(&self.claimed, n);
    }
    pub fn succeeded(&self) {
        bump(&self.succeeded, 1);
    }
    pub fn retried(&self) {
        bump(&self.retried, 1);
    }
    pub fn snoozed(&self) {
        bump(&self.snoozed, 1);
    }
    pub fn dead_lettered(&self) {
        bump(&self.dead_lettered, 1);
    }
    pub fn released(&self) {
        bump(&self.released, 1);
    }
    pub fn lease_lost(&self) {
        bump(&self.leases_lost, 1);
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
            released: read(&self.released),
            leases_lost: read(&self.leases_lost),
            database_errors: read(&self.database_errors),
        }
    }
}
