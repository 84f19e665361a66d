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
//! # Layers
//!
//! - **Jobs**: [`Job`] (a serialisable value with a stable [`Job::KIND`]) and [`Handler`]
//!   (what runs it), both implemented by [`#[job]`](macro@job); [`JobContext`], [`JobError`],
//!   [`JobOptions`], [`Backoff`]; enqueueing with [`Enqueue`] and [`JobBatch`] (with
//!   [`EnqueueOptions`] per job).
//! - **The worker pool**: [`Worker`], [`WorkerBuilder`], [`WorkerHandle`]; the
//!   [`DeadLetters`] table; [`QueueStats`] (with its [`Count`]s).
//! - **The transport** ([`transport`]): raw JSON messages in groups; publish, claim, settle
//!   and extend, each one round trip through a PL/pgSQL function.
//! - **Operators**: [`Queue`] (look jobs and groups up, cancel, dead letters); with the
//!   `cli` feature the `harel-jobs` command line (`cli`), with the `dashboard` feature a web
//!   dashboard (`dashboard::router`).
//! - **Testing** (feature `testing`): `testing::TestQueue` (a fresh queue per test, and
//!   assertions on what was enqueued) and `testing::TestWorker` (jobs run in-process).
//! - **Metrics** (feature `metrics`): counters, histograms and depth gauges through the
//!   `metrics` facade; their names are the constants of [`telemetry`].
//! - **Traces** (feature `opentelemetry`): the enqueuing span's OpenTelemetry context is
//!   stored with the job and becomes the parent of each attempt's span (`harel_job`, with
//!   the messaging semantic-convention fields, feature or not).
//! - **Setup**: [`connect`] (waits for the database; [`ConnectConfig`] for
//!   [`connect_with`]), [`migrate`] (safe from every process at once), [`Schema`].
//!
//! # Errors
//!
//! Each surface has its own `#[non_exhaustive]` error enum ([`PublishError`],
//! [`TransportError`], [`MigrateError`], [`ConnectError`], [`ConfigError`],
//! [`WorkerError`]); database failures are wrapped in [`DatabaseError`], and an
//! out-of-range priority is an [`InvalidPriority`] wherever it is refused. A lost lease is
//! not an error but an outcome ([`transport::LeaseOutcome`]).
#![warn(missing_docs)]

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
mod connect;
mod context;
#[cfg(feature = "dashboard")]
#[cfg_attr(docsrs, doc(cfg(feature = "dashboard")))]
pub mod dashboard;
mod dead_letters;
mod enqueue;
mod error;
mod fleet;
mod groups;
mod inspect;
mod job;
mod job_error;
mod migrate;
mod periodic;
mod privileges;
mod queue;
mod queue_control;
mod retry;
mod schema;
mod store;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
mod trace_context;
pub mod transport;
mod vocabulary;
mod worker;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use connect::{ConnectConfig, connect, connect_options_with, connect_with};
pub use context::JobContext;
pub use dead_letters::{DeadLetter, DeadLetterQuery, DeadLetters};
pub use enqueue::{Enqueue, EnqueueOptions, Enqueued, JobBatch};
pub use error::{
    CompleteError, ConfigError, ConnectError, DatabaseError, InvalidMessage, InvalidPriority,
    MigrateError, MissingPrivilege, PublishError, QueueError, TransportError,
};
pub use fleet::{ThroughputMinute, WorkerInfo, WorkerList};
pub use groups::{GroupInfo, GroupPage, GroupQuery, GroupRank, GroupStatus, TopGroups};
pub use harel_jobs_macros::job;
pub use inspect::{Count, QueueStats};
pub use job::{Handler, Job, JobOptions, Unique};
pub use job_error::{Action, IntoJobResult, JobError, JobResult};
pub use migrate::{SCHEMA_VERSION, check_schema, migrate, migrate_schema};
pub use periodic::{MissedTicks, Periodic};
pub use queue::{
    Cancel, CancelOutcome, JobInfo, JobPage, JobQuery, JobState, Queue, ScheduleInfo, SchedulePage,
    ScheduleQuery, StateFilter,
};
pub use queue_control::{LevelDepth, QueueInfo, QueueLimits, RateLimit};
pub use retry::Backoff;
pub use schema::Schema;
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
    DEFAULT_CANCELLED_RETENTION, GROUP_JOBS_COUNT_CAP, JobId, MAX_CATCH_UP, MAX_GROUP_PAGE,
    MAX_PAGE, MAX_REASON_BYTES, MAX_SCHEDULE_NAME_BYTES, MAX_SCHEDULES, MAX_THROUGHPUT_MINUTES,
    MAX_TOP_GROUPS, MAX_WORKER_QUEUES_LISTED, MAX_WORKERS_LISTED,
};
#[cfg(feature = "__fault_injection")]
#[doc(hidden)]
pub use worker::InjectedFault;
pub use worker::{Worker, WorkerBuilder, WorkerError, WorkerHandle, WorkerStats, WorkerTask};
