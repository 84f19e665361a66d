//! Helpers for testing the application's own jobs (cargo feature `testing`).
//!
//! - [`TestSchema`]: a fresh, migrated schema of its own for one test; tests
//!   using one each run in parallel without seeing each other's jobs. Dropped with
//!   [`TestSchema::cleanup`] (or, best effort, when the value is dropped).
//! - Assertions on what was enqueued, through the test's own connection or transaction, so
//!   they see jobs its uncommitted transaction enqueued: [`TestSchema::enqueued`],
//!   [`TestSchema::assert_enqueued`], [`TestSchema::assert_nothing_enqueued`].
//! - [`TestWorker`]: runs jobs in the test's task, without a worker pool: one
//!   ([`TestWorker::work_one`]), all that are due ([`TestWorker::work_until_idle`]), or
//!   those due later too, retries and scheduled jobs made due at once
//!   ([`TestWorker::drain`] with [`WorkOptions`]), optionally inside the test's
//!   transaction, and returns what became of each ([`WorkedJob`]).
//! - [`TestSchema::enqueue`]: enqueue into the test schema without a client of its own.
//!
//! ```no_run
//! use harel_jobs::testing::{TestSchema, TestWorker, WorkOutcome};
//! use harel_jobs::{job, JobContext, JobResult};
//!
//! #[job]
//! async fn send_welcome_email(_ctx: JobContext<()>, user_id: i64) -> JobResult {
//!     Ok(())
//! }
//!
//! // a `#[tokio::test]`
//! async fn signup_sends_a_welcome_email() -> Result<(), Box<dyn std::error::Error>> {
//!     let test = TestSchema::new().await?; // DATABASE_URL, a schema of its own
//!     let worker = TestWorker::new(test.worker(()).register::<SendWelcomeEmail>())?;
//!
//!     let mut tx = test.pool().begin().await?;
//!     // the code under test enqueues through the client it is given
//!     test.client().enqueue(&mut *tx, SendWelcomeEmail { user_id: 42 }).await?;
//!     test.assert_enqueued::<SendWelcomeEmail>(&mut *tx, |job| job.user_id == 42).await;
//!
//!     let worked = worker.work_until_idle(&mut *tx).await?;
//!     assert_eq!(worked.len(), 1);
//!     assert_eq!(worked[0].outcome, WorkOutcome::Succeeded);
//!     test.assert_nothing_enqueued(&mut *tx).await;
//!     tx.rollback().await?; // nothing of it stays
//!
//!     test.cleanup().await?;
//!     Ok(())
//! }
//! ```
//!
//! # Which schema
//!
//! A `TestSchema` from [`new`](TestSchema::new), [`connect`](TestSchema::connect) or
//! [`with_pool`](TestSchema::with_pool) lives in a fresh schema (`harel_test_` and 16 random
//! hex digits), so code under test must enqueue through the [`Client`] it is handed
//! ([`TestSchema::client`]), or with `.schema(test.schema())`: an enqueue that names no
//! schema goes to the default one, `harel`, which the test schema does not see.
//!
//! With `#[sqlx::test]`, which gives each test a database of its own, the default schema is
//! free: [`TestSchema::with_schema`]`(pool, Schema::default())` migrates it there, and code
//! that enqueues without naming a schema is tested as it is.
//!
//! ```no_run
//! # use harel_jobs::{Schema, testing::TestSchema};
//! // a `#[sqlx::test]` (sqlx's `migrate` feature), given a database of its own
//! async fn with_a_database_of_its_own(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//!     let test = TestSchema::with_schema(pool, Schema::default()).await?;
//!     // … enqueue with `.enqueue(&pool)` as the application does, then assert and work
//!     Ok(())
//! }
//! ```
//!
//! # What differs from a worker pool
//!
//! A [`TestWorker`] is built from the same [`WorkerBuilder`] and runs a job through the
//! pool's own code: the same claim (one group at a time, from the queues the builder serves,
//! in the order it names them, each by priority, then age), decoding,
//! timeout and panic capture, the same retry policy (backoff, `JobError` actions, dead
//! letters after the last attempt) and the same settle. It has no background tasks, so:
//! - no heartbeat: a handler that runs longer than the pool's lease (30 s by default) may
//!   lose it, and its outcome is then [`WorkOutcome::LeaseLost`]; a cancel asked for while
//!   the handler runs is seen when its outcome is written ([`WorkOutcome::Cancelled`]), not
//!   signalled to the handler;
//! - no waiting: a retried, snoozed or scheduled job becomes due after its delay, and until
//!   then [`work_until_idle`](TestWorker::work_until_idle) does not see it. Either make it
//!   due now: [`TestWorker::drain`] with [`WorkOptions::scheduled`] and
//!   [`WorkOptions::retries`] runs jobs round after round until nothing is left (bounded),
//!   and [`TestSchema::make_due`] makes one job due; or make retries immediate:
//!   [`TestWorker::retry_immediately`] (or [`TestWorker::backoff`]) overrides every retry's
//!   delay, a job type's own `#[job(backoff = …)]` included (the builder's
//!   [`backoff`](WorkerBuilder::backoff) is only the default of types that set none);
//! - inside the test's transaction, the claim and the outcome are part of that
//!   transaction, but what the handler does through its own pool is not, and
//!   [`JobContext::complete_in`](crate::JobContext::complete_in) on another connection
//!   waits for the test's transaction, as does a durable step's record
//!   ([`JobContext::step`](crate::JobContext::step), whose first read does not see the
//!   uncommitted claim and fails with `LeaseLost`) (work on the pool for such handlers:
//!   `worker.work_one(test.pool())`); [`JobContext::workflow`](crate::JobContext::workflow)
//!   is read on the test worker's own connection, so it sees the claim there (a batch
//!   callback reads its counts inside the test's transaction);
//! - periodic schedules are not fired, and no maintenance runs.
//!
//! # Cleanup
//!
//! [`TestSchema::cleanup`] drops the schema (and closes the pool it opened); call it at the end of the
//! test. A `TestSchema` dropped without it (the test failed or panicked first) drops its
//! schema from its `Drop`, on a thread and connection of its own: it waits up to 5 s for the
//! `DROP SCHEMA`, then leaves it running in the background (retrying for up to 30 s), since
//! a transaction of the test that still holds locks in the schema can end only once the
//! test's runtime runs again. A schema whose cleanup never ran (the process was killed) is
//! named `harel_test_…`: drop those by hand.

use std::fmt;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Acquire, Connection, PgConnection, PgExecutor, PgPool, Postgres};

use crate::client::{Client, JobInfo, JobQuery, StateFilter};
use crate::enqueue::Enqueue;
use crate::error::{ClientError, ConfigError, DatabaseError, MigrateError, TransportError};
use crate::job::Job;
use crate::retry::Backoff;
use crate::schema::Schema;
use crate::store::{Store, session};
use crate::transport::LeaseOutcome;
use crate::vocabulary::JobId;
use crate::worker::inline::{self, Inline};
use crate::worker::{Worker, WorkerBuilder};

/// How many jobs [`TestWorker::work_until_idle`] runs at most before it gives up.
pub const MAX_WORKED: usize = 10_000;

/// How long a dropped [`TestSchema`] waits for its schema to be dropped.
const DROP_WAIT: Duration = Duration::from_secs(5);

/// How long the cleanup of a dropped [`TestSchema`] keeps trying.
const DROP_RETRY_FOR: Duration = Duration::from_secs(30);

/// Why a test helper failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestError {
    /// [`TestSchema::new`] needs `DATABASE_URL`.
    #[error("DATABASE_URL is not set: point it at the test database")]
    NoDatabaseUrl,
    /// `DATABASE_URL` (or the URL given) is not a PostgreSQL URL.
    #[error("invalid database url: {0}")]
    InvalidUrl(String),
    /// The database failed or refused a statement.
    #[error("test database: {0}")]
    Database(#[from] DatabaseError),
    /// Migrating the test schema failed.
    #[error("migrating the test schema: {0}")]
    Migrate(#[from] MigrateError),
    /// The worker builder's configuration is invalid.
    #[error("test worker: {0}")]
    Config(#[from] ConfigError),
    /// A claim or an outcome could not be written.
    #[error("test worker: {0}")]
    Transport(#[from] TransportError),
    /// Listing the schema's jobs failed.
    #[error("listing jobs: {0}")]
    Client(#[from] ClientError),
    /// A queued job of the kind asked for does not decode as its type.
    #[error("job {id} of kind {kind:?} does not decode: {reason}")]
    Decode {
        /// The job.
        id: JobId,
        /// Its kind.
        kind: String,
        /// serde's message.
        reason: String,
    },
    /// [`TestWorker::work_until_idle`] ran [`MAX_WORKED`] jobs and more were still due (a
    /// job that snoozes for zero, or enqueues itself again?).
    #[error("still busy after {0} jobs")]
    StillBusy(usize),
}

/// A fresh, migrated schema for one test, dropped by
/// [`cleanup`](Self::cleanup) (or, best effort, on drop; see the [module](self) docs).
pub struct TestSchema {
    client: Client,
    /// The pool was made by [`connect`](Self::connect): `cleanup` closes it.
    owns_pool: bool,
    /// Set once the schema was dropped (or handed back): nothing left for `Drop`.
    cleaned: bool,
}

impl fmt::Debug for TestSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // not the pool's options: they hold the password
        f.debug_struct("TestSchema")
            .field("schema", &self.client.schema().name())
            .finish_non_exhaustive()
    }
}

impl TestSchema {
    /// A fresh schema of the database `DATABASE_URL` names.
    ///
    /// # Errors
    /// [`TestError::NoDatabaseUrl`], [`TestError::InvalidUrl`], [`TestError::Database`] if
    /// it cannot connect, [`TestError::Migrate`].
    pub async fn new() -> Result<Self, TestError> {
        let url = std::env::var("DATABASE_URL").map_err(|_| TestError::NoDatabaseUrl)?;
        Self::connect(&url).await
    }

    /// A fresh schema of the database at `url`, on a pool of its own (10
    /// connections).
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub async fn connect(url: &str) -> Result<Self, TestError> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|error: sqlx::Error| TestError::InvalidUrl(error.to_string()))?;
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect_with(options)
            .await
            .map_err(DatabaseError::new)?;
        let mut test = Self::with_pool(pool).await?;
        test.owns_pool = true;
        Ok(test)
    }

    /// A fresh schema, on `pool`.
    ///
    /// # Errors
    /// [`TestError::Migrate`].
    pub async fn with_pool(pool: PgPool) -> Result<Self, TestError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("harel_test_{}", &id[..16]);
        let schema = Schema::new(&name)?;
        Self::with_schema(pool, schema).await
    }

    /// `schema` on `pool`, migrated; [`cleanup`](Self::cleanup) (or the drop)
    /// drops that schema with everything in it, whoever created it. Only for a database of
    /// the test's own (`#[sqlx::test]`), where the default schema is free.
    ///
    /// # Errors
    /// [`TestError::Migrate`].
    pub async fn with_schema(pool: PgPool, schema: Schema) -> Result<Self, TestError> {
        let test = Self {
            client: Client::with_schema(pool, schema),
            owns_pool: false,
            cleaned: false,
        };
        // on an error, `test` is dropped here and its drop removes what was created
        test.client.migrate().await?;
        Ok(test)
    }

    /// The client of the test schema: enqueue through it (or pass it to the code under
    /// test), look jobs up.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The client of the test schema, as [`client`](Self::client).
    #[deprecated(since = "0.2.0", note = "renamed to client")]
    pub fn queue(&self) -> &Client {
        &self.client
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        self.client.pool()
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        self.client.schema()
    }

    /// A worker builder for this schema (for [`TestWorker::new`], or a real pool).
    pub fn worker<S: Send + Sync + 'static>(&self, state: S) -> WorkerBuilder<S> {
        self.client.worker(state)
    }

    /// Enqueues `job` into the test schema on `executor` (the test's transaction, `&mut
    /// *tx`, or the pool), as [`Client::enqueue`] does: the same builder, so options go on
    /// it before the `.await` (`.delay(…)`, `.group(…)`, `.after(…)`, `.queue(…)`), and
    /// it resolves to the job's id.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use harel_jobs::testing::TestSchema;
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping;
    /// # impl harel_jobs::Job for Ping { const KIND: &'static str = "ping"; }
    /// # async fn example(test: &TestSchema) -> Result<(), Box<dyn std::error::Error>> {
    /// let id = test.enqueue(test.pool(), Ping).delay(Duration::from_secs(3600)).await?;
    /// # Ok(()) }
    /// ```
    pub fn enqueue<'c, J: Job, E: PgExecutor<'c>>(&self, executor: E, job: J) -> Enqueue<'c, J, E> {
        self.client.enqueue(executor, job)
    }

    /// Makes job `id` due now, as `connection` sees it: its own time (a delay,
    /// `not_before`) becomes now, and if it is its group's first job, its group's wait (a
    /// retry's backoff, a snooze) ends now. A job behind others of its group still waits for
    /// them (FIFO per group), a job pending on its parents is not touched, nor a running
    /// one. Returns whether anything changed.
    ///
    /// # Errors
    /// [`TestError::Database`].
    pub async fn make_due<'c>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
        id: JobId,
    ) -> Result<bool, TestError> {
        let mut connection = connection.acquire().await.map_err(DatabaseError::new)?;
        let made = due_now(
            self.client.store(),
            &mut connection,
            Due {
                scheduled: true,
                retries: true,
                job: Some(id.get()),
            },
        )
        .await?;
        Ok(made > 0)
    }

    /// The jobs of type `J` still in the queue (waiting, scheduled, running or retrying),
    /// in enqueue order, as `connection` sees them: pass the test's transaction
    /// (`&mut *tx`) to see what it enqueued before committing, or the pool. Read through
    /// `harel_list_jobs`, the function behind [`Client::jobs`].
    ///
    /// # Errors
    /// [`TestError::Database`], [`TestError::Client`]; [`TestError::Decode`] if one does not
    /// decode as `J`.
    pub async fn enqueued<'c, J: Job>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
    ) -> Result<Vec<EnqueuedJob<J>>, TestError> {
        let jobs = self.queued(connection, Some(J::KIND)).await?;
        jobs.into_iter()
            .map(|info| {
                let job = info.decode::<J>().map_err(|error| TestError::Decode {
                    id: info.id,
                    kind: info.kind.clone(),
                    reason: error.to_string(),
                })?;
                Ok(EnqueuedJob { job, info })
            })
            .collect()
    }

    /// Asserts that a job of type `J` for which `matches` is true is in the queue
    /// (waiting, scheduled, running or retrying), as `connection` sees it (see
    /// [`enqueued`](Self::enqueued)), and returns the first one.
    ///
    /// # Panics
    /// If there is none (the message lists the jobs of type `J` there are), or the queue
    /// cannot be read.
    pub async fn assert_enqueued<'c, J: Job>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
        matches: impl Fn(&J) -> bool,
    ) -> EnqueuedJob<J> {
        let jobs = match self.enqueued::<J>(connection).await {
            Ok(jobs) => jobs,
            Err(error) => panic!("assert_enqueued::<{}>: {error}", J::KIND),
        };
        let payloads: Vec<String> = jobs.iter().map(|job| job.info.payload.clone()).collect();
        match jobs.into_iter().find(|job| matches(&job.job)) {
            Some(job) => job,
            None => panic!(
                "assert_enqueued: no matching job of kind {:?} is queued; the queued ones: {payloads:?}",
                J::KIND
            ),
        }
    }

    /// Asserts that no job of type `J` for which `matches` is true is in the queue, as
    /// `connection` sees it.
    ///
    /// # Panics
    /// If there is one (the message shows it), or the queue cannot be read.
    pub async fn assert_not_enqueued<'c, J: Job>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
        matches: impl Fn(&J) -> bool,
    ) {
        let jobs = match self.enqueued::<J>(connection).await {
            Ok(jobs) => jobs,
            Err(error) => panic!("assert_not_enqueued::<{}>: {error}", J::KIND),
        };
        if let Some(job) = jobs.iter().find(|job| matches(&job.job)) {
            panic!(
                "assert_not_enqueued: job {} of kind {:?} is queued: {}",
                job.info.id,
                J::KIND,
                job.info.payload
            );
        }
    }

    /// Asserts that the queue holds no job of any kind (waiting, scheduled, running or
    /// retrying), as `connection` sees it.
    ///
    /// # Panics
    /// If it holds one (the message lists them), or the queue cannot be read.
    pub async fn assert_nothing_enqueued<'c>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
    ) {
        match self.queued(connection, None).await {
            Ok(jobs) if jobs.is_empty() => {}
            Ok(jobs) => {
                let listed: Vec<String> = jobs
                    .iter()
                    .map(|job| format!("{} {} {}", job.id, job.kind, job.payload))
                    .collect();
                panic!("assert_nothing_enqueued: the queue holds {listed:?}");
            }
            Err(error) => panic!("assert_nothing_enqueued: {error}"),
        }
    }

    /// Every queued job (of `kind`, if given), following the listing's cursor.
    async fn queued<'c>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
        kind: Option<&str>,
    ) -> Result<Vec<JobInfo>, TestError> {
        let mut connection = connection.acquire().await.map_err(DatabaseError::new)?;
        let mut query = JobQuery::new()
            .state(StateFilter::Queued)
            .limit(crate::vocabulary::MAX_PAGE);
        if let Some(kind) = kind {
            query = query.kind(kind);
        }
        let mut jobs = Vec::new();
        loop {
            let page = self.client.jobs_on(&mut *connection, &query).await?;
            jobs.extend(page.jobs);
            match page.next {
                Some(next) => query = query.after(next),
                None => break,
            }
        }
        Ok(jobs)
    }

    /// Drops the schema (everything in it), and closes the pool if
    /// [`new`](Self::new) or [`connect`](Self::connect) opened it. Call it at the end
    /// of the test, once its transactions have ended (one still open in the schema would
    /// make it wait).
    ///
    /// # Errors
    /// [`TestError::Database`]; the schema is then dropped on drop, best effort.
    pub async fn cleanup(mut self) -> Result<(), TestError> {
        self.client
            .store()
            .schema_drop(self.client.pool())
            .await
            .map_err(DatabaseError::new)?;
        self.cleaned = true;
        if self.owns_pool {
            self.client.pool().close().await;
        }
        Ok(())
    }
}

impl Drop for TestSchema {
    /// Best effort: drops the schema on a thread, runtime and connection of its own (a
    /// `Drop` cannot `.await`, and the test's runtime may be gone). Waits up to 5 s, then
    /// lets it go on in the background (see the [module](self) docs).
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        let options = self.client.pool().connect_options().as_ref().clone();
        let store = self.client.store().clone();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("harel-test-cleanup".to_owned())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(drop_schema(options, store));
                let _ = done.send(());
            });
        if spawned.is_ok() {
            let _ = wait.recv_timeout(DROP_WAIT);
        }
    }
}

/// Drops the schema, retrying while locks held by the test's transactions make it wait.
async fn drop_schema(options: PgConnectOptions, store: Store) {
    let deadline = tokio::time::Instant::now() + DROP_RETRY_FOR;
    loop {
        let attempt = async {
            let mut connection = PgConnection::connect_with(&options).await?;
            session::lock_timeout_set(&mut connection, Duration::from_secs(1)).await?;
            store.schema_drop(&mut connection).await?;
            connection.close().await
        };
        match attempt.await {
            Ok(()) => return,
            Err(error) if tokio::time::Instant::now() >= deadline => {
                tracing::warn!(error = %error, "could not drop a test schema");
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A job found in the queue by [`TestSchema::enqueued`]: the typed job and what the queue
/// knows of it.
#[derive(Debug)]
#[non_exhaustive]
pub struct EnqueuedJob<J> {
    /// The job, decoded.
    pub job: J,
    /// Its id, state, group, priority, attempts …
    pub info: JobInfo,
}

/// Runs jobs in the test's task, through the worker pool's own code, without its
/// background tasks (see the [module](self) docs for what differs).
pub struct TestWorker<S> {
    shared: std::sync::Arc<crate::worker::Shared<S>>,
    /// Replaces every retry's delay ([`TestWorker::backoff`]).
    backoff: Option<Backoff>,
}

impl<S> fmt::Debug for TestWorker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestWorker").finish_non_exhaustive()
    }
}

impl<S: Send + Sync + 'static> TestWorker<S> {
    /// A test worker with `builder`'s job types, state, schema and limits (attempts,
    /// backoff, timeout, retention, lease, priority floor).
    ///
    /// # Errors
    /// [`TestError::Config`], as [`WorkerBuilder::build`].
    pub fn new(builder: WorkerBuilder<S>) -> Result<Self, TestError> {
        let worker: Worker<S> = builder.build()?;
        // its counters and histograms are described as a pool's are
        crate::telemetry::describe();
        Ok(Self {
            shared: worker.into_shared(),
            backoff: None,
        })
    }

    /// Every retry of this test worker waits `backoff`, whatever the job type's own
    /// `#[job(backoff = …)]` or a `JobError`'s `retry_after` say (the builder's
    /// [`backoff`](WorkerBuilder::backoff) is only the default of types that set none, as
    /// in a pool). Snoozes keep their delay. [`WorkOutcome::Retrying`] reports the delay
    /// applied.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Every retry is due at once: [`backoff`](Self::backoff)`(Backoff::fixed(Duration::ZERO))`,
    /// so [`work_until_idle`](Self::work_until_idle) runs a failing job to its last attempt
    /// (its dead letter) in one call.
    pub fn retry_immediately(self) -> Self {
        self.backoff(Backoff::fixed(Duration::ZERO))
    }

    /// Claims the next due job as `connection` sees it (the test's transaction, `&mut
    /// *tx`, or a pool), runs its handler, and writes its outcome there. `None`: nothing
    /// is due.
    ///
    /// # Errors
    /// [`TestError::Database`], [`TestError::Transport`] if the claim or the outcome cannot
    /// be written. A failing handler is not an error: see [`WorkedJob::outcome`].
    pub async fn work_one<'c>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
    ) -> Result<Option<WorkedJob>, TestError> {
        let mut connection = connection.acquire().await.map_err(DatabaseError::new)?;
        Ok(
            inline::work_one(&self.shared, &mut connection, self.backoff)
                .await?
                .map(WorkedJob::from),
        )
    }

    /// Runs jobs as [`work_one`](Self::work_one) does until none is due, and returns what
    /// became of each, in the order they ran. Retried and snoozed jobs wait for their delay
    /// as they would in a pool, so a failing job runs once per call unless its delay is zero.
    ///
    /// # Errors
    /// As [`work_one`](Self::work_one); [`TestError::StillBusy`] after [`MAX_WORKED`]
    /// jobs.
    pub async fn work_until_idle<'c>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
    ) -> Result<Vec<WorkedJob>, TestError> {
        let mut connection = connection.acquire().await.map_err(DatabaseError::new)?;
        let mut worked = Vec::new();
        while let Some(job) = inline::work_one(&self.shared, &mut connection, self.backoff).await? {
            worked.push(WorkedJob::from(job));
            if worked.len() >= MAX_WORKED {
                return Err(TestError::StillBusy(worked.len()));
            }
        }
        Ok(worked)
    }

    /// Runs jobs until none is left that `options` lets run now, and returns what it did.
    /// With [`WorkOptions::scheduled`], jobs enqueued with a delay or a time are made due at
    /// once; with [`WorkOptions::retries`], groups waiting out a retry's backoff (or a
    /// snooze) are. Round after round: what is due runs (as
    /// [`work_until_idle`](Self::work_until_idle) does), then what waits is made due
    /// again (the retries just written, the jobs those runs enqueued or released), until a
    /// round runs nothing, or [`WorkOptions::max_jobs`] jobs ran
    /// ([`Drained::stopped_at_bound`]). A job that always fails so ends as a dead letter
    /// after its last attempt, and a job that snoozes or enqueues itself for ever stops at
    /// the bound.
    ///
    /// Kept as a pool keeps it: FIFO per group (a group runs its jobs in order, the next
    /// once the one before has ended), a job pending on its parents runs only once they
    /// complete (in the same call when they ran in it), a running (leased) job is not
    /// touched, nor a paused queue's. Jobs are made due in the whole schema, run from the
    /// worker's queues. Only the times change (a job made due gets now as its time).
    ///
    /// ```no_run
    /// # use harel_jobs::testing::{TestSchema, TestWorker, WorkOptions};
    /// # async fn example(test: &TestSchema, worker: &TestWorker<()>) -> Result<(), Box<dyn std::error::Error>> {
    /// // Oban's drain_queue(with_scheduled: true, with_recursion: true)
    /// let drained = worker.drain(test.pool(), WorkOptions::new().scheduled().retries()).await?;
    /// assert!(!drained.stopped_at_bound);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`work_one`](Self::work_one). Reaching the bound is not an error.
    pub async fn drain<'c>(
        &self,
        connection: impl Acquire<'c, Database = Postgres>,
        options: WorkOptions,
    ) -> Result<Drained, TestError> {
        let mut connection = connection.acquire().await.map_err(DatabaseError::new)?;
        let store = self.shared.store();
        let mut worked = Vec::new();
        let later = options.scheduled || options.retries;
        loop {
            if later {
                due_now(
                    store,
                    &mut connection,
                    Due {
                        scheduled: options.scheduled,
                        retries: options.retries,
                        job: None,
                    },
                )
                .await?;
            }
            let before = worked.len();
            loop {
                if worked.len() >= options.max_jobs {
                    return Ok(Drained {
                        worked,
                        stopped_at_bound: true,
                    });
                }
                match inline::work_one(&self.shared, &mut connection, self.backoff).await? {
                    Some(job) => worked.push(WorkedJob::from(job)),
                    None => break,
                }
            }
            // a round that ran nothing: nothing more can become due by running
            if !later || worked.len() == before {
                return Ok(Drained {
                    worked,
                    stopped_at_bound: false,
                });
            }
        }
    }
}

/// Which jobs waiting for a time to make due now.
struct Due {
    /// Jobs with a time of their own in the future (not pending on parents).
    scheduled: bool,
    /// Groups parked after a release (a retry's backoff, a snooze) whose head is due.
    retries: bool,
    /// Only this job (and its group, if it is its head).
    job: Option<i64>,
}

/// Makes due now what `due` names; returns how many jobs and groups it changed.
async fn due_now(store: &Store, connection: &mut PgConnection, due: Due) -> Result<i64, TestError> {
    let (jobs, heads) = if due.scheduled {
        store
            .jobs_due_now(&mut *connection, due.job)
            .await
            .map_err(DatabaseError::new)?
    } else {
        (0, Vec::new())
    };
    let groups = store
        .groups_due_now(&mut *connection, due.retries, &heads, due.job)
        .await
        .map_err(DatabaseError::new)?;
    Ok(jobs + groups)
}

/// What [`TestWorker::drain`] makes due and how far it goes. [`new`](Self::new): nothing
/// made due (as [`TestWorker::work_until_idle`]), at most [`DRAIN_MAX_JOBS`] jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkOptions {
    /// Jobs enqueued with a delay or a time ([`WorkOptions::scheduled`]).
    scheduled: bool,
    /// Groups waiting out a retry's backoff or a snooze ([`WorkOptions::retries`]).
    retries: bool,
    /// At most this many jobs run ([`WorkOptions::max_jobs`]).
    max_jobs: usize,
}

/// The default bound of [`TestWorker::drain`]: jobs run at most.
pub const DRAIN_MAX_JOBS: usize = 1_000;

impl Default for WorkOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkOptions {
    /// Only what is due now, at most [`DRAIN_MAX_JOBS`] jobs.
    pub fn new() -> Self {
        Self {
            scheduled: false,
            retries: false,
            max_jobs: DRAIN_MAX_JOBS,
        }
    }

    /// Jobs enqueued with a delay or a time run now (Oban's `with_scheduled: true`), and
    /// those that runs enqueue with one. Not a job pending on its parents.
    pub fn scheduled(mut self) -> Self {
        self.scheduled = true;
        self
    }

    /// Retries run now, without waiting for their backoff (whatever set it: the job type's,
    /// the worker's, a `retry_after`), until each job succeeds or ends dead after its last
    /// attempt; snoozed jobs too (a snooze parks its group as a retry does).
    pub fn retries(mut self) -> Self {
        self.retries = true;
        self
    }

    /// At most `jobs` run (attempts, counted one by one); then the drain stops and says so
    /// ([`Drained::stopped_at_bound`]).
    pub fn max_jobs(mut self, jobs: usize) -> Self {
        self.max_jobs = jobs;
        self
    }
}

/// What [`TestWorker::drain`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drained {
    /// The attempts it ran, in order.
    pub worked: Vec<WorkedJob>,
    /// It stopped because [`WorkOptions::max_jobs`] attempts ran: more may be due.
    pub stopped_at_bound: bool,
}

/// One job a [`TestWorker`] ran.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkedJob {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its group.
    pub group: String,
    /// Which attempt this was, from 1.
    pub attempt: u32,
    /// What became of it.
    pub outcome: WorkOutcome,
}

impl WorkedJob {
    /// The handler's error, for an attempt that failed (retried or dead).
    pub fn error(&self) -> Option<&str> {
        match &self.outcome {
            WorkOutcome::Retrying { error, .. } | WorkOutcome::Dead { error } => Some(error),
            _ => None,
        }
    }
}

/// What became of a job a [`TestWorker`] ran: the pool's decision, as written.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkOutcome {
    /// The handler returned `Ok`: the job completed.
    Succeeded,
    /// The attempt failed and attempts remain: it runs again after `delay`.
    Retrying {
        /// The error (the handler's, a panic's, a timeout's).
        error: String,
        /// How long until it is due again.
        delay: Duration,
    },
    /// It failed for good and moved to the dead letters.
    Dead {
        /// The error recorded with the dead letter.
        error: String,
    },
    /// The handler snoozed it: it runs again after `delay`, the attempt given back.
    Snoozed {
        /// How long until it is due again.
        delay: Duration,
    },
    /// A cancel was asked for while it ran: it ended as cancelled.
    Cancelled,
    /// The lease was lost before the outcome was written (the handler ran past the lease,
    /// and another worker claimed the job): nothing was written.
    LeaseLost,
}

impl From<Inline> for WorkedJob {
    fn from(inline: Inline) -> Self {
        use crate::retry::Decision;
        let outcome = match (inline.written, inline.decision) {
            (LeaseOutcome::Cancelled, _) => WorkOutcome::Cancelled,
            (written, _) if !written.is_applied() && !inline.completed_in_tx => {
                WorkOutcome::LeaseLost
            }
            (_, Decision::Succeeded) => WorkOutcome::Succeeded,
            (_, Decision::Retry { delay, error }) => WorkOutcome::Retrying { error, delay },
            (_, Decision::Dead { error, .. }) => WorkOutcome::Dead { error },
            (_, Decision::Snooze(delay)) => WorkOutcome::Snoozed { delay },
            // a test worker is never shut down; were it, the job was given back
            (_, Decision::Released { .. }) => WorkOutcome::LeaseLost,
        };
        Self {
            id: inline.message.lease.id,
            kind: inline.message.kind,
            group: inline.message.lease.group,
            attempt: inline.message.attempt,
            outcome,
        }
    }
}

/// The test helper named `TestQueue` before 0.2.0 (it is a schema, holding any number of
/// named queues).
#[deprecated(since = "0.2.0", note = "renamed to TestSchema")]
pub type TestQueue = TestSchema;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_options_make_nothing_due_unless_asked() {
        let plain = WorkOptions::new();
        assert_eq!(plain, WorkOptions::default());
        assert!(!plain.scheduled && !plain.retries);
        assert_eq!(plain.max_jobs, DRAIN_MAX_JOBS);
        let all = WorkOptions::new().scheduled().retries().max_jobs(5);
        assert!(all.scheduled && all.retries);
        assert_eq!(all.max_jobs, 5);
    }
}
