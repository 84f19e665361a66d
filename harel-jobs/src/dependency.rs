//! Jobs that wait for other jobs: [`Parent`], [`BatchRef`] and [`OnParentFailure`]
//! (ADR 0033).
//!
//! A job enqueued [`after`](crate::Enqueue::after) other jobs (its *parents*) is queued at
//! once, in its group and its place there, but no worker claims it until every parent has
//! completed. The transaction that completes a parent (its settle) releases the waiting job
//! in the same commit; one that ends a parent otherwise (a dead letter, a cancel) cancels
//! it, with a reason naming that parent, unless it asked to run whatever its parents'
//! outcomes ([`OnParentFailure::Run`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::vocabulary::JobId;

/// A job to wait for: one enqueued before (by its id), or an earlier job of the same
/// [`JobBatch`](crate::JobBatch) (by the [`BatchRef`] its
/// [`add`](crate::JobBatch::add) returned).
///
/// ```
/// use harel_jobs::{JobId, Parent};
///
/// let parent: Parent = JobId::new(42).into();
/// assert_eq!(parent, Parent::Job(JobId::new(42)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Parent {
    /// A job enqueued before, in a committed transaction or earlier in this one. It must
    /// be queued, or kept after it ended (completed with retention, cancelled, dead);
    /// otherwise the enqueue fails with
    /// [`PublishError::UnknownParent`](crate::PublishError::UnknownParent).
    Job(JobId),
    /// An earlier job of the same batch.
    InBatch(BatchRef),
}

impl From<JobId> for Parent {
    fn from(id: JobId) -> Self {
        Self::Job(id)
    }
}

impl From<BatchRef> for Parent {
    fn from(job: BatchRef) -> Self {
        Self::InBatch(job)
    }
}

/// A job of a [`JobBatch`](crate::JobBatch) that has no id yet, returned by
/// [`JobBatch::add`](crate::JobBatch::add): later jobs of the same batch can wait for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchRef {
    /// Which batch (each batch draws a number of its own), so that a reference is never
    /// taken for a job of another batch.
    pub(crate) batch: u64,
    /// Its position in the batch, from 0.
    pub(crate) index: usize,
}

impl BatchRef {
    /// Its position in its batch, from 0.
    pub fn index(self) -> usize {
        self.index
    }
}

/// A number for a new batch: unique in the process.
pub(crate) fn next_batch_number() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// What a waiting job does when one of its parents ends without completing (becomes a
/// dead letter, or is cancelled).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnParentFailure {
    /// It is cancelled at once, with a reason naming the parent (and the jobs waiting for
    /// it in turn, unless they asked to run). The default.
    #[default]
    Cancel,
    /// It runs once every parent has ended, whatever their outcomes: a clean-up, a
    /// report, a batch's callback.
    Run,
}
