//! Named queues: list them, read their depth, set them (pause, resume, limits), and their
//! fairness keys' weights.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::{Statement, Store};

pub(super) const LIST: &str =
    "SELECT name, paused_at, concurrency_limit, rate_limit, rate_period_ms, ready,
            running, counts_exact, oldest_ready_at
       FROM @schema@.harel_queues()";

// what the depth sampler reads: `harel_queues`' counts and, by the database's clock, how
// long the oldest ready group has waited (0 when none is ready); one round trip
pub(super) const SAMPLE: &str = "SELECT name, ready, running,
            COALESCE(EXTRACT(EPOCH FROM statement_timestamp() - oldest_ready_at)::float8, 0)
       FROM @schema@.harel_queues()";

pub(super) const DEPTH: &str =
    "SELECT queue, priority, ready, running, retrying, scheduled, counts_exact,
            oldest_ready_at
       FROM @schema@.harel_depth()";

// the same columns as `LIST`, the counts NULL: the queue as it now is, not how busy
pub(super) const SET: &str =
    "SELECT name, paused_at, concurrency_limit, rate_limit, rate_period_ms,
            NULL::bigint, NULL::bigint, NULL::boolean, NULL::timestamptz
       FROM @schema@.harel_set_queue($1, $2, $3, $4, $5, $6, $7)";

pub(super) const FAIR_WEIGHT_SET: &str = "SELECT @schema@.harel_set_fair_weight($1, $2, $3, $4)";

pub(super) const KEY_LIMITS_SET: &str = "SELECT @schema@.harel_set_key_limits($1, $2, $3, $4, $5)";

pub(super) const FAIR_KEYS_LIST: &str =
    "SELECT key, weight, ready, ready_exact, running, running_exact, more, key_limit,
            key_rate_limit, key_rate_period_ms
       FROM @schema@.harel_fair_keys($1, $2, $3)";

/// A row of `harel_fair_keys`: key, weight, ready groups, whether that count is exact,
/// running jobs, whether that count is exact; or the cursor row (key NULL) with whether
/// more keys follow and the queue's limits per key (running, rate, rate period in ms).
pub(crate) type FairKeyRow = (
    Option<String>,
    Option<i32>,
    Option<i64>,
    Option<bool>,
    Option<i64>,
    Option<bool>,
    Option<bool>,
    Option<i32>,
    Option<i32>,
    Option<i64>,
);

/// A row of `harel_queues` (and of `harel_set_queue`, its counts NULL): name, paused at,
/// concurrency limit, rate limit, rate period (ms), ready, running, counts exact, oldest
/// ready at.
pub(crate) type QueueRow = (
    String,
    Option<DateTime<Utc>>,
    Option<i32>,
    Option<i32>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<bool>,
    Option<DateTime<Utc>>,
);

/// A row of the depth sampler's read of `harel_queues`: name, ready, running, the seconds
/// the oldest ready group has waited.
#[cfg(feature = "metrics")]
pub(crate) type QueueSampleRow = (String, Option<i64>, Option<i64>, f64);

/// A row of `harel_depth`: queue, priority, ready, running, retrying, scheduled, counts
/// exact, oldest ready at.
pub(crate) type DepthRow = (String, i16, i64, i64, i64, i64, bool, Option<DateTime<Utc>>);

/// What `harel_set_queue` sets on a queue.
#[derive(Debug)]
pub(crate) struct QueueSettings<'a> {
    /// The queue.
    pub queue: &'a str,
    /// Create it if it does not exist (else an unknown name is refused, SQLSTATE P0002).
    pub create: bool,
    /// Pause (`true`) or resume (`false`); `None` leaves it.
    pub paused: Option<bool>,
    /// Whether the limits below replace the queue's (`false` leaves them).
    pub set_limits: bool,
    /// At most this many running.
    pub concurrency: Option<i32>,
    /// At most this many starts…
    pub rate: Option<i32>,
    /// …per this many milliseconds.
    pub rate_period_ms: Option<i64>,
}

impl Store {
    /// `harel_queues`: every queue of the schema, with its settings and its ready and
    /// running counts.
    pub(crate) async fn queues_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<Vec<QueueRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::QueuesList))
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_queues` as the depth sampler reads it: each queue's name, ready and running
    /// counts, and the seconds its oldest ready group has waited (0: none ready).
    #[cfg(feature = "metrics")]
    pub(crate) async fn queues_sample<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<Vec<QueueSampleRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::QueuesSample))
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_depth`: each queue's depth at each priority level, by state.
    pub(crate) async fn queues_depth<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<Vec<DepthRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::QueuesDepth))
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_set_queue`: sets a queue as `settings` says; returns it as it now is.
    pub(crate) async fn queue_set<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        settings: &QueueSettings<'_>,
    ) -> Result<QueueRow, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::QueueSet))
            .bind(settings.queue)
            .bind(settings.paused)
            .bind(settings.set_limits)
            .bind(settings.concurrency)
            .bind(settings.rate)
            .bind(settings.rate_period_ms)
            .bind(settings.create)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_set_fair_weight`: sets a fairness key's weight in a queue (1 removes it); an
    /// unknown queue is refused (SQLSTATE P0002).
    pub(crate) async fn fair_weight_set<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        queue: &str,
        key: &str,
        weight: i32,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(self.sql(Statement::FairWeightSet))
            .bind(queue)
            .bind(key)
            .bind(weight)
            .bind(false)
            .persistent(self.persistent())
            .execute(executor)
            .await
            .map(drop)
    }

    /// `harel_set_key_limits`: sets or removes the limits on each fairness key of a queue
    /// (running jobs; starts per period in ms); an unknown queue is refused (SQLSTATE P0002).
    pub(crate) async fn key_limits_set<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        queue: &str,
        concurrency: Option<i32>,
        rate: Option<(i32, i64)>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(self.sql(Statement::KeyLimitsSet))
            .bind(queue)
            .bind(concurrency)
            .bind(rate.map(|(starts, _)| starts))
            .bind(rate.map(|(_, per_ms)| per_ms))
            .bind(false)
            .persistent(self.persistent())
            .execute(executor)
            .await
            .map(drop)
    }

    /// `harel_fair_keys`: a page of a queue's fairness keys after `after`, then the cursor
    /// row.
    pub(crate) async fn fair_keys_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        queue: &str,
        after: Option<&str>,
        limit: i32,
    ) -> Result<Vec<FairKeyRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::FairKeysList))
            .bind(queue)
            .bind(after)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }
}
