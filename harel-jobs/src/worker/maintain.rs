//! Maintenance: the queue's housekeeping, and vacuum where PostgreSQL's autovacuum is off.
//!
//! - **Housekeeping**, about once a second: `harel_maintain` sweeps the claim floors (a
//!   group committed below its level's floor is brought back into the claims' view, see
//!   `sql/functions/api/harel_maintain.sql`), prunes old settle receipts and deletes the
//!   durable steps of jobs that are gone (1,000 step rows a call). Its cost grows
//!   with the dead rows an old snapshot keeps, so the pause after each call is fifty times
//!   the call's own duration, between 1 s and 5 minutes. Any number of workers may call it; one
//!   does the work at a time.
//! - **The dependents left to housekeeping** (ADR 0037): a settle resolves at most a
//!   bounded number of its jobs' dependents, and none whose group another transaction
//!   holds; the rest wait in `dependency_backlog`. About once a second, and again after a
//!   short pause while rows are left, `harel_resolve_backlog` resolves them a page at a
//!   time, for at most `BACKLOG_SLICE` per turn. Any number of workers may do it at once.
//! - **Vacuum**: every job inserts, updates and deletes rows, so the queue tables fill with
//!   dead row versions. The migration tunes autovacuum on these tables to run early and
//!   often; but where autovacuum is off for the whole server, nothing would clean them. Then
//!   this task does: every few seconds it reads the tables' dead-row counts and, past a
//!   threshold, runs `VACUUM (SKIP_LOCKED)` on them, on a connection of its own: a table
//!   another worker (or autovacuum) is vacuuming is locked, and skipped, so the vacuum is
//!   its own election. (It used to be elected by an advisory lock, a key any login of the
//!   server could take and hold.) While an old snapshot keeps the dead rows, a
//!   `VACUUM` removes nothing and still reads the whole (growing) tables: the task then waits
//!   longer after each such run (see [`VacuumPace`]), and tries again early once the oldest
//!   running transaction it can see has moved on.
//!
//! Behind a transaction pooler (`WorkerBuilder::behind_transaction_pooler`) no session
//! state may be kept: the reads run in a transaction of their own with unnamed statements.
//!
//! Each database call, the `VACUUM` included, is bounded by the database timeout (a
//! `VACUUM` abandoned by the worker still runs to its end on the server), and abandoned when
//! the pool stops.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::connection::{OwnConnection, bounded, on_pooled};
use super::task::{TaskResult, WorkerTask};
use super::{Shared, report};
use crate::error::DatabaseError;
use crate::store::VACUUMED_TABLES;
use sqlx::PgConnection;

/// How often the dead-row counts are read.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// A table is vacuumed when its dead rows reach this many…
const MIN_DEAD_ROWS: i64 = 2_000;
/// …and this fraction of its live rows.
const DEAD_FRACTION: f64 = 0.2;
/// After a `VACUUM` that removed most dead rows, the next one waits at least this many times
/// its duration (so vacuum takes at most a fifth of one core)…
const VACUUM_COST_FACTOR: u32 = 4;
/// …after one that removed little (an old snapshot keeps the rows), this many times, and at
/// least `CHECK_EVERY` doubled for each such run in a row, up to `VACUUM_BACKOFF_MAX`.
const VACUUM_FUTILE_COST_FACTOR: u32 = 20;
/// How long a `VACUUM` may take before the worker abandons it (the server finishes it).
const VACUUM_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest wait after a run of futile vacuums (unless the horizon moves first).
const VACUUM_BACKOFF_MAX: Duration = Duration::from_secs(60);
/// The shortest and longest pause between two housekeeping calls…
const HOUSEKEEPING_EVERY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(300));
/// …which is otherwise this many times the last call's duration.
const HOUSEKEEPING_COST_FACTOR: u32 = 50;
/// How often the backlog of dependents is looked at while it is empty…
const BACKLOG_EVERY: Duration = Duration::from_secs(1);
/// …how long one turn resolves pages of it, at most…
const BACKLOG_SLICE: Duration = Duration::from_millis(200);
/// …and the pause before the next turn while rows are left.
const BACKLOG_PAUSE: Duration = Duration::from_millis(20);
/// The dependency rows one page resolves (one transaction; `TestWorker`'s too).
pub(super) const BACKLOG_PAGE: i32 = 1_000;

/// Runs until `stop` fires.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) -> TaskResult {
    let schema = shared.config.schema.clone();
    let limit = shared.config.database_timeout;
    let mut next_housekeeping = Some(Instant::now() + HOUSEKEEPING_EVERY.0);
    let mut next_backlog = Some(Instant::now() + BACKLOG_EVERY);
    let mut next_vacuum_check = shared
        .config
        .maintenance
        .then(|| Instant::now() + CHECK_EVERY);
    let mut pace = VacuumPace::default();
    let report_every = shared.config.report_interval;
    let mut next_report = Some(Instant::now() + report_every.min(HOUSEKEEPING_EVERY.0));
    loop {
        shared.faults.check(WorkerTask::Maintenance)?;
        let Some(wake_at) = next_housekeeping
            .into_iter()
            .chain(next_backlog)
            .chain(next_vacuum_check)
            .chain(next_report)
            .min()
        else {
            return Ok(()); // nothing left to do (no right to any)
        };
        tokio::select! {
            () = stop.cancelled() => {
                if next_report.is_some() {
                    // the last report: this pool stopped (best effort, briefly)
                    let _ = report::report(&shared, true, report::LAST_REPORT_WITHIN).await;
                }
                return Ok(());
            }
            () = tokio::time::sleep_until(wake_at) => {}
        }

        if next_report.is_some_and(|at| at <= Instant::now()) {
            let reported = tokio::select! {
                () = stop.cancelled() => continue,
                reported = report::report(&shared, false, limit) => reported,
            };
            next_report = match reported {
                Err(error) if error.is_permission_denied() => {
                    tracing::warn!(
                        schema = schema.name(),
                        error = %error,
                        "this role may not report the pool to operators (harel_worker_report): \
                         grant it EXECUTE to see the pool in Client::workers and the dashboard"
                    );
                    None
                }
                Err(error) => {
                    tracing::debug!(error = %error, "reporting the pool failed");
                    Some(Instant::now() + report_every)
                }
                Ok(()) => Some(Instant::now() + report_every),
            };
        }

        if next_housekeeping.is_some_and(|at| at <= Instant::now()) {
            let started = Instant::now();
            let swept = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                swept = bounded(limit, housekeeping(&shared)) => swept,
            };
            let took = started.elapsed();
            next_housekeeping = match swept {
                Err(error) if error.is_permission_denied() => {
                    tracing::warn!(
                        schema = schema.name(),
                        error = %error,
                        "this role may not run the queue's housekeeping (harel_maintain): grant it \
                         EXECUTE; unless another worker runs it, a job whose transaction \
                         commits long after its enqueue waits until a NOTIFY points to it"
                    );
                    None
                }
                result => {
                    match result {
                        Ok((lowered, pruned)) if lowered > 0 || pruned > 0 => tracing::debug!(
                            floors_lowered = lowered,
                            receipts_pruned = pruned,
                            took_ms = took.as_millis() as u64,
                            "queue housekeeping"
                        ),
                        Ok(_) => {}
                        Err(error) => {
                            tracing::debug!(error = %error, "queue housekeeping failed");
                        }
                    }
                    let pause = (took * HOUSEKEEPING_COST_FACTOR)
                        .clamp(HOUSEKEEPING_EVERY.0, HOUSEKEEPING_EVERY.1);
                    Some(Instant::now() + pause)
                }
            };
        }

        if next_backlog.is_some_and(|at| at <= Instant::now()) {
            let resolved = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                resolved = backlog(&shared) => resolved,
            };
            next_backlog = match resolved {
                Err(error) if error.is_permission_denied() => {
                    tracing::warn!(
                        schema = schema.name(),
                        error = %error,
                        "this role may not resolve the dependents left to housekeeping \
                         (harel_resolve_backlog): grant it EXECUTE; until then they are \
                         released a page a second by harel_maintain"
                    );
                    None
                }
                Err(error) => {
                    tracing::debug!(error = %error, "resolving the backlog of dependents failed");
                    Some(Instant::now() + BACKLOG_EVERY)
                }
                Ok(true) => Some(Instant::now() + BACKLOG_PAUSE),
                Ok(false) => Some(Instant::now() + BACKLOG_EVERY),
            };
        }

        if next_vacuum_check.is_none_or(|at| at > Instant::now()) {
            continue;
        }
        next_vacuum_check = Some(Instant::now() + CHECK_EVERY);
        let checked = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            checked = bounded(limit, check(&shared)) => checked,
        };
        match checked {
            Ok(Due::Nothing) => {}
            Ok(Due::AutovacuumOn) => {
                tracing::debug!("autovacuum is on: it maintains the queue tables");
                next_vacuum_check = None;
            }
            Ok(Due::Tables { tables, dead, xmin }) if pace.allows(Instant::now(), xmin) => {
                let started = Instant::now();
                let vacuumed = tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    vacuumed = vacuum(&shared, &tables) => vacuumed,
                };
                match vacuumed {
                    Ok(true) => {
                        let took = started.elapsed();
                        let after = bounded(limit, dead_rows(&shared, &tables)).await;
                        match after {
                            Ok((dead_after, xmin_after)) => {
                                pace.ran(Instant::now(), took, dead, dead_after, xmin_after);
                                tracing::debug!(
                                    schema = schema.name(),
                                    ?tables,
                                    dead_before = dead,
                                    dead_after,
                                    took_ms = took.as_millis() as u64,
                                    "vacuumed the queue tables"
                                );
                            }
                            Err(error) => {
                                pace.ran(Instant::now(), took, dead, dead, xmin);
                                tracing::debug!(error = %error, "reading the queue tables' statistics failed");
                            }
                        }
                    }
                    Ok(false) => {} // another worker is at it
                    Err(error) if error.is_permission_denied() => {
                        tracing::warn!(
                            schema = schema.name(),
                            error = %error,
                            "autovacuum is off and this role may not vacuum the queue tables: \
                             vacuum them regularly (or turn autovacuum on), or claims slow down"
                        );
                        next_vacuum_check = None;
                    }
                    Err(error) => {
                        // paced as a futile run: it may have been abandoned mid-way
                        pace.ran(Instant::now(), started.elapsed(), dead, dead, xmin);
                        tracing::debug!(error = %error, "vacuuming the queue tables failed");
                    }
                }
            }
            Ok(Due::Tables { .. }) => {} // paced: see VacuumPace
            Err(error) => {
                tracing::debug!(error = %error, "reading the queue tables' statistics failed");
            }
        }
    }
}

/// One call of `harel_maintain`: the claim floors lowered, the receipts pruned.
async fn housekeeping<S>(shared: &Shared<S>) -> Result<(i32, i64), DatabaseError> {
    on_pooled(
        &shared.pool,
        shared.config.transaction_pooler,
        async |connection: &mut PgConnection| Ok(shared.store.maintenance_run(connection).await?),
    )
    .await
}

/// Pages of `harel_resolve_backlog` for at most [`BACKLOG_SLICE`]. Returns whether rows
/// are left that this turn could have worked on (not when every parent left is held by
/// another worker's call).
async fn backlog<S>(shared: &Shared<S>) -> Result<bool, DatabaseError> {
    let started = Instant::now();
    loop {
        let (parents, more) = bounded::<_, DatabaseError>(
            shared.config.database_timeout,
            on_pooled(
                &shared.pool,
                shared.config.transaction_pooler,
                async |connection: &mut PgConnection| {
                    Ok(shared
                        .store
                        .dependents_backlog_resolve(connection, BACKLOG_PAGE)
                        .await?)
                },
            ),
        )
        .await?;
        if parents == 0 || !more {
            return Ok(false);
        }
        if started.elapsed() >= BACKLOG_SLICE {
            return Ok(true);
        }
    }
}

/// What a check found.
#[derive(Debug)]
enum Due {
    Nothing,
    AutovacuumOn,
    /// Tables past the threshold, their dead rows in all, and the oldest running
    /// transaction this session sees.
    Tables {
        tables: Vec<String>,
        dead: i64,
        xmin: i64,
    },
}

/// When the next `VACUUM` may run. A `VACUUM` reads every page not known to be all-visible,
/// which under an old snapshot is the whole table, and removes nothing that snapshot may
/// still see: run back to back, such vacuums took a core of a 2-core machine and slowed
/// every enqueue and claim (docs/adr/0021-maintenance-vacuum.md). So each run buys a wait
/// in proportion to its duration, a much longer one when it was futile; a futile streak ends
/// early when the oldest transaction we see (`pg_snapshot_xmin`) has moved on, since the
/// snapshot that kept the rows may be gone. (A session holding only a snapshot, without a
/// transaction id, does not show there; for it the backoff alone applies.)
#[derive(Debug, Default)]
struct VacuumPace {
    /// No vacuum before this, unless the horizon moved (`horizon_moved_after`).
    not_before: Option<Instant>,
    /// After a futile run: the earliest time, and the transaction horizon then.
    horizon_moved_after: Option<(Instant, i64)>,
    /// Futile runs in a row.
    futile_streak: u32,
}

impl VacuumPace {
    /// Whether a vacuum may run now, the oldest running transaction being `xmin`.
    fn allows(&self, now: Instant, xmin: i64) -> bool {
        let waited = self.not_before.is_none_or(|at| at <= now);
        let horizon_moved = self
            .horizon_moved_after
            .is_some_and(|(at, then)| at <= now && xmin > then);
        waited || horizon_moved
    }

    /// Records a run that took `took` and left `dead_after` of `dead_before` dead rows.
    fn ran(&mut self, now: Instant, took: Duration, dead_before: i64, dead_after: i64, xmin: i64) {
        let futile = dead_after.saturating_mul(2) >= dead_before;
        if futile {
            self.futile_streak = self.futile_streak.saturating_add(1);
            let backoff = CHECK_EVERY.saturating_mul(1 << self.futile_streak.min(6));
            let wait = backoff
                .max(took.saturating_mul(VACUUM_FUTILE_COST_FACTOR))
                .min(VACUUM_BACKOFF_MAX.max(took.saturating_mul(VACUUM_COST_FACTOR)));
            self.not_before = Some(now + wait);
            self.horizon_moved_after = Some((now + took.saturating_mul(VACUUM_COST_FACTOR), xmin));
        } else {
            self.futile_streak = 0;
            self.not_before = Some(now + took.saturating_mul(VACUUM_COST_FACTOR));
            self.horizon_moved_after = None;
        }
    }
}

/// Reads whether autovacuum is on, and which queue tables have enough dead rows.
async fn check<S>(shared: &Shared<S>) -> Result<Due, DatabaseError> {
    let (autovacuum, due, dead, xmin) = on_pooled(
        &shared.pool,
        shared.config.transaction_pooler,
        async |connection: &mut PgConnection| {
            Ok::<_, DatabaseError>(
                shared
                    .store
                    .tables_vacuum_check(connection, VACUUMED_TABLES, MIN_DEAD_ROWS, DEAD_FRACTION)
                    .await?,
            )
        },
    )
    .await?;
    Ok(match (autovacuum.as_str(), due) {
        ("on", _) => Due::AutovacuumOn,
        (_, Some(tables)) if !tables.is_empty() => Due::Tables {
            tables,
            dead: dead.unwrap_or(0),
            xmin,
        },
        _ => Due::Nothing,
    })
}

/// The dead rows left in `tables`, and the oldest running transaction this session sees.
async fn dead_rows<S>(shared: &Shared<S>, tables: &[String]) -> Result<(i64, i64), DatabaseError> {
    on_pooled(
        &shared.pool,
        shared.config.transaction_pooler,
        async |connection: &mut PgConnection| {
            Ok(shared.store.tables_dead_rows(connection, tables).await?)
        },
    )
    .await
}

/// Vacuums `tables`, skipping any that another session is vacuuming (`SKIP_LOCKED`: the
/// election among workers, which no login outside the queue's roles can take part in).
/// Returns whether it ran. Uses a connection of its own, closed afterwards: `VACUUM` cannot
/// run inside a transaction.
async fn vacuum<S>(shared: &Shared<S>, tables: &[String]) -> Result<bool, DatabaseError> {
    let limit = shared.config.database_timeout;
    let mut own = OwnConnection::never_borrowed(&shared.pool);
    let connection = bounded(limit, own.get()).await?;
    // a VACUUM of bloated tables takes seconds: abandoning it at the database timeout made
    // the next check start another one at once (it still ran to its end on the server)
    let result = bounded(
        limit.max(VACUUM_TIMEOUT),
        shared.store.tables_vacuum(connection, tables),
    )
    .await;
    if result.is_err() {
        // maybe abandoned mid-call: drop it rather than send on it
        own.reset();
    }
    own.close(limit).await;
    result?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn an_effective_vacuum_buys_a_wait_in_proportion_to_its_duration() {
        let t0 = Instant::now();
        let mut pace = VacuumPace::default();
        assert!(pace.allows(t0, 100), "the first vacuum runs at once");
        pace.ran(t0, 2 * SECOND, 10_000, 100, 100);
        assert!(!pace.allows(t0 + 7 * SECOND, 100));
        assert!(pace.allows(t0 + 8 * SECOND, 100));
    }

    #[test]
    fn futile_vacuums_back_off_until_the_horizon_moves() {
        let t0 = Instant::now();
        let mut pace = VacuumPace::default();
        // an old snapshot (xmin 100) keeps nearly every dead row
        pace.ran(t0, SECOND / 10, 10_000, 9_500, 100);
        assert!(
            !pace.allows(t0 + 9 * SECOND, 100),
            "backed off: 5 s doubled"
        );
        assert!(pace.allows(t0 + 10 * SECOND, 100));
        pace.ran(t0 + 10 * SECOND, SECOND / 10, 20_000, 19_800, 100);
        assert!(!pace.allows(t0 + 29 * SECOND, 100), "doubled again");
        assert!(pace.allows(t0 + 30 * SECOND, 100));
        for _ in 0..10 {
            pace.ran(t0, SECOND / 10, 20_000, 19_800, 100);
        }
        assert!(
            pace.allows(t0 + VACUUM_BACKOFF_MAX, 100),
            "never past the cap"
        );
        // the snapshot ended: the oldest transaction moved on, and the wait ends early
        assert!(pace.allows(t0 + SECOND, 101));
    }

    #[test]
    fn a_long_futile_vacuum_waits_twenty_times_its_duration() {
        let t0 = Instant::now();
        let mut pace = VacuumPace::default();
        pace.ran(t0, 2 * SECOND, 10_000, 9_999, 100);
        assert!(!pace.allows(t0 + 39 * SECOND, 100));
        assert!(pace.allows(t0 + 40 * SECOND, 100));
        assert!(
            !pace.allows(t0 + 7 * SECOND, 101),
            "not before four times its duration"
        );
        assert!(pace.allows(t0 + 8 * SECOND, 101));
    }
}
