//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo feature
//! `metrics`): the application installs the recorder (Prometheus, StatsD, …); without the
//! feature every function here is empty and compiles to nothing.
//!
//! Labels are bounded: `kind` is a kind registered on the worker (or `"unregistered"`), or
//! the [`Job::KIND`](crate::Job::KIND) of an enqueued type; `schema` is the queue's schema.
//! Never a group id, a job id or a payload. The names, one table, are in the README
//! ("Metrics").

use std::time::Duration;

use crate::worker::outcome::Outcome;

/// Counter: jobs enqueued (not duplicates of unique jobs), by `kind`. Counted when the
/// enqueue returns: a job enqueued in a transaction that rolls back is counted too.
pub const ENQUEUED: &str = "harel_jobs_enqueued_total";
/// Counter: jobs claimed (attempts started), by `kind`.
pub const CLAIMED: &str = "harel_jobs_claimed_total";
/// Counter: jobs completed, by `kind`.
pub const SUCCEEDED: &str = "harel_jobs_succeeded_total";
/// Counter: failed attempts to be retried, by `kind`.
pub const RETRIED: &str = "harel_jobs_retried_total";
/// Counter: attempts snoozed by their handler, by `kind`.
pub const SNOOZED: &str = "harel_jobs_snoozed_total";
/// Counter: jobs moved to the dead letters, by `kind`.
pub const DEAD_LETTERED: &str = "harel_jobs_dead_lettered_total";
/// Counter: running jobs that ended as cancelled, by `kind`.
pub const CANCELLED: &str = "harel_jobs_cancelled_total";
/// Counter: leases lost (by the heartbeat, or when the outcome was written), by `kind`.
pub const LEASE_LOST: &str = "harel_jobs_lease_lost_total";
/// Histogram, seconds: how long handlers ran (to their result, a panic or a timeout), by
/// `kind`.
pub const HANDLER_DURATION: &str = "harel_jobs_handler_duration_seconds";
/// Histogram, seconds: from enqueue to the start of the first attempt (by the database's
/// clock at enqueue and this process's at start), by `kind`. A delayed job's delay is
/// part of it.
pub const START_LATENCY: &str = "harel_jobs_start_latency_seconds";
/// Histogram, seconds: one claim round trip of the fetcher (a batch of up to 64 groups).
pub const CLAIM_DURATION: &str = "harel_jobs_claim_duration_seconds";
/// Histogram, seconds: one round trip writing a batch of outcomes (acks, retries, dead
/// letters).
pub const SETTLE_DURATION: &str = "harel_jobs_settle_duration_seconds";
/// Gauge: jobs in the queue (waiting, scheduled, running or retrying; `state="queued"`)
/// and dead letters (`state="dead"`), by `schema`; sampled by one worker per schema.
pub const DEPTH: &str = "harel_jobs_depth";
/// Gauge: groups (`state="all"`) and groups a claim may take now (`state="claimable"`), by
/// `schema`; sampled with [`DEPTH`].
pub const GROUPS: &str = "harel_jobs_groups";

/// The label of a kind nothing registered on this worker.
pub const UNREGISTERED: &str = "unregistered";

macro_rules! counter {
    ($name:expr, $kind:expr) => {{
        #[cfg(feature = "metrics")]
        ::metrics::counter!($name, "kind" => $kind).increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = ($name, $kind);
    }};
}

macro_rules! histogram {
    ($name:expr, $took:expr $(, $kind:expr)?) => {{
        #[cfg(feature = "metrics")]
        ::metrics::histogram!($name $(, "kind" => $kind)?).record($took.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = ($name, $took $(, $kind)?);
    }};
}

/// `count` jobs of `kind` were enqueued.
pub(crate) fn enqueued(kind: &str, count: u64) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(ENQUEUED, "kind" => kind.to_owned()).increment(count);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, count);
}

/// A job of `kind` was claimed.
pub(crate) fn claimed(kind: &'static str) {
    counter!(CLAIMED, kind);
}

/// An outcome was written as decided.
pub(crate) fn settled(kind: &'static str, outcome: &Outcome) {
    match outcome {
        Outcome::Succeeded => counter!(SUCCEEDED, kind),
        Outcome::Retry { .. } => counter!(RETRIED, kind),
        Outcome::Snooze(_) => counter!(SNOOZED, kind),
        Outcome::Dead { .. } => counter!(DEAD_LETTERED, kind),
        Outcome::Released { .. } => {}
    }
}

/// A job of `kind` became a dead letter other than as decided (its outcome was refused).
pub(crate) fn dead_lettered(kind: &'static str) {
    counter!(DEAD_LETTERED, kind);
}

/// A running job of `kind` ended as cancelled.
pub(crate) fn cancelled(kind: &'static str) {
    counter!(CANCELLED, kind);
}

/// The lease of a job of `kind` was lost.
pub(crate) fn lease_lost(kind: &'static str) {
    counter!(LEASE_LOST, kind);
}

/// A handler of `kind` ran for `took`.
pub(crate) fn handler_ran(kind: &'static str, took: Duration) {
    histogram!(HANDLER_DURATION, took, kind);
}

/// A job of `kind` started its first attempt `latency` after its enqueue.
pub(crate) fn started(kind: &'static str, latency: Duration) {
    histogram!(START_LATENCY, latency, kind);
}

/// A claim round trip took `took`.
pub(crate) fn claim_round_trip(took: Duration) {
    histogram!(CLAIM_DURATION, took);
}

/// A settle round trip took `took`.
pub(crate) fn settle_round_trip(took: Duration) {
    histogram!(SETTLE_DURATION, took);
}

/// The depth of the queue in `schema`, as sampled.
#[cfg(feature = "metrics")]
pub(crate) fn depth(schema: &crate::Schema, stats: &crate::QueueStats) {
    let schema = schema.name().to_owned();
    let gauge = |name: &'static str, state: &'static str, value: crate::Count| {
        ::metrics::gauge!(name, "schema" => schema.clone(), "state" => state)
            .set(value.value() as f64);
    };
    gauge(DEPTH, "queued", stats.jobs);
    gauge(DEPTH, "dead", stats.dead_letters);
    gauge(GROUPS, "all", stats.groups);
    gauge(GROUPS, "claimable", stats.claimable_groups);
}
