//! The worker pool when things break around its jobs: panics outside the handler, a
//! background task that dies, a network partition during shutdown, connections that stop
//! answering, a database whose default gives up durable commits, a pooler that refuses
//! startup parameters.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::Schema;
use harel_jobs::{
    Backoff, Client, Count, DeadLetterQuery, Handler, InjectedFault, Job, JobBatch, JobContext,
    JobOptions, JobResult, Stats, Worker, WorkerBuilder, WorkerError, WorkerTask,
};
use harel_jobs_suite::{SuiteSchema, TestDatabase, capture, pool_with};
use serde::{Deserialize, Deserializer, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};
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

fn builder(queue: &SuiteSchema, runs: &Runs) -> WorkerBuilder<Runs> {
    builder_on(queue.pool.clone(), queue, runs)
}

fn builder_on(pool: PgPool, queue: &SuiteSchema, runs: &Runs) -> WorkerBuilder<Runs> {
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
    /// Connections refused for a startup parameter (see [`Proxy::refusing_startup_options`]).
    refused: Arc<std::sync::atomic::AtomicUsize>,
    /// What connections accepted from now on follow; earlier switches are kept so that
    /// their connections stay frozen (a dropped switch would close them).
    switches: Arc<Mutex<Vec<watch::Sender<bool>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start() -> Self {
        Self::start_with(false).await
    }

    /// A proxy that, like PgBouncer in transaction mode, refuses connections whose startup
    /// message carries the `options` parameter (and offers no TLS).
    async fn refusing_startup_options() -> Self {
        Self::start_with(true).await
    }

    async fn start_with(refuse_options: bool) -> Self {
        let direct: PgConnectOptions = harel_jobs_suite::database_url().parse().unwrap();
        let upstream = format!("{}:{}", direct.get_host(), direct.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let switches = Arc::new(Mutex::new(vec![watch::channel(false).0]));
        let current = Arc::clone(&switches);
        let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let refusals = Arc::clone(&refused);
        let task = tokio::spawn(async move {
            // the connections' tasks end (and their sockets close) with this one
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let frozen = current.lock().unwrap().last().unwrap().subscribe();
                let refusals = Arc::clone(&refusals);
                connections.spawn(async move {
                    let startup = if refuse_options {
                        match startup_message(&mut client).await {
                            Ok(Some(startup)) => Some(startup),
                            Ok(None) => {
                                refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let _ = client.write_all(&unsupported_options()).await;
                                return;
                            }
                            Err(_) => return,
                        }
                    } else {
                        None
                    };
                    let Ok(mut server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    if let Some(startup) = startup
                        && server.write_all(&startup).await.is_err()
                    {
                        return;
                    }
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
            refused,
            switches,
            task,
        }
    }

    /// How many connections were refused for a startup parameter.
    fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
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

/// Reads a client's startup message, answering `N` (no TLS) to an SSLRequest first. Returns
/// the message to forward, or `None` if it carries the `options` parameter.
async fn startup_message(client: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    const SSL_REQUEST: u32 = 80_877_103;
    loop {
        let length = client.read_u32().await?;
        let mut body = vec![0; length as usize - 4];
        client.read_exact(&mut body).await?;
        if body[..4] == SSL_REQUEST.to_be_bytes() {
            client.write_all(b"N").await?;
            continue;
        }
        // protocol version, then NUL-terminated key, value, key, value, …
        let mut fields = body[4..].split(|byte| *byte == 0);
        while let Some(key) = fields.next() {
            if key == b"options" {
                return Ok(None);
            }
            fields.next();
        }
        let mut message = length.to_be_bytes().to_vec();
        message.extend_from_slice(&body);
        return Ok(Some(message));
    }
}

/// The FATAL ErrorResponse PgBouncer sends for a startup parameter it does not support.
fn unsupported_options() -> Vec<u8> {
    let mut fields = Vec::new();
    for (code, text) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', "08P01"),
        (b'M', "unsupported startup parameter: options"),
    ] {
        fields.push(code);
        fields.extend_from_slice(text.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut message = vec![b'E'];
    message.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
    message.extend_from_slice(&fields);
    message
}

/// Makes every change to the queue's group rows record what it was and the
/// `synchronous_commit` of the session that made it, in `commit_log` (in the queue's schema):
/// a claim leases a group, a heartbeat pushes its lease's end, an ack frees or drops it.
async fn record_commit_settings(pool: &PgPool, schema: &Schema) {
    let schema = format!("\"{}\"", schema.name());
    for statement in [
        format!("CREATE TABLE {schema}.commit_log (op text NOT NULL, setting text NOT NULL)"),
        format!(
            "CREATE FUNCTION {schema}.log_commit() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 INSERT INTO {schema}.commit_log VALUES (
                     CASE WHEN TG_OP = 'DELETE' THEN 'ack'
                          WHEN NEW.locked_by IS NULL THEN 'ack'
                          WHEN OLD.locked_by IS DISTINCT FROM NEW.locked_by THEN 'claim'
                          WHEN NEW.head_seq = OLD.head_seq
                           AND NEW.available_at > OLD.available_at THEN 'extend'
                          ELSE 'other' END,
                     current_setting('synchronous_commit'));
                 RETURN NULL;
             END $$"
        ),
        format!(
            "CREATE TRIGGER log_commit AFTER UPDATE OR DELETE ON {schema}.transport_groups
             FOR EACH ROW EXECUTE FUNCTION {schema}.log_commit()"
        ),
    ] {
        sqlx::query(AssertSqlSafe(statement))
            .execute(pool)
            .await
            .unwrap();
    }
}

/// What [`record_commit_settings`] recorded: (operation, `synchronous_commit`, how many).
async fn commit_settings(pool: &PgPool, schema: &Schema) -> Vec<(String, String, i64)> {
    let sql = format!(
        "SELECT op, setting, count(*) FROM \"{}\".commit_log GROUP BY 1, 2 ORDER BY 1, 2",
        schema.name()
    );
    sqlx::query_as(AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
        .unwrap()
}

/// How many changes of `op` were recorded with `setting`.
fn recorded(settings: &[(String, String, i64)], op: &str, setting: &str) -> i64 {
    settings
        .iter()
        .filter(|(o, s, _)| o == op && s == setting)
        .map(|(_, _, n)| n)
        .sum()
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
        capture::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Waits until the queue holds no job, failing the test after `limit`.
async fn wait_until_idle(queue: &SuiteSchema, limit: Duration) -> Stats {
    wait_until_idle_in(&queue.pool, &queue.schema, limit).await
}

/// Waits until the queue in `schema` holds no job, failing the test after `limit`.
async fn wait_until_idle_in(pool: &PgPool, schema: &Schema, limit: Duration) -> Stats {
    let started = Instant::now();
    loop {
        let stats = Stats::fetch(pool, schema).await.unwrap();
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
    let queue = SuiteSchema::new().await;
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
    assert_eq!(stats.dead_letters, Count::Exact(1));
    assert_eq!(worker_stats.retried, 1, "{worker_stats:?}");
    assert_eq!(worker_stats.dead_lettered, 1, "{worker_stats:?}");
    let letters = Client::with_schema(queue.pool.clone(), queue.schema.clone())
        .dead_letters()
        .list(&DeadLetterQuery::default())
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
    let queue = SuiteSchema::new().await;
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
    let queue = SuiteSchema::new().await;
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
    let queue = SuiteSchema::new().await;
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
    let stats = Stats::fetch(&queue.pool, &queue.schema).await.unwrap();
    assert_eq!(stats.jobs, Count::Exact(JOBS as i64), "{stats:?}");
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
    let queue = SuiteSchema::new().await;
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

/// Runs until the test releases it (the n-th execution started ends once `release` reaches
/// n) or its context is cancelled, whichever comes first.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Reclaimed;

impl Job for Reclaimed {
    const KIND: &'static str = "reclaimed";
}

/// What the executions of [`Reclaimed`] did.
#[derive(Clone)]
struct Executions {
    /// The attempt of each execution, in start order.
    started: Arc<Mutex<Vec<u32>>>,
    /// The executions (1-based, in start order) that ended because they were cancelled.
    cancelled: Arc<Mutex<Vec<usize>>>,
    release: Arc<watch::Sender<usize>>,
}

impl Default for Executions {
    fn default() -> Self {
        Self {
            started: Arc::default(),
            cancelled: Arc::default(),
            release: Arc::new(watch::channel(0).0),
        }
    }
}

impl Handler<Executions> for Reclaimed {
    async fn handle(self, ctx: JobContext<Executions>) -> JobResult {
        let state = ctx.state();
        let n = {
            let mut started = state.started.lock().unwrap();
            started.push(ctx.attempt());
            started.len()
        };
        let mut release = state.release.subscribe();
        tokio::select! {
            _ = release.wait_for(|released| *released >= n) => {}
            () = ctx.cancelled() => state.cancelled.lock().unwrap().push(n),
        }
        Ok(())
    }
}

/// Waits until `condition` holds, failing the test after `limit` with `what`.
async fn wait_until(what: &str, limit: Duration, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_claimed_again_while_its_lost_claim_still_runs_keeps_each_execution_apart() {
    let queue = SuiteSchema::new().await;
    let executions = Executions::default();
    let handle = Worker::builder(queue.pool.clone(), executions.clone())
        .schema(queue.schema.clone())
        .register::<Reclaimed>()
        .concurrency(4)
        // the first heartbeat comes 4 s after the start, long after the claim below
        .lease(Duration::from_secs(12))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    harel_jobs::Enqueue::new(Reclaimed, &queue.pool)
        .schema(&queue.schema)
        .group("reclaimed")
        .await
        .unwrap();
    let started = || executions.started.lock().unwrap().len();
    wait_until("the job starts", Duration::from_secs(20), || started() == 1).await;

    // the claim is lost while the job runs, as on a standby promoted before the claim
    // reached it: the group is unleased, its job at the head, and this worker claims it again
    sqlx::query(queue.sql(
        "UPDATE @schema@.transport_groups SET locked_by = NULL, available_at = now()
          WHERE group_id = 'reclaimed'",
    ))
    .execute(&queue.pool)
    .await
    .unwrap();
    wait_until(
        "the same worker claims the job again",
        Duration::from_secs(20),
        || started() == 2,
    )
    .await;

    // the heartbeat finds the first claim lost and cancels the first execution only (before,
    // the second claim's entry replaced the first's, which was never told)
    wait_until(
        "the first execution is cancelled",
        Duration::from_secs(30),
        || *executions.cancelled.lock().unwrap() == [1],
    )
    .await;
    // the second one's result is written (before, the first one's end took the second's
    // entry with it, and the second one's result was discarded)
    executions.release.send_replace(2);
    wait_until_idle(&queue, Duration::from_secs(20)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(*executions.started.lock().unwrap(), [1, 2], "attempts");
    assert_eq!(*executions.cancelled.lock().unwrap(), [1]);
    assert_eq!(stats.succeeded, 1, "{stats:?}");
    assert_eq!(stats.leases_lost, 1, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_connection_that_stops_answering_is_replaced() {
    let queue = SuiteSchema::new().await;
    let proxy = Proxy::start().await;
    let runs = Runs::default();
    runs.open_gate();
    let handle = builder_on(proxy.pool().await, &queue, &runs)
        // polls once an hour: only a NOTIFY (or the listener's reconnect) starts a job
        .poll_interval(Duration::from_secs(3600))
        .database_timeout(Duration::from_secs(1))
        .heartbeat_interval(Duration::from_millis(200))
        .build()
        .unwrap()
        .start();
    let first = Held {
        key: "before".into(),
    };
    harel_jobs::Enqueue::new(first, &queue.pool)
        .schema(&queue.schema)
        .await
        .unwrap();
    wait_until_idle(&queue, Duration::from_secs(20)).await;

    // every connection the worker holds now stops answering, without a reset, as after a
    // failover to another machine: the LISTEN connection only ever waits, so nothing tells
    // it (before, no job was ever claimed again: the poll is an hour away)
    proxy.freeze_open_connections();
    let after = Held {
        key: "after".into(),
    };
    harel_jobs::Enqueue::new(after, &queue.pool)
        .schema(&queue.schema)
        .await
        .unwrap();
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    let stats = tokio::time::timeout(Duration::from_secs(30), handle.shutdown())
        .await
        .expect("shutdown returns")
        .unwrap();
    assert_eq!(stats.succeeded, 2, "{stats:?}");
    assert_eq!(runs.all().len(), 2);
}

#[tokio::test]
async fn claims_and_heartbeats_commit_durably_where_the_database_default_is_off() {
    let database = TestDatabase::new().await;
    let admin = pool_with(&harel_jobs_suite::database_url(), 1).await;
    let off = format!(
        "ALTER DATABASE \"{}\" SET synchronous_commit = off",
        database.name
    );
    sqlx::query(AssertSqlSafe(off))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let pool = pool_with(&database.url, 10).await;
    let default: String = sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        default, "off",
        "the database's sessions commit without waiting"
    );
    let schema = Schema::default();
    harel_jobs::migrate_schema(&pool, &schema).await.unwrap();
    let mut batch = JobBatch::for_schema(&schema);
    for n in 0..3 {
        batch
            .push(Held {
                key: format!("held {n}"),
            })
            .unwrap();
    }
    batch.enqueue(&pool).await.unwrap();
    record_commit_settings(&pool, &schema).await;

    let runs = Runs::default();
    let handle = Worker::builder(pool.clone(), runs.clone())
        .schema(schema.clone())
        .register::<Held>()
        .heartbeat_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    // the jobs hold their leases until a few heartbeats went by
    let started = Instant::now();
    loop {
        let settings = commit_settings(&pool, &schema).await;
        if recorded(&settings, "extend", "on") + recorded(&settings, "extend", "off") >= 6 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no heartbeat");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    runs.open_gate();
    wait_until_idle_in(&pool, &schema, Duration::from_secs(20)).await;
    handle.shutdown().await.unwrap();

    let settings = commit_settings(&pool, &schema).await;
    assert_eq!(recorded(&settings, "claim", "on"), 3, "{settings:?}");
    assert_eq!(recorded(&settings, "claim", "off"), 0, "{settings:?}");
    assert!(recorded(&settings, "extend", "on") >= 6, "{settings:?}");
    assert_eq!(recorded(&settings, "extend", "off"), 0, "{settings:?}");
    assert_eq!(recorded(&settings, "other", "on"), 0, "{settings:?}");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_settings_need_no_startup_parameter_so_a_pooler_refusing_them_is_fine() {
    let queue = SuiteSchema::new().await;
    let proxy = Proxy::refusing_startup_options().await;
    let mut batch = JobBatch::for_schema(&queue.schema);
    for n in 0..5 {
        batch
            .push(Held {
                key: format!("held {n}"),
            })
            .unwrap();
    }
    batch.enqueue(&queue.pool).await.unwrap();
    record_commit_settings(&queue.pool, &queue.schema).await;

    let runs = Runs::default();
    runs.open_gate();
    let handle = builder_on(proxy.pool().await, &queue, &runs)
        .build()
        .unwrap()
        .start();
    wait_until_idle(&queue, Duration::from_secs(20)).await;
    handle.shutdown().await.unwrap();

    // the server's default here is on: outcomes are off only if the completer set it, on a
    // connection of its own that the proxy let through
    let settings = commit_settings(&queue.pool, &queue.schema).await;
    assert_eq!(recorded(&settings, "claim", "on"), 5, "{settings:?}");
    assert_eq!(recorded(&settings, "ack", "off"), 5, "{settings:?}");
    assert_eq!(recorded(&settings, "ack", "on"), 0, "{settings:?}");
    assert_eq!(
        proxy.refused(),
        0,
        "a worker connection sent a startup parameter"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_borrowed_pool_connections_claims_stay_durable_and_the_pool_gets_its_setting_back() {
    let queue = SuiteSchema::new().await;
    let mut batch = JobBatch::for_schema(&queue.schema);
    for n in 0..3 {
        batch
            .push(Held {
                key: format!("held {n}"),
            })
            .unwrap();
    }
    batch.enqueue(&queue.pool).await.unwrap();
    record_commit_settings(&queue.pool, &queue.schema).await;
    // the role may hold 3 connections, all opened by its pool first: every connection the
    // worker opens for itself is refused, so it borrows idle pooled ones
    let role = harel_jobs_suite::TestRole::with_connection_limit(&queue, 3).await;
    let off = format!("ALTER ROLE \"{}\" SET synchronous_commit = off", role.name);
    sqlx::query(AssertSqlSafe(off))
        .execute(&queue.pool)
        .await
        .unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .min_connections(3)
        .connect(&role.url)
        .await
        .unwrap();
    let settings_of_the_pool = async |pool: &PgPool| {
        let mut held = Vec::new();
        let mut settings = Vec::new();
        for _ in 0..3 {
            let mut connection = pool.acquire().await.unwrap();
            let setting: String =
                sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
                    .fetch_one(&mut *connection)
                    .await
                    .unwrap();
            settings.push(setting);
            held.push(connection);
        }
        settings
    };
    assert_eq!(settings_of_the_pool(&pool).await, ["off", "off", "off"]);
    // the server processes of the role: the pool's three, and no other can open
    let backends = async || {
        sqlx::query_scalar::<_, Vec<i32>>(
            "SELECT COALESCE(array_agg(pid ORDER BY pid), '{}') FROM pg_stat_activity
              WHERE usename = $1",
        )
        .bind(&role.name)
        .fetch_one(&queue.pool)
        .await
        .unwrap()
    };
    let before = backends().await;
    assert_eq!(before.len(), 3, "{before:?}");

    let runs = Runs::default();
    let handle = builder_on(pool.clone(), &queue, &runs)
        .heartbeat_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    let started = Instant::now();
    loop {
        let settings = commit_settings(&queue.pool, &queue.schema).await;
        if recorded(&settings, "extend", "on") + recorded(&settings, "extend", "off") >= 3 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no heartbeat");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    runs.open_gate();
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    handle.shutdown().await.unwrap();

    let settings = commit_settings(&queue.pool, &queue.schema).await;
    assert_eq!(recorded(&settings, "claim", "on"), 3, "{settings:?}");
    assert_eq!(recorded(&settings, "claim", "off"), 0, "{settings:?}");
    assert!(recorded(&settings, "extend", "on") >= 3, "{settings:?}");
    assert_eq!(recorded(&settings, "extend", "off"), 0, "{settings:?}");
    // outcomes on a borrowed connection keep the pool's own setting
    assert_eq!(recorded(&settings, "ack", "off"), 3, "{settings:?}");
    // and the application's connections are as they were: the same three, none closed by
    // the worker (a call the server refused, such as the depth sampler's election without
    // its grant, gives its connection back; closing it left the pool short, and the
    // completer could not borrow one for up to 30 s)
    assert_eq!(settings_of_the_pool(&pool).await, ["off", "off", "off"]);
    assert_eq!(
        backends().await,
        before,
        "the worker closed a pooled connection"
    );
    pool.close().await;
}
