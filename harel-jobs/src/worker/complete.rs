//! The completer: writes job outcomes back in batches, one round trip per batch.
//!
//! It takes whatever outcomes are waiting when it is free (group commit): one outcome when
//! the pool is quiet, hundreds per round trip under load, without a timer adding latency.
//!
//! A batch that fails in a way a retry can cure (the connection, a serialization failure, a
//! deadlock) is sent again as it is, under the same [`Receipt`], so that a batch which did
//! commit before its reply was lost is answered as already applied rather than applied
//! twice. A batch the database refuses otherwise was rolled back as a whole: it is split in
//! halves, so that one outcome the database cannot take does not hold up the others; alone,
//! it becomes a plain dead letter (or, for an ack, is dropped and the job runs again).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Shared;
use super::connection::{OwnConnection, bounded};
use super::task::{TaskResult, WorkerTask};
use crate::error::TransportError;
use crate::retry::Decision;
use crate::transport::{Lease, LeaseOutcome, Receipt, Settlement};

/// A job's lease and what the policy decided for it.
#[derive(Debug)]
pub(crate) struct Finished {
    /// The pool's lane (queue) the job ran in.
    pub lane: usize,
    pub lease: Lease,
    /// The job's metrics labels.
    pub labels: crate::telemetry::Labels,
    pub decision: Decision,
    /// How long to keep the job in the history if it succeeded (`None`: not at all).
    pub retain: Option<Duration>,
    /// Set when the handler completed the job in its own transaction
    /// (`JobContext::complete_in`): this outcome then finds the lease gone, as expected.
    pub completed_in_tx: Arc<crate::context::ExecutionFlags>,
}

impl Finished {
    /// What the transport writes for it.
    fn settlement(&self) -> Settlement {
        self.decision.settlement(self.retain)
    }
}

/// Runs until the channel closes (every sender dropped), then flushes what is left:
/// `pipelines` writers, each on a connection of its own, take the waiting outcomes in
/// turn, so that while one batch is on its way the next is already being written.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    receiver: mpsc::UnboundedReceiver<Finished>,
) -> TaskResult {
    let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
    let writers = (0..shared.config.pipelines)
        .map(|_| write_batches(Arc::clone(&shared), Arc::clone(&receiver)));
    futures_util::future::try_join_all(writers).await?;
    Ok(())
}

/// One writer: takes whatever outcomes wait (holding the receiver only while it waits for
/// them), writes them in one round trip, and again, until the channel is closed and empty.
async fn write_batches<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    receiver: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Finished>>>,
) -> TaskResult {
    let max_batch = shared.config.settle_batch;
    let mut batch = Vec::with_capacity(max_batch);
    // outcomes need no WAL-flush wait (see OwnConnection::without_commit_wait), unless the
    // pool is told to wait for it (WorkerBuilder::durable_outcomes)
    let connection = if shared.config.durable_outcomes {
        OwnConnection::durable(&shared.pool)
    } else {
        OwnConnection::without_commit_wait(&shared.pool)
    }
    .through_pooler(shared.config.transaction_pooler);
    let mut writer = Writer::new(connection);
    loop {
        let taken = receiver.lock().await.recv_many(&mut batch, max_batch).await;
        if taken == 0 {
            break; // closed and drained
        }
        shared.faults.check(WorkerTask::Completer)?;
        flush(&shared, &mut writer, &mut batch).await;
    }
    writer
        .connection
        .close(shared.config.database_timeout)
        .await;
    Ok(())
}

/// Writes one batch and wakes the fetcher: settled groups may have more messages.
async fn flush<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    writer: &mut Writer,
    batch: &mut Vec<Finished>,
) {
    let mut decided = Vec::with_capacity(batch.len());
    let settlements: Vec<(Lease, Settlement)> = batch
        .drain(..)
        .map(|finished| {
            let settlement = finished.settlement();
            decided.push((
                finished.lane,
                finished.labels,
                finished.decision,
                finished.completed_in_tx,
            ));
            (finished.lease, settlement)
        })
        .collect();
    let written = writer.write(shared, &settlements).await;
    for (((lease, _), (lane, labels, decision, completed_in_tx)), written) in
        settlements.iter().zip(&decided).zip(written)
    {
        shared.inflight.remove(lease);
        match written {
            Written::AsDecided(LeaseOutcome::Cancelled)
            | Written::AsDeadLetter(LeaseOutcome::Cancelled) => {
                shared.stats.cancelled(labels);
                tracing::info!(
                    group = %lease.group,
                    message_id = lease.id.get(),
                    "job cancelled while it ran: ended as cancelled"
                );
            }
            Written::AsDecided(LeaseOutcome::LeaseLost)
                if completed_in_tx.completed_in_tx.load(Ordering::Acquire) =>
            {
                // the handler's own transaction completed it (and committed)
                shared.stats.settled(labels, decision);
            }
            Written::AsDecided(written) if written.is_applied() => {
                if written == LeaseOutcome::AlreadyApplied {
                    tracing::debug!(message_id = lease.id.get(), "outcome was already written");
                }
                if let Some(wait) = decision.wait() {
                    shared.lanes[*lane].wake_after(wait);
                }
                shared.stats.settled(labels, decision);
            }
            Written::AsDeadLetter(written) if written.is_applied() => {
                shared.stats.dead_lettered(labels);
            }
            Written::AsDecided(_) | Written::AsDeadLetter(_) => lost(shared, lease, labels),
            Written::Dropped => shared.stats.outcome_dropped(),
        }
    }
    shared.wake_all();
}

fn lost<S>(shared: &Shared<S>, lease: &Lease, labels: &crate::telemetry::Labels) {
    shared.stats.lease_lost(labels);
    tracing::warn!(
        group = %lease.group,
        message_id = lease.id.get(),
        "lease lost before the outcome was written: another worker may run the job again"
    );
}

/// The completer's connection and the receipt of its next batch.
struct Writer {
    connection: OwnConnection,
    receipt: Receipt,
}

/// What became of one outcome of a batch.
#[derive(Clone, Copy, Debug)]
enum Written {
    /// Written as decided (or its lease was lost).
    AsDecided(LeaseOutcome),
    /// The database refused it: written as a plain dead letter instead.
    AsDeadLetter(LeaseOutcome),
    /// Refused even so: given up on; the job runs again after its lease.
    Dropped,
}

/// How one attempt to write a batch ended.
enum Attempt {
    Written(Vec<LeaseOutcome>),
    /// Worth sending again as it is: it may even have committed.
    Transient(TransportError),
    /// Refused, and rolled back as a whole.
    Refused(TransportError),
}

impl Writer {
    fn new(connection: OwnConnection) -> Self {
        Self {
            connection,
            receipt: Receipt::new(),
        }
    }

    /// Writes `settlements` and returns, in order, what became of each (see the module's
    /// documentation). Transient failures are retried with
    /// backoff (up to 5 s apart) for as long as the worker lives: shutdown gives up on them
    /// (see `supervise.rs`).
    async fn write<S>(
        &mut self,
        shared: &Shared<S>,
        settlements: &[(Lease, Settlement)],
    ) -> Vec<Written> {
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.attempt(shared, settlements).await {
                Attempt::Written(outcomes) => {
                    return outcomes.into_iter().map(Written::AsDecided).collect();
                }
                Attempt::Transient(error) => {
                    shared.stats.database_error();
                    tracing::warn!(
                        error = %error,
                        outcomes = settlements.len(),
                        retry_in_ms = backoff.as_millis() as u64,
                        "writing job outcomes failed, retrying"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Attempt::Refused(error) => {
                    shared.stats.database_error();
                    return Box::pin(self.split(shared, settlements, error)).await;
                }
            }
        }
    }

    /// After the database refused `settlements` as a whole: writes each half on its own;
    /// one outcome alone gets a last chance as a plain dead letter.
    async fn split<S>(
        &mut self,
        shared: &Shared<S>,
        settlements: &[(Lease, Settlement)],
        error: TransportError,
    ) -> Vec<Written> {
        if let [(lease, settlement)] = settlements {
            return vec![self.last_chance(shared, lease, settlement, &error).await];
        }
        tracing::warn!(
            error = %error,
            outcomes = settlements.len(),
            "the database refused a batch of job outcomes: writing it in halves"
        );
        let (first, second) = settlements.split_at(settlements.len() / 2);
        let mut written = self.write(shared, first).await;
        written.extend(self.write(shared, second).await);
        written
    }

    /// One outcome the database refused: a release or a dead letter is written again as a
    /// dead letter whose error is ours alone; an ack is dropped (the job runs again).
    async fn last_chance<S>(
        &mut self,
        shared: &Shared<S>,
        lease: &Lease,
        settlement: &Settlement,
        error: &TransportError,
    ) -> Written {
        let code = match error {
            TransportError::Database(error) => error.code().unwrap_or_default(),
            _ => String::new(),
        };
        if matches!(settlement, Settlement::Ack | Settlement::Retain { .. }) {
            tracing::error!(
                error = %error,
                message_id = lease.id.get(),
                "the database refused a job's ack: the outcome is dropped, the job will run again"
            );
            return Written::Dropped;
        }
        let fallback = Settlement::DeadLetter {
            error: format!(
                "its outcome could not be written (SQLSTATE {code}): kept as a dead letter"
            ),
            attempts: None,
        };
        tracing::error!(
            error = %error,
            message_id = lease.id.get(),
            "the database refused a job's outcome: moving the job to the dead letters"
        );
        let fallback = [(lease.clone(), fallback)];
        let mut backoff = Duration::from_millis(50);
        loop {
            match self.attempt(shared, &fallback).await {
                Attempt::Written(mut outcomes) => {
                    return outcomes
                        .pop()
                        .map_or(Written::Dropped, Written::AsDeadLetter);
                }
                Attempt::Transient(_) => {
                    shared.stats.database_error();
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Attempt::Refused(error) => {
                    shared.stats.database_error();
                    tracing::error!(
                        error = %error,
                        message_id = lease.id.get(),
                        "not even as a dead letter: the outcome is dropped, the job will run again"
                    );
                    return Written::Dropped;
                }
            }
        }
    }

    /// One round trip, bounded by the database timeout.
    async fn attempt<S>(
        &mut self,
        shared: &Shared<S>,
        settlements: &[(Lease, Settlement)],
    ) -> Attempt {
        let limit = shared.config.database_timeout;
        let receipt = self.receipt;
        let started = std::time::Instant::now();
        let call = async {
            let mut unit = self.connection.unit().await?;
            let outcomes = shared
                .transport
                .settle_many(unit.connection(), settlements, Some(&receipt))
                .await?;
            // behind a pooler: a commit that fails is transient, resent under the receipt
            unit.finish().await?;
            Ok::<_, TransportError>(outcomes)
        };
        match bounded(limit, call).await {
            Ok(outcomes) => {
                crate::telemetry::settle_round_trip(started.elapsed());
                self.receipt = receipt.next();
                Attempt::Written(outcomes)
            }
            Err(error) if error.is_transient() => {
                // keep the receipt: the batch may have committed
                self.connection.reset();
                Attempt::Transient(error)
            }
            Err(error) => {
                // rolled back: its receipt was never kept
                self.receipt = receipt.next();
                Attempt::Refused(error)
            }
        }
    }
}
