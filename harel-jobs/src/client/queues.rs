//! Named queues as an operator sees them: list them, see how deep each is, pause and
//! resume them, limit them across the fleet ([`Client::queues`], [`Client::depth`],
//! [`Client::pause`], [`Client::resume`], [`Client::set_limits`]).

use std::time::Duration;

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::store::{DepthRow, QueueRow, QueueSettings};
use crate::vocabulary::Count;
use crate::vocabulary::{Priority, QUEUE_NAME_RULE, validate_queue_name};
use chrono::{DateTime, Utc};

/// At most `starts` jobs of a queue start per `per`, across every worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// How many starts (1 to 1,000,000).
    pub starts: u32,
    /// Per how long (1 ms to 24 h).
    pub per: Duration,
}

/// The limits of a named queue across every worker process ([`Client::set_limits`]).
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::QueueLimits;
///
/// let partner_api = QueueLimits::none().concurrency(5).rate(10, Duration::from_secs(1));
/// assert_eq!(partner_api.concurrency_limit(), Some(5));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QueueLimits {
    concurrency: Option<u32>,
    rate: Option<RateLimit>,
}

impl QueueLimits {
    /// No limit: as many run as the workers' concurrency allows.
    pub fn none() -> Self {
        Self::default()
    }

    /// At most `running` of the queue's jobs run at once, over every worker (1 to
    /// 1,000,000).
    pub fn concurrency(mut self, running: u32) -> Self {
        self.concurrency = Some(running);
        self
    }

    /// At most `starts` of the queue's jobs start per `per`, over every worker; a burst of
    /// up to `starts` is allowed after a quiet period.
    pub fn rate(mut self, starts: u32, per: Duration) -> Self {
        self.rate = Some(RateLimit { starts, per });
        self
    }

    /// The concurrency limit, if any.
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.concurrency
    }

    /// The rate limit, if any.
    pub fn rate_limit(&self) -> Option<RateLimit> {
        self.rate
    }
}

/// A named queue: its settings and how busy it is ([`Client::queues`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// When it was paused (`None`: it runs).
    pub paused_at: Option<DateTime<Utc>>,
    /// Its limits across every worker.
    pub limits: QueueLimits,
    /// Groups whose next job may start now (jobs waiting, or retrying and due). Counted up
    /// to 10,000 per priority level, then a lower bound ([`Count::AtLeast`]).
    pub ready: Count,
    /// Since when the queue's longest-waiting ready group has been claimable (`None`: no
    /// group is ready): how far behind the workers are.
    pub oldest_ready_at: Option<DateTime<Utc>>,
    /// Jobs running now (live leases). Counted among the first 1,000 leased, parked or
    /// scheduled groups per priority level (soonest first), then a lower bound.
    pub running: Count,
}

impl QueueInfo {
    /// Whether it is paused.
    pub fn is_paused(&self) -> bool {
        self.paused_at.is_some()
    }
}

/// How deep one named queue is at one priority level, by state, as [`Client::depth`] reads
/// it. Counted in groups, each by its first job (the one that runs next; the jobs behind it
/// in its group wait for it): for jobs without a group, one group is one job.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LevelDepth {
    /// The queue.
    pub queue: String,
    /// The priority level.
    pub priority: Priority,
    /// Groups whose next job may start now (waiting for a worker, a retry that is due, or
    /// a lapsed lease).
    pub ready: Count,
    /// Jobs running (live leases).
    pub running: Count,
    /// Groups parked after a failed attempt, until their backoff ends.
    pub retrying: Count,
    /// Groups whose next job is scheduled for later (a delay, a snooze).
    pub scheduled: Count,
    /// Since when the longest waiting ready group has been claimable (`None`: none is).
    pub oldest_ready_at: Option<DateTime<Utc>>,
}

fn level_depth(row: DepthRow) -> LevelDepth {
    let (queue, priority, ready, running, retrying, scheduled, exact, oldest_ready_at) = row;
    let count = |n: i64| {
        if exact {
            Count::Exact(n)
        } else {
            Count::AtLeast(n)
        }
    };
    LevelDepth {
        queue,
        priority: Priority::from_db(priority),
        ready: count(ready),
        running: count(running),
        retrying: count(retrying),
        scheduled: count(scheduled),
        oldest_ready_at,
    }
}

impl Client {
    /// The depth of each named queue at each priority level, by state: one entry per queue
    /// and level that holds any group, queues in the order they were created, the highest
    /// priority first. One round trip of bounded work: ready groups are counted up to
    /// 10,000 per queue and level, the others among the first 1,000 (soonest due); past a
    /// cap the entry's counts are [`Count::AtLeast`].
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn depth(&self) -> Result<Vec<LevelDepth>, ClientError> {
        let rows = self
            .store()
            .queues_depth(self.pool())
            .await
            .map_err(DatabaseError::new)?;
        Ok(rows.into_iter().map(level_depth).collect())
    }

    /// Every queue of this schema (the default one, and each named queue a job was
    /// published into or an operator set), with its settings, ready and running counts.
    /// One round trip; its cost does not grow with the queues' depth.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn queues(&self) -> Result<Vec<QueueInfo>, ClientError> {
        let rows = self
            .store()
            .queues_list(self.pool())
            .await
            .map_err(DatabaseError::new)?;
        Ok(rows.into_iter().map(queue_info).collect())
    }

    /// Creates the named queue if it does not exist yet (a queue is otherwise created by
    /// the first job into it), so that it can be paused or limited before any job goes to
    /// it. Returns the queue as it now is (counts not read: zero).
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for an invalid name, [`ClientError::Database`]
    /// (also past 1,000 named queues per schema).
    pub async fn create_queue(&self, queue: &str) -> Result<QueueInfo, ClientError> {
        self.set_queue(queue, None, None, true).await
    }

    /// Pauses the named queue: no worker starts its jobs until it is resumed (each worker's
    /// next claim sees it); running jobs finish, and enqueueing into it still works.
    /// Returns the queue as it now is (counts not read: zero). A queue that does not exist
    /// (no job went to it, and it was not created) is refused: create it first with
    /// [`create_queue`](Self::create_queue) to pause it before its first job.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for an invalid name, [`ClientError::UnknownQueue`],
    /// [`ClientError::Database`].
    pub async fn pause(&self, queue: &str) -> Result<QueueInfo, ClientError> {
        self.set_queue(queue, Some(true), None, false).await
    }

    /// Resumes the named queue: workers claim it again (at once where they listen, else
    /// within their poll interval).
    ///
    /// # Errors
    /// As [`pause`](Self::pause).
    pub async fn resume(&self, queue: &str) -> Result<QueueInfo, ClientError> {
        self.set_queue(queue, Some(false), None, false).await
    }

    /// Sets the named queue's limits across every worker (replacing the ones it had;
    /// [`QueueLimits::none`] removes them). The claims of a limited queue take the queue's
    /// lock one at a time; other queues never wait for it. Jobs that were running when a
    /// concurrency limit was first set are not counted against it. A queue that does not
    /// exist is refused, as by [`pause`](Self::pause).
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for an invalid name or a limit out of range,
    /// [`ClientError::UnknownQueue`], [`ClientError::Database`].
    pub async fn set_limits(
        &self,
        queue: &str,
        limits: QueueLimits,
    ) -> Result<QueueInfo, ClientError> {
        self.set_queue(queue, None, Some(limits), false).await
    }

    async fn set_queue(
        &self,
        queue: &str,
        paused: Option<bool>,
        limits: Option<QueueLimits>,
        create: bool,
    ) -> Result<QueueInfo, ClientError> {
        validate_queue_name(queue).map_err(|_| ClientError::InvalidArgument(QUEUE_NAME_RULE))?;
        let given = limits.unwrap_or_default();
        let concurrency =
            concurrency_arg(given.concurrency, "a concurrency limit is 1 to 1,000,000")?;
        let rate = rate_arg(
            given.rate,
            "a rate limit is 1 to 1,000,000 starts per 1 ms to 24 h",
        )?;
        let settings = QueueSettings {
            queue,
            create,
            paused,
            set_limits: limits.is_some(),
            concurrency,
            rate: rate.map(|(starts, _)| starts),
            rate_period_ms: rate.map(|(_, per)| per),
        };
        let row = self
            .store()
            .queue_set(self.pool(), &settings)
            .await
            .map_err(|e| queue_error(queue, e))?;
        Ok(queue_info(row))
    }
}

/// A database error of an operator's change to a queue: [`ClientError::UnknownQueue`] for
/// a queue that does not exist (SQLSTATE P0002, from `harel_queue_id`).
pub(super) fn queue_error(queue: &str, error: sqlx::Error) -> ClientError {
    let error = DatabaseError::new(error);
    if error.code().as_deref() == Some("P0002") {
        ClientError::UnknownQueue(queue.to_owned())
    } else {
        ClientError::Database(error)
    }
}

/// A concurrency limit (of a queue, or of each key) as the database takes it: 1 to
/// 1,000,000, else `error`.
pub(super) fn concurrency_arg(
    limit: Option<u32>,
    error: &'static str,
) -> Result<Option<i32>, ClientError> {
    match limit {
        Some(n @ 1..=1_000_000) => Ok(Some(n as i32)),
        Some(_) => Err(ClientError::InvalidArgument(error)),
        None => Ok(None),
    }
}

/// A rate limit (of a queue, or of each key) as the database takes it, (starts, period in
/// ms): 1 to 1,000,000 starts per 1 ms to 24 h, else `error`.
pub(super) fn rate_arg(
    rate: Option<RateLimit>,
    error: &'static str,
) -> Result<Option<(i32, i64)>, ClientError> {
    match rate {
        Some(RateLimit { starts, per })
            if (1..=1_000_000).contains(&starts)
                && per >= Duration::from_millis(1)
                && per <= Duration::from_secs(86_400) =>
        {
            Ok(Some((starts as i32, per.as_millis() as i64)))
        }
        Some(_) => Err(ClientError::InvalidArgument(error)),
        None => Ok(None),
    }
}

/// A rate limit as the database stores it (starts, period in ms), if both are set.
pub(super) fn rate_from_row(starts: Option<i32>, period_ms: Option<i64>) -> Option<RateLimit> {
    let (starts, ms) = starts.zip(period_ms)?;
    Some(RateLimit {
        starts: u32::try_from(starts).ok()?,
        per: Duration::from_millis(u64::try_from(ms).ok()?),
    })
}

fn queue_info(row: QueueRow) -> QueueInfo {
    let (name, paused_at, concurrency, rate, period_ms, ready, running, exact, oldest) = row;
    let count = |n: Option<i64>| match exact {
        Some(false) => Count::AtLeast(n.unwrap_or(0)),
        _ => Count::Exact(n.unwrap_or(0)),
    };
    QueueInfo {
        name,
        paused_at,
        limits: QueueLimits {
            concurrency: concurrency.and_then(|n| u32::try_from(n).ok()),
            rate: rate_from_row(rate, period_ms),
        },
        ready: count(ready),
        oldest_ready_at: oldest,
        running: count(running),
    }
}
