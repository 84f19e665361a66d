//! The worker pool when things break around its jobs: panics outside the handler, a
//! background task that dies.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::{
    Backoff, DeadLetterQuery, DeadLetters, Handler, InjectedFault, Job, JobBatch, JobContext,
    JobOptions, JobResult, QueueStats, Worker, WorkerBuilder, WorkerError, WorkerTask,
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

/// Log lines written while a [`LogCapture`] is installed on the current thread.
#[derive(Clone, Default)]
struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogCapture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Captures this thread's logs (a current-thread runtime runs every task of the test
    /// on it) until the guard is dropped.
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
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

#[tokio::test]
async fn a_background_task_that_fails_stops_the_pool_and_the_handle_says_which_and_why() {
    let queue = TestQueue::new().await;
    let tasks = [
        WorkerTask::Fetcher,
        WorkerTask::Completer,
        WorkerTask::Heartbeat,
        WorkerTask::Listener,
        WorkerTask::Maintenance,
    ];
    for task in tasks {
        for fault in [InjectedFault::Panic, InjectedFault::Error] {
            let case = format!("{task} {fault:?}");
            let runs = Runs::default();
            let log = LogCapture::default();
            let _capture = log.install();
            // the completer fails on its first batch of outcomes: give it one
            let step = Step {
                group: format!("{task}-{fault:?}"),
                key: case.clone(),
            };
            harel_jobs::Enqueue::new(step, &queue.pool)
                .schema(&queue.schema)
                .await
                .unwrap();
            let mut handle = builder(&queue, &runs)
                .heartbeat_interval(Duration::from_millis(100))
                .__inject_fault(task, fault)
                .build()
                .unwrap()
                .start();

            // without the supervisor watching its tasks, the pool never stops on its own
            let stopped = tokio::time::timeout(Duration::from_secs(30), handle.stopped())
                .await
                .unwrap_or_else(|_| panic!("{case}: the pool did not stop"));
            let reason = match fault {
                InjectedFault::Panic => format!("panicked: fault injected into the {task}"),
                _ => format!("fault injected into the {task}"),
            };
            let expected = WorkerError::TaskFailed {
                task,
                reason: reason.clone(),
            };
            assert_eq!(stopped.unwrap_err(), expected, "{case}");
            assert!(handle.is_finished(), "{case}");
            assert_eq!(handle.shutdown().await.unwrap_err(), expected, "{case}");
            assert_eq!(
                expected.to_string(),
                format!("worker pool stopped: its {task} failed: {reason}")
            );
            let logged = log.text();
            assert!(
                logged.lines().any(|line| line.contains("ERROR")
                    && line.contains("worker task failed: stopping the pool")
                    && line.contains(&format!("task={task}"))
                    && line.contains(&reason)),
                "{case}: not in the log:\n{logged}"
            );
        }
    }
}

#[tokio::test]
async fn a_healthy_pool_is_not_finished_until_shut_down() {
    let queue = TestQueue::new().await;
    let runs = Runs::default();
    let mut handle = builder(&queue, &runs).build().unwrap().start();
    let waited = tokio::time::timeout(Duration::from_millis(500), handle.stopped()).await;
    assert!(waited.is_err(), "stopped() waits while the pool runs");
    assert!(!handle.is_finished());
    handle.shutdown().await.unwrap();
}
