//! The depth gauges (feature `metrics`): one worker per schema samples
//! the schema's figures (what [`Stats`](crate::Stats) gives) and each named queue's ready
//! and running counts and lag (`harel_queues`, what `Client::queues` reads: one bounded
//! call) every [`SAMPLE_EVERY`] and sets `harel_jobs_depth`, `harel_jobs_dead_letters`,
//! `harel_jobs_groups`, `harel_jobs_queue_depth` and `harel_jobs_queue_lag_seconds` (see
//! `telemetry.rs`), so that a dashboard summing over processes does not count the queue once
//! per worker.
//!
//! The sampler is elected by `harel_elect` (migration 0011): a lease on the `depth` row of
//! the schema's `elections` table, taken by a pool when nobody holds it or its holder's lease
//! ran out, and renewed at each sample for [`HOLD`]. A sampler that dies stops renewing, and
//! another pool takes over within `HOLD` and a period. Each period is one short call on a
//! pool connection (behind a transaction pooler, in a transaction of its own, with unnamed
//! statements): no session state, no transaction left open, and nothing that a login
//! outside the queue's roles can hold (the advisory lock this used to be was a key any login
//! of the server could take, and keep every pool from sampling).

use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use super::connection::{bounded, on_pooled};
use crate::error::DatabaseError;
use sqlx::PgConnection;

/// How often the elected worker samples the depth, and the others ask for the election.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// How long an election lasts unless renewed: a few periods, so that a slow sample or a
/// missed period does not hand the gauges to another pool.
const HOLD: Duration = Duration::from_secs(25);

/// Samples the depth while elected; asks for the election otherwise. Ends when `stop`
/// fires, giving the election up.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let limit = shared.config.database_timeout;
    let mut elected = false;
    loop {
        match bounded(limit, elect(&shared, HOLD)).await {
            Ok(now_elected) => {
                if now_elected && !elected {
                    tracing::debug!(
                        schema = shared.config.schema.name(),
                        "sampling the queue depth"
                    );
                }
                elected = now_elected;
            }
            Err(error) if error.is_permission_denied() => {
                tracing::info!(
                    schema = shared.config.schema.name(),
                    error = %error,
                    "this role may not take part in the depth sampler's election \
                     (harel_elect): this pool sets no queue depth gauges"
                );
                return;
            }
            Err(error) => {
                tracing::debug!(error = %error, "the depth sampler's election failed");
                elected = false;
            }
        }
        if elected && let Err(error) = bounded(limit, sample(&shared)).await {
            tracing::debug!(error = %error, "sampling the queue depth failed");
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
    }
    if elected {
        // hand over at once rather than after the lease (best effort)
        let _ = bounded(limit, elect(&shared, Duration::ZERO)).await;
    }
}

/// Takes or renews the election for `hold` (zero: gives it up). Returns whether this pool
/// holds it.
async fn elect<S>(shared: &Shared<S>, hold: Duration) -> Result<bool, DatabaseError> {
    let hold_ms = i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
    on_pooled(
        &shared.pool,
        shared.config.transaction_pooler,
        async |connection: &mut PgConnection| {
            Ok(shared
                .store
                .election_take(connection, "depth", shared.worker_id, hold_ms)
                .await?)
        },
    )
    .await
}

/// One sample on a pool connection: the schema's figures first, so that they are set even
/// if the per-queue read fails.
async fn sample<S>(shared: &Shared<S>) -> Result<(), DatabaseError> {
    let schema = &shared.config.schema;
    on_pooled(
        &shared.pool,
        shared.config.transaction_pooler,
        async |connection: &mut PgConnection| {
            let stats = shared.store.stats_read(&mut *connection).await?.figures();
            crate::telemetry::depth(
                schema.name(),
                stats.jobs.value(),
                stats.dead_letters.value(),
                stats.groups.value(),
                stats.claimable_groups.value(),
            );
            for (queue, ready, running, lag) in shared.store.queues_sample(connection).await? {
                let (ready, running) = (ready.unwrap_or(0), running.unwrap_or(0));
                // a clock step on the server could make it negative for a moment
                let lag = lag.max(0.0);
                crate::telemetry::queue_depth(schema.name(), &queue, ready, running, lag);
            }
            Ok::<_, DatabaseError>(())
        },
    )
    .await
}
