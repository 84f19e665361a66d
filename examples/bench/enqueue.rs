//! Scenario 1, enqueue: jobs/s of one job per transaction (1 and 16 concurrent tasks) and
//! of `JobBatch`es of 1,000 and of 20,000 (one round trip each: a bulk load). Plus a diagnostic: 16 tasks enqueueing
//! jobs delayed by 1 ms, for which `harel_publish` sends no NOTIFY.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::{Enqueue, JobBatch};

use crate::jobs::Noop;
use crate::queue::{counts, reset};
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
