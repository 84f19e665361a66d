//! The supervisor: starts the pool's background tasks, watches them, and runs the shutdown.
//!
//! A background task that panics, ends with an error, or ends when nothing asked it to
//! stops the whole pool: the supervisor logs which task and why, runs the graceful shutdown,
//! and reports it as [`WorkerError::TaskFailed`] to the [`WorkerHandle`](super::WorkerHandle).
//! A pool that kept running without its fetcher, completer or heartbeat would look alive
//! while it claims nothing, writes no outcome, or lets its leases lapse.
//!
//! The shutdown has two bounded phases, so that it ends within `shutdown_grace` +
//! `database_timeout` (and a moment) whatever the network does:
//! 1. claim nothing more; running handlers get the grace period, then are abandoned (their
//!    jobs are released);
//! 2. once every job task has ended, the fetcher (giving back what it claimed meanwhile)
//!    and the completer (writing the last outcomes) get the database timeout; whatever they
//!    could not write by then is abandoned and counted ([`WorkerError::OutcomesNotWritten`]).
//!
//! The heartbeat keeps extending the leases until the completer is done, then every
//! background task is stopped, its pending database call abandoned.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::MigrateError;

use super::connection::bounded;
use super::execute::panic_message;
use super::task::{TaskResult, WorkerTask};
use super::{Shared, WorkerError, complete, fetch, heartbeat, listen, maintain, schedule};

/// A spawned background task, until it is joined.
struct Watched {
    task: WorkerTask,
    handle: Option<JoinHandle<TaskResult>>,
    /// Whether it may end on its own before shutdown (maintenance does, when autovacuum is
    /// on or it may not vacuum).
    may_end: bool,
}

impl Watched {
    fn spawn(task: WorkerTask, future: impl Future<Output = TaskResult> + Send + 'static) -> Self {
        Self {
            task,
            handle: Some(tokio::spawn(future)),
            may_end: false,
        }
    }

    /// Waits for it to end. Returns why it failed, if it did.
    async fn join(&mut self) -> Option<String> {
        let handle = self.handle.as_mut()?;
        let ended = handle.await;
        self.handle = None;
        failure(ended)
    }

    /// Stops it where it is (its pending database call is abandoned).
    fn abort(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

/// Why a task's join result is a failure, if it is.
fn failure(ended: Result<TaskResult, JoinError>) -> Option<String> {
    match ended {
        Ok(Ok(())) => None,
        Ok(Err(reason)) => Some(reason),
        Err(error) if error.is_panic() => {
            Some(format!("panicked: {}", panic_message(&*error.into_panic())))
        }
        Err(_) => Some("cancelled: its runtime shut down".to_owned()),
    }
}

/// The first task to fail before shutdown. A task that ends without being asked to (other
/// than one that `may_end`, or once `stopping` was cancelled) has failed too.
async fn first_failure(
    tasks: &mut [&mut Watched],
    stopping: &CancellationToken,
) -> (WorkerTask, String) {
    poll_fn(|cx| {
        for watched in tasks.iter_mut() {
            let Some(handle) = watched.handle.as_mut() else {
                continue;
            };
            let Poll::Ready(ended) = Pin::new(handle).poll(cx) else {
                continue;
            };
            watched.handle = None;
            match failure(ended) {
                Some(reason) => return Poll::Ready((watched.task, reason)),
                None if watched.may_end || stopping.is_cancelled() => {}
                None => {
                    let reason = "stopped on its own before shutdown".to_owned();
                    return Poll::Ready((watched.task, reason));
                }
            }
        }
        Poll::Pending
    })
    .await
}

/// The first failure of a task, logged when it happens.
#[derive(Default)]
struct Failure(Option<(WorkerTask, String)>);

impl Failure {
    fn note(&mut self, task: WorkerTask, reason: Option<String>) {
        let Some(reason) = reason else {
            return;
        };
        tracing::error!(task = %task, reason = %reason, "worker task failed: stopping the pool");
        self.0.get_or_insert((task, reason));
    }
}

/// Checks, before the pool claims anything, that its schema is migrated for this release.
/// While the database cannot be reached it keeps trying (logged), as the fetcher would;
/// shutdown ends the wait (`Ok(false)`).
async fn check_schema<S>(shared: &Shared<S>) -> Result<bool, WorkerError> {
    let schema = &shared.config.schema;
    let mut backoff = Duration::from_millis(100);
    loop {
        let checked = bounded(
            shared.config.database_timeout,
            crate::migrate::check_schema(&shared.pool, schema),
        )
        .await;
        let error = match checked {
            Ok(()) => return Ok(true),
            Err(MigrateError::Database(error)) if error.is_transient() => error,
            Err(error) => {
                tracing::error!(
                    schema = schema.name(),
                    error = %error,
                    "the queue's schema is not ready for this worker: not starting"
                );
                return Err(WorkerError::NotMigrated {
                    schema: schema.name().to_owned(),
                    reason: error.to_string(),
                });
            }
        };
        shared.stats.database_error();
        tracing::warn!(
            schema = schema.name(),
            error = %error,
            retry_in_ms = backoff.as_millis() as u64,
            "cannot check the queue's schema yet, retrying"
        );
        tokio::select! {
            () = shared.stop_claiming.cancelled() => return Ok(false),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Starts the pool's tasks, watches them, and once shutdown begins (asked for, or because a
/// task failed) stops them in order.
pub(super) async fn supervise<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
) -> Result<(), WorkerError> {
    use WorkerTask::{Completer, Fetcher, Heartbeat, Listener, Maintenance, Scheduler};

    // nothing runs against a schema this release cannot work with
    if !check_schema(&shared).await? {
        return Ok(()); // shut down before the database answered
    }

    let jobs = TaskTracker::new();
    let background = CancellationToken::new();
    let (completions, receiver) = mpsc::unbounded_channel();

    let mut completer = Watched::spawn(Completer, complete::run(Arc::clone(&shared), receiver));
    let mut heartbeat = Watched::spawn(
        Heartbeat,
        heartbeat::run(Arc::clone(&shared), background.clone()),
    );
    if shared.config.listen && !shared.config.listens() {
        tracing::warn!(
            schema = shared.config.schema.name(),
            poll_interval_ms = shared.config.poll_interval.as_millis() as u64,
            "behind a transaction pooler with no direct LISTEN connection \
             (WorkerBuilder::listen_connect_options): not listening, polling only; \
             new jobs start within the poll interval"
        );
    }
    let mut listener = shared.config.listens().then(|| {
        Watched::spawn(
            Listener,
            listen::run(Arc::clone(&shared), background.clone()),
        )
    });
    // always: its housekeeping is what brings late-committed jobs back into view (see
    // maintain.rs); the `maintenance` setting only turns its vacuum off
    let mut maintenance = Some(Watched {
        may_end: true,
        ..Watched::spawn(
            Maintenance,
            maintain::run(Arc::clone(&shared), background.clone()),
        )
    });
    // stops as soon as shutdown begins, with the claiming: no periodic job is enqueued by
    // a pool that is shutting down (a tick it did not enqueue is another pool's, or this
    // schedule's missed-ticks policy's at the next start)
    let mut scheduler = (!shared.schedules.is_empty()).then(|| {
        Watched::spawn(
            Scheduler,
            schedule::run(Arc::clone(&shared), shared.stop_claiming.clone()),
        )
    });
    // the help texts and units, for whatever recorder is installed now (idempotent)
    crate::telemetry::describe();
    // not watched: the gauges are best effort, and the pool runs on without them
    #[cfg(feature = "metrics")]
    let depth = tokio::spawn(super::depth::run(Arc::clone(&shared), background.clone()));
    let mut fetcher = Watched::spawn(
        Fetcher,
        fetch::run(Arc::clone(&shared), jobs.clone(), completions),
    );
    tracing::info!(
        schema = shared.config.schema.name(),
        concurrency = shared.config.total_concurrency(),
        queues = ?shared.lanes.iter().map(|lane| (&lane.queue, lane.concurrency)).collect::<Vec<_>>(),
        kinds = ?shared.registry.kinds().collect::<Vec<_>>(),
        "worker pool started"
    );

    let mut failed = Failure::default();
    {
        let mut watched = vec![&mut fetcher, &mut completer, &mut heartbeat];
        watched.extend(listener.as_mut());
        watched.extend(maintenance.as_mut());
        watched.extend(scheduler.as_mut());
        tokio::select! {
            biased;
            () = shared.stop_claiming.cancelled() => {}
            (task, reason) = first_failure(&mut watched, &shared.stop_claiming) => {
                failed.note(task, Some(reason));
                if task == Heartbeat {
                    // running jobs' leases are no longer extended: give them back now
                    // rather than let another worker take them while they still run
                    shared.hard_stop.cancel();
                }
                shared.stop_claiming.cancel();
            }
        }
    }

    // the scheduler first: it stopped enqueueing when claiming stopped (between ticks, or
    // no longer waiting for a tick's statement, which may still commit if already sent);
    // wait for it, so that it starts nothing after "shutting down"
    if let Some(watched) = scheduler.as_mut() {
        match timeout_at(Instant::now() + STOP_WITHIN, watched.join()).await {
            Ok(reason) => failed.note(watched.task, reason),
            Err(_) => watched.abort(),
        }
    }
    tracing::info!(running = shared.inflight.len(), "worker pool shutting down");
    let limit = shared.config.database_timeout;
    // Phase 1: the handlers. No job task starts once claiming stopped (the fetcher gives
    // back what it claims from now on), so the tracker can close now.
    let grace_over = Instant::now() + shared.config.shutdown_grace;
    jobs.close();
    if timeout_at(grace_over, jobs.wait()).await.is_err() {
        tracing::warn!(
            running = shared.inflight.len(),
            "shutdown grace period over: giving back the jobs still running"
        );
        shared.hard_stop.cancel();
        // hard-stopped job tasks end at once; bounded all the same
        let _ = timeout_at(grace_over + limit, jobs.wait()).await;
    }

    // Phase 2: the database calls. Every job task has ended and dropped its sender (so has
    // the fetcher, once it ends): the completer writes what is left and stops. The heartbeat
    // keeps the leases meanwhile. What cannot be written in time is abandoned: those jobs
    // run again once their leases lapse.
    let writes_over = Instant::now() + limit;
    for watched in [&mut fetcher, &mut completer] {
        match timeout_at(writes_over, watched.join()).await {
            Ok(reason) => failed.note(watched.task, reason),
            Err(_) => watched.abort(),
        }
    }
    let unwritten = shared.inflight.len() + shared.unreleased_claims.load(Ordering::Relaxed);

    background.cancel();
    // they stop at once, abandoning a pending call; bounded all the same (the maintenance
    // task makes the pool's last report first, within its own bound: on a loaded machine
    // a second was seen not to be enough, and the pool then showed as running for ever)
    let stopped_by = Instant::now() + STOP_WITHIN;
    let mut background = vec![(&mut heartbeat, stopped_by)];
    background.extend(listener.as_mut().map(|watched| (watched, stopped_by)));
    background.extend(
        maintenance
            .as_mut()
            .map(|watched| (watched, stopped_by + super::report::LAST_REPORT_WITHIN)),
    );
    for (watched, by) in background {
        match timeout_at(by, watched.join()).await {
            Ok(reason) => failed.note(watched.task, reason),
            Err(_) => watched.abort(),
        }
    }
    #[cfg(feature = "metrics")]
    {
        let abort = depth.abort_handle();
        if timeout_at(stopped_by, depth).await.is_err() {
            abort.abort();
        }
    }

    tracing::info!(stats = ?shared.stats.snapshot(), "worker pool stopped");
    if unwritten > 0 {
        tracing::error!(
            unwritten,
            database_timeout_ms = limit.as_millis() as u64,
            "shutdown could not write the outcomes of some jobs: they run again after their lease"
        );
    }
    match failed.0 {
        Some((task, reason)) => Err(WorkerError::TaskFailed { task, reason }),
        None if unwritten > 0 => Err(WorkerError::OutcomesNotWritten { count: unwritten }),
        None => Ok(()),
    }
}

/// How long background tasks told to stop may take to end before they are aborted.
const STOP_WITHIN: Duration = Duration::from_secs(1);
