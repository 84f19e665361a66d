//! Scenario 5, depth: raw `Transport::claim` + `Transport::ack` throughput (unbatched, a few
//! tasks) with few vs many waiting groups. The claim's cost should not grow with depth.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::transport::{ClaimRequest, Transport};
use sqlx::PgPool;

use crate::db;
use crate::queue::{counts, fill_groups, prepare};
use crate::report::Target;
use crate::{Ctx, Res, bail};

/// Tasks claiming and acking, each on its own connection.
pub const TASKS: usize = 4;

/// `m` claim+ack pairs from `tasks` tasks, each pair two round trips (`claim` with limit 1,
/// then `ack`). Fails if a claim finds nothing (the queue ran dry) or an ack is refused.
/// Returns pairs/s.
pub async fn claim_ack_loop(
    pool: &PgPool,
    transport: &Transport,
    tasks: usize,
    m: u64,
) -> Res<f64> {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let pool = pool.clone();
        let transport = transport.clone();
        let next = Arc::clone(&next);
        handles.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < m {
                let request = ClaimRequest::new(Duration::from_secs(30));
                let Some(message) = transport.claim(&pool, &request).await? else {
                    bail!("claim found nothing: the queue ran dry");
                };
                if !transport.ack(&pool, &message.lease).await?.is_applied() {
                    bail!("ack refused: lease lost");
                }
            }
            Ok::<_, crate::Error>(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    Ok(m as f64 / started.elapsed().as_secs_f64())
}

/// Fills `groups` groups with enough messages that `m` claims (nearly) never empty a
/// group (each ack frees its group instead of deleting it, at both depths: round-robin
/// is not exact under concurrency, hence the margin), runs the loop, and checks the rows
/// left: every claimed message gone, and every remaining message in a group that has its
/// row (none stranded).
async fn measure(ctx: &Ctx, pool: &PgPool, groups: u64, m: u64) -> Res<f64> {
    let per_group = m.div_ceil(groups) + if m <= groups { 1 } else { 3 };
    let filled = prepare(&ctx.pool, async || {
        fill_groups(&ctx.fill_pool, &ctx.transport, groups, per_group).await
    })
    .await?;
    let rate = claim_ack_loop(pool, &ctx.transport, TASKS, m).await?;
    let (messages, group_rows, _) = counts(&ctx.pool).await?;
    let (with_messages, stranded): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(DISTINCT group_id) FROM harel.jobs),
                (SELECT count(*) FROM harel.transport_messages m
                  WHERE NOT EXISTS (SELECT 1 FROM harel.transport_groups g
                                     WHERE g.group_id = m.group_id))",
    )
    .fetch_one(&ctx.pool)
    .await?;
    if messages != (filled - m) as i64 || group_rows != with_messages || stranded != 0 {
        bail!(
            "depth: after {m} claims of {filled}: {messages} messages left (expected {}), {group_rows} group rows for {with_messages} groups with messages, {stranded} stranded messages",
            filled - m
        );
    }
    Ok(rate)
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let shallow = 1_000;
    let deep = ctx.size(100_000, 20_000);
    let m = ctx.size(20_000, 2_000);
    let pool = db::pool(&ctx.url, TASKS as u32, &[]).await?;
    measure(ctx, &pool, shallow, m / 4).await?; // warm-up
    let mut few = Vec::new();
    let mut many = Vec::new();
    let mut ratios = Vec::new();
    for _ in 0..ctx.runs {
        let a = measure(ctx, &pool, shallow, m).await?;
        let b = measure(ctx, &pool, deep, m).await?;
        few.push(a);
        many.push(b);
        ratios.push(b / a);
    }
    let extra = |groups: u64| format!("groups={groups} claims={m} tasks={TASKS}");
    ctx.report
        .figure("depth_shallow", "claim+ack/s", &few, None, extra(shallow));
    ctx.report
        .figure("depth_deep", "claim+ack/s", &many, None, extra(deep));
    ctx.report.figure(
        "depth_ratio",
        "ratio",
        &ratios,
        Some(Target::AtLeast(0.9)),
        format!("deep/shallow groups={deep}/{shallow} (paired runs)"),
    );
    pool.close().await;
    Ok(())
}
