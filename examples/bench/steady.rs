//! Scenario 4, steady state: producers enqueue at a fixed offered rate while the worker pool
//! runs; the enqueue→handler-start latency (the LISTEN/NOTIFY wake-up path under a quiet
//! pool, claim batching under load) and the throughput.
//!
//! Each job carries the `SystemTime` (µs) taken just before its enqueue round trip; its
//! handler subtracts it from its own start time (one process, one clock). Producers are
//! open-loop: each sends what is due by its schedule, one job per transaction
//! (`Enqueue`), or the jobs that fell due during the previous round trip in one `JobBatch`
//! when it runs behind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::{Enqueue, JobBatch, Schema};
use sqlx::PgPool;
use sqlx::postgres::PgListener;

use crate::db;
use crate::jobs::{Probe, Stamped, now_us};
use crate::queue::{finish, reset, worker};
use crate::report::{Target, quantile};
use crate::{Ctx, Res, bail};

struct Case {
    name: &'static str,
    rate: f64,
    producers: usize,
    /// The worker's sessions with `synchronous_commit=off` (claims and acks do not wait
    /// for the WAL flush).
    worker_async_commit: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "steady_idle50",
        rate: 50.0,
        producers: 1,
        worker_async_commit: false,
    },
    Case {
        name: "steady_idle50_worker_async_commit",
        rate: 50.0,
        producers: 1,
        worker_async_commit: true,
    },
    Case {
        name: "steady_2000",
        rate: 2_000.0,
        producers: 4,
        worker_async_commit: false,
    },
    Case {
        name: "steady_10000",
        rate: 10_000.0,
        producers: 4,
        worker_async_commit: false,
    },
];

/// The worker pool's concurrency in this scenario.
const CONCURRENCY: usize = 64;

struct SteadyRun {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    offered: f64,
    handled: f64,
    samples: usize,
    /// Median duration of the enqueue round trip (transaction committed).
    enqueue_rtt_p50_ms: f64,
    /// Idle case: median from enqueue to the NOTIFY reaching a listener of our own.
    notify_p50_ms: Option<f64>,
    /// Time from the producers' end to the last job's start.
    backlog_drained_s: f64,
}

/// (enqueue instant in µs since the epoch, its round trip in µs), per producer round trip.
pub type RoundTrips = Arc<Mutex<Vec<(u64, u64)>>>;

/// One producer: sends `rate` jobs/s from `start` until `end`, each job stamped with its
/// enqueue time ([`Stamped`]). When it runs behind, it sends the jobs that fell due in one
/// `JobBatch` of at most `max_batch` (1: only single-job `Enqueue`s, one after another until
/// it has caught up). Records each round trip in `round_trips` if given.
pub async fn produce(
    pool: PgPool,
    rate: f64,
    start: Instant,
    end: Instant,
    published: Arc<AtomicU64>,
    round_trips: Option<RoundTrips>,
    max_batch: u64,
) -> Res<()> {
    tokio::time::sleep_until(start.into()).await;
    let mut sent = 0u64;
    loop {
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        let due = (now.duration_since(start).as_secs_f64() * rate) as u64 + 1;
        if due <= sent {
            let next = start + Duration::from_secs_f64(sent as f64 / rate);
            tokio::time::sleep_until(next.min(end).into()).await;
            continue;
        }
        let count = (due - sent).min(max_batch);
        let at_us = now_us();
        if count == 1 {
            Enqueue::new(Stamped { at_us }, &pool).await?;
        } else {
            let mut batch = JobBatch::new();
            for _ in 0..count {
                batch.push(Stamped { at_us })?;
            }
            batch.enqueue(&pool).await?;
        }
        if let Some(round_trips) = &round_trips {
            round_trips
                .lock()
                .unwrap()
                .push((at_us, now_us().saturating_sub(at_us)));
        }
        sent += count;
        published.fetch_add(count, Ordering::Relaxed);
    }
}

async fn measure(
    ctx: &Ctx,
    worker_pool: &PgPool,
    producer_pool: &PgPool,
    case: &Case,
    warmup: Duration,
    duration: Duration,
) -> Res<SteadyRun> {
    reset(&ctx.pool).await?;
    let probe = Probe::new();
    probe.record.store(true, Ordering::Relaxed);
    let handle = worker(worker_pool, probe.clone(), CONCURRENCY)?.start();
    // let the pool settle: LISTEN connected, first (empty) claim done
    tokio::time::sleep(Duration::from_millis(500)).await;

    let start = Instant::now();
    let window_start = start + warmup;
    let window_end = window_start + duration;
    let start_us = now_us();
    let window_start_us = start_us + warmup.as_micros() as u64;
    let window_end_us = window_start_us + duration.as_micros() as u64;
    let published = Arc::new(AtomicU64::new(0));
    let round_trips = Arc::new(Mutex::new(Vec::new()));
    // in the idle case, a listener of our own times the NOTIFY's arrival
    let diagnose = case.rate < 100.0;
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let listener = if diagnose {
        let mut listener = PgListener::connect(&ctx.url).await?;
        listener.listen(&Schema::default().channel()).await?;
        let arrivals = Arc::clone(&arrivals);
        Some(tokio::spawn(async move {
            while let Ok(Some(_)) = listener.try_recv().await {
                arrivals.lock().unwrap().push(now_us());
            }
        }))
    } else {
        None
    };
    let mut producers = Vec::new();
    let per_producer = case.rate / case.producers as f64;
    for i in 0..case.producers {
        // stagger the producers so their schedules interleave
        let offset = Duration::from_secs_f64(i as f64 / case.rate);
        producers.push(tokio::spawn(produce(
            producer_pool.clone(),
            per_producer,
            start + offset,
            window_end,
            Arc::clone(&published),
            Some(Arc::clone(&round_trips)),
            1_000,
        )));
    }
    tokio::time::sleep_until(window_start.into()).await;
    let handled_before = probe.started();
    tokio::time::sleep_until(window_end.into()).await;
    let handled_in_window = probe.started() - handled_before;
    for producer in producers {
        producer.await??;
    }
    let total = published.load(Ordering::Relaxed);
    let backlog_drained_s = finish(&ctx.pool, handle, &probe, total, case.name)
        .await?
        .as_secs_f64();

    let delays = std::mem::take(&mut *probe.delays.lock().unwrap());
    let mut window: Vec<f64> = delays
        .iter()
        .filter(|(at, _)| *at >= window_start_us && *at < window_end_us)
        .map(|(_, delay)| *delay as f64 / 1000.0)
        .collect();
    if window.is_empty() {
        bail!("steady: no job enqueued in the measurement window");
    }
    window.sort_by(f64::total_cmp);
    let seconds = duration.as_secs_f64();
    if let Some(listener) = listener {
        listener.abort();
    }
    let in_window = |at: u64| at >= window_start_us && at < window_end_us;
    let mut rtts: Vec<f64> = round_trips
        .lock()
        .unwrap()
        .iter()
        .filter(|(at, _)| in_window(*at))
        .map(|(_, rtt)| *rtt as f64 / 1000.0)
        .collect();
    rtts.sort_by(f64::total_cmp);
    let notify = diagnose.then(|| {
        let mut arrivals = arrivals.lock().unwrap().clone();
        arrivals.sort_unstable();
        let mut delays: Vec<f64> = delays
            .iter()
            .filter(|(at, _)| in_window(*at))
            .filter_map(|(at, _)| {
                let i = arrivals.partition_point(|t| t < at);
                arrivals.get(i).map(|t| (t - at) as f64 / 1000.0)
            })
            .collect();
        delays.sort_by(f64::total_cmp);
        quantile(&delays, 0.5)
    });
    Ok(SteadyRun {
        p50_ms: quantile(&window, 0.50),
        p99_ms: quantile(&window, 0.99),
        max_ms: *window.last().unwrap_or(&f64::NAN),
        offered: window.len() as f64 / seconds,
        handled: handled_in_window as f64 / seconds,
        samples: window.len(),
        enqueue_rtt_p50_ms: quantile(&rtts, 0.5),
        notify_p50_ms: notify,
        backlog_drained_s,
    })
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let warmup = Duration::from_secs(1);
    let duration = Duration::from_secs(ctx.size(10, 2));
    for case in CASES {
        let settings: &[(&str, &str)] = if case.worker_async_commit {
            &[("synchronous_commit", "off")]
        } else {
            &[]
        };
        let worker_pool = db::pool(&ctx.url, 8, settings).await?;
        let producer_pool = db::pool(&ctx.url, 8, &[]).await?;
        // warm-up run, not measured
        let pools = (&worker_pool, &producer_pool);
        measure(ctx, pools.0, pools.1, case, warmup, Duration::from_secs(1)).await?;
        let mut runs = Vec::new();
        for _ in 0..ctx.runs {
            runs.push(measure(ctx, pools.0, pools.1, case, warmup, duration).await?);
        }
        worker_pool.close().await;
        producer_pool.close().await;
        let collect = |f: fn(&SteadyRun) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let samples: usize = runs.iter().map(|r| r.samples).sum();
        let idle = case.rate < 100.0 && !case.worker_async_commit;
        let extra = format!(
            "offered_jobs_s={:.0} concurrency={CONCURRENCY} producers={} window_s={} samples={samples}{}",
            case.rate,
            case.producers,
            duration.as_secs(),
            if case.worker_async_commit {
                " label=\"diagnostic: the worker's sessions with synchronous_commit=off\""
            } else {
                ""
            }
        );
        ctx.report.figure(
            format!("{}_latency_p50", case.name),
            "ms",
            &collect(|r| r.p50_ms),
            idle.then_some(Target::AtMost(2.0)),
            extra.clone(),
        );
        ctx.report.figure(
            format!("{}_latency_p99", case.name),
            "ms",
            &collect(|r| r.p99_ms),
            idle.then_some(Target::AtMost(20.0)),
            extra.clone(),
        );
        ctx.report.figure(
            format!("{}_latency_max", case.name),
            "ms",
            &collect(|r| r.max_ms),
            None,
            extra.clone(),
        );
        ctx.report.figure(
            format!("{}_enqueued", case.name),
            "jobs/s",
            &collect(|r| r.offered),
            None,
            extra.clone(),
        );
        ctx.report.figure(
            format!("{}_handled", case.name),
            "jobs/s",
            &collect(|r| r.handled),
            None,
            extra.clone(),
        );
        ctx.report.figure(
            format!("{}_enqueue_rtt_p50", case.name),
            "ms",
            &collect(|r| r.enqueue_rtt_p50_ms),
            None,
            "diagnostic: the producer's enqueue round trip (until committed)",
        );
        if runs.iter().all(|r| r.notify_p50_ms.is_some()) {
            ctx.report.figure(
                format!("{}_notify_p50", case.name),
                "ms",
                &collect(|r| r.notify_p50_ms.unwrap_or(f64::NAN)),
                None,
                "diagnostic: enqueue to the NOTIFY reaching a listener of the bench's own",
            );
        }
        println!(
            "# {}: after the producers stopped, the last job started {} s later (per run)",
            case.name,
            runs.iter()
                .map(|r| format!("{:.1}", r.backlog_drained_s))
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    Ok(())
}
