//! The fetcher: claims batches of groups as capacity frees up, and starts their jobs. One
//! per queue the pool serves (its lane), each on a connection of its own.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, mpsc};
use tokio_util::task::TaskTracker;

use super::complete::Finished;
use super::connection::{OwnConnection, bounded};
use super::task::{TaskResult, WorkerTask};
use super::{Shared, execute};
use crate::error::TransportError;
use crate::transport::{ClaimRequest, ClaimedMessage, Lease, LeaseToken, Settlement};

/// Claims and starts the jobs of every queue the pool serves until told to stop claiming:
/// [`run_lane`] `pipelines` times per queue, each on a connection of its own, so that
/// that many claims of a queue are in flight at once (they share the queue's claim limit,
/// and skip each other's groups as any two claims do). Ends when they all have, or at the
/// first that failed.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    jobs: TaskTracker,
    completions: mpsc::UnboundedSender<Finished>,
) -> TaskResult {
    let lanes = shared.lanes.len();
    let lanes = (0..lanes * shared.config.pipelines).map(|pipeline| {
        run_lane(
            Arc::clone(&shared),
            pipeline % lanes,
            jobs.clone(),
            completions.clone(),
        )
    });
    futures_util::future::try_join_all(lanes).await?;
    Ok(())
}

/// Claims and starts one queue's jobs until told to stop claiming.
///
/// Each round waits until fewer jobs are claimed and unfinished than the claim limit
/// (`Lane::claim_limit`: the concurrency, plus up to two claim batches while handlers are
/// fast), takes all the room up to the claim batch, and claims that many groups in one
/// round trip. A full batch means more work is likely waiting: claim again at once. A short
/// batch means the queue is drained for now: wait for a NOTIFY, a completed batch of acks
/// (which may have freed groups), or the poll interval. Each claim, and the release of jobs claimed while shutdown began, is bounded by
/// the database timeout.
async fn run_lane<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    lane: usize,
    jobs: TaskTracker,
    completions: mpsc::UnboundedSender<Finished>,
) -> TaskResult {
    let this = &shared.lanes[lane];
    let semaphore = Arc::clone(&this.claims);
    let mut connection =
        OwnConnection::durable(&shared.pool).through_pooler(shared.config.transaction_pooler);
    let mut error_backoff = Duration::from_millis(100);
    loop {
        shared.faults.check(WorkerTask::Fetcher)?;
        let mut permits: OwnedSemaphorePermit = tokio::select! {
            biased;
            () = shared.stop_claiming.cancelled() => break,
            permit = Arc::clone(&semaphore).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // closed: shutting down
            },
        };
        // at most `claim_limit` jobs claimed and unfinished; wait for one to end if over
        let limit = this.claim_limit();
        let outstanding = this.outstanding();
        if outstanding > limit {
            drop(permits);
            tokio::select! {
                biased;
                () = shared.stop_claiming.cancelled() => break,
                () = this.job_ended.notified() => {}
            }
            continue;
        }
        let extra = semaphore
            .available_permits()
            .min(limit - outstanding)
            .min(shared.config.claim_batch.saturating_sub(1));
        if extra > 0
            && let Ok(more) = Arc::clone(&semaphore).try_acquire_many_owned(extra as u32)
        {
            permits.merge(more);
        }
        let wanted = permits.num_permits();
        let request = ClaimRequest {
            token: LeaseToken::new(),
            lease: shared.config.lease,
            min_priority: shared.config.min_priority,
            limit: wanted as u32,
            queue: Some(this.queue.to_string()),
            // the server gives up waiting for a limited queue's turn well before this worker
            // gives up on the answer: an abandoned claim never leases anything afterwards
            max_wait: Some(shared.config.database_timeout / 2),
        };

        let limit = shared.config.database_timeout;
        let started = std::time::Instant::now();
        let claimed_at = tokio::time::Instant::now();
        let claimed = match bounded(limit, claim(&shared, lane, &mut connection, &request)).await {
            Ok(claimed) => {
                crate::telemetry::claim_round_trip(started.elapsed());
                error_backoff = Duration::from_millis(100);
                claimed
            }
            Err(error) => {
                drop(permits);
                connection.reset();
                shared.stats.database_error();
                tracing::warn!(
                    error = %error,
                    retry_in_ms = error_backoff.as_millis() as u64,
                    "claiming jobs failed, retrying"
                );
                tokio::select! {
                    () = shared.stop_claiming.cancelled() => return Ok(()),
                    () = tokio::time::sleep(error_backoff) => {}
                }
                error_backoff = (error_backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };

        let got = claimed.len();
        if shared.stop_claiming.is_cancelled() {
            // claimed while shutdown began: give them straight back, attempt uncounted
            release_unstarted(&shared, &mut connection, claimed).await;
            break;
        }
        for message in &claimed {
            shared.stats.claimed(&shared.labels(lane, &message.kind));
        }
        for message in claimed {
            let Some(permit) = permits.split(1) else {
                break; // cannot happen: the claim returns at most `wanted` messages
            };
            let shared = Arc::clone(&shared);
            let completions = completions.clone();
            jobs.spawn(async move {
                execute::run(Arc::clone(&shared), lane, message, completions).await;
                drop(permit);
                shared.lanes[lane].job_ended.notify_one();
            });
        }
        drop(permits);

        if got < wanted {
            tokio::select! {
                biased;
                () = shared.stop_claiming.cancelled() => break,
                () = this.wake.notified() => {}
                () = tokio::time::sleep_until(this.next_look(shared.config.poll_interval, claimed_at)) => {}
            }
        }
    }
    connection.close(shared.config.database_timeout).await;
    Ok(())
}

/// One claim on the fetcher's own connection.
async fn claim<S>(
    shared: &Shared<S>,
    lane: usize,
    connection: &mut OwnConnection,
    request: &ClaimRequest,
) -> Result<Vec<ClaimedMessage>, TransportError> {
    let mut unit = connection.unit().await?;
    let hint = shared.lanes[lane]
        .claim_hint
        .swap(i64::MAX, std::sync::atomic::Ordering::Relaxed);
    let claimed = match shared
        .transport
        .claim_many_hinted(
            unit.connection(),
            request,
            (hint != i64::MAX).then_some(hint),
        )
        .await
    {
        Ok(claimed) => unit.finish().await.map(|()| claimed).map_err(Into::into),
        Err(error) => Err(error),
    };
    if claimed.is_err() && hint != i64::MAX {
        // not used: keep it for the next claim
        shared.lanes[lane].hint(hint);
    }
    claimed
}

/// Gives back jobs claimed but never started. Until it has, they count as unreleased: if the
/// release fails, or shutdown abandons it, they wait for their lease.
async fn release_unstarted<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    connection: &mut OwnConnection,
    claimed: Vec<ClaimedMessage>,
) {
    if claimed.is_empty() {
        return;
    }
    let settlements: Vec<(Lease, Settlement)> = claimed
        .into_iter()
        .map(|message| {
            let release = Settlement::Release {
                delay: Duration::ZERO,
                error: None,
                count_attempt: false,
            };
            (message.lease, release)
        })
        .collect();
    let unreleased = &shared.unreleased_claims;
    unreleased.fetch_add(settlements.len(), std::sync::atomic::Ordering::Relaxed);
    let release = async {
        let mut unit = connection.unit().await?;
        let released = shared
            .transport
            .settle_many(unit.connection(), &settlements, None)
            .await?;
        unit.finish().await?;
        Ok::<_, TransportError>(released)
    };
    match bounded(shared.config.database_timeout, release).await {
        Ok(_) => {
            unreleased.fetch_sub(settlements.len(), std::sync::atomic::Ordering::Relaxed);
            for _ in &settlements {
                shared.stats.released();
            }
        }
        Err(error) => {
            connection.reset();
            tracing::warn!(
                error = %error,
                "could not give back jobs claimed during shutdown; they run again after their lease"
            );
        }
    }
}
