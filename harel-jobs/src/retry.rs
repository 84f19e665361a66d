//! The retry policy, in one place: what becomes of a job after an attempt, and how long it
//! waits before the next one.
//!
//! [`decide`] is a pure function of the attempt number, the job's [`Limits`] and what the
//! attempt came to ([`Attempted`]); the job task calls it, the completer writes its
//! [`Decision`] as it is ([`Decision::settlement`]: the SQL only records what was decided),
//! and the counters count the decision itself. [`Backoff`] spaces the retries.

use std::time::Duration;

use crate::transport::Settlement;
use crate::vocabulary::MAX_DELAY;

/// The delay between a failed attempt and the next one: exponential, capped, with jitter.
///
/// For attempt `n` (the attempt that just failed, from 1) the nominal delay is
/// `d = min(max, base × 2^(n−1))`, and the actual delay is uniformly random in `[¾·d, d]`,
/// so that jobs failing together do not retry together. The default is 2 s doubling up to
/// 1 h: 2 s, 4 s, 8 s, … 1,024 s, 2,048 s, then 3,600 s.
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::Backoff;
///
/// let backoff = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60));
/// assert_eq!(backoff.nominal(1), Duration::from_secs(1));
/// assert_eq!(backoff.nominal(3), Duration::from_secs(4));
/// assert_eq!(backoff.nominal(30), Duration::from_secs(60));
/// let actual = backoff.delay(3, 0.5);
/// assert!(actual >= Duration::from_secs(3) && actual <= Duration::from_secs(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

impl Backoff {
    /// 2 s doubling up to 1 h.
    pub const DEFAULT: Backoff =
        Backoff::exponential(Duration::from_secs(2), Duration::from_secs(3600));

    /// `base` doubling after each failed attempt, never more than `max`.
    pub const fn exponential(base: Duration, max: Duration) -> Self {
        Self { base, max }
    }

    /// The same delay after every failed attempt (jitter still applies).
    pub const fn fixed(delay: Duration) -> Self {
        Self {
            base: delay,
            max: delay,
        }
    }

    /// The first delay.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The cap.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The delay before jitter after failed attempt `attempt` (from 1).
    pub fn nominal(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(62);
        let factor = 1u64 << doublings;
        let nanos = self.base.as_nanos().saturating_mul(u128::from(factor));
        let capped = nanos.min(self.max.as_nanos().max(self.base.as_nanos()));
        Duration::from_nanos(u64::try_from(capped).unwrap_or(u64::MAX))
    }

    /// The delay after failed attempt `attempt`, with `random` in `[0, 1)` choosing the
    /// point in `[¾·d, d]` (see the type's documentation).
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let nominal = self.nominal(attempt);
        let random = if random.is_finite() {
            random.clamp(0.0, 1.0)
        } else {
            0.0
        };
        nominal.mul_f64(0.75 + 0.25 * random)
    }

    /// [`delay`](Self::delay) with a random draw.
    pub fn delay_random(&self, attempt: u32) -> Duration {
        self.delay(attempt, rand::random::<f64>())
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::DEFAULT
    }
}

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
pub(crate) enum Decision {
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
pub(crate) fn decide(attempt: u32, limits: Limits, attempted: Attempted, random: f64) -> Decision {
    match attempted {
        Attempted::Succeeded => Decision::Succeeded,
        Attempted::Failed { error, .. } if attempt >= limits.max_attempts => Decision::Dead {
            error: format!("{error} (attempt {attempt} of {})", limits.max_attempts),
            attempts: None,
        },
        Attempted::Failed { error, retry_after } => Decision::Retry {
            delay: capped(retry_after.unwrap_or_else(|| limits.backoff.delay(attempt, random))),
            error,
        },
        Attempted::Permanent { error } => Decision::Dead {
            error,
            attempts: None,
        },
        Attempted::Snoozed(delay) => Decision::Snooze(capped(delay)),
        Attempted::OutOfAttempts => {
            let made = attempt.saturating_sub(1);
            Decision::Dead {
                error: format!(
                    "attempt {made} of {} never reported a result (its worker stopped or crashed)",
                    limits.max_attempts
                ),
                attempts: Some(made),
            }
        }
        Attempted::Interrupted { started } => Decision::Released { started },
    }
}

/// `delay`, or [`MAX_DELAY`] if it is longer.
fn capped(delay: Duration) -> Duration {
    delay.min(MAX_DELAY)
}

impl Decision {
    /// What the transport writes for it; `retain` is how long a succeeded job is kept in
    /// the history (`None`: deleted at once, a plain ack).
    pub fn settlement(&self, retain: Option<Duration>) -> Settlement {
        match self {
            Self::Succeeded => match retain {
                Some(keep) => Settlement::Retain { keep },
                None => Settlement::Ack,
            },
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

    #[test]
    fn default_doubles_from_two_seconds_to_an_hour() {
        let b = Backoff::DEFAULT;
        let secs: Vec<u64> = (1..=13).map(|n| b.nominal(n).as_secs()).collect();
        assert_eq!(
            secs,
            [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600]
        );
        assert_eq!(b.nominal(u32::MAX), Duration::from_secs(3600));
        assert_eq!(b.nominal(0), Duration::from_secs(2));
    }

    #[test]
    fn jitter_stays_in_the_upper_quarter() {
        let b = Backoff::DEFAULT;
        assert_eq!(b.delay(1, 0.0), Duration::from_millis(1500));
        assert_eq!(b.delay(1, 1.0), Duration::from_secs(2));
        assert_eq!(b.delay(2, 0.5), Duration::from_millis(3500));
        assert_eq!(b.delay(1, f64::NAN), Duration::from_millis(1500));
        for _ in 0..1000 {
            let d = b.delay_random(3);
            assert!(d >= Duration::from_secs(6) && d <= Duration::from_secs(8));
        }
    }

    #[test]
    fn fixed_is_flat() {
        let b = Backoff::fixed(Duration::from_secs(5));
        assert_eq!(b.nominal(1), b.nominal(10));
    }

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
            Decision::Succeeded
        );
        assert_eq!(
            decide(3, LIMITS, Attempted::Succeeded, 0.5),
            Decision::Succeeded
        );
    }

    #[test]
    fn a_failure_is_retried_after_the_backoff_until_the_last_attempt() {
        // attempt 1: 2 s nominal, jitter 0 gives ¾ of it; attempt 2: 4 s, jitter 1 all of it
        assert_eq!(
            decide(1, LIMITS, failed("boom", None), 0.0),
            Decision::Retry {
                delay: Duration::from_millis(1500),
                error: "boom".into()
            }
        );
        assert_eq!(
            decide(2, LIMITS, failed("boom", None), 1.0),
            Decision::Retry {
                delay: Duration::from_secs(4),
                error: "boom".into()
            }
        );
        assert_eq!(
            decide(3, LIMITS, failed("boom", None), 0.5),
            Decision::Dead {
                error: "boom (attempt 3 of 3)".into(),
                attempts: None
            }
        );
    }

    #[test]
    fn retry_after_replaces_the_backoff_even_when_zero() {
        assert_eq!(
            decide(1, LIMITS, failed("busy", Some(Duration::ZERO)), 0.5),
            Decision::Retry {
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
            Decision::Retry {
                delay: Duration::from_millis(5),
                error: "busy".into()
            }
        );
        // …but not the limit on attempts
        assert!(matches!(
            decide(3, LIMITS, failed("busy", Some(Duration::ZERO)), 0.5),
            Decision::Dead { .. }
        ));
    }

    #[test]
    fn a_permanent_failure_is_dead_at_once() {
        let permanent = Attempted::Permanent {
            error: "no such user".into(),
        };
        assert_eq!(
            decide(1, LIMITS, permanent, 0.5),
            Decision::Dead {
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
            Decision::Snooze(Duration::from_secs(30))
        );
        let forever = Duration::from_secs(200 * 365 * 24 * 3600);
        assert_eq!(
            decide(1, LIMITS, Attempted::Snoozed(forever), 0.5),
            Decision::Snooze(MAX_DELAY)
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
            Decision::Dead {
                error: "attempt 3 of 3 never reported a result (its worker stopped or crashed)"
                    .into(),
                attempts: Some(3)
            }
        );
    }

    #[test]
    fn shutdown_gives_back_counting_only_started_attempts() {
        for started in [false, true] {
            let decision = decide(2, LIMITS, Attempted::Interrupted { started }, 0.5);
            assert_eq!(decision, Decision::Released { started });
            match decision.settlement(Some(Duration::from_secs(60))) {
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
        assert_eq!(Decision::Succeeded.settlement(None), Settlement::Ack);
        let keep = Duration::from_secs(60);
        assert_eq!(
            Decision::Succeeded.settlement(Some(keep)),
            Settlement::Retain { keep }
        );
        let retry = Decision::Retry {
            delay: Duration::from_secs(2),
            error: "e".into(),
        };
        assert_eq!(
            retry.settlement(None),
            Settlement::Release {
                delay: Duration::from_secs(2),
                error: Some("e".into()),
                count_attempt: true
            }
        );
        assert_eq!(
            Decision::Snooze(Duration::from_secs(1)).settlement(None),
            Settlement::Release {
                delay: Duration::from_secs(1),
                error: None,
                count_attempt: false
            }
        );
        let dead = Decision::Dead {
            error: "e".into(),
            attempts: Some(2),
        };
        assert_eq!(
            dead.settlement(None),
            Settlement::DeadLetter {
                error: "e".into(),
                attempts: Some(2)
            }
        );
    }
}
