//! One job, run in the caller's task on the caller's connection: the worker pool's own
//! claim, attempt (`execute::attempt`: decode, timeout, panic capture), policy and settle,
//! without its background tasks. What `harel_jobs::testing::TestWorker` is built on. The
//! handler's `JobContext::workflow` is read on that connection too (so it sees a claim of
//! the caller's open transaction), served between polls of the attempt.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use sqlx::PgConnection;
use tokio::sync::mpsc;
use tracing::Instrument;

use super::Shared;
use super::execute::{attempt, decided, job_span, panic_message};
use super::maintain::BACKLOG_PAGE;
use crate::context::{ConnectionReads, ExecutionFlags};
use crate::error::{DatabaseError, TransportError};
use crate::retry::{Attempted, Backoff, Decision, Limits};
use crate::store::HeldLease;
use crate::transport::{ClaimRequest, ClaimedMessage, LeaseOutcome, LeaseToken};

/// What became of one job run by [`work_one`].
pub(crate) struct Inline {
    pub message: ClaimedMessage,
    pub decision: Decision,
    pub written: LeaseOutcome,
    /// The handler completed the job in its own transaction (`JobContext::complete_in`).
    pub completed_in_tx: bool,
}

/// Claims the next due job on `connection` (one group of the pool's queues, in the order it
/// serves them, with its lease and priority floor),
/// runs it as a job task of the pool would, and writes its outcome on `connection`.
/// `None`: nothing is due. `backoff`, when given, replaces every retry's delay (the job
/// type's own backoff, and a `JobError`'s `retry_after`): the test worker's override.
pub(crate) async fn work_one<S: Send + Sync + 'static>(
    shared: &Arc<Shared<S>>,
    connection: &mut PgConnection,
    backoff: Option<Backoff>,
) -> Result<Option<Inline>, TransportError> {
    let claimed = loop {
        // the pool's queues in its order, one claim each until one has a due job
        let mut claimed = None;
        for (lane, this) in shared.lanes.iter().enumerate() {
            let request = ClaimRequest {
                token: LeaseToken::new(),
                lease: shared.config.lease,
                min_priority: shared.config.min_priority,
                limit: 1,
                queue: Some(this.queue.to_string()),
                max_wait: Some(shared.config.database_timeout / 2),
            };
            if let Some(message) = shared.transport.claim(&mut *connection, &request).await? {
                claimed = Some((lane, message));
                break;
            }
        }
        if claimed.is_some() {
            break claimed;
        }
        // Nothing due: a page of the dependents left to housekeeping (ADR 0037), as the
        // pool's housekeeping resolves them, then look again if it found any.
        let (parents, _) = shared
            .store()
            .dependents_backlog_resolve(&mut *connection, BACKLOG_PAGE)
            .await?;
        if parents == 0 {
            break None;
        }
    };
    let Some((lane, message)) = claimed else {
        return Ok(None);
    };
    let labels = shared.labels(lane, &message.kind);
    shared.stats.claimed(&labels);
    let flags = Arc::new(ExecutionFlags::default());
    let cancel = shared.hard_stop.child_token();
    let span = job_span(&message, &shared.lanes[lane].queue);
    // the handler's reads that must see this connection's transaction (its claim):
    // served here, on the connection, while the attempt waits for them
    let (reads, mut served) = mpsc::unbounded_channel();
    let ran = {
        let running = AssertUnwindSafe(attempt(
            shared,
            lane,
            &message,
            cancel,
            &flags,
            Some(ConnectionReads(reads)),
        ))
        .catch_unwind()
        .instrument(span.clone());
        tokio::pin!(running);
        let lease = HeldLease {
            group: &message.lease.group,
            seq: message.lease.id.get(),
            token: message.lease.token.as_uuid(),
        };
        loop {
            tokio::select! {
                biased;
                ran = &mut running => break ran,
                Some(reply) = served.recv() => {
                    let read = shared
                        .store()
                        .workflow_task_if_held(&mut *connection, lease)
                        .await
                        .map_err(DatabaseError::new);
                    // (a handler that stopped waiting for it wants it no more)
                    let _ = reply.send(read);
                }
            }
        }
    };
    let (attempted, limits) = ran.unwrap_or_else(|panic| {
        let error = format!("job panicked: {}", panic_message(&*panic));
        (Attempted::failed(error), shared.config.limits())
    });
    let (limits, attempted) = match backoff {
        Some(backoff) => (
            Limits { backoff, ..limits },
            match attempted {
                Attempted::Failed { error, .. } => Attempted::failed(error),
                other => other,
            },
        ),
        None => (limits, attempted),
    };
    let decision = {
        let _entered = span.enter();
        decided(message.attempt, limits, attempted)
    };
    let settlement = decision.settlement(limits.retain);
    let written = shared
        .transport
        .settle(&mut *connection, &message.lease, settlement)
        .await?;
    let completed_in_tx = flags
        .completed_in_tx
        .load(std::sync::atomic::Ordering::Acquire);
    match written {
        LeaseOutcome::Cancelled => shared.stats.cancelled(&labels),
        LeaseOutcome::LeaseLost if completed_in_tx => shared.stats.settled(&labels, &decision),
        written if written.is_applied() => shared.stats.settled(&labels, &decision),
        _ => shared.stats.lease_lost(&labels),
    }
    Ok(Some(Inline {
        message,
        decision,
        written,
        completed_in_tx,
    }))
}
