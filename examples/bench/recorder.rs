//! Scenario `metrics` (by name only), and `--recorder`: what harel-jobs' metrics (feature
//! `metrics`) cost a drain.
//!
//! A process has one global `metrics` recorder, installed for good, so the scenario installs
//! a switch: a Prometheus recorder (`metrics-exporter-prometheus`, as an application would
//! export with) behind a flag. Off, every registration returns the no-op handle, as with no
//! recorder installed (one atomic load and one virtual call more than no recorder at all).
//! `drain_c64` then runs off and on, interleaved, `--runs` times each (median of each);
//! the figure lines say which, and a `#` line gives the ratio. `--recorder` switches the
//! recorder on for every scenario of the run instead.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::drain::{Fill, drain_once};
use crate::{Ctx, Res, db};

/// A Prometheus recorder that records only while switched on.
struct Switch {
    on: AtomicBool,
    inner: PrometheusRecorder,
}

impl Recorder for Switch {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_counter(key, metadata)
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_gauge(key, metadata)
        } else {
            Gauge::noop()
        }
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_histogram(key, metadata)
        } else {
            Histogram::noop()
        }
    }
}

/// The installed switch and its scrape handle.
static SWITCH: OnceLock<(Arc<Switch>, PrometheusHandle)> = OnceLock::new();

struct Shared(Arc<Switch>);

impl Recorder for Shared {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_counter(key, unit, description);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_gauge(key, unit, description);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.0.describe_histogram(key, unit, description);
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.0.register_counter(key, metadata)
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(key, metadata)
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.0.register_histogram(key, metadata)
    }
}

/// Installs the switch (once) as the global recorder, and returns it.
fn switch() -> Res<&'static (Arc<Switch>, PrometheusHandle)> {
    if let Some(installed) = SWITCH.get() {
        return Ok(installed);
    }
    let inner = PrometheusBuilder::new().build_recorder();
    let handle = inner.handle();
    let switch = Arc::new(Switch {
        on: AtomicBool::new(false),
        inner,
    });
    metrics::set_global_recorder(Shared(Arc::clone(&switch)))
        .map_err(|error| format!("installing the recorder: {error}"))?;
    Ok(SWITCH.get_or_init(|| (switch, handle)))
}

/// `--recorder`: the Prometheus recorder on for the whole run.
pub fn install_for_run() -> Res<()> {
    switch()?.0.on.store(true, Ordering::Relaxed);
    println!("# recorder: metrics-exporter-prometheus, on for every scenario");
    Ok(())
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let (switch, handle) = switch()?;
    let before = switch.on.load(Ordering::Relaxed);
    let n = ctx.size(100_000, 5_000);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;
    // warm-up, both ways
    for on in [false, true] {
        switch.on.store(on, Ordering::Relaxed);
        drain_once(ctx, &worker_pool, 64, Fill::Single(n / 5)).await?;
    }
    let mut without = Vec::new();
    let mut with = Vec::new();
    for _ in 0..ctx.runs {
        switch.on.store(false, Ordering::Relaxed);
        without.push(drain_once(ctx, &worker_pool, 64, Fill::Single(n)).await?);
        switch.on.store(true, Ordering::Relaxed);
        with.push(drain_once(ctx, &worker_pool, 64, Fill::Single(n)).await?);
    }
    switch.on.store(before, Ordering::Relaxed);
    let off = ctx.report.figure(
        "drain_c64_no_recorder",
        "jobs/s",
        &without,
        None,
        format!("jobs={n} label=\"metrics feature on, recorder switched off (no-op handles)\""),
    );
    let on = ctx.report.figure(
        "drain_c64_prometheus_recorder",
        "jobs/s",
        &with,
        None,
        format!("jobs={n} label=\"metrics-exporter-prometheus recording\""),
    );
    println!(
        "# metrics: with a recorder / without = {:.3} (medians of {} interleaved runs)",
        on / off,
        ctx.runs
    );
    // evidence that it recorded
    let scrape = handle.render();
    let succeeded: Vec<&str> = scrape
        .lines()
        .filter(|line| line.starts_with("harel_jobs_succeeded_total"))
        .collect();
    println!("# recorded: {succeeded:?}");
    worker_pool.close().await;
    Ok(())
}
