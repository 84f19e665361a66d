//! The periodic schedules as an operator sees them: [`Client::schedules`] lists them,
//! [`Client::delete_schedule`] forgets one that no worker declares any more.

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
                    |(name, spec, last_tick, next_tick, updated_at, _)| ScheduleInfo {
                        name,
                        spec,
                        last_tick,
                        next_tick,
                        updated_at,
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
    /// The last tick whose job was enqueued (`None`: none yet).
    pub last_tick: Option<DateTime<Utc>>,
    /// The tick after it, as the worker that enqueued it computed it.
    pub next_tick: Option<DateTime<Utc>>,
    /// When a worker last declared it or enqueued a tick.
    pub updated_at: DateTime<Utc>,
}
