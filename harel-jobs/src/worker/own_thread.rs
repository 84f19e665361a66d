//! A pool on a thread of its own (`WorkerBuilder::own_thread`): its supervisor, and so every
//! task it spawns, runs on a current-thread runtime on a thread the pool starts, and the
//! caller gets a join handle on its own runtime, as for a pool on that runtime. The thread
//! outlives the pool: see [`spawn`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Shared, WorkerError, execute, supervise};

/// Runs the supervisor; a panic of it comes back as its error, as on the caller's runtime.
async fn supervise_caught<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
) -> Result<(), WorkerError> {
    AssertUnwindSafe(supervise::supervise(shared))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(WorkerError::Panicked(execute::panic_message(&*panic))))
}

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
                Ok(runtime) => {
                    let result = runtime.block_on(supervise_caught(for_thread));
                    let _ = sender.send(Ended::Ran(result));
                    // The pool's own queries and its handlers' may have opened connections
                    // of the application's sqlx pools on this runtime: a socket works only
                    // while the runtime that opened it runs. So it keeps running, idle,
                    // until the process exits (one parked thread per pool that stopped).
                    runtime.block_on(std::future::pending::<()>());
                    return;
                }
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
