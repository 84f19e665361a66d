//! Scenario 7, ceiling: the same claim/ack functions driven by pgbench (C, libpq, prepared
//! statements, no job logic), against the same fill, with the same client count; ours ÷
//! pgbench says how much the Rust side (sqlx, tokio, the worker pool) costs.
//!
//! - unbatched: ours = `Transport::claim` + `Transport::ack` from 4 tasks; pgbench = 4
//!   clients running `pgbench/claim_ack.sql`.
//! - batched: ours = the worker pool draining at concurrency K (it claims up to K per round
//!   trip and acks in batches, on 2 connections: the fetcher's and the completer's);
//!   pgbench = 2 clients running `pgbench/claim_ack_batch.sql` with k = K, whose acks
//!   commit without waiting for the WAL flush, as the pool's completer's do.
//!
//! Every transaction of the scripts completes real messages (they fail otherwise), and the
//! rows left are counted after each run.

use sqlx::PgPool;

use crate::db;
use crate::depth::{TASKS, claim_ack_loop};
use crate::jobs::Probe;
use crate::pgbench::{self, CLAIM_ACK, CLAIM_ACK_BATCH};
use crate::queue::{self, counts, expect_empty, fill_single, prepare};
use crate::report::Target;
use crate::{Ctx, Res, bail};

/// Per batch size k: ours, pgbench's, and the paired ratios.
type Runs = (u64, Vec<f64>, Vec<f64>, Vec<f64>);

/// The worker pool's connections busy at once while draining: fetcher + completer.
pub const POOL_STREAMS: u32 = 2;

/// Fresh fill of `fill` single-message groups; returns it.
pub async fn refill(ctx: &Ctx, fill: u64) -> Res<u64> {
    prepare(&ctx.pool, async || {
        fill_single(&ctx.fill_pool, &ctx.transport, fill).await
    })
    .await
}

/// Checks that exactly `consumed` of `fill` messages are gone.
pub async fn expect_left(ctx: &Ctx, fill: u64, consumed: u64, what: &str) -> Res<()> {
    let (messages, groups, dead) = counts(&ctx.pool).await?;
    let left = (fill - consumed) as i64;
    if messages != left || groups != left || dead != 0 {
        bail!(
            "{what}: expected {left} messages and groups left, found {messages} and {groups} ({dead} dead letters)"
        );
    }
    Ok(())
}

async fn ours_unbatched(ctx: &Ctx, pool: &PgPool, m: u64) -> Res<f64> {
    let fill = refill(ctx, m + m / 5).await?;
    let rate = claim_ack_loop(pool, &ctx.transport, TASKS, m).await?;
    expect_left(ctx, fill, m, "ours unbatched").await?;
    Ok(rate)
}

async fn pgbench_unbatched(ctx: &Ctx, m: u64) -> Res<f64> {
    let fill = refill(ctx, m + m / 5).await?;
    let per_client = m / TASKS as u64;
    let run = pgbench::run(&ctx.url, CLAIM_ACK, TASKS as u32, per_client, &[]).await?;
    expect_left(ctx, fill, run.processed, "pgbench unbatched").await?;
    Ok(run.tps)
}

/// jobs/s of the worker pool at concurrency `k` draining a fresh fill of `fill` jobs.
pub async fn ours_batched(ctx: &Ctx, pool: &PgPool, k: usize, fill: u64) -> Res<f64> {
    let n = refill(ctx, fill).await?;
    let probe = Probe::new();
    let outcome = queue::drain(pool, probe.clone(), k, n).await?;
    expect_empty(&ctx.pool, "ours batched").await?;
    if probe.started() != n {
        bail!(
            "ours batched: {} handler runs for {n} jobs",
            probe.started()
        );
    }
    Ok(outcome.rate())
}

/// jobs/s of pgbench claiming and acking `k` per transaction with `clients` clients.
pub async fn pgbench_batched(ctx: &Ctx, k: u64, clients: u32, fill: u64) -> Res<f64> {
    let n = refill(ctx, fill).await?;
    let run = pgbench::run_batched(&ctx.url, CLAIM_ACK_BATCH, k, clients, n).await?;
    expect_left(ctx, n, run.jobs, "pgbench batched").await?;
    Ok(run.jobs_per_s)
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    if !pgbench::available() {
        println!("# ceiling skipped: pgbench is not installed");
        return Ok(());
    }
    let m = ctx.size(20_000, 2_000);
    let fill = ctx.size(100_000, 10_000);
    let raw_pool = db::pool(&ctx.url, TASKS as u32, &[]).await?;
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;

    // warm-up
    ours_unbatched(ctx, &raw_pool, m / 4).await?;
    pgbench_unbatched(ctx, m / 4).await?;
    ours_batched(ctx, &worker_pool, 64, fill / 5).await?;

    let mut unbatched = (Vec::new(), Vec::new(), Vec::new());
    let mut batched: Vec<Runs> = [16, 64]
        .iter()
        .map(|k| (*k, Vec::new(), Vec::new(), Vec::new()))
        .collect();
    let mut wide = Vec::new();
    for _ in 0..ctx.runs {
        let ours = ours_unbatched(ctx, &raw_pool, m).await?;
        let raw = pgbench_unbatched(ctx, m).await?;
        unbatched.0.push(ours);
        unbatched.1.push(raw);
        unbatched.2.push(ours / raw);
        for (k, ours_runs, raw_runs, ratios) in &mut batched {
            let ours = ours_batched(ctx, &worker_pool, *k as usize, fill).await?;
            let raw = pgbench_batched(ctx, *k, POOL_STREAMS, fill).await?;
            ours_runs.push(ours);
            raw_runs.push(raw);
            ratios.push(ours / raw);
        }
        wide.push(pgbench_batched(ctx, 64, 4, fill).await?);
    }

    let extra = format!("clients={TASKS} pairs={m}");
    ctx.report.figure(
        "ceiling_unbatched_ours",
        "claim+ack/s",
        &unbatched.0,
        None,
        extra.clone(),
    );
    ctx.report.figure(
        "ceiling_unbatched_pgbench",
        "claim+ack/s",
        &unbatched.1,
        None,
        extra,
    );
    ctx.report.figure(
        "ceiling_unbatched_ratio",
        "ratio",
        &unbatched.2,
        Some(Target::AtLeast(0.8)),
        "ours/pgbench (paired runs)",
    );
    for (k, ours_runs, raw_runs, ratios) in &batched {
        ctx.report.figure(
            format!("ceiling_batched_k{k}_ours"),
            "jobs/s",
            ours_runs,
            None,
            format!("worker pool concurrency={k} jobs={fill}"),
        );
        ctx.report.figure(
            format!("ceiling_batched_k{k}_pgbench"),
            "jobs/s",
            raw_runs,
            None,
            format!("clients={POOL_STREAMS} k={k}"),
        );
        ctx.report.figure(
            format!("ceiling_batched_k{k}_ratio"),
            "ratio",
            ratios,
            Some(Target::AtLeast(0.7)),
            "ours/pgbench (paired runs)",
        );
    }
    ctx.report.figure(
        "ceiling_batched_k64_pgbench_4clients",
        "jobs/s",
        &wide,
        None,
        "clients=4 k=64 (info: what more claim/ack connections would give)",
    );
    raw_pool.close().await;
    worker_pool.close().await;
    queue::reset(&ctx.pool).await?;
    Ok(())
}
