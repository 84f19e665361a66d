//! A trace from a request, through the enqueue, to the job's attempt (feature
//! `opentelemetry`): `tracing-opentelemetry` over an OpenTelemetry SDK tracer that keeps its
//! spans in memory (no collector, no network), then prints them as a tree.
//!
//! ```text
//! cargo run --example opentelemetry --features opentelemetry
//! ```
//!
//! A real application exports with the exporter of its choice (OTLP, …); nothing here
//! changes but the tracer provider. Connects to `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and works in its own schema,
//! `harel_opentelemetry`, created afresh each run.

use std::time::{Duration, Instant};

use harel_jobs::{Client, JobContext, Schema, job};
use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// Sends the receipt of an order (here: logs inside its span).
#[job]
async fn send_receipt(_ctx: JobContext<()>, order: i64) {
    tracing::info!(order, "receipt sent");
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The application's tracing: an OpenTelemetry layer over the SDK's tracer.
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("shop")));
    tracing::subscriber::set_global_default(subscriber)?;

    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let pool = harel_jobs::connect(&url).await?;
    sqlx::query("DROP SCHEMA IF EXISTS harel_opentelemetry CASCADE")
        .execute(&pool)
        .await?;
    let client = Client::with_schema(pool.clone(), Schema::new("harel_opentelemetry")?);
    client.migrate().await?;

    // A request handler: the enqueue inside its span stores the span's context with the job.
    let checkout = async {
        let mut tx = pool.begin().await?;
        client.enqueue(&mut *tx, SendReceipt { order: 42 }).await?;
        tx.commit().await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    checkout
        .instrument(tracing::info_span!("POST /checkout"))
        .await?;

    // The worker (here in the same process; usually another one): the job's span
    // (`process default`) has the enqueue's producer span (`send default`, a child of the
    // request's) as its parent.
    let handle = client.worker(()).register::<SendReceipt>().build()?.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    while handle.stats().succeeded < 1 {
        if Instant::now() > deadline {
            return Err("the job did not finish within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await?;

    provider.force_flush()?;
    let spans = exporter.get_finished_spans()?;
    print_tree(&spans, opentelemetry::trace::SpanId::INVALID, 0);
    provider.shutdown()?;
    Ok(())
}

/// Prints the spans whose parent is `parent`, then their children, indented.
fn print_tree(spans: &[SpanData], parent: opentelemetry::trace::SpanId, depth: usize) {
    for span in spans.iter().filter(|span| span.parent_span_id == parent) {
        let attributes: Vec<String> = span
            .attributes
            .iter()
            .filter(|kv| kv.key.as_str().starts_with("messaging."))
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        println!(
            "{:indent$}{} trace={} span={} {}",
            "",
            span.name,
            span.span_context.trace_id(),
            span.span_context.span_id(),
            attributes.join(" "),
            indent = depth * 2
        );
        print_tree(spans, span.span_context.span_id(), depth + 1);
    }
}
