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
