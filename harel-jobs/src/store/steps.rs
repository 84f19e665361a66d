//! Durable steps: the fenced read and the fenced record of a leased job's step results
//! (`JobContext::step`). Each applies only while the group is still leased to that token at
//! that message (the fence the names say).

use sqlx::PgExecutor;
use uuid::Uuid;

use super::{Statement, Store};

pub(super) const READ_IF_HELD: &str =
    "SELECT held, names, results FROM @schema@.harel_steps($1, $2, $3)";

pub(super) const RECORD_IF_HELD: &str =
    "SELECT outcome, result FROM @schema@.harel_record_step($1, $2, $3, $4, $5)";

/// What `harel_steps` returns: whether the lease is held, and the job's step names and
/// results (JSON text), in name order (`None`: no step recorded).
pub(crate) type StepsRow = (bool, Option<Vec<String>>, Option<Vec<String>>);

/// What `harel_record_step` returns: `recorded`, `exists` (with the result recorded
/// before), `lost` or `full`.
pub(crate) type RecordRow = (String, Option<String>);

/// A lease a fenced read or write is made under: group, job id (seq), token (durable
/// steps, a workflow task's view).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HeldLease<'a> {
    pub group: &'a str,
    pub seq: i64,
    pub token: Uuid,
}

impl Store {
    /// `harel_steps`: the steps the job of `lease` recorded, if the lease is held.
    pub(crate) async fn steps_read_if_held<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        lease: HeldLease<'_>,
    ) -> Result<StepsRow, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::StepsReadIfHeld))
            .bind(lease.group)
            .bind(lease.seq)
            .bind(lease.token)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_record_step`: records `result` (JSON text) as the job's step `name`, if the
    /// lease is held, the name is new and the job's limits allow it.
    pub(crate) async fn step_record_if_held<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        lease: HeldLease<'_>,
        name: &str,
        result: &str,
    ) -> Result<RecordRow, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::StepRecordIfHeld))
            .bind(lease.group)
            .bind(lease.seq)
            .bind(lease.token)
            .bind(name)
            .bind(result)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }
}
