//! [`JobContext`]: what a running handler knows besides its arguments.

use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// Injected into a handler: the pool's shared state, facts about this execution, and a
/// cancellation signal. Not serialised; cheap to clone.
pub struct JobContext<S> {
    state: Arc<S>,
    execution: Arc<Execution>,
}

/// The facts of one execution.
#[derive(Debug)]
pub(crate) struct Execution {
    pub(crate) kind: String,
    pub(crate) group: String,
    pub(crate) message_id: i64,
    pub(crate) attempt: u32,
    pub(crate) max_attempts: u32,
    pub(crate) cancel: CancellationToken,
}

impl<S> JobContext<S> {
    pub(crate) fn new(state: Arc<S>, execution: Arc<Execution>) -> Self {
        Self { state, execution }
    }

    /// A context for calling a handler outside the worker pool, in tests: attempt 1 of 1,
    /// group and message id made up, never cancelled.
    pub fn for_test(state: S) -> Self {
        Self::new(
            Arc::new(state),
            Arc::new(Execution {
                kind: "test".to_owned(),
                group: "test".to_owned(),
                message_id: 0,
                attempt: 1,
                max_attempts: 1,
                cancel: CancellationToken::new(),
            }),
        )
    }

    /// The worker pool's shared state.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The shared state, as the `Arc` the pool holds.
    pub fn state_arc(&self) -> Arc<S> {
        Arc::clone(&self.state)
    }

    /// Which attempt this is, from 1 (counted in the database, so attempts whose worker
    /// died count).
    pub fn attempt(&self) -> u32 {
        self.execution.attempt
    }

    /// How many attempts the job gets in all.
    pub fn max_attempts(&self) -> u32 {
        self.execution.max_attempts
    }

    /// The job's group (execution id).
    pub fn group(&self) -> &str {
        &self.execution.group
    }

    /// The message id: unique, increasing in enqueue order, the same across attempts.
    pub fn message_id(&self) -> i64 {
        self.execution.message_id
    }

    /// The job kind.
    pub fn kind(&self) -> &str {
        &self.execution.kind
    }

    /// Whether the job should stop: the lease was lost (another worker may run it now), the
    /// timeout passed, or the pool is shutting down and the grace period is over. A handler
    /// that stops early should return an error; its result is not acked either way.
    pub fn is_cancelled(&self) -> bool {
        self.execution.cancel.is_cancelled()
    }

    /// Completes when [`is_cancelled`](Self::is_cancelled) becomes true; for `select!`.
    pub async fn cancelled(&self) {
        self.execution.cancel.cancelled().await
    }
}

impl<S> Clone for JobContext<S> {
    fn clone(&self) -> Self {
        Self {
            state: Arc::clone(&self.state),
            execution: Arc::clone(&self.execution),
        }
    }
}

impl<S> fmt::Debug for JobContext<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("kind", &self.execution.kind)
            .field("group", &self.execution.group)
            .field("message_id", &self.execution.message_id)
            .field("attempt", &self.execution.attempt)
            .finish_non_exhaustive()
    }
}
