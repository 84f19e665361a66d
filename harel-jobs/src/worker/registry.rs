//! Dispatch by job kind: from a message's kind and JSON payload to a running handler.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use crate::context::JobContext;
use crate::job::{Handler, JobOptions};
use crate::job_error::JobResult;

/// A handler's future, type-erased.
pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = JobResult> + Send>>;

/// One registered job type, with its type erased.
pub(crate) trait ErasedHandler<S>: Send + Sync {
    /// Decodes the payload and starts the handler.
    fn start(&self, payload: &str, ctx: JobContext<S>) -> Result<HandlerFuture, serde_json::Error>;
    /// The type's options.
    fn options(&self) -> JobOptions;
    /// The queue its jobs are enqueued to ([`Job::QUEUE`](crate::Job::QUEUE)).
    fn queue(&self) -> &'static str;
}

struct Typed<J>(PhantomData<fn() -> J>);

impl<S, J> ErasedHandler<S> for Typed<J>
where
    S: Send + Sync + 'static,
    J: Handler<S>,
{
    fn start(&self, payload: &str, ctx: JobContext<S>) -> Result<HandlerFuture, serde_json::Error> {
        let job: J = serde_json::from_str(payload)?;
        Ok(Box::pin(job.handle(ctx)))
    }

    fn options(&self) -> JobOptions {
        J::options()
    }

    fn queue(&self) -> &'static str {
        J::QUEUE
    }
}

/// The handlers of one worker pool, by kind.
pub(crate) struct Registry<S> {
    handlers: HashMap<&'static str, Arc<dyn ErasedHandler<S>>>,
}

impl<S: Send + Sync + 'static> Registry<S> {
    pub fn new() -> Self {
        Self {
            handlers: HashMap::new(),
        }
    }

    /// Registers `J`. Returns false if its kind was already taken.
    pub fn register<J: Handler<S>>(&mut self) -> bool {
        if self.handlers.contains_key(J::KIND) {
            return false;
        }
        self.handlers
            .insert(J::KIND, Arc::new(Typed::<J>(PhantomData)));
        true
    }
}

impl<S> Registry<S> {
    pub fn get(&self, kind: &str) -> Option<&Arc<dyn ErasedHandler<S>>> {
        self.handlers.get(kind)
    }

    /// `kind` as a metrics label: the registered (static) kind, or
    /// [`UNREGISTERED`](crate::telemetry::UNREGISTERED), so that labels stay bounded.
    pub fn label(&self, kind: &str) -> &'static str {
        self.handlers
            .get_key_value(kind)
            .map_or(crate::telemetry::UNREGISTERED, |(kind, _)| *kind)
    }

    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.handlers.keys().copied()
    }

    /// Each registered kind with its queue, in kind order.
    pub fn queues(&self) -> Vec<(&'static str, &'static str)> {
        let mut queues: Vec<_> = self
            .handlers
            .iter()
            .map(|(kind, handler)| (*kind, handler.queue()))
            .collect();
        queues.sort_unstable();
        queues
    }
}
