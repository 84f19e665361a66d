//! `dependents` (by name only): what a producer's choice of dependents costs other jobs
//! (issue 42, ADR 0037). A job with 100,000 dependents (each a job of its own waiting for
//! it) is claimed with 255 other jobs and settled with them in one batch, as a pool's
//! completer settles them, beside the same batch whose parent has no dependent:
//!
//! - `settle_256_no_dependents`: the batch's settle, ms;
//! - `settle_256_parent_100k_acked`: the same batch, the parent with 100,000 dependents,
//!   all acked, ms (before ADR 0037 the settle released every dependent: seconds);
//! - `settle_256_parent_100k_dead`: the same, the parent a dead letter (its dependents are
//!   cancelled), ms;
//! - `backlog_100k_acked`, `backlog_100k_dead`: the time housekeeping takes to resolve the
//!   dependents the settle left, calling `harel_resolve_backlog` a page of 1,000 rows after
//!   the other, as a worker's housekeeping does (ms; the pages in the label). A schema
//!   without that function (a release before it) has nothing left: 0.

use std::time::Instant;

use harel_jobs::JobId;
use harel_jobs::transport::{ClaimRequest, Settlement};
use harel_jobs::{EnqueueOptions, JobBatch};
use sqlx::PgPool;

use crate::jobs::Noop;
use crate::queue::{fill_single, prepare};
use crate::{Ctx, Res, bail};

/// The other jobs of the parent's settle batch.
const OTHERS: u64 = 255;

/// A parent, `OTHERS` jobs, then `dependents` jobs waiting for the parent, in batches.
async fn fill(ctx: &Ctx, dependents: u64) -> Res<JobId> {
    let parent = ctx
        .transport
        .publish(
            &ctx.fill_pool,
            &harel_jobs::transport::OutgoingMessage::new("-", "noop", "{}").in_own_group(),
        )
        .await?;
    fill_single(&ctx.fill_pool, &ctx.transport, OTHERS).await?;
    let mut made = 0;
    while made < dependents {
        let mut batch = JobBatch::new();
        for _ in made..(made + 5_000).min(dependents) {
            batch.push_with(Noop {}, &EnqueueOptions::new().after([parent]))?;
        }
        batch.enqueue(&ctx.fill_pool).await?;
        made = (made + 5_000).min(dependents);
    }
    Ok(parent)
}

/// Claims the parent and the other jobs, settles them in one batch (the parent dead when
/// `dead`), and returns the settle's time in ms.
async fn settle(ctx: &Ctx, parent: JobId, dead: bool) -> Res<f64> {
    let claimed = ctx
        .transport
        .claim_many(
            &ctx.pool,
            &ClaimRequest::new(std::time::Duration::from_secs(600)).limit(256),
        )
        .await?;
    if claimed.len() as u64 != OTHERS + 1 || !claimed.iter().any(|m| m.lease.id == parent) {
        bail!("dependents: claimed {} jobs", claimed.len());
    }
    let batch: Vec<_> = claimed
        .iter()
        .map(|m| {
            let settlement = if dead && m.lease.id == parent {
                Settlement::dead_letter("bench")
            } else {
                Settlement::Ack
            };
            (m.lease.clone(), settlement)
        })
        .collect();
    let started = Instant::now();
    let outcomes = ctx.transport.settle_many(&ctx.pool, &batch, None).await?;
    let took = started.elapsed().as_secs_f64() * 1_000.0;
    if !outcomes.iter().all(|o| o.is_applied()) {
        bail!("dependents: a settle did not apply");
    }
    Ok(took)
}

/// Resolves the backlog a page after the other; returns the time in s and the pages.
async fn backlog(pool: &PgPool) -> Res<(f64, u64)> {
    let exists: bool = sqlx::query_scalar(
        "SELECT to_regprocedure('harel.harel_resolve_backlog(integer)') IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    if !exists {
        return Ok((0.0, 0));
    }
    let started = Instant::now();
    let mut pages = 0;
    loop {
        let (parents, more): (i32, bool) =
            sqlx::query_as("SELECT parents, more FROM harel.harel_resolve_backlog(1000)")
                .fetch_one(pool)
                .await?;
        pages += 1;
        if parents == 0 || !more {
            return Ok((started.elapsed().as_secs_f64(), pages));
        }
    }
}

/// Checks that nothing waits any more, and that the dependents were released (or, after
/// a dead parent, cancelled).
async fn check(pool: &PgPool, dependents: u64, dead: bool) -> Res<()> {
    let (waits, rows, ended): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM harel.job_waits),
                (SELECT count(*) FROM harel.job_dependencies),
                (SELECT count(*) FROM harel.job_history WHERE state = 'cancelled')",
    )
    .fetch_one(pool)
    .await?;
    let cancelled = if dead { dependents as i64 } else { 0 };
    if waits != 0 || rows != 0 || ended != cancelled {
        bail!("dependents: {waits} waits and {rows} dependency rows left, {ended} cancelled");
    }
    Ok(())
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(100_000, 5_000);
    let mut samples = vec![Vec::new(); 5];
    let mut pages = [0, 0];
    for _ in 0..ctx.runs {
        let parent = prepare_parent(ctx, 0).await?;
        samples[0].push(settle(ctx, parent, false).await?);
        for (i, dead) in [false, true].into_iter().enumerate() {
            let parent = prepare_parent(ctx, n).await?;
            samples[1 + i].push(settle(ctx, parent, dead).await?);
            let (took, p) = backlog(&ctx.pool).await?;
            samples[3 + i].push(took * 1_000.0);
            pages[i] = p;
            check(&ctx.pool, n, dead).await?;
        }
    }
    let batch = OTHERS + 1;
    ctx.report.figure(
        "settle_256_no_dependents",
        "ms",
        &samples[0],
        None,
        format!("label=\"a settle of {batch} acks, no dependent\""),
    );
    for (i, how) in ["acked", "dead"].into_iter().enumerate() {
        ctx.report.figure(
            format!("settle_256_parent_{}k_{how}", n / 1_000),
            "ms",
            &samples[1 + i],
            None,
            format!("label=\"the same, one job {how} with {n} dependents\""),
        );
        ctx.report.figure(
            format!("backlog_{}k_{how}", n / 1_000),
            "ms",
            &samples[3 + i],
            None,
            format!(
                "label=\"housekeeping: the dependents the settle left, {} pages\"",
                pages[i]
            ),
        );
    }
    Ok(())
}

/// A fresh queue holding a parent with `dependents` and the other jobs of its batch.
async fn prepare_parent(ctx: &Ctx, dependents: u64) -> Res<JobId> {
    let mut parent = None;
    prepare(&ctx.pool, async || {
        parent = Some(fill(ctx, dependents).await?);
        Ok(dependents + OTHERS + 1)
    })
    .await?;
    parent.ok_or_else(|| "dependents: no parent".into())
}
