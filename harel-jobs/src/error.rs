//! Error types: one `#[non_exhaustive]` enum per public surface.
//!
//! Database failures are wrapped in [`DatabaseError`] rather than exposing `sqlx::Error`
//! in our enums, so the public API does not change when sqlx does. Messages are lowercase
//! and never contain a password or a job's payload.

use std::fmt;

pub use crate::vocabulary::{InvalidMessage, InvalidPriority};
use crate::vocabulary::{JobId, MAX_SCHEMA_NAME_BYTES, quote_identifier};

/// A failure reported by PostgreSQL or by the connection to it.
///
/// Wraps the driver's error (available through [`std::error::Error::source`]) and answers
/// the questions a caller asks of it: is it worth retrying, and which SQLSTATE was it.
pub struct DatabaseError {
    inner: sqlx::Error,
}

impl DatabaseError {
    pub(crate) fn new(inner: sqlx::Error) -> Self {
        Self { inner }
    }

    /// The SQLSTATE code PostgreSQL reported, if the server answered at all.
    pub fn code(&self) -> Option<String> {
        match &self.inner {
            sqlx::Error::Database(db) => db.code().map(|code| code.into_owned()),
            _ => None,
        }
    }

    /// Whether the failure is about reaching the server (refused, reset, timed out, the pool
    /// closed, the server shutting down or starting up, too many connections): the kind of
    /// error that retrying later can cure.
    pub fn is_connection(&self) -> bool {
        match &self.inner {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(_) => {
                // 08: connection exception, 57P01..57P03: admin/crash shutdown, cannot
                // connect now, 53300: too many connections
                self.code().is_some_and(|code| {
                    code.starts_with("08")
                        || matches!(code.as_str(), "57P01" | "57P02" | "57P03" | "53300")
                })
            }
            _ => false,
        }
    }

    /// Whether the same operation may succeed if simply tried again: a connection failure
    /// (see [`is_connection`](Self::is_connection)), a serialization failure (40001), a
    /// deadlock (40P01) or a lock wait that timed out (55P03). Any other error means the
    /// database refused the operation itself, and a retry would fail the same way.
    pub fn is_transient(&self) -> bool {
        self.is_connection() || matches!(self.code().as_deref(), Some("40001" | "40P01" | "55P03"))
    }

    /// The DETAIL PostgreSQL gave with the error, if any.
    pub(crate) fn detail(&self) -> Option<&str> {
        match &self.inner {
            sqlx::Error::Database(db) => db
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .and_then(sqlx::postgres::PgDatabaseError::detail),
            _ => None,
        }
    }

    /// Whether PostgreSQL refused the operation for lack of privileges (SQLSTATE 42501).
    pub fn is_permission_denied(&self) -> bool {
        self.code().as_deref() == Some("42501")
    }
}

impl fmt::Display for DatabaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            sqlx::Error::Database(db) => {
                write!(f, "{}", db.message())?;
                if let Some(code) = db.code() {
                    write!(f, " (SQLSTATE {code})")?;
                }
                Ok(())
            }
            other => write!(f, "{other}"),
        }
    }
}

impl fmt::Debug for DatabaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseError")
            .field("message", &self.to_string())
            .field("connection", &self.is_connection())
            .finish()
    }
}

impl std::error::Error for DatabaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.inner)
    }
}

impl From<sqlx::Error> for DatabaseError {
    fn from(inner: sqlx::Error) -> Self {
        Self::new(inner)
    }
}

/// Why publishing (enqueueing) failed. Nothing was written in either case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The message was refused before reaching the database.
    #[error("invalid message: {0}")]
    Invalid(#[from] InvalidMessage),
    /// The job could not be serialised to JSON.
    #[error("job could not be serialised: {0}")]
    Serialize(#[source] serde_json::Error),
    /// The database failed or refused the write.
    #[error("publish failed: {0}")]
    Database(#[from] DatabaseError),
    /// A unique job ([`Unique`](crate::Unique)) whose key is held by the queued job
    /// `existing` (or by one completed within the key's hold period): nothing was written,
    /// and the caller's transaction is unaffected (it can go on and commit).
    #[error("duplicate of job {existing}: its unique key is held")]
    Duplicate {
        /// The job that holds the key.
        existing: JobId,
    },
    /// The job's group exists in another queue (a group belongs to the queue of the job
    /// that created it), or a batch put one new group in two queues. Nothing was written;
    /// the transaction is aborted (roll it back).
    #[error("the job's group belongs to another queue")]
    GroupInAnotherQueue,
    /// A job to wait for ([`Parent::Job`](crate::Parent::Job)) is neither queued nor kept:
    /// it completed without retention (nothing says it completed), was pruned, or never
    /// existed. Nothing was written; the transaction is aborted (roll it back). To wait for
    /// jobs that may end before their dependents are enqueued, keep their completions
    /// (`#[job(retain = "…")]`), or enqueue them together ([`JobBatch::add`](crate::JobBatch::add)).
    #[error("job {parent} to wait for is neither queued nor kept")]
    UnknownParent {
        /// The parent.
        parent: JobId,
    },
    /// A job to wait for ([`Parent::Job`](crate::Parent::Job)) that this transaction did not
    /// enqueue, named by a role that may not read jobs (a producer): the same refusal
    /// whether that job is queued, kept or unknown, so that enqueueing tells a producer
    /// nothing about jobs it did not write. Name a job of the same batch by reference
    /// ([`JobBatch::add`](crate::JobBatch::add)), one enqueued earlier in the same
    /// transaction by its id, or grant the role `EXECUTE` on `harel_job` (the guide's
    /// "Database roles"). Nothing was written; the transaction is aborted (roll it back).
    #[error(
        "job {parent} to wait for was not enqueued in this transaction, and this role may not \
         read jobs (EXECUTE on harel_job)"
    )]
    ForeignParent {
        /// The parent.
        parent: JobId,
    },
}

impl PublishError {
    /// The job holding the key, if this is a [`Duplicate`](Self::Duplicate).
    pub fn duplicate_of(&self) -> Option<JobId> {
        match self {
            Self::Duplicate { existing } => Some(*existing),
            _ => None,
        }
    }
}

impl From<sqlx::Error> for PublishError {
    fn from(e: sqlx::Error) -> Self {
        let error = DatabaseError::new(e);
        // harel_publish's own code for a group in another queue (class HJ: not PostgreSQL's)
        match error.code().as_deref() {
            Some("HJ001") => return Self::GroupInAnotherQueue,
            // harel_hold's, the parent's id in the DETAIL
            Some("HJ002") => {
                if let Some(parent) = error.detail().and_then(|d| d.parse().ok()) {
                    return Self::UnknownParent {
                        parent: JobId::new(parent),
                    };
                }
            }
            // harel_hold's refusal of a parent a producer may not name (the id in the
            // DETAIL; a missing grant on harel_publish itself has none)
            Some("42501") => {
                if let Some(parent) = error.detail().and_then(|d| d.parse().ok()) {
                    return Self::ForeignParent {
                        parent: JobId::new(parent),
                    };
                }
            }
            _ => {}
        }
        Self::Database(error)
    }
}

/// Why a call of a [`Client`](crate::Client) (look a job up, cancel, list, pause, dead
/// letters, …) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// An argument out of range (a cancel reason over 8 KiB, a keep period over 100
    /// years, an empty group id, a page limit): nothing was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The database failed or refused the operation.
    #[error("client operation failed: {0}")]
    Database(#[from] DatabaseError),
    /// The database answered something this release does not understand (a newer
    /// release's function?).
    #[error("unexpected reply from the database")]
    UnexpectedReply,
    /// [`Client::retry_workflow`](crate::Client::retry_workflow): a failed task's job is no
    /// longer kept (its dead letter was purged, or its cancelled job pruned), so it cannot
    /// be enqueued again. Nothing was enqueued.
    #[error("job {job} of the workflow is no longer kept: it cannot be retried")]
    NotKept {
        /// The task's job.
        job: JobId,
    },
    /// A change to a queue that does not exist (no job went to it, and it was not created
    /// with [`Client::create_queue`](crate::Client::create_queue)): refused, so that a
    /// mistyped name does not make a paused or limited queue no job ever goes to. Nothing
    /// was changed.
    #[error(
        "no queue named {0:?}: a queue exists once a job went to it, or once created (create_queue)"
    )]
    UnknownQueue(String),
    /// [`Client::pause_schedule`](crate::Client::pause_schedule),
    /// [`resume_schedule`](crate::Client::resume_schedule) or
    /// [`trigger_schedule`](crate::Client::trigger_schedule) of a schedule no worker
    /// declared (or one deleted since): refused, nothing is created.
    #[error("no schedule named {0:?}: a schedule exists once a worker declared it")]
    UnknownSchedule(String),
    /// [`Client::trigger_schedule`](crate::Client::trigger_schedule) of a paused schedule:
    /// refused (resume it first). Nothing was written.
    #[error("schedule {0:?} is paused: resume it to trigger it")]
    SchedulePaused(String),
    /// [`JobContext::workflow`](crate::JobContext::workflow) under a
    /// `testing::TestWorker`, called after the job's attempt ended (from a task its handler
    /// spawned): the test worker reads it on its connection only while the attempt runs.
    #[error("the job's attempt has ended: its context can no longer read through the test worker")]
    AttemptEnded,
}

/// Why [`JobContext::complete_in`](crate::JobContext::complete_in) did not complete the
/// job. In every case the handler's transaction must roll back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompleteError {
    /// This worker no longer holds the job's lease: it ran past the lease and another
    /// worker claimed the job, or the job was already completed. Nothing was written.
    #[error("the job's lease is lost: roll back, another worker may run it")]
    LeaseLost,
    /// A cancel of the job was asked for while it ran: it ends as cancelled, and its
    /// effects must not commit.
    #[error("the job was cancelled: roll back")]
    Cancelled,
    /// The write failed; the transaction is aborted.
    #[error("completing the job failed: {0}")]
    Transport(#[from] TransportError),
}

/// Why a durable step ([`JobContext::step`](crate::JobContext::step)) returned no result.
///
/// `step` hands it to the handler converted into the step's own error type (`E:
/// From<StepError>`); inspect it there, or in a [`JobError`](crate::JobError) with
/// `error().downcast_ref::<StepError>()`. In every case nothing was recorded by this call,
/// and nothing recorded before is lost.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// This worker no longer holds the job's lease: it lapsed and another worker claimed the
    /// job, or the job was settled. The step's result was not recorded; stop, since another
    /// worker may be running the job.
    #[error("the job's lease is lost: step {name:?} was not recorded")]
    LeaseLost {
        /// The step's name.
        name: String,
    },
    /// The step's name is empty or longer than
    /// [`MAX_STEP_NAME_BYTES`](crate::MAX_STEP_NAME_BYTES). Its work did not run.
    #[error("a step name must be 1 to {max} bytes, not {bytes}", max = crate::vocabulary::MAX_STEP_NAME_BYTES)]
    InvalidName {
        /// The name's length in bytes.
        bytes: usize,
    },
    /// The step's result, as JSON, is longer than
    /// [`MAX_STEP_RESULT_BYTES`](crate::MAX_STEP_RESULT_BYTES): its work ran, and the result
    /// was not recorded.
    #[error("step {name:?}'s result is {bytes} bytes of JSON, over the limit of {max}", max = crate::vocabulary::MAX_STEP_RESULT_BYTES)]
    ResultTooLarge {
        /// The step's name.
        name: String,
        /// The result's length in bytes of JSON.
        bytes: usize,
    },
    /// The job already holds [`MAX_STEPS_PER_JOB`](crate::MAX_STEPS_PER_JOB) steps, or this
    /// result would take them over [`MAX_STEP_BYTES_PER_JOB`](crate::MAX_STEP_BYTES_PER_JOB)
    /// in all. When the count is what is full, the work did not run; otherwise it ran and
    /// its result was not recorded.
    #[error(
        "the job's steps are full ({steps} recorded, {bytes} bytes): step {name:?} was not recorded"
    )]
    JobFull {
        /// The step's name.
        name: String,
        /// The steps the job holds.
        steps: usize,
        /// Their results' bytes in all.
        bytes: usize,
    },
    /// The step's result could not be serialised to JSON, or a recorded result does not
    /// deserialise as the type asked for now (the step's type changed between releases:
    /// give the changed step a new name).
    #[error("step {name:?}'s result does not (de)serialise: {source}")]
    Serialization {
        /// The step's name.
        name: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// Reading or recording the steps failed (or timed out: the worker's
    /// `database_timeout`). Whether a record that failed so was stored is unknown: a later
    /// attempt finds out.
    #[error("reading or recording durable steps failed: {0}")]
    Database(#[from] DatabaseError),
    /// The database answered what this release does not know: run
    /// [`migrate`](crate::migrate()).
    #[error(
        "the queue's step functions answered unexpectedly: is the schema migrated by this release?"
    )]
    UnexpectedReply,
}

impl StepError {
    /// Whether this is [`LeaseLost`](Self::LeaseLost).
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Self::LeaseLost { .. })
    }
}

/// Why a transport operation (claim, settle, extend) failed.
///
/// Losing a lease is not an error: it is reported in the operation's outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The database failed or refused the operation.
    #[error("queue operation failed: {0}")]
    Database(#[from] DatabaseError),
    /// An argument is out of range (for example a zero lease).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The database answered with rows that do not match the request (one row per input,
    /// in input order): the queue's functions are not the ones this release expects. Run
    /// [`migrate`](crate::migrate()).
    #[error("the queue's functions answered unexpectedly: is the schema migrated by this release?")]
    UnexpectedReply,
}

impl From<sqlx::Error> for TransportError {
    fn from(e: sqlx::Error) -> Self {
        Self::Database(DatabaseError::new(e))
    }
}

impl TransportError {
    /// Whether retrying later can cure it (see [`DatabaseError::is_connection`]).
    pub fn is_connection(&self) -> bool {
        matches!(self, Self::Database(e) if e.is_connection())
    }

    /// Whether the same call may succeed if simply made again (see
    /// [`DatabaseError::is_transient`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Database(e) if e.is_transient())
    }
}

/// Why [`migrate`](crate::migrate()) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The database failed or refused a migration statement.
    #[error("migration {version} ({name}) failed: {source}")]
    Migration {
        /// The migration's version number.
        version: i32,
        /// Its name.
        name: &'static str,
        /// What the database said.
        #[source]
        source: DatabaseError,
    },
    /// The database failed or refused a function file.
    #[error("function {name} failed to apply: {source}")]
    Function {
        /// The function's name.
        name: &'static str,
        /// What the database said.
        #[source]
        source: DatabaseError,
    },
    /// The schema is not migrated to what this release expects (it does not exist, or
    /// migrations or function updates are pending): run [`migrate`](crate::migrate()) (as
    /// the queue's owner) first.
    #[error(
        "schema {schema:?} is not migrated for this release (applied version {applied}, \
         expected {expected}, or its functions are older): run harel_jobs::migrate first"
    )]
    NotMigrated {
        /// The schema.
        schema: String,
        /// The newest migration applied (0: none).
        applied: i32,
        /// The version this release expects.
        expected: i32,
    },
    /// The role may not read the schema's bookkeeping: it lacks a privilege (`USAGE` on
    /// the schema, as a role granted nothing does), which the schema's owner grants (see
    /// the guide's ["Database roles"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md#database-roles)). Not a sign that the
    /// schema is not migrated.
    #[error(
        "{0}: the schema's owner must grant it (see docs/guide/operating.md, \"Database roles\")"
    )]
    PermissionDenied(MissingPrivilege),
    /// Reaching the database, taking the migration lock or reading the bookkeeping failed.
    #[error("migrating failed: {0}")]
    Database(#[from] DatabaseError),
    /// The database has migrations this version of harel-jobs does not know: it was
    /// migrated by a newer release.
    #[error("schema is at version {found}, newer than this release of harel-jobs knows ({known})")]
    NewerSchema {
        /// The newest version applied to the database.
        found: i32,
        /// The newest version this release has.
        known: i32,
    },
    /// A migration applied to the database differs from the one this release embeds (or
    /// was applied before migrations were checksummed): its tables or functions may not be
    /// what this release expects. Nothing was changed. Migrate a fresh schema (or drop
    /// this one) instead.
    #[error(
        "migration {version} ({name}) applied to this schema differs from this release's: \
         migrate a fresh schema"
    )]
    Modified {
        /// The migration's version number.
        version: i32,
        /// Its name.
        name: &'static str,
    },
}

/// A privilege a role lacks on one of the queue's objects, read from the catalog once
/// PostgreSQL refused a statement for lack of it. It names the role and the object, never
/// a password.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingPrivilege {
    /// The role that lacks it (`current_user`).
    pub role: String,
    /// `USAGE`, `EXECUTE`, `SELECT` or `DELETE`.
    pub privilege: &'static str,
    /// `schema`, `function` or `table`.
    pub object_kind: &'static str,
    /// The schema, or the function or table with its schema (`harel.harel_list_jobs`).
    pub object: String,
}

impl MissingPrivilege {
    /// The statement that grants it, for the schema's owner to run:
    /// `GRANT EXECUTE ON FUNCTION harel.harel_list_jobs TO ops`.
    pub fn grant(&self) -> String {
        let kind = match self.object_kind {
            "table" => "TABLE",
            "function" => "FUNCTION",
            _ => "SCHEMA",
        };
        format!(
            "GRANT {} ON {kind} {} TO {}",
            self.privilege,
            self.object,
            quote_identifier(&self.role)
        )
    }
}

impl fmt::Display for MissingPrivilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "role {:?} lacks {} on {} {}",
            self.role, self.privilege, self.object_kind, self.object
        )
    }
}

impl From<sqlx::Error> for MigrateError {
    fn from(e: sqlx::Error) -> Self {
        Self::Database(DatabaseError::new(e))
    }
}

/// Why [`connect`](crate::connect()) gave up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The connection string could not be parsed. The string itself is not repeated here,
    /// since it may hold a password.
    #[error("invalid database url: {reason}")]
    InvalidUrl {
        /// What is wrong with it.
        reason: String,
    },
    /// The URL is not a PostgreSQL one: its scheme is neither `postgres` nor `postgresql`
    /// (`mysql://…`, `redis://…`). Refused at once, before any attempt to connect.
    #[error(
        "not a PostgreSQL database url: its scheme is {scheme:?}; harel-jobs needs postgres:// or postgresql://"
    )]
    NotPostgres {
        /// The URL's scheme (only its letters, digits, `+`, `-` and `.`; never more).
        scheme: String,
    },
    /// The [`ConnectConfig`](crate::ConnectConfig) is inconsistent (for example a zero pool
    /// size).
    #[error("invalid connect config: {0}")]
    InvalidConfig(&'static str),
    /// The server did not answer within the configured time.
    #[error(
        "database at {target} unreachable after {attempts} attempts over {waited:?}: {last_error}"
    )]
    Unreachable {
        /// `host:port/database` as user@ (no password).
        target: String,
        /// How many times we tried.
        attempts: u32,
        /// How long we tried for.
        waited: std::time::Duration,
        /// The last failure.
        #[source]
        last_error: DatabaseError,
    },
    /// The server answered and refused us for a reason retrying cannot cure (wrong password,
    /// unknown database or role, …).
    #[error("database at {target} refused the connection: {source}")]
    Refused {
        /// `user@host:port/database` (no password).
        target: String,
        /// What the server said.
        #[source]
        source: DatabaseError,
    },
}

/// Why a [`Shards`](crate::Shards) could not be built, or one of its calls over several
/// shards failed (each names the shard, by its index).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardsError {
    /// No shard was given: a job would have nowhere to go.
    #[error("no shards: give at least one (pool, schema)")]
    Empty,
    /// More shards than [`MAX_SHARDS`](crate::MAX_SHARDS).
    #[error("{count} shards: at most {max} are allowed", max = crate::MAX_SHARDS)]
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// Two shards are one schema of one database (as far as their pools' connect options
    /// tell: see [`Shards::new`](crate::Shards::new)): one group could be routed to both.
    #[error("shards {first} and {second} are both schema {schema:?} in {database}")]
    Duplicate {
        /// The first shard's index.
        first: usize,
        /// The second shard's index.
        second: usize,
        /// The schema's name.
        schema: String,
        /// `host:port/database` (no user, no password).
        database: String,
    },
    /// A shard's schema name made by [`Shards::schemas`](crate::Shards::schemas) is
    /// invalid (the prefix is not a lowercase identifier, or too long).
    #[error("invalid shard schema: {0}")]
    InvalidSchema(#[from] ConfigError),
    /// Migrating a shard failed; the shards before it are migrated, the ones after it are
    /// not tried.
    #[error("migrating shard {shard} failed: {source}")]
    Migrate {
        /// The shard's index.
        shard: usize,
        /// Why.
        #[source]
        source: MigrateError,
    },
    /// A [`Client`](crate::Client) call on a shard failed.
    #[error("shard {shard}: {source}")]
    Client {
        /// The shard's index.
        shard: usize,
        /// Why.
        #[source]
        source: ClientError,
    },
    /// A [`ShardedBatch`](crate::ShardedBatch) failed to enqueue into one shard. Each shard's
    /// part is one transaction: the shards tried before this one are written and stay
    /// written, this shard's part is not, and the shards after it are not tried.
    #[error("enqueueing into shard {shard} failed: {source}")]
    Enqueue {
        /// The shard whose part failed.
        shard: usize,
        /// Why.
        #[source]
        source: PublishError,
        /// For each job of the batch, in the order it was added: its id if it was written
        /// (in a shard tried before), `None` if not.
        enqueued: Vec<Option<crate::ShardedJobId>>,
    },
}

/// A configuration value that is out of range, reported by a builder's `build`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A schema name that is not a lowercase SQL identifier of at most
    /// [`Schema::MAX_NAME_BYTES`](crate::Schema::MAX_NAME_BYTES) bytes.
    #[error(
        "invalid schema name {0:?}: use 1 to {max} lowercase ASCII letters, digits or '_', not starting with a digit",
        max = MAX_SCHEMA_NAME_BYTES
    )]
    InvalidSchemaName(String),
    /// A schema name PostgreSQL keeps for itself: `information_schema`, or one starting with
    /// `pg_` (`pg_catalog`, `pg_toast`, `pg_temp`, …). The queue's tables and functions do
    /// not belong among the system catalogs, and PostgreSQL refuses to create a schema
    /// named `pg_…`.
    #[error(
        "schema name {0:?} is reserved by PostgreSQL: information_schema and names starting with \
         'pg_' hold the system's own catalogs; pick another name"
    )]
    ReservedSchemaName(String),
    /// A periodic schedule that cannot be used: a bad name, cron expression, time zone or
    /// interval, or a name declared twice on one worker.
    #[error("invalid schedule {name:?}: {reason}")]
    InvalidSchedule {
        /// The schedule's name (cut to 64 characters when it is the problem).
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Two registered job types share one kind.
    #[error("two registered job types have the kind {0:?}: kinds must be unique")]
    DuplicateKind(&'static str),
    /// A registered job type's queue is not one this pool serves: its jobs would wait for
    /// ever unless another pool serves that queue. Serve it
    /// ([`WorkerBuilder::queue`](crate::WorkerBuilder::queue)), or say that another pool
    /// does ([`WorkerBuilder::served_elsewhere`](crate::WorkerBuilder::served_elsewhere)).
    #[error(
        "job kind {kind:?} goes to queue {queue:?}, which this pool does not serve (it serves {served:?}): \
         add .queue({queue:?}, n), or .served_elsewhere({queue:?}) if another pool serves it"
    )]
    UnservedQueue {
        /// The job kind.
        kind: &'static str,
        /// Its queue.
        queue: &'static str,
        /// The queues this pool serves.
        served: Vec<String>,
    },
    /// Another out-of-range setting.
    #[error("invalid setting {name}: {reason}")]
    Invalid {
        /// The setting.
        name: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}
