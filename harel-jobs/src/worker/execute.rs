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
use super::complete::{Finished, Outcome};
use crate::context::{Execution, JobContext};
use crate::job_error::{Action, JobResult};
use crate::retry::Backoff;
use crate::transport::ClaimedMessage;

/// Waits for a handler slot, runs one claimed job to its settlement, then hands the
/// settlement to the completer. A job still waiting for a slot when shutdown begins is given
/// back without counting the attempt.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    message: ClaimedMessage,
    completions: tokio::sync::mpsc::UnboundedSender<Finished>,
) {
    let seq = message.lease.seq;
    let cancel = shared.hard_stop.child_token();
    shared
        .inflight
        .insert(message.lease.clone(), cancel.clone());
    let span = tracing::info_span!(
        "harel_job",
        kind = %message.kind,
        group = %message.lease.group,
        message_id = seq,
        attempt = message.attempt,
    );
    let slot = tokio::select! {
        biased;
        slot = Arc::clone(&shared.slots).acquire_owned() => slot.ok(),
        () = shared.stop_claiming.cancelled() => None,
    };
    let outcome = match slot {
        Some(_slot) => {
            // a panic anywhere on the job's path is a failed attempt (`decide` catches the
            // ones it can attribute; this net catches the rest, with the pool's defaults)
            let decided = AssertUnwindSafe(decide(&shared, &message, cancel))
                .catch_unwind()
                .instrument(span.clone())
                .await;
            decided.unwrap_or_else(|panic| {
                let _entered = span.enter();
                let config = &shared.config;
                let error = format!("job panicked: {}", panic_message(&*panic));
                failed(
                    message.attempt,
                    config.max_attempts,
                    None,
                    &config.backoff,
                    error,
                )
            })
        }
        None => Outcome::Release {
            count_attempt: false,
            reason: "the worker shut down before the job started",
        },
    };
    let _entered = span.enter();
    if !shared.inflight.settle(seq) {
        // the heartbeat found the lease lost: another worker may run this job now, so its
        // result must not be written (the heartbeat already counted the lost lease)
        shared.inflight.remove(seq);
        tracing::warn!("lease lost while the job ran: result discarded, the job may run again");
        return;
    }
    let finished = Finished {
        lease: message.lease,
        outcome,
    };
    if completions.send(finished).is_err() {
        // only after the completer stopped, which shutdown does last: the lease lapses and
        // another worker runs the job again
        shared.inflight.remove(seq);
        tracing::error!("completer stopped before this job settled; it will run again");
    }
}

/// Why an attempt ended without a result from the handler.
enum Interrupted {
    Panicked(String),
    TimedOut(Duration),
}

async fn decide<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    message: &ClaimedMessage,
    cancel: tokio_util::sync::CancellationToken,
) -> Outcome {
    let config = &shared.config;
    let attempt = message.attempt;
    let Some(handler) = shared.registry.get(&message.kind) else {
        // maybe a newer worker knows it (rolling deploy): retry like a failure
        let error = format!("no handler registered for job kind {:?}", message.kind);
        return failed(attempt, config.max_attempts, None, &config.backoff, error);
    };
    let options = handler.options();
    let max_attempts = options.max_attempts.unwrap_or(config.max_attempts);
    let backoff = options.backoff.unwrap_or(config.backoff);
    if attempt > max_attempts {
        let made = attempt - 1;
        let error = format!(
            "attempt {made} of {max_attempts} never reported a result (its worker stopped or crashed)"
        );
        tracing::error!(error = %error, "job failed for good: moved to the dead letters");
        return Outcome::GiveUp {
            error,
            attempts: made,
        };
    }

    let execution = Execution {
        kind: message.kind.clone(),
        group: message.lease.group.clone(),
        message_id: message.lease.seq,
        attempt,
        max_attempts,
        cancel: cancel.clone(),
    };
    let ctx = JobContext::new(Arc::clone(&shared.state), Arc::new(execution));
    // decoding runs the job type's own code (`deserialize_with`, `Deserialize` impls)
    let started =
        std::panic::catch_unwind(AssertUnwindSafe(|| handler.start(&message.payload, ctx)));
    let future = match started {
        Ok(Ok(future)) => future,
        Ok(Err(error)) => {
            return dead(format!(
                "payload does not decode as job kind {:?}: {error}",
                message.kind
            ));
        }
        Err(panic) => {
            let error = format!("decoding the payload panicked: {}", panic_message(&*panic));
            return failed(attempt, max_attempts, None, &backoff, error);
        }
    };

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
            return Outcome::Release {
                count_attempt: true,
                reason: "the worker shut down before the job finished",
            };
        }
    };
    shared.record_run_time(started.elapsed());
    let elapsed_ms = started.elapsed().as_millis() as u64;

    match result {
        Ok(Ok(())) => {
            tracing::debug!(elapsed_ms, "job succeeded");
            Outcome::Succeeded
        }
        Ok(Err(error)) => match error.action() {
            Action::Permanent => dead(error.chain()),
            Action::Retry(after) => failed(attempt, max_attempts, after, &backoff, error.chain()),
            Action::Snooze(delay) => {
                tracing::debug!(snooze_ms = delay.as_millis() as u64, "job snoozed");
                Outcome::Snooze(delay)
            }
        },
        Err(Interrupted::Panicked(text)) => failed(
            attempt,
            max_attempts,
            None,
            &backoff,
            format!("handler panicked: {text}"),
        ),
        Err(Interrupted::TimedOut(limit)) => {
            cancel.cancel();
            failed(
                attempt,
                max_attempts,
                None,
                &backoff,
                format!("timed out after {limit:?}"),
            )
        }
    }
}

/// A failed attempt: retried after its delay while attempts remain, else a dead letter.
fn failed(
    attempt: u32,
    max_attempts: u32,
    after: Option<Duration>,
    backoff: &Backoff,
    error: String,
) -> Outcome {
    if attempt >= max_attempts {
        return dead(format!("{error} (attempt {attempt} of {max_attempts})"));
    }
    let delay = after.unwrap_or_else(|| backoff.delay_random(attempt));
    tracing::warn!(
        error = %error,
        retry_in_ms = delay.as_millis() as u64,
        "job failed, will retry"
    );
    Outcome::Retry { delay, error }
}

fn dead(error: String) -> Outcome {
    tracing::error!(error = %error, "job failed for good: moved to the dead letters");
    Outcome::DeadLetter(error)
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
    fn failure_retries_until_the_last_attempt() {
        let backoff = Backoff::fixed(Duration::from_secs(4));
        match failed(1, 3, None, &backoff, "boom".into()) {
            Outcome::Retry { delay, error } => {
                assert!(delay >= Duration::from_secs(3) && delay <= Duration::from_secs(4));
                assert_eq!(error, "boom");
            }
            other => panic!("{other:?}"),
        }
        match failed(2, 3, Some(Duration::from_millis(5)), &backoff, "x".into()) {
            Outcome::Retry { delay, .. } => assert_eq!(delay, Duration::from_millis(5)),
            other => panic!("{other:?}"),
        }
        match failed(3, 3, None, &backoff, "boom".into()) {
            Outcome::DeadLetter(error) => assert_eq!(error, "boom (attempt 3 of 3)"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn panic_messages() {
        let caught = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_message(&*caught), "plain");
        let caught = std::panic::catch_unwind(|| panic!("formatted {}", 7)).unwrap_err();
        assert_eq!(panic_message(&*caught), "formatted 7");
    }
}
