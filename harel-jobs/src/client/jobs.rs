//! Jobs as an operator sees them: one looked up ([`Client::job`]), a page of them
//! ([`Client::jobs`]), and cancelling one or a whole group ([`Client::cancel`],
//! [`Client::cancel_group`]).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{Acquire, Postgres};

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::job::Job;
use crate::store::{JobRow, JobsFilter, ListRow};
use crate::vocabulary::{
    DEFAULT_CANCELLED_RETENTION, DEFAULT_QUEUE, GROUP_CANCEL_STEP, JobId, MAX_LIST_READS, MAX_PAGE,
    MAX_REASON_BYTES, Priority, delay_millis, validate_group,
};

impl Client {
    /// A job's state and facts, or `None` if no job has this id (or it completed without
    /// retention, or its history was pruned). One round trip.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn job(&self, id: JobId) -> Result<Option<JobInfo>, ClientError> {
        let row = self
            .store
            .job_get(&self.pool, id.get())
            .await
            .map_err(DatabaseError::new)?;
        row.map(|row| JobInfo::from_row(id, row)).transpose()
    }

    /// A page of jobs in id order, as `query` filters them (state, kind, group, queue), from
    /// `query`'s cursor on. Keyset pagination: pass [`JobPage::next`] to
    /// [`JobQuery::after`] for the next page; `None` means there is none. Each read is one
    /// round trip of bounded work, whatever the queue holds (at most 2,000 rows of each
    /// place a job can be, from the cursor on): when the filters keep few of the jobs it
    /// reads, the page comes back short (even empty), and [`JobPage::stopped_at`] says
    /// where the reads stopped looking (nothing unlisted up to there matches; continue
    /// from there). [`JobQuery::read_on`] lets one page read on, up to that many reads,
    /// until it is full.
    ///
    /// ```no_run
    /// # use harel_jobs::{JobQuery, Client, StateFilter};
    /// # async fn example(client: Client) -> Result<(), harel_jobs::ClientError> {
    /// let mut query = JobQuery::new().state(StateFilter::Dead).kind("send_welcome_email");
    /// loop {
    ///     let page = client.jobs(&query).await?;
    ///     for job in &page.jobs {
    ///         println!("{} {:?} {:?}", job.id, job.state, job.last_error);
    ///     }
    ///     match page.next {
    ///         Some(next) => query = query.after(next),
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a limit outside 1..=1000 or reads outside
    /// 1..=100; [`ClientError::Database`].
    pub async fn jobs(&self, query: &JobQuery) -> Result<JobPage, ClientError> {
        self.jobs_on(&self.pool, query).await
    }

    /// [`jobs`](Self::jobs) on one connection (`&mut *tx`: a transaction sees the jobs it
    /// enqueued before committing).
    pub(crate) async fn jobs_on<'c, A: Acquire<'c, Database = Postgres>>(
        &self,
        connection: A,
        query: &JobQuery,
    ) -> Result<JobPage, ClientError> {
        if query.limit == 0 || query.limit > MAX_PAGE {
            return Err(ClientError::InvalidArgument("a page holds 1 to 1,000 jobs"));
        }
        if query.reads == 0 || query.reads > MAX_LIST_READS {
            return Err(ClientError::InvalidArgument(
                "a page reads on through 1 to 100 reads",
            ));
        }
        let mut connection = connection.acquire().await.map_err(DatabaseError::new)?;
        let limit = query.limit as usize;
        let mut jobs = Vec::with_capacity(limit.min(100));
        let mut after = query.after.map(JobId::get);
        let mut next = None;
        for _ in 0..query.reads {
            let filter = JobsFilter {
                state: query.state.map(StateFilter::as_str),
                kind: query.kind.as_deref(),
                group: query.group.as_deref(),
                after,
                // what the page still holds: a read never lists more than the page shows
                limit: i32::try_from(limit - jobs.len()).unwrap_or(100),
                queue: query.queue.as_deref(),
                newest_first: query.newest_first,
            };
            let rows = self
                .store
                .jobs_list(&mut *connection, &filter)
                .await
                .map_err(DatabaseError::new)?;
            next = None;
            for row in rows {
                let (id, state) = (row.0, row.1.clone());
                match (id, state) {
                    (Some(id), Some(_)) => {
                        let row = job_row(row).ok_or(ClientError::UnexpectedReply)?;
                        jobs.push(JobInfo::from_row(JobId::new(id), row)?);
                    }
                    (cursor, None) => next = cursor.map(JobId::new),
                    (None, Some(_)) => return Err(ClientError::UnexpectedReply),
                }
            }
            match next {
                Some(cursor) if jobs.len() < limit => after = Some(cursor.get()),
                _ => break,
            }
        }
        if query.newest_first {
            jobs.sort_by_key(|job| std::cmp::Reverse(job.id));
        } else {
            jobs.sort_by_key(|job| job.id);
        }
        // short with a cursor: the reads stopped looking, not the matches
        let stopped_at = next.filter(|_| jobs.len() < limit);
        Ok(JobPage {
            jobs,
            next,
            stopped_at,
        })
    }

    /// The jobs a pending job still waits for ([`JobState::Pending`]), in id order, at most
    /// [`MAX_LISTED`] of them (`more` says whether there are others); none for a job that
    /// waits for nothing.
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn job_parents(&self, id: JobId) -> Result<JobParents, ClientError> {
        let mut ids = self
            .store
            .job_parents(&self.pool, id.get(), MAX_LISTED as i32)
            .await
            .map_err(DatabaseError::new)?;
        let more = ids.len() > MAX_LISTED;
        ids.truncate(MAX_LISTED);
        Ok(JobParents {
            parents: ids.into_iter().map(JobId::new).collect(),
            more,
        })
    }

    /// The durable steps the job recorded ([`JobContext::step`](crate::JobContext::step)):
    /// their names, sizes and times (not their results), in name order, at most
    /// [`MAX_LISTED`] (`more` says whether there are others).
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn job_steps(&self, id: JobId) -> Result<JobSteps, ClientError> {
        let mut rows = self
            .store
            .job_steps(&self.pool, id.get(), MAX_LISTED as i32)
            .await
            .map_err(DatabaseError::new)?;
        let more = rows.len() > MAX_LISTED;
        rows.truncate(MAX_LISTED);
        Ok(JobSteps {
            steps: rows
                .into_iter()
                .map(|(name, bytes, recorded_at)| StepInfo {
                    name,
                    bytes: u32::try_from(bytes).unwrap_or(0),
                    recorded_at,
                })
                .collect(),
            more,
        })
    }

    /// The job's attempts, newest first: when each started and ended, how it ended, the
    /// worker pool that ran it and the error it recorded. At most the
    /// [`MAX_ATTEMPTS_KEPT`] most recent (a job keeps no more); empty for a job that never
    /// started, or that is not known (it completed without retention, or was pruned).
    ///
    /// # Errors
    /// [`ClientError::Database`].
    pub async fn job_attempts(&self, id: JobId) -> Result<Vec<AttemptInfo>, ClientError> {
        let rows = self
            .store
            .job_attempts(&self.pool, id.get())
            .await
            .map_err(DatabaseError::new)?;
        Ok(rows
            .into_iter()
            .map(
                |(number, started_at, ended_at, outcome, worker, host, pid, error)| AttemptInfo {
                    number: u32::try_from(number).unwrap_or(0),
                    started_at,
                    ended_at,
                    outcome: AttemptOutcome::from_db(&outcome),
                    worker: worker.map(|id| AttemptWorker { id, host, pid }),
                    error,
                },
            )
            .collect())
    }

    /// Makes a retrying or scheduled job due now (`harel_run_now`): its group's next job
    /// starts at the next claim; a job behind others of its group loses its not-before
    /// time and keeps its place. See [`RunNowOutcome`].
    ///
    /// # Errors
    /// [`ClientError::Database`] (SQLSTATE `40001` if the job kept moving under it: try
    /// again); [`ClientError::UnexpectedReply`] for an answer this release does not know.
    pub async fn run_now(&self, id: JobId) -> Result<RunNowOutcome, ClientError> {
        let outcome = self
            .store
            .job_run_now(&self.pool, id.get())
            .await
            .map_err(DatabaseError::new)?;
        Ok(match outcome.as_str() {
            "due" => RunNowOutcome::Due,
            "behind" => RunNowOutcome::Behind,
            "running" => RunNowOutcome::Running,
            "not_waiting" => RunNowOutcome::NotWaiting,
            "finished" => RunNowOutcome::Finished,
            "not_found" => RunNowOutcome::NotFound,
            _ => return Err(ClientError::UnexpectedReply),
        })
    }

    /// Cancels a job: at once if it is waiting, scheduled or retrying (it never runs); if it
    /// runs, its handler is signalled at its worker's next heartbeat and the job ends as
    /// cancelled whatever the handler returns. See [`CancelOutcome`]. Set a reason (kept
    /// with the job, shown by [`job`](Self::job)) and how long the cancelled job is kept
    /// before `.await`.
    pub fn cancel(&self, id: JobId) -> Cancel<'_> {
        Cancel {
            client: self,
            target: Target::Job(id),
            reason: None,
            keep: DEFAULT_CANCELLED_RETENTION,
        }
    }

    /// Cancels every job of `group` ("this user was deleted"): the waiting, scheduled and
    /// retrying ones at once, a running one as [`cancel`](Self::cancel) does. In one
    /// transaction, however many jobs the group holds (each round trip cancels up to 1,000
    /// of them): either all are cancelled or, on an error, none.
    pub fn cancel_group(&self, group: impl Into<String>) -> Cancel<'_> {
        Cancel {
            client: self,
            target: Target::Group(group.into()),
            reason: None,
            keep: DEFAULT_CANCELLED_RETENTION,
        }
    }

    async fn cancel_one(
        &self,
        id: JobId,
        reason: Option<&str>,
        keep_ms: i64,
    ) -> Result<CancelOutcome, ClientError> {
        let outcome = self
            .store
            .job_cancel(&self.pool, id.get(), reason, keep_ms)
            .await
            .map_err(DatabaseError::new)?;
        CancelOutcome::parse(&outcome).ok_or(ClientError::UnexpectedReply)
    }

    async fn cancel_all(
        &self,
        group: &str,
        reason: Option<&str>,
        keep_ms: i64,
    ) -> Result<CancelOutcome, ClientError> {
        validate_group(group).map_err(|_| {
            ClientError::InvalidArgument("a group id is 1 to 1,024 bytes, without NUL characters")
        })?;
        let mut tx = self.pool.begin().await.map_err(DatabaseError::new)?;
        let mut cancelled: u64 = 0;
        let mut requested = false;
        loop {
            let (now, running, remaining) = self
                .store
                .group_cancel_step(&mut *tx, group, reason, keep_ms, GROUP_CANCEL_STEP)
                .await
                .map_err(DatabaseError::new)?;
            cancelled += u64::try_from(now).unwrap_or(0);
            requested |= running;
            if !remaining {
                break;
            }
        }
        tx.commit().await.map_err(DatabaseError::new)?;
        Ok(CancelOutcome::Group {
            cancelled,
            running_requested: requested,
        })
    }
}

/// What [`Client::cancel`] (or [`Client::cancel_group`]) is to cancel.
#[derive(Debug)]
enum Target {
    Job(JobId),
    Group(String),
}

/// A cancel on its way: options first, then `.await`. Made by [`Client::cancel`] and
/// [`Client::cancel_group`].
#[must_use = "a cancel does nothing until awaited"]
#[derive(Debug)]
pub struct Cancel<'q> {
    client: &'q Client,
    target: Target,
    reason: Option<String>,
    keep: Duration,
}

impl Cancel<'_> {
    /// Why (and by whom): kept with the cancelled job, at most 8 KiB
    /// ([`MAX_REASON_BYTES`]).
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// How long the cancelled job stays in the history, where [`Client::job`] finds it
    /// (default [`DEFAULT_CANCELLED_RETENTION`], 7 days; at most 100 years).
    pub fn keep(mut self, period: Duration) -> Self {
        self.keep = period;
        self
    }
}

impl<'q> IntoFuture for Cancel<'q> {
    type Output = Result<CancelOutcome, ClientError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'q>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            if self
                .reason
                .as_ref()
                .is_some_and(|r| r.len() > MAX_REASON_BYTES || r.contains('\0'))
            {
                return Err(ClientError::InvalidArgument(
                    "a cancel reason is at most 8 KiB, without NUL characters",
                ));
            }
            let keep_ms = delay_millis(self.keep).map_err(|_| {
                ClientError::InvalidArgument("a cancelled job is kept at most 100 years")
            })?;
            let reason = self.reason.as_deref();
            match &self.target {
                Target::Job(id) => self.client.cancel_one(*id, reason, keep_ms).await,
                Target::Group(group) => self.client.cancel_all(group, reason, keep_ms).await,
            }
        })
    }
}

/// The most parents ([`Client::job_parents`]) or steps ([`Client::job_steps`]) one call
/// lists.
pub const MAX_LISTED: usize = 100;

/// The jobs a pending job still waits for ([`Client::job_parents`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobParents {
    /// Up to [`MAX_LISTED`] of them, in id order.
    pub parents: Vec<JobId>,
    /// Whether there are more.
    pub more: bool,
}

/// A durable step a job recorded ([`Client::job_steps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StepInfo {
    /// Its name.
    pub name: String,
    /// The size of its recorded result (JSON), in bytes.
    pub bytes: u32,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
}

/// The durable steps a job recorded ([`Client::job_steps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobSteps {
    /// Up to [`MAX_LISTED`] of them, in name order.
    pub steps: Vec<StepInfo>,
    /// Whether there are more.
    pub more: bool,
}

/// How many of a job's most recent attempts are kept ([`Client::job_attempts`]).
pub const MAX_ATTEMPTS_KEPT: u32 = 100;

/// One attempt of a job ([`Client::job_attempts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptInfo {
    /// Its number, 1 for the first.
    pub number: u32,
    /// When it began (`None`: not known).
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended (`None`: it is running, or it lapsed).
    pub ended_at: Option<DateTime<Utc>>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The worker pool that ended it (`None`: not known, as for a lapsed attempt).
    pub worker: Option<AttemptWorker>,
    /// The error it recorded (failed, dead), or the cancel's reason (cancelled).
    pub error: Option<String>,
}

/// The worker pool that ran an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptWorker {
    /// The pool's id ([`WorkerInfo::id`](crate::WorkerInfo::id)).
    pub id: uuid::Uuid,
    /// The host it ran on, while the pool is still listed (a day after it was last seen).
    pub host: Option<String>,
    /// Its process id, likewise.
    pub pid: Option<i32>,
}

/// How an attempt ended ([`AttemptInfo::outcome`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// It failed and the job was retried (or will be).
    Failed,
    /// It failed for good: the job went to the dead letters.
    Dead,
    /// It succeeded (the job is retained in the history).
    Completed,
    /// The job was cancelled while (or after) it ran.
    Cancelled,
    /// It is running.
    Running,
    /// No worker ended it: its worker stopped or lost the lease, and the lease ran out (or
    /// it ran before the release that records attempts).
    Lapsed,
}

impl AttemptOutcome {
    fn from_db(outcome: &str) -> Self {
        match outcome {
            "failed" => Self::Failed,
            "dead" => Self::Dead,
            "completed" => Self::Completed,
            "cancelled" => Self::Cancelled,
            "running" => Self::Running,
            _ => Self::Lapsed,
        }
    }

    /// Its name, as `harel-jobs jobs show` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failed => "failed",
            Self::Dead => "dead",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Running => "running",
            Self::Lapsed => "lapsed",
        }
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`Client::run_now`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunNowOutcome {
    /// It was its group's next job, waiting for a retry's backoff or its not-before time:
    /// it is due now and starts at the next claim (as its queue's pause, limits and fair
    /// share allow).
    Due,
    /// It waits behind earlier jobs of its group: its not-before time is dropped, and it
    /// starts as soon as its turn comes (its group's order is kept).
    Behind,
    /// It is running: refused.
    Running,
    /// It waits for no time of its own (it is due already, waits for other jobs, is held
    /// by a lapsed lease, or is delayed by its queue's rate or a snooze): nothing changed.
    NotWaiting,
    /// It completed (and is retained), is a dead letter, or was cancelled.
    Finished,
    /// No such job (or it completed without retention, or was pruned).
    NotFound,
}

/// What a cancel did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// The job was waiting, scheduled or retrying: it is cancelled and will never run.
    Cancelled,
    /// The job is running: its handler is signalled at its worker's next heartbeat
    /// ([`JobContext::is_cancelled`](crate::JobContext::is_cancelled)), and it ends as
    /// cancelled whatever the handler returns (if its worker dies, when its lease lapses).
    Requested,
    /// Too late: it had completed (known only while completed jobs are retained).
    AlreadyCompleted,
    /// Too late: it had become a dead letter.
    AlreadyDead,
    /// It had been cancelled before.
    AlreadyCancelled,
    /// No job has this id (or it completed without retention, or was pruned).
    NotFound,
    /// [`Client::cancel_group`]: how many jobs were cancelled at once, and whether a running
    /// job was asked to stop (it ends as cancelled when its handler returns).
    Group {
        /// Jobs cancelled at once.
        cancelled: u64,
        /// Whether the group had a running job, now asked to stop.
        running_requested: bool,
    },
}

impl CancelOutcome {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "cancelled" => Self::Cancelled,
            "requested" => Self::Requested,
            "completed" => Self::AlreadyCompleted,
            "dead" => Self::AlreadyDead,
            "already_cancelled" => Self::AlreadyCancelled,
            "not_found" => Self::NotFound,
            _ => return None,
        })
    }
}

/// Where a job is in its life ([`Client::job`]). How long each state is kept: the queued
/// ones until the job moves on; `Completed` only with retention (`#[job(retain = "…")]`
/// or [`WorkerBuilder::retain_completed`](crate::WorkerBuilder::retain_completed)), for that period; `Cancelled` for the cancel's
/// keep period (7 days by default); `Dead` until the dead letter is deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobState {
    /// Waiting for the jobs it depends on ([`EnqueueOptions::after`](crate::EnqueueOptions::after)):
    /// no worker claims it before they have all completed.
    Pending,
    /// Due, waiting for a worker (or for the jobs before it in its group).
    Waiting,
    /// Not to start before `at`.
    Scheduled {
        /// The earliest start (database clock).
        at: DateTime<Utc>,
    },
    /// A handler runs it.
    Running {
        /// When this attempt began (`None` for a job claimed by a release before 0.5).
        since: Option<DateTime<Utc>>,
        /// When its lease ends unless its worker's heartbeat extends it.
        lease_until: DateTime<Utc>,
        /// Whether its cancel was asked for (it ends as cancelled).
        cancel_requested: bool,
    },
    /// An attempt failed (or its worker died); the next one starts at `after`.
    Retrying {
        /// The earliest next attempt (in the past: as soon as a worker is free).
        after: DateTime<Utc>,
    },
    /// Done (kept only with retention).
    Completed {
        /// When the last attempt began, if known.
        started_at: Option<DateTime<Utc>>,
        /// When it completed.
        at: DateTime<Utc>,
    },
    /// Failed for good: in the dead letters.
    Dead {
        /// When it failed for the last time.
        at: DateTime<Utc>,
    },
    /// Cancelled.
    Cancelled {
        /// When it ended.
        at: DateTime<Utc>,
        /// The cancel's reason, if one was given.
        reason: Option<String>,
    },
}

/// A job as [`Client::job`] finds it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JobInfo {
    /// Its id.
    pub id: JobId,
    /// Where it is in its life.
    pub state: JobState,
    /// Its kind ([`Job::KIND`]).
    pub kind: String,
    /// Its group.
    pub group: String,
    /// Its queue.
    pub queue: String,
    /// Its fairness key (`""`: none; [`OutgoingMessage::fair_key`](crate::transport::OutgoingMessage::fair_key)).
    pub fair_key: String,
    /// Its payload, as JSON text ([`decode`](Self::decode) for the typed job).
    pub payload: String,
    /// The priority it was enqueued with.
    pub priority: Priority,
    /// Attempts started so far (a running one included).
    pub attempts: u32,
    /// When it was enqueued.
    pub enqueued_at: DateTime<Utc>,
    /// The last failed attempt's error, if any.
    pub last_error: Option<String>,
    /// The cancel's reason, if one was given: for a running job whose cancel was asked for
    /// (it ends as cancelled when its handler returns), and for a cancelled job (as
    /// [`JobState::Cancelled`] says).
    pub cancel_reason: Option<String>,
}

impl JobInfo {
    /// The payload as the job type `J`.
    ///
    /// # Errors
    /// The payload does not decode as `J`.
    pub fn decode<J: Job>(&self) -> Result<J, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }

    /// How long the last attempt ran, for a completed job whose start is known.
    pub fn duration(&self) -> Option<Duration> {
        match &self.state {
            JobState::Completed {
                started_at: Some(started),
                at,
            } => (*at - *started).to_std().ok(),
            _ => None,
        }
    }

    fn from_row(id: JobId, row: JobRow) -> Result<Self, ClientError> {
        let (
            state,
            group,
            kind,
            payload,
            priority,
            attempts,
            enqueued_at,
            at,
            started_at,
            finished_at,
            last_error,
            cancel_reason,
            cancel_requested,
            queue,
            fair_key,
        ) = row;
        let unexpected = || ClientError::UnexpectedReply;
        // a running job's pending cancel says its reason too
        let reason = match state.as_str() {
            "running" | "cancelled" => cancel_reason.clone(),
            _ => None,
        };
        let (Some(priority), Some(attempts), Some(enqueued_at), Some(cancel_requested)) =
            (priority, attempts, enqueued_at, cancel_requested)
        else {
            return Err(unexpected());
        };
        let state = match state.as_str() {
            "pending" => JobState::Pending,
            "waiting" => JobState::Waiting,
            "scheduled" => JobState::Scheduled {
                at: at.ok_or_else(unexpected)?,
            },
            "running" => JobState::Running {
                since: started_at,
                lease_until: at.ok_or_else(unexpected)?,
                cancel_requested,
            },
            "retrying" => JobState::Retrying {
                after: at.unwrap_or(enqueued_at),
            },
            "completed" => JobState::Completed {
                started_at,
                at: finished_at.ok_or_else(unexpected)?,
            },
            "dead" => JobState::Dead {
                at: finished_at.ok_or_else(unexpected)?,
            },
            "cancelled" => JobState::Cancelled {
                at: finished_at.ok_or_else(unexpected)?,
                reason: cancel_reason,
            },
            _ => return Err(unexpected()),
        };
        Ok(Self {
            id,
            state,
            kind,
            group,
            queue: queue.unwrap_or_else(|| DEFAULT_QUEUE.to_owned()),
            fair_key: fair_key.unwrap_or_default(),
            payload,
            priority: Priority::from_db(priority),
            attempts: u32::try_from(attempts).unwrap_or(0),
            enqueued_at,
            last_error,
            cancel_reason: reason,
        })
    }
}

/// A listed job's row as `harel_job` gives it, if its columns are there.
fn job_row(row: ListRow) -> Option<JobRow> {
    Some((
        row.1?, row.2?, row.3?, row.4?, row.5, row.6, row.7, row.8, row.9, row.10, row.11, row.12,
        row.13, row.14, row.15,
    ))
}

/// Which jobs [`Client::jobs`] lists, and from where: a filter and a cursor.
#[derive(Clone, Debug)]
pub struct JobQuery {
    state: Option<StateFilter>,
    kind: Option<String>,
    group: Option<String>,
    queue: Option<String>,
    after: Option<JobId>,
    limit: u32,
    newest_first: bool,
    reads: u32,
}

impl Default for JobQuery {
    fn default() -> Self {
        Self {
            state: None,
            kind: None,
            group: None,
            queue: None,
            after: None,
            limit: 100,
            newest_first: false,
            reads: 1,
        }
    }
}

impl JobQuery {
    /// Every job, from the first, 100 a page.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only jobs in this state.
    pub fn state(mut self, state: StateFilter) -> Self {
        self.state = Some(state);
        self
    }

    /// Only jobs of this kind.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Only jobs of this group.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Only jobs of this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Jobs after this one in the listing's order (ids above it; below it with
    /// [`newest_first`](Self::newest_first)): the cursor of the previous page
    /// ([`JobPage::next`]).
    pub fn after(mut self, id: JobId) -> Self {
        self.after = Some(id);
        self
    }

    /// Newest first: in descending id order, each page older than the one before (the
    /// same bounded reads as oldest first, walked the other way).
    pub fn newest_first(mut self) -> Self {
        self.newest_first = true;
        self
    }

    /// At most this many jobs a page (1 to [`MAX_PAGE`]; default 100).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// While the page is not full, read on from where the last read stopped: at most this
    /// many reads a page (1 to [`MAX_LIST_READS`]; default 1, one round trip), each a round
    /// trip of bounded work. For filters that keep few jobs (one queue's among many
    /// others'): a page reaches matches up to `reads` times as far, and
    /// [`JobPage::stopped_at`] says where it stopped looking if it still did.
    pub fn read_on(mut self, reads: u32) -> Self {
        self.reads = reads;
        self
    }
}

/// A state to list jobs in ([`JobQuery::state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StateFilter {
    /// Pending, waiting, scheduled, running or retrying: every job still in the queue.
    Queued,
    /// [`JobState::Pending`].
    Pending,
    /// [`JobState::Waiting`].
    Waiting,
    /// [`JobState::Scheduled`].
    Scheduled,
    /// [`JobState::Running`].
    Running,
    /// [`JobState::Retrying`].
    Retrying,
    /// [`JobState::Completed`] (retained ones).
    Completed,
    /// [`JobState::Dead`].
    Dead,
    /// [`JobState::Cancelled`].
    Cancelled,
}

impl StateFilter {
    fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Pending => "pending",
            Self::Waiting => "waiting",
            Self::Scheduled => "scheduled",
            Self::Running => "running",
            Self::Retrying => "retrying",
            Self::Completed => "completed",
            Self::Dead => "dead",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One page of [`Client::jobs`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct JobPage {
    /// The jobs, in id order (descending with [`JobQuery::newest_first`]).
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts ([`JobQuery::after`]); `None` when there is none.
    pub next: Option<JobId>,
    /// `Some` when the page is short (even empty) because its reads stopped looking, not
    /// because nothing else matches: no unlisted job up to this id (down to it, newest
    /// first) matches the filters, and those past it were not looked at. It is
    /// [`next`](Self::next) then: pass it to [`JobQuery::after`] to look on. `None` when
    /// the page is full, or holds every match left.
    pub stopped_at: Option<JobId>,
}
