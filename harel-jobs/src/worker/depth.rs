//! The depth gauges (feature `metrics`): one worker per schema samples
//! [`QueueStats`](crate::QueueStats) and each named queue's ready and running counts
//! (`harel_queues`, what `Queue::queues` reads) every [`SAMPLE_EVERY`] and sets
//! `harel_jobs_depth`, `harel_jobs_groups` and `harel_jobs_queue_depth` (see
//! `telemetry.rs`), so that a dashboard summing over processes does not count the queue once
//! per worker.
//!
//! The sampler is elected by a session advisory lock (`harel-jobs depth <schema>`) held on a
//! connection of its own, opened only once elected and kept for as long as it samples: a
//! lock on a connection nobody else uses, so it cannot outlive its holder the way a lock on a
//! pooled connection would, and a worker that dies (or whose connection breaks) frees it for
//! the next one within one period. The others only probe, every period, with one
//! `pg_try_advisory_xact_lock` on a pool connection, a statement-long lock that fails while
//! a sampler holds the session lock.
//!
//! Behind a transaction pooler a session lock cannot be held through the pooler: the
//! sampler's connection goes to the direct LISTEN connection's server
//! (`WorkerBuilder::listen_connect_options`), and without one no worker of that pool
//! samples (logged once).

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};

use super::Shared;
use super::connection::bounded;
use crate::error::DatabaseError;

/// How often the elected worker samples the depth, and the others probe for a vacancy.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Samples the depth while elected; probes for the election otherwise. Ends when `stop`
/// fires.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let config = &shared.config;
    let options: PgConnectOptions = if config.transaction_pooler {
        match &config.listen_options {
            Some(listen) => listen.0.clone(),
            None => {
                tracing::info!(
                    schema = config.schema.name(),
                    "behind a transaction pooler without a direct connection \
                     (listen_connect_options): this pool does not sample the queue depth gauges"
                );
                return;
            }
        }
    } else {
        (*shared.pool.connect_options()).clone()
    };
    let key = format!("harel-jobs depth {}", config.schema.name());
    let limit = config.database_timeout;
    let mut sampler: Option<PgConnection> = None;
    loop {
        if sampler.is_none() && bounded(limit, vacant(&shared, &key)).await.unwrap_or(false) {
            sampler = bounded(limit, elect(&options, &key)).await.ok().flatten();
            if sampler.is_some() {
                tracing::debug!(schema = config.schema.name(), "sampling the queue depth");
            }
        }
        if let Some(connection) = sampler.as_mut() {
            match bounded(limit, sample(connection, &config.schema)).await {
                Ok(()) => {}
                Err(error) => {
                    // the connection (and with it the lock) is dropped: another worker, or
                    // this one at its next probe, takes over
                    tracing::debug!(error = %error, "sampling the queue depth failed");
                    sampler = None;
                }
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
    }
    if let Some(connection) = sampler {
        let _ = tokio::time::timeout(limit, connection.close()).await;
    }
}

/// One sample on the sampler's connection: the schema's figures first, so that they are
/// set even if the per-queue read fails.
async fn sample(
    connection: &mut PgConnection,
    schema: &crate::Schema,
) -> Result<(), DatabaseError> {
    let stats = crate::QueueStats::fetch(&mut *connection, schema).await?;
    crate::telemetry::depth(schema, &stats);
    // a connection of its own, never behind a transaction pooler: prepared once, kept
    let queues = crate::queue_control::queues_on(&mut *connection, schema, true).await?;
    crate::telemetry::queue_depth(schema, &queues);
    Ok(())
}

/// Whether no worker holds the sampler's lock now (a statement-long probe on a pool
/// connection).
async fn vacant<S>(shared: &Shared<S>, key: &str) -> Result<bool, DatabaseError> {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(key)
        .persistent(!shared.config.transaction_pooler)
        .fetch_one(&shared.pool)
        .await
        .map_err(DatabaseError::new)
}

/// A connection of its own holding the sampler's session lock, or `None` if another worker
/// took it first.
async fn elect(
    options: &PgConnectOptions,
    key: &str,
) -> Result<Option<PgConnection>, DatabaseError> {
    let mut connection = PgConnection::connect_with(options)
        .await
        .map_err(DatabaseError::new)?;
    let elected: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
        .bind(key)
        .fetch_one(&mut connection)
        .await
        .map_err(DatabaseError::new)?;
    if elected {
        Ok(Some(connection))
    } else {
        let _ = connection.close().await;
        Ok(None)
    }
}
