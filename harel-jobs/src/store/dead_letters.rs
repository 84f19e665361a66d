//! Dead letters: list, look up, count, retry, delete, purge.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, Row as _};

use super::{Statement, Store};

/// The columns of a [`DeadLetterRow`], for `concat!`.
macro_rules! columns {
    () => {
        "id, group_id, kind, payload::text, priority, attempts, last_error, enqueued_at, \
         failed_at, queue"
    };
}

pub(super) const LIST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM @schema@.dead_letters
      WHERE ($1::text IS NULL OR kind = $1) AND ($2::bigint IS NULL OR id < $2)
      ORDER BY id DESC LIMIT $3"
);

pub(super) const GET: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM @schema@.dead_letters WHERE id = $1"
);

pub(super) const COUNT: &str = "SELECT count(*) FROM @schema@.dead_letters";

// at most $3 rows read (by the primary key up to $2): a capped count for a confirmation
pub(super) const COUNT_MATCHING: &str = "SELECT count(*), statement_timestamp() FROM (
         SELECT 1 FROM @schema@.dead_letters
          WHERE ($1::text IS NULL OR kind = $1) AND failed_at <= statement_timestamp()
          LIMIT $2) AS m";

// harel_retry_dead_letters: on Citus the DELETE and harel_publish must be statements of
// their own (one statement touching the table runs whole on the worker node)
pub(super) const RETRY: &str = "SELECT old_id, new_id FROM @schema@.harel_retry_dead_letters($1)";

// functions, not DELETE on the table: a role with DELETE may LOCK the table in any mode
// but ACCESS SHARE (ADR 0039)
pub(super) const DELETE: &str = "SELECT id FROM @schema@.harel_delete_dead_letters($1)";

pub(super) const PURGE_BEFORE: &str = "SELECT @schema@.harel_purge_dead_letters($1, $2)";

/// A dead letter's row: id, group, kind, payload, priority, attempts, last error, enqueued
/// at, failed at, queue.
pub(crate) type DeadLetterRow = (
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

impl Store {
    /// Up to `limit` dead letters, newest first, of `kind` if given, below `before` if
    /// given.
    pub(crate) async fn dead_letters_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        kind: Option<&str>,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<DeadLetterRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::DeadLettersList))
            .bind(kind)
            .bind(before)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// One dead letter by id.
    pub(crate) async fn dead_letter_get<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
    ) -> Result<Option<DeadLetterRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::DeadLetterGet))
            .bind(id)
            .persistent(self.persistent())
            .fetch_optional(executor)
            .await
    }

    /// How many dead letters there are.
    ///
    /// Always by the simple query protocol, whatever the policy: it has no parameters, so
    /// it is one round trip with nothing prepared, which works through a transaction
    /// pooler too, in a transaction or not.
    pub(crate) async fn dead_letters_count<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<i64, sqlx::Error> {
        sqlx::raw_sql(self.sql(Statement::DeadLettersCount))
            .fetch_one(executor)
            .await?
            .try_get(0)
    }

    /// How many dead letters of `kind` (`None`: any) there are, counted up to `cap` (reads
    /// at most `cap` matching rows), and the database's time of the count.
    pub(crate) async fn dead_letters_count_matching<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        kind: Option<&str>,
        cap: i64,
    ) -> Result<(i64, DateTime<Utc>), sqlx::Error> {
        sqlx::query_as(self.sql(Statement::DeadLettersCountMatching))
            .bind(kind)
            .bind(cap)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// Deletes the dead letters `ids` and publishes each again (same group, at its end;
    /// kind, payload, priority, queue and trace context), in one statement
    /// (`harel_retry_dead_letters`), in id order.
    /// Returns `(old id, new id)` for each letter found, in id order.
    pub(crate) async fn dead_letters_retry<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        ids: &[i64],
    ) -> Result<Vec<(i64, i64)>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::DeadLettersRetry))
            .bind(ids)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// Deletes the dead letters `ids` (1 to 1,000; `harel_delete_dead_letters`). Returns the
    /// ids that existed, in id order.
    pub(crate) async fn dead_letters_delete<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        ids: &[i64],
    ) -> Result<Vec<i64>, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::DeadLettersDelete))
            .bind(ids)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// Deletes up to `limit` of the dead letters that failed before `before`, the oldest
    /// failures first (`harel_purge_dead_letters`). Returns how many.
    pub(crate) async fn dead_letters_purge_before<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        before: DateTime<Utc>,
        limit: i32,
    ) -> Result<i32, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::DeadLettersPurgeBefore))
            .bind(before)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }
}
