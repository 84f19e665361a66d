//! The job loop against a real PostgreSQL: delivery, retries, dead letters, leases,
//! ordering within groups, shutdown, panics, bad input, wake-up.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::transport::{ClaimRequest, OutgoingMessage};
use harel_jobs::{
    Backoff, Count, DeadLetterQuery, DeadLetters, Handler, Job, JobBatch, JobContext, JobError,
    JobOptions, JobResult, QueueStats, Worker, WorkerBuilder,
};
use harel_jobs_suite::TestQueue;
use harel_jobs_suite::cluster::{Cluster, ClusterOptions};
use serde::{Deserialize, Serialize};

/// One execution of a handler, as the handler saw it.
#[derive(Clone, Debug)]
struct Run {
    key: u64,
    group: String,
    worker: usize,
    attempt: u32,
    started: Instant,
    ended: Instant,
}

/// The state every test handler shares: a ledger of runs, and what is running per group.
#[derive(Default)]
struct Ledger {
    runs: Mutex<Vec<Run>>,
    running_groups: Mutex<HashSet<String>>,
    overlaps: Mutex<Vec<String>>,
}

/// Shares one ledger between several pools (each with its own worker number).
#[derive(Clone)]
struct Shared {
    worker: usize,
    ledger: Arc<Ledger>,
}

impl Shared {
    async fn record<F: std::future::Future<Output = ()>>(
        &self,
        ctx: &JobContext<Shared>,
        key: u64,
        work: F,
    ) {
        let group = ctx.group().to_owned();
        if !self
            .ledger
            .running_groups
            .lock()
            .unwrap()
            .insert(group.clone())
        {
            self.ledger.overlaps.lock().unwrap().push(group.clone());
        }
        let started = Instant::now();
        work.await;
        self.ledger.running_groups.lock().unwrap().remove(&group);
        self.ledger.runs.lock().unwrap().push(Run {
            key,
            group,
            worker: self.worker,
            attempt: ctx.attempt(),
            started,
            ended: Instant::now(),
        });
    }
}

/// Succeeds after sleeping `sleep_ms`; grouped by `group` when set.
#[derive(Serialize, Deserialize)]
struct Work {
    key: u64,
    group: Option<String>,
    sleep_ms: u64,
}

impl Job for Work {
    const KIND: &'static str = "work";
    fn group(&self) -> Option<String> {
        self.group.clone()
    }
}

impl Handler<Shared> for Work {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        let sleep = Duration::from_millis(self.sleep_ms);
        ctx.state()
            .record(&ctx, self.key, async move {
                if !sleep.is_zero() {
                    tokio::time::sleep(sleep).await;
                }
            })
            .await;
        Ok(())
    }
}

/// Fails (or panics) on its first attempt, then succeeds. Fixed 300 ms backoff.
#[derive(Serialize, Deserialize)]
struct FlakyOnce {
    key: u64,
    panic: bool,
}

const FLAKY_BACKOFF: Duration = Duration::from_millis(300);

impl Job for FlakyOnce {
    const KIND: &'static str = "flaky_once";
    fn options() -> JobOptions {
        JobOptions::new().backoff(Backoff::fixed(FLAKY_BACKOFF))
    }
}

impl Handler<Shared> for FlakyOnce {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        if ctx.attempt() == 1 {
            if self.panic {
                panic!("flaky handler panicked on purpose");
            }
            return Err("first attempt fails".into());
        }
        Ok(())
    }
}

/// Always fails; two attempts.
#[derive(Serialize, Deserialize)]
struct AlwaysFails {
    key: u64,
}

impl Job for AlwaysFails {
    const KIND: &'static str = "always_fails";
    fn options() -> JobOptions {
        JobOptions::new()
            .max_attempts(2)
            .backoff(Backoff::fixed(Duration::from_millis(50)))
    }
}

impl Handler<Shared> for AlwaysFails {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        Err(JobError::retry(std::io::Error::other("smtp said no")))
    }
}

/// Fails permanently at once.
#[derive(Serialize, Deserialize)]
struct Hopeless;

impl Job for Hopeless {
    const KIND: &'static str = "hopeless";
}

impl Handler<Shared> for Hopeless {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, 0, async {}).await;
        Err(JobError::permanent("card declined"))
    }
}

/// Runs past its 200 ms timeout on the first attempt.
#[derive(Serialize, Deserialize)]
struct Slow {
    key: u64,
}

impl Job for Slow {
    const KIND: &'static str = "slow";
    fn options() -> JobOptions {
        JobOptions::new()
            .timeout(Duration::from_millis(200))
            .backoff(Backoff::fixed(Duration::from_millis(50)))
    }
}

impl Handler<Shared> for Slow {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        let first = ctx.attempt() == 1;
        ctx.state()
            .record(&ctx, self.key, async move {
                if first {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            })
            .await;
        Ok(())
    }
}

fn builder(queue: &TestQueue, worker: usize, ledger: &Arc<Ledger>) -> WorkerBuilder<Shared> {
    let shared = Shared {
        worker,
        ledger: Arc::clone(ledger),
    };
    Worker::builder(queue.pool.clone(), shared)
        .schema(queue.schema.clone())
        .register::<Work>()
        .register::<FlakyOnce>()
        .register::<AlwaysFails>()
        .register::<Hopeless>()
        .register::<Slow>()
        .poll_interval(Duration::from_millis(100))
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

async fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn work(key: u64) -> Work {
    Work {
        key,
        group: None,
        sleep_ms: 0,
    }
}

async fn enqueue_all<J: Job>(queue: &TestQueue, jobs: impl IntoIterator<Item = J>) {
    let mut batch = JobBatch::for_schema(&queue.schema);
    for job in jobs {
        batch.push(job).unwrap();
    }
    batch.enqueue(&queue.pool).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_jobs_over_eight_workers_run_exactly_once_and_spread() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..8)
        .map(|n| {
            builder(&queue, n, &ledger)
                .concurrency(4)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    enqueue_all(
        &queue,
        (0..2000).map(|key| Work {
            sleep_ms: 1,
            ..work(key)
        }),
    )
    .await;
    wait_until_idle(&queue, Duration::from_secs(60)).await;
    for handle in handles {
        handle.shutdown().await.unwrap();
    }

    let runs = ledger.runs.lock().unwrap().clone();
    let mut per_key: HashMap<u64, usize> = HashMap::new();
    let mut per_worker = [0usize; 8];
    for run in &runs {
        *per_key.entry(run.key).or_default() += 1;
        per_worker[run.worker] += 1;
    }
    assert_eq!(per_key.len(), 2000, "every job ran");
    assert!(per_key.values().all(|&n| n == 1), "no job ran twice");
    assert!(
        per_worker.iter().all(|&n| n >= 50),
        "work spread over all workers: {per_worker:?}"
    );
}

#[tokio::test]
async fn a_job_that_fails_once_is_retried_after_its_backoff_and_succeeds() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();
    enqueue_all(&queue, (0..50).map(|key| FlakyOnce { key, panic: false })).await;
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.retried, stats.succeeded), (50, 50));

    let runs = ledger.runs.lock().unwrap().clone();
    for key in 0..50 {
        let attempts: Vec<&Run> = runs.iter().filter(|r| r.key == key).collect();
        assert_eq!(attempts.len(), 2, "job {key}: one failure, one success");
        let (first, second) = (attempts[0], attempts[1]);
        assert_eq!((first.attempt, second.attempt), (1, 2));
        // the retry is parked for at least the jittered backoff (never earlier)
        assert!(second.started - first.ended >= FLAKY_BACKOFF.mul_f64(0.75));
    }
    assert_eq!(
        DeadLetters::new(queue.schema.clone())
            .count(&queue.pool)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn a_job_that_always_fails_is_dead_with_its_error_after_max_attempts() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();
    let id = AlwaysFails { key: 7 }.enqueue_in(&queue).await;
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    handle.shutdown().await.unwrap();

    assert_eq!(
        ledger.runs.lock().unwrap().len(),
        2,
        "exactly two attempts ran"
    );
    let dead = DeadLetters::new(queue.schema.clone());
    let letter = dead
        .get(&queue.pool, id)
        .await
        .unwrap()
        .expect("dead letter");
    assert_eq!(letter.attempts, 2);
    assert_eq!(letter.kind, "always_fails");
    assert!(
        letter.last_error.contains("smtp said no"),
        "{}",
        letter.last_error
    );
    assert!(
        letter.last_error.contains("attempt 2 of 2"),
        "{}",
        letter.last_error
    );
    assert!(letter.failed_at >= letter.enqueued_at);
    assert_eq!(letter.decode::<AlwaysFails>().unwrap().key, 7);

    // retry puts it back (same group, attempts start over): it fails twice more
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();
    let again = dead.retry(&queue.pool, id).await.unwrap().expect("retried");
    assert!(again > id);
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    handle.shutdown().await.unwrap();
    assert_eq!(ledger.runs.lock().unwrap().len(), 4);
    let letter = dead
        .get(&queue.pool, again)
        .await
        .unwrap()
        .expect("dead again");
    assert_eq!(letter.attempts, 2);
    assert!(dead.delete(&queue.pool, again).await.unwrap());
    assert_eq!(dead.count(&queue.pool).await.unwrap(), 0);
}

#[tokio::test]
async fn a_permanent_error_is_dead_at_once() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();
    let id = Hopeless.enqueue_in(&queue).await;
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.dead_lettered, stats.retried), (1, 0));
    let letter = DeadLetters::new(queue.schema.clone())
        .get(&queue.pool, id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (letter.attempts, letter.last_error.as_str()),
        (1, "card declined")
    );
}

#[tokio::test]
async fn a_vanished_worker_holds_its_lease_until_it_lapses_then_its_late_ack_changes_nothing() {
    let queue = TestQueue::new().await;
    let id = work(1).enqueue_in(&queue).await;
    // the vanishing worker: claims with a 700 ms lease, then goes silent
    let vanished = queue
        .transport
        .claim(&queue.pool, &ClaimRequest::new(Duration::from_millis(700)))
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(vanished.lease.id, id);

    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        ledger.runs.lock().unwrap().is_empty(),
        "live lease respected"
    );

    wait_until_idle(&queue, Duration::from_secs(10)).await;
    handle.shutdown().await.unwrap();
    let runs = ledger.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].attempt, 2,
        "the vanished claim counted as attempt 1"
    );

    let late = queue
        .transport
        .ack(&queue.pool, &vanished.lease)
        .await
        .unwrap();
    assert!(!late.is_applied(), "the late ack reports the lost lease");
    assert_eq!(queue.count("jobs").await, 0);
    assert_eq!(queue.count("dead_letters").await, 0);
}

#[tokio::test]
async fn a_rolled_back_enqueue_never_runs() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();

    let mut tx = queue.pool.begin().await.unwrap();
    harel_jobs::Enqueue::new(work(1), &mut *tx)
        .schema(&queue.schema)
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = queue.pool.begin().await.unwrap();
    harel_jobs::Enqueue::new(work(2), &mut *tx)
        .schema(&queue.schema)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        ledger.runs.lock().unwrap().is_empty(),
        "not visible before commit"
    );
    tx.commit().await.unwrap();

    wait_for(Duration::from_secs(10), || {
        !ledger.runs.lock().unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.shutdown().await.unwrap();
    let keys: Vec<u64> = ledger.runs.lock().unwrap().iter().map(|r| r.key).collect();
    assert_eq!(keys, [2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_group_run_in_order_and_never_two_at_once() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..8)
        .map(|n| {
            builder(&queue, n, &ledger)
                .concurrency(8)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    // 50 groups × 40 jobs, interleaved across groups in one batch
    let jobs = (0..40).flat_map(|index| {
        (0..50).map(move |group| Work {
            key: group * 1000 + index,
            group: Some(format!("group-{group}")),
            sleep_ms: if index % 7 == 0 { 2 } else { 0 },
        })
    });
    enqueue_all(&queue, jobs).await;
    wait_until_idle(&queue, Duration::from_secs(120)).await;
    for handle in handles {
        handle.shutdown().await.unwrap();
    }

    assert!(
        ledger.overlaps.lock().unwrap().is_empty(),
        "a group ran twice at once"
    );
    let mut runs = ledger.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 2000);
    runs.sort_by_key(|r| r.started);
    let mut last: HashMap<String, u64> = HashMap::new();
    for run in &runs {
        if let Some(previous) = last.insert(run.group.clone(), run.key) {
            assert!(
                previous < run.key,
                "{}: {previous} ran before {}",
                run.group,
                run.key
            );
        }
    }
    let workers: HashSet<usize> = runs.iter().map(|r| r.worker).collect();
    assert!(workers.len() > 1, "groups were spread over workers");
}

#[tokio::test]
async fn shutdown_mid_run_loses_nothing_and_nothing_waits_for_a_lease() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    // an hour-long lease: anything that had to wait for one would never finish below
    let first = builder(&queue, 0, &ledger)
        .lease(Duration::from_secs(3600))
        .concurrency(8)
        .shutdown_grace(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    enqueue_all(
        &queue,
        (0..200).map(|key| Work {
            sleep_ms: 20 + (key % 5) * 100,
            ..work(key)
        }),
    )
    .await;
    wait_for(Duration::from_secs(30), || {
        ledger.runs.lock().unwrap().len() >= 20
    })
    .await;
    let stopped = first.shutdown().await.unwrap();
    assert!(
        stopped.released > 0,
        "some jobs were cut off and given back: {stopped:?}"
    );
    assert_eq!(
        QueueStats::fetch(&queue.pool, &queue.schema)
            .await
            .unwrap()
            .claimable_groups,
        Count::Exact(200 - stopped.succeeded as i64),
        "every unfinished job is claimable again at once"
    );

    let second = builder(&queue, 1, &ledger)
        .lease(Duration::from_secs(3600))
        .concurrency(32)
        .build()
        .unwrap()
        .start();
    wait_until_idle(&queue, Duration::from_secs(60)).await;
    second.shutdown().await.unwrap();
    let done: HashSet<u64> = ledger.runs.lock().unwrap().iter().map(|r| r.key).collect();
    assert_eq!(done.len(), 200, "every job completed");
}

#[tokio::test]
async fn a_panicking_handler_is_retried_and_the_pool_keeps_running() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();
    FlakyOnce {
        key: 1,
        panic: true,
    }
    .enqueue_in(&queue)
    .await;
    enqueue_all(&queue, (10..20).map(work)).await;
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(stats.retried, 1);
    assert_eq!(stats.succeeded, 11);
    let attempts: Vec<u32> = ledger
        .runs
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.key == 1)
        .map(|r| r.attempt)
        .collect();
    assert_eq!(attempts, [1, 2]);
}

#[tokio::test]
async fn an_attempt_past_its_timeout_fails_and_is_retried() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();
    Slow { key: 3 }.enqueue_in(&queue).await;
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.retried, stats.succeeded), (1, 1));
    // the timed-out attempt never finished (its future was dropped); the retry did
    let attempts: Vec<u32> = ledger
        .runs
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.attempt)
        .collect();
    assert_eq!(attempts, [2]);
}

#[tokio::test]
async fn a_bad_payload_is_dead_at_once_and_an_unknown_kind_after_its_attempts() {
    let queue = TestQueue::new().await;
    let transport = &queue.transport;
    let bad = transport
        .publish(
            &queue.pool,
            &OutgoingMessage::new("g1", "work", r#"{"wrong":true}"#),
        )
        .await
        .unwrap();
    let unknown = transport
        .publish(
            &queue.pool,
            &OutgoingMessage::new("g2", "nobody_knows", "{}"),
        )
        .await
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger)
        .max_attempts(2)
        .backoff(Backoff::fixed(Duration::from_millis(50)))
        .build()
        .unwrap()
        .start();
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    handle.shutdown().await.unwrap();
    assert!(ledger.runs.lock().unwrap().is_empty());

    let dead = DeadLetters::new(queue.schema.clone());
    let letters = dead
        .list(&queue.pool, &DeadLetterQuery::default())
        .await
        .unwrap();
    assert_eq!(letters.len(), 2);
    let bad = letters.iter().find(|l| l.id == bad).unwrap();
    assert_eq!(
        bad.attempts, 1,
        "a payload that cannot decode is not retried"
    );
    assert!(
        bad.last_error
            .starts_with("payload does not decode as job kind \"work\""),
        "{}",
        bad.last_error
    );
    assert_eq!(bad.payload, r#"{"wrong":true}"#, "payload kept as it was");
    let unknown = letters.iter().find(|l| l.id == unknown).unwrap();
    assert_eq!(
        unknown.attempts, 2,
        "an unknown kind is retried (rolling deploys)"
    );
    assert!(
        unknown
            .last_error
            .starts_with("no handler registered for job kind \"nobody_knows\""),
        "{}",
        unknown.last_error
    );
}

#[tokio::test]
async fn an_idle_worker_is_woken_by_notify_not_by_polling() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .unwrap()
        .start();
    // let the worker go idle (its first claim finds nothing)
    tokio::time::sleep(Duration::from_millis(300)).await;
    work(1).enqueue_in(&queue).await;
    wait_for(Duration::from_secs(10), || {
        !ledger.runs.lock().unwrap().is_empty()
    })
    .await;

    // kill the LISTEN connection: the listener reconnects and wakes keep working
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE query ILIKE 'LISTEN %' AND query LIKE '%' || $1 || '%'",
    )
    .bind(queue.schema.channel())
    .fetch_one(&queue.pool)
    .await
    .unwrap();
    assert_eq!(killed, 1, "found the listener's connection");
    tokio::time::sleep(Duration::from_millis(500)).await;
    work(2).enqueue_in(&queue).await;
    wait_for(Duration::from_secs(10), || {
        ledger.runs.lock().unwrap().len() == 2
    })
    .await;
    handle.shutdown().await.unwrap();
}

/// Runs 3× its lease; the heartbeat must keep it single across two pools.
#[derive(Serialize, Deserialize)]
struct Long {
    key: u64,
}

impl Job for Long {
    const KIND: &'static str = "long";
}

impl Handler<Shared> for Long {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state()
            .record(
                &ctx,
                self.key,
                tokio::time::sleep(Duration::from_millis(1500)),
            )
            .await;
        Ok(())
    }
}

#[tokio::test]
async fn the_heartbeat_keeps_a_job_longer_than_its_lease_single() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let start = |n| {
        Worker::builder(
            queue.pool.clone(),
            Shared {
                worker: n,
                ledger: Arc::clone(&ledger),
            },
        )
        .schema(queue.schema.clone())
        .register::<Long>()
        .lease(Duration::from_millis(500))
        .heartbeat_interval(Duration::from_millis(100))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start()
    };
    let (a, b) = (start(0), start(1));
    Long { key: 1 }.enqueue_in(&queue).await;
    wait_until_idle(&queue, Duration::from_secs(20)).await;
    let (sa, sb) = (a.shutdown().await.unwrap(), b.shutdown().await.unwrap());
    assert_eq!(ledger.runs.lock().unwrap().len(), 1, "ran once");
    assert_eq!(sa.leases_lost + sb.leases_lost, 0);
}

/// Extension trait of the tests: enqueue into the test's schema.
trait EnqueueIn: Job + Sized {
    async fn enqueue_in(self, queue: &TestQueue) -> harel_jobs::JobId {
        harel_jobs::Enqueue::new(self, &queue.pool)
            .schema(&queue.schema)
            .await
            .unwrap()
    }
}

impl<J: Job> EnqueueIn for J {}

#[tokio::test]
async fn a_retry_starts_when_its_backoff_ends_without_waiting_for_a_poll() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .unwrap()
        .start();
    FlakyOnce {
        key: 1,
        panic: false,
    }
    .enqueue_in(&queue)
    .await;
    // with an hour between polls, only the worker's own wake-up at the end of the
    // backoff can start the retry within this limit
    wait_until_idle(&queue, Duration::from_secs(20)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!((stats.retried, stats.succeeded), (1, 1));
}

/// Snoozes twice (100 ms each), then succeeds: snoozes use no attempt.
#[derive(Serialize, Deserialize)]
struct Sleepy {
    key: u64,
}

impl Job for Sleepy {
    const KIND: &'static str = "sleepy";
    fn options() -> JobOptions {
        JobOptions::new().max_attempts(1)
    }
}

impl Handler<Shared> for Sleepy {
    async fn handle(self, ctx: JobContext<Shared>) -> JobResult {
        ctx.state().record(&ctx, self.key, async {}).await;
        let runs = ctx.state().ledger.runs.lock().unwrap().len();
        if runs < 3 {
            return Err(JobError::snooze(Duration::from_millis(100)));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_snooze_runs_the_job_again_without_using_an_attempt() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger)
        .register::<Sleepy>()
        .build()
        .unwrap()
        .start();
    Sleepy { key: 1 }.enqueue_in(&queue).await;
    wait_until_idle(&queue, Duration::from_secs(20)).await;
    let stats = handle.shutdown().await.unwrap();
    // max_attempts is 1: had a snooze counted, the second run would have been the last
    assert_eq!(
        (stats.snoozed, stats.succeeded, stats.dead_lettered),
        (2, 1, 0)
    );
    let attempts: Vec<u32> = ledger
        .runs
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.attempt)
        .collect();
    assert_eq!(attempts, [1, 1, 1]);
}

#[tokio::test]
async fn a_pool_with_a_priority_floor_takes_nothing_below_it() {
    let queue = TestQueue::new().await;
    harel_jobs::Enqueue::new(work(1), &queue.pool)
        .schema(&queue.schema)
        .priority(1)
        .await
        .unwrap();
    harel_jobs::Enqueue::new(work(2), &queue.pool)
        .schema(&queue.schema)
        .priority(3)
        .await
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger)
        .min_priority(harel_jobs::Priority::new(3).unwrap())
        .build()
        .unwrap()
        .start();
    wait_for(Duration::from_secs(10), || {
        !ledger.runs.lock().unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.shutdown().await.unwrap();
    let keys: Vec<u64> = ledger.runs.lock().unwrap().iter().map(|r| r.key).collect();
    assert_eq!(keys, [2], "only the priority-3 job ran");
    assert_eq!(queue.count("jobs").await, 1, "the priority-1 job waits");
}

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
    let queue = TestQueue::new().await;
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
    enqueue_all(&queue, (0..3).map(|key| HogsConnection { key })).await;
    wait_for(Duration::from_secs(10), || {
        ledger.running_groups.lock().unwrap().len() == 3
    })
    .await;
    // worker 1 would take over any lease that lapses
    let rival = start(
        1,
        harel_jobs_suite::pool_with(&harel_jobs_suite::database_url(), 5).await,
    );
    wait_until_idle(&queue, Duration::from_secs(30)).await;
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
    let queue = TestQueue::new().await;
    // the role may hold 3 connections, and the worker's pool opens all 3 first: every
    // connection the worker opens for itself (claims, outcomes, LISTEN) is refused
    let role = harel_jobs_suite::TestRole::with_connection_limit(&queue, 3).await;
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
    enqueue_all(&queue, (0..50).map(work)).await;
    wait_until_idle(&queue, Duration::from_secs(30)).await;
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

#[tokio::test]
async fn a_job_whose_workers_keep_vanishing_is_dead_after_its_attempts_without_running_again() {
    let queue = TestQueue::new().await;
    let id = AlwaysFails { key: 9 }.enqueue_in(&queue).await; // max_attempts = 2
    for _ in 0..2 {
        // a worker claims it and dies: the attempt counts
        let claimed = queue
            .transport
            .claim(&queue.pool, &ClaimRequest::new(Duration::from_millis(200)))
            .await
            .unwrap()
            .expect("claimable again once the lease lapsed");
        assert_eq!(claimed.lease.id, id);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger).build().unwrap().start();
    wait_until_idle(&queue, Duration::from_secs(10)).await;
    let stats = handle.shutdown().await.unwrap();
    assert_eq!(stats.dead_lettered, 1);
    assert!(
        ledger.runs.lock().unwrap().is_empty(),
        "not run a third time"
    );
    let letter = DeadLetters::new(queue.schema.clone())
        .get(&queue.pool, id)
        .await
        .unwrap()
        .expect("dead letter");
    assert_eq!(letter.attempts, 2, "the attempts made, not the claims");
    assert!(
        letter
            .last_error
            .contains("attempt 2 of 2 never reported a result"),
        "{}",
        letter.last_error
    );
}

/// Where the server's autovacuum is off, the pool vacuums the queue tables itself. On a
/// private cluster started with `autovacuum = off`: the machine's server may have it either
/// way (PostgreSQL's default is on), and the test must run on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_autovacuum_off_the_pool_vacuums_the_queue_tables_itself() {
    let cluster = Cluster::start(ClusterOptions {
        settings: vec!["autovacuum = off".to_owned()],
        ..ClusterOptions::default()
    });
    let queue = TestQueue::new_at(&cluster.url("postgres")).await;
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&queue.pool)
        .await
        .unwrap();
    assert_eq!(autovacuum, "off", "the private cluster's setting");
    let vacuums = |table: &'static str| {
        let pool = queue.pool.clone();
        let schema = queue.schema.name().to_owned();
        async move {
            let count: i64 = sqlx::query_scalar(
                "SELECT COALESCE(sum(vacuum_count), 0)::bigint FROM pg_stat_user_tables
                  WHERE schemaname = $1 AND relname = $2",
            )
            .bind(schema)
            .bind(table)
            .fetch_one(&pool)
            .await
            .unwrap();
            count
        }
    };
    assert_eq!(vacuums("transport_groups").await, 0);
    // the receipts of outcome batches churn too (one row per batch): 3,000 dead ones, as a
    // long day of batches leaves behind
    for statement in [
        "INSERT INTO @schema@.settle_receipts (receipt, applied) \
         SELECT gen_random_uuid(), '{}' FROM generate_series(1, 3000)",
        "DELETE FROM @schema@.settle_receipts",
    ] {
        sqlx::query(queue.sql(statement))
            .execute(&queue.pool)
            .await
            .unwrap();
    }
    let ledger = Arc::new(Ledger::default());
    let handle = builder(&queue, 0, &ledger)
        .concurrency(32)
        .build()
        .unwrap()
        .start();
    enqueue_all(&queue, (0..5000).map(work)).await;
    wait_until_idle(&queue, Duration::from_secs(60)).await;
    // every 5 s the pool reads the dead-row counts: 5,000 drained groups are well past the
    // threshold
    let started = Instant::now();
    for table in ["transport_groups", "settle_receipts"] {
        while vacuums(table).await == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{table} was never vacuumed"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    handle.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_jobs_are_not_hoarded_by_one_worker() {
    let queue = TestQueue::new().await;
    let ledger = Arc::new(Ledger::default());
    let handles: Vec<_> = (0..2)
        .map(|n| {
            builder(&queue, n, &ledger)
                .concurrency(1)
                .build()
                .unwrap()
                .start()
        })
        .collect();
    enqueue_all(
        &queue,
        (0..6).map(|key| Work {
            sleep_ms: 300,
            ..work(key)
        }),
    )
    .await;
    wait_until_idle(&queue, Duration::from_secs(30)).await;
    for handle in handles {
        handle.shutdown().await.unwrap();
    }
    let runs = ledger.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 6);
    let first = runs.iter().filter(|r| r.worker == 0).count();
    assert!(
        (2..=4).contains(&first),
        "a slow worker claims only what it can run: {first} of 6 on worker 0"
    );
}

/// A job whose transaction commits long after its enqueue statement, while other jobs flow
/// (so the claims' floor moves past it): the pool runs it promptly, woken by its NOTIFY,
/// whose position the next claim takes as a hint; and without LISTEN, the maintenance
/// task's sweep (about once a second) brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_committed_long_after_its_enqueue_runs_with_or_without_listen() {
    for listen in [true, false] {
        let queue = TestQueue::new().await;
        let ledger = Arc::new(Ledger::default());
        let handle = builder(&queue, 0, &ledger)
            .listen(listen)
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap()
            .start();
        let mut late = queue.pool.begin().await.unwrap();
        harel_jobs::Enqueue::new(work(1_000), &mut *late)
            .schema(&queue.schema)
            .await
            .unwrap();
        for key in 0..10 {
            work(key).enqueue_in(&queue).await;
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        wait_for(Duration::from_secs(10), || {
            ledger.runs.lock().unwrap().len() == 10
        })
        .await;
        late.commit().await.unwrap();
        wait_for(Duration::from_secs(10), || {
            ledger.runs.lock().unwrap().len() == 11
        })
        .await;
        handle.shutdown().await.unwrap();
    }
}
