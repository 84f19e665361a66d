//! Connections of the worker's own, outside the application's pool.
//!
//! The fetcher, the completer and the heartbeat each keep one. Handlers may hold every
//! pooled connection; the worker's own work must not queue behind them (a heartbeat that
//! waits for a pooled connection lets leases lapse). A pooled checkout would also cost a
//! ping round trip each time (sqlx tests connections before handing them out).

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _, PgConnection, PgPool};

/// One connection, opened on first use and again after a failure.
pub(crate) struct OwnConnection {
    options: PgConnectOptions,
    connection: Option<PgConnection>,
}

impl OwnConnection {
    /// A connection to the pool's database (not taken from the pool).
    pub fn new(pool: &PgPool) -> Self {
        Self {
            options: (*pool.connect_options()).clone(),
            connection: None,
        }
    }

    /// The open connection, connecting first if needed.
    pub async fn get(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        if self.connection.is_none() {
            self.connection = Some(self.options.connect().await?);
        }
        // just set if it was empty
        self.connection.as_mut().ok_or(sqlx::Error::PoolClosed)
    }

    /// A connection whose commits do not wait for the WAL flush (`synchronous_commit = off`).
    ///
    /// For the completer only. If the server crashes, its last fraction of a second of
    /// outcomes may be lost: those jobs ran to the end and run again (at-least-once), never
    /// alongside another execution. Claims stay durable, and WAL is flushed in order, so a
    /// group's next job is never claimed durably while its predecessor's ack is lost.
    pub fn without_commit_wait(pool: &PgPool) -> Self {
        let options = (*pool.connect_options())
            .clone()
            .options([("synchronous_commit", "off")]);
        Self {
            options,
            connection: None,
        }
    }

    /// Drops the connection after a failure; the next [`get`](Self::get) reconnects.
    pub fn reset(&mut self) {
        self.connection = None;
    }

    /// Closes the connection politely.
    pub async fn close(mut self) {
        if let Some(connection) = self.connection.take() {
            let _ = connection.close().await;
        }
    }
}
