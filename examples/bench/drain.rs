//! Scenarios 2 and 3, drain and grouped drain: pre-enqueued no-op jobs through the worker
//! pool; jobs/s from the pool's start to the last ack (the fill is not timed).

use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::PgPool;

use crate::cpu::{CpuSplit, print_cpu, with_cpu};
use crate::db;
use crate::jobs::Probe;
use crate::noise::{self, Noise};
use crate::queue::{self, expect_empty, fill_groups, fill_single, prepare};
use crate::report::{Summary, Target};
use crate::{Ctx, Res, bail};

/// The longest a noisy neighbour may run (it is stopped as soon as its drain ends).
const NOISE_BOUND: Duration = Duration::from_secs(600);

/// The drain target (jobs/s).
pub const DRAIN_TARGET: f64 = 35_000.0;

/// How the queue is filled before a drain.
#[derive(Clone, Copy)]
pub enum Fill {
    /// `n` jobs, each in a group of its own.
    Single(u64),
    /// `groups` FIFO chains of `per_group` jobs.
    Groups { groups: u64, per_group: u64 },
}

impl Fill {
    pub fn jobs(self) -> u64 {
        match self {
            Fill::Single(n) => n,
            Fill::Groups { groups, per_group } => groups * per_group,
        }
    }
}

/// Fills fresh, drains with a pool of `concurrency` on `worker_pool`, checks that every job
/// ran once (in order within groups) and that the queue is empty. Returns jobs/s.
pub async fn drain_once(
    ctx: &Ctx,
    worker_pool: &PgPool,
    concurrency: usize,
    fill: Fill,
) -> Res<f64> {
    drain_once_retaining(ctx, worker_pool, concurrency, fill, None).await
}

/// [`drain_once`] with a pool that keeps completed jobs for `retain` when it is set (and
/// then checks that every job is in the history).
pub async fn drain_once_retaining(
    ctx: &Ctx,
    worker_pool: &PgPool,
    concurrency: usize,
    fill: Fill,
    retain: Option<Duration>,
) -> Res<f64> {
    let (rate, _) = drain_once_beside(ctx, worker_pool, concurrency, fill, retain, None).await?;
    Ok(rate)
}

/// [`drain_once_retaining`] with `noise` running beside the drain (started after the fill,
/// stopped when the queue is drained) when it is set. Returns jobs/s and the CPU time the
/// drain took (this process, the bench database's backends, the machine).
pub async fn drain_once_beside(
    ctx: &Ctx,
    worker_pool: &PgPool,
    concurrency: usize,
    fill: Fill,
    retain: Option<Duration>,
    noise: Option<noise::Kind>,
) -> Res<(f64, CpuSplit)> {
    let n = prepare(&ctx.pool, async || match fill {
        Fill::Single(n) => fill_single(&ctx.fill_pool, &ctx.transport, n).await,
        Fill::Groups { groups, per_group } => {
            fill_groups(&ctx.fill_pool, &ctx.transport, groups, per_group).await
        }
    })
    .await?;
    let probe = match fill {
        Fill::Single(_) => Probe::new(),
        Fill::Groups { .. } => Probe::with_fifo_check(),
    };
    let running = noise
        .map(|kind| Noise::start(kind, NOISE_BOUND))
        .transpose()?;
    let drained = with_cpu(async {
        let outcome =
            queue::drain_retaining(worker_pool, probe.clone(), concurrency, n, retain).await;
        drop(running);
        outcome
    })
    .await;
    let (outcome, cpu) = drained?;
    expect_empty(&ctx.pool, "drain").await?;
    if retain.is_some() {
        let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM harel.job_history")
            .fetch_one(&ctx.pool)
            .await?;
        if kept as u64 != n {
            bail!("drain: {kept} jobs retained of {n}");
        }
    }
    if probe.started() != n {
        bail!("drain: {} handler runs for {n} jobs", probe.started());
    }
    let violations = probe.fifo_violations.load(Ordering::Relaxed);
    if violations > 0 {
        bail!("drain: {violations} jobs started before an earlier job of their group");
    }
    Ok((outcome.rate(), cpu))
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(100_000, 5_000);
    let fill = Fill::Single(n);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    let async_pool = db::pool(&ctx.url, 8, &[("synchronous_commit", "off")]).await?;
    // warm-up (connections, plan caches, page cache), not measured
    drain_once(ctx, &worker_pool, 64, Fill::Single(n / 5)).await?;
    drain_once(ctx, &async_pool, 64, Fill::Single(n / 5)).await?;

    let cases: [(&str, &PgPool, usize); 3] = [
        ("drain_c16", &worker_pool, 16),
        ("drain_c64", &worker_pool, 64),
        ("drain_c64_sync_commit_off", &async_pool, 64),
    ];
    let mut samples = vec![Vec::new(); cases.len()];
    for _ in 0..ctx.runs {
        for (i, (_, pool, concurrency)) in cases.iter().enumerate() {
            samples[i].push(drain_once(ctx, pool, *concurrency, fill).await?);
        }
    }
    for (i, (name, _, _)) in cases.iter().enumerate() {
        let (target, label) = if name.ends_with("sync_commit_off") {
            (
                None,
                " label=\"synchronous_commit=off for the worker's sessions only\"",
            )
        } else {
            (Some(Target::AtLeast(DRAIN_TARGET)), "")
        };
        ctx.report.figure(
            *name,
            "jobs/s",
            &samples[i],
            target,
            format!("jobs={n} groups={n}{label}"),
        );
    }
    worker_pool.close().await;
    async_pool.close().await;
    Ok(())
}

/// The cost of retention: the same drain at concurrency 16 and 64 with and without
/// `retain_completed`, interleaved.
pub async fn run_retention(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(100_000, 5_000);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    let keep = Some(Duration::from_secs(3600));
    drain_once_retaining(ctx, &worker_pool, 64, Fill::Single(n / 5), keep).await?;
    let cases: [(&str, usize, Option<Duration>); 4] = [
        ("drain_c16", 16, None),
        ("drain_c16_retained", 16, keep),
        ("drain_c64", 64, None),
        ("drain_c64_retained", 64, keep),
    ];
    let mut samples = vec![Vec::new(); cases.len()];
    for _ in 0..ctx.runs {
        for (i, (_, concurrency, retain)) in cases.iter().enumerate() {
            let rate =
                drain_once_retaining(ctx, &worker_pool, *concurrency, Fill::Single(n), *retain)
                    .await?;
            samples[i].push(rate);
        }
    }
    for (i, (name, _, retain)) in cases.iter().enumerate() {
        let label = if retain.is_some() {
            " label=\"completed jobs kept 1 h (retain_completed)\""
        } else {
            ""
        };
        ctx.report.figure(
            *name,
            "jobs/s",
            &samples[i],
            None,
            format!("jobs={n} groups={n}{label}"),
        );
    }
    worker_pool.close().await;
    Ok(())
}

/// The cost of a fleet-wide limit: the same drain at concurrency 16 and 64 on the default
/// queue without a limit, with a concurrency limit too high to bind (every claim then
/// locks the queue's row and counts its live leases), and with a limit per fairness key too
/// high to bind (every claim locks the row and counts the live leases of each key it meets:
/// here the one key of jobs without one), interleaved.
pub async fn run_limits(ctx: &Ctx) -> Res<()> {
    #[derive(Clone, Copy, PartialEq)]
    enum Limit {
        None,
        Queue,
        Key,
    }
    let n = ctx.size(100_000, 5_000);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    let client = harel_jobs::Client::new(ctx.pool.clone());
    drain_once(ctx, &worker_pool, 64, Fill::Single(n / 5)).await?;
    let cases: [(&str, usize, Limit); 6] = [
        ("drain_c16", 16, Limit::None),
        ("drain_c16_limited", 16, Limit::Queue),
        ("drain_c16_key_limited", 16, Limit::Key),
        ("drain_c64", 64, Limit::None),
        ("drain_c64_limited", 64, Limit::Queue),
        ("drain_c64_key_limited", 64, Limit::Key),
    ];
    let mut samples = vec![Vec::new(); cases.len()];
    for _ in 0..ctx.runs {
        for (i, (_, concurrency, limit)) in cases.iter().enumerate() {
            let queue_limits = match limit {
                Limit::Queue => harel_jobs::QueueLimits::none().concurrency(1_000_000),
                _ => harel_jobs::QueueLimits::none(),
            };
            let key_limits = match limit {
                Limit::Key => harel_jobs::KeyLimits::none().concurrency(1_000_000),
                _ => harel_jobs::KeyLimits::none(),
            };
            client.set_limits("default", queue_limits).await?;
            client.set_key_limits("default", key_limits).await?;
            let rate = drain_once(ctx, &worker_pool, *concurrency, Fill::Single(n)).await?;
            samples[i].push(rate);
        }
    }
    client
        .set_limits("default", harel_jobs::QueueLimits::none())
        .await?;
    client
        .set_key_limits("default", harel_jobs::KeyLimits::none())
        .await?;
    for (i, (name, _, limit)) in cases.iter().enumerate() {
        let label = match limit {
            Limit::None => "",
            Limit::Queue => " label=\"concurrency limit 1,000,000 (not binding)\"",
            Limit::Key => " label=\"limit per key 1,000,000 (not binding)\"",
        };
        ctx.report.figure(
            *name,
            "jobs/s",
            &samples[i],
            None,
            format!("jobs={n} groups={n}{label}"),
        );
    }
    worker_pool.close().await;
    Ok(())
}

pub async fn run_grouped(ctx: &Ctx) -> Res<()> {
    let groups = ctx.size(1_000, 100);
    let per_group = ctx.size(100, 50);
    let fill = Fill::Groups { groups, per_group };
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    drain_once(
        ctx,
        &worker_pool,
        64,
        Fill::Groups {
            groups,
            per_group: per_group / 5,
        },
    )
    .await?;
    let mut c16 = Vec::new();
    let mut c64 = Vec::new();
    for _ in 0..ctx.runs {
        c16.push(drain_once(ctx, &worker_pool, 16, fill).await?);
        c64.push(drain_once(ctx, &worker_pool, 64, fill).await?);
    }
    let extra = format!("jobs={} groups={groups} chain={per_group}", fill.jobs());
    ctx.report
        .figure("grouped_drain_c16", "jobs/s", &c16, None, extra.clone());
    ctx.report
        .figure("grouped_drain_c64", "jobs/s", &c64, None, extra);
    worker_pool.close().await;
    Ok(())
}

/// The drain beside a noisy neighbour (`bench noisy`): quiet and noisy rounds alternate, at
/// concurrency 16 and 64; the noise is one `nice 19` CPU loop per core and an fsync writer
/// (`HAREL_BENCH_NOISE=cpu` or `disk`: one half only). Reports each figure and the noisy ÷
/// quiet ratio of the medians (goal: ≥ 0.75).
/// Where a noisy drain's throughput went: the CPU the queue (this process and the
/// PostgreSQL server) obtained per second of wall time, and the CPU it spent per job,
/// quiet and noisy (medians). Throughput is their quotient, so the two ratios say whether
/// the noise took CPU from the queue (the first) or made each job cost more (the second:
/// spinning, context switches, cache misses).
fn print_cpu_share(
    concurrency: usize,
    label: &str,
    jobs: u64,
    quiet: &[CpuSplit],
    noisy: &[CpuSplit],
) {
    let median = |values: Vec<f64>| Summary::of(&values).median;
    let obtained = |cpu: &[CpuSplit]| {
        median(
            cpu.iter()
                .map(|c| (c.bench + c.server) / c.wall.max(1e-9))
                .collect(),
        )
    };
    let per_job = |cpu: &[CpuSplit]| {
        median(
            cpu.iter()
                .map(|c| 1e6 * (c.bench + c.server) / jobs as f64)
                .collect(),
        )
    };
    let (quiet_cores, noisy_cores) = (obtained(quiet), obtained(noisy));
    let (quiet_us, noisy_us) = (per_job(quiet), per_job(noisy));
    println!(
        "# drain_c{concurrency}: the queue's CPU (bench + server), quiet / {label}: {quiet_cores:.2} / {noisy_cores:.2} cores obtained (ratio {:.2}), {quiet_us:.1} / {noisy_us:.1} us per job (ratio {:.2}); throughput ratio = cores ratio ÷ per-job ratio = {:.2}",
        noisy_cores / quiet_cores.max(1e-9),
        noisy_us / quiet_us.max(1e-9),
        (noisy_cores / quiet_cores.max(1e-9)) / (noisy_us / quiet_us.max(1e-9)).max(1e-9),
    );
}

pub async fn run_noisy(ctx: &Ctx) -> Res<()> {
    let kind = match std::env::var("HAREL_BENCH_NOISE").as_deref() {
        Ok("cpu") => noise::Kind::Cpu,
        Ok("disk") => noise::Kind::Disk,
        _ => noise::Kind::Both,
    };
    println!("# noise: {}", Noise::describe(kind));
    let n = ctx.size(100_000, 5_000);
    let fill = Fill::Single(n);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    drain_once(ctx, &worker_pool, 64, Fill::Single(n / 5)).await?;
    for concurrency in [16, 64] {
        let (mut quiet, mut noisy) = (Vec::new(), Vec::new());
        let (mut quiet_cpu, mut noisy_cpu) = (Vec::new(), Vec::new());
        for _ in 0..ctx.runs {
            let (rate, cpu) =
                drain_once_beside(ctx, &worker_pool, concurrency, fill, None, None).await?;
            print_cpu(&format!("drain_c{concurrency}_quiet"), n, "job", &cpu);
            quiet.push(rate);
            quiet_cpu.push(cpu);
            let (rate, cpu) =
                drain_once_beside(ctx, &worker_pool, concurrency, fill, None, Some(kind)).await?;
            print_cpu(
                &format!("drain_c{concurrency}_{}", kind.label()),
                n,
                "job",
                &cpu,
            );
            noisy.push(rate);
            noisy_cpu.push(cpu);
        }
        let extra = format!("jobs={n} groups={n}");
        let quiet_median = ctx.report.figure(
            format!("drain_c{concurrency}_quiet"),
            "jobs/s",
            &quiet,
            None,
            extra.clone(),
        );
        let noisy_median = ctx.report.figure(
            format!("drain_c{concurrency}_{}", kind.label()),
            "jobs/s",
            &noisy,
            None,
            extra,
        );
        println!(
            "# drain_c{concurrency}: {} ÷ quiet = {:.2} (goal >= 0.75)",
            kind.label(),
            noisy_median / quiet_median
        );
        print_cpu_share(concurrency, kind.label(), n, &quiet_cpu, &noisy_cpu);
    }
    worker_pool.close().await;
    Ok(())
}
