//! Jobs: publish, claim, look up, list, cancel.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

use super::{Statement, Store};

pub(super) const PUBLISH: &str = "SELECT s FROM @schema@.harel_publish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
     $12, $13, $14) AS s";

pub(super) const CLAIM: &str = "SELECT group_id, seq, kind, payload, attempt, priority, enqueued_at, trace_context \
     FROM @schema@.harel_claim($1, $2, $3, $4, $5, $6, $7)";

pub(super) const GET: &str =
    "SELECT state, group_id, kind, payload, priority, attempts, enqueued_at, at,
            started_at, finished_at, last_error, cancel_reason, cancel_requested, queue,
            fair_key
       FROM @schema@.harel_job($1)";

pub(super) const LIST: &str =
    "SELECT id, state, group_id, kind, payload, priority, attempts, enqueued_at, at,
            started_at, finished_at, last_error, cancel_reason, cancel_requested, queue,
            fair_key
       FROM @schema@.harel_list_jobs($1, $2, $3, $4, $5, $6)";

pub(super) const LIST_NEWEST: &str =
    "SELECT id, state, group_id, kind, payload, priority, attempts, enqueued_at, at,
            started_at, finished_at, last_error, cancel_reason, cancel_requested, queue,
            fair_key
       FROM @schema@.harel_list_jobs_newest($1, $2, $3, $4, $5, $6)";

pub(super) const CANCEL: &str = "SELECT @schema@.harel_cancel($1, $2, $3)";

pub(super) const RUN_NOW: &str = "SELECT @schema@.harel_run_now($1)";

pub(super) const PARENTS: &str = "SELECT parent_id FROM @schema@.harel_job_parents($1, $2)";

pub(super) const STEPS: &str =
    "SELECT name, bytes, recorded_at FROM @schema@.harel_job_steps($1, $2)";

pub(super) const ATTEMPTS: &str =
    "SELECT attempt, started_at, ended_at, outcome, worker, host, pid, error
       FROM @schema@.harel_job_attempts($1)";

/// One attempt as `harel_job_attempts` returns it: number, started at, ended at, outcome,
/// worker, its host and pid, error.
pub(crate) type AttemptRow = (
    i32,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    String,
    Option<Uuid>,
    Option<String>,
    Option<i32>,
    Option<String>,
);

/// The columns of a batch for `harel_publish`, one element per message, in publish order.
/// The optional columns are NULL (`None`) unless some message of the batch has a value,
/// so that the common publish binds nothing more.
#[derive(Debug, Default)]
pub(crate) struct Publish<'a> {
    /// Group ids (`None`: a group of its own, named after the message's seq).
    pub groups: Vec<Option<&'a str>>,
    /// Job kinds.
    pub kinds: Vec<&'a str>,
    /// JSON payloads.
    pub payloads: Vec<&'a str>,
    /// Priorities, 0 to 4.
    pub priorities: Vec<i16>,
    /// Not before this time (caller's clock), if set.
    pub not_before: Vec<Option<DateTime<Utc>>>,
    /// Not before this many milliseconds from now (database clock), if set.
    pub delays: Vec<Option<i64>>,
    /// Unique keys.
    pub unique_keys: Option<Vec<Option<&'a str>>>,
    /// How long each unique key is held after completion, in milliseconds.
    pub unique_holds: Option<Vec<Option<i64>>>,
    /// Named queues (`None`: the default queue).
    pub queues: Option<Vec<Option<&'a str>>>,
    /// Trace contexts.
    pub trace_contexts: Option<Vec<Option<&'a str>>>,
    /// Fairness keys (`None`: the shared key `""`).
    pub fair_keys: Option<Vec<Option<&'a str>>>,
    /// Per dependency, the waiting message's position in the batch (from 1).
    pub after_of: Option<Vec<i32>>,
    /// Per dependency, the parent: a job id, or minus an earlier message's position.
    pub after: Option<Vec<i64>>,
    /// Per message, whether it runs after a parent that failed.
    pub run_after_failure: Option<Vec<bool>>,
}

/// What `harel_claim` is asked for.
#[derive(Debug)]
pub(crate) struct Claim<'a> {
    /// The fencing token the leases carry.
    pub token: Uuid,
    /// How long the leases last, in milliseconds (database clock).
    pub lease_ms: i64,
    /// How many groups to lease at most.
    pub limit: i32,
    /// The priority floor.
    pub min_priority: i32,
    /// Where a publisher's `NOTIFY` said a group was created (microseconds since the
    /// epoch), for the claim to look from there too.
    pub hint: Option<i64>,
    /// The queue.
    pub queue: &'a str,
    /// How long to wait for the claims of a limited queue before it, in milliseconds
    /// (`None`: the function's default).
    pub max_wait_ms: Option<i32>,
}

/// A row of `harel_claim`: group, seq, kind, payload, attempt, priority, enqueued at,
/// trace context.
pub(crate) type ClaimRow = (
    String,
    i64,
    String,
    String,
    i32,
    i16,
    DateTime<Utc>,
    Option<String>,
);

/// A row of `harel_job`: state, group, kind, payload, priority, attempts, enqueued at, at,
/// started at, finished at, last error, cancel reason, cancel requested, queue, fairness
/// key.
pub(crate) type JobRow = (
    String,
    String,
    String,
    String,
    Option<i16>,
    Option<i32>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<String>,
    Option<String>,
    Option<bool>,
    Option<String>,
    Option<String>,
);

/// A row of `harel_list_jobs`: its id, then `harel_job`'s columns (all NULL in the cursor
/// row).
pub(crate) type ListRow = (
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i16>,
    Option<i32>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    Option<String>,
    Option<String>,
    Option<bool>,
    Option<String>,
    Option<String>,
);

/// Which jobs `harel_list_jobs` lists, and from where.
#[derive(Debug)]
pub(crate) struct JobsFilter<'a> {
    /// `queued`, `waiting`, … (`None`: any state).
    pub state: Option<&'static str>,
    /// Only this kind.
    pub kind: Option<&'a str>,
    /// Only this group.
    pub group: Option<&'a str>,
    /// Only ids after this one in the listing's order (above it; below it newest first).
    pub after: Option<i64>,
    /// At most this many jobs.
    pub limit: i32,
    /// Only this queue.
    pub queue: Option<&'a str>,
    /// Newest first (`harel_list_jobs_newest`) rather than oldest first.
    pub newest_first: bool,
}

impl Store {
    /// `harel_job_parents`: up to `limit` + 1 jobs the job still waits for, in id order.
    pub(crate) async fn job_parents<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
        limit: i32,
    ) -> Result<Vec<i64>, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::JobParents))
            .bind(id)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_job_steps`: up to `limit` + 1 durable steps the job recorded (name, bytes,
    /// recorded at), in name order.
    pub(crate) async fn job_steps<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
        limit: i32,
    ) -> Result<Vec<(String, i32, DateTime<Utc>)>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::JobSteps))
            .bind(id)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_job_attempts`: the job's attempts, newest first (at most 100).
    pub(crate) async fn job_attempts<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
    ) -> Result<Vec<AttemptRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::JobAttempts))
            .bind(id)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_publish`: appends a batch of messages to their groups, in one round trip.
    /// Returns one seq per message, in order; a unique message whose key was held gets the
    /// holder's seq negated.
    pub(crate) async fn jobs_publish<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        batch: Publish<'_>,
    ) -> Result<Vec<i64>, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::JobsPublish))
            .bind(batch.groups)
            .bind(batch.kinds)
            .bind(batch.payloads)
            .bind(batch.priorities)
            .bind(batch.not_before)
            .bind(batch.delays)
            .bind(batch.unique_keys)
            .bind(batch.unique_holds)
            .bind(batch.queues)
            .bind(batch.trace_contexts)
            .bind(batch.fair_keys)
            .bind(batch.after_of)
            .bind(batch.after)
            .bind(batch.run_after_failure)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_claim`: leases up to `claim.limit` groups and returns the head message of
    /// each.
    pub(crate) async fn jobs_claim<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        claim: &Claim<'_>,
    ) -> Result<Vec<ClaimRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::JobsClaim))
            .bind(claim.token)
            .bind(claim.lease_ms)
            .bind(claim.limit)
            .bind(claim.min_priority)
            .bind(claim.hint)
            .bind(claim.queue)
            .bind(claim.max_wait_ms)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_job`: one job's state and facts, if a job has this id.
    pub(crate) async fn job_get<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
    ) -> Result<Option<JobRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::JobGet))
            .bind(id)
            .persistent(self.persistent())
            .fetch_optional(executor)
            .await
    }

    /// `harel_list_jobs` (or `harel_list_jobs_newest`): a page of jobs in id order (or
    /// descending) as `filter` says, and a cursor row (its id the next page's start, its
    /// other columns NULL) when there may be more.
    pub(crate) async fn jobs_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        filter: &JobsFilter<'_>,
    ) -> Result<Vec<ListRow>, sqlx::Error> {
        let statement = if filter.newest_first {
            Statement::JobsListNewest
        } else {
            Statement::JobsList
        };
        sqlx::query_as(self.sql(statement))
            .bind(filter.state)
            .bind(filter.kind)
            .bind(filter.group)
            .bind(filter.after)
            .bind(filter.limit)
            .bind(filter.queue)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_run_now`: makes a retrying or scheduled job due now. Returns what it did:
    /// `due`, `behind`, `running`, `not_waiting`, `finished` or `not_found`.
    pub(crate) async fn job_run_now<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
    ) -> Result<String, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::JobRunNow))
            .bind(id)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_cancel`: cancels one job (kept `keep_ms` in the history). Returns what it
    /// did: `cancelled`, `requested`, `completed`, `dead`, `already_cancelled` or
    /// `not_found`.
    pub(crate) async fn job_cancel<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
        reason: Option<&str>,
        keep_ms: i64,
    ) -> Result<String, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::JobCancel))
            .bind(id)
            .bind(reason)
            .bind(keep_ms)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }
}
