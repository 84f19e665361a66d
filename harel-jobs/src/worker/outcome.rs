//! The retry policy: what becomes of a job, decided in one place.
//!
//! [`decide`] is a pure function of the attempt number, the job's limits and what the
//! attempt came to ([`Attempted`]); the job task calls it, the completer writes its
//! [`Outcome`] as it is (the SQL only records what was decided), and the counters count
//! the outcome itself.

use std::time::Duration;

use crate::retry::Backoff;
use crate::transport::Settlement;
use crate::vocabulary::MAX_DELAY;

/// What an attempt came to, before the policy looks at it.
#[derive(Debug, PartialEq)]
pub(crate) enum Attempted {
    /// The handler returned `Ok`.
    Succeeded,
    /// A failure retrying may cure: the handler's error, a panic, a timeout, a kind no
    /// handler is registered for. `retry_after` replaces the backoff when set.
    Failed {
        error: String,
        retry_after: Option<Duration>,
    },
    /// A failure retrying cannot cure: `JobError::permanent`, a payload that does not decode.
    Permanent { error: String },
    /// Not a failure: run again after this long, without using an attempt.
    Snoozed(Duration),
    /// The claim found the job past its last attempt: earlier attempts never reported a
    /// result (their workers stopped or crashed). It is not run again.
    OutOfAttempts,
    /// The worker is shutting down: the job is given back at once.
    Interrupted {
        /// Whether the handler had started (its attempt counts).
        started: bool,
    },
}

impl Attempted {
    /// A failure retried after the backoff.
    pub fn failed(error: String) -> Self {
        Self::Failed {
            error,
            retry_after: None,
        }
    }
}

/// What becomes of a job: the policy's decision, written by the completer as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Done: ack it.
    Succeeded,
    /// Failed, attempts remain: its group waits `delay`, then it runs again.
    Retry { delay: Duration, error: String },
    /// Failed for good: a dead letter recording `error` (and `attempts`, when not the
    /// claims counted).
    Dead {
        error: String,
        attempts: Option<u32>,
    },
    /// Snoozed: its group waits `delay`; the attempt is given back.
    Snooze(Duration),
    /// Given back at once (shutdown); the attempt counts if the handler had started.
    Released { started: bool },
}

/// The limits of one job type: its own options, or the pool's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// How long a completed job is kept in the history (`None`: deleted at once).
    pub retain: Option<Duration>,
}

/// The policy. `attempt` is the attempt just made (from 1; the claim counted it);
/// `random` in `[0, 1)` places the backoff's jitter (see [`Backoff::delay`]).
///
/// - success: ack;
/// - a failure: retried after `retry_after` or the backoff while `attempt < max_attempts`,
///   else a dead letter whose error ends with `(attempt n of max)`;
/// - a permanent failure: a dead letter at once;
/// - a snooze: runs again after its delay, the attempt given back;
/// - past the last attempt at claim time: a dead letter recording the attempts made;
/// - shutdown: given back at once.
///
/// Delays longer than [`MAX_DELAY`] (the longest the database accepts) are cut to it.
pub(crate) fn decide(attempt: u32, limits: Limits, attempted: Attempted, random: f64) -> Outcome {
    match attempted {
        Attempted::Succeeded => Outcome::Succeeded,
        Attempted::Failed { error, .. } if attempt >= limits.max_attempts => Outcome::Dead {
            error: format!("{error} (attempt {attempt} of {})", limits.max_attempts),
            attempts: None,
        },
        Attempted::Failed { error, retry_after } => Outcome::Retry {
            delay: bounded(retry_after.unwrap_or_else(|| limits.backoff.delay(attempt, random))),
            error,
        },
        Attempted::Permanent { error } => Outcome::Dead {
            error,
            attempts: None,
        },
        Attempted::Snoozed(delay) => Outcome::Snooze(bounded(delay)),
        Attempted::OutOfAttempts => {
            let made = attempt.saturating_sub(1);
            Outcome::Dead {
                error: format!(
                    "attempt {made} of {} never reported a result (its worker stopped or crashed)",
                    limits.max_attempts
                ),
                attempts: Some(made),
            }
        }
        Attempted::Interrupted { started } => Outcome::Released { started },
    }
}

/// `delay`, or [`MAX_DELAY`] if it is longer.
pub(crate) fn bounded(delay: Duration) -> Duration {
    delay.min(MAX_DELAY)
}

impl Outcome {
    /// What the transport writes for it.
    pub fn settlement(&self) -> Settlement {
        match self {
            Self::Succeeded => Settlement::Ack,
            Self::Dead { error, attempts } => Settlement::DeadLetter {
                error: error.clone(),
                attempts: *attempts,
            },
            Self::Retry { delay, error } => Settlement::Release {
                delay: *delay,
                error: Some(error.clone()),
                count_attempt: true,
            },
            Self::Snooze(delay) => Settlement::Release {
                delay: *delay,
                error: None,
                count_attempt: false,
            },
            Self::Released { started } => Settlement::Release {
                delay: Duration::ZERO,
                error: Some(
                    if *started {
                        "the worker shut down before the job finished"
                    } else {
                        "the worker shut down before the job started"
                    }
                    .to_owned(),
                ),
                count_attempt: *started,
            },
        }
    }

    /// When its group may be claimed again, if it waits.
    pub fn wait(&self) -> Option<Duration> {
        match self {
            Self::Retry { delay, .. } | Self::Snooze(delay) => Some(*delay),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_attempts: 3,
        backoff: Backoff::exponential(Duration::from_secs(2), Duration::from_secs(60)),
        retain: None,
    };

    fn failed(error: &str, retry_after: Option<Duration>) -> Attempted {
        Attempted::Failed {
            error: error.into(),
            retry_after,
        }
    }

    #[test]
    fn success_is_an_ack() {
        assert_eq!(
            decide(1, LIMITS, Attempted::Succeeded, 0.5),
            Outcome::Succeeded
        );
        assert_eq!(
            decide(3, LIMITS, Attempted::Succeeded, 0.5),
            Outcome::Succeeded
        );
    }

    #[test]
    fn a_failure_is_retried_after_the_backoff_until_the_last_attempt() {
        // attempt 1: 2 s nominal, jitter 0 gives ¾ of it; attempt 2: 4 s, jitter 1 all of it
        assert_eq!(
            decide(1, LIMITS, failed("boom", None), 0.0),
            Outcome::Retry {
                delay: Duration::from_millis(1500),
                error: "boom".into()
            }
        );
        assert_eq!(
            decide(2, LIMITS, failed("boom", None), 1.0),
            Outcome::Retry {
                delay: Duration::from_secs(4),
                error: "boom".into()
            }
        );
        assert_eq!(
            decide(3, LIMITS, failed("boom", None), 0.5),
            Outcome::Dead {
                error: "boom (attempt 3 of 3)".into(),
                attempts: None
            }
        );
    }

    #[test]
    fn retry_after_replaces_the_backoff_even_when_zero() {
        assert_eq!(
            decide(1, LIMITS, failed("busy", Some(Duration::ZERO)), 0.5),
            Outcome::Retry {
                delay: Duration::ZERO,
                error: "busy".into()
            }
        );
        assert_eq!(
            decide(
                2,
                LIMITS,
                failed("busy", Some(Duration::from_millis(5))),
                0.5
            ),
            Outcome::Retry {
                delay: Duration::from_millis(5),
                error: "busy".into()
            }
        );
        // …but not the limit on attempts
        assert!(matches!(
            decide(3, LIMITS, failed("busy", Some(Duration::ZERO)), 0.5),
            Outcome::Dead { .. }
        ));
    }

    #[test]
    fn a_permanent_failure_is_dead_at_once() {
        let permanent = Attempted::Permanent {
            error: "no such user".into(),
        };
        assert_eq!(
            decide(1, LIMITS, permanent, 0.5),
            Outcome::Dead {
                error: "no such user".into(),
                attempts: None
            }
        );
    }

    #[test]
    fn a_snooze_keeps_its_attempt_and_its_delay_is_bounded() {
        let snooze = Attempted::Snoozed(Duration::from_secs(30));
        assert_eq!(
            decide(3, LIMITS, snooze, 0.5),
            Outcome::Snooze(Duration::from_secs(30))
        );
        let forever = Duration::from_secs(200 * 365 * 24 * 3600);
        assert_eq!(
            decide(1, LIMITS, Attempted::Snoozed(forever), 0.5),
            Outcome::Snooze(MAX_DELAY)
        );
        assert_eq!(
            decide(1, LIMITS, failed("x", Some(forever)), 0.5).wait(),
            Some(MAX_DELAY)
        );
    }

    #[test]
    fn a_job_past_its_last_attempt_is_dead_with_the_attempts_made() {
        assert_eq!(
            decide(4, LIMITS, Attempted::OutOfAttempts, 0.5),
            Outcome::Dead {
                error: "attempt 3 of 3 never reported a result (its worker stopped or crashed)"
                    .into(),
                attempts: Some(3)
            }
        );
    }

    #[test]
    fn shutdown_gives_back_counting_only_started_attempts() {
        for started in [false, true] {
            let outcome = decide(2, LIMITS, Attempted::Interrupted { started }, 0.5);
            assert_eq!(outcome, Outcome::Released { started });
            match outcome.settlement() {
                Settlement::Release {
                    delay,
                    count_attempt,
                    ..
                } => assert_eq!((delay, count_attempt), (Duration::ZERO, started)),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn settlements_record_what_was_decided() {
        assert_eq!(Outcome::Succeeded.settlement(), Settlement::Ack);
        let retry = Outcome::Retry {
            delay: Duration::from_secs(2),
            error: "e".into(),
        };
        assert_eq!(
            retry.settlement(),
            Settlement::Release {
                delay: Duration::from_secs(2),
                error: Some("e".into()),
                count_attempt: true
            }
        );
        assert_eq!(
            Outcome::Snooze(Duration::from_secs(1)).settlement(),
            Settlement::Release {
                delay: Duration::from_secs(1),
                error: None,
                count_attempt: false
            }
        );
        let dead = Outcome::Dead {
            error: "e".into(),
            attempts: Some(2),
        };
        assert_eq!(
            dead.settlement(),
            Settlement::DeadLetter {
                error: "e".into(),
                attempts: Some(2)
            }
        );
    }
}
