//! A long-running worker process. Run as many copies as you like, on as many machines,
//! against one database: they share the work, one consumer per group at a time.
//!
//! ```text
//! cargo run --example worker                      # work until Ctrl-C or SIGTERM
//! cargo run --example worker -- enqueue 1000      # enqueue 1,000 jobs and exit
//! ```
//!
//! Settings from the environment: `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`), `WORKER_CONCURRENCY` (default 16),
//! `RUST_LOG` (default `info`).

use std::time::Duration;

use harel_jobs::{JobBatch, JobContext, JobResult, Worker, job};

/// The state handlers share: here, the process id, to see who ran what.
struct WorkerState {
    pid: u32,
}

/// Makes a thumbnail (pretends to: sleeps a little). Jobs of one image run in order.
#[job(max_attempts = 5, timeout = "30s")]
async fn make_thumbnail(
    ctx: JobContext<WorkerState>,
    #[group] image_id: i64,
    size: u32,
) -> JobResult {
    tokio::time::sleep(Duration::from_millis(5)).await;
    tracing::info!(
        pid = ctx.state().pid,
        image_id,
        size,
        attempt = ctx.attempt(),
        "thumbnail made"
    );
    Ok(())
}

/// Emails a report; no group, so reports run fully in parallel.
#[job(max_attempts = 3, backoff = "1s")]
async fn email_report(ctx: JobContext<WorkerState>, recipient: String) -> JobResult {
    tracing::info!(pid = ctx.state().pid, %recipient, "report sent");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    // waits (with backoff, up to 30 s) while the database is not up yet
    let pool = harel_jobs::connect(&url).await?;
    // safe to run from every process at once
    harel_jobs::migrate(&pool).await?;

    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("enqueue") {
        let count: u32 = args.get(1).map(|n| n.parse()).transpose()?.unwrap_or(100);
        let mut batch = JobBatch::new();
        for n in 0..count {
            if n % 10 == 0 {
                batch.push(EmailReport {
                    recipient: format!("ops+{n}@example.com"),
                })?;
            } else {
                batch.push(MakeThumbnail {
                    image_id: i64::from(n % 50),
                    size: 64 * (n % 4 + 1),
                })?;
            }
        }
        let ids = batch.enqueue(&pool).await?;
        println!("enqueued {} jobs", ids.len());
        return Ok(());
    }

    let concurrency = std::env::var("WORKER_CONCURRENCY")
        .ok()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(16);
    let worker = Worker::builder(
        pool,
        WorkerState {
            pid: std::process::id(),
        },
    )
    .register::<MakeThumbnail>()
    .register::<EmailReport>()
    .concurrency(concurrency)
    .build()?;
    let mut handle = worker.start();
    tracing::info!(concurrency, "worker running; Ctrl-C or SIGTERM to stop");

    tokio::select! {
        () = shutdown_signal() => {
            tracing::info!("stopping: finishing running jobs, giving back the rest");
            let stats = handle.shutdown().await?;
            tracing::info!(?stats, "stopped");
        }
        // the pool stopped on its own (one of its tasks failed, logged): exit with its
        // error, and let the process supervisor start a new worker
        stopped = handle.stopped() => {
            stopped?;
        }
    }
    Ok(())
}

/// Ctrl-C or SIGTERM (what `kill`, systemd and Kubernetes send).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
