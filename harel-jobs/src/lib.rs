//! harel-jobs: a job queue on PostgreSQL.
//!
//! Jobs are `async fn`s marked [`#[job]`](macro@job), enqueued inside the application's own
//! sqlx transaction (a job exists if and only if that transaction commits), and run by an
//! embedded [`Worker`] pool with leases, heartbeats, retries with backoff, dead letters and
//! graceful shutdown. Jobs sharing a *group* run one at a time, in order; different groups
//! run in parallel on any number of worker processes against one database.
//!
//! ```no_run
//! use harel_jobs::{job, JobContext, JobResult, Worker};
//!
//! /// Sends the welcome mail.
//! #[job(max_attempts = 5)]
//! async fn send_welcome_email(ctx: JobContext<()>, #[group] user_id: i64) -> JobResult {
//!     println!("welcome, user {user_id} (attempt {})", ctx.attempt());
//!     Ok(())
//! }
//!
//! # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! harel_jobs::migrate(&pool).await?;
//! let mut tx = pool.begin().await?;
//! SendWelcomeEmail { user_id: 42 }.enqueue(&mut *tx).await?;
//! tx.commit().await?;
//!
//! let handle = Worker::builder(pool, ()).register::<SendWelcomeEmail>().build()?.start();
//! // … until it is time to stop:
//! handle.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # The guide
//!
//! The API reference is here; how to use it, by what you are doing, is in the guide, whose
//! front door is the [README][readme] (installing, the features, one complete worker, the
//! guarantees in short):
//!
//! - [Writing jobs][writing]: `#[job]`, groups, failing and retries, batches, dead letters.
//! - [Seeing and steering jobs][steering]: the [`Client`], a job's states, listing, cancel,
//!   retention, unique jobs, completing a job in your own transaction, the worker pools.
//! - [Periodic jobs, named queues, pause and limits][scheduling].
//! - [Fair share between tenants][fair]: fairness keys and their weights.
//! - [Dependencies, batches with a callback, and workflows][workflows].
//! - [Testing your jobs][testing] (feature `testing`).
//! - [Operating harel-jobs][operating]: configuration, scaling out (and past one PostgreSQL
//!   primary), PgBouncer, database roles, upgrading.
//! - [Command line, dashboard, metrics and traces][monitoring].
//! - [Guarantees][guarantees], each in full, and what is not promised.
//! - [How it works][how].
//!
//! [readme]: https://github.com/harel-jobs/harel-jobs/blob/main/README.md
//! [writing]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/writing-jobs.md
//! [steering]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/steering-jobs.md
//! [scheduling]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/scheduling.md
//! [fair]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/fair-share.md
//! [workflows]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/workflows.md
//! [testing]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/testing.md
//! [operating]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md
//! [monitoring]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/monitoring.md
//! [guarantees]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/guarantees.md
//! [how]: https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/how-it-works.md
//!
//! # Layers
//!
//! - **Jobs**: [`Job`] (a serialisable value with a stable [`Job::KIND`]) and [`Handler`]
//!   (what runs it), both implemented by [`#[job]`](macro@job); [`JobContext`], [`JobError`],
//!   [`JobOptions`], [`Backoff`], [`Unique`], [`Periodic`].
//! - **Enqueue**: a job's own `.enqueue(executor)` (from `#[job]`) or [`Enqueue`] for one
//!   job with options, [`JobBatch`] for many (with [`EnqueueOptions`] per job, and
//!   [`Enqueued`] when some may be duplicates); [`Client::enqueue`] and [`Client::batch`]
//!   for a schema other than the default. Always through the caller's executor, so inside
//!   its transaction.
//! - **Worker**: [`Worker`], [`WorkerBuilder`], [`WorkerHandle`] (with its
//!   [`WorkerStats`]): the embedded pool that claims, runs and settles jobs.
//! - **Client** (the operator API): [`Client`], one handle on a pool and a schema: a job
//!   or a page of them, cancel ([`JobInfo`], [`JobQuery`], [`CancelOutcome`]), the named
//!   queues (depth, pause, resume, limits: [`QueueInfo`], [`LevelDepth`]), groups
//!   ([`GroupInfo`]), worker pools ([`WorkerInfo`]), schedules ([`ScheduleInfo`]), the
//!   figures ([`Stats`], with its [`Count`]s) and the dead letters ([`DeadLetters`]). Its
//!   errors are [`ClientError`]s.
//! - **Shards**: [`Shards`], one logical queue over several queue schemas (in one database
//!   or on several primaries): each group routed to one [`Shard`] by a stable hash (FNV-1a,
//!   then jump consistent hash), enqueues into the right shard ([`ShardEnqueue`],
//!   [`ShardedBatch`], ids as [`ShardedJobId`]s), a worker pool and a [`Client`] per shard.
//! - **Transport** ([`transport`]): raw JSON messages in groups; publish, claim, settle and
//!   extend, each one round trip through a PL/pgSQL function. What the worker and the
//!   enqueues are built on.
//! - **Store** (private): the data layer. Every SQL statement of the crate lives there,
//!   each behind one method; the layers above convert its rows.
//! - **Command line and dashboard**: with the `cli` feature the `harel-jobs` command line
//!   (`cli`), with the `dashboard` feature a web dashboard (`dashboard::router`); both are
//!   [`Client`] calls and a rendering.
//! - **Testing** (feature `testing`): `testing::TestSchema` (a fresh, migrated schema per
//!   test, and assertions on what was enqueued) and `testing::TestWorker` (jobs run
//!   in-process; scheduled jobs and retries made due at once by `drain`).
//! - **Metrics** (feature `metrics`): counters, histograms, depth and lag gauges through the
//!   `metrics` facade, each described with its unit; their names are the constants of
//!   [`telemetry`]. **Traces**: an enqueue's producer span (`send {queue}`, or
//!   `create {queue}` in a batch) and each attempt's (`process {queue}`), with the
//!   messaging semantic conventions' fields, feature or not; with the feature
//!   `opentelemetry` the producer span's context is stored with the job and becomes the
//!   parent of each attempt's span.
//! - **Setup**: [`connect`] (waits for the database; [`ConnectConfig`] for
//!   [`connect_with`]), [`migrate`] (safe from every process at once), [`Schema`].
//!
//! The names of 0.1 that 0.2 renamed (`Queue`, `QueueStats`, `QueueError`,
//! `testing::TestQueue`) remain as deprecated aliases; see the CHANGELOG.
//!
//! # Errors
//!
//! Each surface has its own `#[non_exhaustive]` error enum ([`PublishError`],
//! [`ClientError`], [`TransportError`], [`MigrateError`], [`ConnectError`], [`ConfigError`],
//! [`WorkerError`], [`StepError`], [`ShardsError`]); database failures are wrapped in [`DatabaseError`], and an
//! out-of-range priority is an [`InvalidPriority`] wherever it is refused. A lost lease is
//! not an error but an outcome ([`transport::LeaseOutcome`]).
#![warn(missing_docs)]
// docs.rs builds with `--cfg docsrs` on nightly (package.metadata.docs.rs), where the
// `doc(cfg(…))` badges below ("Available on crate feature … only") need this feature gate.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The Rust examples of the README and of the guide (docs/guide/), compiled as doc tests.
// `cfg(doctest)` only: these files are outside the crate's directory, so the packaged crate
// does not have them (cargo copies the `readme` file alone), and a normal build never reads
// them.

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

/// The examples of the guide's "Writing jobs", compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/writing-jobs.md")]
pub struct GuideWritingJobsDoctests;

/// The examples of the guide's "Seeing and steering jobs", compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/steering-jobs.md")]
pub struct GuideSteeringJobsDoctests;

/// The examples of the guide's "Periodic jobs, named queues, pause and limits", compiled as
/// doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/scheduling.md")]
pub struct GuideSchedulingDoctests;

/// The examples of the guide's "Fair share between tenants", compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/fair-share.md")]
pub struct GuideFairShareDoctests;

/// The examples of the guide's "Dependencies, batches with a callback, and workflows",
/// compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/workflows.md")]
pub struct GuideWorkflowsDoctests;

/// The examples of the guide's "Testing your jobs", compiled as doc tests (its test itself
/// is `ignore`d there and run by the workspace's tests/readme.rs).
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/testing.md")]
pub struct GuideTestingDoctests;

/// The examples of the guide's "Command line, dashboard, metrics and traces", compiled as
/// doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/monitoring.md")]
pub struct GuideMonitoringDoctests;

/// The examples of the guide's "Guarantees", compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/guarantees.md")]
pub struct GuideGuaranteesDoctests;

/// The examples of the guide's "Operating harel-jobs", compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/operating.md")]
pub struct GuideOperatingDoctests;

/// The examples of the guide's "How it works", compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/how-it-works.md")]
pub struct GuideHowItWorksDoctests;

/// The guide's index, compiled as doc tests (it has no example today).
#[cfg(doctest)]
#[doc = include_str!("../../docs/guide/README.md")]
pub struct GuideIndexDoctests;

#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
mod client;
mod connect;
mod context;
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub mod dashboard;
mod dependency;
mod enqueue;
mod error;
mod job;
mod job_error;
mod migrate;
mod periodic;
mod privileges;
mod retry;
mod schema;
mod shards;
mod steps;
mod store;
pub mod telemetry;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod trace_context;
pub mod transport;
mod vocabulary;
mod worker;
mod workflow;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use client::{
    AttemptInfo, AttemptOutcome, AttemptWorker, JobParents, JobSteps, MAX_ATTEMPTS_KEPT,
    MAX_LISTED, StepInfo,
};
pub use client::{
    Cancel, CancelOutcome, Client, DeadLetter, DeadLetterQuery, DeadLetters, FairKeyInfo,
    FairKeyPage, GroupInfo, GroupPage, GroupQuery, GroupRank, GroupStatus, JobInfo, JobPage,
    JobQuery, JobState, KeyLimits, LevelDepth, MAX_FAIR_KEY_PAGE, QueueInfo, QueueLimits,
    QueueSeries, RateLimit, RunNowOutcome, ScheduleInfo, SchedulePage, ScheduleQuery, StateFilter,
    Stats, ThroughputByQueue, ThroughputMinute, TopGroups, WorkerInfo, WorkerList,
};
pub use client::{
    CancelWorkflow, ParentOutcomes, TaskInfo, TaskPage, WorkflowCancelled, WorkflowInfo,
    WorkflowPage, WorkflowQuery, WorkflowState,
};
pub use connect::{ConnectConfig, connect, connect_options_with, connect_with};
pub use context::JobContext;
pub use dependency::{BatchRef, OnParentFailure, Parent};
pub use enqueue::{Enqueue, EnqueueOptions, Enqueued, JobBatch};
pub use error::{
    ClientError, CompleteError, ConfigError, ConnectError, DatabaseError, InvalidMessage,
    InvalidPriority, MigrateError, MissingPrivilege, PublishError, ShardsError, StepError,
    TransportError,
};
pub use harel_jobs_macros::job;
pub use job::{Handler, Job, JobOptions, Unique};
pub use job_error::{Action, IntoJobResult, JobError, JobResult};
pub use migrate::{SCHEMA_VERSION, check_schema, migrate, migrate_schema};
pub use periodic::{MissedTicks, Periodic};
pub use retry::Backoff;
pub use schema::Schema;
pub use shards::{Shard, ShardEnqueue, ShardedBatch, ShardedJobId, Shards};
/// The sqlx this crate is built with (0.9). Pools, connections and transactions handed to
/// harel-jobs must come from this same sqlx: with another version in the application the
/// compiler says "expected `Pool<Postgres>`, found a different `Pool<Postgres>`". Use this
/// re-export, or depend on the same `sqlx = "0.9"` (and `tokio = "1"`) yourself.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use harel_jobs::sqlx::PgPool;
///
/// let pool: PgPool = harel_jobs::connect("postgres://postgres@127.0.0.1/postgres").await?;
/// let mut tx = pool.begin().await?; // enqueue inside it, then commit
/// tx.commit().await?;
/// # Ok(())
/// # }
/// ```
pub use sqlx;
pub use transport::{DEFAULT_QUEUE, PreparedStatements, Priority};
pub use vocabulary::{
    Count, DEFAULT_CANCELLED_RETENTION, GROUP_JOBS_COUNT_CAP, JobId, MAX_CATCH_UP,
    MAX_DEPENDENCIES, MAX_FAIR_KEY_BYTES, MAX_FAIR_WEIGHT, MAX_GROUP_PAGE, MAX_LIST_READS,
    MAX_PAGE, MAX_REASON_BYTES, MAX_SCHEDULE_NAME_BYTES, MAX_SCHEDULES, MAX_SHARDS,
    MAX_STEP_BYTES_PER_JOB, MAX_STEP_NAME_BYTES, MAX_STEP_RESULT_BYTES, MAX_STEPS_PER_JOB,
    MAX_TASK_NAME_BYTES, MAX_THROUGHPUT_MINUTES, MAX_THROUGHPUT_QUEUES, MAX_TOP_GROUPS,
    MAX_WORKER_QUEUES_LISTED, MAX_WORKERS_LISTED,
};
#[cfg(feature = "__fault_injection")]
#[doc(hidden)]
pub use worker::InjectedFault;
pub use worker::{Worker, WorkerBuilder, WorkerError, WorkerHandle, WorkerStats, WorkerTask};
pub use workflow::{EnqueuedWorkflow, MAX_WORKFLOW_TASKS, Workflow, WorkflowId, WorkflowTask};

/// The operator API's handle, named `Queue` before 0.2.0: a "queue" is now always a named
/// queue inside a schema ([`Client::queues`]).
#[deprecated(since = "0.2.0", note = "renamed to Client")]
pub type Queue = Client;

/// The schema's figures, named `QueueStats` before 0.2.0.
#[deprecated(since = "0.2.0", note = "renamed to Stats")]
pub type QueueStats = Stats;

/// The error of a [`Client`] call, named `QueueError` before 0.2.0.
#[deprecated(since = "0.2.0", note = "renamed to ClientError")]
pub type QueueError = ClientError;
