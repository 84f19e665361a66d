//! The `fair` scenario: how one queue shares its workers between tenants, today with no
//! fairness key (issue 28's baseline; the same scenario measures fair share once keys exist).
//!
//! Three tenants on one queue, a pool at concurrency 16 whose handlers work 20 ms (so about
//! 800 starts/s): A floods 100,000 jobs over 10,000 groups, then B adds 1,000 jobs over 10
//! groups (both enqueued before the pool starts), and C enqueues 50 jobs/s, one job per
//! transaction, while the pool runs. Every start is recorded by its handler (tenant, time,
//! delay since its enqueue). Reported: each tenant's share of the starts per 10-second
//! window, and C's enqueue→start p50 / p99 beside the flood and alone (the same producer and
//! pool on an empty queue).
//!
//! The weight shares the issue asks for (1:1:1, work-conserving): C takes its 50/s, A and B
//! split the rest, B being able to use up to 10 slots (500/s): about 0.47 / 0.47 / 0.06.

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

/// A's jobs and groups, and B's jobs (over 10 groups), at this size.
fn tenants(ctx: &Ctx) -> (u64, u64, u64) {
    (
        ctx.size(100_000, 20_000),
        ctx.size(10_000, 2_000),
        ctx.size(1_000, 200),
    )
}

/// One run's starts: per window, the starts of A, B and C; and C's delays in ms.
struct Phase {
    windows: Vec<[u64; 3]>,
    c_delays_ms: Vec<f64>,
}

/// Enqueues `jobs` jobs of `tenant` over `groups` groups named `<tenant>-<n>`, round-robin
/// (each group's jobs in order), in batches of 10,000.
async fn fill(ctx: &Ctx, tenant: u8, groups: u64, jobs: u64) -> Res<()> {
    let mut batch = JobBatch::new();
    for n in 0..jobs {
        let group = format!("{}-{}", NAMES[tenant as usize], n % groups);
        batch.push_with(
            Tenant {
                tenant,
                at_us: now_us(),
            },
            &EnqueueOptions::new().group(group),
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
async fn produce_c(pool: PgPool, start: Instant, end: Instant) -> Res<()> {
    let mut sent = 0u64;
    loop {
        let next = start + Duration::from_secs_f64(sent as f64 / C_RATE);
        if next >= end {
            return Ok(());
        }
        tokio::time::sleep_until(next.into()).await;
        Enqueue::new(
            Tenant {
                tenant: 2,
                at_us: now_us(),
            },
            &pool,
        )
        .await?;
        sent += 1;
    }
}

/// Runs the pool for `duration` with C's producer beside it (after filling A and B when
/// `flood`), and returns the starts per `window`.
async fn phase(ctx: &Ctx, flood: bool, duration: Duration, window: Duration) -> Res<Phase> {
    reset(&ctx.pool).await?;
    if flood {
        let (a_jobs, a_groups, b_jobs) = tenants(ctx);
        fill(ctx, 0, a_groups, a_jobs).await?;
        fill(ctx, 1, 10, b_jobs).await?;
    }
    let probe = Probe::recording(WORK);
    let handle = worker(&ctx.pool, probe.clone(), CONCURRENCY)?.start();
    let start = Instant::now();
    let start_us = now_us();
    let producer = tokio::spawn(produce_c(ctx.pool.clone(), start, start + duration));
    tokio::time::sleep_until((start + duration).into()).await;
    producer.await??;
    // the starts of the phase are recorded; the rest of the flood is not needed
    handle.shutdown().await?;
    let starts = std::mem::take(&mut *probe.tenant_starts.lock().unwrap());
    let end_us = start_us + duration.as_micros() as u64;
    let width = window.as_micros() as u64;
    let mut windows = vec![[0u64; 3]; (duration.as_micros() as u64 / width) as usize];
    let mut c_delays_ms = Vec::new();
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
        c_delays_ms,
    })
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let window = Duration::from_secs(ctx.size(10, 4));
    let contended = window * ctx.size(4, 3);
    let alone = Duration::from_secs(ctx.size(15, 6));
    let mut shares: [Vec<f64>; 3] = Default::default();
    let (mut c_p50, mut c_p99, mut alone_p50, mut alone_p99, mut ratio) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 1..=ctx.runs {
        let flood = phase(ctx, true, contended, window).await?;
        let quiet = phase(ctx, false, alone, window).await?;
        for (i, w) in flood.windows.iter().enumerate() {
            let total = (w[0] + w[1] + w[2]).max(1) as f64;
            println!(
                "# fair run {run} window {}-{} s: starts A={} B={} C={}; shares {:.3} / {:.3} / {:.3}",
                i as u64 * window.as_secs(),
                (i as u64 + 1) * window.as_secs(),
                w[0],
                w[1],
                w[2],
                w[0] as f64 / total,
                w[1] as f64 / total,
                w[2] as f64 / total
            );
            for t in 0..3 {
                shares[t].push(w[t] as f64 / total);
            }
        }
        let (p50, p99) = if flood.c_delays_ms.is_empty() {
            (f64::NAN, f64::NAN)
        } else {
            (
                quantile(&flood.c_delays_ms, 0.5),
                quantile(&flood.c_delays_ms, 0.99),
            )
        };
        let (q50, q99) = (
            quantile(&quiet.c_delays_ms, 0.5),
            quantile(&quiet.c_delays_ms, 0.99),
        );
        println!(
            "# fair run {run}: C's enqueue->start beside the flood p50 {p50:.1} ms p99 {p99:.1} ms ({} starts); alone p50 {q50:.1} ms p99 {q99:.1} ms",
            flood.c_delays_ms.len()
        );
        c_p50.push(p50);
        c_p99.push(p99);
        alone_p50.push(q50);
        alone_p99.push(q99);
        ratio.push(p99 / q99);
    }
    let (a_jobs, a_groups, b_jobs) = tenants(ctx);
    let extra = format!(
        "concurrency={CONCURRENCY} handler_ms={} window_s={} A={a_jobs} jobs over {a_groups} groups, B={b_jobs} jobs over 10 groups, C={C_RATE}/s ungrouped; no fairness key",
        WORK.as_millis(),
        window.as_secs(),
    );
    for (t, name) in NAMES.iter().enumerate() {
        ctx.report.figure(
            format!("fair_share_{name}"),
            "ratio",
            &shares[t],
            None,
            format!("{extra} (every window of every run)"),
        );
    }
    ctx.report
        .figure("fair_c_start_p50", "ms", &c_p50, None, extra.clone());
    ctx.report
        .figure("fair_c_start_p99", "ms", &c_p99, None, extra.clone());
    ctx.report.figure(
        "fair_c_alone_start_p50",
        "ms",
        &alone_p50,
        None,
        extra.clone(),
    );
    ctx.report.figure(
        "fair_c_alone_start_p99",
        "ms",
        &alone_p99,
        None,
        extra.clone(),
    );
    ctx.report.figure(
        "fair_c_p99_ratio",
        "ratio",
        &ratio,
        Some(crate::report::Target::AtMost(2.0)),
        "C's start p99 beside the flood / alone",
    );
    Ok(())
}
