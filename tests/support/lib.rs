//! Shared support for the integration tests, examples and benchmarks of harel-jobs.
//!
//! [`SuiteSchema`] gives each test its own PostgreSQL schema, migrated, and drops it when the
//! test ends, even if the test panics, so tests run in parallel and leave nothing behind.
//! [`TestDatabase`] does the same with a whole database, for the few tests that need one.

pub mod capture;
pub mod chromium;
pub mod cluster;
pub mod limits;
pub mod pgbouncer;

use std::time::Duration;

use harel_jobs::Schema;
use harel_jobs::transport::Transport;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};

/// The server the tests use: `DATABASE_URL`, or the local default.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `url`'s server as another user and/or database (`None`: keep `url`'s).
fn url_as(url: &str, user: Option<&str>, database: Option<&str>) -> String {
    let options: PgConnectOptions = url.parse().expect("DATABASE_URL must be a postgres url");
    let user = user.unwrap_or(options.get_username());
    let database = database
        .or(options.get_database())
        .unwrap_or(options.get_username());
    format!(
        "postgres://{user}@{}:{}/{database}",
        options.get_host(),
        options.get_port()
    )
}

/// A name nobody else uses: `prefix_` and 16 hex digits.
pub fn unique_name(prefix: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}_{}", &id[..16])
}

/// A pool on the test server with room for `connections`.
pub async fn pool_with(url: &str, connections: u32) -> PgPool {
    let options: PgConnectOptions = url.parse().expect("DATABASE_URL must be a postgres url");
    PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(60))
        .connect_with(options)
        .await
        .expect("the test database must be reachable (see the README's \"Development\")")
}

/// A migrated queue schema of the test suite's own, dropped with the value (the suite's
/// counterpart of the public `harel_jobs::testing::TestSchema`, with the raw pools and
/// SQL the suite's attacks and fault tests need).
pub struct SuiteSchema {
    /// A pool on the test database (20 connections).
    pub pool: PgPool,
    /// The queue's schema.
    pub schema: Schema,
    /// The transport of that schema.
    pub transport: Transport,
    url: String,
}

impl SuiteSchema {
    /// A fresh, migrated queue.
    pub async fn new() -> Self {
        Self::new_at(&database_url()).await
    }

    /// A fresh, migrated queue on the server and database of `url` (a private
    /// [`cluster::Cluster`], for instance).
    pub async fn new_at(url: &str) -> Self {
        let queue = Self::unmigrated_at(url).await;
        harel_jobs::migrate_schema(&queue.pool, &queue.schema)
            .await
            .expect("migrate");
        // The guide's Citus plan, migrate then distribute, for a run of the suite against a
        // Citus coordinator (docs/guide/operating.md#on-citus); never set in CI.
        if std::env::var_os("HAREL_TEST_CITUS_DISTRIBUTE").is_some_and(|v| !v.is_empty()) {
            sqlx::query("SELECT citus_schema_distribute($1::regnamespace)")
                .bind(queue.schema.name())
                .execute(&queue.pool)
                .await
                .expect("citus_schema_distribute");
        }
        queue
    }

    /// A schema name reserved for this test, nothing created yet (the drop still cleans up).
    pub async fn unmigrated() -> Self {
        Self::unmigrated_at(&database_url()).await
    }

    /// [`SuiteSchema::unmigrated`] on the server and database of `url`.
    pub async fn unmigrated_at(url: &str) -> Self {
        let url = url.to_owned();
        let pool = pool_with(&url, 20).await;
        let schema = Schema::new(&unique_name("t")).expect("valid schema name");
        let transport = Transport::new(schema.clone());
        Self {
            pool,
            schema,
            transport,
            url,
        }
    }

    /// `sql` with `@schema@` replaced by this queue's schema, for ad-hoc test queries.
    pub fn sql(&self, sql: &str) -> AssertSqlSafe<String> {
        AssertSqlSafe(sql.replace("@schema@", &format!("\"{}\"", self.schema.name())))
    }

    /// Issue 42, item 11's queue: `others` waiting jobs (a multiple of 10,000) of kind
    /// `busy_report` in queue `busy`, each in a group of its own, then [`BURIED_MATCHES`] of
    /// kind `old_report` in queue `retired`, behind them in id order. Returns the first and
    /// the last id of the `retired` ones.
    pub async fn bury_matches_behind_others(
        &self,
        others: u32,
    ) -> (harel_jobs::JobId, harel_jobs::JobId) {
        use harel_jobs::transport::OutgoingMessage;
        let mut matches = Vec::new();
        for (queue, kind, n) in [
            ("busy", "busy_report", others),
            ("retired", "old_report", BURIED_MATCHES),
        ] {
            for _ in 0..n / 10_000 {
                let batch: Vec<OutgoingMessage> = (0..10_000)
                    .map(|_| {
                        OutgoingMessage::new("unused", kind, "{}")
                            .in_own_group()
                            .queue(queue)
                    })
                    .collect();
                let ids = self
                    .transport
                    .publish_many(&self.pool, &batch)
                    .await
                    .expect("bury");
                if queue == "retired" {
                    matches.extend(ids);
                }
            }
        }
        (matches[0], *matches.last().expect("published"))
    }

    /// Number of rows in one of the queue's tables.
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(self.sql(&format!("SELECT count(*) FROM @schema@.{table}")))
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }
}

impl Drop for SuiteSchema {
    fn drop(&mut self) {
        let statement = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema.name());
        run_cleanup(self.url.clone(), statement);
    }
}

/// How many matching jobs [`SuiteSchema::bury_matches_behind_others`] puts behind the
/// others.
pub const BURIED_MATCHES: u32 = 20_000;

/// A database of its own, dropped with the value.
pub struct TestDatabase {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    admin_url: String,
}

impl TestDatabase {
    /// Creates an empty database.
    pub async fn new() -> Self {
        let admin_url = database_url();
        let name = unique_name("harel_test");
        let admin = pool_with(&admin_url, 1).await;
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&admin)
            .await
            .expect("create database");
        admin.close().await;
        let url = url_as(&admin_url, None, Some(&name));
        Self {
            name,
            url,
            admin_url,
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let statement = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        run_cleanup(self.admin_url.clone(), statement);
    }
}

/// A login role of its own (not a superuser), dropped with the value.
pub struct TestRole {
    /// Its name.
    pub name: String,
    /// The test server's URL, logged in as this role.
    pub url: String,
    admin_url: String,
}

/// What the guide's "Database roles" (docs/guide/operating.md) grants a producer, `@schema@`
/// standing for the queue's schema.
pub const PRODUCER_GRANTS: &[&str] = &[
    "USAGE ON SCHEMA @schema@",
    "EXECUTE ON FUNCTION @schema@.harel_publish",
    "EXECUTE ON FUNCTION @schema@.harel_publish_workflow",
];

/// What the guide's "Database roles" grants a worker.
pub const WORKER_GRANTS: &[&str] = &[
    "USAGE ON SCHEMA @schema@",
    "EXECUTE ON FUNCTION @schema@.harel_claim",
    "EXECUTE ON FUNCTION @schema@.harel_settle",
    "EXECUTE ON FUNCTION @schema@.harel_extend",
    "EXECUTE ON FUNCTION @schema@.harel_maintain",
    "EXECUTE ON FUNCTION @schema@.harel_resolve_backlog",
    "EXECUTE ON FUNCTION @schema@.harel_schedule_fire",
    "EXECUTE ON FUNCTION @schema@.harel_schedules",
    "EXECUTE ON FUNCTION @schema@.harel_worker_report",
    "EXECUTE ON FUNCTION @schema@.harel_steps",
    "EXECUTE ON FUNCTION @schema@.harel_record_step",
    "EXECUTE ON FUNCTION @schema@.harel_workflow_task",
];

/// What the guide's "Database roles" grants an operator (stats, dead letters, job and group
/// lookup, cancel: everything the `harel-jobs` command line does).
pub const OPERATOR_GRANTS: &[&str] = &[
    "USAGE ON SCHEMA @schema@",
    "SELECT ON @schema@.jobs, @schema@.transport_messages, @schema@.transport_groups",
    "SELECT ON @schema@.dead_letters",
    "EXECUTE ON FUNCTION @schema@.harel_retry_dead_letters",
    "EXECUTE ON FUNCTION @schema@.harel_delete_dead_letters",
    "EXECUTE ON FUNCTION @schema@.harel_purge_dead_letters",
    "EXECUTE ON FUNCTION @schema@.harel_job",
    "EXECUTE ON FUNCTION @schema@.harel_list_jobs",
    "EXECUTE ON FUNCTION @schema@.harel_list_jobs_newest",
    "EXECUTE ON FUNCTION @schema@.harel_list_groups",
    "EXECUTE ON FUNCTION @schema@.harel_top_groups",
    "EXECUTE ON FUNCTION @schema@.harel_cancel",
    "EXECUTE ON FUNCTION @schema@.harel_run_now",
    "EXECUTE ON FUNCTION @schema@.harel_cancel_group",
    "EXECUTE ON FUNCTION @schema@.harel_schedules",
    "EXECUTE ON FUNCTION @schema@.harel_queues",
    "EXECUTE ON FUNCTION @schema@.harel_depth",
    "EXECUTE ON FUNCTION @schema@.harel_set_queue",
    "EXECUTE ON FUNCTION @schema@.harel_set_fair_weight",
    "EXECUTE ON FUNCTION @schema@.harel_set_key_limits",
    "EXECUTE ON FUNCTION @schema@.harel_fair_keys",
    "EXECUTE ON FUNCTION @schema@.harel_workers",
    "EXECUTE ON FUNCTION @schema@.harel_throughput",
    "EXECUTE ON FUNCTION @schema@.harel_throughput_by_queue",
    "EXECUTE ON FUNCTION @schema@.harel_delete_schedule",
    "EXECUTE ON FUNCTION @schema@.harel_schedule_control",
    "EXECUTE ON FUNCTION @schema@.harel_workflows",
    "EXECUTE ON FUNCTION @schema@.harel_workflow",
    "EXECUTE ON FUNCTION @schema@.harel_workflow_tasks",
    "EXECUTE ON FUNCTION @schema@.harel_cancel_workflow",
    "EXECUTE ON FUNCTION @schema@.harel_retry_workflow",
    "EXECUTE ON FUNCTION @schema@.harel_job_parents",
    "EXECUTE ON FUNCTION @schema@.harel_job_steps",
    "EXECUTE ON FUNCTION @schema@.harel_job_attempts",
    "EXECUTE ON FUNCTION @schema@.harel_job_workflow",
];

impl TestRole {
    /// Creates a login role with exactly `grants` on `queue`'s schema (see
    /// [`PRODUCER_GRANTS`], [`WORKER_GRANTS`]).
    pub async fn with_grants(queue: &SuiteSchema, grants: &[&str]) -> Self {
        Self::create(queue, grants, None).await
    }

    /// Creates a role with a worker's grants that may hold at most `connection_limit`
    /// connections at once.
    pub async fn with_connection_limit(queue: &SuiteSchema, connection_limit: u32) -> Self {
        Self::create(queue, WORKER_GRANTS, Some(connection_limit)).await
    }

    async fn create(queue: &SuiteSchema, grants: &[&str], connection_limit: Option<u32>) -> Self {
        let admin_url = database_url();
        let name = unique_name("harel_role");
        let schema = format!("\"{}\"", queue.schema.name());
        let admin = pool_with(&admin_url, 1).await;
        let limit = connection_limit.map_or(String::new(), |n| format!(" CONNECTION LIMIT {n}"));
        let mut statements = vec![format!("CREATE ROLE \"{name}\" LOGIN{limit}")];
        statements.extend(
            grants
                .iter()
                .map(|grant| format!("GRANT {} TO \"{name}\"", grant.replace("@schema@", &schema))),
        );
        for statement in statements {
            sqlx::query(AssertSqlSafe(statement))
                .execute(&admin)
                .await
                .expect("create the test role");
        }
        admin.close().await;
        let url = url_as(&admin_url, Some(&name), None);
        Self {
            name,
            url,
            admin_url,
        }
    }
}

impl Drop for TestRole {
    fn drop(&mut self) {
        run_cleanup(
            self.admin_url.clone(),
            format!("DROP OWNED BY \"{}\"", self.name),
        );
        run_cleanup(
            self.admin_url.clone(),
            format!("DROP ROLE IF EXISTS \"{}\"", self.name),
        );
    }
}

/// Runs one cleanup statement on its own thread and runtime: `Drop` cannot be async, and
/// must work whether or not the test's runtime is still alive.
fn run_cleanup(url: String, statement: String) {
    let cleanup = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("cleanup runtime");
        runtime.block_on(async move {
            let pool = pool_with(&url, 1).await;
            let _ = sqlx::query("SET lock_timeout = '30s'").execute(&pool).await;
            if let Err(error) = sqlx::query(AssertSqlSafe(statement.clone()))
                .execute(&pool)
                .await
            {
                eprintln!("test cleanup failed ({statement}): {error}");
            }
            pool.close().await;
        });
    });
    let _ = cleanup.join();
}
