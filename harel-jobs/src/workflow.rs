//! Workflows (ADR 0033): jobs enqueued together under one [`WorkflowId`], each a named
//! *task* that may wait for earlier tasks (a DAG), enqueued in one round trip
//! ([`Workflow`]), and shown, cancelled and retried as a unit
//! ([`Client::workflow_info`](crate::Client::workflow_info) and its siblings).
//!
//! A *batch with a callback* is a workflow whose last task waits for every other one and
//! runs whatever their outcomes ([`Workflow::callback`]); the callback reads its batch's
//! counts with [`JobContext::workflow`](crate::JobContext::workflow).
//!
//! (A workflow's *tasks* are jobs; a job's *durable steps*,
//! [`JobContext::step`](crate::JobContext::step), are the results one job records.)

use std::collections::HashSet;
use std::fmt;

use sqlx::PgExecutor;

use crate::client::ParentOutcomes;
use crate::dependency::{BatchRef, OnParentFailure, Parent, next_batch_number};
use crate::enqueue::{EnqueueOptions, transport_for};
use crate::error::{DatabaseError, PublishError};
use crate::job::Job;
use crate::schema::Schema;
use crate::store::TaskOfJobRow;
use crate::transport::{OutgoingMessage, PreparedStatements, publish_columns};
use crate::vocabulary::{InvalidMessage, JobId, MAX_BATCH_MESSAGES, MAX_TASK_NAME_BYTES};

/// A workflow's id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkflowId(i64);

impl WorkflowId {
    /// The id with this number.
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The number.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A workflow on its way into the queue: tasks added with [`task`](Self::task) (each a
/// typed job with a name, waiting for earlier tasks through
/// [`EnqueueOptions::after`]), then [`enqueue`](Self::enqueue), in the caller's
/// transaction like any enqueue.
///
/// ```no_run
/// # use harel_jobs::{Client, EnqueueOptions, Job};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Charge { order: i64 }
/// # impl Job for Charge { const KIND: &'static str = "charge"; }
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Receipt { order: i64 }
/// # impl Job for Receipt { const KIND: &'static str = "receipt"; }
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Ledger { order: i64 }
/// # impl Job for Ledger { const KIND: &'static str = "ledger"; }
/// # async fn example(client: Client, pool: sqlx::PgPool) -> Result<(), harel_jobs::PublishError> {
/// let mut checkout = client.workflow("checkout");
/// let charge = checkout.task("charge", Charge { order: 7 }, &EnqueueOptions::new())?;
/// let after_charge = EnqueueOptions::new().after([charge]);
/// checkout.task("receipt", Receipt { order: 7 }, &after_charge)?;
/// checkout.task("ledger", Ledger { order: 7 }, &after_charge)?;
/// let mut tx = pool.begin().await.map_err(harel_jobs::DatabaseError::from)?;
/// let enqueued = checkout.enqueue(&mut *tx).await?;
/// tx.commit().await.map_err(harel_jobs::DatabaseError::from)?;
/// println!("workflow {}", enqueued.id);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Workflow {
    name: String,
    tasks: Vec<String>,
    names: HashSet<String>,
    messages: Vec<OutgoingMessage>,
    schema: Option<Schema>,
    statements: PreparedStatements,
    /// Its number, in its [`BatchRef`]s.
    number: u64,
}

/// What [`Workflow::enqueue`] made: the workflow's id and its tasks' job ids, in the
/// order they were added.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnqueuedWorkflow {
    /// The workflow.
    pub id: WorkflowId,
    /// Each task's job, in the order the tasks were added.
    pub jobs: Vec<JobId>,
}

impl Workflow {
    /// An empty workflow named `name` (a kind of workflow, not unique: 1 to
    /// [`MAX_TASK_NAME_BYTES`] bytes), for the default schema.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            tasks: Vec::new(),
            names: HashSet::new(),
            messages: Vec::new(),
            schema: None,
            statements: PreparedStatements::default(),
            number: next_batch_number(),
        }
    }

    /// Enqueues into the queue in `schema` instead of the default `harel`.
    pub fn schema(mut self, schema: &Schema) -> Self {
        self.schema = Some(schema.clone());
        self
    }

    /// Sends the statement as `statements` says (see
    /// [`Enqueue::prepared_statements`](crate::Enqueue::prepared_statements)).
    pub fn prepared_statements(mut self, statements: PreparedStatements) -> Self {
        self.statements = statements;
        self
    }

    /// Adds the task `name` (1 to [`MAX_TASK_NAME_BYTES`] bytes, unique in the workflow):
    /// `job`, with `options` (its group, queue, priority, delay, and the earlier tasks it
    /// waits for, [`EnqueueOptions::after`]). Returns a reference later tasks wait for.
    ///
    /// # Errors
    /// [`PublishError::Invalid`]: [`InvalidMessage::InvalidTaskName`],
    /// [`InvalidMessage::DuplicateTaskName`], [`InvalidMessage::UniqueJobInWorkflow`] (a
    /// task is the workflow's own job, never a duplicate of another),
    /// [`InvalidMessage::ParentOutsideWorkflow`] (a task waits only for tasks of its
    /// workflow), or the message's own problem; [`PublishError::Serialize`]. The workflow
    /// is unchanged then.
    pub fn task<J: Job>(
        &mut self,
        name: impl Into<String>,
        job: J,
        options: &EnqueueOptions,
    ) -> Result<BatchRef, PublishError> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_TASK_NAME_BYTES || name.contains('\0') {
            return Err(InvalidMessage::InvalidTaskName {
                max: MAX_TASK_NAME_BYTES,
            }
            .into());
        }
        if self.names.contains(&name) {
            return Err(InvalidMessage::DuplicateTaskName(name).into());
        }
        let message = options.created_message(&job)?;
        message.validate()?;
        if message.unique.is_some() {
            return Err(InvalidMessage::UniqueJobInWorkflow.into());
        }
        let index = self.messages.len();
        for parent in message.parents() {
            match parent {
                Parent::InBatch(task) if task.batch == self.number && task.index < index => {}
                _ => return Err(InvalidMessage::ParentOutsideWorkflow.into()),
            }
        }
        self.names.insert(name.clone());
        self.tasks.push(name);
        self.messages.push(message);
        Ok(BatchRef {
            batch: self.number,
            index,
        })
    }

    /// Adds the task `name` that waits for every task added so far and runs once they
    /// have all ended, whatever their outcomes: a batch's callback. Its handler reads the
    /// batch's counts (completed, dead, cancelled) with
    /// [`JobContext::workflow`](crate::JobContext::workflow).
    ///
    /// # Errors
    /// As [`task`](Self::task).
    pub fn callback<J: Job>(
        &mut self,
        name: impl Into<String>,
        job: J,
        options: &EnqueueOptions,
    ) -> Result<BatchRef, PublishError> {
        let everything: Vec<BatchRef> = (0..self.messages.len())
            .map(|index| BatchRef {
                batch: self.number,
                index,
            })
            .collect();
        let options = options
            .clone()
            .after(everything)
            .on_parent_failure(OnParentFailure::Run);
        self.task(name, job, &options)
    }

    /// How many tasks it holds.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Enqueues every task in one round trip, under a new workflow id, through `executor`
    /// (inside a transaction, the workflow exists if and only if it commits).
    ///
    /// # Errors
    /// [`PublishError::Invalid`] for an empty workflow ([`InvalidMessage::EmptyWorkflow`]),
    /// a name out of range ([`InvalidMessage::InvalidWorkflowName`]) or more than
    /// [`MAX_BATCH_MESSAGES`] tasks; [`PublishError::Database`]. Nothing is written then.
    pub async fn enqueue<'e, E: PgExecutor<'e>>(
        self,
        executor: E,
    ) -> Result<EnqueuedWorkflow, PublishError> {
        if self.name.is_empty() || self.name.len() > MAX_TASK_NAME_BYTES || self.name.contains('\0')
        {
            return Err(InvalidMessage::InvalidWorkflowName {
                max: MAX_TASK_NAME_BYTES,
            }
            .into());
        }
        if self.messages.is_empty() {
            return Err(InvalidMessage::EmptyWorkflow.into());
        }
        crate::transport::validate_batch(&self.messages, Some(self.number))?;
        // the enqueues' transport (the default schema's is built once, its statements
        // rendered once), not a store of its own per call
        let transport = transport_for(self.schema.as_ref(), self.statements);
        let columns = publish_columns(&self.messages)?;
        let rows = transport
            .store()
            .workflow_publish(executor, &self.name, &self.tasks, columns)
            .await?;
        let Some(&(id, _)) = rows.first() else {
            return Err(DatabaseError::new(sqlx::Error::RowNotFound).into());
        };
        if rows.len() != self.messages.len() {
            return Err(DatabaseError::new(sqlx::Error::RowNotFound).into());
        }
        #[cfg(feature = "metrics")]
        for message in &self.messages {
            crate::telemetry::enqueued(message.kind(), message.queue_name(), 1);
        }
        Ok(EnqueuedWorkflow {
            id: WorkflowId::new(id),
            jobs: rows.into_iter().map(|(_, job)| JobId::new(job)).collect(),
        })
    }
}

/// What a running task knows of its workflow ([`JobContext::workflow`](crate::JobContext::workflow)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkflowTask {
    /// The workflow.
    pub workflow: WorkflowId,
    /// The workflow's name.
    pub workflow_name: String,
    /// This task's name.
    pub task: String,
    /// Its parents' outcomes when it was released: a batch callback's counts (`None` for a
    /// task without parents).
    pub parents: Option<ParentOutcomes>,
}

impl WorkflowTask {
    /// A row of `harel_workflow_task` or `harel_job_workflow`.
    pub(crate) fn from_row(row: TaskOfJobRow) -> Self {
        let (workflow, workflow_name, task, completed, dead, cancelled) = row;
        Self {
            workflow: WorkflowId::new(workflow),
            workflow_name,
            task,
            parents: ParentOutcomes::from_columns(completed, dead, cancelled),
        }
    }
}

/// The limit of tasks in one workflow: a batch's.
pub const MAX_WORKFLOW_TASKS: usize = MAX_BATCH_MESSAGES;
