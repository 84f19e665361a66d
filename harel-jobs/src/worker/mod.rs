//! The embedded worker pool: claims jobs, runs their handlers, writes their outcomes.
//!
//! One pool is a handful of tokio tasks around a shared state:
//! - the **fetcher** claims as many groups as there are free slots (more while
//!   handlers are fast), in one round trip, and spawns a task per job (`fetch.rs`);
//! - each **job task** decodes the payload, runs the handler with its timeout, catches
//!   panics, and asks the retry policy (`crate::retry`) what becomes of the job
//!   (`execute.rs`);
//! - the **completer** writes outcomes in batches (`complete.rs`);
//! - the **heartbeat** extends every held lease in one round trip per beat (`heartbeat.rs`);
//! - the **listener** wakes the fetcher on `NOTIFY` (`listen.rs`);
//! - **maintenance** runs the queue's housekeeping (`harel_maintain`: the claim floors'
//!   sweep, old receipts) and vacuums the queue tables when the server's autovacuum is off
//!   (`maintain.rs`);
//! - the **supervisor** starts them, watches them (one that fails stops the pool, reported
//!   by the [`WorkerHandle`]), and runs the graceful shutdown (`supervise.rs`).
//!
//! The fetcher, the completer and the heartbeat work on connections of their own
//! (`connection.rs`): claims and heartbeats commit durably, outcomes without waiting for the
//! WAL flush, each set by a statement once the connection opens (behind a transaction
//! pooler, by `SET LOCAL` in each call's own transaction). Every database call of the pool
//! is bounded by [`WorkerBuilder::database_timeout`]; a call abandoned at its bound drops
//! its connection.

mod complete;
mod config;
pub(crate) mod connection;
#[cfg(feature = "metrics")]
mod depth;
mod execute;
mod fault;
mod fetch;
mod heartbeat;
mod inflight;
#[cfg(feature = "testing")]
pub(crate) mod inline;
mod lane;
mod listen;
mod maintain;
mod own_thread;
mod registry;
mod report;
mod schedule;
mod stats;
mod supervise;
mod task;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[cfg(feature = "__fault_injection")]
#[doc(hidden)]
pub use fault::InjectedFault;
pub use stats::WorkerStats;
pub use task::WorkerTask;

use crate::error::ConfigError;
use crate::job::Handler;
use crate::retry::Backoff;
use crate::schema::Schema;
use crate::store::Store;
use crate::transport::Transport;
use crate::vocabulary::Priority;
use config::WorkerConfig;
use fault::Faults;
use inflight::InFlight;
use lane::Lane;
use registry::Registry;
use stats::Stats;

/// What every task of one pool shares.
pub(crate) struct Shared<S> {
    pool: PgPool,
    /// The schema's statements, prepared as the configuration says (unnamed behind a
    /// transaction pooler): every database call of the pool goes through it.
    store: Store,
    /// The transport over that store.
    transport: Transport,
    state: Arc<S>,
    registry: Registry<S>,
    config: WorkerConfig,
    /// The queues the pool serves, each with its own slots and fetcher.
    lanes: Vec<Lane>,
    inflight: InFlight,
    stats: Stats,
    /// Shutdown has begun: claim nothing more.
    stop_claiming: CancellationToken,
    /// The grace period is over: abandon running handlers (they are released).
    hard_stop: CancellationToken,
    /// Faults the test suite injects (nothing, without the `__fault_injection` feature).
    faults: Faults,
    /// Jobs the fetcher claimed during shutdown and has not given back yet.
    unreleased_claims: std::sync::atomic::AtomicUsize,
    /// The periodic schedules this pool enqueues the jobs of.
    schedules: Vec<schedule::PeriodicJob>,
    /// This pool's id in its reports to operators (`harel_worker_report`).
    worker_id: uuid::Uuid,
}

/// A configured worker pool, ready to [`start`](Worker::start).
///
/// ```no_run
/// use std::time::Duration;
/// use harel_jobs::{Job, Handler, JobContext, JobResult, Worker};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping;
/// # impl Job for Ping { const KIND: &'static str = "ping"; }
/// # impl Handler<()> for Ping { async fn handle(self, _: JobContext<()>) -> JobResult { Ok(()) } }
///
/// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let worker = Worker::builder(pool, ())
///     .register::<Ping>()
///     .concurrency(16)
///     .lease(Duration::from_secs(60))
///     .build()?;
/// let handle = worker.start();
/// tokio::signal::ctrl_c().await?;
/// handle.shutdown().await?; // finish running jobs, give back the rest
/// # Ok(()) }
/// ```
pub struct Worker<S> {
    shared: Arc<Shared<S>>,
    runtime: tokio::runtime::Handle,
}

impl<S> fmt::Debug for Worker<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // not the pool: its connect options hold the password
        f.debug_struct("Worker")
            .field("config", &self.shared.config)
            .field("kinds", &self.shared.registry.kinds().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl<S: Send + Sync + 'static> Worker<S> {
    /// A builder for a pool on `pool`, whose handlers share `state`.
    ///
    /// The pool's defaults: concurrency 16, lease 30 s with a heartbeat every 10 s, poll
    /// every 1 s when no notification comes, 10 attempts, backoff 2 s doubling to 1 h, no
    /// timeout, 30 s shutdown grace, 10 s database timeout, claims of up to 256 groups and
    /// settles of up to 512 outcomes per round trip (one claim per queue and one settle in
    /// flight at a time), schema `harel`.
    ///
    /// The worker opens four connections of its own besides `pool` (claims, outcomes, the
    /// heartbeat, LISTEN), so that handlers holding every pooled connection cannot starve
    /// it, a fifth for a moment while it vacuums (only where autovacuum is off), and with the
    /// `metrics` feature one more on the one worker per schema that samples the depth
    /// gauges. `pool`
    /// gives their connection settings (LISTEN's too, unless
    /// [`listen_connect_options`](WorkerBuilder::listen_connect_options) says otherwise) and
    /// serves the worker's occasional maintenance checks; share it with your handlers
    /// through `state` if they need one. Behind PgBouncer in transaction mode, see
    /// [`behind_transaction_pooler`](WorkerBuilder::behind_transaction_pooler).
    pub fn builder(pool: PgPool, state: S) -> WorkerBuilder<S> {
        WorkerBuilder {
            pool,
            state: Arc::new(state),
            registry: Registry::new(),
            config: WorkerConfig::default(),
            duplicate: None,
            faults: Faults::default(),
            schedules: Vec::new(),
            duplicate_schedule: None,
            served_elsewhere: Vec::new(),
        }
    }

    /// Starts the pool's tasks on the runtime `build` was called in. Returns at once.
    pub fn start(self) -> WorkerHandle {
        let shared = self.shared;
        let stats = Arc::clone(&shared);
        let stop = shared.stop_claiming.clone();
        let supervisor = if shared.config.own_thread {
            own_thread::spawn(&self.runtime, shared)
        } else {
            self.runtime.spawn(supervise::supervise(shared))
        };
        WorkerHandle {
            stop,
            supervisor: Some(supervisor),
            ended: None,
            stats: Box::new(move || stats.stats.snapshot()),
        }
    }
}

#[cfg(feature = "testing")]
impl<S> Worker<S> {
    /// The pool's shared state, for running jobs in-process (`testing`).
    pub(crate) fn into_shared(self) -> Arc<Shared<S>> {
        self.shared
    }
}

/// Configures a [`Worker`]; see [`Worker::builder`] for the defaults.
pub struct WorkerBuilder<S> {
    pool: PgPool,
    state: Arc<S>,
    registry: Registry<S>,
    config: WorkerConfig,
    duplicate: Option<&'static str>,
    faults: Faults,
    schedules: Vec<schedule::PeriodicJob>,
    /// A schedule name declared twice.
    duplicate_schedule: Option<String>,
    /// Queues another pool serves: kinds registered here for them are not refused.
    served_elsewhere: Vec<String>,
}

impl<S: Send + Sync + 'static> WorkerBuilder<S> {
    /// Enqueues the job `make` builds for each tick of `schedule` (given the tick's time),
    /// exactly once per tick however many worker processes declare the same schedule: the
    /// database decides which one's call enqueues it (no leader). The job runs like any
    /// other: on whichever worker claims it, with its type's retries and group. Register
    /// its type on the pools that should run it.
    ///
    /// Ticks fire by this process's clock. Ticks that passed while no worker ran the
    /// schedule are handled, when a worker starts, by the schedule's
    /// [`MissedTicks`](crate::MissedTicks) policy. `Client::schedules` lists the schedules
    /// with their last and next tick. The worker's role needs `EXECUTE` on
    /// `harel_schedule_fire` and `harel_schedules` (the guide's
    /// ["Database roles"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md#database-roles)).
    ///
    /// ```no_run
    /// use harel_jobs::{job, JobContext, JobResult, Periodic, Worker};
    ///
    /// #[job]
    /// async fn nightly_report(_ctx: JobContext<()>, day: String) -> JobResult {
    ///     Ok(())
    /// }
    ///
    /// # fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let nightly = Periodic::cron("nightly-report", "0 3 * * *")?.time_zone("Europe/Paris")?;
    /// let worker = Worker::builder(pool, ())
    ///     .register::<NightlyReport>()
    ///     .periodic(nightly, |tick| NightlyReport { day: tick.date_naive().to_string() })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn periodic<J: crate::job::Job>(
        mut self,
        schedule: crate::periodic::Periodic,
        make: impl Fn(chrono::DateTime<chrono::Utc>) -> J + Send + Sync + 'static,
    ) -> Self {
        if self
            .schedules
            .iter()
            .any(|s| s.schedule.name() == schedule.name())
        {
            self.duplicate_schedule
                .get_or_insert_with(|| schedule.name().to_owned());
        }
        let options = crate::enqueue::EnqueueOptions::new();
        self.schedules.push(schedule::PeriodicJob {
            schedule,
            make: Box::new(move |tick| options.message(&make(tick))),
        });
        self
    }

    /// Handles jobs of type `J` (its [`Job::KIND`](crate::Job::KIND)).
    pub fn register<J: Handler<S>>(mut self) -> Self {
        if !self.registry.register::<J>() {
            self.duplicate.get_or_insert(J::KIND);
        }
        self
    }

    /// Says that another pool serves the queue `name`: a job type registered here whose
    /// [`Job::QUEUE`](crate::Job::QUEUE) is `name` is then accepted by [`build`](Self::build)
    /// although this pool does not serve that queue (for a registration shared by pools
    /// that serve different queues). Without it, `build` refuses such a type
    /// ([`ConfigError::UnservedQueue`]): its jobs would wait for a pool that never comes.
    ///
    /// ```no_run
    /// # use harel_jobs::{Worker, Handler, JobContext, JobResult};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping;
    /// # impl harel_jobs::Job for Ping { const KIND: &'static str = "ping"; }
    /// # impl Handler<()> for Ping { async fn handle(self, _: JobContext<()>) -> JobResult { Ok(()) } }
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Mail;
    /// # impl harel_jobs::Job for Mail { const KIND: &'static str = "mail"; const QUEUE: &'static str = "mail"; }
    /// # impl Handler<()> for Mail { async fn handle(self, _: JobContext<()>) -> JobResult { Ok(()) } }
    /// # fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// // this process serves the default queue; the mail pool runs elsewhere
    /// let worker = Worker::builder(pool, ())
    ///     .register::<Ping>()
    ///     .register::<Mail>()
    ///     .served_elsewhere("mail")
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn served_elsewhere(mut self, name: impl Into<String>) -> Self {
        self.served_elsewhere.push(name.into());
        self
    }

    /// How many handlers run at once (default 16).
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.config.concurrency = concurrency;
        self.config.concurrency_set = true;
        self
    }

    /// How often the pool reports itself to operators (default 10 s; 100 ms to 1 h): its
    /// host, queues, running jobs and counters, read by [`Client::workers`](crate::Client::workers)
    /// and [`Client::throughput`](crate::Client::throughput). Its role needs `EXECUTE` on
    /// `harel_worker_report` (without it the pool logs a warning once and goes on).
    pub fn report_interval(mut self, interval: Duration) -> Self {
        self.config.report_interval = interval;
        self
    }

    /// Serves the named queue with `concurrency` handlers of its own (1 to 10,000), claimed
    /// by a fetcher of its own (one more connection per queue): a flood of jobs in one
    /// queue never takes the slots of another. A pool that names no queue serves the
    /// default one ([`DEFAULT_QUEUE`](crate::DEFAULT_QUEUE)) with
    /// [`concurrency`](Self::concurrency); a pool that names queues serves exactly those
    /// (name `"default"` among them to serve it too), and then `concurrency` is refused.
    /// Each queue's claims are one round trip, its own priority order and groups.
    ///
    /// ```no_run
    /// # use harel_jobs::{Worker, Handler, JobContext, JobResult};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping;
    /// # impl harel_jobs::Job for Ping { const KIND: &'static str = "ping"; }
    /// # impl Handler<()> for Ping { async fn handle(self, _: JobContext<()>) -> JobResult { Ok(()) } }
    /// # fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let worker = Worker::builder(pool, ())
    ///     .register::<Ping>()
    ///     .queue("default", 8)
    ///     .queue("mail", 4)
    ///     .queue("webhooks", 16)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn queue(mut self, name: impl Into<String>, concurrency: usize) -> Self {
        self.config.queues.push((name.into(), concurrency));
        self
    }

    /// How long a claim holds a job before another worker may take it, unless the
    /// heartbeat extends it (default 30 s; 100 ms to 24 h). It bounds how long a job of a
    /// crashed worker waits before it runs again.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease;
        self
    }

    /// Time between lease extensions while handlers run (default a third of the lease).
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat = Some(interval);
        self
    }

    /// How often to look for jobs when no notification arrives (default 1 s). Delayed and
    /// retried jobs, which send no notification, start within this of their time.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// Attempts per job for types that do not set their own (default 10).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// Backoff for types that do not set their own (default 2 s doubling to 1 h).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.config.backoff = backoff;
        self
    }

    /// Timeout of one attempt for types that do not set their own (default none).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = Some(timeout);
        self
    }

    /// Keeps completed jobs in the queue's history for `period` (at most 100 years), for
    /// types that do not set their own (`#[job(retain = "…")]`): `Client::job` then finds
    /// them as completed, with their attempts and duration; the maintenance task prunes
    /// them after `period`. Default none: a completed job is deleted at once, which is what
    /// keeps an ack cheap (BENCHMARKS.md has the cost).
    pub fn retain_completed(mut self, period: Duration) -> Self {
        self.config.retain = Some(period);
        self
    }

    /// How long shutdown waits for running handlers before giving their jobs back
    /// (default 30 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.config.shutdown_grace = grace;
        self
    }

    /// The longest the pool waits for one database call (default 10 s; 100 ms to 1 h): a
    /// claim, a heartbeat, a batch of outcomes, giving back unstarted jobs, opening one of
    /// its own connections (LISTEN's included), a maintenance check or `VACUUM`.
    ///
    /// A call with no answer by then (a network partition, a frozen server) is abandoned and
    /// its connection dropped, never reused; claims, heartbeats and outcomes are retried on a
    /// new connection. It also bounds shutdown: [`WorkerHandle::shutdown`] returns within
    /// `shutdown_grace` + this (and a moment), whatever the network does. Keep it well above
    /// the slowest round trip you expect, and below the lease.
    pub fn database_timeout(mut self, timeout: Duration) -> Self {
        self.config.database_timeout = timeout;
        self
    }

    /// Takes only groups of this priority or higher (default: all).
    pub fn min_priority(mut self, priority: Priority) -> Self {
        self.config.min_priority = priority;
        self
    }

    /// Most groups claimed per round trip (default 256).
    pub fn claim_batch(mut self, batch: usize) -> Self {
        self.config.claim_batch = batch;
        self
    }

    /// Most outcomes written per round trip (default 512): one settle call carries
    /// successes, retries, snoozes and dead letters alike.
    pub fn settle_batch(mut self, batch: usize) -> Self {
        self.config.settle_batch = batch;
        self
    }

    /// How many claims per queue, and how many settle batches, the pool keeps in flight at
    /// once, each on a connection of its own (default 1, at most 8).
    ///
    /// With one of each, a pool's throughput is its batch over its round trip, and a round
    /// trip is what a busy machine stretches: each one waits for the database's backend,
    /// then for the pool's thread, to be given a core, and for the disk. Beside two
    /// `nice 19` CPU loops and an fsync writer on the 2-core machine of BENCHMARKS.md
    /// ("Noisy neighbour"), a pool of 16 drained 100,000 no-op jobs 2 to 3.5 times faster
    /// with 2 than with 1 when the loops ran in the application's own session (or cgroup),
    /// and 1.1 to 1.3 times faster when they ran in sessions of their own, as a neighbour's
    /// processes do. But claims in flight add up over a fleet, and concurrent claims
    /// skip and wait for each other's rows: on a quiet machine, 8 processes with 2 each
    /// drained 0.7 × what they drained with 1. So: 2 for one or two worker processes on a
    /// machine they share with other work; 1 (the default) for a fleet. Each pipeline past
    /// the first is one more connection per queue (claims) and one per pool (settles).
    pub fn pipelines(mut self, pipelines: usize) -> Self {
        self.config.pipelines = pipelines;
        self
    }

    /// Whether the pool runs on a current-thread Tokio runtime of its own, on a thread of
    /// its own (default false: on the runtime [`build`](Self::build) is called in).
    ///
    /// The pool's tasks hand work to each other once per round trip (a claimed job to its
    /// task, an outcome to the writer, a reply to the task waiting for it). On a
    /// multi-threaded runtime each hand-off may wake another thread, and a woken thread
    /// waits for a core: beside CPU-bound work, for the rest of the running task's time
    /// slice, whatever the nice values. On a thread of its own the hand-offs stay on one
    /// thread. On the 2-core machine of BENCHMARKS.md ("Drain", "Noisy neighbour"), a pool
    /// drained 100,000 no-op jobs 1.01–1.21 × faster on a quiet machine, and 6.6 × faster
    /// beside two `nice 19` CPU loops and an fsync writer in the application's own session
    /// (or cgroup) while the application's runtime there was mostly idle (about 3 × when
    /// it woke every millisecond); beside the same noise in sessions of their own, where
    /// the kernel's fair share of CPU between sessions decides, 1.15–1.22 ×.
    ///
    /// The handlers run on that thread too, one at a time on the CPU (up to the concurrency
    /// at once while they await): keep CPU-heavy work off it
    /// ([`spawn_blocking`](tokio::task::spawn_blocking), or your main runtime's
    /// [`Handle`](tokio::runtime::Handle) in the state), and never block it.
    ///
    /// A socket belongs to the runtime that opens it, and fails once that runtime ends. The
    /// pool's occasional queries (schema check, reports, maintenance, schedules) and your
    /// handlers' queries open connections of your sqlx pools on that thread's runtime; so
    /// after the pool stops, the thread stays, parked, running that runtime until the
    /// process exits (one idle thread per pool that stopped), and those connections keep
    /// working in your pools. [`WorkerHandle`] works from any runtime. If the thread or its
    /// runtime cannot be created, the pool runs on the runtime it was built in and logs a
    /// warning.
    pub fn own_thread(mut self, enabled: bool) -> Self {
        self.config.own_thread = enabled;
        self
    }

    /// The old name of [`settle_batch`](Self::settle_batch): the batch was never of acks
    /// only.
    #[deprecated(since = "0.2.0", note = "renamed to settle_batch")]
    pub fn ack_batch(self, batch: usize) -> Self {
        self.settle_batch(batch)
    }

    /// Whether outcomes (acks, retries, dead letters) commit durably: with
    /// `synchronous_commit = on`, waiting for the WAL flush and, where
    /// `synchronous_standby_names` is set, for the standby (default false).
    ///
    /// By default outcomes do not wait for the flush: a job whose outcome was not flushed
    /// when the server crashed, or did not reach the standby that is promoted, runs again
    /// (at-least-once; measured across a failover with a synchronous standby: 26 to 38 of
    /// 6,000 jobs ran twice, see RELIABILITY.md). With this on, a completed job never runs
    /// again after a crash or a failover to a synchronous standby, at the cost of one flush
    /// (and standby round trip) per batch of outcomes. Claims and heartbeats are always
    /// durable.
    pub fn durable_outcomes(mut self, durable: bool) -> Self {
        self.config.durable_outcomes = durable;
        self
    }

    /// Whether to LISTEN for enqueue notifications (default true). Without, idle workers
    /// find new jobs by polling only.
    pub fn listen(mut self, listen: bool) -> Self {
        self.config.listen = listen;
        self
    }

    /// LISTENs on a connection made with `options` instead of the pool's: behind a
    /// transaction pooler, a direct connection to PostgreSQL (a LISTEN must stay on one
    /// server session, which a transaction pooler does not keep). One connection, held for
    /// the pool's life; nothing else runs on it.
    ///
    /// ```no_run
    /// # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Ping;
    /// # impl harel_jobs::Job for Ping { const KIND: &'static str = "ping"; }
    /// # impl harel_jobs::Handler<()> for Ping {
    /// #     async fn handle(self, _: harel_jobs::JobContext<()>) -> harel_jobs::JobResult { Ok(()) }
    /// # }
    /// // `pool` connects through PgBouncer (transaction mode); LISTEN goes to the server
    /// let direct: sqlx::postgres::PgConnectOptions =
    ///     "postgres://app@db.internal:5432/app".parse()?;
    /// let worker = harel_jobs::Worker::builder(pool, ())
    ///     .register::<Ping>()
    ///     .behind_transaction_pooler()
    ///     .listen_connect_options(direct)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn listen_connect_options(mut self, options: sqlx::postgres::PgConnectOptions) -> Self {
        self.config.listen_options = Some(config::ListenOptions(options));
        self
    }

    /// The pool's connections go through a transaction pooler (PgBouncer in `pool_mode =
    /// transaction`), which gives each transaction whatever server connection is free.
    /// The worker then keeps no state in sessions:
    /// - each claim, batch of outcomes, heartbeat and release runs in a transaction of its
    ///   own, whose first round trip (`BEGIN; SET LOCAL synchronous_commit = …`) also chooses
    ///   its durability (claims and heartbeats wait for the WAL flush, outcomes do not);
    /// - its statements are unnamed ([`PreparedStatements::Unnamed`](crate::PreparedStatements)),
    ///   parsed inside that transaction: nothing prepared is left on a server connection;
    /// - maintenance takes no session lock (see the guide's
    ///   ["Behind PgBouncer"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md#behind-pgbouncer));
    /// - LISTEN needs a connection past the pooler: with
    ///   [`listen_connect_options`](Self::listen_connect_options) it LISTENs there; without,
    ///   the pool polls only (every [`poll_interval`](Self::poll_interval)) and logs a
    ///   warning at start saying so.
    ///
    /// Each call then costs four round trips (`BEGIN`, parse, execute, `COMMIT`) instead of
    /// one; a batch of claims, outcomes or lease extensions still costs four in all.
    pub fn behind_transaction_pooler(mut self) -> Self {
        self.config.transaction_pooler = true;
        self
    }

    /// Whether this pool vacuums the queue tables when the server's autovacuum is off
    /// (default true). One worker per schema does it at a time; it needs the right to vacuum
    /// them (their owner), and logs a warning once if it lacks it. (The pool's other
    /// housekeeping, `harel_maintain` about once a second, always runs.)
    pub fn maintenance(mut self, maintenance: bool) -> Self {
        self.config.maintenance = maintenance;
        self
    }

    /// Works on the queue in `schema` (default `harel`).
    pub fn schema(mut self, schema: Schema) -> Self {
        self.config.schema = schema;
        self
    }

    /// Makes `task` fail with `fault` at its next step. For the test suite only.
    #[cfg(feature = "__fault_injection")]
    #[doc(hidden)]
    pub fn __inject_fault(mut self, task: WorkerTask, fault: InjectedFault) -> Self {
        self.faults.plan(task, fault);
        self
    }

    /// Checks the configuration.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for an out-of-range setting, no registered job type, two
    /// job types with one kind, or no Tokio runtime to start on;
    /// [`ConfigError::UnservedQueue`] for a registered job type whose queue this pool does
    /// not serve (see [`queue`](Self::queue) and [`served_elsewhere`](Self::served_elsewhere)).
    pub fn build(self) -> Result<Worker<S>, ConfigError> {
        self.config.validate()?;
        if self.registry.is_empty() {
            return Err(ConfigError::Invalid {
                name: "register",
                reason: "no job type registered",
            });
        }
        if let Some(kind) = self.duplicate {
            return Err(ConfigError::DuplicateKind(kind));
        }
        if let Some(name) = self.duplicate_schedule {
            return Err(ConfigError::InvalidSchedule {
                name,
                reason: "declared twice on one worker".to_owned(),
            });
        }
        // a kind whose queue nobody here serves would pile up unseen
        let lanes = self.config.lanes();
        let served = |queue: &str| {
            lanes.iter().any(|(name, _)| name == queue)
                || self.served_elsewhere.iter().any(|name| name == queue)
        };
        if let Some((kind, queue)) = self
            .registry
            .queues()
            .into_iter()
            .find(|(_, queue)| !served(queue))
        {
            return Err(ConfigError::UnservedQueue {
                kind,
                queue,
                served: lanes.into_iter().map(|(name, _)| name).collect(),
            });
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ConfigError::Invalid {
            name: "runtime",
            reason: "build the worker inside a Tokio runtime",
        })?;
        let store = Store::new(
            self.config.schema.clone(),
            self.config.prepared_statements(),
        );
        let worker_id = uuid::Uuid::new_v4();
        let lanes: Vec<Lane> = self
            .config
            .lanes()
            .into_iter()
            .map(|(queue, concurrency)| Lane::new(queue, concurrency, self.config.claim_batch))
            .collect();
        // counted by queue as well, for the report (a pool serves at most 1,000 queues)
        let stats = Stats::for_queues(lanes.iter().map(|lane| Arc::clone(&lane.queue)));
        let shared = Shared {
            pool: self.pool,
            transport: Transport::on(store.clone()).worker_id(worker_id),
            store,
            state: self.state,
            registry: self.registry,
            lanes,
            config: self.config,
            inflight: InFlight::default(),
            stats,
            stop_claiming: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
            faults: self.faults,
            unreleased_claims: std::sync::atomic::AtomicUsize::new(0),
            schedules: self.schedules,
            worker_id,
        };
        Ok(Worker {
            shared: Arc::new(shared),
            runtime,
        })
    }
}

/// A running worker pool. Dropping it starts a graceful shutdown without waiting for it;
/// prefer [`shutdown`](WorkerHandle::shutdown).
///
/// The pool stops on its own only when one of its background tasks failed (see
/// [`WorkerError::TaskFailed`]): [`stopped`](WorkerHandle::stopped) waits for that, and
/// [`is_finished`](WorkerHandle::is_finished) tells it without waiting, so that an
/// application can exit (and be restarted) rather than run on without a working pool.
///
/// ```no_run
/// # async fn example(handle: harel_jobs::WorkerHandle) -> Result<(), Box<dyn std::error::Error>> {
/// let mut handle = handle;
/// tokio::select! {
///     _ = tokio::signal::ctrl_c() => {
///         handle.shutdown().await?;
///     }
///     stopped = handle.stopped() => {
///         stopped?; // the pool died: exit with its error
///     }
/// }
/// # Ok(()) }
/// ```
pub struct WorkerHandle {
    stop: CancellationToken,
    supervisor: Option<tokio::task::JoinHandle<Result<(), WorkerError>>>,
    /// How the pool ended, once the supervisor was joined.
    ended: Option<Result<(), WorkerError>>,
    stats: Box<dyn Fn() -> WorkerStats + Send + Sync>,
}

impl fmt::Debug for WorkerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerHandle")
            .field("stopping", &self.stop.is_cancelled())
            .field("finished", &self.is_finished())
            .field("stats", &(self.stats)())
            .finish()
    }
}

/// Why a worker pool stopped, or did not shut down cleanly.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// A background task of the pool panicked, returned an error, or stopped on its own, so
    /// the pool stopped (logged at error level with the task and the reason). Jobs whose
    /// outcomes could not be written run again after their lease.
    #[error("worker pool stopped: its {task} failed: {reason}")]
    TaskFailed {
        /// The task.
        task: WorkerTask,
        /// Why: the panic's message, the task's error, or that it stopped on its own.
        reason: String,
    },
    /// Shutdown gave up writing the outcomes of `count` jobs (acks, retries, dead letters,
    /// releases) because the database did not answer within the
    /// [`database_timeout`](WorkerBuilder::database_timeout) after their handlers ended (a
    /// partition, a database down). Nothing is lost: those jobs keep their leases until
    /// they lapse, then run again (at least once), unless a write did reach the database
    /// before the pool gave up on its answer.
    #[error(
        "shutdown could not write the outcomes of {count} jobs in time: \
         they run again after their lease"
    )]
    OutcomesNotWritten {
        /// How many jobs.
        count: usize,
    },
    /// The pool did not start: its schema is not migrated for this release (not at all, by
    /// an older release, or by a newer one), so it claimed nothing. Run
    /// [`migrate`](crate::migrate()) as the queue's owner, then start the pool again.
    #[error("worker pool not started on schema {schema:?}: {reason}")]
    NotMigrated {
        /// The schema.
        schema: String,
        /// What `migrate` found (see [`MigrateError`](crate::MigrateError)).
        reason: String,
    },
    /// The pool's supervisor did not run to its end: it panicked (in the pool's code or in
    /// code it calls, such as a tracing subscriber), or the Tokio runtime it ran on shut
    /// down first. Jobs it held run again after their lease.
    #[error("the worker pool's supervisor ended abnormally: {0}")]
    Panicked(String),
}

impl WorkerHandle {
    /// What the pool did so far.
    pub fn stats(&self) -> WorkerStats {
        (self.stats)()
    }

    /// Whether the pool has stopped: after [`shutdown`](Self::shutdown) began, or on its
    /// own because a background task failed. Does not wait.
    pub fn is_finished(&self) -> bool {
        self.ended.is_some() || self.supervisor.as_ref().is_none_or(|s| s.is_finished())
    }

    /// Waits until the pool has stopped, without asking it to: it stops on its own only if
    /// one of its background tasks failed. Returns what [`shutdown`](Self::shutdown) would.
    /// Cancel-safe (use it in `tokio::select!`); later calls, and `shutdown`, return the
    /// same result.
    ///
    /// # Errors
    /// As [`shutdown`](Self::shutdown).
    pub async fn stopped(&mut self) -> Result<WorkerStats, WorkerError> {
        self.ended().await.clone()?;
        Ok(self.stats())
    }

    /// Shuts down gracefully: claims nothing more, lets running handlers finish within the
    /// grace period, gives back (releases at once) whatever did not finish, writes every outcome,
    /// then returns the final counters. Nothing is lost, and nothing waits for a lease to
    /// lapse.
    ///
    /// Returns within [`shutdown_grace`](WorkerBuilder::shutdown_grace) +
    /// [`database_timeout`](WorkerBuilder::database_timeout) (and a moment), whatever the
    /// network does: outcomes the database does not take in time are given up on, and
    /// reported.
    ///
    /// # Errors
    /// [`WorkerError::TaskFailed`] if a background task failed (before or during the
    /// shutdown), [`WorkerError::OutcomesNotWritten`] if outcomes could not be written in
    /// time, [`WorkerError::Panicked`] if the supervisor itself did not run to its end.
    pub async fn shutdown(mut self) -> Result<WorkerStats, WorkerError> {
        self.stop.cancel();
        self.stopped().await
    }

    /// Joins the supervisor once, and remembers how it ended.
    async fn ended(&mut self) -> &Result<(), WorkerError> {
        if self.ended.is_none() {
            let ended = match self.supervisor.as_mut() {
                Some(supervisor) => supervisor.await.unwrap_or_else(|error| {
                    Err(WorkerError::Panicked(if error.is_panic() {
                        execute::panic_message(&*error.into_panic())
                    } else {
                        "its runtime shut down".to_owned()
                    }))
                }),
                None => Ok(()),
            };
            self.supervisor = None;
            self.ended = Some(ended);
        }
        self.ended.get_or_insert(Ok(()))
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl<S> Shared<S> {
    /// The data layer of the pool's schema (the test worker's own statements).
    #[cfg(feature = "testing")]
    pub(crate) fn store(&self) -> &crate::store::Store {
        self.transport.store()
    }

    /// The metrics labels of a job of `kind` claimed by `lane`: the registered kind (or
    /// "unregistered") and the lane's queue.
    fn labels(&self, lane: usize, kind: &str) -> crate::telemetry::Labels {
        crate::telemetry::Labels {
            kind: self.registry.label(kind),
            queue: Arc::clone(&self.lanes[lane].queue),
        }
    }

    /// Wakes every lane's fetcher (a NOTIFY arrived, or acks may have freed groups).
    fn wake_all(&self) {
        for lane in &self.lanes {
            lane.wake.notify_one();
        }
    }
}
