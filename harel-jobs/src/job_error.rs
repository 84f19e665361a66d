//! What a handler returns: [`JobResult`] and [`JobError`].

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

/// What a handler returns.
pub type JobResult = Result<(), JobError>;

/// Why an attempt did not succeed, and what to do about it.
///
/// `?` converts any error (and `&str`/`String`) into a retryable `JobError`, like `anyhow`.
/// The constructors choose otherwise:
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::{JobError, JobResult};
///
/// fn charge(amount: i64) -> JobResult {
///     if amount < 0 {
///         // never going to work: straight to the dead-letter table
///         return Err(JobError::permanent("negative amount"));
///     }
///     let rate_limited = false;
///     if rate_limited {
///         return Err(JobError::retry_after(Duration::from_secs(30), "rate limited"));
///     }
///     std::fs::metadata("/")?; // any error: a failed attempt, retried with backoff
///     Ok(())
/// }
/// ```
///
/// It deliberately does not implement `std::error::Error`, so that the blanket conversion
/// from every error type can exist.
pub struct JobError {
    action: Action,
    error: Box<dyn StdError + Send + Sync>,
}

/// What the worker does with the failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Retry after the job's backoff (or this delay), while attempts remain.
    Retry(Option<Duration>),
    /// Do not retry: dead-letter now.
    Permanent,
    /// Not a failure: run again after this delay, without using up an attempt.
    Snooze(Duration),
}

impl JobError {
    /// A failed attempt, retried after the job's backoff while attempts remain.
    pub fn retry(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self {
            action: Action::Retry(None),
            error: error.into(),
        }
    }

    /// A failed attempt, retried after `delay` (instead of the backoff) while attempts remain.
    pub fn retry_after(delay: Duration, error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self {
            action: Action::Retry(Some(delay)),
            error: error.into(),
        }
    }

    /// A failure retrying cannot fix: the job goes to the dead-letter table at once.
    pub fn permanent(error: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        Self {
            action: Action::Permanent,
            error: error.into(),
        }
    }

    /// Not a failure: run the job again after `delay`, without using an attempt (waiting
    /// for something outside). Its group waits too.
    pub fn snooze(delay: Duration) -> Self {
        Self {
            action: Action::Snooze(delay),
            error: "snoozed".into(),
        }
    }

    /// What the worker will do.
    pub fn action(&self) -> Action {
        self.action
    }

    /// Whether the job must not be retried.
    pub fn is_permanent(&self) -> bool {
        self.action == Action::Permanent
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        &*self.error
    }

    /// The error and its sources, joined with ": ", as recorded in the database.
    pub fn chain(&self) -> String {
        let mut text = self.error.to_string();
        let mut source = self.error.source();
        while let Some(error) = source {
            text.push_str(": ");
            text.push_str(&error.to_string());
            source = error.source();
        }
        text
    }
}

impl<E: Into<Box<dyn StdError + Send + Sync>>> From<E> for JobError {
    fn from(error: E) -> Self {
        Self::retry(error)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("action", &self.action)
            .field("error", &self.error)
            .finish()
    }
}

/// What a `#[job]` function may return: `()`, or `Result<(), E>` with `E` convertible into
/// [`JobError`] (so `JobResult`, `anyhow::Result<()>`, `Result<(), MyError>` all work).
#[diagnostic::on_unimplemented(
    message = "a #[job] function must return `()` or `Result<(), E>` where `E: Into<JobError>`",
    label = "this return type is not accepted",
    note = "return `harel_jobs::JobResult`, or a `Result<(), E>` whose error converts into `JobError`"
)]
pub trait IntoJobResult {
    /// The conversion.
    fn into_job_result(self) -> JobResult;
}

impl IntoJobResult for () {
    fn into_job_result(self) -> JobResult {
        Ok(())
    }
}

impl<E: Into<JobError>> IntoJobResult for Result<(), E> {
    fn into_job_result(self) -> JobResult {
        self.map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("sending failed")
        }
    }
    impl StdError for Outer {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn question_mark_is_a_retry() {
        fn run() -> JobResult {
            Err("boom")?;
            Ok(())
        }
        let error = run().unwrap_err();
        assert_eq!(error.action(), Action::Retry(None));
        assert_eq!(error.to_string(), "boom");
    }

    #[test]
    fn chain_joins_sources() {
        let error = JobError::permanent(Outer(std::io::Error::other("timed out")));
        assert!(error.is_permanent());
        assert_eq!(error.chain(), "sending failed: timed out");
    }

    #[test]
    fn into_job_result() {
        assert!(().into_job_result().is_ok());
        let failed: Result<(), std::io::Error> = Err(std::io::Error::other("x"));
        assert_eq!(failed.into_job_result().unwrap_err().to_string(), "x");
        assert_eq!(
            JobError::snooze(Duration::from_secs(1)).action(),
            Action::Snooze(Duration::from_secs(1))
        );
    }
}
