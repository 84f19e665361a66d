//! Maintenance: the schema's housekeeping, the depth sampler's election, and the reads and
//! the `VACUUM` of the queue tables where autovacuum is off.

use sqlx::{AssertSqlSafe, PgConnection, PgExecutor};

use super::{Statement, Store};

pub(super) const RUN: &str =
    "SELECT floors_lowered, receipts_pruned FROM @schema@.harel_maintain()";

pub(super) const BACKLOG_RESOLVE: &str =
    "SELECT parents, more FROM @schema@.harel_resolve_backlog($1)";

pub(super) const ELECTION_TAKE: &str = "SELECT @schema@.harel_elect($1, $2, $3)";

pub(super) const VACUUM_CHECK: &str =
    "SELECT current_setting('autovacuum'), array_agg(relname::text),
            sum(n_dead_tup)::bigint,
            pg_snapshot_xmin(pg_current_snapshot())::text::bigint
       FROM pg_stat_user_tables
      WHERE schemaname = $1
        AND relname = ANY ($4)
        AND n_dead_tup >= $2
        AND n_dead_tup >= $3 * n_live_tup";

pub(super) const DEAD_ROWS: &str = "SELECT COALESCE(sum(n_dead_tup), 0)::bigint,
            pg_snapshot_xmin(pg_current_snapshot())::text::bigint
       FROM pg_stat_user_tables
      WHERE schemaname = $1 AND relname = ANY ($2)";

/// The tables every job churns: the queue's, and the outcome batches' receipts (one row
/// inserted, updated and deleted per batch). The only tables [`Store::tables_vacuum`]
/// vacuums.
pub(crate) const VACUUMED_TABLES: &[&str] =
    &["transport_groups", "transport_messages", "settle_receipts"];

/// What [`Store::tables_vacuum_check`] read: the server's `autovacuum` setting, the tables
/// past the threshold (`None`: none), their dead rows in all, and the oldest running
/// transaction this session sees.
pub(crate) type VacuumCheck = (String, Option<Vec<String>>, Option<i64>, i64);

impl Store {
    /// `harel_maintain`: sweeps the claim floors, prunes old settle receipts (and the rest
    /// its file lists, the durable steps of jobs that are gone among them). Returns
    /// the floors lowered and the receipts pruned.
    pub(crate) async fn maintenance_run<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
    ) -> Result<(i32, i64), sqlx::Error> {
        sqlx::query_as(self.sql(Statement::MaintenanceRun))
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_resolve_backlog`: resolves up to `rows` of the dependents the ends of their
    /// parents left to housekeeping. Returns the parents it worked on and whether rows are
    /// left.
    pub(crate) async fn dependents_backlog_resolve<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        rows: i32,
    ) -> Result<(i32, bool), sqlx::Error> {
        sqlx::query_as(self.sql(Statement::DependentsBacklogResolve))
            .bind(rows)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `harel_elect`: takes or renews the election `name` for `worker` for `hold_ms`
    /// (zero: gives it up), if nobody holds it or its holder's lease ran out. Returns
    /// whether `worker` holds it. (The depth sampler's, feature `metrics`.)
    #[cfg(feature = "metrics")]
    pub(crate) async fn election_take<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        name: &str,
        worker: uuid::Uuid,
        hold_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(self.sql(Statement::ElectionTake))
            .bind(name)
            .bind(worker)
            .bind(hold_ms)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// Reads whether autovacuum is on, and which of `tables` have at least `min_dead_rows`
    /// dead rows and `dead_fraction` of their live rows.
    pub(crate) async fn tables_vacuum_check<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        tables: &[&str],
        min_dead_rows: i64,
        dead_fraction: f64,
    ) -> Result<VacuumCheck, sqlx::Error> {
        sqlx::query_as(self.sql(Statement::TablesVacuumCheck))
            .bind(self.schema().name())
            .bind(min_dead_rows)
            .bind(dead_fraction)
            .bind(tables)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// The dead rows left in `tables`, and the oldest running transaction this session
    /// sees.
    pub(crate) async fn tables_dead_rows<'e, E: PgExecutor<'e>>(
        &self,
        executor: E,
        tables: &[String],
    ) -> Result<(i64, i64), sqlx::Error> {
        sqlx::query_as(self.sql(Statement::TablesDeadRows))
            .bind(self.schema().name())
            .bind(tables)
            .persistent(self.persistent())
            .fetch_one(executor)
            .await
    }

    /// `VACUUM (SKIP_LOCKED)` of those of `tables` that are [`VACUUMED_TABLES`], skipping
    /// any that another session is vacuuming (the election among workers, which no login
    /// outside the queue's roles can take part in).
    ///
    /// By the simple query protocol: `VACUUM` cannot run inside a transaction, nor as a
    /// prepared statement with parameters, so the statement is built here, of our fixed
    /// table names in our validated schema only. Run it on a connection of the caller's
    /// own, outside any transaction.
    pub(crate) async fn tables_vacuum(
        &self,
        connection: &mut PgConnection,
        tables: &[String],
    ) -> Result<(), sqlx::Error> {
        let names: Vec<String> = tables
            .iter()
            .filter(|table| VACUUMED_TABLES.contains(&table.as_str()))
            .map(|table| format!("{}.\"{table}\"", self.schema().quoted()))
            .collect();
        let statement = format!("VACUUM (SKIP_LOCKED) {}", names.join(", "));
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(connection)
            .await?;
        Ok(())
    }
}
