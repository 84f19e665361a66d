//! A pool on a thread of its own (`WorkerBuilder::own_thread`): its supervisor, and so every
//! task it spawns, runs on a current-thread runtime on a thread the pool starts, and the
//! caller gets a join handle on its own runtime, as for a pool on that runtime.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Shared, WorkerError, execute, supervise};

/// How the pool's thread ended: the supervisor's result, or its runtime could not be built
/// (the pool then runs on the caller's runtime instead).
enum Ended {
    Ran(Result<(), WorkerError>),
    NoRuntime(std::io::Error),
}

/// Starts the pool's supervisor on a thread of its own; the handle, on `caller`, resolves
/// when the supervisor has ended there. Falls back to `caller` (with a warning) when the
/// thread or its runtime cannot be created: the pool still runs, only not on its own thread.
pub(super) fn spawn<S: Send + Sync + 'static>(
    caller: &Handle,
    shared: Arc<Shared<S>>,
) -> JoinHandle<Result<(), WorkerError>> {
    let (sender, receiver) = oneshot::channel();
    let for_thread = Arc::clone(&shared);
    let started = std::thread::Builder::new()
        .name("harel-jobs-pool".to_owned())
        .spawn(move || {
            let ended = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                // a panic of the supervisor ends the thread's runtime, not the thread
                // unreported: it comes back as the supervisor's error, as on `caller`
                Ok(runtime) => Ended::Ran(
                    runtime
                        .block_on(AssertUnwindSafe(supervise::supervise(for_thread)).catch_unwind())
                        .unwrap_or_else(|panic| {
                            Err(WorkerError::Panicked(execute::panic_message(&*panic)))
                        }),
                ),
                Err(error) => Ended::NoRuntime(error),
            };
            let _ = sender.send(ended);
        });
    if let Err(error) = started {
        tracing::warn!(%error, "could not start the worker pool's own thread: running it on this runtime");
        return caller.spawn(supervise::supervise(shared));
    }
    caller.spawn(async move {
        match receiver.await {
            Ok(Ended::Ran(result)) => result,
            Ok(Ended::NoRuntime(error)) => {
                tracing::warn!(%error, "could not build the worker pool's own runtime: running it on this runtime");
                supervise::supervise(shared).await
            }
            Err(_) => Err(WorkerError::Panicked(
                "the worker pool's thread ended without a result".to_owned(),
            )),
        }
    })
}
