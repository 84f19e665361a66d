//! The heartbeat: extends every lease this worker holds, in one round trip per beat.

use std::sync::Arc;

use sqlx::Connection as _;

use super::Shared;
use super::connection::{Checkout, OwnConnection, bounded};
use super::task::{TaskResult, WorkerTask};
use crate::error::TransportError;
use crate::store::session::{self, SynchronousCommit};
use crate::transport::{Lease, LeaseStatus};

/// Extends held leases every heartbeat interval until `stop` fires. A lease found lost
/// cancels its job's context, and its result will not be written.
///
/// The heartbeat uses a connection of its own, outside the pool: handlers that hold every
/// pooled connection must not be able to starve it, or leases would lapse under load and
/// jobs run twice. If that connection cannot be opened, it falls back to the pool. Each beat
/// is bounded by the database timeout, and abandoned when `stop` fires.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) -> TaskResult {
    let mut ticks = tokio::time::interval(shared.config.heartbeat_interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate
    let mut connection =
        OwnConnection::durable(&shared.pool).through_pooler(shared.config.transaction_pooler);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        shared.faults.check(WorkerTask::Heartbeat)?;
        let leases = shared.inflight.leases();
        if leases.is_empty() {
            continue;
        }
        let beat = bounded(
            shared.config.database_timeout,
            extend(&shared, &mut connection, &leases),
        );
        let extended = tokio::select! {
            () = stop.cancelled() => {
                // abandoned mid-call: the connection is in the middle of an exchange
                connection.reset();
                return Ok(());
            }
            extended = beat => extended,
        };
        match extended {
            Ok(statuses) => {
                let of = |wanted: LeaseStatus| -> Vec<Lease> {
                    leases
                        .iter()
                        .zip(&statuses)
                        .filter(|(_, status)| **status == wanted)
                        .map(|(lease, _)| lease.clone())
                        .collect()
                };
                for lease in shared
                    .inflight
                    .request_cancel(&of(LeaseStatus::CancelRequested))
                {
                    tracing::info!(
                        group = %lease.group,
                        message_id = lease.id.get(),
                        "the job's cancel was asked for: signalling its handler"
                    );
                }
                for (lease, labels) in shared.inflight.mark_lost(&of(LeaseStatus::Lost)) {
                    shared.stats.lease_lost(&labels);
                    tracing::warn!(
                        group = %lease.group,
                        message_id = lease.id.get(),
                        "lease lost while the job runs: cancelling it; another worker may run it"
                    );
                }
            }
            Err(error) => {
                // a broken connection is replaced at the next beat
                connection.reset();
                shared.stats.database_error();
                tracing::warn!(error = %error, held = leases.len(), "extending leases failed");
            }
        }
    }
    connection.close(shared.config.database_timeout).await;
    Ok(())
}

/// One beat: extends `leases` on the heartbeat's own connection, or on a pooled one if that
/// cannot be opened (the server out of connections?). Returns each lease's status. Either
/// way the extension commits durably: on a pooled connection, in a transaction of its own
/// with `SET LOCAL synchronous_commit = on`, which leaves the pool's sessions as they were.
async fn extend<S>(
    shared: &Shared<S>,
    connection: &mut OwnConnection,
    leases: &[Lease],
) -> Result<Vec<LeaseStatus>, TransportError> {
    let lease = shared.config.lease;
    if let Ok(mut unit) = connection.unit().await {
        let statuses = shared
            .transport
            .heartbeat(unit.connection(), leases, lease)
            .await?;
        unit.finish().await?;
        return Ok(statuses);
    }
    let mut pooled = Checkout::acquire(&shared.pool).await?;
    let mut transaction = pooled.connection().begin().await?;
    session::synchronous_commit_set_local(&mut transaction, SynchronousCommit::On).await?;
    let statuses = shared
        .transport
        .heartbeat(&mut *transaction, leases, lease)
        .await?;
    transaction.commit().await?;
    pooled.done();
    Ok(statuses)
}
