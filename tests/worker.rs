//! The job loop against a real PostgreSQL on direct connections: delivery, retries, dead
//! letters, leases, ordering within groups, shutdown, panics, bad input, wake-up. The
//! scenarios are those of `tests/scenarios/worker.rs`, which `tests/pgbouncer.rs` runs
//! through PgBouncer too; what only a direct connection can show (a pool whose every
//! connection a handler holds, a role refused connections of its own) is here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use harel_jobs::{Handler, Job, JobContext, JobResult, Worker};
use serde::{Deserialize, Serialize};

#[path = "scenarios/worker.rs"]
mod scenarios;

use scenarios::{
    Connection, Ledger, Run, Setup, Shared, Work, assert_every_connection_serves_a_query, wait_for,
    work,
};

scenarios::worker_scenarios!(Connection::Direct);

/// The state of a handler that holds a pooled connection for its whole run.
#[derive(Clone)]
struct Hog {
    pool: sqlx::PgPool,
    inner: Shared,
}

/// Holds one of its worker's pooled connections for 1.5 s (3× the lease).
#[derive(Serialize, Deserialize)]
struct HogsConnection {
    key: u64,
}

impl Job for HogsConnection {
    const KIND: &'static str = "hogs_connection";
}

impl Handler<Hog> for HogsConnection {
    async fn handle(self, ctx: JobContext<Hog>) -> JobResult {
        let hog = ctx.state();
        let connection = hog.pool.acquire().await?;
        let ledger = &hog.inner.ledger;
        ledger
            .running_groups
            .lock()
            .unwrap()
            .insert(ctx.group().to_owned());
        let started = Instant::now();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        ledger.running_groups.lock().unwrap().remove(ctx.group());
        ledger.runs.lock().unwrap().push(Run {
            key: self.key,
            group: ctx.group().to_owned(),
            worker: hog.inner.worker,
            attempt: ctx.attempt(),
            started,
            ended: Instant::now(),
        });
        drop(connection);
        Ok(())
    }
}

#[tokio::test]
async fn handlers_holding_every_pooled_connection_cannot_starve_the_heartbeat() {
    let setup = Setup::new(Connection::Direct).await;
    let queue = &setup.queue;
    let ledger = Arc::new(Ledger::default());
    let start = |n: usize, pool: sqlx::PgPool| {
        let state = Hog {
            pool: pool.clone(),
            inner: Shared {
                worker: n,
                ledger: Arc::clone(&ledger),
            },
        };
        Worker::builder(pool, state)
            .schema(queue.schema.clone())
            .register::<HogsConnection>()
            .concurrency(3)
            .lease(Duration::from_millis(500))
            .heartbeat_interval(Duration::from_millis(100))
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap()
            .start()
    };
    // worker 0: three handlers, three pooled connections, all held by the handlers
    let small = harel_jobs_suite::pool_with(&harel_jobs_suite::database_url(), 3).await;
    let hogging = start(0, small);
    setup
        .enqueue_all((0..3).map(|key| HogsConnection { key }))
        .await;
    wait_for(Duration::from_secs(10), || {
        ledger.running_groups.lock().unwrap().len() == 3
    })
    .await;
    // worker 1 would take over any lease that lapses
    let rival = start(
        1,
        harel_jobs_suite::pool_with(&harel_jobs_suite::database_url(), 5).await,
    );
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let (a, b) = (
        hogging.shutdown().await.unwrap(),
        rival.shutdown().await.unwrap(),
    );
    let runs = ledger.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 3, "each job ran once: {runs:?}");
    assert!(runs.iter().all(|r| r.worker == 0));
    assert_eq!(a.leases_lost + b.leases_lost, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_refused_connections_of_its_own_works_on_its_idle_pooled_ones() {
    let setup = Setup::new(Connection::Direct).await;
    let queue = &setup.queue;
    // the role may hold 3 connections, and the worker's pool opens all 3 first: every
    // connection the worker opens for itself (claims, outcomes, LISTEN) is refused
    let role = harel_jobs_suite::TestRole::with_connection_limit(queue, 3).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(3)
        .min_connections(3)
        .connect(&role.url)
        .await
        .unwrap();
    let held: Vec<_> = check_out(&pool, 3).await;
    drop(held); // back to the pool, idle and open
    let ledger = Arc::new(Ledger::default());
    let state = Shared {
        worker: 0,
        ledger: Arc::clone(&ledger),
    };
    let handle = Worker::builder(pool.clone(), state)
        .schema(queue.schema.clone())
        .register::<Work>()
        .concurrency(4)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    setup.enqueue_all((0..50).map(work)).await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    pool.close().await;
    assert_eq!(ledger.runs.lock().unwrap().len(), 50, "each job ran once");
    assert_eq!(stats.succeeded, 50);
    assert_eq!(stats.leases_lost, 0);
}

/// Checks out `n` connections of `pool` at once (so that `n` are open).
async fn check_out(
    pool: &sqlx::PgPool,
    n: usize,
) -> Vec<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(pool.acquire().await.unwrap());
    }
    held
}

/// The state of handlers that query the application's pool.
#[derive(Clone)]
struct App {
    pool: sqlx::PgPool,
}

/// Queries the application's pool, holding its connection for a moment so that several are
/// open at once.
#[derive(Serialize, Deserialize)]
struct QueriesAppPool {}

impl Job for QueriesAppPool {
    const KIND: &'static str = "queries_app_pool";
}

impl Handler<App> for QueriesAppPool {
    async fn handle(self, ctx: JobContext<App>) -> JobResult {
        sqlx::query("SELECT pg_sleep(0.02)")
            .execute(&ctx.state().pool)
            .await?;
        Ok(())
    }
}

/// `own_thread`: handlers that query the application's pool from the pool's thread open its
/// connections there, and a socket belongs to the runtime that opened it. After the pool
/// stops, every connection of the application's pool (one that does not ping before
/// handing out) still serves a query: the pool's runtime keeps running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_handlers_opened_on_the_pools_own_thread_work_after_it_stops() {
    let setup = Setup::new(Connection::Direct).await;
    let application = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .test_before_acquire(false)
        .connect_lazy_with((*setup.pool.connect_options()).clone());
    let handle = Worker::builder(
        application.clone(),
        App {
            pool: application.clone(),
        },
    )
    .schema(setup.queue.schema.clone())
    .register::<QueriesAppPool>()
    .own_thread(true)
    .concurrency(4)
    .poll_interval(Duration::from_millis(50))
    .build()
    .unwrap()
    .start();
    setup.enqueue_all((0..40).map(|_| QueriesAppPool {})).await;
    setup.wait_until_idle(Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(stats.succeeded, 40);
    assert!(application.size() > 0, "the handlers opened connections");
    assert_every_connection_serves_a_query(&application, application.size()).await;
}
