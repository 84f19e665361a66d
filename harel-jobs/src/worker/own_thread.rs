//! A pool on a thread of its own (`WorkerBuilder::own_thread`): its supervisor, and so every
//! task it spawns, runs on a current-thread runtime on a thread the pool starts, and the
//! caller gets a join handle on its own runtime, as for a pool on that runtime.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::{Shared, WorkerError, execute, supervise};

/// How long the pool's own sqlx pool may take to close when the pool ends.
const CLOSE_WITHIN: Duration = Duration::from_secs(5);

/// The sqlx pool a pool on its own thread uses for its occasional queries (schema check,
/// reports, maintenance, schedules): the application's settings and size, but connections
/// of its own, opened when needed. A socket belongs to the runtime that opens it, so a
/// connection opened on the pool's thread and handed back to the application's pool would
/// fail there once that runtime ends; these close with the pool instead
/// ([`supervise_and_close`]).
pub(super) fn pool_of_its_own(application: &PgPool) -> PgPool {
    let options = application.options();
    PgPoolOptions::new()
        .max_connections(options.get_max_connections())
        .acquire_timeout(options.get_acquire_timeout())
        .connect_lazy_with((*application.connect_options()).clone())
}

/// Runs the supervisor, then closes the pool's own sqlx pool (bounded: a connection still
/// out is dropped with the runtime).
async fn supervise_and_close<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
) -> Result<(), WorkerError> {
    let result = AssertUnwindSafe(supervise::supervise(Arc::clone(&shared)))
        .catch_unwind()
        .await
        .unwrap_or_else(|panic| Err(WorkerError::Panicked(execute::panic_message(&*panic))));
    let _ = tokio::time::timeout(CLOSE_WITHIN, shared.pool.close()).await;
    result
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
                // a panic of the supervisor ends the thread's runtime, not the thread
                // unreported: it comes back as the supervisor's error, as on `caller`
                Ok(runtime) => {
                    let result = runtime.block_on(supervise_and_close(for_thread));
                    let _ = sender.send(Ended::Ran(result));
                    // Handlers may have opened connections of the application's pools on
                    // this runtime; they work only while it runs. So it keeps running, idle,
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
        return caller.spawn(supervise_and_close(shared));
    }
    caller.spawn(async move {
        match receiver.await {
            Ok(Ended::Ran(result)) => result,
            Ok(Ended::NoRuntime(error)) => {
                tracing::warn!(%error, "could not build the worker pool's own runtime: running it on this runtime");
                supervise_and_close(shared).await
            }
            Err(_) => Err(WorkerError::Panicked(
                "the worker pool's thread ended without a result".to_owned(),
            )),
        }
    })
}
