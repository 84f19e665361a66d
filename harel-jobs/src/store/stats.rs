//! The schema's figures: its tables' first and last pages counted, their sizes and their
//! statistics, in one statement of bounded work, and what they say ([`Figures`]: which
//! counts are exact depends on what the statement read, so it is told here, next to it).

use std::sync::LazyLock;

use sqlx::postgres::PgRow;
use sqlx::{PgExecutor, Row as _};

use super::{Statement, Store};
use crate::vocabulary::{Count, STATS_WINDOW_PAGES};

/// The figures of one table read by the statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableRow {
    /// The file's size in pages when it was read.
    pub pages: i64,
    /// Rows counted in the pages read.
    pub seen: i64,
    /// PostgreSQL's running count of the table's live rows (`n_live_tup`).
    pub live: i64,
}

impl TableRow {
    /// The `<name>_pages`, `<name>_seen` and `<name>_live` columns of the statement's row.
    fn read(row: &PgRow, name: &str) -> Result<Self, sqlx::Error> {
        Ok(Self {
            pages: row.try_get(format!("{name}_pages").as_str())?,
            seen: row.try_get(format!("{name}_seen").as_str())?,
            live: row.try_get(format!("{name}_live").as_str())?,
        })
    }
}

/// The statement's one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StatsRow {
    /// `transport_messages`.
    pub messages: TableRow,
    /// `transport_groups`.
    pub groups: TableRow,
    /// `dead_letters`.
    pub dead_letters: TableRow,
    /// The claimable groups among those counted.
    pub groups_claimable: i64,
    /// The groups counted that hold their first message inline.
    pub groups_inline: i64,
    /// Whether no job is waiting, running or parked (always exact).
    pub idle: bool,
}

/// What the statement's row says: each figure counted, estimated or a lower bound, as the
/// public `Stats` and the worker's depth gauges give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    /// Jobs (waiting, running, or parked for a retry).
    pub jobs: Count,
    /// Groups with jobs.
    pub groups: Count,
    /// Groups a worker could claim right now.
    pub claimable_groups: Count,
    /// Dead letters.
    pub dead_letters: Count,
    /// Whether no job is waiting, running or parked (always exact).
    pub idle: bool,
}

impl TableRow {
    /// Whether the pages read were the whole table.
    fn read_whole(&self) -> bool {
        self.pages <= 2 * i64::from(STATS_WINDOW_PAGES)
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
fn jobs(messages: &TableRow, groups: &TableRow, inline: i64) -> Count {
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

impl StatsRow {
    /// The figures the row gives.
    pub(crate) fn figures(&self) -> Figures {
        Figures {
            jobs: jobs(&self.messages, &self.groups, self.groups_inline),
            groups: self.groups.rows(),
            claimable_groups: self.groups.subset(self.groups_claimable),
            dead_letters: self.dead_letters.rows(),
            idle: self.idle,
        }
    }
}

/// A FROM item counting `aggregates` over the rows of `table` in its first and last
/// [`STATS_WINDOW_PAGES`] pages (two TID range scans, so pages in between are never read;
/// the tail's start comes from the `pages` CTE). `columns` are the columns the aggregates
/// need.
fn window(table: &str, columns: &str, aggregates: &str) -> String {
    let w = STATS_WINDOW_PAGES;
    format!(
        "(SELECT {aggregates} FROM (
             SELECT {columns} FROM @schema@.{table} WHERE ctid < (SELECT '({w},0)'::tid)
             UNION ALL
             SELECT {columns} FROM @schema@.{table}
              WHERE ctid >= (SELECT format('(%s,0)', greatest({w}, {table}_pages - {w}))::tid
                               FROM pages)
         ) AS window_rows)"
    )
}

/// The statement of [`Store::stats_read`], with `@schema@` to render (built once).
pub(super) fn statement() -> &'static str {
    static STATEMENT: LazyLock<String> = LazyLock::new(build);
    &STATEMENT
}

/// Builds the statement.
fn build() -> String {
    let whole = 2 * STATS_WINDOW_PAGES;
    let messages = window("transport_messages", "1", "count(*) AS seen");
    let groups = window(
        "transport_groups",
        "available_at, inline_seq",
        "count(*) AS seen, count(*) FILTER (WHERE available_at <= now()) AS claimable, \
         count(*) FILTER (WHERE inline_seq IS NOT NULL) AS inline",
    );
    let dead_letters = window("dead_letters", "1", "count(*) AS seen");
    format!(
        "WITH pages AS MATERIALIZED (
             SELECT pg_relation_size('@schema@.transport_messages'::regclass) / b
                        AS transport_messages_pages,
                    pg_relation_size('@schema@.transport_groups'::regclass) / b
                        AS transport_groups_pages,
                    pg_relation_size('@schema@.dead_letters'::regclass) / b
                        AS dead_letters_pages
               FROM (SELECT current_setting('block_size')::bigint AS b) AS block
         )
         SELECT p.transport_messages_pages AS messages_pages, m.seen AS messages_seen,
                pg_stat_get_live_tuples('@schema@.transport_messages'::regclass)
                    AS messages_live,
                p.transport_groups_pages AS groups_pages, g.seen AS groups_seen,
                pg_stat_get_live_tuples('@schema@.transport_groups'::regclass) AS groups_live,
                g.claimable AS groups_claimable, g.inline AS groups_inline,
                p.dead_letters_pages, d.seen AS dead_letters_seen,
                pg_stat_get_live_tuples('@schema@.dead_letters'::regclass) AS dead_letters_live,
                CASE WHEN m.seen > 0 OR g.inline > 0 THEN false
                     WHEN p.transport_messages_pages <= {whole}
                          AND p.transport_groups_pages <= {whole} THEN true
                     ELSE NOT EXISTS (SELECT FROM @schema@.transport_messages)
                          AND NOT EXISTS (SELECT FROM @schema@.transport_groups
                                           WHERE inline_seq IS NOT NULL)
                END AS idle
           FROM pages AS p, {messages} AS m, {groups} AS g, {dead_letters} AS d"
    )
}

impl Store {
    /// Reads the queue's figures in one round trip, reading at most `2 ×
    /// STATS_WINDOW_PAGES` pages of each table, plus, for `idle` only, what it takes to
    /// find one job in a large table whose pages read held none.
    ///
    /// Always by the simple query protocol, whatever the policy: it has no parameters, so
    /// it is one round trip with nothing prepared, which works through a transaction
    /// pooler too, in a transaction or not.
    pub(crate) async fn stats_read<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<StatsRow, sqlx::Error> {
        let row = sqlx::raw_sql(self.sql(Statement::StatsRead))
            .fetch_one(executor)
            .await?;
        Ok(StatsRow {
            messages: TableRow::read(&row, "messages")?,
            groups: TableRow::read(&row, "groups")?,
            dead_letters: TableRow::read(&row, "dead_letters")?,
            groups_claimable: row.try_get("groups_claimable")?,
            groups_inline: row.try_get("groups_inline")?,
            idle: row.try_get("idle")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_reads_each_table_through_tid_ranges_only() {
        let sql = statement();
        for table in ["transport_messages", "transport_groups", "dead_letters"] {
            let from = format!("FROM @schema@.{table}");
            // two windows each, plus is_idle's EXISTS on the tables that hold jobs
            let expected = if table == "dead_letters" { 2 } else { 3 };
            assert_eq!(sql.matches(&from).count(), expected, "{table}: {sql}");
        }
        assert_eq!(sql.matches("WHERE ctid <").count(), 3);
        assert_eq!(sql.matches("WHERE ctid >=").count(), 3);
    }

    #[test]
    fn a_table_read_whole_is_exact_and_a_larger_one_is_not() {
        let whole = 2 * i64::from(STATS_WINDOW_PAGES);
        let small = TableRow {
            pages: whole,
            seen: 7,
            live: 9,
        };
        assert_eq!(small.rows(), Count::Exact(7));
        assert_eq!(small.subset(2), Count::Exact(2));
        let large = TableRow {
            pages: whole + 1,
            seen: 7,
            live: 9,
        };
        assert_eq!(large.rows(), Count::Estimated(9));
        assert_eq!(large.subset(2), Count::AtLeast(2));
        // statistics that trail the truth never go below what was counted
        let stale = TableRow { live: 3, ..large };
        assert_eq!(stale.rows(), Count::Estimated(7));
    }
}
