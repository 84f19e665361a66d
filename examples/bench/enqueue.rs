//! Scenario 1, enqueue: jobs/s of one job per transaction (1 and 16 concurrent tasks) and
//! of `JobBatch`es of 1,000 and of 20,000 (one round trip each: a bulk load). Plus a diagnostic: 16 tasks enqueueing
//! jobs delayed by 1 ms, for which `harel_publish` sends no NOTIFY. And, by name only,
//! `keys`: a batch under as many fairness keys as jobs beside one under one key, and an
//! operator's change over as many parked groups ([`run_keys`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::{Enqueue, EnqueueOptions, JobBatch, KeyLimits};

use crate::jobs::Noop;
use crate::queue::{counts, reset};
use crate::report::Target;
use crate::{Ctx, Res, bail};

#[derive(Clone, Copy)]
enum Mode {
    /// `Enqueue::new(job, &pool)`: one job, one implicit transaction, one round trip.
    Single { tasks: usize },
    /// `JobBatch` of this many jobs, one round trip each, from one task.
    Batch { size: usize },
    /// As `Single`, but each job delayed by 1 ms, which makes `harel_publish` skip its
    /// `pg_notify` (a diagnostic: what the NOTIFY costs).
    SingleNoNotify { tasks: usize },
}

/// Enqueues for `duration` and returns jobs/s, after checking the rows are there.
async fn measure(ctx: &Ctx, mode: Mode, duration: Duration) -> Res<f64> {
    reset(&ctx.pool).await?;
    let published = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let tasks = match mode {
        Mode::Single { tasks } | Mode::SingleNoNotify { tasks } => tasks,
        Mode::Batch { .. } => 1,
    };
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let pool = ctx.pool.clone();
        let published = Arc::clone(&published);
        handles.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                match mode {
                    Mode::Single { .. } => {
                        Enqueue::new(Noop {}, &pool).await?;
                        published.fetch_add(1, Ordering::Relaxed);
                    }
                    Mode::SingleNoNotify { .. } => {
                        Enqueue::new(Noop {}, &pool)
                            .delay(Duration::from_millis(1))
                            .await?;
                        published.fetch_add(1, Ordering::Relaxed);
                    }
                    Mode::Batch { size } => {
                        let mut batch = JobBatch::new();
                        for _ in 0..size {
                            batch.push(Noop {})?;
                        }
                        batch.enqueue(&pool).await?;
                        published.fetch_add(size as u64, Ordering::Relaxed);
                    }
                }
            }
            Ok::<_, crate::Error>(())
        }));
    }
    for handle in handles {
        handle.await??;
    }
    let elapsed = started.elapsed();
    let n = published.load(Ordering::Relaxed);
    let (messages, groups, _) = counts(&ctx.pool).await?;
    if messages != n as i64 || groups != n as i64 {
        bail!("enqueue: published {n}, found {messages} messages and {groups} groups");
    }
    Ok(n as f64 / elapsed.as_secs_f64())
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let duration = Duration::from_secs(ctx.size(5, 1));
    let modes = [
        ("enqueue_single_1task", Mode::Single { tasks: 1 }),
        ("enqueue_single_16tasks", Mode::Single { tasks: 16 }),
        ("enqueue_batch1000", Mode::Batch { size: 1000 }),
        ("enqueue_batch20000", Mode::Batch { size: 20_000 }),
        (
            "enqueue_single_16tasks_no_notify",
            Mode::SingleNoNotify { tasks: 16 },
        ),
    ];
    // warm-up: connections, prepared statements, plan caches
    for (_, mode) in modes {
        measure(ctx, mode, Duration::from_millis(ctx.size(1000, 300))).await?;
    }
    let mut samples = vec![Vec::new(); modes.len()];
    for _ in 0..ctx.runs {
        for (i, (_, mode)) in modes.iter().enumerate() {
            samples[i].push(measure(ctx, *mode, duration).await?);
        }
    }
    for (i, (name, mode)) in modes.iter().enumerate() {
        let label = match mode {
            Mode::SingleNoNotify { .. } => {
                " label=\"diagnostic: jobs delayed 1 ms, so harel_publish sends no NOTIFY\""
            }
            _ => "",
        };
        ctx.report.figure(
            *name,
            "jobs/s",
            &samples[i],
            None,
            format!("run_s={}{label}", duration.as_secs()),
        );
    }
    reset(&ctx.pool).await?;
    Ok(())
}

/// Scenario `keys` (by name only; issue 42): costs a producer chooses. One `JobBatch` of N
/// jobs, each under a fairness key of its own, beside the same N jobs under one key, for N =
/// 1,000, 10,000 and 100,000 (10,000 at most with `--quick`), the two interleaved in each
/// run, each into an empty queue; the ratio is taken per run (target at 100,000: at most
/// 1.2 ×). Then an operator's change over parked groups: 100,000 groups (10,000 `--quick`)
/// of as many keys parked under a limit of 1, the limit removed while a claim runs: how
/// long the operator's call took, what the claim got, and the housekeeping calls that
/// gave the rest back.
pub async fn run_keys(ctx: &Ctx) -> Res<()> {
    let sizes: &[usize] = ctx.size(&[1_000, 10_000, 100_000], &[1_000, 10_000]);
    for &n in sizes {
        // warm-up: plan caches, the table's first pages
        publish_keyed(ctx, n, false).await?;
        publish_keyed(ctx, n, true).await?;
        let (mut one, mut distinct, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
        for run in 0..ctx.runs {
            // alternate which goes first
            let (a, b) = if run % 2 == 0 {
                let a = publish_keyed(ctx, n, false).await?;
                (a, publish_keyed(ctx, n, true).await?)
            } else {
                let b = publish_keyed(ctx, n, true).await?;
                (publish_keyed(ctx, n, false).await?, b)
            };
            one.push(a);
            distinct.push(b);
            ratio.push(b / a);
        }
        ctx.report
            .figure(format!("enqueue_keys_one_{n}"), "ms", &one, None, "");
        ctx.report.figure(
            format!("enqueue_keys_distinct_{n}"),
            "ms",
            &distinct,
            None,
            "",
        );
        ctx.report.figure(
            format!("enqueue_keys_distinct_over_one_{n}"),
            "ratio",
            &ratio,
            (n == 100_000).then_some(Target::AtMost(1.2)),
            "label=\"per run, interleaved\"",
        );
    }
    raise_key_limit(ctx, ctx.size(100_000, 10_000)).await?;
    reset(&ctx.pool).await?;
    Ok(())
}

/// One batch of `n` no-op jobs into an empty queue, each under a key of its own or all
/// under one; returns its milliseconds, after checking the rows are there.
async fn publish_keyed(ctx: &Ctx, n: usize, distinct: bool) -> Res<f64> {
    reset(&ctx.pool).await?;
    let mut batch = JobBatch::new();
    for i in 0..n {
        let key = if distinct {
            format!("tenant-{i}")
        } else {
            "tenant".to_owned()
        };
        batch.push_with(Noop {}, &EnqueueOptions::new().fair_key(key))?;
    }
    let started = Instant::now();
    batch.enqueue(&ctx.pool).await?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let (messages, groups, _) = counts(&ctx.pool).await?;
    if messages != n as i64 || groups != n as i64 {
        bail!("keys: published {n}, found {messages} messages and {groups} groups");
    }
    Ok(ms)
}

/// `n` groups of as many keys parked in a queue limited to 1 running job per key, then the
/// limit removed while a claim waits for the queue's turn.
async fn raise_key_limit(ctx: &Ctx, n: usize) -> Res<()> {
    reset(&ctx.pool).await?;
    let client = harel_jobs::Client::new(ctx.pool.clone());
    client.create_queue("keyed").await?;
    client
        .set_key_limits("keyed", KeyLimits::none().concurrency(1))
        .await?;
    let mut batch = JobBatch::new();
    for i in 0..n {
        batch.push_with(
            Noop {},
            &EnqueueOptions::new()
                .fair_key(format!("tenant-{i}"))
                .queue("keyed"),
        )?;
    }
    batch.enqueue(&ctx.pool).await?;
    // parked as a claim parks them: the start tag moved into the band above 2^62
    sqlx::query(
        "UPDATE harel.transport_groups SET fair_tag = fair_tag + 4611686018427387904
          WHERE fair_tag IS NOT NULL",
    )
    .execute(&ctx.pool)
    .await?;
    // a few ready jobs of another key, for the claim
    let mut ready = JobBatch::new();
    for _ in 0..100 {
        ready.push_with(
            Noop {},
            &EnqueueOptions::new().fair_key("other").queue("keyed"),
        )?;
    }
    ready.enqueue(&ctx.pool).await?;
    let pool = ctx.pool.clone();
    let operator = tokio::spawn(async move {
        let started = Instant::now();
        client.set_key_limits("keyed", KeyLimits::none()).await?;
        Ok::<_, crate::Error>(started.elapsed().as_secs_f64())
    });
    tokio::time::sleep(Duration::from_millis(1)).await;
    let started = Instant::now();
    let claimed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM harel.harel_claim(gen_random_uuid(), 60000, 256, 0, NULL,
                                                'keyed', 10000)",
    )
    .fetch_one(&pool)
    .await?;
    let claim_s = started.elapsed().as_secs_f64();
    let call_s = operator.await??;
    let parked = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM harel.transport_groups WHERE fair_tag >= 4611686018427387904",
        )
        .fetch_one(&ctx.pool)
        .await
    };
    let left = parked().await?;
    let mut calls = 0;
    let started = Instant::now();
    while parked().await? > 0 && calls < 100 {
        sqlx::query("SELECT * FROM harel.harel_maintain()")
            .execute(&ctx.pool)
            .await?;
        calls += 1;
    }
    let rest_s = started.elapsed().as_secs_f64();
    println!(
        "# keys: {n} parked groups of as many keys, limit removed: the operator's call took \
         {:.0} ms and left {left} parked; a claim during it got {claimed} jobs in {:.0} ms; \
         {calls} housekeeping calls gave the rest back in {:.2} s",
        call_s * 1000.0,
        claim_s * 1000.0,
        rest_s
    );
    ctx.report.figure(
        "keys_limit_removed_call",
        "ms",
        &[call_s * 1000.0],
        None,
        format!("parked={n}"),
    );
    ctx.report.figure(
        "keys_limit_removed_claim",
        "jobs",
        &[claimed as f64],
        Some(Target::AtLeast(1.0)),
        format!("parked={n} label=\"a claim during the operator's call\""),
    );
    Ok(())
}
