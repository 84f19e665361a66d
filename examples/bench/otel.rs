//! `--otel` (a bench built with `--features opentelemetry`): the run's tracing subscriber
//! gets an OpenTelemetry layer, as an application that traces would have, so that every
//! job's attempt span is an OpenTelemetry span too. Its tracer is the SDK's with the batch
//! processor an application would use, over an exporter that discards what it gets (the
//! figure is the cost on the worker's side, not a collector's). Compare with the same
//! binary without `--otel` (the layer absent: the spans cost what any disabled `tracing`
//! span costs), and with a bench built without the feature.

use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Spans the exporter was handed (evidence that the layer saw the jobs).
static EXPORTED: AtomicU64 = AtomicU64::new(0);

/// Counts and drops every span it is handed.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        EXPORTED.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Flushes and shuts the tracer down, and says how many spans reached the exporter (the
/// batch processor drops what overflows its queue of 2,048: an exporter that keeps up is
/// the application's business).
pub fn finish(provider: SdkTracerProvider) {
    let _ = provider.force_flush();
    let _ = provider.shutdown();
    println!(
        "# opentelemetry: {} spans exported (and discarded)",
        EXPORTED.load(Ordering::Relaxed)
    );
}

/// Installs the run's subscriber: the usual `fmt` layer (warnings), and an OpenTelemetry
/// layer that sees `info` spans. Returns the provider, to be shut down at the end.
pub fn install() -> SdkTracerProvider {
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("warn,sqlx::query=error")),
        );
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("bench"))
        .with_filter(LevelFilter::INFO);
    tracing_subscriber::registry().with(fmt).with(otel).init();
    println!("# tracing: an OpenTelemetry layer (SDK tracer, batch processor, spans discarded)");
    provider
}
