//! The dead-letter table: jobs that failed for good, kept for a person to look at.
//!
//! A job lands here after its last attempt, at once on a permanent error
//! ([`JobError::permanent`](crate::JobError::permanent)), or when its payload no longer
//! decodes; its group moves on. Dead letters stay until deleted or retried.

use std::fmt;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use crate::error::DatabaseError;
use crate::job::Job;
use crate::schema::Schema;
use crate::store::{DeadLetterRow, PreparedStatements, Store};
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
#[derive(Clone)]
pub struct DeadLetters {
    store: Store,
}

impl Default for DeadLetters {
    fn default() -> Self {
        Self::new(Schema::default())
    }
}

impl fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetters")
            .field("schema", self.store.schema())
            .finish()
    }
}

impl DeadLetters {
    /// The dead letters of the queue in `schema`.
    pub fn new(schema: Schema) -> Self {
        // never cached: it takes any executor and has no setting, and must work behind a
        // transaction pooler given a transaction (see above)
        Self {
            store: Store::new(schema, PreparedStatements::Unnamed),
        }
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
        let rows = self
            .store
            .dead_letters_list(
                executor,
                query.kind.as_deref(),
                query.before.map(JobId::get),
                i64::from(query.limit),
            )
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
        let row = self.store.dead_letter_get(executor, id.get()).await?;
        Ok(row.map(from_row))
    }

    /// How many dead letters there are.
    ///
    /// # Errors
    /// The database's error.
    pub async fn count<'e, E: PgExecutor<'e>>(&self, executor: E) -> Result<i64, DatabaseError> {
        Ok(self.store.dead_letters_count(executor).await?)
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
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let rows = self.store.dead_letters_retry(executor, &ids).await?;
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
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let deleted = self.store.dead_letters_delete(executor, &ids).await?;
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
        Ok(self
            .store
            .dead_letters_purge_before(executor, before)
            .await?)
    }
}

/// A dead letter as its row gives it.
fn from_row(row: DeadLetterRow) -> DeadLetter {
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
