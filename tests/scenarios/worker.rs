//! The worker scenarios: one list, run over each connection setup (River's
//! `riverdrivertest` is the model). `tests/worker.rs` runs them on direct connections and
//! `tests/pgbouncer.rs` through a real PgBouncer in transaction pooling mode; each file
//! includes this one (`#[path = "scenarios/worker.rs"] mod scenarios;`) and expands
//! [`worker_scenarios!`] with its [`Connection`]. A scenario states what must hold whatever
//! sits between the pool and the server; what only one setup can show (a role's connection
//! limit, sqlx's statements broken by the pooler) stays in that setup's file.
#![allow(dead_code)] // each test file uses a different part of the helpers

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::transport::{ClaimRequest, OutgoingMessage};
use harel_jobs::{
    Backoff, Client, Count, DeadLetter, DeadLetterQuery, DeadLetters, Enqueue, Handler, Job,
    JobBatch, JobContext, JobError, JobId, JobOptions, JobResult, PreparedStatements, Stats,
    Worker, WorkerBuilder, WorkerStats,
};
use harel_jobs_suite::cluster::{Cluster, ClusterOptions};
use harel_jobs_suite::pgbouncer::PgBouncer;
use harel_jobs_suite::{SuiteSchema, database_url};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};

/// Server connections PgBouncer keeps per database and user: fewer than its clients, so
/// that transactions of different clients share server connections.
pub const SERVER_POOL: u32 = 4;

/// How the pools of a scenario reach the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// Straight to PostgreSQL, with sqlx's cached statements.
    Direct,
    /// Through PgBouncer in transaction mode: unnamed statements, every call in a
    /// transaction, LISTEN on a direct connection of its own.
    PgBouncer,
}

/// A test queue reached one way: the pool producers and workers use, and (through
/// PgBouncer) the pooler in front of the server.
pub struct Setup {
    /// The queue's schema, with a direct pool for the test's own inspection.
    pub queue: SuiteSchema,
    /// The pool producers and workers use: the queue's own, or one through PgBouncer.
    pub pool: PgPool,
    /// The pooler, when there is one.
    pub bouncer: Option<PgBouncer>,
    url: String,
}

impl Setup {
    /// A fresh queue on the test server, reached by `connection`.
    pub async fn new(connection: Connection) -> Self {
        Self::at(connection, &database_url()).await
    }

    /// A fresh queue on the server of `url` (a private [`Cluster`]), reached by
    /// `connection`.
    pub async fn at(connection: Connection, url: &str) -> Self {
        let queue = SuiteSchema::new_at(url).await;
        let (pool, bouncer) = match connection {
            Connection::Direct => (queue.pool.clone(), None),
            Connection::PgBouncer => {
                let bouncer = PgBouncer::start_for(url, SERVER_POOL);
                (pool_through(&bouncer).await, Some(bouncer))
            }
        };
        Self {
            queue,
            pool,
            bouncer,
            url: url.to_owned(),
        }
    }

    /// How this setup reaches the server.
    pub fn connection(&self) -> Connection {
        match self.bouncer {
            None => Connection::Direct,
            Some(_) => Connection::PgBouncer,
        }
    }

    /// The statement policy this setup's calls need.
    pub fn statements(&self) -> PreparedStatements {
        match self.connection() {
            Connection::Direct => PreparedStatements::Cached,
            Connection::PgBouncer => PreparedStatements::Unnamed,
        }
    }

    /// A queue already made (by a test that migrates it itself) behind `bouncer`, reached
    /// through `pool`.
    pub fn behind(queue: SuiteSchema, bouncer: PgBouncer, pool: PgPool) -> Self {
        Self {
            queue,
            pool,
            bouncer: Some(bouncer),
            url: database_url(),
        }
    }

    /// A worker numbered `worker` on this setup's pool, every test job registered,
    /// configured for the pooler when there is one (LISTEN then on a direct connection).
    pub fn builder(&self, worker: usize, ledger: &Arc<Ledger>) -> WorkerBuilder<Shared> {
        let builder = self.builder_without_listen_connection(worker, ledger);
        match self.connection() {
            Connection::Direct => builder,
            Connection::PgBouncer => {
                let direct: PgConnectOptions = self.url.parse().expect("a postgres url");
                builder.listen_connect_options(direct)
            }
        }
    }

    /// [`Setup::builder`] without a direct connection for LISTEN: through the pooler, such
    /// a pool can only poll.
    pub fn builder_without_listen_connection(
        &self,
        worker: usize,
        ledger: &Arc<Ledger>,
    ) -> WorkerBuilder<Shared> {
        let shared = Shared {
            worker,
            ledger: Arc::clone(ledger),
        };
        let builder = Worker::builder(self.pool.clone(), shared)
            .schema(self.queue.schema.clone())
            .register::<Work>()
            .register::<FlakyOnce>()
            .register::<AlwaysFails>()
            .register::<Hopeless>()
            .register::<Slow>()
            .register::<Long>()
            .register::<Sleepy>()
            .poll_interval(Duration::from_millis(100));
        match self.connection() {
            Connection::Direct => builder,
            Connection::PgBouncer => builder.behind_transaction_pooler(),
        }
    }

    /// Begins a transaction on this setup's pool.
    pub async fn begin(&self) -> Transaction<'static, Postgres> {
        self.pool.begin().await.expect("begin")
    }

    /// Enqueues `job` inside `tx`, as this setup's producers do.
    pub async fn enqueue_in_tx<J: Job>(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        job: J,
    ) -> JobId {
        Enqueue::new(job, &mut **tx)
            .schema(&self.queue.schema)
            .prepared_statements(self.statements())
            .await
            .expect("enqueue")
    }

    /// Enqueues `job` in a transaction of its own, committed.
    pub async fn enqueue<J: Job>(&self, job: J) -> JobId {
        self.enqueue_at_priority(job, None).await
    }

    /// Enqueues `job` at `priority` (`None`: the job's own) in a transaction of its own.
    pub async fn enqueue_at_priority<J: Job>(&self, job: J, priority: Option<u8>) -> JobId {
        let mut tx = self.begin().await;
        let mut enqueue = Enqueue::new(job, &mut *tx)
            .schema(&self.queue.schema)
            .prepared_statements(self.statements());
        if let Some(priority) = priority {
            enqueue = enqueue.priority(priority);
        }
        let id = enqueue.await.expect("enqueue");
        tx.commit().await.expect("commit");
        id
    }

    /// Enqueues `jobs` as one batch in one transaction.
    pub async fn enqueue_all<J: Job>(&self, jobs: impl IntoIterator<Item = J>) {
        let mut batch =
            JobBatch::for_schema(&self.queue.schema).prepared_statements(self.statements());
        for job in jobs {
            batch.push(job).expect("push");
        }
        let mut tx = self.begin().await;
        batch.enqueue(&mut *tx).await.expect("enqueue batch");
        tx.commit().await.expect("commit");
    }

    /// Enqueues `jobs` one transaction each, from `clients` tasks at once.
    pub async fn enqueue_each<J: Job + Send + 'static>(&self, jobs: Vec<J>, clients: usize) {
        let jobs = Arc::new(Mutex::new(jobs.into_iter().rev().collect::<Vec<_>>()));
        let mut running = Vec::new();
        for _ in 0..clients {
            let (pool, schema, statements) = (
                self.pool.clone(),
                self.queue.schema.clone(),
                self.statements(),
            );
            let jobs = Arc::clone(&jobs);
            running.push(tokio::spawn(async move {
                loop {
                    let Some(job) = jobs.lock().unwrap().pop() else {
                        return;
                    };
                    let mut tx = pool.begin().await.expect("begin");
                    Enqueue::new(job, &mut *tx)
                        .schema(&schema)
                        .prepared_statements(statements)
                        .await
                        .expect("enqueue");
                    tx.commit().await.expect("commit");
                }
            }));
        }
        for task in running {
            task.await.expect("enqueue task");
        }
    }

    /// The queue's stats, read on this setup's pool in a transaction.
    pub async fn stats(&self) -> Stats {
        let mut tx = self.begin().await;
        let stats = Stats::fetch(&mut *tx, &self.queue.schema)
            .await
            .expect("stats");
        tx.commit().await.expect("commit");
        stats
    }

    /// Waits until the queue holds no job, failing the test after `limit`.
    pub async fn wait_until_idle(&self, limit: Duration) -> Stats {
        let started = Instant::now();
        loop {
            let stats = self.stats().await;
            if stats.is_idle() {
                return stats;
            }
            assert!(
                started.elapsed() < limit,
                "queue not drained after {limit:?}: {stats:?}\n{}",
                self.bouncer
                    .as_ref()
                    .map(PgBouncer::log)
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The dead-letter table of this queue.
    pub fn dead_letters(&self) -> DeadLetters {
        Client::with_schema(self.pool.clone(), self.queue.schema.clone())
            .prepared_statements(self.statements())
            .dead_letters()
    }

    /// The dead letter of job `id`, read on this setup's pool.
    pub async fn dead_letter(&self, id: JobId) -> Option<DeadLetter> {
        let mut tx = self.begin().await;
        let letter = self.dead_letters().get_in(&mut *tx, id).await.expect("get");
        tx.commit().await.expect("commit");
        letter
    }

    /// The first page of dead letters, read on this setup's pool.
    pub async fn dead_letter_list(&self) -> Vec<DeadLetter> {
        let mut tx = self.begin().await;
        let letters = self
            .dead_letters()
            .list_in(&mut *tx, &DeadLetterQuery::default())
            .await
            .expect("list");
        tx.commit().await.expect("commit");
        letters
    }

    /// What `SHOW synchronous_commit` says on every server connection this setup's pools
    /// use: as many transactions held open at once as there are connections cover them all.
    pub async fn synchronous_commit_everywhere(&self) -> Vec<String> {
        let (pool, connections) = match &self.bouncer {
            Some(bouncer) => (pool_through(bouncer).await, SERVER_POOL),
            None => (self.pool.clone(), self.pool.size()),
        };
        let mut transactions = Vec::new();
        let mut settings = Vec::new();
        for _ in 0..connections {
            let mut tx = pool.begin().await.expect("begin");
            let setting: String =
                sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
                    .persistent(false)
                    .fetch_one(&mut *tx)
                    .await
                    .expect("synchronous_commit");
            settings.push(setting);
            transactions.push(tx);
        }
        drop(transactions);
        settings
    }
}

/// A pool of 16 connections through `bouncer`.
pub async fn pool_through(bouncer: &PgBouncer) -> PgPool {
    PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(bouncer.connect_options())
        .await
        .expect("connect through pgbouncer")
}

/// One execution of a handler, as the handler saw it.
#[derive(Clone, Debug)]
pub struct Run {
    pub key: u64,
    pub group: String,
    pub worker: usize,
    pub attempt: u32,
    pub started: Instant,
    pub ended: Instant,
}

/// The state every test handler shares: a ledger of runs, and what is running per group.
#[derive(Default)]
pub struct Ledger {
    pub runs: Mutex<Vec<Run>>,
    pub running_groups: Mutex<HashSet<String>>,
    pub overlaps: Mutex<Vec<String>>,
    /// The names of the threads handlers ran on ("unnamed" for a thread without one).
    pub threads: Mutex<HashSet<String>>,
}

impl Ledger {
    /// The runs so far.
    pub fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }
}

/// Shares one ledger between several pools (each with its own worker number).
#[derive(Clone)]
pub struct Shared {
    pub worker: usize,
    pub ledger: Arc<Ledger>,
}

impl Shared {
    /// Runs `work` as job `key`, noting overlaps within its group and the run.
    pub async fn record<F: Future<Output = ()>>(
        &self,
        ctx: &JobContext<Shared>,
        key: u64,
        work: F,
    ) {
        let group = ctx.group().to_owned();
        if !self
            .ledger
            .running_groups
            .lock()
            .unwrap()
            .insert(group.clone())
        {
            self.ledger.overlaps.lock().unwrap().push(group.clone());
        }
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_owned();
        self.ledger.threads.lock().unwrap().insert(thread);
        let started = Instant::now();
        work.await;
        self.ledger.running_groups.lock().unwrap().remove(&group);
        self.ledger.runs.lock().unwrap().push(Run {
            key,
            group,
            worker: self.worker,
            attempt: ctx.attempt(),
            started,
            ended: Instant::now(),
        });
    }
}

/// Succeeds after sleeping `sleep_ms`; grouped by `group` when set.
#[derive(Serialize, Deserialize)]
pub struct Work {
    pub key: u64,
    pub group: Option<String>,
    pub sleep_ms: u64,
}

impl Job for Work {
    const KIND: &'static str = "work";
    fn group(&self) -> Option<String> {
        self.group.clone()
    }
}

impl Handler<Shared> for Work {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        let sleep = Duration::from_millis(self.sleep_ms);
        ctx.state()
            .record(&ctx, self.key, async move {
                if !sleep.is_zero() {
                    tokio::time::sleep(sleep).await;
                }
            })
            .await;
        Ok(())
    }
}

/// A job of no group that succeeds at once.
pub fn work(key: u64) -> Work {
    Work {
        key,
        group: None,
        sleep_ms: 0,
    }
}

/// Fails (or panics) on its first attempt, then succeeds. Fixed 300 ms backoff.
#[derive(Serialize, Deserialize)]
pub struct FlakyOnce {
    pub key: u64,
    pub panic: bool,
}

pub const FLAKY_BACKOFF: Duration = Duration::from_millis(300);

impl Job for FlakyOnce {
    const KIND: &'static str = "flaky_once";
    fn options() -> JobOptions {
        JobOptions::new().backoff(Backoff::fixed(FLAKY_BACKOFF))
    }
}

impl Handler<Shared> for FlakyOnce {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        if ctx.attempt() == 1 {
            if self.panic {
                panic!("flaky handler panicked on purpose");
            }
            return Err("first attempt fails".into());
        }
        Ok(())
    }
}

/// Always fails; two attempts.
#[derive(Serialize, Deserialize)]
pub struct AlwaysFails {
    pub key: u64,
}

impl Job for AlwaysFails {
    const KIND: &'static str = "always_fails";
    fn options() -> JobOptions {
        JobOptions::new()
            .max_attempts(2)
            .backoff(Backoff::fixed(Duration::from_millis(50)))
    }
}

impl Handler<Shared> for AlwaysFails {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        Err(JobError::retry(std::io::Error::other("smtp said no")))
    }
}

/// Fails permanently at once.
#[derive(Serialize, Deserialize)]
pub struct Hopeless;

impl Job for Hopeless {
    const KIND: &'static str = "hopeless";
}

impl Handler<Shared> for Hopeless {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, 0, async {}).await;
        Err(JobError::permanent("card declined"))
    }
}

/// Runs past its 200 ms timeout on the first attempt.
#[derive(Serialize, Deserialize)]
pub struct Slow {
    pub key: u64,
}

impl Job for Slow {
    const KIND: &'static str = "slow";
    fn options() -> JobOptions {
        JobOptions::new()
            .timeout(Duration::from_millis(200))
            .backoff(Backoff::fixed(Duration::from_millis(50)))
    }
}

impl Handler<Shared> for Slow {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        let first = ctx.attempt() == 1;
        ctx.state()
            .record(&ctx, self.key, async move {
                if first {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            })
            .await;
        Ok(())
    }
}

/// Runs 1.5 s: 3× the lease of the heartbeat scenario.
#[derive(Serialize, Deserialize)]
pub struct Long {
    pub key: u64,
}

impl Job for Long {
    const KIND: &'static str = "long";
}

impl Handler<Shared> for Long {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state()
            .record(
                &ctx,
                self.key,
                tokio::time::sleep(Duration::from_millis(1500)),
            )
            .await;
        Ok(())
    }
}

/// Snoozes twice (100 ms each), then succeeds: snoozes use no attempt.
#[derive(Serialize, Deserialize)]
pub struct Sleepy {
    pub key: u64,
}

impl Job for Sleepy {
    const KIND: &'static str = "sleepy";
    fn options() -> JobOptions {
        JobOptions::new().max_attempts(1)
    }
}

impl Handler<Shared> for Sleepy {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        let runs = ctx.state().ledger.runs.lock().unwrap().len();
        if runs < 3 {
            return Err(JobError::snooze(Duration::from_millis(100)));
        }
        Ok(())
    }
}

/// Waits until `done`, failing the test after `limit`.
pub async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sorts `runs` by start and checks that within each group they started in key order
/// (the tests give a group's jobs increasing keys in enqueue order).
pub fn assert_started_in_key_order_per_group(runs: &mut [Run]) {
    runs.sort_by_key(|r| r.started);
    let mut last: HashMap<&str, u64> = HashMap::new();
    for run in runs.iter() {
        if let Some(previous) = last.insert(&run.group, run.key) {
            assert!(
                previous < run.key,
                "{}: {previous} ran before {}",
                run.group,
                run.key
            );
        }
    }
}

/// No database error, no lost lease and no dropped outcome in a pool's life.
pub fn assert_no_database_errors(stats: &WorkerStats) {
    assert_eq!(stats.database_errors, 0, "{stats:?}");
    assert_eq!(stats.leases_lost, 0, "{stats:?}");
    assert_eq!(stats.outcomes_dropped, 0, "{stats:?}");
}

/// Expands to one `#[tokio::test]` per scenario below, each on a fresh queue reached by
/// `$connection`.
macro_rules! worker_scenarios {
    ($connection:expr) => {
        crate::scenarios::worker_scenarios!(@multi $connection; two_thousand_jobs_over_eight_workers_run_exactly_once_and_spread);
        crate::scenarios::worker_scenarios!(@single $connection; a_job_that_fails_once_is_retried_after_its_backoff_and_succeeds);
        crate::scenarios::worker_scenarios!(@single $connection; a_job_that_always_fails_is_dead_with_its_error_after_max_attempts);
        crate::scenarios::worker_scenarios!(@single $connection; a_permanent_error_is_dead_at_once);
        crate::scenarios::worker_scenarios!(@single $connection; a_vanished_worker_holds_its_lease_until_it_lapses_then_its_late_settle_changes_nothing);
        crate::scenarios::worker_scenarios!(@single $connection; a_rolled_back_enqueue_never_runs);
        crate::scenarios::worker_scenarios!(@multi $connection; jobs_of_a_group_run_in_order_and_never_two_at_once);
        crate::scenarios::worker_scenarios!(@multi $connection; jobs_enqueued_a_transaction_each_run_once_in_group_order_over_two_pools);
        crate::scenarios::worker_scenarios!(@multi $connection; pools_with_two_pipelines_run_every_job_once_in_group_order);
        crate::scenarios::worker_scenarios!(@multi $connection; a_pool_on_a_thread_of_its_own_runs_every_job_once_in_group_order);
        crate::scenarios::worker_scenarios!(@multi $connection; a_pool_with_own_thread_runs_every_job_once_in_group_order_on_that_thread);
        crate::scenarios::worker_scenarios!(@multi $connection; connections_an_own_thread_pool_opened_in_the_applications_pool_work_after_it_stops);
        crate::scenarios::worker_scenarios!(@single $connection; shutdown_mid_run_loses_nothing_and_nothing_waits_for_a_lease);
        crate::scenarios::worker_scenarios!(@single $connection; a_panicking_handler_is_retried_and_the_pool_keeps_running);
        crate::scenarios::worker_scenarios!(@single $connection; an_attempt_past_its_timeout_fails_and_is_retried);
        crate::scenarios::worker_scenarios!(@single $connection; a_bad_payload_is_dead_at_once_and_an_unknown_kind_after_its_attempts);
        crate::scenarios::worker_scenarios!(@single $connection; an_idle_worker_is_woken_by_notify_not_by_polling);
        crate::scenarios::worker_scenarios!(@single $connection; the_heartbeat_keeps_a_job_longer_than_its_lease_single);
        crate::scenarios::worker_scenarios!(@single $connection; a_retry_starts_when_its_backoff_ends_without_waiting_for_a_poll);
        crate::scenarios::worker_scenarios!(@single $connection; a_snooze_runs_the_job_again_without_using_an_attempt);
        crate::scenarios::worker_scenarios!(@single $connection; a_pool_with_a_priority_floor_takes_nothing_below_it);
        crate::scenarios::worker_scenarios!(@single $connection; a_job_whose_workers_keep_vanishing_is_dead_after_its_attempts_without_running_again);
        crate::scenarios::worker_scenarios!(@multi $connection; with_autovacuum_off_the_pool_vacuums_the_queue_tables_itself_and_leaves_no_lock_held);
        crate::scenarios::worker_scenarios!(@multi $connection; slow_jobs_are_not_hoarded_by_one_worker);
        crate::scenarios::worker_scenarios!(@multi $connection; a_job_committed_long_after_its_enqueue_runs_with_or_without_listen);
    };
    (@multi $connection:expr; $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            crate::scenarios::$name($connection).await
        }
    };
    (@single $connection:expr; $name:ident) => {
        #[tokio::test]
        async fn $name() {
            crate::scenarios::$name($connection).await
        }
    };
}
pub(crate) use worker_scenarios;

pub async fn two_thousand_jobs_over_eight_workers_run_exactly_once_and_spread(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..8)
        .map(|n| {
            setup
                .builder(n, &ledger)
                .concurrency(4)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    setup
        .enqueue_all((0..2000).map(|key| Work {
            sleep_ms: 1,
            ..work(key)
        }))
        .await;
    setup.wait_until_idle(Duration::from_secs(60)).await;
    for handle in handles {
        assert_no_database_errors(&handle.shutdown().await.unwrap());
    }

    let runs = ledger.runs();
    let mut per_key: HashMap<u64, usize> = HashMap::new();
    let mut per_worker = [0usize; 8];
    for run in &runs {
        *per_key.entry(run.key).or_default() += 1;
        per_worker[run.worker] += 1;
    }
    assert_eq!(per_key.len(), 2000, "every job ran");
    assert!(per_key.values().all(|&n| n == 1), "no job ran twice");
    assert!(
        per_worker.iter().all(|&n| n >= 50),
        "work spread over all workers: {per_worker:?}"
    );
}

pub async fn a_job_that_fails_once_is_retried_after_its_backoff_and_succeeds(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    setup
        .enqueue_all((0..50).map(|key| FlakyOnce { key, panic: false }))
        .await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.retried, stats.succeeded), (50, 50));
    assert_no_database_errors(&stats);

    let runs = ledger.runs();
    for key in 0..50 {
        let attempts: Vec<&Run> = runs.iter().filter(|r| r.key == key).collect();
        assert_eq!(attempts.len(), 2, "job {key}: one failure, one success");
        let (first, second) = (attempts[0], attempts[1]);
        assert_eq!((first.attempt, second.attempt), (1, 2));
        // the retry is parked for at least the jittered backoff (never earlier)
        assert!(second.started - first.ended >= FLAKY_BACKOFF.mul_f64(0.75));
    }
    assert!(setup.dead_letter_list().await.is_empty());
}

pub async fn a_job_that_always_fails_is_dead_with_its_error_after_max_attempts(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    let id = setup.enqueue(AlwaysFails { key: 7 }).await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_no_database_errors(&stats);
    assert_eq!((stats.retried, stats.dead_lettered), (1, 1), "{stats:?}");

    assert_eq!(ledger.runs().len(), 2, "exactly two attempts ran");
    let letter = setup.dead_letter(id).await.expect("dead letter");
    assert_eq!(letter.attempts, 2);
    assert_eq!(letter.kind, "always_fails");
    assert!(
        letter.last_error.contains("smtp said no"),
        "{}",
        letter.last_error
    );
    assert!(
        letter.last_error.contains("attempt 2 of 2"),
        "{}",
        letter.last_error
    );
    assert!(letter.failed_at >= letter.enqueued_at);
    assert_eq!(letter.decode::<AlwaysFails>().unwrap().key, 7);
    let letters = setup.dead_letter_list().await;
    assert_eq!(letters.len(), 1, "{letters:?}");

    // retry puts it back (same group, attempts start over): it fails twice more
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    let dead = setup.dead_letters();
    let mut tx = setup.begin().await;
    let again = dead.retry_in(&mut *tx, id).await.unwrap().expect("retried");
    tx.commit().await.unwrap();
    assert!(again > id);
    wait_for(Duration::from_secs(30), || ledger.runs().len() == 4).await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    assert_no_database_errors(&handle.shutdown().await.unwrap());
    assert_eq!(ledger.runs().len(), 4);
    let letter = setup.dead_letter(again).await.expect("dead again");
    assert_eq!(letter.attempts, 2);
    let mut tx = setup.begin().await;
    assert!(dead.delete_in(&mut *tx, again).await.unwrap());
    assert_eq!(dead.count_in(&mut *tx).await.unwrap(), 0);
    tx.commit().await.unwrap();
}

pub async fn a_permanent_error_is_dead_at_once(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    let id = setup.enqueue(Hopeless).await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.dead_lettered, stats.retried), (1, 0));
    let letter = setup.dead_letter(id).await.unwrap();
    assert_eq!(
        (letter.attempts, letter.last_error.as_str()),
        (1, "card declined")
    );
}

pub async fn a_vanished_worker_holds_its_lease_until_it_lapses_then_its_late_settle_changes_nothing(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let queue = &setup.queue;
    let id = setup.enqueue(work(1)).await;
    // the vanishing worker (on a direct connection): claims with a 700 ms lease, then goes
    // silent
    let vanished = queue
        .transport
        .claim(&queue.pool, &ClaimRequest::new(Duration::from_millis(700)))
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(vanished.lease.id, id);

    let ledger = Arc::new(Ledger::default());
    let handle = setup
        .builder(0, &ledger)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ledger.runs().is_empty(), "live lease respected");

    setup.wait_until_idle(Duration::from_secs(10)).await;
    handle.shutdown().await.unwrap();
    let runs = ledger.runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].attempt, 2,
        "the vanished claim counted as attempt 1"
    );

    let late = queue
        .transport
        .ack(&queue.pool, &vanished.lease)
        .await
        .unwrap();
    assert!(!late.is_applied(), "the late settle reports the lost lease");
    assert_eq!(queue.count("jobs").await, 0);
    assert_eq!(queue.count("dead_letters").await, 0);
}

pub async fn a_rolled_back_enqueue_never_runs(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();

    let mut tx = setup.begin().await;
    setup.enqueue_in_tx(&mut tx, work(1)).await;
    tx.rollback().await.unwrap();

    let mut tx = setup.begin().await;
    setup.enqueue_in_tx(&mut tx, work(2)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ledger.runs().is_empty(), "not visible before commit");
    tx.commit().await.unwrap();

    wait_for(Duration::from_secs(10), || !ledger.runs().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.shutdown().await.unwrap();
    let keys: Vec<u64> = ledger.runs().iter().map(|r| r.key).collect();
    assert_eq!(keys, [2]);
    assert_eq!(setup.stats().await.jobs.exact(), Some(0));
}

pub async fn jobs_of_a_group_run_in_order_and_never_two_at_once(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..8)
        .map(|n| {
            setup
                .builder(n, &ledger)
                .concurrency(8)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    // 50 groups × 40 jobs, interleaved across groups in one batch
    let jobs = (0..40).flat_map(|index| {
        (0..50).map(move |group| Work {
            key: group * 1000 + index,
            group: Some(format!("group-{group}")),
            sleep_ms: if index % 7 == 0 { 2 } else { 0 },
        })
    });
    setup.enqueue_all(jobs).await;
    setup.wait_until_idle(Duration::from_secs(120)).await;
    for handle in handles {
        assert_no_database_errors(&handle.shutdown().await.unwrap());
    }

    assert!(
        ledger.overlaps.lock().unwrap().is_empty(),
        "a group ran twice at once"
    );
    let mut runs = ledger.runs();
    assert_eq!(runs.len(), 2000);
    assert_started_in_key_order_per_group(&mut runs);
    let workers: HashSet<usize> = runs.iter().map(|r| r.worker).collect();
    assert!(workers.len() > 1, "groups were spread over workers");
}

pub async fn jobs_enqueued_a_transaction_each_run_once_in_group_order_over_two_pools(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..2)
        .map(|n| {
            setup
                .builder(n, &ledger)
                .listen(false)
                .concurrency(8)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    // 400 jobs in 20 groups, enqueued in key order from one client: a group's jobs must
    // run in that order
    let jobs = (0..400)
        .map(|key| Work {
            key,
            group: Some(format!("g{}", key % 20)),
            sleep_ms: key % 3,
        })
        .collect();
    setup.enqueue_each(jobs, 1).await;
    setup.wait_until_idle(Duration::from_secs(60)).await;
    let mut succeeded = 0;
    for handle in handles {
        let stats = handle.shutdown().await.unwrap();
        assert_no_database_errors(&stats);
        succeeded += stats.succeeded;
    }

    let runs = ledger.runs();
    let keys: Vec<u64> = runs.iter().map(|run| run.key).collect();
    assert_eq!(keys.len(), 400, "each job ran exactly once");
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 400);
    assert_eq!(succeeded, 400);
    assert!(
        ledger.overlaps.lock().unwrap().is_empty(),
        "a group ran two at once"
    );
    let mut by_group: HashMap<&str, Vec<u64>> = HashMap::new();
    for run in &runs {
        by_group.entry(&run.group).or_default().push(run.key);
    }
    for (group, keys) in by_group {
        assert!(keys.is_sorted(), "group {group} out of order: {keys:?}");
    }
    // the completer's `synchronous_commit = off` stayed in its own transactions
    let settings = setup.synchronous_commit_everywhere().await;
    assert!(settings.iter().all(|s| s == "on"), "{settings:?}");
}

/// Two claims and two settle batches in flight per pool (`WorkerBuilder::pipelines`), over
/// three pools: every job once, a group's jobs one at a time and in order, and a shutdown
/// that flushes both writers.
pub async fn pools_with_two_pipelines_run_every_job_once_in_group_order(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..3)
        .map(|n| {
            setup
                .builder(n, &ledger)
                .pipelines(2)
                .concurrency(8)
                .claim_batch(16)
                .settle_batch(16)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    // 60 groups × 30 jobs, interleaved across groups in one batch, and 600 of no group
    let jobs = (0..30).flat_map(|index| {
        (0..60).map(move |group| Work {
            key: group * 1000 + index,
            group: Some(format!("group-{group}")),
            sleep_ms: if index % 9 == 0 { 1 } else { 0 },
        })
    });
    setup.enqueue_all(jobs).await;
    setup.enqueue_all((100_000..100_600).map(work)).await;
    setup.wait_until_idle(Duration::from_secs(120)).await;
    let mut succeeded = 0;
    for handle in handles {
        let stats = handle.shutdown().await.unwrap();
        assert_no_database_errors(&stats);
        succeeded += stats.succeeded;
    }
    assert_eq!(succeeded, 2400, "every outcome written");
    assert!(
        ledger.overlaps.lock().unwrap().is_empty(),
        "a group ran twice at once"
    );
    let mut runs = ledger.runs();
    let keys: HashSet<u64> = runs.iter().map(|r| r.key).collect();
    assert_eq!((runs.len(), keys.len()), (2400, 2400), "each job ran once");
    runs.retain(|r| r.key < 100_000); // the jobs of no group have a group each
    assert_started_in_key_order_per_group(&mut runs);
    assert_eq!(setup.stats().await.jobs.exact(), Some(0));
}

/// The guide's pattern for a machine busy with other work: the application builds and runs
/// its pool on a current-thread runtime of its own, on a thread of its own, with the sqlx
/// pool of its main runtime; it enqueues from the main runtime and stops the pool from there.
/// Every job once, a group's jobs one at a time and in order, every outcome written at the
/// shutdown. The only pool: if the pattern did not work, nothing would drain the queue.
pub async fn a_pool_on_a_thread_of_its_own_runs_every_job_once_in_group_order(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let builder = setup.builder(0, &ledger).concurrency(8).claim_batch(16);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (report, reported) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("application-pool".to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let stats = runtime.block_on(async move {
                let handle = builder.build().unwrap().start();
                let _ = stopped.await;
                handle.shutdown().await.unwrap()
            });
            let _ = report.send(stats);
            // connections opened on this runtime went into the main runtime's sqlx pool:
            // they work only while it runs, so it keeps running (as `own_thread` does)
            runtime.block_on(std::future::pending::<()>());
        })
        .unwrap();
    enqueue_groups_and_singles_and_wait(&setup).await;
    stop.send(()).unwrap();
    let stats = reported.await.unwrap();
    assert_each_ran_once_in_order_on(&setup, &ledger, &stats, "application-pool").await;
}

/// `WorkerBuilder::own_thread`: the pool starts its own thread and runtime, and is started,
/// stopped and joined from the test's runtime like any pool. Every job once, a group's jobs
/// one at a time and in order, every handler on the pool's thread, every outcome written.
pub async fn a_pool_with_own_thread_runs_every_job_once_in_group_order_on_that_thread(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    run_on_own_thread_and_check(&setup).await;
}

/// `WorkerBuilder::own_thread`: the connections the pool opened on its thread for its own
/// queries went into the application's pool, and a socket works only while the runtime that
/// opened it runs. After the pool stopped, every connection of the application's pool (one
/// that does not ping before handing out) still serves a query.
pub async fn connections_an_own_thread_pool_opened_in_the_applications_pool_work_after_it_stops(
    connection: Connection,
) {
    let mut setup = Setup::new(connection).await;
    let application = PgPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .connect_lazy_with((*setup.pool.connect_options()).clone());
    setup.pool = application.clone();
    run_on_own_thread_and_check(&setup).await;
    assert_every_connection_serves_a_query(&application, application.size().max(1)).await;
}

/// Runs [`enqueue_groups_and_singles_and_wait`]'s jobs through a pool with `own_thread`, then
/// checks them ([`assert_each_ran_once_in_order_on`] the pool's thread).
async fn run_on_own_thread_and_check(setup: &Setup) {
    let ledger = Arc::new(Ledger::default());
    let handle = setup
        .builder(0, &ledger)
        .own_thread(true)
        .concurrency(8)
        .claim_batch(16)
        .build()
        .unwrap()
        .start();
    enqueue_groups_and_singles_and_wait(setup).await;
    let stats = handle.shutdown().await.unwrap();
    assert_each_ran_once_in_order_on(setup, &ledger, &stats, "harel-jobs-pool").await;
}

/// Checks out `count` connections of `pool` at once (so every idle one is among them) and
/// runs a query on each: none may be a socket of a runtime that has ended.
pub async fn assert_every_connection_serves_a_query(pool: &PgPool, count: u32) {
    let mut held = Vec::new();
    for _ in 0..count {
        held.push(pool.acquire().await.expect("a connection"));
    }
    for connection in &mut held {
        // the simple protocol: nothing prepared, as behind a transaction pooler
        sqlx::raw_sql("SELECT 1")
            .execute(&mut **connection)
            .await
            .expect("a connection of the application's pool serves a query after the pool stopped");
    }
}

/// 40 groups × 25 jobs, interleaved across groups in one batch, and 200 of no group; then
/// waits until the queue is idle.
async fn enqueue_groups_and_singles_and_wait(setup: &Setup) {
    let jobs = (0..25).flat_map(|index| {
        (0..40).map(move |group| Work {
            key: group * 1000 + index,
            group: Some(format!("group-{group}")),
            sleep_ms: if index % 9 == 0 { 1 } else { 0 },
        })
    });
    setup.enqueue_all(jobs).await;
    setup.enqueue_all((100_000..100_200).map(work)).await;
    setup.wait_until_idle(Duration::from_secs(120)).await;
}

/// The 1,200 jobs of [`enqueue_groups_and_singles_and_wait`]: each ran once, a group's one at
/// a time and in order, every outcome written, every handler on the thread named `thread`.
async fn assert_each_ran_once_in_order_on(
    setup: &Setup,
    ledger: &Ledger,
    stats: &harel_jobs::WorkerStats,
    thread: &str,
) {
    assert_no_database_errors(stats);
    assert_eq!(stats.succeeded, 1200, "every outcome written");
    assert!(
        ledger.overlaps.lock().unwrap().is_empty(),
        "a group ran twice at once"
    );
    let mut runs = ledger.runs();
    let keys: HashSet<u64> = runs.iter().map(|r| r.key).collect();
    assert_eq!((runs.len(), keys.len()), (1200, 1200), "each job ran once");
    runs.retain(|r| r.key < 100_000);
    assert_started_in_key_order_per_group(&mut runs);
    assert_eq!(setup.stats().await.jobs.exact(), Some(0));
    assert_eq!(
        *ledger.threads.lock().unwrap(),
        HashSet::from([thread.to_owned()]),
        "every handler ran on the pool's thread"
    );
}

pub async fn shutdown_mid_run_loses_nothing_and_nothing_waits_for_a_lease(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    // an hour-long lease: anything that had to wait for one would never finish below
    let first = setup
        .builder(0, &ledger)
        .lease(Duration::from_secs(3600))
        .concurrency(8)
        .shutdown_grace(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    setup
        .enqueue_all((0..200).map(|key| Work {
            sleep_ms: 20 + (key % 5) * 100,
            ..work(key)
        }))
        .await;
    wait_for(Duration::from_secs(30), || ledger.runs().len() >= 20).await;
    let stopped = first.shutdown().await.unwrap();
    assert!(
        stopped.released > 0,
        "some jobs were cut off and given back: {stopped:?}"
    );
    assert_no_database_errors(&stopped);
    assert_eq!(
        setup.stats().await.claimable_groups,
        Count::Exact(200 - stopped.succeeded as i64),
        "every unfinished job is claimable again at once"
    );

    let second = setup
        .builder(1, &ledger)
        .lease(Duration::from_secs(3600))
        .concurrency(32)
        .build()
        .unwrap()
        .start();
    setup.wait_until_idle(Duration::from_secs(60)).await;
    assert_no_database_errors(&second.shutdown().await.unwrap());
    let done: HashSet<u64> = ledger.runs().iter().map(|r| r.key).collect();
    assert_eq!(done.len(), 200, "every job completed");
}

pub async fn a_panicking_handler_is_retried_and_the_pool_keeps_running(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    setup
        .enqueue(FlakyOnce {
            key: 1,
            panic: true,
        })
        .await;
    setup.enqueue_all((10..20).map(work)).await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(stats.retried, 1);
    assert_eq!(stats.succeeded, 11);
    let attempts: Vec<u32> = ledger
        .runs()
        .iter()
        .filter(|r| r.key == 1)
        .map(|r| r.attempt)
        .collect();
    assert_eq!(attempts, [1, 2]);
}

pub async fn an_attempt_past_its_timeout_fails_and_is_retried(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    setup.enqueue(Slow { key: 3 }).await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.retried, stats.succeeded), (1, 1));
    // the timed-out attempt never finished (its future was dropped); the retry did
    let attempts: Vec<u32> = ledger.runs().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [2]);
}

pub async fn a_bad_payload_is_dead_at_once_and_an_unknown_kind_after_its_attempts(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let queue = &setup.queue;
    let transport = &queue.transport;
    let bad = transport
        .publish(
            &queue.pool,
            &OutgoingMessage::new("g1", "work", r#"{"wrong":true}"#),
        )
        .await
        .unwrap();
    let unknown = transport
        .publish(
            &queue.pool,
            &OutgoingMessage::new("g2", "nobody_knows", "{}"),
        )
        .await
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let handle = setup
        .builder(0, &ledger)
        .max_attempts(2)
        .backoff(Backoff::fixed(Duration::from_millis(50)))
        .build()
        .unwrap()
        .start();
    setup.wait_until_idle(Duration::from_secs(30)).await;
    handle.shutdown().await.unwrap();
    assert!(ledger.runs().is_empty());

    let letters = setup.dead_letter_list().await;
    assert_eq!(letters.len(), 2);
    let bad = letters.iter().find(|l| l.id == bad).unwrap();
    assert_eq!(
        bad.attempts, 1,
        "a payload that cannot decode is not retried"
    );
    assert!(
        bad.last_error
            .starts_with("payload does not decode as job kind \"work\""),
        "{}",
        bad.last_error
    );
    assert_eq!(bad.payload, r#"{"wrong":true}"#, "payload kept as it was");
    let unknown = letters.iter().find(|l| l.id == unknown).unwrap();
    assert_eq!(
        unknown.attempts, 2,
        "an unknown kind is retried (rolling deploys)"
    );
    assert!(
        unknown
            .last_error
            .starts_with("no handler registered for job kind \"nobody_knows\""),
        "{}",
        unknown.last_error
    );
}

pub async fn an_idle_worker_is_woken_by_notify_not_by_polling(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup
        .builder(0, &ledger)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .unwrap()
        .start();
    // let the worker go idle (its first claim finds nothing) and its LISTEN start
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    setup.enqueue(work(1)).await;
    wait_for(Duration::from_secs(10), || !ledger.runs().is_empty()).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the NOTIFY"
    );
    let before = handle.stats();
    assert_no_database_errors(&before);

    // kill the LISTEN connection: the listener reconnects and wakes keep working
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE query ILIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'",
    )
    .bind(setup.queue.schema.channel())
    .fetch_one(&setup.queue.pool)
    .await
    .unwrap();
    assert_eq!(killed, 1, "found the listener's connection");
    tokio::time::sleep(Duration::from_millis(500)).await;
    setup.enqueue(work(2)).await;
    wait_for(Duration::from_secs(10), || ledger.runs().len() == 2).await;
    handle.shutdown().await.unwrap();
}

pub async fn the_heartbeat_keeps_a_job_longer_than_its_lease_single(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let start = |n| {
        setup
            .builder(n, &ledger)
            .lease(Duration::from_millis(500))
            .heartbeat_interval(Duration::from_millis(100))
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap()
            .start()
    };
    let (a, b) = (start(0), start(1));
    // runs three times its lease, while the other pool polls for it every 50 ms
    setup.enqueue(Long { key: 1 }).await;
    setup.wait_until_idle(Duration::from_secs(20)).await;
    let (sa, sb) = (a.shutdown().await.unwrap(), b.shutdown().await.unwrap());
    assert_eq!(ledger.runs().len(), 1, "ran once");
    assert_eq!(sa.leases_lost + sb.leases_lost, 0);
    assert_no_database_errors(&sa);
    assert_no_database_errors(&sb);
}

pub async fn a_retry_starts_when_its_backoff_ends_without_waiting_for_a_poll(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup
        .builder(0, &ledger)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .unwrap()
        .start();
    setup
        .enqueue(FlakyOnce {
            key: 1,
            panic: false,
        })
        .await;
    // with an hour between polls, only the worker's own wake-up at the end of the
    // backoff can start the retry within this limit
    setup.wait_until_idle(Duration::from_secs(20)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.retried, stats.succeeded), (1, 1));
}

pub async fn a_snooze_runs_the_job_again_without_using_an_attempt(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    setup.enqueue(Sleepy { key: 1 }).await;
    setup.wait_until_idle(Duration::from_secs(20)).await;
    let stats = handle.shutdown().await.unwrap();
    // max_attempts is 1: had a snooze counted, the second run would have been the last
    assert_eq!(
        (stats.snoozed, stats.succeeded, stats.dead_lettered),
        (2, 1, 0)
    );
    let attempts: Vec<u32> = ledger.runs().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, [1, 1, 1]);
}

pub async fn a_pool_with_a_priority_floor_takes_nothing_below_it(connection: Connection) {
    let setup = Setup::new(connection).await;
    setup.enqueue_at_priority(work(1), Some(1)).await;
    setup.enqueue_at_priority(work(2), Some(3)).await;
    let ledger = Arc::new(Ledger::default());
    let handle = setup
        .builder(0, &ledger)
        .min_priority(harel_jobs::Priority::new(3).unwrap())
        .build()
        .unwrap()
        .start();
    wait_for(Duration::from_secs(10), || !ledger.runs().is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.shutdown().await.unwrap();
    let keys: Vec<u64> = ledger.runs().iter().map(|r| r.key).collect();
    assert_eq!(keys, [2], "only the priority-3 job ran");
    assert_eq!(
        setup.queue.count("jobs").await,
        1,
        "the priority-1 job waits"
    );
}

pub async fn a_job_whose_workers_keep_vanishing_is_dead_after_its_attempts_without_running_again(
    connection: Connection,
) {
    let setup = Setup::new(connection).await;
    let queue = &setup.queue;
    let id = setup.enqueue(AlwaysFails { key: 9 }).await; // max_attempts = 2
    for _ in 0..2 {
        // a worker claims it and dies: the attempt counts
        let claimed = queue
            .transport
            .claim(&queue.pool, &ClaimRequest::new(Duration::from_millis(200)))
            .await
            .unwrap()
            .expect("claimable again once the lease lapsed");
        assert_eq!(claimed.lease.id, id);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let ledger = Arc::new(Ledger::default());
    let handle = setup.builder(0, &ledger).build().unwrap().start();
    setup.wait_until_idle(Duration::from_secs(10)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(stats.dead_lettered, 1);
    assert!(ledger.runs().is_empty(), "not run a third time");
    let letter = setup.dead_letter(id).await.expect("dead letter");
    assert_eq!(letter.attempts, 2, "the attempts made, not the claims");
    assert!(
        letter
            .last_error
            .contains("attempt 2 of 2 never reported a result"),
        "{}",
        letter.last_error
    );
}

/// Where the server's autovacuum is off, the pool vacuums the queue tables itself. On a
/// private cluster started with `autovacuum = off`: the machine's server may have it either
/// way (PostgreSQL's default is on), and the test must run on both.
pub async fn with_autovacuum_off_the_pool_vacuums_the_queue_tables_itself_and_leaves_no_lock_held(
    connection: Connection,
) {
    let cluster = Cluster::start(ClusterOptions {
        settings: vec!["autovacuum = off".to_owned()],
        ..ClusterOptions::default()
    });
    let setup = Setup::at(connection, &cluster.url("postgres")).await;
    let queue = &setup.queue;
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&queue.pool)
        .await
        .unwrap();
    assert_eq!(autovacuum, "off", "the private cluster's setting");
    let vacuums = |table: &'static str| {
        let pool = queue.pool.clone();
        let schema = queue.schema.name().to_owned();
        async move {
            let count: i64 = sqlx::query_scalar(
                "SELECT COALESCE(sum(vacuum_count), 0)::bigint FROM pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = $2",
            )
            .bind(schema)
            .bind(table)
            .fetch_one(&pool)
            .await
            .unwrap();
            count
        }
    };
    assert_eq!(vacuums("transport_groups").await, 0);
    // the receipts of outcome batches churn too (one row per batch): 3,000 dead ones, as a
    // long day of batches leaves behind
    for statement in [
        "INSERT INTO @schema@.settle_receipts (receipt, applied) \
         SELECT gen_random_uuid(), '{}' FROM generate_series(1, 3000)",
        "DELETE FROM @schema@.settle_receipts",
    ] {
        sqlx::query(queue.sql(statement))
            .execute(&queue.pool)
            .await
            .unwrap();
    }
    let ledger = Arc::new(Ledger::default());
    let handle = setup
        .builder(0, &ledger)
        .concurrency(32)
        .build()
        .unwrap()
        .start();
    setup.enqueue_all((0..5000).map(work)).await;
    setup.wait_until_idle(Duration::from_secs(60)).await;
    // every 5 s the pool reads the dead-row counts: 5,000 drained groups are well past the
    // threshold
    let started = Instant::now();
    for table in ["transport_groups", "settle_receipts"] {
        while vacuums(table).await == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{table} was never vacuumed"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_no_database_errors(&handle.shutdown().await.unwrap());
    // a session lock taken through a pooler would still be held by a server connection
    // (the pool takes none: no advisory lock, and no lock of any kind outlives a call)
    let held: Vec<String> = sqlx::query_scalar(
        "SELECT l.locktype || ' ' || l.mode FROM pg_locks l
           JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE a.pid <> pg_backend_pid() AND a.datname = current_database()
            AND (l.locktype = 'advisory' OR l.relation IS NOT NULL)",
    )
    .fetch_all(&queue.pool)
    .await
    .unwrap();
    assert!(held.is_empty(), "locks still held after shutdown: {held:?}");
}

pub async fn slow_jobs_are_not_hoarded_by_one_worker(connection: Connection) {
    let setup = Setup::new(connection).await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..2)
        .map(|n| {
            setup
                .builder(n, &ledger)
                .concurrency(1)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    setup
        .enqueue_all((0..6).map(|key| Work {
            sleep_ms: 300,
            ..work(key)
        }))
        .await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    for handle in handles {
        handle.shutdown().await.unwrap();
    }
    let runs = ledger.runs();
    assert_eq!(runs.len(), 6);
    let first = runs.iter().filter(|r| r.worker == 0).count();
    assert!(
        (2..=4).contains(&first),
        "a slow worker claims only what it can run: {first} of 6 on worker 0"
    );
}

/// A job whose transaction commits long after its enqueue statement, while other jobs flow
/// (so the claims' floor moves past it): the pool runs it promptly, woken by its NOTIFY,
/// whose position the next claim takes as a hint; and without LISTEN, the maintenance
/// task's sweep (about once a second) brings it back.
pub async fn a_job_committed_long_after_its_enqueue_runs_with_or_without_listen(
    connection: Connection,
) {
    for listen in [true, false] {
        let setup = Setup::new(connection).await;
        let ledger = Arc::new(Ledger::default());
        let handle = setup
            .builder(0, &ledger)
            .listen(listen)
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap()
            .start();
        let mut late = setup.begin().await;
        setup.enqueue_in_tx(&mut late, work(1_000)).await;
        for key in 0..10 {
            setup.enqueue(work(key)).await;
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        wait_for(Duration::from_secs(10), || ledger.runs().len() == 10).await;
        late.commit().await.unwrap();
        wait_for(Duration::from_secs(10), || ledger.runs().len() == 11).await;
        handle.shutdown().await.unwrap();
    }
}
