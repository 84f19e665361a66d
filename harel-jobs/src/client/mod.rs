//! The operator API: [`Client`], one handle on a pool and a schema for everything done to
//! the queues of that schema from application code, and the types its calls take and
//! return.
//!
//! "Client" is the handle; a *queue* is always a named queue inside its schema
//! ([`DEFAULT_QUEUE`](crate::DEFAULT_QUEUE) or one a job was enqueued into), as
//! [`Client::queues`] lists them.
//!
//! What lives where (each file adds an `impl Client` block for its calls):
//!
//! - `mod.rs`: [`Client`] itself: [`new`](Client::new), [`with_schema`](Client::with_schema),
//!   [`prepared_statements`](Client::prepared_statements), [`pool`](Client::pool),
//!   [`schema`](Client::schema), [`migrate`](Client::migrate), and the ways in and out:
//!   [`enqueue`](Client::enqueue), [`batch`](Client::batch), [`worker`](Client::worker).
//! - `jobs.rs`: one job or a page of them, and cancelling: [`Client::job`],
//!   [`Client::jobs`], [`Client::cancel`], [`Client::cancel_group`]; [`Cancel`],
//!   [`CancelOutcome`], [`JobInfo`], [`JobPage`], [`JobQuery`], [`JobState`],
//!   [`StateFilter`].
//! - `queues.rs`: the named queues: [`Client::depth`], [`Client::queues`],
//!   [`Client::pause`], [`Client::resume`], [`Client::set_limits`]; [`QueueInfo`],
//!   [`QueueLimits`], [`RateLimit`], [`LevelDepth`].
//! - `groups.rs`: [`Client::groups`], [`Client::group`], [`Client::top_groups`];
//!   [`GroupInfo`], [`GroupPage`], [`GroupQuery`], [`GroupRank`], [`GroupStatus`],
//!   [`TopGroups`].
//! - `workers.rs`: the worker pools' reports: [`Client::workers`], [`Client::throughput`],
//!   [`Client::throughput_by_queue`]; [`WorkerInfo`], [`WorkerList`], [`ThroughputMinute`],
//!   [`ThroughputByQueue`], [`QueueSeries`].
//! - `schedules.rs`: the periodic schedules: [`Client::schedules`],
//!   [`Client::delete_schedule`]; [`ScheduleQuery`], [`SchedulePage`], [`ScheduleInfo`].
//! - `stats.rs`: the schema's figures at one moment: [`Client::stats`]; [`Stats`] (its
//!   [`Count`](crate::Count)s are the crate's vocabulary, also used by [`QueueInfo`] and
//!   [`LevelDepth`]).
//! - `dead_letters.rs`: [`Client::dead_letters`], a [`DeadLetters`] handle carrying the
//!   client's pool and schema; [`DeadLetter`], [`DeadLetterQuery`].
//!
//! Every call returns a [`ClientError`](crate::ClientError) (but [`migrate`](Client::migrate), a
//! [`MigrateError`], and the enqueues, a [`PublishError`](crate::PublishError)). Calls run
//! on the client's pool; the few that must also run inside the caller's transaction have an
//! `_in` twin taking an executor ([`DeadLetters::retry_in`] and its siblings). No SQL here:
//! each call is a statement of the data layer (`store/`) and the conversion of its rows.

mod dead_letters;
mod fair;
mod groups;
mod jobs;
mod queues;
mod schedules;
pub(crate) mod stats;
mod workers;
mod workflows;

pub use dead_letters::{DeadLetter, DeadLetterQuery, DeadLetters};
pub use fair::{FairKeyInfo, FairKeyPage, KeyLimits, MAX_FAIR_KEY_PAGE};
pub use groups::{GroupInfo, GroupPage, GroupQuery, GroupRank, GroupStatus, TopGroups};
pub use jobs::{
    AttemptInfo, AttemptOutcome, AttemptWorker, Cancel, CancelOutcome, JobInfo, JobPage,
    JobParents, JobQuery, JobState, JobSteps, MAX_ATTEMPTS_KEPT, MAX_LISTED, RunNowOutcome,
    StateFilter, StepInfo,
};
pub use queues::{LevelDepth, QueueInfo, QueueLimits, RateLimit};
pub use schedules::{ScheduleInfo, SchedulePage, ScheduleQuery};
pub use stats::Stats;
pub use workers::{QueueSeries, ThroughputByQueue, ThroughputMinute, WorkerInfo, WorkerList};
pub use workflows::{
    CancelWorkflow, ParentOutcomes, TaskInfo, TaskPage, WorkflowCancelled, WorkflowInfo,
    WorkflowPage, WorkflowQuery, WorkflowState,
};

use sqlx::{PgExecutor, PgPool};

use crate::enqueue::{Enqueue, JobBatch};
use crate::error::MigrateError;
use crate::job::Job;
use crate::schema::Schema;
use crate::store::Store;
use crate::transport::PreparedStatements;
use crate::worker::WorkerBuilder;

/// A client of the queues in one schema: a pool and the schema. Cheap to clone; the one
/// handle for enqueueing, looking jobs up, cancelling, dead letters, named queues, groups,
/// schedules, figures and worker pools.
///
/// ```no_run
/// use harel_jobs::{job, CancelOutcome, Client, JobContext, JobResult, JobState};
///
/// #[job]
/// async fn send_report(_ctx: JobContext<()>, account: i64) -> JobResult {
///     Ok(())
/// }
///
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::new(pool.clone());
/// client.migrate().await?;
///
/// let mut tx = pool.begin().await?;
/// let id = client.enqueue(&mut *tx, SendReport { account: 7 }).await?;
/// tx.commit().await?;
///
/// if let Some(job) = client.job(id).await? {
///     println!("job {id} is {:?} after {} attempts", job.state, job.attempts);
/// }
/// match client.cancel(id).reason("account closed").await? {
///     CancelOutcome::Cancelled => println!("it will never run"),
///     CancelOutcome::Requested => println!("running: its handler is told at its next heartbeat"),
///     other => println!("too late: {other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pool: PgPool,
    store: Store,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("pool", &self.pool)
            .field("schema", self.schema())
            .field("statements", &self.prepared())
            .finish()
    }
}

impl Client {
    /// A client of the default schema (`harel`).
    pub fn new(pool: PgPool) -> Self {
        Self::with_schema(pool, Schema::default())
    }

    /// A client of the queues in `schema`.
    pub fn with_schema(pool: PgPool, schema: Schema) -> Self {
        Self {
            pool,
            store: Store::new(schema, PreparedStatements::default()),
        }
    }

    /// Sends its statements as `statements` says (default [`PreparedStatements::Cached`];
    /// [`PreparedStatements::Unnamed`] behind PgBouncer before 1.21).
    pub fn prepared_statements(mut self, statements: PreparedStatements) -> Self {
        self.store = self.store.with_prepared(statements);
        self
    }

    /// How its statements are sent.
    pub(crate) fn prepared(&self) -> PreparedStatements {
        self.store.prepared()
    }

    /// Its data layer: the schema's statements, sent as [`prepared`](Self::prepared) says.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        self.store.schema()
    }

    /// Creates or upgrades the schema ([`migrate_schema`](crate::migrate_schema)).
    ///
    /// # Errors
    /// As [`migrate_schema`](crate::migrate_schema).
    pub async fn migrate(&self) -> Result<(), MigrateError> {
        crate::migrate::migrate_schema(&self.pool, self.schema()).await
    }

    /// Enqueues `job` through `executor`: inside a transaction (`&mut *tx`), the job exists
    /// if and only if it commits. Options (delay, priority, group, unique key, queue) go on
    /// the returned [`Enqueue`] before `.await`. The way to enqueue one typed job into a
    /// schema other than the default.
    pub fn enqueue<'c, J: Job, E: PgExecutor<'c>>(&self, executor: E, job: J) -> Enqueue<'c, J, E> {
        Enqueue::new(job, executor)
            .schema(self.schema())
            .prepared_statements(self.prepared())
    }

    /// An empty [`JobBatch`] for this client's schema, its statements sent as the client's.
    pub fn batch(&self) -> JobBatch {
        JobBatch::for_schema(self.schema()).prepared_statements(self.prepared())
    }

    /// A worker pool for this client's schema, sharing `state` with its handlers: register
    /// job types, then `build()` and `start()`.
    pub fn worker<S: Send + Sync + 'static>(&self, state: S) -> WorkerBuilder<S> {
        crate::worker::Worker::builder(self.pool.clone(), state).schema(self.schema().clone())
    }
}
