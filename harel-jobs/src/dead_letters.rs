//! The dead-letter table: jobs that failed for good, kept for a person to look at.
//!
//! A job lands here after its last attempt, at once on a permanent error
//! ([`JobError::permanent`](crate::JobError::permanent)), or when its payload no longer
//! decodes; its group moves on. Dead letters stay until deleted or retried.

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, PgExecutor, Row as _};

use crate::error::DatabaseError;
use crate::job::Job;
use crate::schema::Schema;
use crate::vocabulary::JobId;
use crate::vocabulary::Priority;

/// One dead job.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DeadLetter {
    /// Its id (the id it had in the queue).
    pub id: JobId,
    /// Its group.
    pub group: String,
    /// Its kind.
    pub kind: String,
    /// Its JSON payload.
    pub payload: String,
    /// Its priority.
    pub priority: Priority,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub last_error: String,
    /// When it was enqueued.
    pub enqueued_at: DateTime<Utc>,
    /// When it was given up on.
    pub failed_at: DateTime<Utc>,
    /// Its queue (where a retry puts it back).
    pub queue: String,
}

impl DeadLetter {
    /// Decodes the payload as job type `J`.
    ///
    /// # Errors
    /// The decoder's error.
    pub fn decode<J: Job>(&self) -> Result<J, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }
}

/// Which dead letters to list: newest first, optionally of one kind, `limit` at a time,
/// continuing below `before`.
#[derive(Clone, Debug)]
pub struct DeadLetterQuery {
    /// Only this kind.
    pub kind: Option<String>,
    /// Only ids below this one (the last id of the previous page).
    pub before: Option<JobId>,
    /// At most this many (default 100).
    pub limit: u32,
}

impl Default for DeadLetterQuery {
    fn default() -> Self {
        Self {
            kind: None,
            before: None,
            limit: 100,
        }
    }
}

/// Lists, retries and deletes dead letters of one schema.
///
/// Its statements are never cached: those with parameters are sent unnamed (one round trip
/// more than a cached statement), [`count`](Self::count) by the simple protocol. So it works
/// behind a transaction pooler such as PgBouncer 1.18, given a transaction (`&mut *tx`):
/// only a transaction keeps an unnamed statement's parse and execution on one server
/// connection (see the README's "Behind PgBouncer").
///
/// ```no_run
/// use harel_jobs::{DeadLetterQuery, DeadLetters};
/// # async fn example(pool: sqlx::PgPool) -> Result<(), harel_jobs::DatabaseError> {
/// let dead = DeadLetters::default();
/// for letter in dead.list(&pool, &DeadLetterQuery::default()).await? {
///     println!("{} {} failed: {}", letter.id, letter.kind, letter.last_error);
///     dead.retry(&pool, letter.id).await?; // back in the queue, attempts start over
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct DeadLetters {
    schema: Schema,
}

type Row = (
    i64,
    String,
    String,
    String,
    i16,
    i32,
    String,
    DateTime<Utc>,
    DateTime<Utc>,
    String,
);

const COLUMNS: &str = "id, group_id, kind, payload::text, priority, attempts, last_error, \
                       enqueued_at, failed_at, queue";

impl DeadLetters {
    /// The dead letters of the queue in `schema`.
    pub fn new(schema: Schema) -> Self {
        Self { schema }
    }

    fn sql(&self, template: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(self.schema.render(&template.replace("@columns@", COLUMNS)))
    }

    /// Lists dead letters, newest first.
    ///
    /// # Errors
    /// The database's error.
    pub async fn list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        query: &DeadLetterQuery,
    ) -> Result<Vec<DeadLetter>, DatabaseError> {
        let rows: Vec<Row> = sqlx::query_as(self.sql(
            "SELECT @columns@ FROM @schema@.dead_letters
              WHERE ($1::text IS NULL OR kind = $1) AND ($2::bigint IS NULL OR id < $2)
              ORDER BY id DESC LIMIT $3",
        ))
        .bind(query.kind.as_deref())
        .bind(query.before.map(JobId::get))
        .bind(i64::from(query.limit))
        .persistent(false)
        .fetch_all(executor)
        .await?;
        Ok(rows.into_iter().map(from_row).collect())
    }

    /// One dead letter by id.
    ///
    /// # Errors
    /// The database's error.
    pub async fn get<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: JobId,
    ) -> Result<Option<DeadLetter>, DatabaseError> {
        let row: Option<Row> =
            sqlx::query_as(self.sql("SELECT @columns@ FROM @schema@.dead_letters WHERE id = $1"))
                .bind(id.get())
                .persistent(false)
                .fetch_optional(executor)
                .await?;
        Ok(row.map(from_row))
    }

    /// How many dead letters there are.
    ///
    /// # Errors
    /// The database's error.
    pub async fn count<'e, E: PgExecutor<'e>>(&self, executor: E) -> Result<i64, DatabaseError> {
        Ok(
            sqlx::raw_sql(self.sql("SELECT count(*) FROM @schema@.dead_letters"))
                .fetch_one(executor)
                .await?
                .try_get(0)?,
        )
    }

    /// Puts a dead letter back in the queue, atomically: same group (at its end; a job
    /// that had no group gets a group of its own again), kind, payload, priority, queue and
    /// trace context, attempts starting over. Returns its new id, or `None` if there is no
    /// dead letter with this id.
    ///
    /// # Errors
    /// The database's error.
    pub async fn retry<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: JobId,
    ) -> Result<Option<JobId>, DatabaseError> {
        Ok(self
            .retry_many(executor, &[id])
            .await?
            .first()
            .map(|&(_, new_id)| new_id))
    }

    /// Puts many dead letters back in the queue in one statement (one round trip), all or
    /// none: each as [`retry`](Self::retry) does, in id order, so letters of one group keep
    /// their order. Returns `(old id, new id)` for each letter found, in id order; ids with
    /// no dead letter are left out.
    ///
    /// # Errors
    /// The database's error; then nothing is retried (a letter whose group now belongs to
    /// another queue fails the whole statement, SQLSTATE `HJ001`).
    pub async fn retry_many<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        ids: &[JobId],
    ) -> Result<Vec<(JobId, JobId)>, DatabaseError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // one harel_publish over arrays in id order (its ids come back in that order); a
        // letter of a job without a group (its group named as `own_group` names them, which
        // a caller may not use) goes back without one, into a group of its own
        let rows: Vec<(i64, i64)> = sqlx::query_as(self.sql(
            "WITH d AS (DELETE FROM @schema@.dead_letters WHERE id = ANY($1)
                        RETURNING id, group_id, kind, payload, priority, queue,
                                  trace_context),
                  a AS (SELECT array_agg(id ORDER BY id) AS ids,
                               array_agg(CASE WHEN group_id !~ '^own:[0-9]{19}$'
                                              THEN group_id END ORDER BY id) AS groups,
                               array_agg(kind ORDER BY id) AS kinds,
                               array_agg(payload::text ORDER BY id) AS payloads,
                               array_agg(priority ORDER BY id) AS priorities,
                               array_agg(queue ORDER BY id) AS queues,
                               array_agg(trace_context ORDER BY id) AS traces,
                               count(*)::int AS n
                          FROM d)
             SELECT a.ids[p.n], p.s
               FROM a, LATERAL @schema@.harel_publish(
                   a.groups, a.kinds, a.payloads, a.priorities,
                   array_fill(NULL::timestamptz, ARRAY[a.n]),
                   array_fill(NULL::bigint, ARRAY[a.n]), NULL, NULL, a.queues, a.traces)
                   WITH ORDINALITY AS p (s, n)
              WHERE a.n > 0
              ORDER BY p.n",
        ))
        .bind(ids.iter().map(|id| id.get()).collect::<Vec<_>>())
        .persistent(false)
        .fetch_all(executor)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(old, new)| (JobId::new(old), JobId::new(new)))
            .collect())
    }

    /// Deletes a dead letter. Returns whether it existed.
    ///
    /// # Errors
    /// The database's error.
    pub async fn delete<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: JobId,
    ) -> Result<bool, DatabaseError> {
        Ok(!self.delete_many(executor, &[id]).await?.is_empty())
    }

    /// Deletes many dead letters in one statement. Returns the ids that existed (and are
    /// gone now), in id order.
    ///
    /// # Errors
    /// The database's error; then nothing is deleted.
    pub async fn delete_many<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        ids: &[JobId],
    ) -> Result<Vec<JobId>, DatabaseError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let deleted: Vec<i64> = sqlx::query_scalar(self.sql(
            "WITH d AS (DELETE FROM @schema@.dead_letters WHERE id = ANY($1) RETURNING id)
             SELECT id FROM d ORDER BY id",
        ))
        .bind(ids.iter().map(|id| id.get()).collect::<Vec<_>>())
        .persistent(false)
        .fetch_all(executor)
        .await?;
        Ok(deleted.into_iter().map(JobId::new).collect())
    }

    /// Deletes the dead letters that failed before `before`. Returns how many.
    ///
    /// # Errors
    /// The database's error.
    pub async fn purge<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        before: DateTime<Utc>,
    ) -> Result<u64, DatabaseError> {
        let deleted =
            sqlx::query(self.sql("DELETE FROM @schema@.dead_letters WHERE failed_at < $1"))
                .bind(before)
                .persistent(false)
                .execute(executor)
                .await?;
        Ok(deleted.rows_affected())
    }
}

fn from_row(row: Row) -> DeadLetter {
    let (id, group, kind, payload, priority, attempts, last_error, enqueued_at, failed_at, queue) =
        row;
    DeadLetter {
        id: JobId::new(id),
        group,
        kind,
        payload,
        priority: Priority::from_db(priority),
        attempts: attempts.max(0) as u32,
        last_error,
        enqueued_at,
        failed_at,
        queue,
    }
}
