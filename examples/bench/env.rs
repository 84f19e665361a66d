//! What the figures were measured on: the machine, the server and its settings.

use crate::{Ctx, Res};

/// Server settings that matter for a queue's throughput and latency.
const SETTINGS: &[&str] = &[
    "shared_buffers",
    "synchronous_commit",
    "fsync",
    "max_connections",
    "wal_level",
    "full_page_writes",
    "wal_compression",
    "max_wal_size",
    "checkpoint_timeout",
    "work_mem",
    "autovacuum",
    "track_functions",
    "shared_preload_libraries",
    "jit",
];

/// Prints the machine, the server's version and settings, and the load right now.
pub async fn print(ctx: &Ctx) -> Res<()> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_mb = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb / 1024)
        .unwrap_or(0);
    println!("# machine nproc={cores} model=\"{model}\" mem_total_mb={mem_mb}");
    println!("# load {}", loadavg());

    let version: String = sqlx::query_scalar("SELECT version()")
        .fetch_one(&ctx.pool)
        .await?;
    println!("# postgres {version}");
    let mut line = String::from("# pg_settings");
    for name in SETTINGS {
        let value: Option<String> = sqlx::query_scalar("SELECT current_setting($1, true)")
            .bind(name)
            .fetch_one(&ctx.pool)
            .await?;
        line.push_str(&format!(" {name}={}", value.unwrap_or_default()));
    }
    println!("{line}");
    let server_local: bool = sqlx::query_scalar(
        "SELECT coalesce(inet_server_addr() << '127.0.0.0/8'::inet OR inet_server_addr() = '::1'::inet, true)",
    )
    .fetch_one(&ctx.pool)
    .await?;
    println!(
        "# database={} server_on_this_machine={server_local} schema=harel",
        ctx.db_name
    );
    let pgbench = std::process::Command::new("pgbench")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "not found".to_owned());
    println!("# pgbench {pgbench}");
    if let Some(rev) = git_revision() {
        println!("# git {rev}");
    }
    Ok(())
}

/// The latency of a tiny committed write (autocommit INSERT, `synchronous_commit` as the
/// server has it): mostly the WAL flush, i.e. the disk. Printed around each scenario,
/// because every claim and ack pays it and it moves with the machine's I/O load.
pub async fn commit_probe(ctx: &Ctx) -> Res<String> {
    sqlx::query("CREATE TABLE IF NOT EXISTS public.bench_commit_probe (x int)")
        .execute(&ctx.pool)
        .await?;
    let mut times = Vec::new();
    for i in 0..50 {
        let started = std::time::Instant::now();
        sqlx::query("INSERT INTO public.bench_commit_probe VALUES ($1)")
            .bind(i)
            .execute(&ctx.pool)
            .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    sqlx::query("TRUNCATE public.bench_commit_probe")
        .execute(&ctx.pool)
        .await?;
    times.sort_by(f64::total_cmp);
    Ok(format!(
        "commit_probe_ms p50={:.2} p90={:.2} (50 autocommit INSERTs)",
        crate::report::quantile(&times, 0.5),
        crate::report::quantile(&times, 0.9)
    ))
}

/// Steal and iowait of the machine since boot are useless; this samples them over 1 s.
pub fn cpu_sample() -> String {
    let a = crate::cpu::machine_counters();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let b = crate::cpu::machine_counters();
    if a.len() < 8 || b.len() < 8 {
        return String::new();
    }
    let d: Vec<u64> = (0..8).map(|i| b[i].saturating_sub(a[i])).collect();
    let total = d.iter().sum::<u64>().max(1) as f64;
    format!(
        "cpu_idle={:.0}% iowait={:.0}% steal={:.0}%",
        100.0 * d[3] as f64 / total,
        100.0 * d[4] as f64 / total,
        100.0 * d[7] as f64 / total
    )
}

/// `loadavg=1m,5m,15m` from /proc/loadavg.
pub fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let parts: Vec<&str> = text.split_whitespace().take(3).collect();
    format!("loadavg={}", parts.join(","))
}

fn git_revision() -> Option<String> {
    let dir = env!("CARGO_MANIFEST_DIR");
    let rev = std::process::Command::new("git")
        .args(["-C", dir, "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let dirty = std::process::Command::new("git")
        .args(["-C", dir, "status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    Some(format!(
        "{}{}",
        String::from_utf8_lossy(&rev.stdout).trim(),
        if dirty { " (uncommitted changes)" } else { "" }
    ))
}
