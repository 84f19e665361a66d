//! The periodic schedules as an operator sees them: [`Client::schedules`] lists them,
//! [`Client::delete_schedule`] forgets one that no worker declares any more,
//! [`Client::pause_schedule`], [`Client::resume_schedule`] and
//! [`Client::trigger_schedule`] control one.

use chrono::{DateTime, Utc};

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::vocabulary::MAX_SCHEDULES;

impl Client {
    /// The periodic schedules workers declared on this queue
    /// ([`WorkerBuilder::periodic`](crate::WorkerBuilder::periodic)), by name, with their last and next tick, a page at a
    /// time ([`ScheduleQuery`]; a schema holds at most [`MAX_SCHEDULES`], so the default
    /// page has them all). A schedule no worker declares any more stays listed (its
    /// `updated_at` stops moving) until [`delete_schedule`](Self::delete_schedule). One
    /// round trip.
    ///
    /// ```no_run
    /// # async fn example(client: harel_jobs::Client) -> Result<(), harel_jobs::ClientError> {
    /// use harel_jobs::ScheduleQuery;
    ///
    /// let page = client.schedules(&ScheduleQuery::new()).await?;
    /// for schedule in &page.schedules {
    ///     println!("{} next {:?}", schedule.name, schedule.next_tick);
    /// }
    /// if let Some(after) = page.next {
    ///     let rest = client.schedules(&ScheduleQuery::new().after(after)).await?;
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a limit out of range, [`ClientError::Database`].
    pub async fn schedules(&self, query: &ScheduleQuery) -> Result<SchedulePage, ClientError> {
        if !(1..=MAX_SCHEDULES).contains(&query.limit) {
            return Err(ClientError::InvalidArgument(
                "schedules are listed 1 to 1,000 a page",
            ));
        }
        let rows = self
            .store
            .schedules_list(&self.pool, query.after.as_deref(), query.limit as i32)
            .await
            .map_err(DatabaseError::new)?;
        let total = rows
            .first()
            .map_or(0, |row| u64::try_from(row.5).unwrap_or(0));
        let next = (rows.len() == query.limit as usize)
            .then(|| rows.last().map(|row| row.0.clone()))
            .flatten();
        Ok(SchedulePage {
            schedules: rows
                .into_iter()
                .map(
                    |(name, spec, last_tick, next_tick, updated_at, _, paused_at, trigger)| {
                        ScheduleInfo {
                            name,
                            spec,
                            last_tick,
                            next_tick,
                            updated_at,
                            paused_at,
                            trigger_requested_at: trigger,
                        }
                    },
                )
                .collect(),
            next,
            total,
        })
    }

    /// Forgets a schedule, its last tick with it: for one that no worker declares any more
    /// (a schema holds at most [`MAX_SCHEDULES`]: past that, a new schedule is refused and
    /// its ticks are not enqueued, each try logged as a warning by the worker). A worker that still declares it records it again at its next start,
    /// as a new schedule. Returns whether it existed. One round trip; the operator's
    /// `EXECUTE` on `harel_delete_schedule`.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn delete_schedule(&self, name: &str) -> Result<bool, ClientError> {
        self.store
            .schedule_delete(&self.pool, name)
            .await
            .map_err(|error| DatabaseError::new(error).into())
    }

    /// Pauses a schedule: no worker enqueues a tick of it until
    /// [`resume_schedule`](Self::resume_schedule) (the database decides, so every worker
    /// declaring it, of any release since 0018, respects it); its ticks pass meanwhile
    /// without a job, and a [`trigger_schedule`](Self::trigger_schedule) not yet fired is
    /// dropped. Returns `false` if it was already paused. One round trip; the operator's
    /// `EXECUTE` on `harel_schedule_control`.
    ///
    /// # Errors
    /// [`ClientError::UnknownSchedule`], [`ClientError::Database`].
    pub async fn pause_schedule(&self, name: &str) -> Result<bool, ClientError> {
        self.control_schedule(name, "pause").await
    }

    /// Resumes a paused schedule: its next tick is the next one to come. The ticks that
    /// passed while it was paused are not caught up (whatever its
    /// [`MissedTicks`](crate::MissedTicks) policy, which is about ticks missed while no
    /// worker ran). Returns `false` if it was not paused. One round trip; the operator's
    /// `EXECUTE` on `harel_schedule_control`.
    ///
    /// # Errors
    /// [`ClientError::UnknownSchedule`], [`ClientError::Database`].
    pub async fn resume_schedule(&self, name: &str) -> Result<bool, ClientError> {
        self.control_schedule(name, "resume").await
    }

    /// Asks a schedule to enqueue one job now, besides its ticks: the next pass of a
    /// worker that declares it (workers look for requests every 2 seconds) makes
    /// the job with the request's time as its tick, and one worker only enqueues it. The
    /// request waits in the database until such a worker runs (shown as
    /// [`ScheduleInfo::trigger_requested_at`]). Returns `false` if a request was already
    /// waiting (it stands: one job). One round trip; the operator's `EXECUTE` on
    /// `harel_schedule_control`.
    ///
    /// # Errors
    /// [`ClientError::SchedulePaused`] (a paused schedule enqueues nothing: resume it
    /// first), [`ClientError::UnknownSchedule`], [`ClientError::Database`].
    pub async fn trigger_schedule(&self, name: &str) -> Result<bool, ClientError> {
        self.control_schedule(name, "trigger").await
    }

    /// `harel_schedule_control`: whether it changed anything.
    async fn control_schedule(&self, name: &str, action: &str) -> Result<bool, ClientError> {
        let answer = self
            .store
            .schedule_control(&self.pool, name, action)
            .await
            .map_err(DatabaseError::new)?;
        match answer.as_str() {
            "done" => Ok(true),
            "unchanged" => Ok(false),
            "paused" => Err(ClientError::SchedulePaused(name.to_owned())),
            "not_found" => Err(ClientError::UnknownSchedule(name.to_owned())),
            _ => Err(ClientError::UnexpectedReply),
        }
    }
}

/// Which schedules [`Client::schedules`] lists: a page by name.
#[derive(Clone, Debug)]
pub struct ScheduleQuery {
    after: Option<String>,
    limit: u32,
}

impl Default for ScheduleQuery {
    fn default() -> Self {
        Self {
            after: None,
            limit: MAX_SCHEDULES,
        }
    }
}

impl ScheduleQuery {
    /// From the first schedule, [`MAX_SCHEDULES`] a page (so all of them).
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules whose name sorts after this one: the cursor of the previous page
    /// ([`SchedulePage::next`]).
    pub fn after(mut self, name: impl Into<String>) -> Self {
        self.after = Some(name.into());
        self
    }

    /// At most this many schedules a page (1 to [`MAX_SCHEDULES`]).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// A page of schedules ([`Client::schedules`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SchedulePage {
    /// The schedules, by name.
    pub schedules: Vec<ScheduleInfo>,
    /// Where the next page starts ([`ScheduleQuery::after`]); `None` when this page ended
    /// the list (a full page gives a cursor even when the next page turns out empty).
    pub next: Option<String>,
    /// How many schedules the schema holds in all, on this page and the others.
    pub total: u64,
}

/// A periodic schedule as [`Client::schedules`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// Its name.
    pub name: String,
    /// How it was last declared: `cron <expression> (<time zone>)` or `every <n>s`.
    pub spec: String,
    /// The last tick whose job was enqueued, or that passed while paused (after a resume,
    /// at least the resume time) (`None`: none yet).
    pub last_tick: Option<DateTime<Utc>>,
    /// The tick after it, as the worker that enqueued it computed it.
    pub next_tick: Option<DateTime<Utc>>,
    /// When a worker last declared it or enqueued a tick.
    pub updated_at: DateTime<Utc>,
    /// When an operator paused it ([`Client::pause_schedule`]); `None`: not paused.
    pub paused_at: Option<DateTime<Utc>>,
    /// When an operator asked it to fire now ([`Client::trigger_schedule`]) and no worker
    /// has fired it yet; `None`: no request waiting.
    pub trigger_requested_at: Option<DateTime<Utc>>,
}
