//! A look at the queue's state, for dashboards, monitoring, tests and examples.

use std::fmt;

use sqlx::PgExecutor;

use crate::error::DatabaseError;
use crate::schema::Schema;
use crate::store::{PreparedStatements, StatsRow, Store, TableRow};
use crate::vocabulary::STATS_WINDOW_PAGES;

/// One figure of [`QueueStats`]: counted, estimated, or a lower bound.
///
/// [`value`](Self::value) is the number in every case; match on the variant, or ask
/// [`is_exact`](Self::is_exact), to know how far to trust it. `Display` writes `12`, `~12`
/// (estimated) or `>=12` (at least).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Count {
    /// Counted: the number of rows, as of the snapshot of the statement that read them.
    Exact(i64),
    /// PostgreSQL's running estimate of the table's live rows (`n_live_tup`), never less
    /// than the rows [`QueueStats::fetch`] counted in the pages it read.
    Estimated(i64),
    /// At least this many: counted in the pages [`QueueStats::fetch`] read, while the rest of
    /// the table was not read.
    AtLeast(i64),
}

impl Count {
    /// The number, whatever its kind.
    pub fn value(self) -> i64 {
        match self {
            Count::Exact(n) | Count::Estimated(n) | Count::AtLeast(n) => n,
        }
    }

    /// Whether it was counted exactly.
    pub fn is_exact(self) -> bool {
        matches!(self, Count::Exact(_))
    }

    /// The number if it was counted exactly, `None` otherwise.
    pub fn exact(self) -> Option<i64> {
        match self {
            Count::Exact(n) => Some(n),
            Count::Estimated(_) | Count::AtLeast(_) => None,
        }
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Count::Exact(n) => write!(f, "{n}"),
            Count::Estimated(n) => write!(f, "~{n}"),
            Count::AtLeast(n) => write!(f, ">={n}"),
        }
    }
}

/// The queue's contents at one moment, read cheaply enough to poll every few seconds.
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
/// The statement needs only the operator's grants of the README's "Database roles"
/// (`SELECT` on the three tables); the file sizes and statistics it reads are open to every
/// role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
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

/// The figures of one table read by the statement.
struct Table {
    /// The file's size in pages when it was read.
    pages: i64,
    /// Rows (or claimable groups) counted in the pages read.
    seen: i64,
    /// `n_live_tup`.
    live: i64,
}

impl From<TableRow> for Table {
    fn from(row: TableRow) -> Self {
        Self {
            pages: row.pages,
            seen: row.seen,
            live: row.live,
        }
    }
}

impl Table {
    /// Whether the pages read were the whole table.
    fn read_whole(&self) -> bool {
        self.pages <= 2 * i64::from(QueueStats::WINDOW_PAGES)
    }

    /// Exact if read whole, else the statistics' estimate, at least what was counted.
    fn rows(&self) -> Count {
        if self.read_whole() {
            Count::Exact(self.seen)
        } else {
            Count::Estimated(self.live.max(self.seen))
        }
    }

    /// `seen` of some subset of the rows: exact if read whole, else a lower bound.
    fn subset(&self, seen: i64) -> Count {
        if self.read_whole() {
            Count::Exact(seen)
        } else {
            Count::AtLeast(seen)
        }
    }
}

/// The jobs: the rows of `transport_messages`, and the group rows that hold their group's
/// first message inline (`inline` of them in the pages read). Exact when both tables were
/// read whole; otherwise estimated, the inline share of the groups' estimate taken as in the
/// pages read.
fn jobs(messages: &Table, groups: &Table, inline: i64) -> Count {
    if messages.read_whole() && groups.read_whole() {
        return Count::Exact(messages.seen + inline);
    }
    let inline = if groups.read_whole() {
        inline
    } else if groups.seen > 0 {
        let share = inline as f64 / groups.seen as f64;
        ((groups.live.max(groups.seen) as f64 * share).round() as i64).max(inline)
    } else {
        inline
    };
    Count::Estimated(messages.rows().value() + inline)
}

impl QueueStats {
    /// How many pages [`fetch`](Self::fetch) reads at each end of each table: 64 (512 KiB
    /// with 8 KiB pages). A table of at most twice that is counted exactly.
    pub const WINDOW_PAGES: u32 = STATS_WINDOW_PAGES;

    /// Reads the figures of the queue in `schema`, in one round trip, reading at most
    /// `2 × WINDOW_PAGES` pages of each table (see the type's documentation for what is
    /// exact and when), plus, for [`is_idle`](Self::is_idle) only, what it takes to find one
    /// job in a large table whose pages read held none.
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
    pub(crate) async fn read<'e, E: PgExecutor<'e>>(
        store: &Store,
        executor: E,
    ) -> Result<Self, DatabaseError> {
        Ok(Self::from_row(store.stats_read(executor).await?))
    }

    /// The figures as the statement's row gives them.
    fn from_row(row: StatsRow) -> Self {
        let messages = Table::from(row.messages);
        let groups = Table::from(row.groups);
        let dead_letters = Table::from(row.dead_letters);
        Self {
            jobs: jobs(&messages, &groups, row.groups_inline),
            groups: groups.rows(),
            claimable_groups: groups.subset(row.groups_claimable),
            dead_letters: dead_letters.rows(),
            idle: row.idle,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_say_what_they_are() {
        assert_eq!(Count::Exact(3).value(), 3);
        assert_eq!(Count::Estimated(4).value(), 4);
        assert_eq!(Count::AtLeast(5).value(), 5);
        assert!(Count::Exact(3).is_exact());
        assert!(!Count::Estimated(3).is_exact());
        assert_eq!(Count::AtLeast(5).exact(), None);
        assert_eq!(Count::Exact(0).exact(), Some(0));
        let shown: Vec<String> = [Count::Exact(1), Count::Estimated(2), Count::AtLeast(3)]
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(shown, ["1", "~2", ">=3"]);
    }

    #[test]
    fn a_table_read_whole_is_exact_and_a_larger_one_is_not() {
        let whole = 2 * i64::from(QueueStats::WINDOW_PAGES);
        let small = Table {
            pages: whole,
            seen: 7,
            live: 9,
        };
        assert_eq!(small.rows(), Count::Exact(7));
        assert_eq!(small.subset(2), Count::Exact(2));
        let large = Table {
            pages: whole + 1,
            seen: 7,
            live: 9,
        };
        assert_eq!(large.rows(), Count::Estimated(9));
        assert_eq!(large.subset(2), Count::AtLeast(2));
        // statistics that trail the truth never go below what was counted
        let stale = Table { live: 3, ..large };
        assert_eq!(stale.rows(), Count::Estimated(7));
    }
}
