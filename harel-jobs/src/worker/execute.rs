//! Running one claimed job: decode, run (with timeout, panic capture and shutdown), and
//! decide what becomes of it. A panic anywhere on that path, decoding included, is a failed
//! attempt: a job task that died would leave its lease held (and extended) for ever.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tracing::Instrument;

use super::Shared;
use super::complete::Finished;
use crate::context::{Completion, ConnectionReads, Execution, ExecutionFlags, JobContext};
use crate::job_error::{Action, JobResult};
use crate::retry::{Attempted, Decision, Limits, decide};
use crate::steps::{self, StepLog};
use crate::transport::ClaimedMessage;
use crate::vocabulary::MAX_DELAY;

/// Waits for a handler slot, runs one claimed job to its settlement, then hands the
/// settlement to the completer. A job still waiting for a slot when shutdown begins is given
/// back without counting the attempt.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    lane: usize,
    message: ClaimedMessage,
    completions: tokio::sync::mpsc::UnboundedSender<Finished>,
) {
    let cancel = shared.hard_stop.child_token();
    let flags = Arc::new(ExecutionFlags::default());
    let labels = shared.labels(lane, &message.kind);
    shared.inflight.insert(
        message.lease.clone(),
        labels.clone(),
        cancel.clone(),
        Arc::clone(&flags),
    );
    let span = job_span(&message, &shared.lanes[lane].queue);
    let slot = tokio::select! {
        biased;
        slot = Arc::clone(&shared.lanes[lane].slots).acquire_owned() => slot.ok(),
        () = shared.stop_claiming.cancelled() => None,
    };
    let (attempted, limits) = match slot {
        Some(_slot) => {
            // a panic anywhere on the job's path is a failed attempt (`attempt` catches the
            // ones it can attribute; this net catches the rest, with the pool's limits)
            let attempted =
                AssertUnwindSafe(attempt(&shared, lane, &message, cancel, &flags, None))
                    .catch_unwind()
                    .instrument(span.clone())
                    .await;
            attempted.unwrap_or_else(|panic| {
                let error = format!("job panicked: {}", panic_message(&*panic));
                (Attempted::failed(error), shared.config.limits())
            })
        }
        None => (
            Attempted::Interrupted { started: false },
            shared.config.limits(),
        ),
    };
    let decision = {
        let _entered = span.enter();
        decided(message.attempt, limits, attempted)
    };
    let _entered = span.enter();
    let completed_in_tx = flags
        .completed_in_tx
        .load(std::sync::atomic::Ordering::Acquire);
    if !shared.inflight.settle(&message.lease) {
        // the heartbeat found the lease lost: another worker may run this job now, so its
        // result must not be written (the heartbeat already counted the lost lease)
        shared.inflight.remove(&message.lease);
        if completed_in_tx {
            tracing::debug!("the handler completed the job in its own transaction");
        } else {
            tracing::warn!("lease lost while the job ran: result discarded, the job may run again");
        }
        return;
    }
    let finished = Finished {
        lane,
        lease: message.lease,
        labels,
        decision,
        retain: limits.retain,
        completed_in_tx: flags,
    };
    if let Err(unsent) = completions.send(finished) {
        // only after the completer stopped, which shutdown does last: the lease lapses and
        // another worker runs the job again
        shared.inflight.remove(&unsent.0.lease);
        tracing::error!("completer stopped before this job settled; it will run again");
    }
}

/// The span one attempt of `message` runs in, with OpenTelemetry's messaging fields
/// (semantic conventions 1.26 and later): a consumer span named `process {queue}`
/// processing message `messaging.message.id` of queue `messaging.destination.name`, and
/// the few fields of its own (`kind`, `group`, `attempt`); `otel.status_code` and
/// `error.type` are recorded when the attempt fails ([`decided`]). With the
/// `opentelemetry` feature, the context stored with the job at enqueue (its `send` or
/// `create` span's) is its parent.
pub(super) fn job_span(message: &ClaimedMessage, queue: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "harel_job",
        otel.name = format!("process {queue}"),
        otel.kind = "consumer",
        messaging.system = crate::trace_context::MESSAGING_SYSTEM,
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %queue,
        // a string in the semantic conventions
        messaging.message.id = %message.lease.id,
        kind = %message.kind,
        group = %message.lease.group,
        attempt = message.attempt,
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    crate::trace_context::set_parent(&span, message.trace_context.as_deref());
    span
}

/// Why an attempt ended without a result from the handler.
enum Interrupted {
    Panicked(String),
    TimedOut(Duration),
}

/// Runs one attempt of `message` (unless it is out of attempts) and says what it came to,
/// with the limits of its job type.
pub(super) async fn attempt<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    lane: usize,
    message: &ClaimedMessage,
    cancel: tokio_util::sync::CancellationToken,
    flags: &Arc<ExecutionFlags>,
    reads: Option<ConnectionReads>,
) -> (Attempted, Limits) {
    let config = &shared.config;
    let Some(handler) = shared.registry.get(&message.kind) else {
        // maybe a newer worker knows it (rolling deploy): retry like a failure
        let error = format!("no handler registered for job kind {:?}", message.kind);
        return (Attempted::failed(error), config.limits());
    };
    let options = handler.options();
    let limits = Limits {
        max_attempts: options.max_attempts.unwrap_or(config.max_attempts),
        backoff: options.backoff.unwrap_or(config.backoff),
        retain: options.retain.or(config.retain),
    };
    if message.attempt > limits.max_attempts {
        return (Attempted::OutOfAttempts, limits);
    }

    let execution = Execution {
        kind: message.kind.clone(),
        group: message.lease.group.clone(),
        job_id: message.lease.id,
        attempt: message.attempt,
        max_attempts: limits.max_attempts,
        cancel: cancel.clone(),
        completion: Some(Completion {
            transport: shared.transport.clone(),
            lease: message.lease.clone(),
            retain: limits.retain,
        }),
        flags: Arc::clone(flags),
        // nothing read until the handler's first `step`
        steps: Arc::new(StepLog::in_database(steps::Database {
            store: shared.store.clone(),
            pool: shared.pool.clone(),
            pooler: shared.config.transaction_pooler,
            timeout: shared.config.database_timeout,
            lease: message.lease.clone(),
        })),
        reads,
    };
    let ctx = JobContext::new(Arc::clone(&shared.state), Arc::new(execution));
    // decoding runs the job type's own code (`deserialize_with`, `Deserialize` impls)
    let started =
        std::panic::catch_unwind(AssertUnwindSafe(|| handler.start(&message.payload, ctx)));
    let future = match started {
        Ok(Ok(future)) => future,
        Ok(Err(error)) => {
            let error = format!(
                "payload does not decode as job kind {:?}: {error}",
                message.kind
            );
            return (Attempted::Permanent { error }, limits);
        }
        Err(panic) => {
            let error = format!("decoding the payload panicked: {}", panic_message(&*panic));
            return (Attempted::failed(error), limits);
        }
    };

    let labels = shared.labels(lane, &message.kind);
    if message.attempt == 1 {
        let latency = (chrono::Utc::now() - message.enqueued_at)
            .to_std()
            .unwrap_or_default();
        crate::telemetry::started(&labels, latency);
    }
    let started = Instant::now();
    let timeout = options.timeout.or(config.timeout);
    let guarded = async {
        let run = AssertUnwindSafe(future).catch_unwind();
        let result = match timeout {
            Some(limit) => tokio::time::timeout(limit, run)
                .await
                .map_err(|_| Interrupted::TimedOut(limit))?,
            None => run.await,
        };
        result.map_err(|panic| Interrupted::Panicked(panic_message(&*panic)))
    };
    let result: Result<JobResult, Interrupted> = tokio::select! {
        biased;
        result = guarded => result,
        () = shared.hard_stop.cancelled() => {
            return (Attempted::Interrupted { started: true }, limits);
        }
    };
    shared.lanes[lane].record_run_time(started.elapsed());
    crate::telemetry::handler_ran(&labels, started.elapsed());
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "handler ended"
    );

    let attempted = match result {
        Ok(Ok(())) => Attempted::Succeeded,
        Ok(Err(error)) => match error.action() {
            Action::Permanent => Attempted::Permanent {
                error: error.chain(),
            },
            Action::Retry(retry_after) => Attempted::Failed {
                error: error.chain(),
                retry_after,
            },
            Action::Snooze(delay) => Attempted::Snoozed(delay),
        },
        Err(Interrupted::Panicked(text)) => Attempted::failed(format!("handler panicked: {text}")),
        Err(Interrupted::TimedOut(limit)) => {
            cancel.cancel();
            Attempted::failed(format!("timed out after {limit:?}"))
        }
    };
    (attempted, limits)
}

/// The policy's decision for `attempted`, logged.
pub(super) fn decided(attempt: u32, limits: Limits, attempted: Attempted) -> Decision {
    if let Attempted::Snoozed(delay)
    | Attempted::Failed {
        retry_after: Some(delay),
        ..
    } = &attempted
        && *delay > MAX_DELAY
    {
        tracing::warn!(
            asked_ms = delay.as_millis() as u64,
            "the handler asked for a delay over the maximum of 100 years: cut to it"
        );
    }
    let decision = decide(attempt, limits, attempted, rand::random());
    // a failed attempt's span (the current one, `job_span`) ends in error: `error.type`
    // says what comes of the job (a bounded value, never the error's text)
    let failed = match &decision {
        Decision::Retry { .. } => Some("retry"),
        Decision::Dead { .. } => Some("dead_letter"),
        _ => None,
    };
    if let Some(error_type) = failed {
        let span = tracing::Span::current();
        span.record("otel.status_code", "ERROR");
        span.record("error.type", error_type);
    }
    match &decision {
        Decision::Succeeded => tracing::debug!("job succeeded"),
        Decision::Retry { delay, error } => tracing::warn!(
            error = %error,
            retry_in_ms = delay.as_millis() as u64,
            "job failed, will retry"
        ),
        Decision::Dead { error, .. } => {
            tracing::error!(error = %error, "job failed for good: moved to the dead letters");
        }
        Decision::Snooze(delay) => {
            tracing::debug!(snooze_ms = delay.as_millis() as u64, "job snoozed");
        }
        Decision::Released { started } => {
            tracing::debug!(started, "job given back: the worker is shutting down");
        }
    }
    decision
}

/// The text of a panic payload (`&str` or `String`, as `panic!` makes them).
pub(super) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages() {
        let caught = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(&*caught), "plain");
        let caught = std::panic::catch_unwind(|| panic!("formatted {}", 7)).unwrap_err();
        assert_eq!(panic_message(&*caught), "formatted 7");
    }
}
