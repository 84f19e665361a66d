//! harel-jobs' metrics (feature `metrics`) exported for Prometheus with
//! `metrics-exporter-prometheus`: runs a few jobs (one failing once, one for good), then
//! prints what Prometheus would scrape.
//!
//! ```text
//! cargo run --example prometheus                 # print the scrape and exit
//! cargo run --example prometheus -- --serve      # and keep serving it on 127.0.0.1:9464/metrics
//! ```
//!
//! Connects to `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`) and
//! works in its own schema, `harel_prometheus`, created afresh each run.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::{Backoff, Client, JobContext, JobError, JobResult, Schema, job};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

#[derive(Default)]
struct App {
    attempts: AtomicU32,
}

/// Succeeds.
#[job]
async fn send_receipt(_ctx: JobContext<App>, order: i64) {
    let _ = order;
}

/// Fails its first attempt, then succeeds.
#[job]
async fn sync_partner(ctx: JobContext<App>) -> JobResult {
    if ctx.state().attempts.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(JobError::retry("partner unavailable"));
    }
    Ok(())
}

/// Fails for good.
#[job]
async fn import_feed(_ctx: JobContext<App>) -> JobResult {
    Err(JobError::permanent("feed is gone"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args().any(|arg| arg == "--serve");
    // The application installs the recorder; harel-jobs only calls the `metrics` facade.
    // Its histograms as buckets (seconds), rather than the exporter's default summaries.
    let mut builder = PrometheusBuilder::new();
    for name in harel_jobs::telemetry::HISTOGRAMS {
        builder = builder.set_buckets_for_metric(
            Matcher::Full((*name).to_owned()),
            harel_jobs::telemetry::RECOMMENDED_BUCKETS,
        )?;
    }
    if serve {
        builder = builder.with_http_listener(([127, 0, 0, 1], 9464));
    }
    let (recorder, exporter) = builder.build()?;
    let scrape = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    tokio::spawn(exporter);
    // the help texts (`# HELP`) and units; a worker pool does it too when it starts
    harel_jobs::telemetry::describe();

    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let pool = harel_jobs::connect(&url).await?;
    sqlx::query("DROP SCHEMA IF EXISTS harel_prometheus CASCADE")
        .execute(&pool)
        .await?;
    let client = Client::with_schema(pool.clone(), Schema::new("harel_prometheus")?);
    client.migrate().await?;

    let mut tx = pool.begin().await?;
    for order in 1..=3 {
        client.enqueue(&mut *tx, SendReceipt { order }).await?;
    }
    client.enqueue(&mut *tx, SyncPartner {}).await?;
    client.enqueue(&mut *tx, ImportFeed {}).await?;
    tx.commit().await?;

    let handle = client
        .worker(App::default())
        .register::<SendReceipt>()
        .register::<SyncPartner>()
        .register::<ImportFeed>()
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .build()?
        .start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while handle.stats().succeeded < 4 || handle.stats().dead_lettered < 1 {
        if Instant::now() > deadline {
            return Err("the jobs did not finish within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if serve {
        println!("serving http://127.0.0.1:9464/metrics; Ctrl-C to stop");
        tokio::signal::ctrl_c().await?;
    }
    handle.shutdown().await?;
    println!("{}", scrape.render());
    Ok(())
}
