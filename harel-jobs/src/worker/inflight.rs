//! The leases this worker holds right now, for the heartbeat and for shutdown.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::context::ExecutionFlags;
use crate::telemetry::Labels;
use crate::transport::Lease;

/// Where a held job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Its handler runs: the heartbeat extends its lease.
    Running,
    /// Its handler ended and its completion is being written; still extended, but a lost
    /// lease is reported by the completion, not here.
    Settling,
    /// The heartbeat found the lease lost: never ack it.
    Lost,
}

struct Entry {
    lease: Lease,
    /// The job's metrics labels.
    labels: Labels,
    cancel: CancellationToken,
    flags: Arc<ExecutionFlags>,
    phase: Phase,
}

/// Leases held by this worker, by lease: the claim's token with the message. Not by message
/// alone: this worker can hold one message twice, when a claim of it was lost while its
/// handler ran (a lease that lapsed, a failover to a standby that never saw the claim) and
/// this worker claimed it again. Each execution must keep its own entry: the old one's end
/// must neither end the new one's heartbeat nor take its result.
#[derive(Default)]
pub(crate) struct InFlight {
    entries: Mutex<HashMap<Lease, Entry>>,
}

impl InFlight {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Lease, Entry>> {
        // a panic while holding this lock cannot leave the map inconsistent (single inserts
        // and removes), so a poisoned lock is still usable
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn insert(
        &self,
        lease: Lease,
        labels: Labels,
        cancel: CancellationToken,
        flags: Arc<ExecutionFlags>,
    ) {
        let entry = Entry {
            lease,
            labels,
            cancel,
            flags,
            phase: Phase::Running,
        };
        self.entries().insert(entry.lease.clone(), entry);
    }

    /// The handler ended. Returns false if the lease was already found lost.
    pub fn settle(&self, lease: &Lease) -> bool {
        match self.entries().get_mut(lease) {
            Some(entry) if entry.phase == Phase::Lost => false,
            Some(entry) => {
                entry.phase = Phase::Settling;
                true
            }
            None => false,
        }
    }

    pub fn remove(&self, lease: &Lease) {
        self.entries().remove(lease);
    }

    /// Every lease to extend.
    pub fn leases(&self) -> Vec<Lease> {
        self.entries()
            .values()
            .filter(|entry| entry.phase != Phase::Lost)
            .map(|entry| entry.lease.clone())
            .collect()
    }

    /// The heartbeat found these leases lost: cancel their handlers. Returns the ones whose
    /// handler was still running (the others are being completed and will be told), except
    /// those the handler completed in its own transaction (no loss: that is how it ends).
    pub fn mark_lost(&self, lost: &[Lease]) -> Vec<(Lease, Labels)> {
        let mut entries = self.entries();
        let mut running = Vec::new();
        for lease in lost {
            if let Some(entry) = entries.get_mut(lease)
                && entry.phase == Phase::Running
            {
                entry.phase = Phase::Lost;
                entry.cancel.cancel();
                if !entry.flags.completed_in_tx.load(Ordering::Acquire) {
                    running.push((lease.clone(), entry.labels.clone()));
                }
            }
        }
        running
    }

    /// The heartbeat learned that these leases' jobs are to be cancelled: signal their
    /// handlers (their outcome will end them as cancelled). Returns the ones newly told.
    pub fn request_cancel(&self, leases: &[Lease]) -> Vec<Lease> {
        let entries = self.entries();
        let mut told = Vec::new();
        for lease in leases {
            if let Some(entry) = entries.get(lease)
                && !entry.flags.cancel_requested.swap(true, Ordering::AcqRel)
            {
                entry.cancel.cancel();
                told.push(lease.clone());
            }
        }
        told
    }

    pub fn len(&self) -> usize {
        self.entries().len()
    }
}
