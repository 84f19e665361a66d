//! Typed jobs: the [`Job`] trait (what is enqueued) and [`Handler`] (what runs it).
//!
//! `#[job]` implements both for you; implement them by hand when a job needs something the
//! attribute does not offer.

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::JobContext;
use crate::job_error::JobResult;
use crate::retry::Backoff;
use crate::transport::Priority;

/// A job: a serialisable value with a stable kind name, enqueued as one message.
///
/// ```
/// use harel_jobs::{Job, JobOptions};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Resize { image_id: i64 }
///
/// impl Job for Resize {
///     const KIND: &'static str = "resize";
///     fn options() -> JobOptions { JobOptions::new().max_attempts(3) }
/// }
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The stable name stored with each message and used to find its handler. Changing it
    /// strands jobs already enqueued under the old name: a worker with no handler for their
    /// kind retries them like a failed attempt, with the pool's backoff, up to the pool's
    /// `max_attempts` (so that during a rolling deploy a worker that knows the kind can take
    /// them), then moves them to the dead letters with the error `no handler registered for
    /// job kind "…"`. To rename a job type, keep its kind (`#[job(kind = "…")]`).
    const KIND: &'static str;

    /// Options declared on the type. The worker pool's defaults fill what is `None`.
    fn options() -> JobOptions {
        JobOptions::new()
    }

    /// The group (execution id) this job belongs to. Jobs of one group run one at a time,
    /// in enqueue order. `None` (the default): a group of its own, so it runs in parallel
    /// with everything else.
    fn group(&self) -> Option<String> {
        None
    }
}

/// Runs a [`Job`] with the worker pool's shared state `S`.
pub trait Handler<S>: Job {
    /// Runs the job. An `Err` is a failed attempt (see [`JobError`](crate::JobError)).
    fn handle(self, ctx: JobContext<S>) -> impl Future<Output = JobResult> + Send;
}

/// Per-type options of a job. `None` leaves the worker pool's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobOptions {
    /// Attempts before the job becomes a dead letter (at least 1).
    pub max_attempts: Option<u32>,
    /// Priority of the group the job creates (when enqueued without an override).
    pub priority: Option<Priority>,
    /// Delay between a failed attempt and the next.
    pub backoff: Option<Backoff>,
    /// Longest one attempt may run; past it the attempt fails (and is retried).
    pub timeout: Option<Duration>,
}

impl JobOptions {
    /// No option set.
    pub const fn new() -> Self {
        Self {
            max_attempts: None,
            priority: None,
            backoff: None,
            timeout: None,
        }
    }

    /// Sets the number of attempts (0 is treated as 1).
    pub const fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(if attempts == 0 { 1 } else { attempts });
        self
    }

    /// Sets the priority.
    pub const fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the backoff between attempts.
    pub const fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Sets the timeout of one attempt.
    pub const fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}
