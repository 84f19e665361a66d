//! LISTEN for enqueue notifications, so idle workers start at once.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgPoolOptions;

use super::Shared;
use super::connection::bounded;
use super::task::{TaskResult, WorkerTask};
use crate::store::session;

/// Keeps a LISTEN connection on the queue's channel until `stop` fires, waking the fetcher
/// on every notification. Reconnects with backoff when the connection is lost, and wakes
/// the fetcher after each reconnect, since notifications sent meanwhile are gone.
/// Connecting (and the LISTEN statement) is bounded by the database timeout.
///
/// A LISTEN connection only ever waits, so a connection that died silently (its server's
/// machine died and the address moved to a standby, a partition, a NAT that forgot it)
/// would say nothing, ever: no reset comes back to a client that sends nothing. So after a
/// heartbeat interval without a notification the listener checks its connection with a
/// round trip bounded by the database timeout (the LISTEN statement again: a no-op that
/// leaves the session showing what it is for in `pg_stat_activity`), and reconnects if
/// that fails.
///
/// It connects as [`listen_connect_options`](super::WorkerBuilder::listen_connect_options)
/// says, or else as the pool does (never through a transaction pooler: the supervisor does
/// not start it there without such options).
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) -> TaskResult {
    let channel = shared.config.schema.channel();
    let mut backoff = Duration::from_millis(100);
    let mut connected_before = false;
    let options = match &shared.config.listen_options {
        Some(options) => options.0.clone(),
        None => (*shared.pool.connect_options()).clone(),
    };
    loop {
        // A pool of one connection of its own: PgListener keeps the connection it listens
        // on for good, which must not shrink the pool the handlers and the worker share. A
        // new one for each attempt: a connection abandoned at the timeout is never reused.
        let own_pool = PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options.clone());
        let listener = bounded(
            shared.config.database_timeout,
            session::listen(&own_pool, &channel),
        );
        let result = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            result = listener => result,
        };
        match result {
            Ok(mut listener) => {
                shared.faults.check(WorkerTask::Listener)?;
                if connected_before {
                    tracing::info!(channel = %channel, "notification listener reconnected");
                }
                connected_before = true;
                backoff = Duration::from_millis(100);
                shared.wake_all();
                let quiet = shared.config.heartbeat_interval();
                loop {
                    // `try_recv` is cancel-safe: a message half read stays buffered
                    let received = tokio::select! {
                        () = stop.cancelled() => return Ok(()),
                        received = tokio::time::timeout(quiet, listener.try_recv()) => received,
                    };
                    let Ok(received) = received else {
                        let check = bounded(
                            shared.config.database_timeout,
                            session::listen_check(&mut listener, &channel),
                        );
                        let checked = tokio::select! {
                            () = stop.cancelled() => return Ok(()),
                            checked = check => checked,
                        };
                        if let Err(error) = checked {
                            tracing::warn!(
                                channel = %channel,
                                error = %crate::error::DatabaseError::new(error),
                                "notification listener's connection does not answer: reconnecting"
                            );
                            break;
                        }
                        continue;
                    };
                    match received {
                        Ok(Some(notification)) => {
                            // the position of the oldest group the publisher created, if any
                            if let Ok(position) = notification.payload().parse::<i64>() {
                                for lane in &shared.lanes {
                                    lane.hint(position);
                                }
                            }
                            shared.wake_all();
                        }
                        Ok(None) => {
                            tracing::warn!(channel = %channel, "notification listener lost its connection");
                            break;
                        }
                        Err(error) => {
                            tracing::warn!(channel = %channel, error = %error, "notification listener failed");
                            break;
                        }
                    }
                }
            }
            Err(error) => {
                tracing::warn!(
                    channel = %channel,
                    error = %crate::error::DatabaseError::new(error),
                    retry_in_ms = backoff.as_millis() as u64,
                    "notification listener cannot connect, polling meanwhile"
                );
            }
        }
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
