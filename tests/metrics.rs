//! The metrics of the `metrics` feature, read back from a `DebuggingRecorder` installed for
//! each test alone (a thread-local recorder on a current-thread runtime, where the pool's
//! tasks run too): counters by kind and queue, the histograms, the depth gauges (the
//! schema's and each queue's), and that one worker per schema samples them.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::telemetry::{
    ALL, CANCELLED, CLAIM_DURATION, CLAIMED, DEAD_LETTERED, DEAD_LETTERS, DEPTH, ENQUEUED, GROUPS,
    HANDLER_DURATION, LEASE_LOST, MetricKind, QUEUE_DEPTH, QUEUE_LAG, RETRIED, SETTLE_DURATION,
    START_LATENCY, SUCCEEDED,
};
use harel_jobs::{
    Backoff, CancelOutcome, Client, JobContext, JobError, JobResult, Priority, WorkerHandle, job,
};
use harel_jobs_suite::SuiteSchema;
use metrics_util::MetricKind as RecordedKind;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tokio::sync::Notify;

#[derive(Default)]
struct App {
    flaky_runs: AtomicU32,
    started: Notify,
}

#[job]
async fn good(_ctx: JobContext<Arc<App>>, n: u32) {
    let _ = n;
}

/// Fails its first attempt.
#[job(max_attempts = 3)]
async fn flaky(ctx: JobContext<Arc<App>>) -> JobResult {
    if ctx.state().flaky_runs.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(JobError::retry("first attempt fails"));
    }
    Ok(())
}

/// Fails every attempt: a dead letter after two.
#[job(max_attempts = 2)]
async fn doomed(_ctx: JobContext<Arc<App>>) -> JobResult {
    Err(JobError::retry("always fails"))
}

/// Runs until told to stop (its cancel, or its lease lost).
#[job]
async fn waits(ctx: JobContext<Arc<App>>) {
    ctx.state().started.notify_one();
    tokio::time::timeout(Duration::from_secs(30), ctx.cancelled())
        .await
        .expect("told to stop");
}

/// What the recorder recorded so far, by metric name and labels (`kind=…,queue=…`, or
/// `schema=…,state=…` and `schema=…,queue=…,state=…` for the gauges). A snapshot drains the
/// recorder's counters and histograms, so [`add`](Self::add) sums and appends them here; it
/// resets its gauges to 0 too, so a later 0 (nothing set since) keeps the value seen
/// before.
#[derive(Default)]
struct Seen(HashMap<(String, String), DebugValue>);

impl Seen {
    fn take(snapshotter: &Snapshotter) -> Self {
        let mut seen = Self::default();
        seen.add(snapshotter);
        seen
    }

    fn add(&mut self, snapshotter: &Snapshotter) -> &Self {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            let entry = (key.name().to_owned(), labels.join(","));
            match (self.0.get_mut(&entry), value) {
                (Some(DebugValue::Counter(sum)), DebugValue::Counter(more)) => *sum += more,
                (Some(DebugValue::Histogram(all)), DebugValue::Histogram(more)) => all.extend(more),
                (Some(DebugValue::Gauge(_)), DebugValue::Gauge(value)) if *value == 0.0 => {}
                (_, value) => {
                    self.0.insert(entry, value);
                }
            }
        }
        self
    }

    /// A counter of jobs of `kind` in the default queue.
    fn counter(&self, name: &str, kind: &str) -> u64 {
        self.counter_in(name, kind, "default")
    }

    fn counter_in(&self, name: &str, kind: &str, queue: &str) -> u64 {
        match self
            .0
            .get(&(name.to_owned(), format!("kind={kind},queue={queue}")))
        {
            Some(DebugValue::Counter(value)) => *value,
            None => 0,
            other => panic!("{name} {kind} {queue}: {other:?}"),
        }
    }

    fn histogram(&self, name: &str, labels: &str) -> Vec<f64> {
        match self.0.get(&(name.to_owned(), labels.to_owned())) {
            Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
            None => Vec::new(),
            other => panic!("{name} {labels}: {other:?}"),
        }
    }

    fn gauge(&self, name: &str, labels: &str) -> Option<f64> {
        match self.0.get(&(name.to_owned(), labels.to_owned())) {
            Some(DebugValue::Gauge(value)) => Some(value.into_inner()),
            None => None,
            other => panic!("{name} {labels}: {other:?}"),
        }
    }
}

fn start(queue: &SuiteSchema, app: &Arc<App>) -> WorkerHandle {
    Client::with_schema(queue.pool.clone(), queue.schema.clone())
        .worker(Arc::clone(app))
        .register::<Good>()
        .register::<Flaky>()
        .register::<Doomed>()
        .register::<Waits>()
        .backoff(Backoff::fixed(Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .lease(Duration::from_secs(3))
        .heartbeat_interval(Duration::from_millis(100))
        .build()
        .expect("valid worker")
        .start()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_pool_counts_by_kind_and_times_its_round_trips() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    for n in 0..3 {
        jobs.enqueue(&queue.pool, Good { n }).await.unwrap();
    }
    let mut batch = jobs.batch();
    batch
        .push(Good { n: 3 })
        .unwrap()
        .push(Good { n: 4 })
        .unwrap();
    batch.enqueue(&queue.pool).await.unwrap();
    jobs.enqueue(&queue.pool, Flaky {}).await.unwrap();
    jobs.enqueue(&queue.pool, Doomed {}).await.unwrap();

    let app = Arc::new(App::default());
    let handle = start(&queue, &app);
    until("every outcome", || {
        let stats = handle.stats();
        stats.succeeded == 6 && stats.dead_lettered == 1
    })
    .await;
    // the depth sampler's first sample, taken when the pool started
    let mut seen = Seen::default();
    let depth = format!("schema={},state=queued", queue.schema.name());
    until("the depth gauges", || {
        seen.add(&snapshotter).gauge(DEPTH, &depth).is_some()
    })
    .await;
    handle.shutdown().await.unwrap();
    seen.add(&snapshotter);
    let counts = |kind| {
        [ENQUEUED, CLAIMED, SUCCEEDED, RETRIED, DEAD_LETTERED].map(|name| seen.counter(name, kind))
    };
    assert_eq!(counts("good"), [5, 5, 5, 0, 0]);
    assert_eq!(counts("flaky"), [1, 2, 1, 1, 0]);
    assert_eq!(counts("doomed"), [1, 2, 0, 1, 1]);
    assert_eq!(
        seen.counter(CANCELLED, "good") + seen.counter(LEASE_LOST, "good"),
        0
    );

    assert_eq!(
        seen.histogram(HANDLER_DURATION, "kind=good,queue=default")
            .len(),
        5
    );
    assert_eq!(
        seen.histogram(HANDLER_DURATION, "kind=doomed,queue=default")
            .len(),
        2
    );
    // first attempts only
    let latency = seen.histogram(START_LATENCY, "kind=flaky,queue=default");
    assert_eq!(latency.len(), 1);
    assert!(latency[0] >= 0.0 && latency[0] < 20.0, "{latency:?}");
    assert!(!seen.histogram(CLAIM_DURATION, "").is_empty());
    assert!(!seen.histogram(SETTLE_DURATION, "").is_empty());

    // sampled when the pool started, with the 7 jobs queued (the fetcher may have taken
    // some by then, but none was settled: settling waits for the claim's commit)
    let schema = queue.schema.name();
    for (name, state) in [(DEPTH, "queued"), (GROUPS, "all"), (GROUPS, "claimable")] {
        let value = seen.gauge(name, &format!("schema={schema},state={state}"));
        assert!(
            value.is_some_and(|v| (0.0..=7.0).contains(&v)),
            "{name} {state}: {value:?}"
        );
    }
    let dead = seen.gauge(DEAD_LETTERS, &format!("schema={schema}"));
    assert!(dead.is_some_and(|v| (0.0..=1.0).contains(&v)), "{dead:?}");
    // dead letters are a gauge of their own, not a state of the depth
    assert_eq!(
        seen.gauge(DEPTH, &format!("schema={schema},state=dead")),
        None
    );
}

/// Every metric the pool emits is described (an exporter's `# HELP`), with its unit, and
/// `telemetry::ALL` lists each one under the kind it is emitted as.
#[tokio::test]
async fn every_metric_is_described() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    jobs.enqueue(&queue.pool, Good { n: 1 }).await.unwrap();
    jobs.enqueue(&queue.pool, Doomed {}).await.unwrap();
    let app = Arc::new(App::default());
    let handle = start(&queue, &app);
    until("the outcomes", || {
        let stats = handle.stats();
        stats.succeeded == 1 && stats.dead_lettered == 1
    })
    .await;
    let mut recorded = HashMap::new();
    let lag = format!("schema={},queue=default", queue.schema.name());
    let mut lag_seen = false;
    until("the gauges", || {
        for (key, unit, description, value) in snapshotter.snapshot().into_vec() {
            let labels: Vec<String> = key
                .key()
                .labels()
                .map(|label| format!("{}={}", label.key(), label.value()))
                .collect();
            if key.key().name() == QUEUE_LAG && labels.join(",") == lag {
                lag_seen = true;
                // the only job of the queue was claimed at once, or is ready since now
                assert!(matches!(value, DebugValue::Gauge(v) if v.into_inner() < 60.0));
            }
            recorded.insert(key.key().name().to_owned(), (key.kind(), unit, description));
        }
        lag_seen && recorded.contains_key(DEAD_LETTERS)
    })
    .await;
    handle.shutdown().await.unwrap();

    for (name, (kind, unit, description)) in &recorded {
        let &(_, listed) = ALL
            .iter()
            .find(|(listed, _)| listed == name)
            .unwrap_or_else(|| panic!("{name} is not in telemetry::ALL"));
        let expected = match listed {
            MetricKind::Counter => RecordedKind::Counter,
            MetricKind::Gauge => RecordedKind::Gauge,
            MetricKind::Histogram => RecordedKind::Histogram,
            other => panic!("{other:?}"),
        };
        assert_eq!(*kind, expected, "{name}");
        assert!(
            description.as_ref().is_some_and(|d| !d.is_empty()),
            "{name} has no description"
        );
        assert!(unit.is_some(), "{name} has no unit");
    }
    // what this workload emits: all but the cancels, lost leases and snoozes
    for (name, _) in ALL {
        if ![CANCELLED, LEASE_LOST, harel_jobs::telemetry::SNOOZED].contains(name) {
            assert!(recorded.contains_key(*name), "{name} was not emitted");
        }
    }
}

/// The lag gauge: how long a queue's oldest ready job has waited, by the database's clock;
/// it keeps rising for a paused queue, and is 0 for an empty one.
#[tokio::test]
async fn the_lag_gauge_says_how_long_the_oldest_ready_job_waits() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    jobs.create_queue("mail").await.unwrap();
    jobs.pause("mail").await.unwrap();
    jobs.enqueue(&queue.pool, Good { n: 1 })
        .queue("mail")
        .await
        .unwrap();
    // as if it had been ready for an hour (no wall clock in the test)
    sqlx::query(queue.sql(
        "UPDATE @schema@.transport_groups
            SET available_at = statement_timestamp() - interval '1 hour'",
    ))
    .execute(&queue.pool)
    .await
    .unwrap();
    let app = Arc::new(App::default());
    let handle = jobs
        .worker(Arc::clone(&app))
        .register::<Good>()
        .queue("default", 1)
        .queue("mail", 1)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    let schema = queue.schema.name();
    let lag =
        |seen: &Seen, queue: &str| seen.gauge(QUEUE_LAG, &format!("schema={schema},queue={queue}"));
    let mut seen = Seen::default();
    until("the lag gauges", || {
        let seen = seen.add(&snapshotter);
        lag(seen, "mail").is_some()
            && seen
                .gauge(
                    QUEUE_DEPTH,
                    &format!("schema={schema},queue=default,state=ready"),
                )
                .is_some()
    })
    .await;
    handle.shutdown().await.unwrap();
    let mail = lag(&seen, "mail").unwrap_or(0.0);
    assert!(mail >= 3600.0, "mail lag {mail}");
    // the default queue has no job: no lag (0, or not sampled yet)
    assert_eq!(lag(&seen, "default").unwrap_or(0.0), 0.0);
    // the paused queue's job never ran
    assert_eq!(jobs.stats().await.unwrap().jobs.value(), 1);
}

#[tokio::test]
async fn the_depth_gauges_follow_the_queue() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    // below the pool's priority floor: queued, never claimed
    for n in 0..4 {
        jobs.enqueue(&queue.pool, Good { n })
            .priority(Priority::LOWEST.get())
            .await
            .unwrap();
    }
    let app = Arc::new(App::default());
    let handle = Client::with_schema(queue.pool.clone(), queue.schema.clone())
        .worker(Arc::clone(&app))
        .register::<Good>()
        .min_priority(Priority::HIGHEST)
        .build()
        .unwrap()
        .start();
    let schema = queue.schema.name();
    let queue_gauge_key = |state| format!("schema={schema},queue=default,state={state}");
    let mut seen = Seen::default();
    // the default queue's own figures come from a second query of the same sample, set a
    // moment after the schema's: wait for both
    until("the depth gauges", || {
        let seen = seen.add(&snapshotter);
        seen.gauge(DEPTH, &format!("schema={schema},state=queued")) == Some(4.0)
            && seen.gauge(GROUPS, &format!("schema={schema},state=all")) == Some(4.0)
            && seen.gauge(DEAD_LETTERS, &format!("schema={schema}")) == Some(0.0)
            && seen.gauge(QUEUE_DEPTH, &queue_gauge_key("ready")) == Some(4.0)
            && seen
                .gauge(QUEUE_DEPTH, &queue_gauge_key("running"))
                .is_some()
    })
    .await;
    handle.shutdown().await.unwrap();
    assert_eq!(
        seen.gauge(QUEUE_DEPTH, &queue_gauge_key("running")),
        Some(0.0)
    );
}

/// Jobs of a named queue are counted under its name, on the producer's side and the
/// worker's, and its depth has gauges of its own.
#[tokio::test]
async fn named_queues_are_labelled_and_have_their_own_depth() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    for n in 0..2 {
        jobs.enqueue(&queue.pool, Good { n })
            .queue("mail")
            .await
            .unwrap();
    }
    // below the priority floor of the pool below: they stay ready, never claimed
    for n in 0..3 {
        jobs.enqueue(&queue.pool, Good { n })
            .queue("mail")
            .priority(Priority::LOWEST.get())
            .await
            .unwrap();
    }
    jobs.enqueue(&queue.pool, Good { n: 9 })
        .priority(Priority::LOWEST.get())
        .await
        .unwrap();
    let app = Arc::new(App::default());
    let handle = jobs
        .worker(Arc::clone(&app))
        .register::<Good>()
        .queue("default", 2)
        .queue("mail", 2)
        .min_priority(Priority::NORMAL)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    until("the named queue's jobs", || handle.stats().succeeded == 2).await;
    let schema = queue.schema.name();
    let mut seen = Seen::default();
    let gauge = |seen: &Seen, queue: &str, state: &str| {
        seen.gauge(
            QUEUE_DEPTH,
            &format!("schema={schema},queue={queue},state={state}"),
        )
    };
    until("the queues' depth gauges", || {
        let seen = seen.add(&snapshotter);
        gauge(seen, "mail", "ready").is_some() && gauge(seen, "default", "ready").is_some()
    })
    .await;
    handle.shutdown().await.unwrap();
    seen.add(&snapshotter);

    assert_eq!(seen.counter_in(ENQUEUED, "good", "mail"), 5);
    assert_eq!(seen.counter_in(ENQUEUED, "good", "default"), 1);
    for name in [CLAIMED, SUCCEEDED] {
        assert_eq!(seen.counter_in(name, "good", "mail"), 2, "{name}");
        assert_eq!(seen.counter_in(name, "good", "default"), 0, "{name}");
    }
    assert_eq!(
        seen.histogram(HANDLER_DURATION, "kind=good,queue=mail")
            .len(),
        2
    );
    // sampled when the pool started: the two due jobs may have been ready, running or
    // done by then; the three below the floor are ready whatever happened
    let ready = gauge(&seen, "mail", "ready").unwrap_or(-1.0);
    let running = gauge(&seen, "mail", "running").unwrap_or(-1.0);
    assert!((3.0..=5.0).contains(&ready), "ready {ready}");
    assert!((0.0..=2.0).contains(&running), "running {running}");
    assert!(ready + running <= 5.0, "ready {ready}, running {running}");
    assert_eq!(gauge(&seen, "default", "ready"), Some(1.0));
    assert_eq!(gauge(&seen, "default", "running"), Some(0.0));
}

/// The pool holding the depth sampler's election of `queue`, if its lease runs.
async fn sampler(queue: &SuiteSchema) -> Option<uuid::Uuid> {
    sqlx::query_scalar(queue.sql(
        "SELECT holder FROM @schema@.elections
          WHERE name = 'depth' AND held_until > statement_timestamp()",
    ))
    .fetch_optional(&queue.pool)
    .await
    .unwrap()
    .flatten()
}

#[tokio::test]
async fn one_worker_per_schema_samples_the_depth() {
    let queue = SuiteSchema::new().await;
    let app = Arc::new(App::default());
    let first = start(&queue, &app);
    let second = start(&queue, &app);
    let third = start(&queue, &app);
    let deadline = Instant::now() + Duration::from_secs(20);
    let elected = loop {
        if let Some(holder) = sampler(&queue).await {
            break holder;
        }
        assert!(Instant::now() < deadline, "no worker samples the depth");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // the others asked too (each pool asks when it starts), and it stays with the first
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(sampler(&queue).await, Some(elected));
    for handle in [first, second, third] {
        handle.shutdown().await.unwrap();
    }
    // the sampler gives the election up when it stops, not a lease later
    assert_eq!(sampler(&queue).await, None, "shutdown did not give it up");
}

/// A login granted nothing holds the advisory lock the sampler's election used to be (its
/// key is in the crate's source): the gauges are sampled all the same.
#[tokio::test]
async fn a_login_granted_nothing_cannot_stop_the_depth_gauges() {
    use sqlx::Connection;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let queue = SuiteSchema::new().await;
    let role = harel_jobs_suite::TestRole::with_grants(&queue, &[]).await;
    let mut stranger = sqlx::PgConnection::connect(&role.url).await.unwrap();
    let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
        .bind(format!("harel-jobs depth {}", queue.schema.name()))
        .fetch_one(&mut stranger)
        .await
        .unwrap();
    assert!(held);
    let app = Arc::new(App::default());
    let handle = start(&queue, &app);
    let depth = format!("schema={},state=queued", queue.schema.name());
    let mut seen = Seen::default();
    until("the depth gauges", || {
        seen.add(&snapshotter).gauge(DEPTH, &depth).is_some()
    })
    .await;
    handle.shutdown().await.unwrap();
    stranger.close().await.unwrap();
}

#[tokio::test]
async fn cancels_and_lost_leases_are_counted_by_kind() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    let queue = SuiteSchema::new().await;
    let jobs = Client::with_schema(queue.pool.clone(), queue.schema.clone());
    let app = Arc::new(App::default());
    let handle = start(&queue, &app);

    // cancelled while it runs: it ends as cancelled
    let id = jobs.enqueue(&queue.pool, Waits {}).await.unwrap();
    app.started.notified().await;
    assert_eq!(jobs.cancel(id).await.unwrap(), CancelOutcome::Requested);
    until("the cancel", || handle.stats().cancelled == 1).await;

    // its lease taken from under it: the heartbeat finds it lost
    jobs.enqueue(&queue.pool, Waits {}).await.unwrap();
    app.started.notified().await;
    sqlx::query(queue.sql("UPDATE @schema@.transport_groups SET locked_by = gen_random_uuid() WHERE locked_by IS NOT NULL"))
        .execute(&queue.pool)
        .await
        .unwrap();
    until("the lost lease", || handle.stats().leases_lost == 1).await;
    handle.shutdown().await.unwrap();

    let seen = Seen::take(&snapshotter);
    assert_eq!(seen.counter(CANCELLED, "waits"), 1);
    assert_eq!(seen.counter(LEASE_LOST, "waits"), 1);
    assert_eq!(seen.counter(CLAIMED, "waits"), 2);
}
