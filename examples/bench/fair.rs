//! The `fair` scenario: how one queue shares its workers between tenants, without fairness
//! keys (every job under the shared key: round-robin between groups, as before keys
//! existed) and with one key per tenant at weights 1:1:1 and 3:1:1, interleaved in each run.
//!
//! Three tenants on one queue, a pool at concurrency 16 whose handlers work 20 ms (so about
//! 800 starts/s): A floods 100,000 jobs over 10,000 groups, then B adds 1,000 jobs over 10
//! groups (both enqueued before the pool starts), and C enqueues 50 jobs/s, one job per
//! transaction, while the pool runs. Every start is recorded by its handler (tenant, time,
//! delay since its enqueue). Reported: each tenant's share of the starts per 10-second
//! window, and C's enqueue→start p50 / p99 beside the flood and alone (the same producer and
//! pool on an empty queue).
//!
//! The weight shares (work-conserving): C takes its 50/s (under its share), A and B split
//! the rest by weight, B being able to use up to 10 slots (500/s): about 0.47 / 0.47 / 0.06
//! at 1:1:1, 0.70 / 0.23 / 0.06 at 3:1:1.

use std::time::{Duration, Instant};

use harel_jobs::{Enqueue, EnqueueOptions, JobBatch};
use sqlx::PgPool;

use crate::jobs::{Probe, Tenant, now_us};
use crate::queue::{reset, worker};
use crate::report::quantile;
use crate::{Ctx, Res, bail};

const CONCURRENCY: usize = 16;
const WORK: Duration = Duration::from_millis(20);
const C_RATE: f64 = 50.0;
const NAMES: [&str; 3] = ["a", "b", "c"];

/// How the tenants' jobs are keyed.
#[derive(Clone, Copy)]
enum Mode {
    /// No fairness key: every job under the shared key.
    NoKey,
    /// One key per tenant, with these weights (A, B, C).
    Keys([u32; 3]),
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::NoKey => "no key",
            Mode::Keys([1, 1, 1]) => "keys 1:1:1",
            Mode::Keys(_) => "keys 3:1:1",
        }
    }

    /// The figures' prefix.
    fn figure(self) -> &'static str {
        match self {
            Mode::NoKey => "fair",
            Mode::Keys([1, 1, 1]) => "fair_keys",
            Mode::Keys(_) => "fair_weighted",
        }
    }

    /// `tenant`'s fairness key, if any.
    fn key(self, tenant: u8) -> Option<&'static str> {
        match self {
            Mode::NoKey => None,
            Mode::Keys(_) => Some(NAMES[tenant as usize]),
        }
    }

    /// Each tenant's share of the starts by weight, work-conserving: C's demand (50/s of
    /// about 800/s) is under any share, so it takes it; A and B split the rest.
    fn expected(self) -> Option<[f64; 3]> {
        let Mode::Keys([a, b, _]) = self else {
            return None;
        };
        let c = C_RATE / (CONCURRENCY as f64 * 1000.0 / WORK.as_millis() as f64);
        let rest = 1.0 - c;
        let (a, b) = (f64::from(a), f64::from(b));
        Some([rest * a / (a + b), rest * b / (a + b), c])
    }
}

const MODES: [Mode; 3] = [Mode::NoKey, Mode::Keys([1, 1, 1]), Mode::Keys([3, 1, 1])];

/// A's jobs and groups, and B's jobs (over 10 groups), at this size.
fn tenants(ctx: &Ctx) -> (u64, u64, u64) {
    (
        ctx.size(100_000, 20_000),
        ctx.size(10_000, 2_000),
        ctx.size(1_000, 200),
    )
}

/// One run's starts: per window, the starts of A, B and C; the starts of each while all
/// three had work (up to B's last start: B runs out first) and how long that lasted; and
/// C's delays in ms.
struct Phase {
    windows: Vec<[u64; 3]>,
    while_all: [u64; 3],
    all_ms: f64,
    c_delays_ms: Vec<f64>,
}

/// Enqueues `jobs` jobs of `tenant` over `groups` groups named `<tenant>-<n>`, round-robin
/// (each group's jobs in order), in batches of 10,000.
async fn fill(ctx: &Ctx, mode: Mode, tenant: u8, groups: u64, jobs: u64) -> Res<()> {
    let mut batch = JobBatch::new();
    for n in 0..jobs {
        let group = format!("{}-{}", NAMES[tenant as usize], n % groups);
        let mut options = EnqueueOptions::new().group(group);
        if let Some(key) = mode.key(tenant) {
            options = options.fair_key(key);
        }
        batch.push_with(
            Tenant {
                tenant,
                at_us: now_us(),
            },
            &options,
        )?;
        if batch.len() == 10_000 {
            batch.enqueue(&ctx.fill_pool).await?;
            batch = JobBatch::new();
        }
    }
    if !batch.is_empty() {
        batch.enqueue(&ctx.fill_pool).await?;
    }
    Ok(())
}

/// C's producer: one job per transaction, `C_RATE` a second on a fixed schedule, each
/// stamped with the time taken just before its enqueue.
async fn produce_c(pool: PgPool, mode: Mode, start: Instant, end: Instant) -> Res<()> {
    let mut sent = 0u64;
    loop {
        let next = start + Duration::from_secs_f64(sent as f64 / C_RATE);
        if next >= end {
            return Ok(());
        }
        tokio::time::sleep_until(next.into()).await;
        let enqueue = Enqueue::new(
            Tenant {
                tenant: 2,
                at_us: now_us(),
            },
            &pool,
        );
        match mode.key(2) {
            Some(key) => enqueue.fair_key(key).await?,
            None => enqueue.await?,
        };
        sent += 1;
    }
}

/// Runs the pool for `duration` with C's producer beside it (after filling A and B when
/// `flood`), and returns the starts per `window`.
async fn phase(
    ctx: &Ctx,
    mode: Mode,
    flood: bool,
    duration: Duration,
    window: Duration,
) -> Res<Phase> {
    reset(&ctx.pool).await?;
    if let Mode::Keys(weights) = mode {
        let client = harel_jobs::Client::new(ctx.pool.clone());
        for (tenant, weight) in weights.iter().enumerate() {
            client
                .set_fair_weight(harel_jobs::DEFAULT_QUEUE, NAMES[tenant], *weight)
                .await?;
        }
    }
    if flood {
        let (a_jobs, a_groups, b_jobs) = tenants(ctx);
        fill(ctx, mode, 0, a_groups, a_jobs).await?;
        fill(ctx, mode, 1, 10, b_jobs).await?;
    }
    let probe = Probe::recording(WORK);
    let handle = worker(&ctx.pool, probe.clone(), CONCURRENCY)?.start();
    let start = Instant::now();
    let start_us = now_us();
    let producer = tokio::spawn(produce_c(ctx.pool.clone(), mode, start, start + duration));
    tokio::time::sleep_until((start + duration).into()).await;
    producer.await??;
    // the starts of the phase are recorded; the rest of the flood is not needed
    handle.shutdown().await?;
    let starts = std::mem::take(&mut *probe.tenant_starts.lock().unwrap());
    let end_us = start_us + duration.as_micros() as u64;
    let width = window.as_micros() as u64;
    let mut windows = vec![[0u64; 3]; (duration.as_micros() as u64 / width) as usize];
    let mut c_delays_ms = Vec::new();
    let b_last = starts
        .iter()
        .filter(|(tenant, at, _)| *tenant == 1 && *at >= start_us && *at < end_us)
        .map(|(_, at, _)| *at)
        .max()
        .unwrap_or(start_us);
    let mut while_all = [0u64; 3];
    for (tenant, at, _) in &starts {
        if *at >= start_us && *at <= b_last {
            while_all[*tenant as usize] += 1;
        }
    }
    for (tenant, at, delay) in starts {
        if at < start_us || at >= end_us {
            continue;
        }
        if let Some(w) = windows.get_mut(((at - start_us) / width) as usize) {
            w[tenant as usize] += 1;
        }
        if tenant == 2 {
            c_delays_ms.push(delay as f64 / 1000.0);
        }
    }
    c_delays_ms.sort_by(f64::total_cmp);
    if !flood && c_delays_ms.is_empty() {
        bail!("fair: no job of C started");
    }
    reset(&ctx.pool).await?;
    Ok(Phase {
        windows,
        while_all,
        all_ms: (b_last - start_us) as f64 / 1000.0,
        c_delays_ms,
    })
}

/// One mode's figures over the runs.
#[derive(Default)]
struct Figures {
    shares: [Vec<f64>; 3],
    while_all: [Vec<f64>; 3],
    c_p50: Vec<f64>,
    c_p99: Vec<f64>,
    ratio: Vec<f64>,
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let window = Duration::from_secs(ctx.size(10, 4));
    let contended = window * ctx.size(4, 3);
    let alone = Duration::from_secs(ctx.size(15, 6));
    let mut figures: Vec<Figures> = MODES.iter().map(|_| Figures::default()).collect();
    let (mut alone_p50, mut alone_p99) = (Vec::new(), Vec::new());
    for run in 1..=ctx.runs {
        // C alone once per run (the same producer and pool on an empty queue), then each
        // mode beside the flood, in turn
        let quiet = phase(ctx, Mode::NoKey, false, alone, window).await?;
        let (q50, q99) = (
            quantile(&quiet.c_delays_ms, 0.5),
            quantile(&quiet.c_delays_ms, 0.99),
        );
        println!("# fair run {run}: C alone: enqueue->start p50 {q50:.1} ms p99 {q99:.1} ms");
        alone_p50.push(q50);
        alone_p99.push(q99);
        for (mode, figures) in MODES.iter().zip(figures.iter_mut()) {
            let flood = phase(ctx, *mode, true, contended, window).await?;
            for (i, w) in flood.windows.iter().enumerate() {
                let total = (w[0] + w[1] + w[2]).max(1) as f64;
                println!(
                    "# fair run {run} {} window {}-{} s: starts A={} B={} C={}; shares {:.3} / {:.3} / {:.3}",
                    mode.name(),
                    i as u64 * window.as_secs(),
                    (i as u64 + 1) * window.as_secs(),
                    w[0],
                    w[1],
                    w[2],
                    w[0] as f64 / total,
                    w[1] as f64 / total,
                    w[2] as f64 / total
                );
                for (share, starts) in figures.shares.iter_mut().zip(w) {
                    share.push(*starts as f64 / total);
                }
            }
            let total = flood.while_all.iter().sum::<u64>().max(1) as f64;
            println!(
                "# fair run {run} {}: while all three had work (the first {:.0} ms, up to B's last start): starts A={} B={} C={}; shares {:.3} / {:.3} / {:.3}",
                mode.name(),
                flood.all_ms,
                flood.while_all[0],
                flood.while_all[1],
                flood.while_all[2],
                flood.while_all[0] as f64 / total,
                flood.while_all[1] as f64 / total,
                flood.while_all[2] as f64 / total
            );
            for (share, starts) in figures.while_all.iter_mut().zip(flood.while_all) {
                share.push(starts as f64 / total);
            }
            let (p50, p99) = if flood.c_delays_ms.is_empty() {
                (f64::NAN, f64::NAN)
            } else {
                (
                    quantile(&flood.c_delays_ms, 0.5),
                    quantile(&flood.c_delays_ms, 0.99),
                )
            };
            println!(
                "# fair run {run} {}: C's enqueue->start beside the flood p50 {p50:.1} ms p99 {p99:.1} ms ({} starts)",
                mode.name(),
                flood.c_delays_ms.len()
            );
            figures.c_p50.push(p50);
            figures.c_p99.push(p99);
            figures.ratio.push(p99 / q99);
        }
    }
    let (a_jobs, a_groups, b_jobs) = tenants(ctx);
    let setup = format!(
        "concurrency={CONCURRENCY} handler_ms={} window_s={} A={a_jobs} jobs over {a_groups} groups, B={b_jobs} jobs over 10 groups, C={C_RATE}/s ungrouped",
        WORK.as_millis(),
        window.as_secs(),
    );
    ctx.report.figure(
        "fair_c_alone_start_p50",
        "ms",
        &alone_p50,
        None,
        setup.clone(),
    );
    ctx.report.figure(
        "fair_c_alone_start_p99",
        "ms",
        &alone_p99,
        None,
        setup.clone(),
    );
    for (mode, figures) in MODES.iter().zip(&figures) {
        let prefix = mode.figure();
        let extra = format!("{setup}; {}", mode.name());
        for (t, name) in NAMES.iter().enumerate() {
            ctx.report.figure(
                format!("{prefix}_share_{name}"),
                "ratio",
                &figures.shares[t],
                None,
                format!("{extra} (every window of every run)"),
            );
            let target = mode.expected().map(|shares| {
                // within ±10% of the tenant's share by weight
                crate::report::Target::Within(shares[t] * 0.9, shares[t] * 1.1)
            });
            ctx.report.figure(
                format!("{prefix}_share_while_all_{name}"),
                "ratio",
                &figures.while_all[t],
                target,
                format!("{extra} (while all three had work, each run)"),
            );
        }
        ctx.report.figure(
            format!("{prefix}_c_start_p50"),
            "ms",
            &figures.c_p50,
            None,
            extra.clone(),
        );
        ctx.report.figure(
            format!("{prefix}_c_start_p99"),
            "ms",
            &figures.c_p99,
            None,
            extra.clone(),
        );
        ctx.report.figure(
            format!("{prefix}_c_p99_ratio"),
            "ratio",
            &figures.ratio,
            matches!(mode, Mode::Keys(_)).then_some(crate::report::Target::AtMost(2.0)),
            format!("C's start p99 beside the flood / alone; {}", mode.name()),
        );
    }
    Ok(())
}
