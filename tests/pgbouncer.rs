//! The worker scenarios through a real PgBouncer in transaction pooling mode (Debian's
//! `pgbouncer`, started by each test on a free port in front of the test server; installed
//! from Debian's packages if missing, see `tests/support/pgbouncer.rs`): the list of
//! `tests/scenarios/worker.rs`, which `tests/worker.rs` runs on direct connections, and
//! what only a pooler can show.
//!
//! PgBouncer 1.18 (Debian 12) does not track prepared statements: a statement sqlx prepares
//! in one exchange may be executed on another server connection in the next. The first test
//! shows that this PgBouncer really does that to sqlx's default statements, so that the
//! others, which pass only because harel-jobs keeps no state in sessions, prove something.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use harel_jobs::{DeadLetterQuery, JobBatch, PreparedStatements};
use harel_jobs_suite::pgbouncer::PgBouncer;
use harel_jobs_suite::{SuiteSchema, capture};

#[path = "scenarios/worker.rs"]
mod scenarios;

use scenarios::{
    Connection, Ledger, SERVER_POOL, Setup, assert_no_database_errors, pool_through, wait_for, work,
};

scenarios::worker_scenarios!(Connection::PgBouncer);

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
    let queue = SuiteSchema::unmigrated().await;
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
    let bounced = Setup::behind(queue, bouncer, pool);

    bounced.enqueue_each((0..200).map(work).collect(), 8).await;
    let mut batch = JobBatch::for_schema(&bounced.queue.schema)
        .prepared_statements(PreparedStatements::Unnamed);
    for key in 200..300 {
        batch.push(work(key)).unwrap();
    }
    let mut tx = bounced.pool.begin().await.unwrap();
    assert_eq!(batch.enqueue(&mut *tx).await.unwrap().len(), 100);
    tx.commit().await.unwrap();

    // a rolled-back enqueue leaves nothing
    let mut tx = bounced.begin().await;
    bounced.enqueue_in_tx(&mut tx, work(999)).await;
    tx.rollback().await.unwrap();

    let stats = bounced.stats().await;
    assert_eq!(stats.jobs.exact(), Some(300), "{stats:?}");

    let dead = bounced.dead_letters();
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

    let bounced = Setup::new(Connection::PgBouncer).await;
    let ledger = Arc::new(Ledger::default());
    let handle = bounced
        .builder_without_listen_connection(0, &ledger)
        .poll_interval(Duration::from_millis(300))
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_millis(400)).await;
    bounced.enqueue_each((0..5).map(work).collect(), 1).await;
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
