//! The benchmark's jobs (written by hand: `impl Job` + `impl Handler`) and the probe their
//! handlers report to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use harel_jobs::{Handler, Job, JobContext, JobId, JobResult};
use serde::{Deserialize, Serialize};

/// The worker pool's state: what the handlers saw.
#[derive(Default)]
pub struct Probe {
    /// Handlers started.
    pub started: AtomicU64,
    /// Stamp the time every this many handler starts (0: never).
    pub stamp_every: u64,
    /// Those stamps, in order of the count.
    pub stamps: Mutex<Vec<(u64, Instant)>>,
    /// Check that each group's messages start in publish order.
    pub check_fifo: bool,
    last_id: Mutex<HashMap<String, JobId>>,
    /// Groups whose messages started out of order.
    pub fifo_violations: AtomicU64,
    /// Record enqueue→start delays of [`Stamped`] jobs.
    pub record: AtomicBool,
    /// (enqueue instant in µs since the epoch, delay in µs)
    pub delays: Mutex<Vec<(u64, u64)>>,
    /// How long each [`Stamped`] and [`Tenant`] handler works (sleeps) after recording its
    /// start.
    pub work: Duration,
    /// Each handler works a uniformly random 0.5 to 1.5 × `work` instead
    /// (`HAREL_BENCH_WORK_JITTER=1`: handlers of one length start and end in waves).
    pub jitter: bool,
    /// Each [`Tenant`] job's start: (tenant, start in µs since the epoch, its delay in µs).
    pub tenant_starts: Mutex<Vec<(u8, u64, u64)>>,
}

pub type State = Arc<Probe>;

impl Probe {
    pub fn new() -> State {
        Arc::new(Probe::default())
    }

    pub fn with_stamps(every: u64) -> State {
        Arc::new(Probe {
            stamp_every: every,
            ..Probe::default()
        })
    }

    /// Records the enqueue→start delays of [`Stamped`] jobs, whose handlers then work
    /// (sleep) for `work`.
    pub fn recording(work: Duration) -> State {
        Arc::new(Probe {
            record: AtomicBool::new(true),
            work,
            jitter: std::env::var_os("HAREL_BENCH_WORK_JITTER").is_some_and(|v| v == "1"),
            ..Probe::default()
        })
    }

    pub fn with_fifo_check() -> State {
        Arc::new(Probe {
            check_fifo: true,
            ..Probe::default()
        })
    }

    /// A handler's work: sleeps for [`work`](Probe::work), if any.
    async fn work(&self) {
        if self.work.is_zero() {
            return;
        }
        let work = if self.jitter {
            self.work.mul_f64(0.5 + rand::random::<f64>())
        } else {
            self.work
        };
        tokio::time::sleep(work).await;
    }

    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    fn hit(&self, ctx: &JobContext<State>) {
        let n = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        if self.stamp_every > 0 && n.is_multiple_of(self.stamp_every) {
            self.stamps.lock().unwrap().push((n, Instant::now()));
        }
        if self.check_fifo {
            let mut last = self.last_id.lock().unwrap();
            let id = ctx.job_id();
            match last.get_mut(ctx.group()) {
                Some(previous) => {
                    if id <= *previous {
                        self.fifo_violations.fetch_add(1, Ordering::Relaxed);
                    }
                    *previous = id;
                }
                None => {
                    last.insert(ctx.group().to_owned(), id);
                }
            }
        }
    }
}

/// Microseconds since the Unix epoch (the same clock in producer and handler: one process).
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// A job that does nothing but count itself.
#[derive(Serialize, Deserialize)]
pub struct Noop {}

impl Job for Noop {
    const KIND: &'static str = "bench_noop";
}

impl Handler<State> for Noop {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        ctx.state().hit(&ctx);
        Ok(())
    }
}

/// A job carrying the instant it was enqueued; its handler records the delay to its start,
/// then works for the probe's [`work`](Probe::work).
#[derive(Serialize, Deserialize)]
pub struct Stamped {
    pub at_us: u64,
}

impl Job for Stamped {
    const KIND: &'static str = "bench_stamped";
}

impl Handler<State> for Stamped {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        let now = now_us();
        let probe = ctx.state();
        probe.hit(&ctx);
        if probe.record.load(Ordering::Relaxed) {
            probe
                .delays
                .lock()
                .unwrap()
                .push((self.at_us, now.saturating_sub(self.at_us)));
        }
        probe.work().await;
        Ok(())
    }
}

/// A job of one tenant (`fair` scenario): its handler records its tenant, start and delay
/// since `at_us`, then works for the probe's [`work`](Probe::work).
#[derive(Serialize, Deserialize)]
pub struct Tenant {
    pub tenant: u8,
    pub at_us: u64,
}

impl Job for Tenant {
    const KIND: &'static str = "bench_tenant";
}

impl Handler<State> for Tenant {
    async fn handle(self, ctx: JobContext<State>) -> JobResult {
        let now = now_us();
        let probe = ctx.state();
        probe.hit(&ctx);
        probe.tenant_starts.lock().unwrap().push((
            self.tenant,
            now,
            now.saturating_sub(self.at_us),
        ));
        probe.work().await;
        Ok(())
    }
}
