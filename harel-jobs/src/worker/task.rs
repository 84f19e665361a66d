//! The pool's background tasks by name ([`WorkerTask`]) and how each ends ([`TaskResult`]):
//! what every task and the supervisor that starts them share, apart from both.

use std::fmt;

/// One of a worker pool's background tasks, as named in [`WorkerError::TaskFailed`](super::WorkerError::TaskFailed) and in
/// the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WorkerTask {
    /// Claims jobs and starts them.
    Fetcher,
    /// Writes job outcomes.
    Completer,
    /// Extends the leases of running jobs.
    Heartbeat,
    /// LISTENs for enqueue notifications.
    Listener,
    /// Vacuums the queue tables when autovacuum is off.
    Maintenance,
    /// Enqueues the jobs of periodic schedules.
    Scheduler,
}

impl WorkerTask {
    /// Its name in messages and logs: `fetcher`, `completer`, `heartbeat`, `listener`,
    /// `maintenance`, `scheduler`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fetcher => "fetcher",
            Self::Completer => "completer",
            Self::Heartbeat => "heartbeat",
            Self::Listener => "listener",
            Self::Maintenance => "maintenance",
            Self::Scheduler => "scheduler",
        }
    }
}

impl fmt::Display for WorkerTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a background task ended: `Err` says why it could not go on.
pub(crate) type TaskResult = Result<(), String>;
