//! The dead-letter table: jobs that failed for good, kept for a person to look at.
//!
//! A job lands here after its last attempt, at once on a permanent error
//! ([`JobError::permanent`](crate::JobError::permanent)), or when its payload no longer
//! decodes; its group moves on. Dead letters stay until deleted or retried.
//! [`Client::dead_letters`] gives the handle: [`DeadLetters`].

use std::fmt;

use chrono::{DateTime, Utc};
use sqlx::{Acquire, PgExecutor, PgPool, Postgres};

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::job::Job;
use crate::store::{DeadLetterRow, PreparedStatements, Store};
use crate::vocabulary::{JobId, MAX_PAGE, Priority};

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

/// Lists, retries and deletes the dead letters of a client's schema
/// ([`Client::dead_letters`]). It carries the client's pool and schema: each call runs on
/// that pool.
///
/// Each call has an `_in` twin that runs through an executor of the caller's instead (a
/// connection, or `&mut *tx`): to retry or delete dead letters in the same transaction as
/// the application's own writes, or behind a transaction pooler that does not track
/// prepared statements (PgBouncer before 1.21). Its statements are never cached: those with
/// parameters are sent unnamed (one round trip more than a cached statement),
/// [`count`](Self::count) by the simple protocol; only a transaction keeps an unnamed
/// statement's parse and execution on one server connection there, so use the `_in`
/// twins with a transaction (see the guide's
/// ["Behind PgBouncer"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md#behind-pgbouncer)).
///
/// ```no_run
/// use harel_jobs::{Client, DeadLetterQuery};
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::new(pool.clone());
/// let dead = client.dead_letters();
/// for letter in dead.list(&DeadLetterQuery::default()).await? {
///     println!("{} {} failed: {}", letter.id, letter.kind, letter.last_error);
///     dead.retry(letter.id).await?; // back in the queue, attempts start over
/// }
///
/// // in the application's transaction: the retry commits with its own writes, or not at all
/// let mut tx = pool.begin().await?;
/// # let id = harel_jobs::JobId::new(1);
/// dead.retry_in(&mut *tx, id).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DeadLetters {
    pool: PgPool,
    store: Store,
}

impl fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetters")
            .field("schema", self.store.schema())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The dead letters of this client's schema: a handle carrying its pool and schema.
    pub fn dead_letters(&self) -> DeadLetters {
        // never cached, whatever the client's setting: the `_in` twins take any executor
        // and must work behind a transaction pooler given a transaction (see DeadLetters)
        DeadLetters {
            pool: self.pool().clone(),
            store: self
                .store()
                .clone()
                .with_prepared(PreparedStatements::Unnamed),
        }
    }
}

impl DeadLetters {
    /// Lists dead letters, newest first.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn list(&self, query: &DeadLetterQuery) -> Result<Vec<DeadLetter>, ClientError> {
        self.list_in(&self.pool, query).await
    }

    /// [`list`](Self::list) through `executor`.
    ///
    /// # Errors
    /// As [`list`](Self::list).
    pub async fn list_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        query: &DeadLetterQuery,
    ) -> Result<Vec<DeadLetter>, ClientError> {
        let rows = self
            .store
            .dead_letters_list(
                executor,
                query.kind.as_deref(),
                query.before.map(JobId::get),
                i64::from(query.limit),
            )
            .await
            .map_err(DatabaseError::new)?;
        Ok(rows.into_iter().map(from_row).collect())
    }

    /// One dead letter by id.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn get(&self, id: JobId) -> Result<Option<DeadLetter>, ClientError> {
        self.get_in(&self.pool, id).await
    }

    /// [`get`](Self::get) through `executor`.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub async fn get_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: JobId,
    ) -> Result<Option<DeadLetter>, ClientError> {
        let row = self
            .store
            .dead_letter_get(executor, id.get())
            .await
            .map_err(DatabaseError::new)?;
        Ok(row.map(from_row))
    }

    /// How many dead letters there are.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn count(&self) -> Result<i64, ClientError> {
        self.count_in(&self.pool).await
    }

    /// [`count`](Self::count) through `executor`.
    ///
    /// # Errors
    /// As [`count`](Self::count).
    pub async fn count_in<'e, E: PgExecutor<'e>>(&self, executor: E) -> Result<i64, ClientError> {
        Ok(self
            .store
            .dead_letters_count(executor)
            .await
            .map_err(DatabaseError::new)?)
    }

    /// How many dead letters of `kind` (`None`: any kind) there are:
    /// [`Count::Exact`](crate::Count::Exact), or [`Count::AtLeast`](crate::Count::AtLeast)
    /// `cap` when there are more (it reads at most `cap` of them), with the database's time
    /// of the count: the figure a confirmation of a bulk action over a filter shows, and the
    /// bound (`failed_at` up to that time) that keeps the action to the letters counted.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a cap of 0; [`ClientError::Database`].
    pub async fn count_matching(
        &self,
        kind: Option<&str>,
        cap: u32,
    ) -> Result<(crate::Count, DateTime<Utc>), ClientError> {
        if cap == 0 {
            return Err(ClientError::InvalidArgument("a count's cap is at least 1"));
        }
        let cap = i64::from(cap);
        let (n, at) = self
            .store
            .dead_letters_count_matching(&self.pool, kind, cap)
            .await
            .map_err(DatabaseError::new)?;
        let count = if n >= cap {
            crate::Count::AtLeast(n)
        } else {
            crate::Count::Exact(n)
        };
        Ok((count, at))
    }

    /// Puts a dead letter back in the queue, atomically: same group (at its end; a job
    /// that had no group gets a group of its own again), kind, payload, priority, queue and
    /// trace context, attempts starting over. Returns its new id, or `None` if there is no
    /// dead letter with this id.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn retry(&self, id: JobId) -> Result<Option<JobId>, ClientError> {
        self.retry_in(&self.pool, id).await
    }

    /// [`retry`](Self::retry) through `executor` (in the caller's transaction, the retry
    /// commits with it).
    ///
    /// # Errors
    /// As [`retry`](Self::retry).
    pub async fn retry_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: JobId,
    ) -> Result<Option<JobId>, ClientError> {
        Ok(self
            .retry_many_in(executor, &[id])
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
    /// [`ClientError::Database`]; then nothing is retried (a letter whose group now belongs
    /// to another queue fails the whole statement, SQLSTATE `HJ001`).
    pub async fn retry_many(&self, ids: &[JobId]) -> Result<Vec<(JobId, JobId)>, ClientError> {
        self.retry_many_in(&self.pool, ids).await
    }

    /// [`retry_many`](Self::retry_many) through `executor`.
    ///
    /// # Errors
    /// As [`retry_many`](Self::retry_many).
    pub async fn retry_many_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        ids: &[JobId],
    ) -> Result<Vec<(JobId, JobId)>, ClientError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let rows = self
            .store
            .dead_letters_retry(executor, &ids)
            .await
            .map_err(DatabaseError::new)?;
        Ok(rows
            .into_iter()
            .map(|(old, new)| (JobId::new(old), JobId::new(new)))
            .collect())
    }

    /// Deletes a dead letter. Returns whether it existed.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn delete(&self, id: JobId) -> Result<bool, ClientError> {
        self.delete_in(&self.pool, id).await
    }

    /// [`delete`](Self::delete) through `executor`.
    ///
    /// # Errors
    /// As [`delete`](Self::delete).
    pub async fn delete_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: JobId,
    ) -> Result<bool, ClientError> {
        Ok(!self.delete_many_in(executor, &[id]).await?.is_empty())
    }

    /// Deletes many dead letters (at most [`MAX_PAGE`], 1,000) in one statement
    /// (`harel_delete_dead_letters`). Returns the ids that existed (and are gone now), in
    /// id order.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for more than 1,000 ids; [`ClientError::Database`];
    /// then nothing is deleted.
    pub async fn delete_many(&self, ids: &[JobId]) -> Result<Vec<JobId>, ClientError> {
        self.delete_many_in(&self.pool, ids).await
    }

    /// [`delete_many`](Self::delete_many) through `executor`.
    ///
    /// # Errors
    /// As [`delete_many`](Self::delete_many).
    pub async fn delete_many_in<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        ids: &[JobId],
    ) -> Result<Vec<JobId>, ClientError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if ids.len() > MAX_PAGE as usize {
            return Err(ClientError::InvalidArgument(
                "at most 1,000 dead letters a delete",
            ));
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let deleted = self
            .store
            .dead_letters_delete(executor, &ids)
            .await
            .map_err(DatabaseError::new)?;
        Ok(deleted.into_iter().map(JobId::new).collect())
    }

    /// Deletes the dead letters that failed before `before`, the oldest failures first,
    /// 1,000 per statement (`harel_purge_dead_letters`), each its own
    /// transaction. Returns how many.
    ///
    /// # Errors
    /// [`ClientError::Database`]; the batches before the failing one stay deleted.
    pub async fn purge(&self, before: DateTime<Utc>) -> Result<u64, ClientError> {
        self.purge_in(&self.pool, before).await
    }

    /// [`purge`](Self::purge) on one connection: a pool's (each batch its own
    /// transaction), or `&mut *tx` (all of them in the caller's transaction).
    ///
    /// # Errors
    /// As [`purge`](Self::purge).
    pub async fn purge_in<'c, A: Acquire<'c, Database = Postgres>>(
        &self,
        connection: A,
        before: DateTime<Utc>,
    ) -> Result<u64, ClientError> {
        let mut connection = connection.acquire().await.map_err(DatabaseError::new)?;
        let mut purged: u64 = 0;
        loop {
            let deleted = self
                .store
                .dead_letters_purge_before(&mut *connection, before, PURGE_BATCH)
                .await
                .map_err(DatabaseError::new)?;
            purged += u64::try_from(deleted).unwrap_or(0);
            // a short batch: none left that failed before `before`
            if deleted < PURGE_BATCH {
                return Ok(purged);
            }
        }
    }
}

/// The most dead letters one statement of [`DeadLetters::purge`] deletes: each statement a
/// short transaction of its own when purging through a pool.
const PURGE_BATCH: i32 = 1_000;

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
