//! The worker pool's settings, their defaults, and their validation.

use std::time::Duration;

use crate::error::ConfigError;
use crate::retry::Backoff;
use crate::schema::Schema;
use crate::vocabulary::Priority;

/// The most pipelines a pool may run (`WorkerBuilder::pipelines`).
const MAX_PIPELINES: usize = 8;

/// Every setting of a worker pool. Filled with the defaults below by
/// [`Worker::builder`](super::Worker::builder), validated by `build`.
#[derive(Clone, Debug)]
pub(crate) struct WorkerConfig {
    /// Handlers running at once, of the default queue when no queue is named. Default 16.
    pub concurrency: usize,
    /// Whether `concurrency` was set (it cannot be with named queues: ambiguous).
    pub concurrency_set: bool,
    /// The named queues served, each with its concurrency (empty: the default queue, with
    /// `concurrency`).
    pub queues: Vec<(String, usize)>,
    /// Lease of a claimed job; extended by the heartbeat while the handler runs. Default 30 s.
    pub lease: Duration,
    /// Time between heartbeats. Default a third of the lease.
    pub heartbeat: Option<Duration>,
    /// Claim attempt when no NOTIFY arrived. Default 1 s.
    pub poll_interval: Duration,
    /// Attempts per job unless its type says otherwise. Default 10.
    pub max_attempts: u32,
    /// Backoff unless the job type says otherwise. Default 2 s doubling to 1 h.
    pub backoff: Backoff,
    /// Timeout of one attempt unless the job type says otherwise. Default none.
    pub timeout: Option<Duration>,
    /// How long completed jobs are kept in the history unless the job type says otherwise.
    /// Default none: deleted when they complete.
    pub retain: Option<Duration>,
    /// How long shutdown lets running handlers finish. Default 30 s.
    pub shutdown_grace: Duration,
    /// The longest the pool waits for one database call (opening a connection included)
    /// before abandoning it and dropping its connection. Default 10 s.
    pub database_timeout: Duration,
    /// Take no group below this priority. Default 0 (take everything).
    pub min_priority: Priority,
    /// Most groups claimed in one round trip. Default 256.
    pub claim_batch: usize,
    /// Most outcomes (of every kind) settled in one round trip. Default 512.
    pub settle_batch: usize,
    /// Claims in flight at once per queue, and settle batches in flight at once, each on a
    /// connection of its own. Default 1.
    pub pipelines: usize,
    /// How often the pool reports itself to operators (`Client::workers`). Default 10 s.
    pub report_interval: Duration,
    /// Whether outcomes commit with `synchronous_commit = on` (waiting for the WAL flush,
    /// and for a synchronous standby). Default false.
    pub durable_outcomes: bool,
    /// Whether to LISTEN for enqueue notifications. Default true.
    pub listen: bool,
    /// Whether the pool runs on a current-thread runtime of its own, on a thread of its own,
    /// rather than on the runtime it was built in. Default false.
    pub own_thread: bool,
    /// Whether to vacuum the queue tables when autovacuum is off (housekeeping runs
    /// regardless). Default true.
    pub maintenance: bool,
    /// The queue's schema. Default `harel`.
    pub schema: Schema,
    /// Whether the pool's connections go through a transaction pooler (PgBouncer in
    /// `pool_mode = transaction`): no session state, every call in a transaction of its
    /// own, unnamed statements. Default false.
    pub transaction_pooler: bool,
    /// Where to LISTEN, if not where the pool connects (a direct connection past the
    /// pooler). Default none.
    pub listen_options: Option<ListenOptions>,
}

/// The connect options of the LISTEN connection. Its `Debug` names the target only: the
/// options hold the password.
#[derive(Clone)]
pub(crate) struct ListenOptions(pub sqlx::postgres::PgConnectOptions);

impl std::fmt::Debug for ListenOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&crate::connect::describe(&self.0))
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: 16,
            concurrency_set: false,
            report_interval: Duration::from_secs(10),
            queues: Vec::new(),
            lease: Duration::from_secs(30),
            heartbeat: None,
            poll_interval: Duration::from_secs(1),
            max_attempts: 10,
            backoff: Backoff::DEFAULT,
            timeout: None,
            retain: None,
            shutdown_grace: Duration::from_secs(30),
            database_timeout: Duration::from_secs(10),
            min_priority: Priority::LOWEST,
            claim_batch: 256,
            settle_batch: 512,
            pipelines: 1,
            durable_outcomes: false,
            listen: true,
            own_thread: false,
            maintenance: true,
            schema: Schema::default(),
            transaction_pooler: false,
            listen_options: None,
        }
    }
}

impl WorkerConfig {
    /// The limits of a job type that sets none of its own.
    pub fn limits(&self) -> crate::retry::Limits {
        crate::retry::Limits {
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            retain: self.retain,
        }
    }

    /// The queues served and each one's concurrency: the named ones, or the default queue
    /// with `concurrency`.
    pub fn lanes(&self) -> Vec<(String, usize)> {
        if self.queues.is_empty() {
            vec![(
                crate::vocabulary::DEFAULT_QUEUE.to_owned(),
                self.concurrency,
            )]
        } else {
            self.queues.clone()
        }
    }

    /// The handlers that may run at once, over every queue served.
    pub fn total_concurrency(&self) -> usize {
        if self.queues.is_empty() {
            self.concurrency
        } else {
            self.queues.iter().map(|(_, concurrency)| concurrency).sum()
        }
    }

    /// How the pool's statements are sent: unnamed behind a transaction pooler.
    pub fn prepared_statements(&self) -> crate::transport::PreparedStatements {
        if self.transaction_pooler {
            crate::transport::PreparedStatements::Unnamed
        } else {
            crate::transport::PreparedStatements::Cached
        }
    }

    /// Whether the pool LISTENs: asked to, and not through a transaction pooler unless a
    /// LISTEN connection of its own is configured (a LISTEN through the pooler would stay
    /// on a server connection the pooler hands to other clients: its notifications lost).
    pub fn listens(&self) -> bool {
        self.listen && (!self.transaction_pooler || self.listen_options.is_some())
    }

    /// The heartbeat interval: the configured one, or a third of the lease.
    pub fn heartbeat_interval(&self) -> Duration {
        self.heartbeat.unwrap_or(self.lease / 3)
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |name, reason| Err(ConfigError::Invalid { name, reason });
        if self.concurrency == 0 || self.concurrency > 10_000 {
            return invalid("concurrency", "must be between 1 and 10,000");
        }
        if self.concurrency_set && !self.queues.is_empty() {
            return invalid(
                "concurrency",
                "applies to the default queue when no queue is named; with named queues, \
                 give each its concurrency (.queue(\"default\", n) for the default queue)",
            );
        }
        for (i, (queue, concurrency)) in self.queues.iter().enumerate() {
            if crate::vocabulary::validate_queue_name(queue).is_err() {
                return invalid(
                    "queue",
                    "names are 1 to 64 ASCII letters, digits, '_', '-', '.' or ':'",
                );
            }
            if *concurrency == 0 || *concurrency > 10_000 {
                return invalid("queue", "concurrency must be between 1 and 10,000");
            }
            if self.queues[..i].iter().any(|(other, _)| other == queue) {
                return invalid("queue", "a queue is named twice");
            }
        }
        if self.lease < Duration::from_millis(100) || self.lease > Duration::from_secs(86_400) {
            return invalid("lease", "must be between 100 ms and 24 h");
        }
        let heartbeat = self.heartbeat_interval();
        if heartbeat.is_zero() || heartbeat >= self.lease {
            return invalid(
                "heartbeat_interval",
                "must be above zero and shorter than the lease",
            );
        }
        if self.poll_interval < Duration::from_millis(10) {
            return invalid("poll_interval", "must be at least 10 ms");
        }
        if self.report_interval < Duration::from_millis(100)
            || self.report_interval > Duration::from_secs(3_600)
        {
            return invalid("report_interval", "must be between 100 ms and 1 h");
        }
        if self.max_attempts == 0 {
            return invalid("max_attempts", "must be at least 1");
        }
        if self.claim_batch == 0 || self.claim_batch > 10_000 {
            return invalid("claim_batch", "must be between 1 and 10,000");
        }
        if self.settle_batch == 0 || self.settle_batch > 100_000 {
            return invalid("settle_batch", "must be between 1 and 100,000");
        }
        if self.pipelines == 0 || self.pipelines > MAX_PIPELINES {
            return invalid("pipelines", "must be between 1 and 8");
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return invalid("timeout", "must be above zero");
        }
        if self
            .retain
            .is_some_and(|r| r > crate::vocabulary::MAX_DELAY)
        {
            return invalid("retain_completed", "must be at most 100 years");
        }
        if self.database_timeout < Duration::from_millis(100)
            || self.database_timeout > Duration::from_secs(3_600)
        {
            return invalid("database_timeout", "must be between 100 ms and 1 h");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let config = WorkerConfig::default();
        assert!(config.validate().is_ok());
        assert_eq!(config.heartbeat_interval(), Duration::from_secs(10));
    }

    #[test]
    fn behind_a_transaction_pooler_it_listens_only_past_it() {
        let direct = WorkerConfig::default();
        assert!(direct.listens());
        assert_eq!(
            direct.prepared_statements(),
            crate::transport::PreparedStatements::Cached
        );
        let pooled = WorkerConfig {
            transaction_pooler: true,
            ..Default::default()
        };
        assert!(!pooled.listens(), "no LISTEN through the pooler");
        assert_eq!(
            pooled.prepared_statements(),
            crate::transport::PreparedStatements::Unnamed
        );
        let options = "postgres://app:s3cret@db.internal:5432/app"
            .parse()
            .expect("a valid url");
        let past_it = WorkerConfig {
            listen_options: Some(ListenOptions(options)),
            ..pooled.clone()
        };
        assert!(past_it.listens());
        assert!(
            !WorkerConfig {
                listen: false,
                ..past_it.clone()
            }
            .listens()
        );
        let printed = format!("{past_it:?}");
        assert!(!printed.contains("s3cret"), "{printed}");
        assert!(printed.contains("app@db.internal:5432/app"), "{printed}");
    }

    #[test]
    fn rejects_out_of_range() {
        let cases: Vec<(&str, WorkerConfig)> = vec![
            (
                "concurrency",
                WorkerConfig {
                    concurrency: 0,
                    ..Default::default()
                },
            ),
            (
                "lease",
                WorkerConfig {
                    lease: Duration::from_millis(10),
                    ..Default::default()
                },
            ),
            (
                "heartbeat_interval",
                WorkerConfig {
                    heartbeat: Some(Duration::from_secs(60)),
                    ..Default::default()
                },
            ),
            (
                "poll_interval",
                WorkerConfig {
                    poll_interval: Duration::ZERO,
                    ..Default::default()
                },
            ),
            (
                "max_attempts",
                WorkerConfig {
                    max_attempts: 0,
                    ..Default::default()
                },
            ),
            (
                "claim_batch",
                WorkerConfig {
                    claim_batch: 0,
                    ..Default::default()
                },
            ),
            (
                "settle_batch",
                WorkerConfig {
                    settle_batch: 0,
                    ..Default::default()
                },
            ),
            (
                "pipelines",
                WorkerConfig {
                    pipelines: 0,
                    ..Default::default()
                },
            ),
            (
                "pipelines",
                WorkerConfig {
                    pipelines: 9,
                    ..Default::default()
                },
            ),
            (
                "timeout",
                WorkerConfig {
                    timeout: Some(Duration::ZERO),
                    ..Default::default()
                },
            ),
            (
                "database_timeout",
                WorkerConfig {
                    database_timeout: Duration::from_millis(10),
                    ..Default::default()
                },
            ),
            (
                "database_timeout",
                WorkerConfig {
                    database_timeout: Duration::from_secs(7_200),
                    ..Default::default()
                },
            ),
        ];
        for (name, config) in cases {
            match config.validate() {
                Err(ConfigError::Invalid { name: got, .. }) => assert_eq!(got, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
