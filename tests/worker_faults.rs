//! The worker pool when things break around its jobs: panics outside the handler.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::{
    Backoff, DeadLetterQuery, DeadLetters, Handler, Job, JobBatch, JobContext, JobOptions,
    JobResult, QueueStats, Worker, WorkerBuilder,
};
use harel_jobs_suite::TestQueue;
use serde::{Deserialize, Deserializer, Serialize};

/// What the test handlers saw: the key of each run, in order.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<String>>>);

impl Runs {
    fn push(&self, key: impl Into<String>) {
        self.0.lock().unwrap().push(key.into());
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Decodes a number, panicking on 13.
fn panics_on_13<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = u64::deserialize(deserializer)?;
    assert!(value != 13, "13 does not decode");
    Ok(value)
}

/// A job whose payload decoding panics (in its own `deserialize_with`) when `value` is 13.
#[derive(Serialize, Deserialize)]
struct Fragile {
    group: String,
    #[serde(deserialize_with = "panics_on_13")]
    value: u64,
}

impl Job for Fragile {
    const KIND: &'static str = "fragile";
    fn options() -> JobOptions {
        JobOptions::new()
            .max_attempts(2)
            .backoff(Backoff::fixed(Duration::from_millis(50)))
    }
    fn group(&self) -> Option<String> {
        Some(self.group.clone())
    }
}

impl Handler<Runs> for Fragile {
    async fn handle(self, ctx: JobContext<Runs>) -> JobResult {
        ctx.state().push(format!("fragile {}", self.value));
        Ok(())
    }
}

/// Records its key, in its group.
#[derive(Serialize, Deserialize)]
struct Step {
    group: String,
    key: String,
}

impl Job for Step {
    const KIND: &'static str = "step";
    fn group(&self) -> Option<String> {
        Some(self.group.clone())
    }
}

impl Handler<Runs> for Step {
    async fn handle(self, ctx: JobContext<Runs>) -> JobResult {
        ctx.state().push(self.key);
        Ok(())
    }
}

fn builder(queue: &TestQueue, runs: &Runs) -> WorkerBuilder<Runs> {
    Worker::builder(queue.pool.clone(), runs.clone())
        .schema(queue.schema.clone())
        .register::<Fragile>()
        .register::<Step>()
        .poll_interval(Duration::from_millis(50))
}

/// Waits until the queue holds no job, failing the test after `limit`.
async fn wait_until_idle(queue: &TestQueue, limit: Duration) -> QueueStats {
    let started = Instant::now();
    loop {
        let stats = QueueStats::fetch(&queue.pool, &queue.schema).await.unwrap();
        if stats.is_idle() {
            return stats;
        }
        assert!(
            started.elapsed() < limit,
            "queue not drained after {limit:?}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_panic_while_decoding_a_payload_is_a_failed_attempt_and_its_group_moves_on() {
    let queue = TestQueue::new().await;
    let runs = Runs::default();
    let mut batch = JobBatch::for_schema(&queue.schema);
    let group = "decode-panics".to_owned();
    batch
        .push(Fragile {
            group: group.clone(),
            value: 13,
        })
        .unwrap();
    batch
        .push(Step {
            group: group.clone(),
            key: "after the fragile job".into(),
        })
        .unwrap();
    batch.enqueue(&queue.pool).await.unwrap();

    let handle = builder(&queue, &runs).build().unwrap().start();
    // without the catch, the job task dies, the heartbeat keeps its lease for ever and the
    // group never moves on: this times out
    let stats = wait_until_idle(&queue, Duration::from_secs(20)).await;
    let worker_stats = handle.shutdown().await.unwrap();

    assert_eq!(runs.all(), ["after the fragile job"]);
    assert_eq!(stats.dead_letters, 1);
    assert_eq!(worker_stats.retried, 1, "{worker_stats:?}");
    assert_eq!(worker_stats.dead_lettered, 1, "{worker_stats:?}");
    let letters = DeadLetters::new(queue.schema.clone())
        .list(&queue.pool, &DeadLetterQuery::default())
        .await
        .unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].kind, "fragile");
    assert_eq!(letters[0].attempts, 2);
    assert_eq!(
        letters[0].last_error,
        "decoding the payload panicked: 13 does not decode (attempt 2 of 2)"
    );
}
