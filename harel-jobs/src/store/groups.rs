//! Groups: list them, look one up, rank them, cancel one's jobs.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::{Statement, Store};

pub(super) const LIST: &str =
    "SELECT group_id, status, priority, available_at, head_id, head_attempts,
            jobs, jobs_capped, cancel_requested, queue
       FROM @schema@.harel_list_groups($1, $2, $3)";

pub(super) const TOP: &str =
    "SELECT group_id, status, priority, available_at, head_id, head_attempts,
            jobs, jobs_capped, cancel_requested, queue, jobs_estimate, stats_at
       FROM @schema@.harel_top_groups($1, $2)";

pub(super) const CANCEL_STEP: &str = "SELECT cancelled, requested, remaining
       FROM @schema@.harel_cancel_group($1, $2, $3, $4)";

/// A row of `harel_list_groups`: id, status, priority, available at, head id, head
/// attempts, jobs (counted up to a cap), capped, cancel requested, queue.
pub(crate) type GroupRow = (
    String,
    String,
    i16,
    DateTime<Utc>,
    Option<i64>,
    i32,
    i32,
    bool,
    bool,
    String,
);

/// A row of `harel_top_groups`: a group row, then its estimate and the statistics' time.
pub(crate) type TopGroupRow = (
    String,
    String,
    i16,
    DateTime<Utc>,
    Option<i64>,
    i32,
    i32,
    bool,
    bool,
    String,
    Option<i64>,
    Option<DateTime<Utc>>,
);

impl Store {
    /// `harel_list_groups`: up to `limit` groups that hold jobs, in id order, after
    /// `after`.
    pub(crate) async fn groups_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        after: Option<&str>,
        limit: i32,
    ) -> Result<Vec<GroupRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::GroupsList))
            .bind(None::<&str>)
            .bind(after)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_list_groups` for one group: the group `id`, if it holds jobs.
    pub(crate) async fn group_get<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: &str,
    ) -> Result<Option<GroupRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::GroupsList))
            .bind(id)
            .bind(None::<&str>)
            .bind(1_i32)
            .persistent(self.persistent())
            .fetch_optional(executor)
            .await
    }

    /// `harel_top_groups`: the top `limit` groups by `rank` (`waiting` or `size`).
    pub(crate) async fn groups_top<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        rank: &str,
        limit: i32,
    ) -> Result<Vec<TopGroupRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::GroupsTop))
            .bind(rank)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_cancel_group`: cancels up to `step` jobs of `group` (each kept `keep_ms` in
    /// the history), asking a running one to stop. Returns how many it cancelled, whether
    /// it asked a running job to stop, and whether jobs remain: the caller calls again, in
    /// the same transaction, until none do.
    pub(crate) async fn group_cancel_step<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        group: &str,
        reason: Option<&str>,
        keep_ms: i64,
        step: i32,
    ) -> Result<(i32, bool, bool), sqlx::Error> {
        sqlx::query_as(self.sql(Statement::GroupCancelStep))
            .bind(group)
            .bind(reason)
            .bind(keep_ms)
            .bind(step)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }
}
