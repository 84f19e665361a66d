//! Workflows: publish one, list them, show one and its tasks, cancel and retry it, and a
//! running task's view of its workflow.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::{HeldLease, Publish, Statement, Store};

pub(super) const PUBLISH: &str = "SELECT workflow_id, job_id FROM @schema@.harel_publish_workflow(\
     $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)";

pub(super) const LIST: &str = "SELECT id, name, created_at, tasks, ended, failed, cancelled, cancelled_at \
       FROM @schema@.harel_workflows($1, $2, $3)";

pub(super) const GET: &str = "SELECT id, name, created_at, tasks, ended, failed, cancelled, cancelled_at \
       FROM @schema@.harel_workflow($1)";

pub(super) const STEPS: &str = "SELECT ordinal, name, job_id, state, kind, attempts, last_error, parents, \
            completed, dead, cancelled, ended_at \
       FROM @schema@.harel_workflow_tasks($1, $2, $3)";

pub(super) const CANCEL_PAGE: &str =
    "SELECT cancelled, requested, next FROM @schema@.harel_cancel_workflow($1, $2, $3, $4, $5)";

pub(super) const RETRY: &str = "SELECT retried FROM @schema@.harel_retry_workflow($1)";

pub(super) const TASK_IF_HELD: &str = "SELECT workflow_id, workflow, task, completed, dead, cancelled \
       FROM @schema@.harel_workflow_task($1, $2, $3)";

pub(super) const JOB_WORKFLOW: &str = "SELECT workflow_id, workflow, task, completed, dead, cancelled \
       FROM @schema@.harel_job_workflow($1)";

/// A row of `harel_workflows` and `harel_workflow`: id, name, created at, tasks, ended,
/// failed, cancelled (of the failed), cancelled at (an operator's cancel).
pub(crate) type WorkflowRow = (
    i64,
    String,
    DateTime<Utc>,
    i32,
    i32,
    i32,
    i32,
    Option<DateTime<Utc>>,
);

/// A row of `harel_workflow_tasks`: ordinal, name, job id, state, kind, attempts, last
/// error, parents, and its parents' outcomes (completed, dead, cancelled), ended at.
pub(crate) type TaskRow = (
    i32,
    String,
    i64,
    String,
    Option<String>,
    Option<i32>,
    Option<String>,
    Vec<String>,
    Option<i32>,
    Option<i32>,
    Option<i32>,
    Option<DateTime<Utc>>,
);

/// A row of `harel_workflow_task` and `harel_job_workflow`: workflow id, its name, the
/// task's name, and its parents' outcomes (completed, dead, cancelled).
pub(crate) type TaskOfJobRow = (i64, String, String, Option<i32>, Option<i32>, Option<i32>);

impl Store {
    /// `harel_publish_workflow`: the jobs of `batch`, each a task named in `tasks`, under a
    /// new workflow named `name`. Returns the workflow's id and the jobs' ids, in order.
    pub(crate) async fn workflow_publish<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        name: &str,
        tasks: &[String],
        batch: Publish<'_>,
    ) -> Result<Vec<(i64, i64)>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::WorkflowPublish))
            .bind(name)
            .bind(tasks)
            .bind(batch.groups)
            .bind(batch.kinds)
            .bind(batch.payloads)
            .bind(batch.priorities)
            .bind(batch.not_before)
            .bind(batch.delays)
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

    /// `harel_workflows`: up to `limit` + 1 workflows before `before`, newest first.
    pub(crate) async fn workflows_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        name: Option<&str>,
        before: Option<i64>,
        limit: i32,
    ) -> Result<Vec<WorkflowRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::WorkflowsList))
            .bind(name)
            .bind(before)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_workflow`: one workflow, if it exists.
    pub(crate) async fn workflow_get<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
    ) -> Result<Option<WorkflowRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::WorkflowGet))
            .bind(id)
            .persistent(self.persistent())
            .fetch_optional(executor)
            .await
    }

    /// `harel_workflow_tasks`: up to `limit` tasks after the ordinal `after`.
    pub(crate) async fn workflow_tasks<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
        after: i32,
        limit: i32,
    ) -> Result<Vec<TaskRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::WorkflowTasks))
            .bind(id)
            .bind(after)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_cancel_workflow`: cancels up to `limit` tasks before the ordinal `before`;
    /// returns (cancelled, requested, next).
    pub(crate) async fn workflow_cancel_page<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
        reason: Option<&str>,
        keep_ms: i64,
        before: Option<i32>,
        limit: i32,
    ) -> Result<(i32, i32, Option<i32>), sqlx::Error> {
        sqlx::query_as(self.sql(Statement::WorkflowCancelPage))
            .bind(id)
            .bind(reason)
            .bind(keep_ms)
            .bind(before)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_retry_workflow`: enqueues the failed tasks again; returns how many.
    pub(crate) async fn workflow_retry<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
    ) -> Result<i32, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::WorkflowRetry))
            .bind(id)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_workflow_task`: the workflow of the job `lease` holds, if it is a task.
    pub(crate) async fn workflow_task_if_held<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        lease: HeldLease<'_>,
    ) -> Result<Option<TaskOfJobRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::WorkflowTaskIfHeld))
            .bind(lease.group)
            .bind(lease.seq)
            .bind(lease.token)
            .persistent(self.persistent())
            .fetch_optional(executor)
            .await
    }

    /// `harel_job_workflow`: the workflow task the job `id` is, if it is one.
    pub(crate) async fn job_workflow<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        id: i64,
    ) -> Result<Option<TaskOfJobRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::JobWorkflow))
            .bind(id)
            .persistent(self.persistent())
            .fetch_optional(executor)
            .await
    }
}
