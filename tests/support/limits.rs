//! What the tests of fleet-wide limits share (tests/queues.rs, tests/key_limits.rs): a job
//! that holds its slot for a while in the queue `partner`, a worker pool of its own for it
//! (as a separate process would have), and the most leases that overlapped at one moment,
//! from the times the database recorded.

use std::time::Duration;

use harel_jobs::{Client, Handler, Job, JobContext, JobResult, WorkerHandle};
use serde::{Deserialize, Serialize};

use crate::{SuiteSchema, database_url, pool_with};

/// Holds its slot for `millis` and records nothing (its pool keeps it in the history, with
/// its start and finish).
#[derive(Serialize, Deserialize)]
pub struct Hold {
    /// How long the handler runs.
    pub millis: u64,
}

impl Job for Hold {
    const KIND: &'static str = "hold";
    const QUEUE: &'static str = "partner";
}

impl Handler<()> for Hold {
    async fn handle(self, _ctx: JobContext<()>) -> JobResult {
        tokio::time::sleep(Duration::from_millis(self.millis)).await;
        Ok(())
    }
}

/// A worker pool of `concurrency` on the queue `partner`, on a connection pool of its own,
/// keeping every finished job in the history for an hour.
pub async fn start_hold_pool(q: &SuiteSchema, concurrency: usize) -> WorkerHandle {
    let pool = pool_with(&database_url(), 6).await;
    Client::with_schema(pool, q.schema.clone())
        .worker(())
        .register::<Hold>()
        .queue("partner", concurrency)
        .retain_completed(Duration::from_secs(3600))
        .poll_interval(Duration::from_millis(50))
        .build()
        .expect("the pool's settings are valid")
        .start()
}

/// The most intervals (start, end) that overlap at one moment.
pub fn most_at_once(intervals: &[(f64, f64)]) -> usize {
    let mut events: Vec<(f64, i32)> = intervals
        .iter()
        .flat_map(|&(start, end)| [(start, 1), (end, -1)])
        .collect();
    // at one instant an end comes before a start (a claim starts after the settle before it)
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in events {
        now += step;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// Runs four pools of concurrency 16 on the queue `partner` (as four processes would) until
/// the history holds `jobs` finished jobs, then shuts them down. Fails if that takes more
/// than two minutes.
pub async fn run_four_hold_pools(q: &SuiteSchema, jobs: i64) {
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(start_hold_pool(q, 16).await);
    }
    let began = std::time::Instant::now();
    loop {
        let done: i64 = sqlx::query_scalar(q.sql("SELECT count(*) FROM @schema@.job_history"))
            .fetch_one(&q.pool)
            .await
            .expect("the history is readable");
        if done == jobs {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "jobs stopped at {done} of {jobs}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for worker in workers {
        worker.shutdown().await.expect("the pool stops");
    }
}
