//! Maintenance: the queue's housekeeping, and vacuum where PostgreSQL's autovacuum is off.
//!
//! - **Housekeeping**, about once a second: `harel_maintain` sweeps the claim floors (a
//!   group committed below its level's floor is brought back into the claims' view, see
//!   `sql/functions/harel_maintain.sql`) and prunes old settle receipts. Its cost grows
//!   with the dead rows an old snapshot keeps, so the pause after each call is fifty times
//!   the call's own duration, between 1 s and 30 s. Any number of workers may call it; one
//!   does the work at a time.
//! - **Vacuum**: every job inserts, updates and deletes rows, so the queue tables fill with
//!   dead row versions. The migration tunes autovacuum on these tables to run early and
//!   often; but where autovacuum is off for the whole server, nothing would clean them. Then
//!   this task does: every few seconds it reads the tables' dead-row counts and, past a
//!   threshold, runs `VACUUM` on them. One worker per schema does it at a time (an advisory
//!   lock), on a connection of its own.
//!
//! Each database call, the `VACUUM` included, is bounded by the database timeout (a
//! `VACUUM` abandoned by the worker still runs to its end on the server), and abandoned when
//! the pool stops.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, PgPool};
use tokio::time::Instant;

use super::Shared;
use super::connection::{Checkout, OwnConnection, bounded};
use super::supervise::{TaskResult, WorkerTask};
use crate::error::DatabaseError;

/// How often the dead-row counts are read.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// A table is vacuumed when its dead rows reach this many…
const MIN_DEAD_ROWS: i64 = 2_000;
/// …and this fraction of its live rows.
const DEAD_FRACTION: f64 = 0.2;
/// The shortest and longest pause between two housekeeping calls…
const HOUSEKEEPING_EVERY: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));
/// …which is otherwise this many times the last call's duration.
const HOUSEKEEPING_COST_FACTOR: u32 = 50;

/// Runs until `stop` fires.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) -> TaskResult {
    let schema = shared.config.schema.clone();
    let limit = shared.config.database_timeout;
    let mut next_housekeeping = Some(Instant::now() + HOUSEKEEPING_EVERY.0);
    let mut next_vacuum_check = shared
        .config
        .maintenance
        .then(|| Instant::now() + CHECK_EVERY);
    loop {
        shared.faults.check(WorkerTask::Maintenance)?;
        let Some(wake_at) = next_housekeeping.into_iter().chain(next_vacuum_check).min() else {
            return Ok(()); // nothing left to do (no right to either)
        };
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            () = tokio::time::sleep_until(wake_at) => {}
        }

        if next_housekeeping.is_some_and(|at| at <= Instant::now()) {
            let started = Instant::now();
            let swept = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                swept = bounded(limit, housekeeping(&shared.pool, &schema)) => swept,
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

        if next_vacuum_check.is_none_or(|at| at > Instant::now()) {
            continue;
        }
        next_vacuum_check = Some(Instant::now() + CHECK_EVERY);
        let checked = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            checked = bounded(limit, check(&shared.pool, &schema)) => checked,
        };
        match checked {
            Ok(Due::Nothing) => {}
            Ok(Due::AutovacuumOn) => {
                tracing::debug!("autovacuum is on: it maintains the queue tables");
                next_vacuum_check = None;
            }
            Ok(Due::Tables(tables)) => match tokio::select! {
                () = stop.cancelled() => return Ok(()),
                vacuumed = vacuum(&shared, &schema, &tables) => vacuumed,
            } {
                Ok(true) => {
                    tracing::debug!(schema = schema.name(), ?tables, "vacuumed the queue tables");
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
                    tracing::debug!(error = %error, "vacuuming the queue tables failed");
                }
            },
            Err(error) => {
                tracing::debug!(error = %error, "reading the queue tables' statistics failed");
            }
        }
    }
}

/// One call of `harel_maintain`: the claim floors lowered, the receipts pruned.
async fn housekeeping(pool: &PgPool, schema: &crate::Schema) -> Result<(i32, i64), DatabaseError> {
    let mut pooled = Checkout::acquire(pool).await?;
    let done = sqlx::query_as(AssertSqlSafe(
        schema.render("SELECT floors_lowered, receipts_pruned FROM @schema@.harel_maintain()"),
    ))
    .fetch_one(pooled.connection())
    .await?;
    pooled.done();
    Ok(done)
}

/// What a check found.
#[derive(Debug)]
enum Due {
    Nothing,
    AutovacuumOn,
    Tables(Vec<String>),
}

/// Reads whether autovacuum is on, and which queue tables have enough dead rows.
async fn check(pool: &PgPool, schema: &crate::Schema) -> Result<Due, DatabaseError> {
    let mut pooled = Checkout::acquire(pool).await?;
    let (autovacuum, due): (String, Option<Vec<String>>) = sqlx::query_as(
        "SELECT current_setting('autovacuum'),
                (SELECT array_agg(relname::text) FROM pg_stat_user_tables
                  WHERE schemaname = $1
                    AND relname IN ('transport_groups', 'transport_messages')
                    AND n_dead_tup >= $2
                    AND n_dead_tup >= $3 * n_live_tup)",
    )
    .bind(schema.name())
    .bind(MIN_DEAD_ROWS)
    .bind(DEAD_FRACTION)
    .fetch_one(pooled.connection())
    .await?;
    pooled.done();
    Ok(match (autovacuum.as_str(), due) {
        ("on", _) => Due::AutovacuumOn,
        (_, Some(tables)) if !tables.is_empty() => Due::Tables(tables),
        _ => Due::Nothing,
    })
}

/// Vacuums `tables` unless another worker holds the schema's maintenance lock. Returns
/// whether it did. Uses a connection of its own, closed afterwards: the lock is a session
/// lock, and VACUUM cannot run inside a transaction.
async fn vacuum<S>(
    shared: &Shared<S>,
    schema: &crate::Schema,
    tables: &[String],
) -> Result<bool, DatabaseError> {
    let limit = shared.config.database_timeout;
    let mut own = OwnConnection::never_borrowed(&shared.pool);
    let connection = bounded(limit, own.get()).await?;
    let key = format!("harel-jobs vacuum {}", schema.name());
    let elect = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
        .bind(&key)
        .fetch_one(&mut *connection);
    let elected: bool = bounded(limit, elect).await?;
    if !elected {
        own.close(limit).await;
        return Ok(false);
    }
    // only our fixed table names, in our validated schema
    let names: Vec<String> = tables
        .iter()
        .filter(|t| matches!(t.as_str(), "transport_groups" | "transport_messages"))
        .map(|table| format!("{}.\"{table}\"", schema.quoted()))
        .collect();
    let statement = format!("VACUUM (SKIP_LOCKED) {}", names.join(", "));
    let result = bounded(
        limit,
        sqlx::raw_sql(AssertSqlSafe(statement)).execute(&mut *connection),
    )
    .await;
    if result.is_err() {
        // maybe abandoned mid-call: drop it rather than send on it
        own.reset();
    }
    // closing the session releases the advisory lock (dropping it too, once the server
    // notices)
    own.close(limit).await;
    result?;
    Ok(true)
}
