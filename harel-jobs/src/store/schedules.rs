//! Periodic schedules: fire a tick or a trigger, read the last ticks and the triggers,
//! list, delete, pause, resume and trigger schedules.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::{Statement, Store};

pub(super) const LIST: &str =
    "SELECT name, spec, last_tick, next_tick, updated_at, total, paused_at, trigger_requested_at
       FROM @schema@.harel_schedules(NULL, $1, $2)";

pub(super) const LAST_TICKS: &str = "SELECT name, last_tick FROM @schema@.harel_schedules($1)";

pub(super) const TRIGGERS: &str = "SELECT name, trigger_requested_at
       FROM @schema@.harel_schedules($1) WHERE trigger_requested_at IS NOT NULL";

pub(super) const FIRE_IF_DUE: &str =
    "SELECT @schema@.harel_schedule_fire($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

pub(super) const CONTROL: &str = "SELECT @schema@.harel_schedule_control($1, $2)";

pub(super) const DELETE: &str = "SELECT @schema@.harel_delete_schedule($1)";

/// A row of `harel_schedules`: name, spec, last tick, next tick, updated, total, paused
/// at, trigger requested at.
pub(crate) type ScheduleRow = (
    String,
    String,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    DateTime<Utc>,
    i64,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
);

/// One call of `harel_schedule_fire`: a schedule's declaration, and the job of one of its
/// ticks (the job's columns all `None`: the declaration alone).
#[derive(Debug)]
pub(crate) struct Fire<'a> {
    /// The schedule's name.
    pub name: &'a str,
    /// How it is declared (`cron … (zone)` or `every …s`).
    pub spec: &'a str,
    /// The tick whose job to enqueue.
    pub tick: Option<DateTime<Utc>>,
    /// The tick after it.
    pub next_tick: Option<DateTime<Utc>>,
    /// The job's group (`None`: a group of its own).
    pub group: Option<&'a str>,
    /// The job's kind.
    pub kind: Option<&'a str>,
    /// The job's payload.
    pub payload: Option<&'a str>,
    /// The job's priority.
    pub priority: Option<i16>,
    /// The job's queue (`None`: the default queue).
    pub queue: Option<&'a str>,
    /// The job's unique key.
    pub unique_key: Option<&'a str>,
    /// How long the key is held after completion, in milliseconds.
    pub unique_hold_ms: Option<i64>,
    /// An operator's request to fire now, as `harel_schedules` showed it (`tick` is then
    /// its time); `None`: `tick` is one of the schedule's ticks.
    pub trigger: Option<DateTime<Utc>>,
}

impl Store {
    /// `harel_schedule_fire`: records the schedule's declaration and, once the database's
    /// clock has reached the tick and no worker enqueued its job yet, enqueues it. Returns
    /// the new job's id; `Some(0)` if the tick is not due yet on the database's clock
    /// (nothing written); `None` if another worker had enqueued it.
    pub(crate) async fn schedule_fire_if_due<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        fire: &Fire<'_>,
    ) -> Result<Option<i64>, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::ScheduleFireIfDue))
            .bind(fire.name)
            .bind(fire.spec)
            .bind(fire.tick)
            .bind(fire.next_tick)
            .bind(fire.group)
            .bind(fire.kind)
            .bind(fire.payload)
            .bind(fire.priority)
            .bind(fire.queue)
            .bind(fire.unique_key)
            .bind(fire.unique_hold_ms)
            .bind(fire.trigger)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_schedules` for the schedules named: each one's last tick.
    pub(crate) async fn schedules_last_ticks<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        names: &[&str],
    ) -> Result<Vec<(String, Option<DateTime<Utc>>)>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::SchedulesLastTicks))
            .bind(names)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_schedules` for the schedules named: those with an operator's request to fire
    /// now, and the request's time.
    pub(crate) async fn schedules_triggers<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        names: &[&str],
    ) -> Result<Vec<(String, DateTime<Utc>)>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::SchedulesTriggers))
            .bind(names)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_schedule_control`: pauses, resumes or triggers a schedule (`action`
    /// `pause`, `resume`, `trigger`). Returns the function's answer: `done`, `unchanged`,
    /// `paused` (a trigger refused) or `not_found`.
    pub(crate) async fn schedule_control<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        name: &str,
        action: &str,
    ) -> Result<String, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::ScheduleControl))
            .bind(name)
            .bind(action)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_schedules`: up to `limit` schedules by name, after `after`; each row carries
    /// the total.
    pub(crate) async fn schedules_list<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        after: Option<&str>,
        limit: i32,
    ) -> Result<Vec<ScheduleRow>, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::SchedulesList))
            .bind(after)
            .bind(limit)
            .persistent(self.persistent())
            .fetch_all(executor)
            .await
    }

    /// `harel_delete_schedule`: forgets a schedule. Returns whether it existed.
    pub(crate) async fn schedule_delete<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        name: &str,
    ) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::ScheduleDelete))
            .bind(name)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }
}
