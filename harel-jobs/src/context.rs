//! [`JobContext`]: what a running handler knows besides its arguments.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::PgConnection;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::error::{ClientError, CompleteError, DatabaseError, StepError};
use crate::steps::{Record, StepLog};
use crate::store::TaskOfJobRow;
use crate::transport::{Lease, LeaseOutcome, Settlement, Transport};
use crate::vocabulary::JobId;
use crate::workflow::WorkflowTask;

/// Injected into a handler: the pool's shared state, facts about this execution, and a
/// cancellation signal. Not serialised; cheap to clone.
pub struct JobContext<S> {
    state: Arc<S>,
    execution: Arc<Execution>,
}

/// The facts of one execution.
#[derive(Debug)]
pub(crate) struct Execution {
    pub(crate) kind: String,
    pub(crate) group: String,
    pub(crate) job_id: JobId,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) cancel: CancellationToken,
    /// What `complete_in` writes with; `None` outside a worker (`for_test`).
    pub(crate) completion: Option<Completion>,
    pub(crate) flags: Arc<ExecutionFlags>,
    /// The job's durable steps ([`JobContext::step`]).
    pub(crate) steps: Arc<StepLog>,
    /// Under a test worker, its connection, which serves [`JobContext::workflow`] while the
    /// attempt runs (inside the test's transaction, where the claim is); `None` under a
    /// worker pool (the pool reads it) and in `for_test`.
    pub(crate) reads: Option<ConnectionReads>,
}

/// What a handler asks of the test worker's connection: the workflow task of the job it
/// holds, answered on the oneshot.
pub(crate) type WorkflowRead = oneshot::Sender<Result<Option<TaskOfJobRow>, DatabaseError>>;

/// The way to the test worker's connection while an attempt runs
/// (`worker::inline::work_one` serves it).
#[derive(Clone, Debug)]
pub(crate) struct ConnectionReads(pub(crate) mpsc::UnboundedSender<WorkflowRead>);

/// What a handler needs to complete its job in its own transaction.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) transport: Transport,
    pub(crate) lease: Lease,
    pub(crate) retain: Option<Duration>,
}

/// What the worker and the handler tell each other while the job runs.
#[derive(Debug, Default)]
pub(crate) struct ExecutionFlags {
    /// The handler completed the job in its own transaction: the worker's own outcome
    /// will find the lease gone, and that is no loss.
    pub(crate) completed_in_tx: AtomicBool,
    /// The heartbeat learned that a cancel of the job was asked for.
    pub(crate) cancel_requested: AtomicBool,
}

impl<S> JobContext<S> {
    pub(crate) fn new(state: Arc<S>, execution: Arc<Execution>) -> Self {
        Self { state, execution }
    }

    /// A context for calling a handler outside the worker pool, in tests: attempt 1 of 1,
    /// kind and group `"test"`, job id 0, never cancelled. The `with_*` methods set
    /// what a test needs, so that a handler's attempt-dependent branches can be tested.
    ///
    /// ```
    /// use harel_jobs::{JobContext, JobId};
    ///
    /// let last_try = JobContext::for_test(())
    ///     .with_attempt(5, 5)
    ///     .with_group("user-42")
    ///     .with_job_id(JobId::new(1234));
    /// assert_eq!((last_try.attempt(), last_try.max_attempts()), (5, 5));
    /// assert_eq!(
    ///     (last_try.group(), last_try.job_id()),
    ///     ("user-42", JobId::new(1234))
    /// );
    /// last_try.cancel_for_test();
    /// assert!(last_try.is_cancelled());
    /// ```
    pub fn for_test(state: S) -> Self {
        Self::new(
            Arc::new(state),
            Arc::new(Execution {
                kind: "test".to_owned(),
                group: "test".to_owned(),
                job_id: JobId::new(0),
                attempt: 1,
                max_attempts: 1,
                cancel: CancellationToken::new(),
                completion: None,
                flags: Arc::default(),
                steps: Arc::new(StepLog::in_memory()),
                reads: None,
            }),
        )
    }

    /// This context with `execution` changed by `change` (for the `with_*` test setters).
    fn changed(self, change: impl FnOnce(&mut Execution)) -> Self {
        let current = &self.execution;
        let mut execution = Execution {
            kind: current.kind.clone(),
            group: current.group.clone(),
            job_id: current.job_id,
            attempt: current.attempt,
            max_attempts: current.max_attempts,
            cancel: current.cancel.clone(),
            completion: None,
            flags: Arc::clone(&current.flags),
            steps: Arc::clone(&current.steps),
            reads: None,
        };
        change(&mut execution);
        Self {
            state: self.state,
            execution: Arc::new(execution),
        }
    }

    /// For tests: this is attempt `attempt` of `max_attempts`.
    pub fn with_attempt(self, attempt: u32, max_attempts: u32) -> Self {
        self.changed(|e| {
            e.attempt = attempt;
            e.max_attempts = max_attempts;
        })
    }

    /// For tests: the job's group.
    pub fn with_group(self, group: impl Into<String>) -> Self {
        let group = group.into();
        self.changed(|e| e.group = group)
    }

    /// For tests: the job's id.
    pub fn with_job_id(self, id: JobId) -> Self {
        self.changed(|e| e.job_id = id)
    }

    /// The old name of [`with_job_id`](Self::with_job_id).
    #[deprecated(since = "0.2.0", note = "renamed to with_job_id")]
    pub fn with_message_id(self, id: i64) -> Self {
        self.with_job_id(JobId::new(id))
    }

    /// For tests: the job's kind.
    pub fn with_kind(self, kind: impl Into<String>) -> Self {
        let kind = kind.into();
        self.changed(|e| e.kind = kind)
    }

    /// For tests: signals cancellation, as a lost lease or a cancel of the job would
    /// ([`is_cancelled`](Self::is_cancelled) and [`cancelled`](Self::cancelled) see it).
    pub fn cancel_for_test(&self) {
        self.execution.cancel.cancel();
    }

    /// The worker pool's shared state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The shared state, as the `Arc` the pool holds.
    pub fn state_arc(&self) -> Arc<S> {
        Arc::clone(&self.state)
    }

    /// Which attempt this is, from 1 (counted in the database, so attempts whose worker
    /// died count).
    pub fn attempt(&self) -> u32 {
        self.execution.attempt
    }

    /// How many attempts the job gets in all.
    pub fn max_attempts(&self) -> u32 {
        self.execution.max_attempts
    }

    /// The job's group (execution id).
    pub fn group(&self) -> &str {
        &self.execution.group
    }

    /// The job's id (what `enqueue` returned): unique, increasing in enqueue order, the
    /// same across attempts.
    pub fn job_id(&self) -> JobId {
        self.execution.job_id
    }

    /// The old name of [`job_id`](Self::job_id), as a number.
    #[deprecated(since = "0.2.0", note = "renamed to job_id")]
    pub fn message_id(&self) -> i64 {
        self.execution.job_id.get()
    }

    /// The job kind.
    pub fn kind(&self) -> &str {
        &self.execution.kind
    }

    /// Whether the job should stop: its cancel was asked for (`Client::cancel`; see
    /// [`cancel_requested`](Self::cancel_requested)), the lease was lost (another worker
    /// may run it now), the timeout passed, or the pool is shutting down and the grace
    /// period is over. A handler that stops early should return an error; a cancelled job
    /// ends as cancelled whatever it returns, and a lost lease's result is not written.
    pub fn is_cancelled(&self) -> bool {
        self.execution.cancel.is_cancelled()
    }

    /// Whether the job's cancel was asked for while it ran (`Client::cancel`, learned at a
    /// heartbeat). The job ends as cancelled whatever the handler returns.
    pub fn cancel_requested(&self) -> bool {
        self.execution
            .flags
            .cancel_requested
            .load(Ordering::Acquire)
    }

    /// Completes the job inside the handler's own transaction, fenced on its lease: the
    /// job's ack (or its retention in the history) commits if and only if `transaction`
    /// commits, with the handler's writes. So a handler whose effects are writes to this
    /// database has them exactly once: if its lease was taken over (it ran past its lease
    /// and another worker claimed the job), this fails and the transaction must roll back.
    ///
    /// Pass the transaction (`&mut tx`); call it last, just before `commit`.
    /// After it succeeded and the transaction committed, whatever the handler returns
    /// changes nothing. In a context made by [`for_test`](Self::for_test) there is no lease:
    /// it writes nothing and returns `Ok`.
    ///
    /// ```no_run
    /// use harel_jobs::{job, JobContext, JobResult};
    ///
    /// #[job]
    /// async fn credit(ctx: JobContext<sqlx::PgPool>, account: i64, cents: i64) -> JobResult {
    ///     let mut tx = ctx.state().begin().await?;
    ///     sqlx::query("UPDATE accounts SET cents = cents + $1 WHERE id = $2")
    ///         .bind(cents)
    ///         .bind(account)
    ///         .execute(&mut *tx)
    ///         .await?;
    ///     ctx.complete_in(&mut tx).await?; // the credit and the ack commit together
    ///     tx.commit().await?;
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`CompleteError::LeaseLost`] (roll back: another worker has the job, or it already
    /// completed), [`CompleteError::Cancelled`] (roll back: the job's cancel was asked for),
    /// [`CompleteError::Transport`] (the write failed; the transaction is aborted).
    pub async fn complete_in(&self, transaction: &mut PgConnection) -> Result<(), CompleteError> {
        let Some(completion) = &self.execution.completion else {
            return Ok(());
        };
        let settlement = match completion.retain {
            Some(keep) => Settlement::Retain { keep },
            None => Settlement::Ack,
        };
        let outcome = completion
            .transport
            .settle(transaction, &completion.lease, settlement)
            .await?;
        match outcome {
            LeaseOutcome::Applied | LeaseOutcome::AlreadyApplied => {
                self.execution
                    .flags
                    .completed_in_tx
                    .store(true, Ordering::Release);
                Ok(())
            }
            LeaseOutcome::Cancelled => Err(CompleteError::Cancelled),
            LeaseOutcome::LeaseLost => Err(CompleteError::LeaseLost),
        }
    }

    /// Runs `work` as the durable step `name` of this job: once, and on a later attempt of
    /// the same job, returns the result it recorded instead of running it again.
    ///
    /// When `work` returns `Ok`, its value is serialised (serde, JSON) and recorded under
    /// `name` before `step` returns it; an `Err` records nothing, and the next attempt runs
    /// `work` again. The first call of an attempt reads the job's recorded steps in one
    /// round trip (later calls use what it read); each new result is one more. A handler
    /// that never calls `step` costs none. Only the holder of the job's lease records
    /// (fenced as the settle is): a worker whose lease lapsed and was claimed again, or
    /// whose job was settled, records nothing and gets [`StepError::LeaseLost`].
    ///
    /// So `work` runs at least once until its result is recorded, and its result is recorded
    /// at most once per name: if the process dies after `work`'s side effect and before the
    /// record committed, the next attempt runs `work` again. Make the side effect
    /// idempotent where that matters (an idempotency key derived from
    /// [`job_id`](Self::job_id) and `name`). A name recorded twice (two calls of the same
    /// step running at once) keeps the first result, which both calls return.
    ///
    /// Names are 1 to [`MAX_STEP_NAME_BYTES`](crate::MAX_STEP_NAME_BYTES) bytes; a result at
    /// most [`MAX_STEP_RESULT_BYTES`](crate::MAX_STEP_RESULT_BYTES) of JSON; a job at most
    /// [`MAX_STEPS_PER_JOB`](crate::MAX_STEPS_PER_JOB) steps and
    /// [`MAX_STEP_BYTES_PER_JOB`](crate::MAX_STEP_BYTES_PER_JOB) in all. Steps are kept as
    /// long as the job is (queued, retrying, in the history while retained, in the dead
    /// letters), and deleted by the queue's housekeeping after it is gone. A dead letter
    /// retried is a new job, with no steps.
    ///
    /// In a context made by [`for_test`](Self::for_test) there is no lease: results are kept
    /// in memory, shared by its clones and by the contexts made from it with the `with_*`
    /// setters, so a test can run a handler twice and see its second run skip the steps
    /// the first recorded.
    ///
    /// `work`'s error type `E` must take a [`StepError`] (`JobError`, `anyhow::Error`,
    /// `Box<dyn Error + Send + Sync>` do), so that one `?` handles both:
    ///
    /// ```
    /// use harel_jobs::{job, JobContext, JobResult};
    ///
    /// #[job]
    /// async fn place_order(ctx: JobContext<()>, order: i64) -> JobResult {
    ///     let charge: String = ctx
    ///         .step("charge", async {
    ///             // … charge the card, with an idempotency key of the job and the step …
    ///             Ok::<_, harel_jobs::JobError>(format!("ch_{order}"))
    ///         })
    ///         .await?;
    ///     ctx.step("receipt", async {
    ///         println!("mail the receipt of {charge}");
    ///         Ok::<_, harel_jobs::JobError>(())
    ///     })
    ///     .await?;
    ///     Ok(())
    /// }
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let ctx = JobContext::for_test(());
    /// place_order(ctx.clone(), 7).await.unwrap();
    /// place_order(ctx.with_attempt(2, 3), 7).await.unwrap(); // runs neither step again
    /// # });
    /// ```
    ///
    /// # Errors
    /// `work`'s own error, as it returned it; otherwise a [`StepError`] converted into `E`:
    /// [`LeaseLost`](StepError::LeaseLost), [`InvalidName`](StepError::InvalidName) and a
    /// full job ([`JobFull`](StepError::JobFull)) before `work` runs;
    /// [`ResultTooLarge`](StepError::ResultTooLarge), [`JobFull`](StepError::JobFull),
    /// [`Serialization`](StepError::Serialization), [`LeaseLost`](StepError::LeaseLost) and
    /// [`Database`](StepError::Database) after it ran, its result not recorded.
    pub async fn step<T, E>(
        &self,
        name: &str,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<StepError>,
    {
        StepLog::check_name(name)?;
        let steps = &self.execution.steps;
        if let Some(recorded) = steps.recorded(name).await? {
            return Ok(decode(name, &recorded)?);
        }
        let value = work.await?;
        let json = serde_json::to_string(&value).map_err(|source| StepError::Serialization {
            name: name.to_owned(),
            source,
        })?;
        match steps.record(name, json).await? {
            Record::Recorded => Ok(value),
            Record::Before(recorded) => Ok(decode(name, &recorded)?),
        }
    }

    /// The workflow this job is a task of ([`Workflow`](crate::Workflow)), with its
    /// parents' outcomes when it was released: a batch callback's counts
    /// ([`Workflow::callback`](crate::Workflow::callback)). `None` for a job of no
    /// workflow, and in a [`for_test`](Self::for_test) context. One round trip, read by the
    /// lease holder only. Under a `testing::TestWorker` it is read on the test worker's
    /// connection, so inside the test's transaction it sees that transaction's claim.
    ///
    /// ```no_run
    /// use harel_jobs::{job, JobContext, JobResult};
    ///
    /// #[job]
    /// async fn export_done(ctx: JobContext<()>, export: i64) -> JobResult {
    ///     if let Some(task) = ctx.workflow().await? {
    ///         let counts = task.parents.unwrap_or_default();
    ///         println!(
    ///             "export {export} (workflow {}): {} shards done, {} dead, {} cancelled",
    ///             task.workflow, counts.completed, counts.dead, counts.cancelled
    ///         );
    ///     }
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::Database`] (a timeout included); under a test worker,
    /// [`ClientError::AttemptEnded`] when called after the attempt ended (from a task the
    /// handler spawned).
    pub async fn workflow(&self) -> Result<Option<WorkflowTask>, ClientError> {
        if let Some(ConnectionReads(reads)) = &self.execution.reads {
            // the test worker reads it on its connection, between polls of this attempt
            let (reply, answer) = oneshot::channel();
            reads.send(reply).map_err(|_| ClientError::AttemptEnded)?;
            let row = answer.await.map_err(|_| ClientError::AttemptEnded)??;
            return Ok(row.map(WorkflowTask::from_row));
        }
        let Some(database) = self.execution.steps.database() else {
            return Ok(None);
        };
        let row = database.workflow_task().await?;
        Ok(row.map(WorkflowTask::from_row))
    }

    /// Completes when [`is_cancelled`](Self::is_cancelled) becomes true; for `select!`.
    pub async fn cancelled(&self) {
        self.execution.cancel.cancelled().await
    }
}

/// A recorded step's result as `T`.
fn decode<T: DeserializeOwned>(name: &str, recorded: &str) -> Result<T, StepError> {
    serde_json::from_str(recorded).map_err(|source| StepError::Serialization {
        name: name.to_owned(),
        source,
    })
}

impl<S> Clone for JobContext<S> {
    fn clone(&self) -> Self {
        Self {
            state: Arc::clone(&self.state),
            execution: Arc::clone(&self.execution),
        }
    }
}

impl<S> fmt::Debug for JobContext<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("kind", &self.execution.kind)
            .field("group", &self.execution.group)
            .field("job_id", &self.execution.job_id)
            .field("attempt", &self.execution.attempt)
            .finish_non_exhaustive()
    }
}
