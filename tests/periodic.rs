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

/// A pool of its own whose schedule makes `Report` jobs, which no pool runs: they stay in
/// the queue to be counted.
async fn start_reports(q: &SuiteSchema, schedule: Periodic) -> WorkerHandle {
    let pool = pool_with(&database_url(), 4).await;
    Client::with_schema(pool, q.schema.clone())
        .worker(Ledger::default())
        .register::<Tick>()
        .periodic(schedule, |at| Report { at })
        .build()
        .unwrap()
        .start()
}

/// The ticks of the `Report` jobs in the queue, oldest first.
async fn report_ticks(q: &SuiteSchema) -> Vec<DateTime<Utc>> {
    let payloads: Vec<(String,)> = sqlx::query_as(
        q.sql("SELECT payload::text FROM @schema@.jobs WHERE kind = 'report' ORDER BY seq"),
    )
    .fetch_all(&q.pool)
    .await
    .unwrap();
    let mut ticks: Vec<DateTime<Utc>> = payloads
        .iter()
        .map(|(p,)| serde_json::from_str::<Report>(p).unwrap().at)
        .collect();
    ticks.sort();
    ticks
}

/// The schedule of that name, as `Client::schedules` lists it.
async fn schedule(queue: &Client, name: &str) -> Option<harel_jobs::ScheduleInfo> {
    queue
        .schedules(&ScheduleQuery::new())
        .await
        .unwrap()
        .schedules
        .into_iter()
        .find(|s| s.name == name)
}

/// Waits (at most 60 s) until `done` holds of the schedule.
async fn wait_for(
    queue: &Client,
    name: &str,
    what: &str,
    done: impl Fn(&harel_jobs::ScheduleInfo) -> bool,
) -> harel_jobs::ScheduleInfo {
    let started = Instant::now();
    loop {
        if let Some(found) = schedule(queue, name).await
            && done(&found)
        {
            return found;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two pools declare a 1-second schedule. Paused, it enqueues no tick (its ticks pass:
/// its last tick moves on without a job); resumed, it ticks again from the next tick to
/// come, with no catch-up of the paused ones, each tick once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_fires_nothing_and_resumes_without_catching_up() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    let every_second = || {
        Periodic::every("beat", Duration::from_secs(1))
            .unwrap()
            .missed(MissedTicks::All { at_most: 10 })
    };
    let workers = [
        start_reports(&q, every_second()).await,
        start_reports(&q, every_second()).await,
    ];
    wait_for(&queue, "beat", "a first tick", |s| s.last_tick.is_some()).await;

    assert!(queue.pause_schedule("beat").await.unwrap());
    assert!(
        !queue.pause_schedule("beat").await.unwrap(),
        "already paused"
    );
    let paused = schedule(&queue, "beat").await.unwrap();
    let paused_at = paused.paused_at.expect("shown as paused");
    // three ticks pass while paused: the workers fire them, the database lets them pass
    let passed = wait_for(&queue, "beat", "three paused ticks passing", |s| {
        s.last_tick
            .is_some_and(|t| t >= paused_at + chrono::Duration::seconds(3))
    })
    .await;
    let during: Vec<_> = report_ticks(&q)
        .await
        .into_iter()
        .filter(|t| *t > paused_at)
        .collect();
    assert!(during.is_empty(), "ticks enqueued while paused: {during:?}");

    assert!(queue.resume_schedule("beat").await.unwrap());
    assert!(!queue.resume_schedule("beat").await.unwrap(), "not paused");
    let resumed = schedule(&queue, "beat").await.unwrap();
    assert_eq!(resumed.paused_at, None);
    let resumed_at = resumed.last_tick.unwrap();
    assert!(resumed_at >= passed.last_tick.unwrap());
    // a pool that starts now finds nothing missed (its policy would catch up on 10)
    let late = start_reports(&q, every_second()).await;
    let started = Instant::now();
    while report_ticks(&q)
        .await
        .iter()
        .filter(|t| **t > resumed_at)
        .count()
        < 3
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "ticks never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    late.shutdown().await.unwrap();
    let ticks = report_ticks(&q).await;
    let caught_up: Vec<_> = ticks
        .iter()
        .filter(|t| **t > paused_at && **t <= resumed_at)
        .collect();
    assert!(
        caught_up.is_empty(),
        "paused ticks caught up: {caught_up:?}"
    );
    let after: Vec<_> = ticks.iter().filter(|t| **t > resumed_at).collect();
    for pair in after.windows(2) {
        assert_eq!(
            *pair[1] - *pair[0],
            chrono::Duration::seconds(1),
            "a tick twice, or missed, after the resume: {after:?}"
        );
    }
}

/// A schedule paused and resumed while no worker ran: a worker that starts after finds
/// none of the ticks before the resume missed, whatever its policy.
#[tokio::test]
async fn a_resume_while_no_worker_runs_leaves_nothing_to_catch_up() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    sqlx::query(q.sql(
        "INSERT INTO @schema@.schedules (name, spec, last_tick)
         VALUES ('hourly', 'every 3600s', date_trunc('hour', now()) - interval '10 hours')",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    assert!(queue.pause_schedule("hourly").await.unwrap());
    assert!(queue.resume_schedule("hourly").await.unwrap());
    let worker = start_reports(
        &q,
        Periodic::every("hourly", Duration::from_secs(3600))
            .unwrap()
            .missed(MissedTicks::All { at_most: 3 }),
    )
    .await;
    // declared (nothing missed to fire): the worker wrote its next tick
    wait_for(&queue, "hourly", "the declaration", |s| {
        s.next_tick.is_some()
    })
    .await;
    worker.shutdown().await.unwrap();
    assert_eq!(report_ticks(&q).await, Vec::<DateTime<Utc>>::new());
}

/// A trigger asks for one job now, besides the ticks: with two pools declaring the
/// schedule, one job, whose tick is the request's time; asked twice before it fired, still
/// one. A paused schedule refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_fires_once_across_two_workers() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    // a yearly schedule: no tick of its own during the test
    let yearly = || Periodic::cron("yearly", "0 0 1 1 *").unwrap();
    let workers = [
        start_reports(&q, yearly()).await,
        start_reports(&q, yearly()).await,
    ];
    wait_for(&queue, "yearly", "the declaration", |s| {
        s.next_tick.is_some()
    })
    .await;

    assert!(queue.trigger_schedule("yearly").await.unwrap());
    assert!(
        !queue.trigger_schedule("yearly").await.unwrap(),
        "a request was waiting"
    );
    let requested = schedule(&queue, "yearly")
        .await
        .unwrap()
        .trigger_requested_at
        .expect("shown as waiting");
    wait_for(&queue, "yearly", "the trigger fired", |s| {
        s.trigger_requested_at.is_none()
    })
    .await;
    // both pools look again (every 2 s) before counting
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(report_ticks(&q).await, vec![requested]);
    assert_eq!(
        schedule(&queue, "yearly").await.unwrap().last_tick,
        None,
        "a trigger is not a tick"
    );

    assert!(queue.pause_schedule("yearly").await.unwrap());
    assert!(matches!(
        queue.trigger_schedule("yearly").await,
        Err(harel_jobs::ClientError::SchedulePaused(name)) if name == "yearly"
    ));
    assert!(queue.resume_schedule("yearly").await.unwrap());
    assert!(queue.trigger_schedule("yearly").await.unwrap());
    let started = Instant::now();
    while report_ticks(&q).await.len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "second trigger"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    assert_eq!(report_ticks(&q).await.len(), 2);
}

/// In the database: a request is claimed once (a second worker's call with the same
/// request fires nothing), a pause drops a waiting request, and a paused schedule's tick
/// passes without a job.
#[tokio::test]
async fn a_trigger_is_claimed_once_and_a_pause_drops_it() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    let fire = |tick: DateTime<Utc>, trigger: Option<DateTime<Utc>>| {
        sqlx::query_scalar::<_, Option<i64>>(q.sql(
            "SELECT @schema@.harel_schedule_fire('s', 'every 60s', $1, NULL, NULL, 'report',
                    '{\"at\":\"2026-01-01T00:00:00Z\"}', 2::smallint, NULL, NULL, NULL, $2)",
        ))
        .bind(tick)
        .bind(trigger)
        .fetch_one(&q.pool)
    };
    let declare = sqlx::query(q.sql(
        "SELECT @schema@.harel_schedule_fire('s', 'every 60s', NULL, NULL, NULL, NULL, NULL,
                NULL)",
    ));
    declare.execute(&q.pool).await.unwrap();
    assert!(queue.trigger_schedule("s").await.unwrap());
    let requested = schedule(&queue, "s")
        .await
        .unwrap()
        .trigger_requested_at
        .unwrap();
    let earlier = requested - chrono::Duration::seconds(1);
    assert_eq!(
        fire(earlier, Some(earlier)).await.unwrap(),
        None,
        "not the request"
    );
    assert!(fire(requested, Some(requested)).await.unwrap().unwrap() > 0);
    assert_eq!(
        fire(requested, Some(requested)).await.unwrap(),
        None,
        "claimed once"
    );
    assert_eq!(q.count("jobs").await, 1);

    assert!(queue.trigger_schedule("s").await.unwrap());
    let again = schedule(&queue, "s")
        .await
        .unwrap()
        .trigger_requested_at
        .unwrap();
    assert!(queue.pause_schedule("s").await.unwrap());
    assert_eq!(
        schedule(&queue, "s").await.unwrap().trigger_requested_at,
        None
    );
    assert_eq!(fire(again, Some(again)).await.unwrap(), None, "dropped");
    let now: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&q.pool)
        .await
        .unwrap();
    assert_eq!(fire(now, None).await.unwrap(), None, "a paused tick");
    let paused = schedule(&queue, "s").await.unwrap();
    assert_eq!(paused.last_tick, Some(now), "it passed");
    assert_eq!(q.count("jobs").await, 1);
}

/// Pause, resume and trigger refuse a name no worker declared, with a typed error, and
/// create nothing.
#[tokio::test]
async fn unknown_schedules_are_refused() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    let unknown = |result: Result<bool, harel_jobs::ClientError>| matches!(result, Err(harel_jobs::ClientError::UnknownSchedule(name)) if name == "nope");
    assert!(unknown(queue.pause_schedule("nope").await));
    assert!(unknown(queue.resume_schedule("nope").await));
    assert!(unknown(queue.trigger_schedule("nope").await));
    assert_eq!(q.count("schedules").await, 0);
}
