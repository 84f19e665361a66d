//! Periodic jobs against a real PostgreSQL: one job per tick across several worker pools
//! declaring the same schedule, none missed; the missed-ticks policy at start-up; and the
//! schedules as `Client::schedules` lists them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use harel_jobs::{
    Client, Handler, Job, JobContext, JobResult, MissedTicks, Periodic, ScheduleQuery, WorkerHandle,
};
use harel_jobs_suite::{SuiteSchema, database_url, pool_with};
use serde::{Deserialize, Serialize};

/// The tick a periodic job was made for.
#[derive(Serialize, Deserialize)]
struct Tick {
    at: DateTime<Utc>,
}

impl Job for Tick {
    const KIND: &'static str = "tick";
}

type Ledger = Arc<Mutex<Vec<DateTime<Utc>>>>;

impl Handler<Ledger> for Tick {
    async fn handle(self, ctx: JobContext<Ledger>) -> JobResult {
        ctx.state().lock().unwrap().push(self.at);
        Ok(())
    }
}

/// Never registered: its jobs stay in the queue to be counted.
#[derive(Serialize, Deserialize)]
struct Report {
    at: DateTime<Utc>,
}

impl Job for Report {
    const KIND: &'static str = "report";
}

async fn start(q: &SuiteSchema, ledger: &Ledger, schedule: Periodic) -> WorkerHandle {
    // a pool of its own, as a separate process would have
    let pool = pool_with(&database_url(), 4).await;
    Client::with_schema(pool, q.schema.clone())
        .worker(Arc::clone(ledger))
        .register::<Tick>()
        .periodic(schedule, |at| Tick { at })
        .build()
        .unwrap()
        .start()
}

/// Four pools declare the same 1-second schedule for 30 ticks: 30 jobs, not 120, and no
/// tick missed between the first and the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_tick_is_enqueued_once_across_four_workers() {
    let q = SuiteSchema::new().await;
    let ledger = Ledger::default();
    let every_second = || Periodic::every("every-second", Duration::from_secs(1)).unwrap();
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(start(&q, &ledger, every_second()).await);
    }
    let started = Instant::now();
    while ledger.lock().unwrap().len() < 31 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ticks stopped coming"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    let mut ticks = ledger.lock().unwrap().clone();
    ticks.sort();
    let count = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), count, "a tick ran twice: {ticks:?}");
    for pair in ticks.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            chrono::Duration::seconds(1),
            "a tick was missed: {ticks:?}"
        );
    }
    assert!(count >= 31);
    let schedules = Client::with_schema(q.pool.clone(), q.schema.clone())
        .schedules(&ScheduleQuery::new())
        .await
        .unwrap()
        .schedules;
    assert_eq!(schedules.len(), 1);
    assert_eq!(schedules[0].name, "every-second");
    assert_eq!(schedules[0].spec, "every 1s");
    assert!(schedules[0].last_tick >= ticks.last().copied());
    assert_eq!(
        schedules[0]
            .next_tick
            .zip(schedules[0].last_tick)
            .map(|(n, l)| n - l),
        Some(chrono::Duration::seconds(1))
    );
}

/// Ticks missed while no worker ran: the policy says how many are enqueued when one starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_ticks_are_enqueued_as_the_policy_says() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    let hourly = |name: &str, policy| {
        Periodic::every(name, Duration::from_secs(3600))
            .unwrap()
            .missed(policy)
    };
    let cases = [
        ("skip", MissedTicks::Skip, 0),
        ("last", MissedTicks::Last, 1),
        ("all", MissedTicks::All { at_most: 3 }, 3),
        ("new", MissedTicks::All { at_most: 3 }, 0),
    ];
    // the last tick of each (but "new") was ten hours ago
    for (name, _, _) in &cases[..3] {
        sqlx::query(q.sql(
            "INSERT INTO @schema@.schedules (name, spec, last_tick)
             VALUES ($1, 'every 3600s', date_trunc('hour', now()) - interval '10 hours')",
        ))
        .bind(name)
        .execute(&q.pool)
        .await
        .unwrap();
    }
    let mut builder = queue.worker(Ledger::default()).register::<Tick>();
    for (name, policy, _) in cases {
        builder = builder.periodic(hourly(name, policy), |at| Report { at });
    }
    let worker = builder.build().unwrap().start();
    let started = Instant::now();
    loop {
        let schedules = queue
            .schedules(&ScheduleQuery::new())
            .await
            .unwrap()
            .schedules;
        if schedules.len() == 4 && schedules.iter().all(|s| s.next_tick.is_some()) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{schedules:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.shutdown().await.unwrap();
    let reports: Vec<(String,)> = sqlx::query_as(
        q.sql("SELECT payload::text FROM @schema@.jobs WHERE kind = 'report' ORDER BY seq"),
    )
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(reports.len(), 1 + 3, "{reports:?}");
    let schedules = queue
        .schedules(&ScheduleQuery::new())
        .await
        .unwrap()
        .schedules;
    for (name, _, enqueued) in cases {
        let schedule = schedules.iter().find(|s| s.name == name).unwrap();
        match enqueued {
            0 if name == "new" => assert_eq!(schedule.last_tick, None, "declared, no tick"),
            _ => {
                let hour = chrono::Duration::hours(1);
                let last = schedule.last_tick.unwrap();
                // "skip" keeps its old tick; the others moved to the latest hour
                if enqueued == 0 {
                    assert!(Utc::now() - last > hour * 9);
                } else {
                    assert!(Utc::now() - last < hour);
                }
            }
        }
    }
}

/// A tick the database's clock has not reached is refused (a worker whose clock runs ahead
/// cannot move a schedule past ticks the others have yet to fire).
#[tokio::test]
async fn a_tick_from_the_future_is_refused() {
    let q = SuiteSchema::new().await;
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&q.pool)
        .await
        .unwrap();
    let fire = |tick: DateTime<Utc>| {
        sqlx::query_scalar::<_, Option<i64>>(q.sql(
            "SELECT @schema@.harel_schedule_fire('s', 'every 60s', $1, NULL, NULL, 'tick',
                    '{\"at\":\"2026-01-01T00:00:00Z\"}', 2::smallint)",
        ))
        .bind(tick)
        .fetch_one(&q.pool)
    };
    assert_eq!(
        fire(now + chrono::Duration::hours(1)).await.unwrap(),
        Some(0)
    );
    assert_eq!(q.count("schedules").await, 0, "nothing written");
    let id = fire(now).await.unwrap().expect("enqueued");
    assert!(id > 0);
    assert_eq!(fire(now).await.unwrap(), None, "that tick is done");
    assert_eq!(q.count("jobs").await, 1);
}

/// A bad schedule is a typed error when the pool is built, and so is one name twice.
#[tokio::test]
async fn bad_schedules_are_refused_when_the_pool_is_built() {
    let q = SuiteSchema::new().await;
    assert!(matches!(
        Periodic::cron("x", "not a cron"),
        Err(harel_jobs::ConfigError::InvalidSchedule { .. })
    ));
    let twice = Client::with_schema(q.pool.clone(), q.schema.clone())
        .worker(Ledger::default())
        .register::<Tick>()
        .periodic(
            Periodic::every("same", Duration::from_secs(60)).unwrap(),
            |at| Tick { at },
        )
        .periodic(
            Periodic::every("same", Duration::from_secs(5)).unwrap(),
            |at| Tick { at },
        )
        .build();
    assert!(matches!(
        twice,
        Err(harel_jobs::ConfigError::InvalidSchedule { .. })
    ));
}
