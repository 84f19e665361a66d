//! Scenario 6, soak: 1,000,000 jobs (50,000 with --quick) through one worker pool at
//! concurrency 64, with a producer (`publish_many` of 1,000, default sessions) keeping a
//! backlog of 20,000 to 21,000 waiting jobs (5,000 with --quick), so the queue's depth stays
//! constant and only its history grows: dead rows, index churn. Throughput of the last 10%
//! of the jobs vs the first 10%. (Where the server's autovacuum is off, the worker pool's
//! own maintenance vacuums the queue tables; the dead-row counts at the end are printed.)

use std::time::{Duration, Instant};

use harel_jobs::Job;
use harel_jobs::transport::OutgoingMessage;
use sqlx::PgPool;

use crate::db;
use crate::jobs::{Noop, Probe};
use crate::queue::{analyze, expect_empty, reset, wait_for_acks, worker};
use crate::report::Target;
use crate::{Ctx, Res, bail};

const CONCURRENCY: usize = 64;

struct SoakRun {
    first: f64,
    last: f64,
    overall: f64,
    dead_rows: (i64, i64),
}

async fn publish(ctx: &Ctx, pool: &PgPool, from: u64, to: u64) -> Res<()> {
    let chunk: Vec<OutgoingMessage> = (from..to)
        .map(|i| OutgoingMessage::new(format!("k{i}"), Noop::KIND, "{}"))
        .collect();
    ctx.transport.publish_many(pool, &chunk).await?;
    Ok(())
}

/// One soak of `n` jobs.
async fn soak_once(ctx: &Ctx, worker_pool: &PgPool, n: u64) -> Res<SoakRun> {
    let low = ctx.size(20_000, 5_000);
    let chunk = 1_000;
    reset(&ctx.pool).await?;
    let mut enqueued = (low + chunk).min(n);
    publish(ctx, &ctx.fill_pool, 0, enqueued).await?;
    analyze(&ctx.pool).await?;
    sqlx::query("CHECKPOINT").execute(&ctx.pool).await?;

    let tenth = n / 10;
    let probe = Probe::with_stamps(tenth);
    let started = Instant::now();
    let handle = worker(worker_pool, probe.clone(), CONCURRENCY)?.start();

    while enqueued < n {
        let backlog = enqueued.saturating_sub(probe.started());
        if backlog < low {
            let to = (enqueued + chunk).min(n);
            publish(ctx, &ctx.pool, enqueued, to).await?;
            enqueued = to;
        } else {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let waited = wait_for_acks(&handle, n, started).await;
    let elapsed = started.elapsed();
    let stats = handle.shutdown().await?;
    crate::queue::note_errors(&stats, &format!("soak of {n}"));
    waited?;
    let dead_rows: (i64, i64) = sqlx::query_as(
        "SELECT coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'transport_groups'), 0)::bigint,
                coalesce(sum(n_dead_tup) FILTER (WHERE relname = 'transport_messages'), 0)::bigint
           FROM pg_stat_user_tables WHERE schemaname = 'harel'",
    )
    .fetch_one(&ctx.pool)
    .await?;
    expect_empty(&ctx.pool, "soak").await?;
    if stats.succeeded != n || probe.started() != n {
        bail!(
            "soak: {n} jobs, {} acked, {} handler runs",
            stats.succeeded,
            probe.started()
        );
    }

    let mut stamps = probe.stamps.lock().unwrap().clone();
    stamps.sort_by_key(|(count, _)| *count);
    let at = |count: u64| {
        stamps
            .iter()
            .find(|(c, _)| *c == count)
            .map(|(_, t)| *t)
            .ok_or_else(|| format!("soak: no stamp at {count}"))
    };
    let first_end = at(tenth)?;
    let last_start = at(9 * tenth)?;
    let last_end = at(10 * tenth)?;
    Ok(SoakRun {
        first: tenth as f64 / first_end.duration_since(started).as_secs_f64(),
        last: tenth as f64 / last_end.duration_since(last_start).as_secs_f64(),
        overall: n as f64 / elapsed.as_secs_f64(),
        dead_rows,
    })
}

fn report(ctx: &Ctx, prefix: &str, runs: &[SoakRun], n: u64, label: &str) {
    let collect = |f: fn(&SoakRun) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
    let extra = format!("jobs={n} concurrency={CONCURRENCY}{label}");
    ctx.report.figure(
        format!("{prefix}_first10pct"),
        "jobs/s",
        &collect(|r| r.first),
        None,
        extra.clone(),
    );
    ctx.report.figure(
        format!("{prefix}_last10pct"),
        "jobs/s",
        &collect(|r| r.last),
        None,
        extra.clone(),
    );
    ctx.report.figure(
        format!("{prefix}_overall"),
        "jobs/s",
        &collect(|r| r.overall),
        None,
        extra.clone(),
    );
    ctx.report.figure(
        format!("{prefix}_ratio"),
        "ratio",
        &collect(|r| r.last / r.first),
        label.is_empty().then_some(Target::AtLeast(0.8)),
        format!("last10/first10{label}"),
    );
    for (i, run) in runs.iter().enumerate() {
        println!(
            "# {prefix} run {i}: dead rows at the end (pg_stat_user_tables): groups={} messages={}",
            run.dead_rows.0, run.dead_rows.1
        );
    }
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(1_000_000, 50_000);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    soak_once(ctx, &worker_pool, n / 10).await?; // warm-up
    let mut plain = Vec::new();
    for _ in 0..ctx.runs {
        plain.push(soak_once(ctx, &worker_pool, n).await?);
    }
    report(ctx, "soak", &plain, n, "");

    worker_pool.close().await;
    Ok(())
}
