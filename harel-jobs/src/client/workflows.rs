//! Workflows as an operator sees them (ADR 0033): [`Client::workflows`] pages through
//! them, newest first; [`Client::workflow_info`] and [`Client::workflow_tasks`] show one and
//! its tasks (each task's state and the tasks it waits for: the graph);
//! [`Client::cancel_workflow`] and [`Client::retry_workflow`] act on one as a unit.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::store::{TaskRow, WorkflowRow};
use crate::vocabulary::{
    DEFAULT_CANCELLED_RETENTION, GROUP_CANCEL_STEP, JobId, MAX_PAGE, MAX_REASON_BYTES, delay_millis,
};
use crate::workflow::{Workflow, WorkflowId, WorkflowTask};

/// Where a workflow stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WorkflowState {
    /// Some task has not ended.
    Running,
    /// Every task completed.
    Completed,
    /// Every task ended, and some became dead letters or were cancelled
    /// ([`Client::retry_workflow`] enqueues those again).
    Failed,
    /// An operator cancelled it ([`Client::cancel_workflow`]) while a task had not ended:
    /// its tasks that had not ended were cancelled, and its running ones asked to stop
    /// (until they end, [`WorkflowInfo::ended`] is below [`WorkflowInfo::tasks`]). A retry
    /// of its tasks ([`Client::retry_workflow`], or a retried dead letter of one) takes the
    /// cancel back.
    Cancelled,
}

impl WorkflowState {
    /// `running`, `completed`, `failed` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A workflow, as [`Client::workflows`] and [`Client::workflow_info`] find it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkflowInfo {
    /// Its id.
    pub id: WorkflowId,
    /// Its name (a kind of workflow).
    pub name: String,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// How many tasks it has.
    pub tasks: u32,
    /// How many of them have ended.
    pub ended: u32,
    /// How many of those became dead letters or were cancelled
    /// ([`dead`](Self::dead) + [`cancelled`](Self::cancelled)).
    pub failed: u32,
    /// How many of the ended tasks completed.
    pub completed: u32,
    /// How many of the ended tasks became dead letters.
    pub dead: u32,
    /// How many of the ended tasks were cancelled.
    pub cancelled: u32,
    /// When an operator cancelled it ([`WorkflowState::Cancelled`]); `None` when nobody
    /// did, or a retry took the cancel back.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Where it stands.
    pub state: WorkflowState,
}

impl WorkflowInfo {
    fn from_row(row: WorkflowRow) -> Self {
        let (id, name, created_at, tasks, ended, failed, cancelled, cancelled_at) = row;
        let count = |n: i32| u32::try_from(n).unwrap_or(0);
        let (tasks, ended, failed) = (count(tasks), count(ended), count(failed));
        let cancelled = count(cancelled).min(failed);
        let state = if cancelled_at.is_some() {
            WorkflowState::Cancelled
        } else if ended < tasks {
            WorkflowState::Running
        } else if failed > 0 {
            WorkflowState::Failed
        } else {
            WorkflowState::Completed
        };
        Self {
            id: WorkflowId::new(id),
            name,
            created_at,
            tasks,
            ended,
            failed,
            completed: ended.saturating_sub(failed),
            dead: failed - cancelled,
            cancelled,
            cancelled_at,
            state,
        }
    }
}

/// The outcomes of a task's parents, recorded when it was released: a batch callback's
/// counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ParentOutcomes {
    /// Parents that completed.
    pub completed: u32,
    /// Parents that became dead letters.
    pub dead: u32,
    /// Parents that were cancelled.
    pub cancelled: u32,
}

impl ParentOutcomes {
    pub(crate) fn from_columns(
        completed: Option<i32>,
        dead: Option<i32>,
        cancelled: Option<i32>,
    ) -> Option<Self> {
        let count = |n: i32| u32::try_from(n).unwrap_or(0);
        Some(Self {
            completed: count(completed?),
            dead: count(dead?),
            cancelled: count(cancelled?),
        })
    }
}

/// A workflow's task, as [`Client::workflow_tasks`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskInfo {
    /// Its place in the workflow, from 1 (its parents come before it).
    pub ordinal: u32,
    /// Its name.
    pub name: String,
    /// Its job (a retry of the task points it at a new job).
    pub job: JobId,
    /// The job's state: `pending` (waiting for its parents), `waiting`, `scheduled`,
    /// `running`, `retrying`, `completed`, `dead`, `cancelled`, or `unknown` (its job was
    /// neither queued nor recorded as ended).
    pub state: String,
    /// The job's kind, while the job is known.
    pub kind: Option<String>,
    /// Attempts started, while the job is known.
    pub attempts: Option<u32>,
    /// The last failed attempt's error, while the job is known.
    pub last_error: Option<String>,
    /// The names of the tasks it waits for: the graph's edges.
    pub parents: Vec<String>,
    /// Its parents' outcomes, once it was released (`None` before, or without parents).
    pub parent_outcomes: Option<ParentOutcomes>,
    /// When its job ended.
    pub ended_at: Option<DateTime<Utc>>,
}

impl TaskInfo {
    fn from_row(row: TaskRow) -> Self {
        let (
            ordinal,
            name,
            job,
            state,
            kind,
            attempts,
            last_error,
            parents,
            completed,
            dead,
            cancelled,
            ended_at,
        ) = row;
        Self {
            ordinal: u32::try_from(ordinal).unwrap_or(0),
            name,
            job: JobId::new(job),
            state,
            kind,
            attempts: attempts.and_then(|a| u32::try_from(a).ok()),
            last_error,
            parents,
            parent_outcomes: ParentOutcomes::from_columns(completed, dead, cancelled),
            ended_at,
        }
    }
}

/// What [`Client::workflows`] lists: by name, from a cursor, a page at a time.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkflowQuery {
    /// Only workflows of this name.
    pub name: Option<String>,
    /// Workflows older than this one (the previous page's [`WorkflowPage::next`]).
    pub before: Option<WorkflowId>,
    /// At most this many a page (1 to [`MAX_PAGE`]; default 100).
    pub limit: u32,
}

impl Default for WorkflowQuery {
    fn default() -> Self {
        Self {
            name: None,
            before: None,
            limit: 100,
        }
    }
}

impl WorkflowQuery {
    /// The newest 100 workflows.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only workflows named `name`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Workflows older than `id`.
    pub fn before(mut self, id: WorkflowId) -> Self {
        self.before = Some(id);
        self
    }

    /// At most `limit` a page.
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// One page of [`Client::workflows`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WorkflowPage {
    /// The workflows, newest first.
    pub workflows: Vec<WorkflowInfo>,
    /// Where the next page starts ([`WorkflowQuery::before`]); `None` when none is left.
    pub next: Option<WorkflowId>,
}

/// One page of [`Client::workflow_tasks`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TaskPage {
    /// The tasks, in their order.
    pub tasks: Vec<TaskInfo>,
    /// The ordinal the next page starts after; `None` when none is left.
    pub next: Option<u32>,
}

/// What [`Client::cancel_workflow`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct WorkflowCancelled {
    /// Tasks cancelled at once (they never run).
    pub cancelled: u64,
    /// Running tasks asked to stop: each ends as cancelled when its handler returns.
    pub running_requested: u64,
}

impl Client {
    /// An empty [`Workflow`] named `name` for this client's schema, its statements sent as
    /// the client's.
    pub fn workflow(&self, name: impl Into<String>) -> Workflow {
        Workflow::new(name)
            .schema(self.schema())
            .prepared_statements(self.prepared())
    }

    /// A page of workflows, newest first.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a limit outside 1..=1000;
    /// [`ClientError::Database`].
    pub async fn workflows(&self, query: &WorkflowQuery) -> Result<WorkflowPage, ClientError> {
        if query.limit == 0 || query.limit > MAX_PAGE {
            return Err(ClientError::InvalidArgument(
                "a page holds 1 to 1,000 workflows",
            ));
        }
        let limit = i32::try_from(query.limit).unwrap_or(100);
        let mut rows = self
            .store
            .workflows_list(
                &self.pool,
                query.name.as_deref(),
                query.before.map(WorkflowId::get),
                limit,
            )
            .await
            .map_err(DatabaseError::new)?;
        // a row past the limit says more are left: the next page starts before the last
        // one shown
        let more = rows.len() > query.limit as usize;
        rows.truncate(query.limit as usize);
        let workflows: Vec<WorkflowInfo> = rows.into_iter().map(WorkflowInfo::from_row).collect();
        let next = more.then(|| workflows.last().map(|w| w.id)).flatten();
        Ok(WorkflowPage { workflows, next })
    }

    /// The workflow `id`, or `None` if there is none.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn workflow_info(&self, id: WorkflowId) -> Result<Option<WorkflowInfo>, ClientError> {
        let row = self
            .store
            .workflow_get(&self.pool, id.get())
            .await
            .map_err(DatabaseError::new)?;
        Ok(row.map(WorkflowInfo::from_row))
    }

    /// A page of the workflow's tasks, in their order, after the ordinal `after` (0: from
    /// the first), at most `limit` (1 to [`MAX_PAGE`]): each with its job's state and the
    /// tasks it waits for.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a limit outside 1..=1000;
    /// [`ClientError::Database`].
    pub async fn workflow_tasks(
        &self,
        id: WorkflowId,
        after: u32,
        limit: u32,
    ) -> Result<TaskPage, ClientError> {
        if limit == 0 || limit > MAX_PAGE {
            return Err(ClientError::InvalidArgument(
                "a page holds 1 to 1,000 tasks",
            ));
        }
        let rows = self
            .store
            .workflow_tasks(
                &self.pool,
                id.get(),
                i32::try_from(after).unwrap_or(i32::MAX),
                i32::try_from(limit).unwrap_or(100),
            )
            .await
            .map_err(DatabaseError::new)?;
        let tasks: Vec<TaskInfo> = rows.into_iter().map(TaskInfo::from_row).collect();
        let next = (tasks.len() == limit as usize)
            .then(|| tasks.last().map(|t| t.ordinal))
            .flatten();
        Ok(TaskPage { tasks, next })
    }

    /// The workflow task the job `id` is, if it is one: its workflow (id and name), its
    /// name, and its parents' outcomes once it was released. `None` for a job of no
    /// workflow, or one a retry of its task replaced (the task points at the new job).
    ///
    /// # Errors
    /// [`ClientError::Database`] (a role granted before this release lacks `EXECUTE` on
    /// `harel_job_workflow`: [`DatabaseError::is_permission_denied`]).
    pub async fn job_workflow(&self, id: JobId) -> Result<Option<WorkflowTask>, ClientError> {
        let row = self
            .store
            .job_workflow(&self.pool, id.get())
            .await
            .map_err(DatabaseError::new)?;
        Ok(row.map(WorkflowTask::from_row))
    }

    /// Cancels every task of the workflow that has not ended, as [`cancel`](Self::cancel)
    /// cancels a job (running ones are asked to stop), from the last task to the first (so
    /// each keeps the reason, not its parent's), 1,000 tasks per transaction, each page's
    /// groups taken in the order settles take theirs (a page PostgreSQL aborted anyway, in
    /// a rare race, is run again). Set a reason and how long the cancelled jobs are kept
    /// before `.await`. A workflow with a task that had not ended reads
    /// [`WorkflowState::Cancelled`] from then on.
    pub fn cancel_workflow(&self, id: WorkflowId) -> CancelWorkflow<'_> {
        CancelWorkflow {
            client: self,
            id,
            reason: None,
            keep: DEFAULT_CANCELLED_RETENTION,
        }
    }

    /// Enqueues again the workflow's tasks that became dead letters or were cancelled,
    /// each as a new job waiting for its parents that have not ended (parents first), in
    /// one transaction; their dead letters are deleted. A task that runs whatever its
    /// parents' outcomes (a batch's callback) and ended after counting one of them as
    /// failed runs again too, once they end, with the new counts. A cancel of the workflow
    /// is taken back. Returns how many tasks were enqueued again (0: none had failed, or
    /// there is no such workflow).
    ///
    /// # Errors
    /// [`ClientError::NotKept`] for a failed task whose job is no longer kept (its dead
    /// letter purged, or its cancelled job pruned): nothing was enqueued;
    /// [`ClientError::Database`].
    pub async fn retry_workflow(&self, id: WorkflowId) -> Result<u32, ClientError> {
        let retried = self
            .store
            .workflow_retry(&self.pool, id.get())
            .await
            .map_err(|e| {
                let error = DatabaseError::new(e);
                match (error.code().as_deref(), error.detail()) {
                    (Some("HJ003"), Some(job)) => match job.parse() {
                        Ok(job) => ClientError::NotKept {
                            job: JobId::new(job),
                        },
                        Err(_) => ClientError::Database(error),
                    },
                    _ => ClientError::Database(error),
                }
            })?;
        Ok(u32::try_from(retried).unwrap_or(0))
    }
}

/// A workflow's cancel on its way: options first, then `.await`. Made by
/// [`Client::cancel_workflow`].
#[must_use = "a cancel does nothing until awaited"]
#[derive(Debug)]
pub struct CancelWorkflow<'q> {
    client: &'q Client,
    id: WorkflowId,
    reason: Option<String>,
    keep: Duration,
}

impl CancelWorkflow<'_> {
    /// Why (and by whom): kept with each cancelled job, at most 8 KiB.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// How long the cancelled jobs stay in the history (default 7 days).
    pub fn keep(mut self, period: Duration) -> Self {
        self.keep = period;
        self
    }
}

impl<'q> IntoFuture for CancelWorkflow<'q> {
    type Output = Result<WorkflowCancelled, ClientError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'q>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            if self
                .reason
                .as_ref()
                .is_some_and(|r| r.len() > MAX_REASON_BYTES || r.contains('\0'))
            {
                return Err(ClientError::InvalidArgument(
                    "a cancel reason is at most 8 KiB, without NUL characters",
                ));
            }
            let keep_ms = delay_millis(self.keep).map_err(|_| {
                ClientError::InvalidArgument("a cancelled job is kept at most 100 years")
            })?;
            let client = self.client;
            let mut done = WorkflowCancelled {
                cancelled: 0,
                running_requested: 0,
            };
            // a page at a time, each its own transaction (its groups locked in group
            // order, as settles take theirs and their dependents': ADR 0037); a page that
            // PostgreSQL aborted anyway (a rare race: a message that arrived in a group a
            // settle had locked out of order) runs again (its cancels are idempotent)
            let mut before = None;
            loop {
                let mut tries = 0;
                let (cancelled, requested, next) = loop {
                    let page = client
                        .store
                        .workflow_cancel_page(
                            &client.pool,
                            self.id.get(),
                            self.reason.as_deref(),
                            keep_ms,
                            before,
                            GROUP_CANCEL_STEP,
                        )
                        .await
                        .map_err(DatabaseError::new);
                    match page {
                        Err(error) if error.is_transient() && tries < 5 => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                        }
                        page => break page?,
                    }
                };
                done.cancelled += u64::try_from(cancelled).unwrap_or(0);
                done.running_requested += u64::try_from(requested).unwrap_or(0);
                match next {
                    Some(next) => before = Some(next),
                    None => break,
                }
            }
            Ok(done)
        })
    }
}
