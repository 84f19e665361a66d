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
use crate::error::TransportError;
use crate::transport::{Completion, Lease, LeaseOutcome, Nack};

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
pub(crate) struct Settlement {
    pub lease: Lease,
    pub outcome: Outcome,
}

/// Runs until the channel closes (every sender dropped), then flushes what is left.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    mut receiver: mpsc::UnboundedReceiver<Settlement>,
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
    batch: &mut Vec<Settlement>,
) {
    let mut completions = Vec::new();
    let mut nacks = Vec::new();
    for settlement in batch.drain(..) {
        match settlement.outcome {
            Outcome::Succeeded => completions.push(Completion::Ack(settlement.lease)),
            Outcome::DeadLetter(error) => {
                completions.push(Completion::DeadLetter(settlement.lease, error));
            }
            Outcome::GiveUp { error, attempts } => {
                completions.push(Completion::DeadLetterAfter(
                    settlement.lease,
                    error,
                    attempts,
                ));
            }
            Outcome::Retry { delay, error } => nacks.push(Nack {
                lease: settlement.lease,
                delay,
                error: Some(error),
                count_attempt: true,
            }),
            Outcome::Snooze(delay) => nacks.push(Nack {
                lease: settlement.lease,
                delay,
                error: None,
                count_attempt: false,
            }),
            Outcome::Release {
                count_attempt,
                reason,
            } => nacks.push(Nack {
                lease: settlement.lease,
                delay: Duration::ZERO,
                error: Some(reason.to_owned()),
                count_attempt,
            }),
        }
    }

    if !completions.is_empty() {
        let outcomes = write(shared, connection, Write::Complete(&completions)).await;
        for (completion, outcome) in completions.iter().zip(outcomes) {
            let lease = completion.lease();
            shared.inflight.remove(lease.seq);
            match (outcome, completion) {
                (LeaseOutcome::Applied, Completion::Ack(_)) => shared.stats.succeeded(),
                (LeaseOutcome::Applied, _) => shared.stats.dead_lettered(),
                (LeaseOutcome::LeaseLost, _) => lost(shared, lease, "ack"),
            }
        }
    }
    if !nacks.is_empty() {
        let outcomes = write(shared, connection, Write::Nack(&nacks)).await;
        for (nack, outcome) in nacks.iter().zip(outcomes) {
            shared.inflight.remove(nack.lease.seq);
            if outcome.is_applied() && !nack.delay.is_zero() {
                shared.wake_after(nack.delay);
            }
            match outcome {
                LeaseOutcome::Applied if nack.count_attempt && nack.delay > Duration::ZERO => {
                    shared.stats.retried();
                }
                LeaseOutcome::Applied if nack.delay > Duration::ZERO => shared.stats.snoozed(),
                LeaseOutcome::Applied => shared.stats.released(),
                LeaseOutcome::LeaseLost => lost(shared, &nack.lease, "nack"),
            }
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

/// One batch write of the completer.
#[derive(Clone, Copy)]
enum Write<'a> {
    Complete(&'a [Completion]),
    Nack(&'a [Nack]),
}

impl Write<'_> {
    fn name(self) -> &'static str {
        match self {
            Self::Complete(_) => "ack",
            Self::Nack(_) => "nack",
        }
    }

    async fn apply<S>(
        self,
        shared: &Shared<S>,
        connection: &mut OwnConnection,
    ) -> Result<Vec<LeaseOutcome>, TransportError> {
        let connection = connection.get().await?;
        match self {
            Self::Complete(completions) => {
                shared
                    .transport
                    .complete_many(connection, completions)
                    .await
            }
            Self::Nack(nacks) => shared.transport.nack_many(connection, nacks).await,
        }
    }
}

/// Runs a write until it succeeds. Connection failures (an attempt with no answer within the
/// database timeout included) are retried with backoff (up to 5 s apart) on a new connection
/// for as long as it takes: an outcome is never dropped while the worker lives (shutdown
/// gives up on them, see `supervise.rs`). Any other error is retried too, after logging it,
/// since dropping the outcome would only make the job run again after its lease.
async fn write<S>(
    shared: &Shared<S>,
    connection: &mut OwnConnection,
    write: Write<'_>,
) -> Vec<LeaseOutcome> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let limit = shared.config.database_timeout;
        match bounded(limit, write.apply(shared, connection)).await {
            Ok(outcomes) => return outcomes,
            Err(error) => {
                connection.reset();
                shared.stats.database_error();
                tracing::warn!(
                    operation = write.name(),
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
