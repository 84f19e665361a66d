//! The pool's report of itself (`harel_worker_report`, migration 0008): where it runs, the
//! queues it serves, its running jobs and its counters, about every 10 seconds and once
//! more when it stops, so that operators see the pools that are up and what they did
//! lately (`Client::workers`, `Client::throughput`), with its counters by queue too
//! (migration 0019: `Client::throughput_by_queue`).

use std::time::Duration;

use super::Shared;
use super::connection::{bounded, on_pooled};
use crate::error::DatabaseError;
use crate::store::Report;
use sqlx::PgConnection;

/// The longest the last report, at shutdown, may hold the shutdown up (it may wait for a
/// connection and for the periodic report it interrupted, whose statement may still run).
pub(super) const LAST_REPORT_WITHIN: Duration = Duration::from_secs(3);

/// Where this process runs, as the operator will read it (read once per process).
fn host() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(read_host)
}

/// `HOSTNAME`, else the kernel's host name, else "unknown".
fn read_host() -> String {
    let name = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    // the database takes 1 to 255 bytes
    let mut end = name.len().min(255);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

/// One report (`stopping`: the last one, at a graceful shutdown), within `limit`.
pub(super) async fn report<S>(
    shared: &Shared<S>,
    stopping: bool,
    limit: Duration,
) -> Result<(), DatabaseError> {
    // (the totals first, then by queue: see `Stats::by_queue`)
    let stats = shared.stats.snapshot();
    let by_queue = shared.stats.by_queue();
    let counted_queues: Vec<&str> = by_queue.iter().map(|totals| &*totals.0).collect();
    let queues: Vec<&str> = shared.lanes.iter().map(|lane| &*lane.queue).collect();
    let concurrency = shared.config.total_concurrency();
    let running = shared.inflight.len();
    let pooler = shared.config.transaction_pooler;
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let report = Report {
        id: shared.worker_id,
        host: host(),
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        queues: &queues,
        concurrency: i32::try_from(concurrency).unwrap_or(i32::MAX),
        running: i32::try_from(running).unwrap_or(i32::MAX),
        succeeded: as_i64(stats.succeeded),
        failed: as_i64(stats.retried + stats.dead_lettered),
        dead: as_i64(stats.dead_lettered),
        stopping,
        counted_queues: &counted_queues,
        counted_succeeded: &by_queue.iter().map(|t| as_i64(t.1)).collect::<Vec<_>>(),
        counted_failed: &by_queue.iter().map(|t| as_i64(t.2)).collect::<Vec<_>>(),
        counted_dead: &by_queue.iter().map(|t| as_i64(t.3)).collect::<Vec<_>>(),
    };
    let call = on_pooled(
        &shared.pool,
        pooler,
        async |connection: &mut PgConnection| shared.store.worker_report(connection, &report).await,
    );
    bounded(limit, call).await.map_err(DatabaseError::new)
}
