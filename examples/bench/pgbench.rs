//! Running pgbench on the bench database with the scripts of `examples/bench/pgbench/`.

use std::path::PathBuf;
use std::process::Stdio;

use crate::{Res, bail};

/// The unbatched script: one claim (limit 1) + one ack per transaction.
pub const CLAIM_ACK: (&str, &str) = ("claim_ack.sql", include_str!("pgbench/claim_ack.sql"));
/// The batched script: one claim of `:k` + one ack of `:k` per transaction.
pub const CLAIM_ACK_BATCH: (&str, &str) = (
    "claim_ack_batch.sql",
    include_str!("pgbench/claim_ack_batch.sql"),
);

/// The floor scenario's script: one lease of `:k` jobs + one delete of them per transaction,
/// on `public.floor_jobs` ([`FLOOR_TABLE`]).
pub const FLOOR: (&str, &str) = ("floor.sql", include_str!("pgbench/floor.sql"));
/// The table [`FLOOR`] runs on, and its index.
pub const FLOOR_TABLE: &str = include_str!("pgbench/floor_table.sql");

/// Whether pgbench can be run.
pub fn available() -> bool {
    std::process::Command::new("pgbench")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What one pgbench run reported.
#[derive(Debug)]
pub struct PgbenchRun {
    /// Transactions per second, without the initial connection time.
    pub tps: f64,
    /// Transactions processed (all clients).
    pub processed: u64,
}

/// One pgbench run of `script` with `clients` clients, `transactions` transactions each,
/// in prepared mode, against `url`. Fails unless every transaction succeeded.
pub async fn run(
    url: &str,
    script: (&str, &str),
    clients: u32,
    transactions: u64,
    defines: &[(&str, String)],
) -> Res<PgbenchRun> {
    // the scripts are embedded, so the binary runs from anywhere
    let path: PathBuf =
        std::env::temp_dir().join(format!("harel_bench_{}_{}", std::process::id(), script.0));
    std::fs::write(&path, script.1)?;
    let threads = clients.min(
        std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1),
    );
    let mut command = tokio::process::Command::new("pgbench");
    command
        .arg("--no-vacuum")
        .args(["--protocol", "prepared"])
        .args(["--client", &clients.to_string()])
        .args(["--jobs", &threads.to_string()])
        .args(["--transactions", &transactions.to_string()])
        .arg("--file")
        .arg(&path);
    for (name, value) in defines {
        command.arg("--define").arg(format!("{name}={value}"));
    }
    command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = command.output().await;
    let _ = std::fs::remove_file(&path);
    let output = output?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!(
            "pgbench {} failed ({}):\n{stdout}\n{}",
            script.0,
            output.status,
            stderr.lines().take(20).collect::<Vec<_>>().join("\n")
        );
    }
    let field = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let tps: f64 = field("tps = ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no tps in pgbench's output:\n{stdout}"))?;
    let processed: u64 = field("number of transactions actually processed:")
        .and_then(|rest| rest.split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no transaction count in pgbench's output:\n{stdout}"))?;
    let failed: u64 = field("number of failed transactions:")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let expected = u64::from(clients) * transactions;
    if processed != expected || failed != 0 {
        bail!(
            "pgbench {}: {processed} of {expected} transactions processed, {failed} failed",
            script.0
        );
    }
    Ok(PgbenchRun { tps, processed })
}

/// What a run of a batched script (`:k` jobs per transaction) did.
pub struct BatchedRun {
    /// Jobs completed: transactions × k.
    pub jobs: u64,
    /// Jobs per second.
    pub jobs_per_s: f64,
}

/// Runs a script that completes `k` jobs per transaction (`-D k=…`) with `clients`
/// clients on a queue filled with `n` jobs, using 98% of them: a margin, so that no
/// transaction ever finds fewer than `k` (the scripts fail when they do).
pub async fn run_batched(
    url: &str,
    script: (&str, &str),
    k: u64,
    clients: u32,
    n: u64,
) -> Res<BatchedRun> {
    let per_client = (n * 98 / 100) / (k * u64::from(clients));
    let run = run(url, script, clients, per_client, &[("k", k.to_string())]).await?;
    Ok(BatchedRun {
        jobs: run.processed * k,
        jobs_per_s: run.tps * k as f64,
    })
}
