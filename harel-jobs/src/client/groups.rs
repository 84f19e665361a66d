//! Groups as an operator sees them: [`Client::groups`] pages through the groups that hold
//! jobs, [`Client::group`] looks one up, [`Client::top_groups`] ranks them (longest waiting,
//! largest).

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::store::GroupRow;
use crate::vocabulary::{JobId, MAX_GROUP_PAGE, MAX_TOP_GROUPS, Priority, validate_group};
use chrono::{DateTime, Utc};

/// Where a group stands with the workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupStatus {
    /// Claimable now: its first job waits for a free worker.
    Waiting,
    /// A worker holds its lease (and the lease has not lapsed): its first job runs.
    Leased,
    /// Not claimable before [`GroupInfo::available_at`]: a retry's backoff, a snooze, or a
    /// first job scheduled for later.
    Parked,
}

impl GroupStatus {
    /// `waiting`, `leased` or `parked`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Leased => "leased",
            Self::Parked => "parked",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "waiting" => Self::Waiting,
            "leased" => Self::Leased,
            "parked" => Self::Parked,
            _ => return None,
        })
    }
}

/// A group that holds jobs, as [`Client::groups`] and [`Client::group`] find it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupInfo {
    /// The group's id (`own:` and 19 digits for a job enqueued without a group).
    pub id: String,
    /// Where it stands with the workers.
    pub status: GroupStatus,
    /// The priority its claims go by (its first job's).
    pub priority: Priority,
    /// While waiting: since when it could be claimed; while leased: when the lease ends
    /// unless extended; while parked: when it becomes claimable.
    pub available_at: DateTime<Utc>,
    /// Its first job: the one a lease is about, the next to run.
    pub head: Option<JobId>,
    /// Attempts counted for its first job so far.
    pub head_attempts: u32,
    /// Jobs it holds, counted up to [`GROUP_JOBS_COUNT_CAP`](crate::vocabulary::GROUP_JOBS_COUNT_CAP).
    pub jobs: u32,
    /// Whether it holds at least [`GROUP_JOBS_COUNT_CAP`](crate::vocabulary::GROUP_JOBS_COUNT_CAP) jobs (then `jobs` is that cap).
    pub jobs_capped: bool,
    /// Whether a cancel of its running job was asked for.
    pub cancel_requested: bool,
    /// The named queue its jobs belong to ([`DEFAULT_QUEUE`](crate::DEFAULT_QUEUE) unless
    /// they were enqueued into another).
    pub queue: String,
    /// How many jobs PostgreSQL's statistics say it holds, when [`Client::top_groups`] ranked
    /// it by [`GroupRank::Largest`] (`None` otherwise): its size past
    /// [`GROUP_JOBS_COUNT_CAP`](crate::vocabulary::GROUP_JOBS_COUNT_CAP), as of [`TopGroups::statistics_at`].
    pub jobs_estimate: Option<u64>,
}

/// How [`Client::top_groups`] ranks the groups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupRank {
    /// The ready groups that have waited longest for a worker (since
    /// [`GroupInfo::available_at`]), oldest first, across every queue and priority: what
    /// is stuck behind busy workers or a paused queue. Exact.
    LongestWaiting,
    /// The largest groups, largest first: a customer or tenant whose jobs pile up. Ranked
    /// by PostgreSQL's statistics of the queue (the most common group ids that its last
    /// `ANALYZE` found in a sample of the jobs; autovacuum runs it as the queue churns), so
    /// a group that grew since may be missing, and when no group stands out from the
    /// others there is none to list. Each listed group's jobs are then counted (up to
    /// [`GROUP_JOBS_COUNT_CAP`](crate::vocabulary::GROUP_JOBS_COUNT_CAP)).
    Largest,
}

impl GroupRank {
    /// `waiting` or `size`: the name the database function takes.
    fn as_sql(self) -> &'static str {
        match self {
            Self::LongestWaiting => "waiting",
            Self::Largest => "size",
        }
    }
}

/// What [`Client::top_groups`] found.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TopGroups {
    /// The groups, best ranked first.
    pub groups: Vec<GroupInfo>,
    /// For [`GroupRank::Largest`]: when PostgreSQL last gathered the statistics the
    /// ranking comes from (`None` when no group was listed, or it never did).
    pub statistics_at: Option<DateTime<Utc>>,
}

/// Which groups [`Client::groups`] lists: from a cursor, so many a page.
#[derive(Clone, Debug)]
pub struct GroupQuery {
    after: Option<String>,
    limit: u32,
}

impl Default for GroupQuery {
    fn default() -> Self {
        Self {
            after: None,
            limit: 100,
        }
    }
}

impl GroupQuery {
    /// Every group, from the first (in id order), 100 a page.
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups whose id sorts after this one: the cursor of the previous page
    /// ([`GroupPage::next`]).
    pub fn after(mut self, group: impl Into<String>) -> Self {
        self.after = Some(group.into());
        self
    }

    /// At most this many groups a page (1 to [`MAX_GROUP_PAGE`]; default 100).
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }
}

/// One page of [`Client::groups`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupPage {
    /// The groups, in id order (byte order of their ids).
    pub groups: Vec<GroupInfo>,
    /// Where the next page starts ([`GroupQuery::after`]); `None` when this page ended the
    /// list (a full page gives a cursor even when the next page turns out empty).
    pub next: Option<String>,
}

fn from_row(row: GroupRow) -> Result<GroupInfo, ClientError> {
    let (id, status, priority, available_at, head, head_attempts, jobs, capped, cancel, queue) =
        row;
    Ok(GroupInfo {
        id,
        status: GroupStatus::parse(&status).ok_or(ClientError::UnexpectedReply)?,
        priority: Priority::from_db(priority),
        available_at,
        head: head.map(JobId::new),
        head_attempts: u32::try_from(head_attempts).unwrap_or(0),
        jobs: u32::try_from(jobs).unwrap_or(0),
        jobs_capped: capped,
        cancel_requested: cancel,
        queue,
        jobs_estimate: None,
    })
}

impl Client {
    /// A page of the groups that hold jobs, in id order, from `query`'s cursor on. Keyset
    /// pagination: pass [`GroupPage::next`] to [`GroupQuery::after`] for the next page. One
    /// round trip of bounded work: it reads the page's group rows by key and counts each
    /// group's jobs up to [`GROUP_JOBS_COUNT_CAP`](crate::vocabulary::GROUP_JOBS_COUNT_CAP).
    ///
    /// ```no_run
    /// # use harel_jobs::{GroupQuery, Client};
    /// # async fn example(client: Client) -> Result<(), harel_jobs::ClientError> {
    /// let mut query = GroupQuery::new().limit(500);
    /// loop {
    ///     let page = client.groups(&query).await?;
    ///     for group in &page.groups {
    ///         println!("{} {:?}: {} jobs", group.id, group.status, group.jobs);
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
    /// [`ClientError::InvalidArgument`] for a limit outside 1..=1000;
    /// [`ClientError::Database`].
    pub async fn groups(&self, query: &GroupQuery) -> Result<GroupPage, ClientError> {
        if query.limit == 0 || query.limit > MAX_GROUP_PAGE {
            return Err(ClientError::InvalidArgument(
                "a page holds 1 to 1,000 groups",
            ));
        }
        let rows = self
            .store()
            .groups_list(
                self.pool(),
                query.after.as_deref(),
                i32::try_from(query.limit).unwrap_or(100),
            )
            .await
            .map_err(DatabaseError::new)?;
        let full = rows.len() == query.limit as usize;
        let groups = rows
            .into_iter()
            .map(from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let next = if full {
            groups.last().map(|group| group.id.clone())
        } else {
            None
        };
        Ok(GroupPage { groups, next })
    }

    /// One group, or `None` if it holds no job (a group exists only while it has jobs).
    /// Its jobs: [`Client::jobs`] with [`JobQuery::group`](crate::JobQuery::group).
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for an id that is empty, over 1,024 bytes or holds a
    /// NUL character; [`ClientError::Database`].
    pub async fn group(&self, id: &str) -> Result<Option<GroupInfo>, ClientError> {
        validate_group(id).map_err(|_| {
            ClientError::InvalidArgument("a group id is 1 to 1,024 bytes, without NUL characters")
        })?;
        let row = self
            .store()
            .group_get(self.pool(), id)
            .await
            .map_err(DatabaseError::new)?;
        row.map(from_row).transpose()
    }

    /// The top `limit` groups (1 to [`MAX_TOP_GROUPS`]) by `rank`: those that have waited
    /// longest, or the largest. One round trip of bounded work, whatever the queue holds:
    /// at most `limit` claim-index entries per queue and priority level, or `2 × limit`
    /// candidates from the statistics, each looked up as [`Client::group`] does.
    ///
    /// ```no_run
    /// # use harel_jobs::{GroupRank, Client};
    /// # async fn example(client: Client) -> Result<(), harel_jobs::ClientError> {
    /// for group in client.top_groups(GroupRank::LongestWaiting, 10).await?.groups {
    ///     println!("{} ready since {}", group.id, group.available_at);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a limit outside 1..=100;
    /// [`ClientError::Database`].
    pub async fn top_groups(&self, rank: GroupRank, limit: u32) -> Result<TopGroups, ClientError> {
        if limit == 0 || limit > MAX_TOP_GROUPS {
            return Err(ClientError::InvalidArgument("rank 1 to 100 groups"));
        }
        let rows = self
            .store()
            .groups_top(self.pool(), rank.as_sql(), limit as i32)
            .await
            .map_err(DatabaseError::new)?;
        let statistics_at = rows.iter().find_map(|row| row.11);
        let groups = rows
            .into_iter()
            .map(|row| {
                let estimate = row.10;
                let group = (
                    row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7, row.8, row.9,
                );
                from_row(group).map(|group| GroupInfo {
                    jobs_estimate: estimate.map(|n| u64::try_from(n).unwrap_or(0)),
                    ..group
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TopGroups {
            groups,
            statistics_at,
        })
    }
}
