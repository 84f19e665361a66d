//! The core worker tests through a real PgBouncer in transaction pooling mode (Debian's
//! `pgbouncer`, started by each test on a free port in front of the test server; installed
//! from Debian's packages if missing, see `tests/support/pgbouncer.rs`).
//!
//! PgBouncer 1.18 (Debian 12) does not track prepared statements: a statement sqlx prepares
//! in one exchange may be executed on another server connection in the next. The first test
//! shows that this PgBouncer really does that to sqlx's default statements, so that the
//! others, which pass only because harel-jobs keeps no state in sessions, prove something.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::{
    Backoff, Client, DeadLetterQuery, Enqueue, Handler, Job, JobBatch, JobContext, JobError,
    JobOptions, JobResult, PreparedStatements, Stats, Worker, WorkerBuilder, WorkerStats,
};
use harel_jobs_suite::cluster::{Cluster, ClusterOptions};
use harel_jobs_suite::pgbouncer::PgBouncer;
use harel_jobs_suite::{TestQueue, capture, database_url};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// Server connections PgBouncer keeps per database and user: fewer than its clients, so
/// that transactions of different clients share server connections.
const SERVER_POOL: u32 = 4;

/// One execution of a handler.
#[derive(Clone, Debug)]
struct Run {
    key: u64,
    group: String,
    attempt: u32,
}

/// What the handlers share: the runs, and the groups running now.
#[derive(Default)]
struct Ledger {
    runs: Mutex<Vec<Run>>,
    running: Mutex<HashSet<String>>,
    overlaps: Mutex<Vec<String>>,
}

type State = Arc<Ledger>;

impl Ledger {
    async fn record(&self, ctx: &JobContext<State>, key: u64, work: impl Future<Output = ()>) {
        let group = ctx.group().to_owned();
        if !self.running.lock().unwrap().insert(group.clone()) {
            self.overlaps.lock().unwrap().push(group.clone());
        }
        work.await;
        self.running.lock().unwrap().remove(&group);
        self.runs.lock().unwrap().push(Run {
            key,
            group,
            attempt: ctx.attempt(),
        });
    }

    fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap().clone()
    }
}

/// Succeeds after `sleep_ms`, in `group` if set.
#[derive(Serialize, Deserialize)]
struct Work {
    key: u64,
    group: Option<String>,
    sleep_ms: u64,
}

impl Job for Work {
    const KIND: &'static str = "work";
    fn group(&self) -> Option<String> {
        self.group.clone()
    }
}

impl Handler<State> for Work {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        let sleep = Duration::from_millis(self.sleep_ms);
        ctx.state()
            .record(&ctx, self.key, tokio::time::sleep(sleep))
            .await;
        Ok(())
    }
}

/// Fails its first attempt, then succeeds.
#[derive(Serialize, Deserialize)]
struct FlakyOnce {
    key: u64,
}

impl Job for FlakyOnce {
    const KIND: &'static str = "flaky_once";
    fn options() -> JobOptions {
        JobOptions::new().backoff(Backoff::fixed(Duration::from_millis(200)))
    }
}

impl Handler<State> for FlakyOnce {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        if ctx.attempt() == 1 {
            return Err("first attempt fails".into());
        }
        Ok(())
    }
}

/// Always fails; two attempts.
#[derive(Serialize, Deserialize)]
struct AlwaysFails {
    key: u64,
}

impl Job for AlwaysFails {
    const KIND: &'static str = "always_fails";
    fn options() -> JobOptions {
        JobOptions::new()
            .max_attempts(2)
            .backoff(Backoff::fixed(Duration::from_millis(50)))
    }
}

impl Handler<State> for AlwaysFails {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        Err(JobError::retry(std::io::Error::other("smtp said no")))
    }
}

/// A test queue and a PgBouncer in front of its server, with a pool through it.
struct Bounced {
    queue: TestQueue,
    bouncer: PgBouncer,
    /// A pool connected through PgBouncer.
    pool: PgPool,
}

impl Bounced {
    async fn new() -> Self {
        Self::new_at(&database_url()).await
    }

    /// A test queue on the server of `url`, and a PgBouncer in front of that server.
    async fn new_at(url: &str) -> Self {
        let queue = TestQueue::new_at(url).await;
        let bouncer = PgBouncer::start_for(url, SERVER_POOL);
        let pool = pool_through(&bouncer).await;
        Self {
            queue,
            bouncer,
            pool,
        }
    }

    /// A worker on the pool through PgBouncer, configured for it.
    fn worker(&self, ledger: &State) -> WorkerBuilder<State> {
        Worker::builder(self.pool.clone(), Arc::clone(ledger))
            .schema(self.queue.schema.clone())
            .register::<Work>()
            .register::<FlakyOnce>()
            .register::<AlwaysFails>()
            .behind_transaction_pooler()
            .poll_interval(Duration::from_millis(100))
    }

    /// Enqueues `jobs` through PgBouncer: one transaction per job, from `tasks` clients at
    /// once.
    async fn enqueue_each(&self, jobs: Vec<Work>, tasks: usize) {
        let jobs = Arc::new(Mutex::new(jobs.into_iter().rev().collect::<Vec<_>>()));
        let mut running = Vec::new();
        for _ in 0..tasks {
            let (pool, schema, jobs) = (self.pool.clone(), self.queue.schema.clone(), {
                Arc::clone(&jobs)
            });
            running.push(tokio::spawn(async move {
                loop {
                    let Some(job) = jobs.lock().unwrap().pop() else {
                        return;
                    };
                    let mut tx = pool.begin().await.expect("begin through pgbouncer");
                    Enqueue::new(job, &mut *tx)
                        .schema(&schema)
                        .prepared_statements(PreparedStatements::Unnamed)
                        .await
                        .expect("enqueue through pgbouncer");
                    tx.commit().await.expect("commit through pgbouncer");
                }
            }));
        }
        for task in running {
            task.await.expect("enqueue task");
        }
    }

    /// The queue's stats, read through PgBouncer in a transaction.
    async fn stats(&self) -> Stats {
        let mut tx = self.pool.begin().await.unwrap();
        let stats = Stats::fetch(&mut *tx, &self.queue.schema)
            .await
            .expect("stats through pgbouncer");
        tx.commit().await.unwrap();
        stats
    }

    async fn wait_until_idle(&self, limit: Duration) {
        let started = Instant::now();
        loop {
            let stats = self.stats().await;
            if stats.is_idle() {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "queue not drained after {limit:?}: {stats:?}\n{}",
                self.bouncer.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn pool_through(bouncer: &PgBouncer) -> PgPool {
    PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(bouncer.connect_options())
        .await
        .expect("connect through pgbouncer")
}

fn work(key: u64, group: Option<String>, sleep_ms: u64) -> Work {
    Work {
        key,
        group,
        sleep_ms,
    }
}

async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn assert_no_database_errors(stats: &WorkerStats) {
    assert_eq!(stats.database_errors, 0, "{stats:?}");
    assert_eq!(stats.leases_lost, 0, "{stats:?}");
    assert_eq!(stats.outcomes_dropped, 0, "{stats:?}");
}

/// What `SHOW synchronous_commit` says on every server connection of PgBouncer's pool:
/// `SERVER_POOL` transactions held open at once cover them all.
async fn synchronous_commit_of_every_server_connection(bouncer: &PgBouncer) -> Vec<String> {
    let pool = pool_through(bouncer).await;
    let mut transactions = Vec::new();
    let mut settings = Vec::new();
    for _ in 0..SERVER_POOL {
        let mut tx = pool.begin().await.unwrap();
        let row: (String,) = sqlx::query_as("SELECT current_setting('synchronous_commit')")
            .persistent(false)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        settings.push(row.0);
        transactions.push(tx);
    }
    drop(transactions);
    pool.close().await;
    settings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn this_pgbouncer_breaks_sqlx_default_statements_so_the_other_tests_mean_something() {
    let bouncer = PgBouncer::start(SERVER_POOL);
    let pool = pool_through(&bouncer).await;
    let mut tasks = Vec::new();
    for n in 0..8i64 {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut failed = 0;
            for m in 0..100i64 {
                let sum: Result<i64, _> = sqlx::query_scalar("SELECT $1::bigint + $2")
                    .bind(n)
                    .bind(m)
                    .fetch_one(&pool)
                    .await;
                failed += usize::from(sum.is_err());
            }
            failed
        }));
    }
    let mut failed = 0;
    for task in tasks {
        failed += task.await.unwrap();
    }
    assert!(
        failed > 0,
        "sqlx's cached statements should fail through a transaction pooler"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_enqueue_and_tools_work_through_pgbouncer_in_transactions() {
    let queue = TestQueue::unmigrated().await;
    let bouncer = PgBouncer::start(SERVER_POOL);
    let pool = pool_through(&bouncer).await;
    // several processes migrating at once, through the pooler
    let migrations: Vec<_> = (0..3)
        .map(|_| {
            let (pool, schema) = (pool.clone(), queue.schema.clone());
            tokio::spawn(async move { harel_jobs::migrate_schema(&pool, &schema).await })
        })
        .collect();
    for migration in migrations {
        migration.await.unwrap().expect("migrate through pgbouncer");
    }
    harel_jobs::check_schema(&pool, &queue.schema)
        .await
        .expect("check_schema through pgbouncer");
    let bounced = Bounced {
        queue,
        bouncer,
        pool,
    };

    bounced
        .enqueue_each((0..200).map(|key| work(key, None, 0)).collect(), 8)
        .await;
    let mut batch = JobBatch::for_schema(&bounced.queue.schema)
        .prepared_statements(PreparedStatements::Unnamed);
    for key in 200..300 {
        batch.push(work(key, None, 0)).unwrap();
    }
    let mut tx = bounced.pool.begin().await.unwrap();
    assert_eq!(batch.enqueue(&mut *tx).await.unwrap().len(), 100);
    tx.commit().await.unwrap();

    // a rolled-back enqueue leaves nothing
    let mut tx = bounced.pool.begin().await.unwrap();
    Enqueue::new(work(999, None, 0), &mut *tx)
        .schema(&bounced.queue.schema)
        .prepared_statements(PreparedStatements::Unnamed)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let stats = bounced.stats().await;
    assert_eq!(stats.jobs.exact(), Some(300), "{stats:?}");

    let dead =
        Client::with_schema(bounced.pool.clone(), bounced.queue.schema.clone()).dead_letters();
    let mut tx = bounced.pool.begin().await.unwrap();
    assert_eq!(dead.count_in(&mut *tx).await.unwrap(), 0);
    assert!(
        dead.list_in(&mut *tx, &DeadLetterQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_through_pgbouncer_run_every_job_once_in_group_order() {
    let bounced = Bounced::new().await;
    let ledger = State::default();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            bounced
                .worker(&ledger)
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
        .map(|key| work(key, Some(format!("g{}", key % 20)), key % 3))
        .collect();
    bounced.enqueue_each(jobs, 1).await;
    bounced.wait_until_idle(Duration::from_secs(60)).await;
    let mut total = WorkerStats::default();
    for handle in handles {
        let stats = handle.shutdown().await.unwrap();
        assert_no_database_errors(&stats);
        total.succeeded += stats.succeeded;
    }

    let runs = ledger.runs();
    let keys: Vec<u64> = runs.iter().map(|run| run.key).collect();
    assert_eq!(keys.len(), 400, "each job ran exactly once");
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 400);
    assert_eq!(total.succeeded, 400);
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
    let settings = synchronous_commit_of_every_server_connection(&bounced.bouncer).await;
    assert!(settings.iter().all(|s| s == "on"), "{settings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_and_dead_letters_through_pgbouncer() {
    let bounced = Bounced::new().await;
    let ledger = State::default();
    let handle = bounced
        .worker(&ledger)
        .listen(false)
        .build()
        .unwrap()
        .start();
    let schema = bounced.queue.schema.clone();
    let mut tx = bounced.pool.begin().await.unwrap();
    Enqueue::new(FlakyOnce { key: 1 }, &mut *tx)
        .schema(&schema)
        .prepared_statements(PreparedStatements::Unnamed)
        .await
        .unwrap();
    Enqueue::new(AlwaysFails { key: 2 }, &mut *tx)
        .schema(&schema)
        .prepared_statements(PreparedStatements::Unnamed)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    bounced.wait_until_idle(Duration::from_secs(30)).await;

    let dead = Client::with_schema(bounced.pool.clone(), schema.clone()).dead_letters();
    let mut tx = bounced.pool.begin().await.unwrap();
    let letters = dead
        .list_in(&mut *tx, &DeadLetterQuery::default())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0].kind, "always_fails");
    assert_eq!(letters[0].attempts, 2);
    assert!(letters[0].last_error.contains("smtp said no"));

    // a dead letter put back runs again (twice more, then dead again)
    let mut tx = bounced.pool.begin().await.unwrap();
    assert!(
        dead.retry_in(&mut *tx, letters[0].id)
            .await
            .unwrap()
            .is_some()
    );
    tx.commit().await.unwrap();
    wait_for(Duration::from_secs(30), || ledger.runs().len() == 6).await;
    bounced.wait_until_idle(Duration::from_secs(30)).await;

    let stats = handle.shutdown().await.unwrap();
    assert_no_database_errors(&stats);
    assert_eq!(stats.retried, 3, "{stats:?}");
    assert_eq!(stats.succeeded, 1, "{stats:?}");
    assert_eq!(stats.dead_lettered, 2, "{stats:?}");
    let attempts: Vec<(u64, u32)> = ledger.runs().iter().map(|r| (r.key, r.attempt)).collect();
    assert_eq!(
        attempts.iter().filter(|(key, _)| *key == 1).count(),
        2,
        "{attempts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_through_pgbouncer_keep_a_job_longer_than_its_lease_single() {
    let bounced = Bounced::new().await;
    let ledger = State::default();
    let start = || {
        bounced
            .worker(&ledger)
            .listen(false)
            .lease(Duration::from_millis(500))
            .heartbeat_interval(Duration::from_millis(100))
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap()
            .start()
    };
    let (a, b) = (start(), start());
    // runs three times its lease, while the other pool polls for it every 50 ms
    bounced.enqueue_each(vec![work(1, None, 1500)], 1).await;
    bounced.wait_until_idle(Duration::from_secs(20)).await;
    let (sa, sb) = (a.shutdown().await.unwrap(), b.shutdown().await.unwrap());
    assert_eq!(ledger.runs().len(), 1, "ran once");
    assert_no_database_errors(&sa);
    assert_no_database_errors(&sb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_through_pgbouncer_loses_nothing_and_waits_for_no_lease() {
    let bounced = Bounced::new().await;
    let ledger = State::default();
    // an hour-long lease: anything that had to wait for one would never finish below
    let first = bounced
        .worker(&ledger)
        .listen(false)
        .lease(Duration::from_secs(3600))
        .concurrency(8)
        .shutdown_grace(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    let jobs = (0..60)
        .map(|key| work(key, None, 20 + (key % 5) * 100))
        .collect();
    bounced.enqueue_each(jobs, 4).await;
    wait_for(Duration::from_secs(30), || ledger.runs().len() >= 10).await;
    let stopped = first.shutdown().await.unwrap();
    assert!(
        stopped.released > 0,
        "some jobs were given back: {stopped:?}"
    );
    assert_no_database_errors(&stopped);

    let second = bounced
        .worker(&ledger)
        .listen(false)
        .lease(Duration::from_secs(3600))
        .concurrency(32)
        .build()
        .unwrap()
        .start();
    bounced.wait_until_idle(Duration::from_secs(30)).await;
    assert_no_database_errors(&second.shutdown().await.unwrap());
    let done: HashSet<u64> = ledger.runs().iter().map(|run| run.key).collect();
    assert_eq!(done.len(), 60, "every job completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_a_pool_through_pgbouncer_that_listens_on_a_direct_connection() {
    let bounced = Bounced::new().await;
    let ledger = State::default();
    let direct: PgConnectOptions = database_url().parse().unwrap();
    let handle = bounced
        .worker(&ledger)
        .poll_interval(Duration::from_secs(3600))
        .listen_connect_options(direct)
        .build()
        .unwrap()
        .start();
    // let the worker go idle (its first claim finds nothing) and its LISTEN start
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    bounced.enqueue_each(vec![work(1, None, 0)], 1).await;
    wait_for(Duration::from_secs(10), || !ledger.runs().is_empty()).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "woken by the NOTIFY"
    );
    assert_no_database_errors(&handle.shutdown().await.unwrap());
}

/// A writer that keeps what a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

// current-thread: every task of the pool runs on this thread, under the test's subscriber
#[tokio::test]
async fn without_a_direct_listen_connection_a_pool_through_pgbouncer_polls_and_says_so() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("harel_jobs=debug")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _logging = capture::set_default(subscriber);

    let bounced = Bounced::new().await;
    let ledger = State::default();
    let handle = bounced
        .worker(&ledger)
        .poll_interval(Duration::from_millis(300))
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_millis(400)).await;
    bounced
        .enqueue_each((0..5).map(|key| work(key, None, 0)).collect(), 1)
        .await;
    wait_for(Duration::from_secs(10), || ledger.runs().len() == 5).await;
    // long enough for the housekeeping (about once a second) to run through the pooler
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_no_database_errors(&handle.shutdown().await.unwrap());

    let text = logs.text();
    assert!(
        text.contains("not listening, polling only"),
        "the pool says it polls:\n{text}"
    );
    for failure in ["failed", "ERROR"] {
        assert!(!text.contains(failure), "{failure} in the logs:\n{text}");
    }
}

/// On a private cluster started with `autovacuum = off`, whatever the machine's server has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_autovacuum_off_a_pool_through_pgbouncer_vacuums_and_leaves_no_lock_held() {
    let cluster = Cluster::start(ClusterOptions {
        settings: vec!["autovacuum = off".to_owned()],
        ..ClusterOptions::default()
    });
    let bounced = Bounced::new_at(&cluster.url("postgres")).await;
    let direct = &bounced.queue.pool;
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(direct)
        .await
        .unwrap();
    assert_eq!(autovacuum, "off", "the private cluster's setting");
    let schema = bounced.queue.schema.clone();
    let vacuums = || async {
        let count: i64 = sqlx::query_scalar(
            "SELECT COALESCE(sum(vacuum_count), 0)::bigint FROM pg_stat_user_tables
              WHERE schemaname = $1 AND relname IN ('transport_groups', 'transport_messages')",
        )
        .bind(schema.name())
        .fetch_one(direct)
        .await
        .unwrap();
        count
    };
    let ledger = State::default();
    let handle = bounced
        .worker(&ledger)
        .listen(false)
        .concurrency(32)
        .build()
        .unwrap()
        .start();
    let mut batch = JobBatch::for_schema(&schema).prepared_statements(PreparedStatements::Unnamed);
    for key in 0..3000 {
        batch.push(work(key, None, 0)).unwrap();
    }
    let mut tx = bounced.pool.begin().await.unwrap();
    batch.enqueue(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    bounced.wait_until_idle(Duration::from_secs(60)).await;
    // the pool reads the dead-row counts every 5 s
    let started = Instant::now();
    while vacuums().await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the queue tables were never vacuumed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_no_database_errors(&handle.shutdown().await.unwrap());
    // a session lock taken through the pooler would still be held by a server connection
    // (the pool takes none: no advisory lock, and no lock of any kind outlives a call)
    let held: Vec<String> = sqlx::query_scalar(
        "SELECT l.locktype || ' ' || l.mode FROM pg_locks l
           JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE a.pid <> pg_backend_pid() AND a.datname = current_database()
            AND (l.locktype = 'advisory' OR l.relation IS NOT NULL)",
    )
    .fetch_all(direct)
    .await
    .unwrap();
    assert!(held.is_empty(), "locks still held after shutdown: {held:?}");
}
