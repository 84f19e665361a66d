//! Maintenance: keeps the queue tables vacuumed when PostgreSQL's autovacuum does not.
//!
//! Every job inserts, updates and deletes rows, so the queue tables fill with dead row
//! versions, and a claim's index scan would wade through more of them as hours pass. The
//! migration tunes autovacuum on these tables to run early and often; but where autovacuum is
//! off for the whole server, nothing would clean them. Then this service does: every few
//! seconds it reads the tables' dead-row counts and, past a threshold, runs `VACUUM` on them.
//! One worker per schema does it at a time (an advisory lock), on a connection of its own.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, ConnectOptions as _, Connection as _, PgConnection};

use super::Shared;
use crate::error::DatabaseError;

/// How often the dead-row counts are read.
const CHECK_EVERY: Duration = Duration::from_secs(5);
/// A table is vacuumed when its dead rows reach this many…
const MIN_DEAD_ROWS: i64 = 2_000;
/// …and this fraction of its live rows.
const DEAD_FRACTION: f64 = 0.2;

/// Runs until `stop` fires.
pub(crate) async fn run<S: Send + Sync + 'static>(
    shared: Arc<Shared<S>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let schema = shared.config.schema.clone();
    let mut connection: Option<PgConnection> = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        if connection.is_none() {
            connection = shared.pool.connect_options().connect().await.ok();
        }
        let Some(conn) = connection.as_mut() else {
            continue;
        };
        match vacuum_if_needed(conn, &schema).await {
            Ok(Check::Vacuumed(tables)) => {
                tracing::debug!(schema = schema.name(), ?tables, "vacuumed the queue tables");
            }
            Ok(Check::NotNeeded | Check::OtherWorker) => {}
            Ok(Check::AutovacuumOn) => {
                tracing::debug!("autovacuum is on: it maintains the queue tables");
                break;
            }
            Err(error) if error.is_permission_denied() => {
                tracing::warn!(
                    schema = schema.name(),
                    error = %error,
                    "autovacuum is off and this role may not vacuum the queue tables: \
                     vacuum them regularly (or turn autovacuum on), or claims slow down over time"
                );
                break;
            }
            Err(error) => {
                connection = None;
                tracing::debug!(error = %error, "queue maintenance failed; trying again later");
            }
        }
    }
    if let Some(connection) = connection {
        let _ = connection.close().await;
    }
}

/// What one check did.
#[derive(Debug)]
enum Check {
    Vacuumed(Vec<String>),
    NotNeeded,
    OtherWorker,
    AutovacuumOn,
}

async fn vacuum_if_needed(
    connection: &mut PgConnection,
    schema: &crate::Schema,
) -> Result<Check, DatabaseError> {
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&mut *connection)
        .await?;
    if autovacuum == "on" {
        return Ok(Check::AutovacuumOn);
    }
    let due: Vec<String> = sqlx::query_scalar(
        "SELECT relname::text FROM pg_stat_user_tables
          WHERE schemaname = $1
            AND relname IN ('transport_groups', 'transport_messages')
            AND n_dead_tup >= $2
            AND n_dead_tup >= $3 * n_live_tup",
    )
    .bind(schema.name())
    .bind(MIN_DEAD_ROWS)
    .bind(DEAD_FRACTION)
    .fetch_all(&mut *connection)
    .await?;
    if due.is_empty() {
        return Ok(Check::NotNeeded);
    }
    let key = format!("harel-jobs vacuum {}", schema.name());
    let elected: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, 0))")
        .bind(&key)
        .fetch_one(&mut *connection)
        .await?;
    if !elected {
        return Ok(Check::OtherWorker);
    }
    let tables: Vec<String> = due
        .iter()
        .map(|table| format!("{}.\"{table}\"", schema.quoted()))
        .collect();
    // names come from our own validated schema and a fixed list of tables
    let vacuum = format!("VACUUM (SKIP_LOCKED) {}", tables.join(", "));
    let result = sqlx::raw_sql(AssertSqlSafe(vacuum))
        .execute(&mut *connection)
        .await;
    sqlx::query("SELECT pg_advisory_unlock(hashtextextended($1, 0))")
        .bind(&key)
        .execute(&mut *connection)
        .await?;
    result?;
    Ok(Check::Vacuumed(due))
}
