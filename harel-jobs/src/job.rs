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
use crate::vocabulary::Priority;

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

    /// The queue jobs of this type go to (`#[job(queue = "mail")]`), unless an enqueue
    /// names another. Worker pools serve the queues they name
    /// ([`WorkerBuilder::queue`](crate::WorkerBuilder::queue)), each with its own
    /// concurrency.
    const QUEUE: &'static str = crate::vocabulary::DEFAULT_QUEUE;

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

    /// The fairness key of this job (a tenant, an account, a customer): within a queue and a
    /// priority level, claims share the starts between the keys that have ready work in
    /// proportion to their weights, however many groups or jobs each has. `None` (the
    /// default): the key `""` that jobs without one share. `#[fair_key]` on a `#[job]`
    /// parameter gives it; an enqueue's `fair_key` option overrides it.
    fn fair_key(&self) -> Option<String> {
        None
    }

    /// The unique key of this job, if at most one job with it may be queued at a time
    /// (see [`Unique`]). `None` (the default): no limit.
    fn unique(&self) -> Option<Unique> {
        None
    }
}

/// A unique job's key: while a job holding the key is queued (waiting, scheduled, running
/// or retrying), enqueueing another with the same key writes nothing and reports
/// [`PublishError::Duplicate`](crate::PublishError::Duplicate) with the queued job's id.
/// With [`hold_after_completion`](Self::hold_after_completion), the key also stays held
/// that long after its job completed ("at most once per hour"). A job that becomes a dead
/// letter or is cancelled frees its key.
///
/// Keys are compared as exact strings, across every job kind of the queue: prefix them
/// with the kind (as `#[job(unique)]` does) unless two kinds are meant to share one.
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::Unique;
///
/// let daily = Unique::new("report:2026-12-04").hold_after_completion(Duration::from_secs(3600));
/// assert_eq!(daily.key(), "report:2026-12-04");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unique {
    key: String,
    hold: Option<Duration>,
}

impl Unique {
    /// The key `key` (1 to 1,024 bytes, no NUL characters), held while its job is queued.
    pub fn new(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            hold: None,
        }
    }

    /// Also holds the key for `period` after its job completed (at most 100 years).
    pub fn hold_after_completion(mut self, period: Duration) -> Self {
        self.hold = Some(period);
        self
    }

    /// The key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How long the key stays held after its job completed (`None`: it is free at once).
    pub fn hold(&self) -> Option<Duration> {
        self.hold
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
    /// How long a completed job of this type is kept in the queue's history (where
    /// `Client::job` finds it), instead of being deleted at once.
    pub retain: Option<Duration>,
}

impl JobOptions {
    /// No option set.
    pub const fn new() -> Self {
        Self {
            max_attempts: None,
            priority: None,
            backoff: None,
            timeout: None,
            retain: None,
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

    /// Keeps completed jobs of this type for `period` (at most 100 years).
    pub const fn retain(mut self, period: Duration) -> Self {
        self.retain = Some(period);
        self
    }
}
