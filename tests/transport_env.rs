//! The transport's surroundings: the claim's query plan, clocks, connecting and migrating.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harel_jobs::transport::{ClaimRequest, OutgoingMessage};
use harel_jobs::{ConnectError, ConnectOptions, Schema, connect_with, migrate_schema};
use harel_jobs_suite::{TestDatabase, TestQueue, database_url, pool_with};
use sqlx::{AssertSqlSafe, Connection};
use tracing_subscriber::layer::{Context, SubscriberExt};

const LONG: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// 14. the claim's plan

/// Collects the PostgreSQL notices sqlx reports (as `tracing` events) on this thread.
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Notices {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        struct Message(Option<String>);
        impl tracing::field::Visit for Message {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    self.0 = Some(value.to_owned());
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" && self.0.is_none() {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        if event.metadata().target() == "sqlx::postgres::notice" {
            let mut message = Message(None);
            event.record(&mut message);
            self.0.lock().unwrap().extend(message.0);
        }
    }
}

/// The claim must stay one bounded index range scan however many groups wait: no sort of
/// the waiting groups, no sequential scan of them. Its statements run inside PL/pgSQL, so
/// their real plans come from auto_explain, reported as notices.
// a current-thread runtime: the connection is polled on this thread, where the notice
// collector is the default subscriber
#[tokio::test(flavor = "current_thread")]
async fn the_claim_scans_the_claimable_index_without_sorting_with_50000_waiting_groups() {
    let q = TestQueue::new().await;
    for statement in [
        "INSERT INTO @schema@.transport_groups (group_id, priority, available_at) \
         SELECT 'g' || i, i % 5, now() - i * interval '1 millisecond' \
         FROM generate_series(1, 50000) AS i",
        "INSERT INTO @schema@.transport_messages (group_id, kind, payload, priority) \
         SELECT 'g' || i, 'test', '{}', i % 5 FROM generate_series(1, 50000) AS i",
        "ANALYZE @schema@.transport_groups",
        "ANALYZE @schema@.transport_messages",
    ] {
        sqlx::query(q.sql(statement))
            .execute(&q.pool)
            .await
            .unwrap();
    }

    let notices = Notices::default();
    let _collecting =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(notices.clone()));
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.unwrap();
    sqlx::raw_sql(
        "LOAD 'auto_explain';
         SET auto_explain.log_min_duration = 0;
         SET auto_explain.log_nested_statements = on;
         SET auto_explain.log_analyze = off;
         SET auto_explain.log_format = 'text';
         SET auto_explain.log_level = 'notice';
         SET client_min_messages = 'notice';",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    // past PL/pgSQL's five custom plans, so the cached generic plan is checked too; and
    // with a floor and a batch size
    let requests = (0..7).map(|_| ClaimRequest::new(LONG)).chain([
        ClaimRequest::new(LONG).limit(10),
        ClaimRequest::new(LONG).min_priority(harel_jobs::Priority::new(3).unwrap()),
    ]);
    for request in requests {
        let claimed = q.transport.claim_many(&mut conn, &request).await.unwrap();
        assert!(!claimed.is_empty());
    }
    conn.close().await.unwrap();

    let notices = notices.0.lock().unwrap().clone();
    let plans: Vec<&String> = notices
        .iter()
        .filter(|n| n.contains("Query Text:") && n.contains("transport_groups"))
        .collect();
    assert!(
        !plans.is_empty(),
        "no auto_explain plan was captured; notices: {notices:#?}"
    );
    let candidate_plans: Vec<&&String> =
        plans.iter().filter(|p| p.contains("SKIP LOCKED")).collect();
    assert_eq!(candidate_plans.len(), 9, "one candidate scan per claim");
    for plan in &candidate_plans {
        assert!(
            plan.contains("Index Scan using transport_groups_claimable"),
            "the candidate scan does not use the claimable index:\n{plan}"
        );
        assert!(!plan.contains("Sort"), "the candidate scan sorts:\n{plan}");
    }
    for plan in &plans {
        assert!(
            !plan.contains("Seq Scan on transport_groups"),
            "a claim statement scans every group:\n{plan}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 15 (b). a worker's skewed clock

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs one claim in a separate process whose clock is shifted by `offset_s` seconds
/// (libfaketime); checks the shift is real, returns what it claimed.
async fn claim_with_skewed_clock(q: &TestQueue, offset_s: i64, lease_ms: u64) -> Option<String> {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: the clock-skew test needs libfaketime \
         (apt-get install -y libfaketime; .ci/run installs it)"
    );
    let before = epoch_ms();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_harel-transport-claim"))
        .args([q.schema.name(), &lease_ms.to_string()])
        .env("DATABASE_URL", database_url())
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", format!("{offset_s:+}s"))
        // only the wall clock: the runtime's timers keep the real monotonic clock
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .output()
        .await
        .expect("run harel-transport-claim");
    let after = epoch_ms();
    assert!(
        output.status.success(),
        "harel-transport-claim failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json line");
    let their_now = line["now_ms"].as_i64().expect("now_ms");
    let skew_ms = offset_s * 1000;
    assert!(
        their_now >= before + skew_ms - 1000 && their_now <= after + skew_ms + 1000,
        "the helper's clock is not shifted by {offset_s} s (ours {before}..{after}, its {their_now}): \
         is libfaketime working?"
    );
    line["claimed"]["group"].as_str().map(str::to_owned)
}

async fn lease_left_s(q: &TestQueue, group: &str) -> f64 {
    sqlx::query_scalar(q.sql(
        "SELECT extract(epoch FROM available_at - now())::float8 \
         FROM @schema@.transport_groups WHERE group_id = $1",
    ))
    .bind(group)
    .fetch_one(&q.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_worker_with_a_skewed_clock_can_neither_steal_nor_shorten_a_lease() {
    let q = TestQueue::new().await;
    let t = &q.transport;
    let publish = |group: &'static str| {
        let (pool, transport) = (q.pool.clone(), t.clone());
        async move {
            transport
                .publish(&pool, &OutgoingMessage::new(group, "test", "{}"))
                .await
                .unwrap();
        }
    };

    // a live 10 s lease, taken on a correct clock
    publish("live").await;
    let live = t
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(live.lease.group, "live");
    // a worker 30 s ahead would think it lapsed 20 s ago; one 30 s behind, that it is young
    for offset in [30, -30] {
        assert_eq!(
            claim_with_skewed_clock(&q, offset, 10_000).await,
            None,
            "a worker {offset:+} s off took a live lease"
        );
    }

    // their own 10 s leases last 10 s on the database's clock
    publish("ahead").await;
    assert_eq!(
        claim_with_skewed_clock(&q, 30, 10_000).await.as_deref(),
        Some("ahead")
    );
    publish("behind").await;
    assert_eq!(
        claim_with_skewed_clock(&q, -30, 10_000).await.as_deref(),
        Some("behind")
    );
    for group in ["ahead", "behind"] {
        let left = lease_left_s(&q, group).await;
        assert!(
            (5.0..=10.0).contains(&left),
            "{group}: lease ends in {left} s"
        );
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stolen = t
        .claim(&q.pool, &ClaimRequest::new(LONG).limit(3))
        .await
        .unwrap();
    assert!(stolen.is_none(), "a lease was cut short: {stolen:?}");
}

// ---------------------------------------------------------------------------------------
// 16. connect

#[tokio::test]
async fn connect_retries_an_unreachable_server_and_never_shows_the_password() {
    let options = ConnectOptions {
        wait: Duration::from_secs(2),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        ..ConnectOptions::default()
    };
    let url = "postgres://postgres:hunter2secret@127.0.0.1:1/x";
    let error = tokio::time::timeout(Duration::from_secs(60), connect_with(url, &options))
        .await
        .expect("connect_with ignored its wait")
        .expect_err("nothing listens on port 1");
    let text = format!("{error} | {error:?}");
    assert!(!text.contains("hunter2secret"), "password leaked: {text}");
    match error {
        ConnectError::Unreachable {
            attempts,
            target,
            last_error,
            ..
        } => {
            assert!(attempts > 1, "gave up without retrying: {text}");
            assert!(target.contains("127.0.0.1:1"), "{target}");
            // the real cause, not a pool timeout
            let cause = std::error::Error::source(&last_error)
                .and_then(|e| e.downcast_ref::<sqlx::Error>());
            assert!(
                matches!(cause, Some(sqlx::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused),
                "last error is not the refused connection: {text}"
            );
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn connect_gives_a_pool_it_cannot_fill_back_and_retries_instead_of_waiting_silently() {
    // the role may open 2 connections, the pool wants to keep 3 open: every attempt's probe
    // connects, then the pool cannot be filled. Each attempt gives up within 5 s (not after
    // the 30 s acquire timeout, holding the connections it got) and says why.
    let queue = harel_jobs_suite::TestQueue::new().await;
    let role = harel_jobs_suite::TestRole::with_connection_limit(&queue, 2).await;
    let options = ConnectOptions {
        max_connections: 3,
        min_connections: 3,
        wait: Duration::from_secs(12),
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(100),
        ..ConnectOptions::default()
    };
    let error = tokio::time::timeout(Duration::from_secs(60), connect_with(&role.url, &options))
        .await
        .expect("connect_with ignored its wait")
        .expect_err("the pool cannot be filled");
    match error {
        ConnectError::Unreachable {
            attempts,
            last_error,
            ..
        } => {
            assert!(attempts >= 2, "one attempt used the whole wait: {attempts}");
            assert!(
                last_error
                    .to_string()
                    .contains("could not open the pool's 3 connection(s)"),
                "{last_error}"
            );
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[tokio::test]
async fn connect_gives_up_at_once_on_an_unknown_database() {
    let mut url: url_parts::Url = database_url().parse().unwrap();
    url.database = harel_jobs_suite::unique_name("no_such_db");
    let options = ConnectOptions {
        wait: Duration::from_secs(600),
        ..ConnectOptions::default()
    };
    let error = tokio::time::timeout(
        Duration::from_secs(60),
        connect_with(&url.to_string(), &options),
    )
    .await
    .expect("an unknown database was retried")
    .expect_err("the database does not exist");
    match error {
        ConnectError::Refused { source, .. } => {
            assert_eq!(source.code().as_deref(), Some("3D000"), "{source}")
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

/// Just enough URL handling to swap the database of `DATABASE_URL`.
mod url_parts {
    pub struct Url {
        pub base: String,
        pub database: String,
        pub query: String,
    }

    impl std::str::FromStr for Url {
        type Err = String;
        fn from_str(url: &str) -> Result<Self, String> {
            let (rest, query) = match url.split_once('?') {
                Some((rest, query)) => (rest, format!("?{query}")),
                None => (url, String::new()),
            };
            let authority_end = rest
                .find("://")
                .map(|i| i + 3)
                .and_then(|start| rest[start..].find('/').map(|i| start + i))
                .unwrap_or(rest.len());
            Ok(Self {
                base: rest[..authority_end].to_owned(),
                database: rest[authority_end..].trim_start_matches('/').to_owned(),
                query,
            })
        }
    }

    impl std::fmt::Display for Url {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}/{}{}", self.base, self.database, self.query)
        }
    }
}

// ---------------------------------------------------------------------------------------
// 12. migrate

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_of_a_fresh_database_all_succeed_and_a_rerun_changes_nothing() {
    let db = TestDatabase::new().await;
    let pool = pool_with(&db.url, 10).await;
    let schema = Schema::default();

    let runs: Vec<_> = (0..8)
        .map(|_| {
            let (pool, schema) = (pool.clone(), schema.clone());
            tokio::spawn(async move { migrate_schema(&pool, &schema).await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().expect("a concurrent migration failed");
    }

    // (migrations, applied_at of the last, row version of harel_claim's definition)
    let state = || async {
        let row: (i64, chrono::DateTime<chrono::Utc>, String) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM harel._migrations), \
                    (SELECT max(applied_at) FROM harel._migrations), \
                    (SELECT xmin::text FROM pg_proc WHERE oid = 'harel.harel_claim'::regproc)",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        row
    };
    let before = state().await;
    assert_eq!(before.0, i64::from(harel_jobs::SCHEMA_VERSION));

    let transport = harel_jobs::transport::Transport::new(schema.clone());
    transport
        .publish(&pool, &OutgoingMessage::new("g", "test", "{}"))
        .await
        .unwrap();
    migrate_schema(&pool, &schema).await.expect("re-run");
    assert_eq!(state().await, before, "the re-run changed the schema");
    let kept: i64 = sqlx::query_scalar(AssertSqlSafe(
        "SELECT count(*) FROM harel.transport_messages",
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, 1);
    pool.close().await;
}

#[tokio::test]
async fn a_schema_migrated_from_a_different_migration_text_is_refused_and_left_alone() {
    let queue = TestQueue::new().await;
    let checksum = queue.sql("SELECT checksum FROM @schema@._migrations WHERE version = 1");
    let recorded: Option<String> = sqlx::query_scalar(checksum)
        .fetch_one(&queue.pool)
        .await
        .unwrap();
    assert_eq!(
        recorded.map(|c| c.len()),
        Some(32),
        "an md5 checksum is kept"
    );

    // as if migration 1 had been applied from another text (or before checksums existed)
    for tamper in [
        "UPDATE @schema@._migrations SET checksum = md5('another text')",
        "ALTER TABLE @schema@._migrations DROP COLUMN checksum",
    ] {
        sqlx::query(queue.sql(tamper))
            .execute(&queue.pool)
            .await
            .unwrap();
        let error = migrate_schema(&queue.pool, &queue.schema)
            .await
            .expect_err("a changed migration must be refused");
        assert!(
            matches!(
                error,
                harel_jobs::MigrateError::Modified {
                    version: 1,
                    name: "transport"
                }
            ),
            "{tamper}: {error:?}"
        );
        assert!(
            error.to_string().contains("migrate a fresh schema"),
            "{error}"
        );
    }
    // nothing was applied again
    let rows: i64 = sqlx::query_scalar(queue.sql("SELECT count(*) FROM @schema@._migrations"))
        .fetch_one(&queue.pool)
        .await
        .unwrap();
    assert_eq!(rows, i64::from(harel_jobs::SCHEMA_VERSION));
}
