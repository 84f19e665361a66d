//! The heartbeat: extends every lease this worker holds, in one round trip per beat.

use std::sync::Arc;

use super::Shared;

/// Extends held leases every heartbeat interval until `stop` fires. A lease found lost
/// cancels its job's context, and its result will not be written.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut ticks = tokio::time::interval(shared.config.heartbeat_interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is immediate
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let leases = shared.inflight.leases();
        if leases.is_empty() {
            continue;
        }
        match shared
            .transport
            .extend_many(&shared.pool, &leases, shared.config.lease)
            .await
        {
            Ok(lost) if lost.is_empty() => {}
            Ok(lost) => {
                for lease in shared.inflight.mark_lost(&lost) {
                    shared.stats.lease_lost();
                    tracing::warn!(
                        group = %lease.group,
                        message_id = lease.seq,
                        "lease lost while the job runs: cancelling it; another worker may run it"
                    );
                }
            }
            Err(error) => {
                shared.stats.database_error();
                tracing::warn!(error = %error, held = leases.len(), "extending leases failed");
            }
        }
    }
}
