//! The worker pools as operators see them, against a real PostgreSQL: each pool reports
//! where it runs, what it serves and what it did (`Client::workers`), the minutes' totals
//! (`Client::throughput`), and that it stopped.

use std::time::{Duration, Instant};

use harel_jobs::{Client, Handler, Job, JobContext, JobError, JobResult};
use harel_jobs_suite::SuiteSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Work {
    fail: bool,
}

impl Job for Work {
    const KIND: &'static str = "work";
}

impl Handler<()> for Work {
    async fn handle(self, _ctx: JobContext<()>) -> JobResult {
        if self.fail {
            Err(JobError::permanent("broken"))
        } else {
            Ok(())
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_reports_what_it_serves_and_did_and_that_it_stopped() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    let mut batch = queue.batch();
    for n in 0..5 {
        batch.push(Work { fail: n >= 3 }).unwrap();
    }
    batch.enqueue(&q.pool).await.unwrap();

    let handle = queue
        .worker(())
        .register::<Work>()
        .queue("default", 3)
        .queue("other", 2)
        .report_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    let began = Instant::now();
    let seen = loop {
        let workers = queue.workers(Duration::from_secs(30), 10).await.unwrap();
        if let [one] = workers.workers.as_slice()
            && one.succeeded == 3
            && one.dead == 2
        {
            break one.clone();
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "never reported: {workers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(seen.queues, ["default", "other"]);
    assert_eq!(seen.queue_count, 2);
    assert_eq!(seen.concurrency, 5);
    assert_eq!(seen.pid, std::process::id() as i32);
    assert!(seen.failed >= 2, "{seen:?}");
    assert!(seen.stopped_at.is_none());

    // the minutes' totals: every job counted once, in the last minute or two
    let minutes = queue.throughput(5).await.unwrap();
    assert_eq!(minutes.len(), 5);
    let succeeded: u64 = minutes.iter().map(|m| m.succeeded).sum();
    let dead: u64 = minutes.iter().map(|m| m.dead).sum();
    assert_eq!((succeeded, dead), (3, 2), "{minutes:?}");
    assert!(minutes.windows(2).all(|w| w[0].minute < w[1].minute));

    handle.shutdown().await.unwrap();
    let after = queue.workers(Duration::from_secs(30), 10).await.unwrap();
    assert!(after.workers[0].stopped_at.is_some(), "{after:?}");
    assert_eq!((after.total, after.not_shown()), (1, 0));
    // counted once, however many reports came after the jobs
    let succeeded: u64 = queue
        .throughput(5)
        .await
        .unwrap()
        .iter()
        .map(|m| m.succeeded)
        .sum();
    assert_eq!(succeeded, 3);

    assert!(queue.workers(Duration::ZERO, 10).await.is_err());
    assert!(queue.workers(Duration::from_secs(30), 0).await.is_err());
    assert!(queue.throughput(0).await.is_err());
}

/// A series' queue and its succeeded, failed and dead over the period.
type Named<'a> = (Option<&'a str>, (u64, u64, u64));

/// `Client::throughput_by_queue`: a pool counts what it did per queue it serves, and the
/// queues' series add up to `Client::throughput` minute by minute; a pool of the previous
/// release (the report without totals by queue, migration 0019's default arguments) counts
/// under its one queue, or under "" when it serves more; past the `top` busiest the others
/// are folded into one series that says how many it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_by_queue_adds_up_to_the_total() {
    let q = SuiteSchema::new().await;
    let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
    for n in 0..3 {
        queue
            .enqueue(&q.pool, Work { fail: n == 2 })
            .queue("mail")
            .await
            .unwrap();
    }
    queue.enqueue(&q.pool, Work { fail: false }).await.unwrap();
    let handle = queue
        .worker(())
        .register::<Work>()
        .queue("default", 1)
        .queue("mail", 1)
        .report_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    let began = Instant::now();
    loop {
        let workers = queue.workers(Duration::from_secs(30), 10).await.unwrap();
        if let [one] = workers.workers.as_slice()
            && one.succeeded == 3
            && one.dead == 1
        {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "never reported: {workers:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.unwrap();
    // two pools of the previous release: one serving one queue, one serving two
    sqlx::raw_sql(q.sql(
        "SELECT @schema@.harel_worker_report(gen_random_uuid(), 'old', 1, ARRAY['legacy'],
                1, 0, 4, 0, 0, false);
         SELECT @schema@.harel_worker_report(gen_random_uuid(), 'old', 2, ARRAY['a', 'b'],
                1, 0, 7, 1, 0, false);",
    ))
    .execute(&q.pool)
    .await
    .unwrap();

    let sums = |series: &harel_jobs::QueueSeries| {
        series.minutes.iter().fold((0, 0, 0), |(s, f, d), m| {
            (s + m.succeeded, f + m.failed, d + m.dead)
        })
    };
    let split = queue.throughput_by_queue(5, 8).await.unwrap();
    let named: Vec<Named> = split
        .series
        .iter()
        .map(|series| (series.queue.as_deref(), sums(series)))
        .collect();
    // the busiest first: "" (7 + 1), legacy (4), mail (2 + 1 + 1), default (1)
    assert_eq!(
        named,
        [
            (Some(""), (7, 1, 0)),
            (Some("legacy"), (4, 0, 0)),
            (Some("mail"), (2, 1, 1)),
            (Some("default"), (1, 0, 0)),
        ]
    );
    assert_eq!(split.folded, 0);
    assert!(split.series.iter().all(|series| series.minutes.len() == 5));
    // minute by minute, the series add up to the total (compared where both readings have
    // the minute: a minute may turn between them)
    let total = queue.throughput(5).await.unwrap();
    let adds_up = |split: &harel_jobs::ThroughputByQueue| {
        for minute in &total {
            let of_series: Vec<&harel_jobs::ThroughputMinute> = split
                .series
                .iter()
                .filter_map(|series| series.minutes.iter().find(|m| m.minute == minute.minute))
                .collect();
            if of_series.len() == split.series.len() {
                let added = of_series.iter().fold((0, 0, 0), |(s, f, d), m| {
                    (s + m.succeeded, f + m.failed, d + m.dead)
                });
                assert_eq!(added, (minute.succeeded, minute.failed, minute.dead));
            }
        }
    };
    adds_up(&split);
    let all = total.iter().fold((0, 0, 0), |(s, f, d), m| {
        (s + m.succeeded, f + m.failed, d + m.dead)
    });
    assert_eq!(all, (14, 2, 1));

    // the top 2, and the other two folded into one series that adds up the same
    let top = queue.throughput_by_queue(5, 2).await.unwrap();
    let named: Vec<Named> = top
        .series
        .iter()
        .map(|series| (series.queue.as_deref(), sums(series)))
        .collect();
    assert_eq!(
        named,
        [
            (Some(""), (7, 1, 0)),
            (Some("legacy"), (4, 0, 0)),
            (None, (3, 1, 1)),
        ]
    );
    assert_eq!(top.folded, 2);
    adds_up(&top);

    assert!(queue.throughput_by_queue(0, 8).await.is_err());
    assert!(queue.throughput_by_queue(5, 0).await.is_err());
    assert!(queue.throughput_by_queue(5, 101).await.is_err());
}
