//! The README's first command, `cargo run --example quickstart`, must work: run the built
//! example against the test database and check what it reports.

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/<name>`, built by `cargo test` along with the tests.
fn example_binary(name: &str) -> PathBuf {
    let test_binary = std::env::current_exe().expect("test binary path");
    let profile_dir = test_binary
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} not built: run the tests with `cargo test --workspace` (it builds the examples)",
        path.display()
    );
    path
}

#[test]
fn quickstart_runs_every_job_and_exits_zero() {
    let output = Command::new(example_binary("quickstart"))
        .env("DATABASE_URL", harel_jobs_suite::database_url())
        .output()
        .expect("quickstart starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "quickstart failed:\n{stdout}\n{stderr}"
    );
    for expected in [
        "5 jobs enqueued in one transaction",
        "mail \"welcome\" sent to user 42",
        "order 7: step 3 (ship) done",
        "partner acme: attempt 1 failed",
        "partner acme: synced on attempt 2",
        "5 succeeded, 1 retried, 0 dead",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // the steps of order 7 ran in order (one group)
    let position = |needle: &str| stdout.find(needle).expect(needle);
    assert!(position("step 1 (") < position("step 2 ("));
    assert!(position("step 2 (") < position("step 3 ("));
}

#[test]
fn prometheus_prints_the_job_counters() {
    let output = Command::new(example_binary("prometheus"))
        .env("DATABASE_URL", harel_jobs_suite::database_url())
        .output()
        .expect("the prometheus example starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "failed:\n{stdout}\n{stderr}");
    for expected in [
        "harel_jobs_enqueued_total{kind=\"send_receipt\",queue=\"default\"} 3",
        "harel_jobs_succeeded_total{kind=\"send_receipt\",queue=\"default\"} 3",
        "harel_jobs_retried_total{kind=\"sync_partner\",queue=\"default\"} 1",
        "harel_jobs_succeeded_total{kind=\"sync_partner\",queue=\"default\"} 1",
        "harel_jobs_dead_lettered_total{kind=\"import_feed\",queue=\"default\"} 1",
        "harel_jobs_handler_duration_seconds_count{kind=\"send_receipt\",queue=\"default\"} 3",
        "harel_jobs_depth{schema=\"harel_prometheus\",state=\"queued\"}",
        "harel_jobs_queue_depth{schema=\"harel_prometheus\",queue=\"default\",state=\"ready\"}",
        "harel_jobs_queue_lag_seconds{schema=\"harel_prometheus\",queue=\"default\"}",
        "harel_jobs_dead_letters{schema=\"harel_prometheus\"}",
        "# HELP harel_jobs_queue_lag_seconds ",
        "# HELP harel_jobs_enqueued_total ",
        // buckets, not a summary
        "harel_jobs_handler_duration_seconds_bucket{kind=\"send_receipt\",queue=\"default\",le=\"0.001\"}",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

/// The request's span, the enqueue's send span its child, and the job's span the send
/// span's, in one trace.
#[cfg(feature = "opentelemetry")]
#[test]
fn opentelemetry_prints_the_job_span_under_the_request() {
    let output = Command::new(example_binary("opentelemetry"))
        .env("DATABASE_URL", harel_jobs_suite::database_url())
        .output()
        .expect("the opentelemetry example starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "failed:\n{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let request = lines
        .iter()
        .position(|line| line.starts_with("POST /checkout trace="))
        .unwrap_or_else(|| panic!("no request span in:\n{stdout}"));
    // request → the enqueue's producer span → the job's span
    let send = lines.get(request + 1).copied().unwrap_or_default();
    assert!(send.starts_with("  send default trace="), "{stdout}");
    let job = lines.get(request + 2).copied().unwrap_or_default();
    assert!(job.starts_with("    process default trace="), "{stdout}");
    assert!(job.contains("messaging.system=harel-jobs"), "{stdout}");
    assert!(job.contains("messaging.operation.type=process"), "{stdout}");
    let trace = |line: &str| {
        line.split_whitespace()
            .find(|word| word.starts_with("trace="))
            .map(str::to_owned)
    };
    assert!(trace(job).is_some(), "{stdout}");
    assert_eq!(trace(lines[request]), trace(job), "{stdout}");
}
