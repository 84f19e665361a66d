//! Connections of the worker's own, outside the application's pool.
//!
//! The fetcher, the completer and the heartbeat each keep one. Handlers may hold every
//! pooled connection; the worker's own work must not queue behind them (a heartbeat that
//! waits for a pooled connection lets leases lapse). A pooled checkout would also cost a
//! ping round trip each time (sqlx tests connections before handing them out).
//!
//! When the server refuses a new connection (`max_connections` reached) while the pool has
//! an idle one, the worker borrows that instead of stalling: a worker whose pool sits idle
//! must not be unable to ack because its own connections count on top of the pool.
//!
//! Claims and heartbeats must commit durably, whatever `synchronous_commit` the role or the
//! database defaults to; outcomes need not (see [`OwnConnection::without_commit_wait`]). On
//! a direct connection the setting is made once, by a statement right after the connection
//! opens ([`Commit`]), not as a startup parameter, which PgBouncer refuses. Behind a
//! transaction pooler a session setting would stay on whichever server connection ran it
//! (and leak to the pooler's other clients), so each call instead runs in a transaction of
//! its own that begins with `SET LOCAL` in the same round trip as `BEGIN` ([`Unit`]).
//!
//! Every database call of the pool, opening its connection included, is [`bounded`] by the
//! pool's `database_timeout`: a partitioned or frozen server must not hang a task, or the
//! shutdown, for as long as TCP takes to notice (hours). A call abandoned at its bound
//! leaves its connection in the middle of an exchange, so that connection is dropped
//! ([`OwnConnection::reset`], or a [`Checkout`] not marked done), never used again.

use std::future::Future;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _, PgConnection, PgPool, Postgres};

use crate::store::session::{self, SynchronousCommit};
use tokio::time::Instant;

/// The error of a database call abandoned after `limit` without an answer. A connection
/// error (`DatabaseError::is_connection`), retried like one.
fn timed_out(limit: Duration) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer from the database within {limit:?} (the worker's database_timeout)"),
    ))
}

/// Runs one database call, abandoning it after `limit`. The caller drops the connection
/// the call was using when it fails (see the module's documentation).
pub(crate) async fn bounded<T, E: From<sqlx::Error>>(
    limit: Duration,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(timed_out(limit).into()),
    }
}

/// A connection checked out of the pool for one call. Dropped before [`done`](Self::done)
/// (the call failed, or was abandoned at its bound), it is closed rather than given back to
/// the application's pool.
pub(crate) struct Checkout {
    connection: PoolConnection<Postgres>,
    done: bool,
}

impl Checkout {
    /// Checks a connection out of `pool`, waiting for one.
    pub async fn acquire(pool: &PgPool) -> Result<Self, sqlx::Error> {
        Ok(Self::new(pool.acquire().await?))
    }

    /// Checks out an idle connection of `pool`, if it has one.
    fn try_acquire(pool: &PgPool) -> Option<Self> {
        pool.try_acquire().map(Self::new)
    }

    fn new(connection: PoolConnection<Postgres>) -> Self {
        Self {
            connection,
            done: false,
        }
    }

    /// The connection.
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.connection
    }

    /// The call finished: give the connection back to the pool.
    pub fn done(mut self) {
        self.done = true;
    }
}

/// An error that says whether the server answered the call: after an answer (a success, or
/// an error the server sent) the connection is in a known state and goes back to the pool;
/// without one (an I/O error, a timeout) it may be in the middle of an exchange and is
/// closed.
pub(crate) trait ServerAnswered {
    /// Whether the server sent this error.
    fn server_answered(&self) -> bool;
}

impl ServerAnswered for sqlx::Error {
    fn server_answered(&self) -> bool {
        matches!(self, sqlx::Error::Database(_))
    }
}

impl ServerAnswered for crate::error::DatabaseError {
    fn server_answered(&self) -> bool {
        self.code().is_some()
    }
}

/// Runs `call` on a connection checked out of `pool`, in a [`Unit`] (behind a transaction
/// pooler, a transaction of its own), and gives the connection back to the pool when the
/// server answered, an error included (a failed transaction is rolled back when its unit is
/// dropped): closing a healthy connection after a refusal (a missing grant, say) would take
/// it from a pool that may be down to its last one, where the worker's own tasks borrow.
/// A call abandoned without an answer closes it (see [`Checkout`]).
pub(crate) async fn on_pooled<T, E, F>(pool: &PgPool, pooler: bool, call: F) -> Result<T, E>
where
    E: From<sqlx::Error> + ServerAnswered,
    F: AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
{
    let mut pooled = Checkout::acquire(pool).await?;
    let result: Result<T, E> = async {
        let mut unit = Unit::begin(pooled.connection(), pooler).await?;
        let value = call(unit.connection()).await?;
        unit.finish().await?;
        Ok(value)
    }
    .await;
    match &result {
        Ok(_) => pooled.done(),
        Err(error) if error.server_answered() => pooled.done(),
        Err(_) => {}
    }
    result
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if !self.done {
            self.connection.close_on_drop();
        }
    }
}

/// How long a borrowed pool connection is kept before opening our own is tried again.
const BORROW_FOR: Duration = Duration::from_secs(10);

/// What the commits of a connection wait for, set on its session right after it opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Commit {
    /// `synchronous_commit = on`, whatever the role's or database's default: claims and
    /// heartbeats, which must survive a server crash (or two workers could hold one group).
    Durable,
    /// `synchronous_commit = off`: outcomes (see [`OwnConnection::without_commit_wait`]).
    NoFlushWait,
}

impl Commit {
    /// The `synchronous_commit` it is.
    fn setting(self) -> SynchronousCommit {
        match self {
            Self::Durable => SynchronousCommit::On,
            Self::NoFlushWait => SynchronousCommit::Off,
        }
    }
}

/// One call's connection: the session itself on a direct connection, a transaction of its
/// own behind a transaction pooler. [`finish`](Self::finish) it after a successful call; a
/// unit dropped unfinished rolls its transaction back.
pub(crate) enum Unit<'c> {
    /// A direct connection, its session set when it opened.
    Session(&'c mut PgConnection),
    /// Behind a transaction pooler: a transaction that set its commit mode locally.
    Transaction(sqlx::Transaction<'c, Postgres>),
}

impl<'c> Unit<'c> {
    /// One call's connection on `connection` (a pool connection, say): the session
    /// itself, or behind a transaction pooler (when `pooled`) a transaction, which alone
    /// keeps an unnamed statement's parse and execution on one server connection.
    pub async fn begin(
        connection: &'c mut PgConnection,
        pooled: bool,
    ) -> Result<Self, sqlx::Error> {
        Ok(if pooled {
            Self::Transaction(session::transaction_begin(connection, None).await?)
        } else {
            Self::Session(connection)
        })
    }

    /// The connection to run the call on.
    pub fn connection(&mut self) -> &mut PgConnection {
        match self {
            Self::Session(connection) => connection,
            Self::Transaction(transaction) => transaction,
        }
    }

    /// Commits the transaction, if there is one.
    pub async fn finish(self) -> Result<(), sqlx::Error> {
        match self {
            Self::Session(_) => Ok(()),
            Self::Transaction(transaction) => transaction.commit().await,
        }
    }
}

/// Where the current connection comes from.
enum Held {
    Own(PgConnection),
    Borrowed {
        connection: Checkout,
        since: Instant,
        /// The pool connection's `synchronous_commit` before we set it, to put back.
        restore: Option<String>,
    },
}

/// One connection, opened on first use and again after a failure.
pub(crate) struct OwnConnection {
    options: PgConnectOptions,
    /// The pool to borrow from when our own cannot be opened; `None` to never borrow.
    fallback: Option<PgPool>,
    /// What its commits wait for; `None` leaves the server's default.
    commit: Option<Commit>,
    /// Behind a transaction pooler: no session settings, a transaction per call.
    pooled: bool,
    held: Option<Held>,
}

impl OwnConnection {
    /// A connection to the pool's database (not taken from the pool, unless the server
    /// refuses a new one and the pool has one idle), whose commits wait for the WAL flush
    /// (`synchronous_commit = on`): for claims and heartbeats. A borrowed pool connection is
    /// set so too, and given back with its own setting.
    pub fn durable(pool: &PgPool) -> Self {
        Self::with_commit(pool, Some(Commit::Durable))
    }

    fn with_commit(pool: &PgPool, commit: Option<Commit>) -> Self {
        Self {
            options: (*pool.connect_options()).clone(),
            fallback: Some(pool.clone()),
            commit,
            pooled: false,
            held: None,
        }
    }

    /// Marks it as going through a transaction pooler (when `pooled`): no session setting
    /// is made, and each [`unit`](Self::unit) is a transaction that sets its commit mode
    /// with `SET LOCAL`.
    pub fn through_pooler(mut self, pooled: bool) -> Self {
        self.pooled = pooled;
        self
    }

    /// A connection of our own, never borrowed, with the server's default commit setting:
    /// for work that must not run on a pooled connection (`VACUUM`, which cannot run in a
    /// transaction, and may outlast the call that started it).
    pub fn never_borrowed(pool: &PgPool) -> Self {
        Self {
            fallback: None,
            ..Self::with_commit(pool, None)
        }
    }

    /// A connection whose commits do not wait for the WAL flush (`synchronous_commit = off`).
    ///
    /// For the completer only. If the server crashes, its last fraction of a second of
    /// outcomes may be lost: those jobs ran to the end and run again (at-least-once), never
    /// alongside another execution. Claims stay durable, and WAL is flushed in order, so a
    /// group's next job is never claimed durably while its predecessor's ack is lost. (A
    /// connection borrowed from the pool keeps the pool's setting: never less durable than
    /// the application's own commits.)
    pub fn without_commit_wait(pool: &PgPool) -> Self {
        Self::with_commit(pool, Some(Commit::NoFlushWait))
    }

    /// The connection for one call, connecting first if needed: the session itself, or
    /// behind a transaction pooler a transaction of its own, begun with its commit mode in
    /// the same round trip (see the module's documentation).
    pub async fn unit(&mut self) -> Result<Unit<'_>, sqlx::Error> {
        let (pooled, commit) = (self.pooled, self.commit);
        let connection = self.get().await?;
        if !pooled {
            return Ok(Unit::Session(connection));
        }
        let transaction =
            session::transaction_begin(connection, commit.map(Commit::setting)).await?;
        Ok(Unit::Transaction(transaction))
    }

    /// The open connection, connecting first if needed.
    pub async fn get(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        if matches!(&self.held, Some(Held::Borrowed { since, .. }) if since.elapsed() >= BORROW_FOR)
            && let Some(Held::Borrowed {
                connection,
                restore,
                ..
            }) = self.held.take()
        {
            // give the pool its connection back and try for our own again
            give_back(connection, restore).await;
        }
        if self.held.is_none() {
            self.held = Some(self.open().await?);
        }
        match self.held.as_mut() {
            Some(Held::Own(connection)) => Ok(connection),
            Some(Held::Borrowed { connection, .. }) => Ok(connection.connection()),
            // just set
            None => Err(sqlx::Error::PoolClosed),
        }
    }

    async fn open(&self) -> Result<Held, sqlx::Error> {
        let error = match self.options.connect().await {
            Ok(mut connection) => {
                if let Some(commit) = self.commit.filter(|_| !self.pooled) {
                    session::synchronous_commit_set(&mut connection, commit.setting()).await?;
                }
                return Ok(Held::Own(connection));
            }
            Err(error) => error,
        };
        let Some(mut borrowed) = self.fallback.as_ref().and_then(Checkout::try_acquire) else {
            return Err(error);
        };
        tracing::debug!(
            error = %crate::error::DatabaseError::new(error),
            "cannot open a worker connection: borrowing an idle pool connection"
        );
        // claims and heartbeats stay durable on it; outcomes keep the pool's setting
        let restore = match self.commit {
            // behind a pooler each unit sets it locally instead
            Some(Commit::Durable) if !self.pooled => {
                let connection = borrowed.connection();
                let before = session::synchronous_commit_read(&mut *connection).await?;
                session::synchronous_commit_set(connection, Commit::Durable.setting()).await?;
                Some(before)
            }
            Some(_) | None => None,
        };
        Ok(Held::Borrowed {
            connection: borrowed,
            since: Instant::now(),
            restore,
        })
    }

    /// Drops the connection after a failure (a timed-out call included); the next
    /// [`get`](Self::get) reconnects. A borrowed one is closed, not handed back to the
    /// application.
    pub fn reset(&mut self) {
        self.held = None;
    }

    /// Closes the connection politely (a borrowed one goes back to the pool), or just drops
    /// it if that takes longer than `limit`.
    pub async fn close(mut self, limit: Duration) {
        match self.held.take() {
            Some(Held::Own(connection)) => {
                let _ = tokio::time::timeout(limit, connection.close()).await;
            }
            Some(Held::Borrowed {
                connection,
                restore,
                ..
            }) => {
                let _ = tokio::time::timeout(limit, give_back(connection, restore)).await;
            }
            None => {}
        }
    }
}

/// Gives a borrowed connection back to the pool with the `synchronous_commit` it had, or
/// closes it if that cannot be restored.
async fn give_back(mut connection: Checkout, restore: Option<String>) {
    if let Some(before) = restore {
        let restored = session::synchronous_commit_restore(connection.connection(), before).await;
        if restored.is_err() {
            return; // dropped before done: closed
        }
    }
    connection.done();
}
