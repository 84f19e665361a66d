//! `workflows` (by name only): jobs that wait for other jobs (ADR 0033), each beside the
//! plain drain of the same number of jobs, interleaved, at concurrency 64:
//!
//! - `fanin_10k_callback`: a workflow of 10,000 no-op tasks and a callback that waits for
//!   all of them (a batch with a callback): the time from the pool's start to the
//!   callback's end, as jobs/s over the 10,001 jobs; beside `plain_10k`, 10,000 jobs with
//!   no dependency;
//! - `chain3_10k`: 10,000 chains of three jobs (each waits for the one before: 30,000
//!   jobs, enqueued in batches by reference); beside `plain_30k`.
//!
//! The dependents are released by the settles of their parents, in the same transactions:
//! the cost of a dependency is in those settles (and in the enqueue), not in a poller.

use harel_jobs::{EnqueueOptions, JobBatch, Workflow};
use sqlx::PgPool;

use crate::db;
use crate::jobs::{Noop, Probe};
use crate::queue::{self, expect_empty, fill_single, prepare};
use crate::{Ctx, Res, bail};

/// A workflow of `n` no-op tasks and a callback waiting for all of them.
async fn fill_fanin(pool: &PgPool, n: u64) -> Res<u64> {
    let mut workflow = Workflow::new("bench-fanin");
    for i in 0..n {
        workflow.task(format!("t{i}"), Noop {}, &EnqueueOptions::new())?;
    }
    workflow.callback("callback", Noop {}, &EnqueueOptions::new())?;
    let enqueued = workflow.enqueue(pool).await?;
    Ok(enqueued.jobs.len() as u64)
}

/// `n` chains of three no-op jobs, each waiting for the one before, in batches of 1,000
/// chains.
async fn fill_chains(pool: &PgPool, n: u64) -> Res<u64> {
    let mut made = 0;
    while made < n {
        let mut batch = JobBatch::new();
        for _ in made..(made + 1_000).min(n) {
            let first = batch.add(Noop {}, &EnqueueOptions::new())?;
            let second = batch.add(Noop {}, &EnqueueOptions::new().after([first]))?;
            batch.add(Noop {}, &EnqueueOptions::new().after([second]))?;
        }
        made = (made + 1_000).min(n);
        batch.enqueue(pool).await?;
    }
    Ok(n * 3)
}

/// Fills with `fill`, drains at concurrency 64, checks every job ran once and nothing is
/// left; returns jobs/s.
async fn drain(ctx: &Ctx, worker_pool: &PgPool, fill: impl AsyncFnOnce() -> Res<u64>) -> Res<f64> {
    let n = prepare(&ctx.pool, fill).await?;
    let probe = Probe::new();
    let outcome = queue::drain(worker_pool, probe.clone(), 64, n).await?;
    expect_empty(&ctx.pool, "workflows").await?;
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM harel.job_waits)
              + (SELECT count(*) FROM harel.job_dependencies)",
    )
    .fetch_one(&ctx.pool)
    .await?;
    if left != 0 || probe.started() != n {
        bail!(
            "workflows: {} handler runs for {n} jobs, {left} dependency rows left",
            probe.started()
        );
    }
    Ok(outcome.rate())
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(10_000, 1_000);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    // warm-up, not measured
    drain(ctx, &worker_pool, async || {
        fill_chains(&ctx.fill_pool, n / 5).await
    })
    .await?;

    let mut samples = vec![Vec::new(); 4];
    for _ in 0..ctx.runs {
        samples[0].push(
            drain(ctx, &worker_pool, async || {
                fill_single(&ctx.fill_pool, &ctx.transport, n).await
            })
            .await?,
        );
        samples[1].push(
            drain(ctx, &worker_pool, async || {
                fill_fanin(&ctx.fill_pool, n).await
            })
            .await?,
        );
        samples[2].push(
            drain(ctx, &worker_pool, async || {
                fill_single(&ctx.fill_pool, &ctx.transport, n * 3).await
            })
            .await?,
        );
        samples[3].push(
            drain(ctx, &worker_pool, async || {
                fill_chains(&ctx.fill_pool, n).await
            })
            .await?,
        );
    }
    let names = [
        ("plain_10k", format!("jobs={n} label=\"no dependency\"")),
        (
            "fanin_10k_callback",
            format!(
                "jobs={} label=\"a workflow of {n} tasks and a callback after all: to the callback's end\"",
                n + 1
            ),
        ),
        (
            "plain_30k",
            format!("jobs={} label=\"no dependency\"", n * 3),
        ),
        (
            "chain3_10k",
            format!(
                "jobs={} label=\"{n} chains of three, each job after the one before\"",
                n * 3
            ),
        ),
    ];
    for (i, (name, extra)) in names.iter().enumerate() {
        ctx.report
            .figure(*name, "jobs/s", &samples[i], None, extra.clone());
    }
    worker_pool.close().await;
    Ok(())
}
