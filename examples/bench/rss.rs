//! The worker's peak memory: a child process (this binary, re-run with a hidden argument)
//! that only connects, drains a pre-filled queue with a pool at concurrency 64, and reports
//! its VmHWM (peak resident set) from /proc/self/status. A separate process, so the
//! figure is the worker's alone, not the bench's fills and samples.

use std::process::{ExitCode, Stdio};
use std::time::Instant;

use crate::jobs::Probe;
use crate::queue::{self, expect_empty, fill_single, prepare};
use crate::report::Target;
use crate::{Ctx, Res, bail, db};

/// The hidden first argument that makes this binary the child.
pub const CHILD_ARG: &str = "__rss-child";
const CONCURRENCY: usize = 64;

/// A field of /proc/self/status in kB (`VmHWM`, `VmRSS`).
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The child: `__rss-child <url> <jobs>`.
pub fn child_main(args: &[String]) -> ExitCode {
    let (Some(url), Some(Ok(n))) = (args.first(), args.get(1).map(|n| n.parse::<u64>())) else {
        eprintln!("usage: {CHILD_ARG} <url> <jobs>");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        let pool = db::pool(url, 8, &[]).await?;
        sqlx::query("SELECT 1").execute(&pool).await?;
        let before = status_kb("VmHWM");
        let started = Instant::now();
        let outcome = queue::drain(&pool, Probe::new(), CONCURRENCY, n).await?;
        let elapsed = started.elapsed();
        pool.close().await;
        println!(
            "vmhwm_kb={} vmrss_kb={} vmhwm_before_kb={before} acked={} elapsed_ms={}",
            status_kb("VmHWM"),
            status_kb("VmRSS"),
            outcome.stats.succeeded,
            elapsed.as_millis()
        );
        Ok::<_, crate::Error>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rss child: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Fills, runs the child, returns (peak kB, peak kB before the pool started).
async fn measure(ctx: &Ctx, n: u64) -> Res<(u64, u64)> {
    let n = prepare(&ctx.pool, async || {
        fill_single(&ctx.fill_pool, &ctx.transport, n).await
    })
    .await?;
    let output = tokio::process::Command::new(std::env::current_exe()?)
        .arg(CHILD_ARG)
        .arg(&ctx.url)
        .arg(n.to_string())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "rss child failed ({}): {stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    expect_empty(&ctx.pool, "rss").await?;
    let field = |name: &str| -> Res<u64> {
        stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("rss child: no {name} in {stdout:?}").into())
    };
    if field("acked")? != n {
        bail!("rss child: acked {} of {n}", field("acked")?);
    }
    Ok((field("vmhwm_kb")?, field("vmhwm_before_kb")?))
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(100_000, 10_000);
    let mut peaks = Vec::new();
    let mut bases = Vec::new();
    for _ in 0..ctx.runs {
        let (peak, base) = measure(ctx, n).await?;
        peaks.push(peak as f64 / 1024.0);
        bases.push(base as f64 / 1024.0);
    }
    ctx.report.figure(
        "rss_peak_c64",
        "MB",
        &peaks,
        Some(Target::AtMost(50.0)),
        format!("VmHWM of a worker process after draining {n} jobs at concurrency {CONCURRENCY}"),
    );
    ctx.report.figure(
        "rss_before_pool",
        "MB",
        &bases,
        None,
        "VmHWM of that process once connected, before the pool started",
    );
    Ok(())
}
