//! The schema's figures at one moment ([`Client::stats`], [`Stats::fetch`]), for
//! dashboards, monitoring, tests and examples. What they say (which are exact) is told by
//! the data layer, next to the statement that reads them; [`Count`] is the crate's
//! vocabulary.

use sqlx::PgExecutor;

use super::Client;
use crate::error::{ClientError, DatabaseError};
use crate::schema::Schema;
use crate::store::{Figures, PreparedStatements, Store};
use crate::vocabulary::{Count, STATS_WINDOW_PAGES};

/// The contents of a schema's queues at one moment, read cheaply enough to poll every few seconds.
///
/// # What is exact, and when
///
/// [`fetch`](Self::fetch) reads at most the first and the last
/// [`WINDOW_PAGES`](Self::WINDOW_PAGES) (64) pages of each of the queue's three tables
/// (`transport_messages`, `transport_groups`, which holds each group's first message inline,
/// and `dead_letters`), in one statement, whatever the
/// tables hold: dead row versions kept by a long-held snapshot make a table's file larger,
/// never the read (with one exception, for [`is_idle`](Self::is_idle): see there). So:
///
/// - A table whose file is at most `2 × WINDOW_PAGES` pages (1 MiB with PostgreSQL's 8 KiB
///   pages: about 10,000 jobs or groups with small payloads; fewer with large payloads or
///   error texts, or when dead row versions fill the pages) is read whole, and its figures
///   are [`Count::Exact`].
/// - For a larger table, [`jobs`](Self::jobs), [`groups`](Self::groups) and
///   [`dead_letters`](Self::dead_letters) are [`Count::Estimated`]: PostgreSQL's running count
///   of the table's live rows (`pg_stat_user_tables.n_live_tup`: inserts minus deletes, reset
///   to their own estimate by `VACUUM` and `ANALYZE`). It trails the truth by the statistics'
///   flush delay (each session sends its counts at most once a second; an idle one within
///   10 s) and is lost when the statistics are reset or the server crashes; it is never
///   reported below the rows counted in the pages read.
/// - [`claimable_groups`](Self::claimable_groups) of a larger groups table is
///   [`Count::AtLeast`]: the claimable groups found in the pages read.
/// - [`is_idle`](Self::is_idle) is always exact (see there).
///
/// All figures are read in one snapshot, so exact ones agree with each other. The bound
/// relies on TID range scans (PostgreSQL 14 and later); an older server gives the same
/// figures at the cost of reading each table whole, twice.
///
/// The statement needs only the operator's grants of the guide's
/// ["Database roles"](https://github.com/harel-jobs/harel-jobs/blob/main/docs/guide/operating.md#database-roles)
/// (`SELECT` on the three tables); the file sizes and statistics it reads are open to every
/// role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Jobs in the queue (waiting, running, or parked for a retry).
    pub jobs: Count,
    /// Groups with jobs.
    pub groups: Count,
    /// Groups a worker could claim right now (the others are leased, or parked until a
    /// retry, a delay or a snooze is over).
    pub claimable_groups: Count,
    /// Dead letters.
    pub dead_letters: Count,
    idle: bool,
}

impl Stats {
    /// How many pages [`fetch`](Self::fetch) reads at each end of each table: 64 (512 KiB
    /// with 8 KiB pages). A table of at most twice that is counted exactly.
    pub const WINDOW_PAGES: u32 = STATS_WINDOW_PAGES;

    /// Reads the figures of the queues in `schema` through `executor` (any connection or
    /// transaction; [`Client::stats`] reads them on the client's pool), in one round trip,
    /// reading at most `2 × WINDOW_PAGES` pages of each table (see the type's documentation
    /// for what is exact and when), plus, for [`is_idle`](Self::is_idle) only, what it
    /// takes to find one job in a large table whose pages read held none.
    ///
    /// Nothing is prepared (it has no parameters: the simple query protocol), so it works
    /// as it is behind a transaction pooler such as PgBouncer.
    ///
    /// # Errors
    /// The database's error; a role without `SELECT` on the tables gets a permission error
    /// ([`DatabaseError::is_permission_denied`]).
    pub async fn fetch<'e, E: PgExecutor<'e>>(
        executor: E,
        schema: &Schema,
    ) -> Result<Self, DatabaseError> {
        // the statement has no parameters and goes by the simple protocol whatever the
        // store's policy (see Store::stats_read)
        Self::read(
            &Store::new(schema.clone(), PreparedStatements::default()),
            executor,
        )
        .await
    }

    /// [`fetch`](Self::fetch) through `store`, which renders the statement once for all its
    /// calls.
    async fn read<'e, E: PgExecutor<'e>>(
        store: &Store,
        executor: E,
    ) -> Result<Self, DatabaseError> {
        let row = store
            .stats_read(executor)
            .await
            .map_err(DatabaseError::new)?;
        Ok(Self::from(row.figures()))
    }

    /// Whether no job is waiting, running or parked: always exact, as of the statement's
    /// snapshot. Free when the pages [`fetch`](Self::fetch) read hold a job or are the whole
    /// table; otherwise `fetch` looks for one job (`EXISTS`), which reads until it finds one:
    /// in a large table holding no job at all (drained while a long-held snapshot keeps
    /// every deleted version), that is every version.
    pub fn is_idle(&self) -> bool {
        self.idle
    }
}

impl Stats {
    /// The figures of two schemas together ([`Shards::stats`](crate::Shards::stats)): each
    /// count summed ([`Count`]'s sum is as sure as the least sure of the two), idle if both
    /// are.
    pub(crate) fn plus(self, other: Stats) -> Stats {
        Stats {
            jobs: self.jobs.plus(other.jobs),
            groups: self.groups.plus(other.groups),
            claimable_groups: self.claimable_groups.plus(other.claimable_groups),
            dead_letters: self.dead_letters.plus(other.dead_letters),
            idle: self.idle && other.idle,
        }
    }
}

impl From<Figures> for Stats {
    fn from(figures: Figures) -> Self {
        Self {
            jobs: figures.jobs,
            groups: figures.groups,
            claimable_groups: figures.claimable_groups,
            dead_letters: figures.dead_letters,
            idle: figures.idle,
        }
    }
}

impl Client {
    /// The schema's depth and state counts ([`Stats`]), read on the client's pool as
    /// [`Stats::fetch`] does.
    ///
    /// # Errors
    /// [`ClientError::Database`] if they cannot be read.
    pub async fn stats(&self) -> Result<Stats, ClientError> {
        Ok(Stats::read(self.store(), self.pool()).await?)
    }
}
