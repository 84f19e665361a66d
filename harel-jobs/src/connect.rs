//! Connecting to PostgreSQL, waiting for it when it is not up yet.

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions as _, Connection as _, PgPool};

use crate::error::{ConnectError, DatabaseError};

/// How [`connect_with`] builds the pool and how long it waits for the server.
///
/// Start from [`Default`] and change what you need; the fields are public to read.
///
/// ```
/// use std::time::Duration;
/// use harel_jobs::ConnectConfig;
///
/// let config = ConnectConfig::default()
///     .max_connections(20)
///     .wait(Duration::from_secs(120));
/// assert_eq!(config.max_connections, 20);
/// assert_eq!(config.min_connections, 0);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConnectConfig {
    /// Pool size (default 10).
    pub max_connections: u32,
    /// Connections kept open when idle (default 0).
    pub min_connections: u32,
    /// How long to keep trying before giving up (default 30 s).
    pub wait: Duration,
    /// First pause between attempts (default 100 ms), doubled each time…
    pub initial_backoff: Duration,
    /// …up to this (default 5 s).
    pub max_backoff: Duration,
    /// How long one pool checkout may wait later on (default 30 s).
    pub acquire_timeout: Duration,
}

impl Default for ConnectConfig {
    fn default() -> Self {
        Self {
            max_connections: 10,
            min_connections: 0,
            wait: Duration::from_secs(30),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(30),
        }
    }
}

impl ConnectConfig {
    /// Sets the pool size (default 10; at least 1).
    pub fn max_connections(mut self, max_connections: u32) -> Self {
        self.max_connections = max_connections;
        self
    }

    /// Sets how many connections the pool keeps open when idle (default 0; at most
    /// `max_connections`).
    pub fn min_connections(mut self, min_connections: u32) -> Self {
        self.min_connections = min_connections;
        self
    }

    /// Sets how long to keep trying before giving up (default 30 s).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Sets the first pause between attempts (default 100 ms), doubled after each failure.
    pub fn initial_backoff(mut self, initial_backoff: Duration) -> Self {
        self.initial_backoff = initial_backoff;
        self
    }

    /// Sets the longest pause between attempts (default 5 s).
    pub fn max_backoff(mut self, max_backoff: Duration) -> Self {
        self.max_backoff = max_backoff;
        self
    }

    /// Sets how long one pool checkout may wait once connected (default 30 s).
    pub fn acquire_timeout(mut self, acquire_timeout: Duration) -> Self {
        self.acquire_timeout = acquire_timeout;
        self
    }
}

/// Connects a pool to the database at `url`, waiting up to 30 s for the server to answer.
///
/// See [`connect_with`].
///
/// ```no_run
/// # async fn example() -> Result<(), harel_jobs::ConnectError> {
/// let pool = harel_jobs::connect("postgres://postgres@127.0.0.1:5432/postgres").await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`connect_with`].
pub async fn connect(url: &str) -> Result<PgPool, ConnectError> {
    connect_with(url, &ConnectConfig::default()).await
}

/// Connects a pool to the database at `url` (`postgres://user:password@host:port/db?…`).
///
/// While the server cannot be reached, or answers that it is starting up, shutting down or
/// out of connections, it retries with exponential backoff until `config.wait` has passed,
/// logging each failure; so a worker started alongside its database waits instead of
/// crashing. An attempt that reaches the server but cannot open the pool's
/// `min_connections` within 5 s (the server out of connections) closes what it opened and
/// counts as a failure too, so workers started together do not each sit on part of a pool.
/// Errors that retrying cannot cure (a wrong password, an unknown database) end it at once.
/// Neither errors nor logs ever contain the password.
///
/// # Errors
/// [`ConnectError::InvalidUrl`], [`ConnectError::NotPostgres`] for a URL of another
/// scheme than `postgres://` or `postgresql://`, [`ConnectError::InvalidConfig`],
/// [`ConnectError::Unreachable`] after `config.wait`, [`ConnectError::Refused`].
pub async fn connect_with(url: &str, config: &ConnectConfig) -> Result<PgPool, ConnectError> {
    let connect_options = parse_url(url)?;
    connect_options_with(connect_options, config).await
}

/// As [`connect_with`], from already-parsed sqlx connection options (for settings a URL
/// cannot carry).
///
/// # Errors
/// As [`connect_with`].
pub async fn connect_options_with(
    connect_options: PgConnectOptions,
    config: &ConnectConfig,
) -> Result<PgPool, ConnectError> {
    if config.max_connections == 0 {
        return Err(ConnectError::InvalidConfig(
            "max_connections must be at least 1",
        ));
    }
    if config.min_connections > config.max_connections {
        return Err(ConnectError::InvalidConfig(
            "min_connections must not exceed max_connections",
        ));
    }
    let connect_options = if connect_options.get_application_name().is_none() {
        connect_options.application_name("harel-jobs")
    } else {
        connect_options
    };
    let target = describe(&connect_options);
    let started = Instant::now();
    let mut backoff = config.initial_backoff.max(Duration::from_millis(1));
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        // Each attempt is bounded by what is left of the wait (but gets at least a second).
        let left = config.wait.saturating_sub(started.elapsed());
        let attempt_timeout = left.clamp(
            MIN_ATTEMPT_TIME,
            config.acquire_timeout.max(MIN_ATTEMPT_TIME),
        );
        let error = match connect_once(&connect_options, config, attempt_timeout).await {
            Ok(pool) => return Ok(pool),
            Err(error) => DatabaseError::new(error),
        };
        if !error.is_connection() {
            return Err(ConnectError::Refused {
                target,
                source: error,
            });
        }
        let waited = started.elapsed();
        if waited + backoff > config.wait {
            return Err(ConnectError::Unreachable {
                target,
                attempts,
                waited,
                last_error: error,
            });
        }
        tracing::warn!(
            target: "harel_jobs::connect",
            database = %target,
            attempt = attempts,
            retry_in_ms = backoff.as_millis() as u64,
            error = %error,
            "database not reachable yet, retrying"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(config.max_backoff.max(config.initial_backoff));
    }
}

/// The least time one connection attempt is given, however little is left of the wait.
const MIN_ATTEMPT_TIME: Duration = Duration::from_secs(1);

/// The most time one attempt may spend opening the pool's `min_connections` once the probe
/// connected. A server out of connections makes sqlx retry silently; several workers each
/// holding part of their pool would otherwise wait on each other until `acquire_timeout`.
/// Giving up sooner logs the wait and frees the partial pool's connections for the others.
const MAX_POOL_OPEN_TIME: Duration = Duration::from_secs(5);

/// One attempt: a single connection first, then the pool.
///
/// The probe is one plain connection, which fails at once with the real cause when the
/// server is down. Building the pool directly would not: the pool retries a refused
/// connection by itself until its `acquire_timeout` (30 s by default) and then reports only
/// that it timed out, so our own `wait`, backoff and logging would never apply.
async fn connect_once(
    connect_options: &PgConnectOptions,
    config: &ConnectConfig,
    timeout: Duration,
) -> Result<PgPool, sqlx::Error> {
    let probe = tokio::time::timeout(timeout, connect_options.connect())
        .await
        .map_err(|_| timed_out(format!("no answer within {timeout:?}")))??;
    let _ = probe.close().await;
    let pool = PgPoolOptions::new()
        .max_connections(config.max_connections)
        .min_connections(config.min_connections)
        .acquire_timeout(config.acquire_timeout)
        .connect_with(connect_options.clone());
    let pool_timeout = timeout.min(MAX_POOL_OPEN_TIME);
    tokio::time::timeout(pool_timeout, pool)
        .await
        .map_err(|_| {
            timed_out(format!(
                "could not open the pool's {} connection(s) within {pool_timeout:?} \
             (is the server out of connections?)",
                config.min_connections.max(1)
            ))
        })?
}

/// A timeout as a connection error, so the retry loop treats it as one.
fn timed_out(message: String) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, message))
}

/// Parses a connection URL without ever repeating it (it may hold a password).
pub(crate) fn parse_url(url: &str) -> Result<PgConnectOptions, ConnectError> {
    // sqlx reads any scheme as PostgreSQL's: `mysql://host:3306` would be tried (and
    // retried for the whole wait) as a PostgreSQL server
    if let Some((scheme, _)) = url.split_once("://")
        && !scheme.eq_ignore_ascii_case("postgres")
        && !scheme.eq_ignore_ascii_case("postgresql")
    {
        // a scheme is letters, digits, `+`, `-`, `.`: anything else (a password typed
        // before the `://`) is not repeated
        let scheme = if !scheme.is_empty()
            && scheme.len() <= 32
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            scheme.to_owned()
        } else {
            "(not shown)".to_owned()
        };
        return Err(ConnectError::NotPostgres { scheme });
    }
    PgConnectOptions::from_str(url).map_err(|error| ConnectError::InvalidUrl {
        reason: scrub(&error.to_string(), url),
    })
}

/// `user@host:port/database`: enough to recognise the target, never the password.
pub(crate) fn describe(options: &PgConnectOptions) -> String {
    format!(
        "{}@{}:{}/{}",
        options.get_username(),
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or(options.get_username())
    )
}

/// Removes the URL's password from a message, in case a parser echoed it.
fn scrub(message: &str, url: &str) -> String {
    match url_password(url) {
        Some(password) if !password.is_empty() => message.replace(password, "***"),
        _ => message.to_owned(),
    }
}

/// The password part of `scheme://user:password@host…`, if any.
fn url_password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.rsplit_once('@')?.0;
    Some(userinfo.split_once(':')?.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_without_password() {
        let options = parse_url("postgres://app:s3cret@db.example:6543/jobs").unwrap();
        let target = describe(&options);
        assert_eq!(target, "app@db.example:6543/jobs");
        assert!(!target.contains("s3cret"));
    }

    #[test]
    fn invalid_url_does_not_echo_password() {
        let url = "postgres://app:s3cret@db.example:notaport/jobs";
        let error = parse_url(url).unwrap_err();
        let text = format!("{error} {error:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert!(matches!(error, ConnectError::InvalidUrl { .. }));
    }

    #[test]
    fn refuses_other_schemes_at_once() {
        for url in [
            "mysql://app:s3cret@db.example:3306/jobs",
            "redis://db.example",
            "s3cret@db://x",
        ] {
            let error = parse_url(url).unwrap_err();
            let text = format!("{error} {error:?}");
            assert!(!text.contains("s3cret"), "{text}");
            assert!(matches!(error, ConnectError::NotPostgres { .. }), "{url}");
            assert!(text.contains("not a PostgreSQL database url"), "{text}");
        }
        assert!(matches!(
            parse_url("mysql://db/x"),
            Err(ConnectError::NotPostgres { scheme }) if scheme == "mysql"
        ));
        for url in ["postgres://u@h/d", "postgresql://u@h/d", "POSTGRES://u@h/d"] {
            assert!(parse_url(url).is_ok(), "{url}");
        }
    }

    #[test]
    fn finds_the_password_part() {
        assert_eq!(url_password("postgres://u:p@h/d"), Some("p"));
        assert_eq!(url_password("postgres://u:p:q@h/d"), Some("p:q"));
        assert_eq!(url_password("postgres://u@h/d"), None);
        assert_eq!(url_password("postgres://h/d"), None);
    }

    #[tokio::test]
    async fn rejects_zero_pool() {
        let config = ConnectConfig::default().max_connections(0);
        let error = connect_with("postgres://u@127.0.0.1:1/d", &config)
            .await
            .unwrap_err();
        assert!(matches!(error, ConnectError::InvalidConfig(_)));
    }
}
