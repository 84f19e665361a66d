//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo feature
//! `metrics`): the application installs the recorder (Prometheus, StatsD, …); without the
//! feature every function here is empty and compiles to nothing.
//!
//! Labels are bounded: `kind` is a kind registered on the worker (or `"unregistered"`), or
//! the [`Job::KIND`](crate::Job::KIND) of an enqueued type; `queue` is the named queue the
//! job was enqueued into, or the queue the worker's lane serves (1 to 64 characters, at most
//! 1,000 per schema); `schema` is the queue's schema. Never a group id, a job id or a
//! payload. The names, one table, are in the guide's
//! ["Metrics"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/monitoring.md#metrics).

use std::sync::Arc;
use std::time::Duration;

/// Counter: jobs enqueued (not duplicates of unique jobs), by `kind` and `queue`. Counted
/// when the enqueue returns: a job enqueued in a transaction that rolls back is counted too.
pub const ENQUEUED: &str = "harel_jobs_enqueued_total";
/// Counter: jobs claimed (attempts started), by `kind` and `queue`.
pub const CLAIMED: &str = "harel_jobs_claimed_total";
/// Counter: jobs completed, by `kind` and `queue`.
pub const SUCCEEDED: &str = "harel_jobs_succeeded_total";
/// Counter: failed attempts to be retried, by `kind` and `queue`.
pub const RETRIED: &str = "harel_jobs_retried_total";
/// Counter: attempts snoozed by their handler, by `kind` and `queue`.
pub const SNOOZED: &str = "harel_jobs_snoozed_total";
/// Counter: jobs moved to the dead letters, by `kind` and `queue`.
pub const DEAD_LETTERED: &str = "harel_jobs_dead_lettered_total";
/// Counter: running jobs that ended as cancelled, by `kind` and `queue`.
pub const CANCELLED: &str = "harel_jobs_cancelled_total";
/// Counter: leases lost (by the heartbeat, or when the outcome was written), by `kind` and
/// `queue`.
pub const LEASE_LOST: &str = "harel_jobs_lease_lost_total";
/// Histogram, seconds: how long handlers ran (to their result, a panic or a timeout), by
/// `kind` and `queue`.
pub const HANDLER_DURATION: &str = "harel_jobs_handler_duration_seconds";
/// Histogram, seconds: from enqueue to the start of the first attempt (by the database's
/// clock at enqueue and this process's at start), by `kind` and `queue`. A delayed job's
/// delay is part of it.
pub const START_LATENCY: &str = "harel_jobs_start_latency_seconds";
/// Histogram, seconds: one claim round trip of a fetcher (a batch of up to `claim_batch`
/// groups, 256 by default).
pub const CLAIM_DURATION: &str = "harel_jobs_claim_duration_seconds";
/// Histogram, seconds: one round trip writing a batch of outcomes (acks, retries, dead
/// letters).
pub const SETTLE_DURATION: &str = "harel_jobs_settle_duration_seconds";
/// Gauge: jobs in the queue (waiting, scheduled, running or retrying; `state="queued"`,
/// the only state), by `schema`; sampled by one worker per schema. Dead letters are not in
/// it: they are [`DEAD_LETTERS`].
pub const DEPTH: &str = "harel_jobs_depth";
/// Gauge: dead letters, by `schema`; sampled with [`DEPTH`]. (It used to be
/// `harel_jobs_depth{state="dead"}`.)
pub const DEAD_LETTERS: &str = "harel_jobs_dead_letters";
/// Gauge: groups (`state="all"`) and groups a claim may take now (`state="claimable"`), by
/// `schema`; sampled with [`DEPTH`].
pub const GROUPS: &str = "harel_jobs_groups";
/// Gauge: per named queue, by `schema` and `queue`, jobs that may start now
/// (`state="ready"`: the first job of each group that is waiting, or retrying and due) and
/// jobs running (`state="running"`); sampled with [`DEPTH`], from `Client::queues`. Counted
/// up to 10,000 ready groups per priority level and among the first 1,000 leased, parked or
/// scheduled groups per level; past that, a lower bound.
pub const QUEUE_DEPTH: &str = "harel_jobs_queue_depth";
/// Gauge, seconds: per named queue, by `schema` and `queue`, how long the queue's oldest
/// ready job (due, not running) has been waiting to start, by the database's clock; 0 when
/// none is ready. Sampled with [`DEPTH`], from the same `harel_queues` read as
/// [`QUEUE_DEPTH`] (its `oldest_ready_at`: among the due timed groups and the 1,000 ready
/// groups next to start per priority level). A paused queue, or one no pool serves, lags
/// more and more.
pub const QUEUE_LAG: &str = "harel_jobs_queue_lag_seconds";

/// Every metric the crate emits, with its kind: what [`describe`] describes.
pub const ALL: &[(&str, MetricKind)] = &[
    (ENQUEUED, MetricKind::Counter),
    (CLAIMED, MetricKind::Counter),
    (SUCCEEDED, MetricKind::Counter),
    (RETRIED, MetricKind::Counter),
    (SNOOZED, MetricKind::Counter),
    (DEAD_LETTERED, MetricKind::Counter),
    (CANCELLED, MetricKind::Counter),
    (LEASE_LOST, MetricKind::Counter),
    (HANDLER_DURATION, MetricKind::Histogram),
    (START_LATENCY, MetricKind::Histogram),
    (CLAIM_DURATION, MetricKind::Histogram),
    (SETTLE_DURATION, MetricKind::Histogram),
    (DEPTH, MetricKind::Gauge),
    (DEAD_LETTERS, MetricKind::Gauge),
    (GROUPS, MetricKind::Gauge),
    (QUEUE_DEPTH, MetricKind::Gauge),
    (QUEUE_LAG, MetricKind::Gauge),
];

/// What kind of metric one of [`ALL`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A counter (monotonic, `_total`).
    Counter,
    /// A gauge (a sampled value).
    Gauge,
    /// A histogram (seconds): a summary unless the exporter is given buckets.
    Histogram,
}

/// The recommended histogram buckets, in seconds, of the [`HISTOGRAMS`] (for an exporter
/// such as `metrics-exporter-prometheus`, whose `set_buckets_for_metric` takes them): from
/// 1 ms to 5 minutes, covering a claim or settle round trip (milliseconds) as well as a
/// long handler or a start latency of minutes.
pub const RECOMMENDED_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// The histograms among [`ALL`] (all in seconds), for [`RECOMMENDED_BUCKETS`].
pub const HISTOGRAMS: &[&str] = &[
    HANDLER_DURATION,
    START_LATENCY,
    CLAIM_DURATION,
    SETTLE_DURATION,
];

/// Describes every metric of [`ALL`] (its help text and unit) to the current recorder, so
/// that an exporter prints them (Prometheus' `# HELP`). A worker pool does it when it
/// starts; a process that only enqueues calls it once after installing its recorder.
/// Without the `metrics` feature it does nothing.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        use ::metrics::Unit;
        let counter = |name: &'static str, help: &'static str| {
            ::metrics::describe_counter!(name, Unit::Count, help);
        };
        counter(
            ENQUEUED,
            "Jobs enqueued (not duplicates of unique jobs), by kind and queue.",
        );
        counter(
            CLAIMED,
            "Jobs claimed (attempts started), by kind and queue.",
        );
        counter(SUCCEEDED, "Jobs completed, by kind and queue.");
        counter(RETRIED, "Failed attempts to be retried, by kind and queue.");
        counter(
            SNOOZED,
            "Attempts snoozed by their handler, by kind and queue.",
        );
        counter(
            DEAD_LETTERED,
            "Jobs moved to the dead letters, by kind and queue.",
        );
        counter(
            CANCELLED,
            "Running jobs that ended as cancelled, by kind and queue.",
        );
        counter(
            LEASE_LOST,
            "Leases lost (the job may run again elsewhere), by kind and queue.",
        );
        let histogram = |name: &'static str, help: &'static str| {
            ::metrics::describe_histogram!(name, Unit::Seconds, help);
        };
        histogram(
            HANDLER_DURATION,
            "How long handlers ran, to their result, a panic or a timeout, by kind and queue.",
        );
        histogram(
            START_LATENCY,
            "From enqueue to the start of the first attempt (a delay included), by kind and queue.",
        );
        histogram(CLAIM_DURATION, "One claim round trip of a fetcher.");
        histogram(
            SETTLE_DURATION,
            "One round trip writing a batch of outcomes.",
        );
        ::metrics::describe_gauge!(
            DEPTH,
            Unit::Count,
            "Jobs in the queue (waiting, scheduled, running or retrying; not dead letters), by schema."
        );
        ::metrics::describe_gauge!(DEAD_LETTERS, Unit::Count, "Dead letters, by schema.");
        ::metrics::describe_gauge!(
            GROUPS,
            Unit::Count,
            "Groups (state=all) and groups a claim may take now (state=claimable), by schema."
        );
        ::metrics::describe_gauge!(
            QUEUE_DEPTH,
            Unit::Count,
            "Jobs that may start now (state=ready) and running (state=running), by schema and queue."
        );
        ::metrics::describe_gauge!(
            QUEUE_LAG,
            Unit::Seconds,
            "How long the oldest ready job of the queue has waited to start (0: none ready), by schema and queue."
        );
    }
}

/// The label of a kind nothing registered on this worker.
pub const UNREGISTERED: &str = "unregistered";

/// The labels of a claimed job's metrics: its kind (a registered one, or [`UNREGISTERED`])
/// and the queue of the lane that claimed it. Both are shared, never copied per job.
#[derive(Clone, Debug)]
// (without the feature nothing reads them: they stay, so that callers need no `cfg`)
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Labels {
    pub kind: &'static str,
    pub queue: Arc<str>,
}

macro_rules! counter {
    ($name:expr, $labels:expr) => {{
        #[cfg(feature = "metrics")]
        ::metrics::counter!(
            $name,
            "kind" => $labels.kind,
            "queue" => Arc::clone(&$labels.queue)
        )
        .increment(1);
        #[cfg(not(feature = "metrics"))]
        let _ = ($name, $labels);
    }};
}

macro_rules! histogram {
    ($name:expr, $took:expr) => {{
        #[cfg(feature = "metrics")]
        ::metrics::histogram!($name).record($took.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = ($name, $took);
    }};
    ($name:expr, $took:expr, $labels:expr) => {{
        #[cfg(feature = "metrics")]
        ::metrics::histogram!(
            $name,
            "kind" => $labels.kind,
            "queue" => Arc::clone(&$labels.queue)
        )
        .record($took.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = ($name, $took, $labels);
    }};
}

/// `count` jobs of `kind` were enqueued into `queue`.
pub(crate) fn enqueued(kind: &str, queue: &str, count: u64) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(ENQUEUED, "kind" => kind.to_owned(), "queue" => queue.to_owned())
        .increment(count);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, queue, count);
}

/// A job was claimed.
pub(crate) fn claimed(labels: &Labels) {
    counter!(CLAIMED, labels);
}

/// A job completed (its outcome written as decided).
pub(crate) fn succeeded(labels: &Labels) {
    counter!(SUCCEEDED, labels);
}

/// A failed attempt is to be retried (its outcome written as decided).
pub(crate) fn retried(labels: &Labels) {
    counter!(RETRIED, labels);
}

/// An attempt was snoozed by its handler (its outcome written as decided).
pub(crate) fn snoozed(labels: &Labels) {
    counter!(SNOOZED, labels);
}

/// A job became a dead letter: as decided, or because its outcome was refused.
pub(crate) fn dead_lettered(labels: &Labels) {
    counter!(DEAD_LETTERED, labels);
}

/// A running job ended as cancelled.
pub(crate) fn cancelled(labels: &Labels) {
    counter!(CANCELLED, labels);
}

/// The lease of a job was lost.
pub(crate) fn lease_lost(labels: &Labels) {
    counter!(LEASE_LOST, labels);
}

/// A handler ran for `took`.
pub(crate) fn handler_ran(labels: &Labels, took: Duration) {
    histogram!(HANDLER_DURATION, took, labels);
}

/// A job started its first attempt `latency` after its enqueue.
pub(crate) fn started(labels: &Labels, latency: Duration) {
    histogram!(START_LATENCY, latency, labels);
}

/// A claim round trip took `took`.
pub(crate) fn claim_round_trip(took: Duration) {
    histogram!(CLAIM_DURATION, took);
}

/// A settle round trip took `took`.
pub(crate) fn settle_round_trip(took: Duration) {
    histogram!(SETTLE_DURATION, took);
}

/// The depth of the queue in `schema`, as sampled: its jobs `queued`, its `dead` letters,
/// its `groups` and the `claimable` ones.
#[cfg(feature = "metrics")]
pub(crate) fn depth(schema: &str, queued: i64, dead: i64, groups: i64, claimable: i64) {
    let gauge = |name: &'static str, state: &'static str, value: i64| {
        ::metrics::gauge!(name, "schema" => schema.to_owned(), "state" => state).set(value as f64);
    };
    gauge(DEPTH, "queued", queued);
    ::metrics::gauge!(DEAD_LETTERS, "schema" => schema.to_owned()).set(dead as f64);
    gauge(GROUPS, "all", groups);
    gauge(GROUPS, "claimable", claimable);
}

/// The ready and running jobs of the named queue `queue` in `schema`, and how long its
/// oldest ready job has waited (`lag`, seconds), as sampled.
#[cfg(feature = "metrics")]
pub(crate) fn queue_depth(schema: &str, queue: &str, ready: i64, running: i64, lag: f64) {
    ::metrics::gauge!(
        QUEUE_LAG,
        "schema" => schema.to_owned(),
        "queue" => queue.to_owned()
    )
    .set(lag);
    for (state, value) in [("ready", ready), ("running", running)] {
        ::metrics::gauge!(
            QUEUE_DEPTH,
            "schema" => schema.to_owned(),
            "queue" => queue.to_owned(),
            "state" => state
        )
        .set(value as f64);
    }
}
