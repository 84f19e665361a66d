//! Statements about a connection's session rather than the queue's schema: what its
//! commits wait for, how long it waits for a lock, and `LISTEN`. Free functions, not
//! [`Store`](super::Store) methods: they name nothing of a schema.
//!
//! They run by the simple query protocol (nothing prepared), except where a function says
//! otherwise and why.

#[cfg(feature = "testing")]
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::{AssertSqlSafe, PgConnection, PgPool, Postgres, Transaction};

/// What a session's (or a transaction's) commits wait for: `synchronous_commit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SynchronousCommit {
    /// `on`: for the WAL flush.
    On,
    /// `off`: for nothing (a crash may lose the last fraction of a second of commits).
    Off,
}

impl SynchronousCommit {
    /// The statement that sets it for the session.
    fn set(self) -> &'static str {
        match self {
            Self::On => "SET synchronous_commit = on",
            Self::Off => "SET synchronous_commit = off",
        }
    }

    /// The statement that sets it for the current transaction.
    fn set_local(self) -> &'static str {
        match self {
            Self::On => "SET LOCAL synchronous_commit = on",
            Self::Off => "SET LOCAL synchronous_commit = off",
        }
    }

    /// The statement that begins a transaction with it (one round trip).
    fn begin(self) -> &'static str {
        match self {
            Self::On => "BEGIN; SET LOCAL synchronous_commit = on",
            Self::Off => "BEGIN; SET LOCAL synchronous_commit = off",
        }
    }
}

/// Sets what the session's commits wait for.
pub(crate) async fn synchronous_commit_set(
    connection: &mut PgConnection,
    setting: SynchronousCommit,
) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(setting.set()).execute(connection).await?;
    Ok(())
}

/// Sets what the current transaction's commit waits for.
pub(crate) async fn synchronous_commit_set_local(
    transaction: &mut PgConnection,
    setting: SynchronousCommit,
) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(setting.set_local())
        .execute(transaction)
        .await?;
    Ok(())
}

/// The session's `synchronous_commit`, to put back later
/// ([`synchronous_commit_restore`]).
///
/// A statement sqlx prepares and caches: called only on a direct connection (the worker
/// keeps no session setting behind a transaction pooler), where that is safe.
pub(crate) async fn synchronous_commit_read(
    connection: &mut PgConnection,
) -> Result<String, sqlx::Error> {
    sqlx::query_scalar("SELECT current_setting('synchronous_commit')")
        .fetch_one(connection)
        .await
}

/// Puts the session's `synchronous_commit` back to `value` (as
/// [`synchronous_commit_read`] read it).
///
/// A statement sqlx prepares and caches (it has a parameter): called only on a direct
/// connection, as [`synchronous_commit_read`].
pub(crate) async fn synchronous_commit_restore(
    connection: &mut PgConnection,
    value: String,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('synchronous_commit', $1, false)")
        .bind(value)
        .execute(connection)
        .await?;
    Ok(())
}

/// Begins a transaction on `connection`; with `setting`, one whose commit waits for that,
/// set in the same round trip as the `BEGIN`.
pub(crate) async fn transaction_begin(
    connection: &mut PgConnection,
    setting: Option<SynchronousCommit>,
) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
    match setting {
        Some(setting) => sqlx::Connection::begin_with(connection, setting.begin()).await,
        None => sqlx::Connection::begin(connection).await,
    }
}

/// Sets how long the session's statements wait for a lock before they fail. (The test
/// helpers', feature `testing`.)
#[cfg(feature = "testing")]
pub(crate) async fn lock_timeout_set(
    connection: &mut PgConnection,
    timeout: Duration,
) -> Result<(), sqlx::Error> {
    let statement = format!("SET lock_timeout = '{}ms'", timeout.as_millis());
    sqlx::raw_sql(AssertSqlSafe(statement))
        .execute(connection)
        .await?;
    Ok(())
}

/// A listener on `channel`, on a connection of `pool` that it keeps for good (`LISTEN`),
/// which does not end when the pool closes.
pub(crate) async fn listen(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.ignore_pool_close_event(true);
    listener.listen(channel).await?;
    Ok(listener)
}

/// Checks that a listener's connection answers: `LISTEN` on `channel` again, a no-op that
/// leaves the session showing what it is for in `pg_stat_activity`.
pub(crate) async fn listen_check(
    listener: &mut PgListener,
    channel: &str,
) -> Result<(), sqlx::Error> {
    // the channel is made of the schema's name (lowercase letters, digits, `_`): quoted as
    // an identifier all the same
    let statement = format!("LISTEN \"{}\"", channel.replace('"', "\"\""));
    sqlx::raw_sql(AssertSqlSafe(statement))
        .execute(listener)
        .await?;
    Ok(())
}
