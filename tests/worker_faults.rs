//! The worker pool when things break around its jobs: panics outside the handler, a
//! background task that dies, a network partition during shutdown.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::{
    Backoff, DeadLetterQuery, DeadLetters, Handler, InjectedFault, Job, JobBatch, JobContext,
    JobOptions, JobResult, QueueStats, Worker, WorkerBuilder, WorkerError, WorkerTask,
};
use harel_jobs_suite::TestQueue;
use serde::{Deserialize, Deserializer, Serialize};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the test handlers saw (the key of each run, in order), and a gate [`Held`] jobs
/// wait at.
#[derive(Clone)]
struct Runs {
    keys: Arc<Mutex<Vec<String>>>,
    gate: Arc<watch::Sender<bool>>,
}

impl Default for Runs {
    fn default() -> Self {
        Self {
            keys: Arc::default(),
            gate: Arc::new(watch::channel(false).0),
        }
    }
}

impl Runs {
    fn push(&self, key: impl Into<String>) {
        self.keys.lock().unwrap().push(key.into());
    }

    fn all(&self) -> Vec<String> {
        self.keys.lock().unwrap().clone()
    }

    fn open_gate(&self) {
        self.gate.send_replace(true);
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

/// Records its key as it starts, then waits for the gate to open.
#[derive(Serialize, Deserialize)]
struct Held {
    key: String,
}

impl Job for Held {
    const KIND: &'static str = "held";
}

impl Handler<Runs> for Held {
    async fn handle(self, ctx: JobContext<Runs>) -> JobResult {
        ctx.state().push(self.key);
        let _ = ctx.state().gate.subscribe().wait_for(|open| *open).await;
        Ok(())
    }
}

fn builder(queue: &TestQueue, runs: &Runs) -> WorkerBuilder<Runs> {
    builder_on(queue.pool.clone(), queue, runs)
}

fn builder_on(pool: PgPool, queue: &TestQueue, runs: &Runs) -> WorkerBuilder<Runs> {
    Worker::builder(pool, runs.clone())
        .schema(queue.schema.clone())
        .register::<Fragile>()
        .register::<Step>()
        .register::<Held>()
        .poll_interval(Duration::from_millis(50))
}

/// A TCP proxy in front of the test database that can *freeze*: stop forwarding in both
/// directions while keeping every socket open and sending no reset, as a network partition
/// (or a frozen server) looks to the worker. Dropping it closes every connection.
struct Proxy {
    options: PgConnectOptions,
    /// What connections accepted from now on follow; earlier switches are kept so that
    /// their connections stay frozen (a dropped switch would close them).
    switches: Arc<Mutex<Vec<watch::Sender<bool>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Self {
        let direct: PgConnectOptions = harel_jobs_suite::database_url().parse().unwrap();
        let upstream = format!("{}:{}", direct.get_host(), direct.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let switches = Arc::new(Mutex::new(vec![watch::channel(false).0]));
        let current = Arc::clone(&switches);
        let task = tokio::spawn(async move {
            // the connections' tasks end (and their sockets close) with this one
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let frozen = current.lock().unwrap().last().unwrap().subscribe();
                connections.spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (from_client, to_client) = client.into_split();
                    let (from_server, to_server) = server.into_split();
                    tokio::join!(
                        forward(from_client, to_server, frozen.clone()),
                        forward(from_server, to_client, frozen),
                    );
                });
            }
        });
        Self {
            options: direct.host("127.0.0.1").port(port),
            switches,
            task,
        }
    }

    /// A pool whose connections go through the proxy.
    async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(5)
            .connect_with(self.options.clone())
            .await
            .unwrap()
    }

    /// Freezes every connection, the ones opened later included: a partition.
    fn freeze(&self) {
        self.switches
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .send_replace(true);
    }

    /// Freezes the connections open now, for good; new ones work: connections that died
    /// silently (a failover, a NAT that forgot them) while the server is fine.
    fn freeze_open_connections(&self) {
        let mut switches = self.switches.lock().unwrap();
        switches.last().unwrap().send_replace(true);
        switches.push(watch::channel(false).0);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies bytes from `from` to `to` while not frozen. Frozen, it neither reads nor writes:
/// what was read just before the freeze is held back.
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut frozen: watch::Receiver<bool>,
) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        if frozen.wait_for(|frozen| !frozen).await.is_err() {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            _ = frozen.wait_for(|frozen| *frozen) => continue,
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.wait_for(|frozen| !frozen).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_under_a_frozen_network_and_counts_the_outcomes_it_could_not_write() {
    shutdown_under_a_frozen_network(HandlersEnd::Before).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_under_a_frozen_network_gives_up_on_releasing_jobs_cut_off_by_the_grace() {
    shutdown_under_a_frozen_network(HandlersEnd::Never).await;
}

/// When the handlers of [`shutdown_under_a_frozen_network`] end.
#[derive(Debug, PartialEq)]
enum HandlersEnd {
    /// Right after the freeze, before shutdown: their acks are what cannot be written.
    Before,
    /// Not before the grace period is over: their releases are what cannot be written.
    Never,
}

/// Five jobs run through the proxy, the proxy freezes, `shutdown()` is called.
async fn shutdown_under_a_frozen_network(handlers: HandlersEnd) {
    const JOBS: usize = 5;
    let grace = Duration::from_secs(2);
    let database_timeout = Duration::from_secs(2);
    let queue = TestQueue::new().await;
    let proxy = Proxy::start().await;
    let mut batch = JobBatch::for_schema(&queue.schema);
    for n in 0..JOBS {
        batch
            .push(Held {
                key: format!("held {n}"),
            })
            .unwrap();
    }
    batch.enqueue(&queue.pool).await.unwrap();

    let runs = Runs::default();
    let handle = builder_on(proxy.pool().await, &queue, &runs)
        .lease(Duration::from_secs(3))
        .shutdown_grace(grace)
        .database_timeout(database_timeout)
        .build()
        .unwrap()
        .start();
    let started = Instant::now();
    while runs.all().len() < JOBS {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "jobs did not start"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // the partition: from here on the worker's connections (claims, outcomes, heartbeat,
    // LISTEN) get no answer, and no reset either
    proxy.freeze();
    if handlers == HandlersEnd::Before {
        runs.open_gate();
    }
    let shutdown_began = Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(60), handle.shutdown())
        .await
        .expect("shutdown did not return within 60 s under a frozen network");
    let took = shutdown_began.elapsed();
    eprintln!(
        "handlers end {handlers:?}: shutdown under a frozen network took {took:?} \
         (grace {grace:?}, database timeout {database_timeout:?})"
    );
    assert_eq!(
        stopped.unwrap_err(),
        WorkerError::OutcomesNotWritten { count: JOBS }
    );

    // nothing was lost: the jobs are still queued, and run again once their leases lapse
    let stats = QueueStats::fetch(&queue.pool, &queue.schema).await.unwrap();
    assert_eq!(stats.jobs, JOBS as i64, "{stats:?}");
    drop(proxy);
    runs.open_gate();
    let again = builder(&queue, &runs).build().unwrap().start();
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    again.shutdown().await.unwrap();
    let mut keys = runs.all();
    keys.sort();
    let mut expected: Vec<String> = (0..JOBS)
        .flat_map(|n| [format!("held {n}"), format!("held {n}")])
        .collect();
    expected.sort();
    assert_eq!(keys, expected, "each job ran once more after its lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_stop_answering_are_dropped_after_the_database_timeout() {
    let queue = TestQueue::new().await;
    let proxy = Proxy::start().await;
    let runs = Runs::default();
    runs.open_gate();
    let handle = builder_on(proxy.pool().await, &queue, &runs)
        .database_timeout(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(200))
        .build()
        .unwrap()
        .start();
    // one job through, so that the fetcher, completer and LISTEN connections are open
    let first = Held {
        key: "before".into(),
    };
    harel_jobs::Enqueue::new(first, &queue.pool)
        .schema(&queue.schema)
        .await
        .unwrap();
    wait_until_idle(&queue, Duration::from_secs(20)).await;

    // every connection the worker holds now stops answering, without a reset
    proxy.freeze_open_connections();
    let mut batch = JobBatch::for_schema(&queue.schema);
    for n in 0..5 {
        batch
            .push(Held {
                key: format!("after {n}"),
            })
            .unwrap();
    }
    batch.enqueue(&queue.pool).await.unwrap();
    // without a bound, the next claim waits on its dead connection for ever
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    let stats = tokio::time::timeout(Duration::from_secs(30), handle.shutdown())
        .await
        .expect("shutdown returns")
        .unwrap();
    assert_eq!(stats.succeeded, 6, "{stats:?}");
    assert!(stats.database_errors >= 1, "{stats:?}");
    assert_eq!(runs.all().len(), 6);
}
