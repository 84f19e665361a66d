//! harel-jobs: a job queue on PostgreSQL.
#![warn(missing_docs)]

mod connect;
mod context;
mod dead_letters;
mod enqueue;
mod error;
mod inspect;
mod job;
mod job_error;
mod migrate;
mod retry;
mod schema;
pub mod transport;
mod worker;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use connect::{ConnectOptions, connect, connect_options_with, connect_with};
pub use context::JobContext;
pub use dead_letters::{DeadLetter, DeadLetterQuery, DeadLetters};
pub use enqueue::{Enqueue, JobBatch, JobId};
pub use error::{
    ConfigError, ConnectError, DatabaseError, InvalidMessage, MigrateError, PublishError,
    TransportError,
};
pub use harel_jobs_macros::job;
pub use inspect::QueueStats;
pub use job::{Handler, Job, JobOptions};
pub use job_error::{Action, IntoJobResult, JobError, JobResult};
pub use migrate::{SCHEMA_VERSION, migrate, migrate_schema};
pub use retry::Backoff;
pub use schema::Schema;
pub use transport::Priority;
pub use worker::{Worker, WorkerBuilder, WorkerError, WorkerHandle, WorkerStats};
