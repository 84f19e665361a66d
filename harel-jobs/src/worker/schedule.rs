//! The scheduler: enqueues the jobs of the pool's periodic schedules, one per tick across
//! every worker that declares the schedule (`harel_schedule_fire` decides, in the
//! database, which worker's call enqueues a tick). It also looks, every [`TRIGGER_POLL`],
//! for an operator's request to fire a schedule now (`Client::trigger_schedule`), and fires
//! it (`harel_schedule_fire` with the request: one worker's call claims it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::connection::{bounded, on_pooled};
use super::task::{TaskResult, WorkerTask};
use crate::error::{DatabaseError, PublishError};
use crate::periodic::Periodic;
use crate::store::Fire;
use crate::transport::OutgoingMessage;
use sqlx::PgConnection;

/// One schedule of the pool, and how it makes the job of a tick.
pub(crate) struct PeriodicJob {
    pub schedule: Periodic,
    #[allow(clippy::type_complexity)]
    pub make: Box<dyn Fn(DateTime<Utc>) -> Result<OutgoingMessage, PublishError> + Send + Sync>,
}

/// How long to wait before trying a schedule again after the database failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// How long to wait before firing again a tick the database's clock had not reached.
const NOT_DUE_RETRY: Duration = Duration::from_millis(200);

/// How often the scheduler looks for operators' requests to fire a schedule now (one
/// `harel_schedules` call for the pool's schedules).
const TRIGGER_POLL: Duration = Duration::from_secs(2);

/// Where one schedule stands in this worker.
struct Cursor {
    /// The last tick enqueued (by any worker, as far as this one knows).
    last: Option<DateTime<Utc>>,
    /// Ticks after this are this worker's to fire as they come; those before it were
    /// missed, and handled once at start by the schedule's policy.
    live_from: DateTime<Utc>,
    /// Not before this (after a failure).
    retry_at: Option<tokio::time::Instant>,
}

impl Cursor {
    /// The time up to which this worker has nothing left to fire: its last tick, or when it
    /// started firing live ticks, whichever is later.
    fn done_through(&self) -> DateTime<Utc> {
        self.last
            .map_or(self.live_from, |last| last.max(self.live_from))
    }
}

/// Runs until `stop` fires.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: CancellationToken,
) -> TaskResult {
    let schedules = &shared.schedules;
    let started = Utc::now();
    // what the database knows of our schedules, retried until it answers
    let known = loop {
        shared.faults.check(WorkerTask::Scheduler)?;
        let read = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            read = bounded(shared.config.database_timeout, last_ticks(&shared)) => read,
        };
        match read {
            Ok(known) => break known,
            Err(error) => {
                tracing::warn!(error = %error, "cannot read the schedules yet, retrying");
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(RETRY_AFTER) => {}
                }
            }
        }
    };
    let mut cursors: Vec<Cursor> = Vec::with_capacity(schedules.len());
    for job in schedules.iter() {
        let last = known.get(job.schedule.name()).copied().flatten();
        // the missed ticks, as the schedule's policy says; then the first declaration
        let mut cursor = Cursor {
            last,
            live_from: started,
            retry_at: None,
        };
        let missed = job.schedule.due(last, started);
        if missed.is_empty() {
            let declared = fire(&shared, job, None, None).await;
            if let Err(error) = declared {
                tracing::warn!(schedule = job.schedule.name(), error = %error, "cannot declare the schedule");
            }
        }
        for tick in missed {
            // a shutdown stops between ticks and stops waiting for a tick being enqueued
            // (one statement: if already sent, it may still commit)
            let fired = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                fired = fire_logged(&shared, job, tick, &mut cursor) => fired,
            };
            if !fired {
                break;
            }
        }
        cursors.push(cursor);
    }

    let mut next_poll = tokio::time::Instant::now();
    // the requests whose job this worker could not make: not tried again
    let mut unmade: Vec<(String, DateTime<Utc>)> = Vec::new();
    loop {
        shared.faults.check(WorkerTask::Scheduler)?;
        if tokio::time::Instant::now() >= next_poll {
            tokio::select! {
                () = stop.cancelled() => return Ok(()),
                () = fire_triggers(&shared, &mut unmade) => {}
            }
            next_poll = tokio::time::Instant::now() + TRIGGER_POLL;
        }
        let now = Utc::now();
        // fire what is due, then sleep until the next tick of any schedule
        let mut wake: Option<DateTime<Utc>> = None;
        for (job, cursor) in schedules.iter().zip(cursors.iter_mut()) {
            if cursor
                .retry_at
                .is_some_and(|at| at > tokio::time::Instant::now())
            {
                continue;
            }
            // usually one tick; several when this worker fell behind (the database was
            // unreachable, the process was paused): the policy's most recent ones
            for tick in job.schedule.live_ticks(cursor.done_through(), now) {
                let fired = tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    fired = fire_logged(&shared, job, tick, cursor) => fired,
                };
                if !fired {
                    break;
                }
            }
            if let Some(next) = job.schedule.next_after(cursor.done_through().max(now)) {
                wake = Some(wake.map_or(next, |w| w.min(next)));
            }
        }
        let retry = cursors.iter().filter_map(|c| c.retry_at).min();
        let until_tick = wake
            .and_then(|at| (at - Utc::now()).to_std().ok())
            .unwrap_or(Duration::ZERO);
        let sleep_until = match retry {
            Some(at) => at.min(tokio::time::Instant::now() + until_tick),
            None if wake.is_none() => tokio::time::Instant::now() + Duration::from_secs(3600),
            None => tokio::time::Instant::now() + until_tick,
        }
        .min(next_poll);
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep_until(sleep_until) => {}
        }
    }
}

/// Fires `tick` of `job`, logging what happened; moves the cursor on unless the database
/// failed (the tick is then tried again after [`RETRY_AFTER`]). Returns whether it moved.
async fn fire_logged<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    job: &PeriodicJob,
    tick: DateTime<Utc>,
    cursor: &mut Cursor,
) -> bool {
    match fire(shared, job, Some(tick), None).await {
        Ok(Some(0)) => {
            // the database's clock has not reached the tick: ours runs ahead
            tracing::debug!(
                schedule = job.schedule.name(),
                %tick,
                "tick not due yet by the database's clock; trying again"
            );
            cursor.retry_at = Some(tokio::time::Instant::now() + NOT_DUE_RETRY);
            return false;
        }
        Ok(Some(id)) if id < 0 => {
            tracing::info!(
                schedule = job.schedule.name(),
                %tick,
                holder = -id,
                "the tick's job is a duplicate of a queued unique job: not enqueued"
            );
        }
        Ok(Some(id)) => {
            tracing::debug!(schedule = job.schedule.name(), %tick, job_id = id, "periodic job enqueued");
        }
        Ok(None) => {
            tracing::debug!(schedule = job.schedule.name(), %tick, "tick already enqueued by another worker");
        }
        Err(FireError::Job(error)) => {
            // the same tick would fail the same way: skip it
            tracing::error!(
                schedule = job.schedule.name(),
                %tick,
                error = %error,
                "the periodic job could not be made: this tick is skipped"
            );
        }
        Err(error) => {
            tracing::warn!(
                schedule = job.schedule.name(),
                %tick,
                error = %error,
                "cannot enqueue the periodic job; trying again"
            );
            cursor.retry_at = Some(tokio::time::Instant::now() + RETRY_AFTER);
            return false;
        }
    }
    cursor.retry_at = None;
    cursor.last = Some(cursor.last.map_or(tick, |last| last.max(tick)));
    true
}

/// Fires the operators' requests waiting for this pool's schedules, each as a job whose
/// tick is the request's time; logs what it could not do (a request whose call failed
/// stays in the database, and is tried again at the next poll; one whose job could not be
/// made is kept in `unmade` and not tried again by this worker).
async fn fire_triggers<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    unmade: &mut Vec<(String, DateTime<Utc>)>,
) {
    let names: Vec<&str> = shared.schedules.iter().map(|j| j.schedule.name()).collect();
    let read = on_pooled(
        &shared.pool,
        shared.config.transaction_pooler,
        async |connection: &mut PgConnection| {
            shared.store.schedules_triggers(connection, &names).await
        },
    );
    let requests = match bounded(shared.config.database_timeout, read).await {
        Ok(requests) => requests,
        Err(error) => {
            tracing::warn!(error = %error, "cannot read the schedules' trigger requests; trying again");
            return;
        }
    };
    // forget the requests that are gone (fired elsewhere, dropped by a pause)
    unmade.retain(|request| requests.contains(request));
    for (name, requested_at) in requests {
        if unmade.contains(&(name.clone(), requested_at)) {
            continue;
        }
        let Some(job) = shared.schedules.iter().find(|j| j.schedule.name() == name) else {
            continue;
        };
        match fire(shared, job, Some(requested_at), Some(requested_at)).await {
            Ok(Some(id)) if id < 0 => tracing::info!(
                schedule = %name,
                holder = -id,
                "the triggered job is a duplicate of a queued unique job: not enqueued"
            ),
            Ok(Some(id)) => {
                tracing::info!(schedule = %name, job_id = id, "triggered job enqueued");
            }
            Ok(None) => {
                tracing::debug!(schedule = %name, "trigger already fired by another worker, or paused");
            }
            Err(FireError::Job(error)) => {
                tracing::error!(
                    schedule = %name,
                    error = %error,
                    "the triggered job could not be made: this worker leaves the request"
                );
                unmade.push((name, requested_at));
            }
            Err(error) => tracing::warn!(
                schedule = %name,
                error = %error,
                "cannot enqueue the triggered job; trying again"
            ),
        }
    }
}

/// One call of `harel_schedule_fire`: the job of `tick` (or, `None`, only the schedule's
/// declaration); `trigger`: the operator's request it fires instead of a tick. Returns the
/// new job's id, `None` if another worker had enqueued it.
async fn fire<S: Send + Sync + 'static>(
    shared: &Shared<S>,
    job: &PeriodicJob,
    tick: Option<DateTime<Utc>>,
    trigger: Option<DateTime<Utc>>,
) -> Result<Option<i64>, FireError> {
    // Some(0): the database's clock has not reached `tick` (nothing written)
    let schedule = &job.schedule;
    let message = match tick {
        Some(tick) => Some((job.make)(tick).map_err(FireError::Job)?),
        None => None,
    };
    // (a trigger moves no tick: the function ignores it then)
    let next = schedule.next_after(tick.unwrap_or_else(Utc::now));
    let unique_hold_ms = match message.as_ref().and_then(|m| m.unique.as_ref()) {
        Some((_, Some(hold))) => Some(
            crate::vocabulary::delay_millis(*hold)
                .map_err(|error| FireError::Job(PublishError::Invalid(error)))?,
        ),
        _ => None,
    };
    let spec = schedule.spec();
    let fire = Fire {
        name: schedule.name(),
        spec: &spec,
        tick,
        next_tick: next,
        group: message.as_ref().and_then(|m| m.group.as_deref()),
        kind: message.as_ref().map(|m| m.kind.as_str()),
        payload: message.as_ref().map(|m| m.payload.as_str()),
        priority: message.as_ref().map(|m| i16::from(m.priority.get())),
        queue: message.as_ref().and_then(|m| m.queue.as_deref()),
        unique_key: message
            .as_ref()
            .and_then(|m| m.unique.as_ref().map(|(key, _)| key.as_str())),
        unique_hold_ms,
        trigger,
    };
    let pooler = shared.config.transaction_pooler;
    let call = on_pooled(
        &shared.pool,
        pooler,
        async |connection: &mut PgConnection| {
            shared.store.schedule_fire_if_due(connection, &fire).await
        },
    );
    bounded(shared.config.database_timeout, call)
        .await
        .map_err(|error: sqlx::Error| FireError::Database(DatabaseError::new(error)))
}

/// The last tick the database holds for each of this pool's schedules.
async fn last_ticks<S: Send + Sync + 'static>(
    shared: &Shared<S>,
) -> Result<HashMap<String, Option<DateTime<Utc>>>, sqlx::Error> {
    let names: Vec<&str> = shared.schedules.iter().map(|j| j.schedule.name()).collect();
    let rows = on_pooled(
        &shared.pool,
        shared.config.transaction_pooler,
        async |connection: &mut PgConnection| {
            shared.store.schedules_last_ticks(connection, &names).await
        },
    )
    .await?;
    Ok(rows.into_iter().collect())
}

/// Why a tick was not enqueued.
#[derive(Debug, thiserror::Error)]
enum FireError {
    #[error("the job of the tick could not be made: {0}")]
    Job(PublishError),
    #[error(transparent)]
    Database(DatabaseError),
}
