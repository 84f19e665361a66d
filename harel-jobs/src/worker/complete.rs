//! The completer: writes job outcomes back in batches, one or two round trips per batch.
//!
//! It takes whatever outcomes are waiting when it is free (group commit): one outcome when
//! the pool is quiet, hundreds per round trip under load, without a timer adding latency.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Shared;
use super::connection::{OwnConnection, bounded};
use super::supervise::{TaskResult, WorkerTask};
use crate::transport::{Lease, LeaseOutcome, Settlement};

/// What becomes of a job whose handler ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Ack it.
    Succeeded,
    /// Move it to the dead letters with this error.
    DeadLetter(String),
    /// Move it to the dead letters without having run it now: this many attempts were made.
    GiveUp { error: String, attempts: u32 },
    /// Park its group for `delay`, recording the error; the attempt counts.
    Retry { delay: Duration, error: String },
    /// Park its group for this long; the attempt does not count.
    Snooze(Duration),
    /// Give it back at once (shutdown).
    Release {
        count_attempt: bool,
        reason: &'static str,
    },
}

/// A job's lease and outcome.
#[derive(Debug)]
pub(crate) struct Finished {
    pub lease: Lease,
    pub outcome: Outcome,
}

/// Runs until the channel closes (every sender dropped), then flushes what is left.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    mut receiver: mpsc::UnboundedReceiver<Finished>,
) -> TaskResult {
    let max_batch = shared.config.ack_batch;
    let mut batch = Vec::with_capacity(max_batch);
    // outcomes need no WAL-flush wait: see OwnConnection::without_commit_wait
    let mut connection = OwnConnection::without_commit_wait(&shared.pool);
    while receiver.recv_many(&mut batch, max_batch).await > 0 {
        shared.faults.check(WorkerTask::Completer)?;
        flush(&shared, &mut connection, &mut batch).await;
    }
    // closed and drained
    connection.close(shared.config.database_timeout).await;
    Ok(())
}

/// Writes one batch, retrying while the database is unreachable, and wakes the fetcher:
/// acked groups may have more messages.
async fn flush<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    connection: &mut OwnConnection,
    batch: &mut Vec<Finished>,
) {
    let settlements: Vec<(Lease, Settlement)> = batch
        .drain(..)
        .map(|settled| {
            let settlement = match settled.outcome {
                Outcome::Succeeded => Settlement::Ack,
                Outcome::DeadLetter(error) => Settlement::dead_letter(error),
                Outcome::GiveUp { error, attempts } => Settlement::DeadLetter {
                    error,
                    attempts: Some(attempts),
                },
                Outcome::Retry { delay, error } => Settlement::Release {
                    delay,
                    error: Some(error),
                    count_attempt: true,
                },
                Outcome::Snooze(delay) => Settlement::Release {
                    delay,
                    error: None,
                    count_attempt: false,
                },
                Outcome::Release {
                    count_attempt,
                    reason,
                } => Settlement::Release {
                    delay: Duration::ZERO,
                    error: Some(reason.to_owned()),
                    count_attempt,
                },
            };
            (settled.lease, settlement)
        })
        .collect();
    let outcomes = write(shared, connection, &settlements).await;
    for ((lease, settlement), outcome) in settlements.iter().zip(outcomes) {
        shared.inflight.remove(lease.seq);
        match (outcome.is_applied(), settlement) {
            (true, Settlement::Ack) => shared.stats.succeeded(),
            (true, Settlement::DeadLetter { .. }) => shared.stats.dead_lettered(),
            (
                true,
                Settlement::Release {
                    delay,
                    count_attempt,
                    ..
                },
            ) => {
                if !delay.is_zero() {
                    shared.wake_after(*delay);
                }
                if *count_attempt && !delay.is_zero() {
                    shared.stats.retried();
                } else if !delay.is_zero() {
                    shared.stats.snoozed();
                } else {
                    shared.stats.released();
                }
            }
            (false, _) => lost(shared, lease, "settle"),
        }
    }
    shared.wake.notify_one();
}

fn lost<S>(shared: &Shared<S>, lease: &Lease, operation: &str) {
    shared.stats.lease_lost();
    tracing::warn!(
        group = %lease.group,
        message_id = lease.seq,
        operation,
        "lease lost before the outcome was written: another worker may run the job again"
    );
}

/// Runs a write until it succeeds. Connection failures are retried with backoff (up to
/// 5 s apart) for as long as it takes: an outcome is never dropped while the worker lives.
/// Any other error is retried too, after logging it, since dropping the outcome would only
/// make the job run again after its lease.
async fn write<S>(
    shared: &Shared<S>,
    connection: &mut OwnConnection,
    settlements: &[(Lease, Settlement)],
) -> Vec<LeaseOutcome> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let limit = shared.config.database_timeout;
        let attempt = async {
            let connection = connection.get().await?;
            shared
                .transport
                .settle_many(connection, settlements, None)
                .await
        };
        match bounded(limit, attempt).await {
            Ok(outcomes) => return outcomes,
            Err(error) => {
                connection.reset();
                shared.stats.database_error();
                tracing::warn!(
                    error = %error,
                    retry_in_ms = backoff.as_millis() as u64,
                    "writing job outcomes failed, retrying"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
