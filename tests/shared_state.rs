//! Locks and shared state, against a real PostgreSQL: what a login granted nothing, or a
//! role that writes more than its share, can do to the queue (issue "Hardening II").
//!
//! - No lock of the queue is one that another login can take: no function and no worker
//!   takes an advisory lock (one namespace for every login of the server), and holding the
//!   keys the queue used to take stops nothing (limited claims, housekeeping, migrate, the
//!   depth sampler's election in tests/metrics.rs).
//! - A claim that its caller gave up on never leases anything later.
//! - A producer cannot fail another producer's batch, or slip a job into another job's
//!   group, through the reserved names of groups of their own.
//! - Rolled-back enqueues do not use up the queue cap; housekeeping sweeps a bounded window
//!   of queues per call.
//! - A changed rate limit takes effect at the next claim.
//! - Worker reports and schedules are bounded, and their listings say what they leave out.

use std::time::{Duration, Instant};

use harel_jobs::transport::{ClaimRequest, OutgoingMessage};
use harel_jobs::{
    Client, DatabaseError, Handler, Job, JobContext, JobResult, QueueLimits, ScheduleQuery,
};
use harel_jobs_suite::{
    PRODUCER_GRANTS, SuiteSchema, TestDatabase, TestRole, WORKER_GRANTS, database_url, pool_with,
};
use serde::{Deserialize, Serialize};
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool};

const LEASE: Duration = Duration::from_secs(60);

fn queue(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

/// The SQLSTATE `sql` fails with on `pool` (`None`: it worked).
async fn sqlstate(pool: &PgPool, sql: String) -> Option<String> {
    match sqlx::raw_sql(AssertSqlSafe(sql)).execute(pool).await {
        Ok(_) => None,
        Err(error) => Some(DatabaseError::from(error).code().unwrap_or_default()),
    }
}

/// A login with no grant at all, connected.
async fn stranger(q: &SuiteSchema) -> (TestRole, PgConnection) {
    let role = TestRole::with_grants(q, &[]).await;
    let connection = PgConnection::connect(&role.url).await.unwrap();
    (role, connection)
}

/// Has `connection` (a login granted nothing) take, for good, every advisory lock key the
/// queue's releases up to schema version 10 took: the claims of limited queues (by queue
/// id), housekeeping, migrate, the depth sampler and the vacuum. Their keys are in the
/// functions' bodies (readable by every role in `pg_proc`) and in the crate's source.
async fn hold_the_old_advisory_keys(connection: &mut PgConnection, q: &SuiteSchema) {
    let name = q.schema.name();
    let quoted = format!("\"{name}\"");
    let mut keys: Vec<(String, i64)> = (0..8)
        .map(|id| (format!("harel-jobs queue {quoted}"), id))
        .collect();
    keys.push((format!("harel-jobs maintain {quoted}"), 0));
    for what in ["migrate", "depth", "vacuum"] {
        keys.push((format!("harel-jobs {what} {name}"), 0));
    }
    for (key, seed) in keys {
        let held: bool =
            sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtextextended($1, $2))")
                .bind(&key)
                .bind(seed)
                .fetch_one(&mut *connection)
                .await
                .unwrap();
        assert!(held, "{key} {seed}");
    }
}

#[tokio::test]
async fn no_queue_function_and_no_worker_takes_an_advisory_lock() {
    let q = SuiteSchema::new().await;
    let functions: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p
          WHERE p.pronamespace = $1::regnamespace AND p.prosrc ILIKE '%advisory%'",
    )
    .bind(format!("\"{}\"", q.schema.name()))
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert!(functions.is_empty(), "advisory locks in {functions:?}");

    // nor does the Rust side (the worker's vacuum and depth sampler, migrate): outside
    // comments, no call of PostgreSQL's advisory lock functions
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("harel-jobs/src");
    let mut offending = Vec::new();
    let mut dirs = vec![src];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let code = line.split("//").next().unwrap_or_default();
                    if code.contains("advisory_lock") || code.contains("advisory_xact_lock") {
                        offending.push(format!("{}:{}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(offending.is_empty(), "advisory locks at {offending:?}");
}

#[derive(Serialize, Deserialize)]
struct Limited {}

impl Job for Limited {
    const KIND: &'static str = "limited";
    const QUEUE: &'static str = "limited";
}

impl Handler<()> for Limited {
    async fn handle(self, _ctx: JobContext<()>) -> JobResult {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_granted_nothing_cannot_stop_a_limited_queue_or_housekeeping() {
    let q = SuiteSchema::new().await;
    let jobs = queue(&q);
    jobs.create_queue("limited").await.unwrap();
    jobs.set_limits("limited", QueueLimits::none().concurrency(5))
        .await
        .unwrap();
    let (role, mut attacker) = stranger(&q).await;
    hold_the_old_advisory_keys(&mut attacker, &q).await;
    // nor can it lock what the queue locks now
    let schema = format!("\"{}\"", q.schema.name());
    let attacker_pool = pool_with(&role.url, 1).await;
    for sql in [
        format!("SELECT 1 FROM {schema}.queues FOR UPDATE"),
        format!("SELECT 1 FROM {schema}.elections FOR UPDATE"),
        format!("BEGIN; LOCK TABLE {schema}._migrations IN EXCLUSIVE MODE; COMMIT"),
    ] {
        assert_eq!(
            sqlstate(&attacker_pool, sql.clone()).await.as_deref(),
            Some("42501"),
            "{sql}"
        );
    }

    let mut batch = jobs.batch();
    for _ in 0..5 {
        batch.push(Limited {}).unwrap();
    }
    batch.enqueue(&q.pool).await.unwrap();
    let handle = jobs
        .worker(())
        .register::<Limited>()
        .queue("limited", 5)
        .database_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
        .start();
    let began = Instant::now();
    while handle.stats().succeeded < 5 {
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the limited queue is stopped: {:?}",
            handle.stats()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.unwrap();

    // housekeeping: a claimable group below its level's floor is brought back
    q.transport
        .publish(&q.pool, &OutgoingMessage::new("straggler", "k", "{}"))
        .await
        .unwrap();
    sqlx::query(q.sql(
        "SELECT setval('@schema@.claim_floor_' || l,
                       (extract(epoch FROM clock_timestamp() + interval '1 hour') * 1000000)::bigint),
                setval('@schema@.fair_floor_q0', 4611686018427387903)
           FROM generate_series(0, 4) AS l",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let lowered: i32 =
        sqlx::query_scalar(q.sql("SELECT floors_lowered FROM @schema@.harel_maintain()"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert_eq!(lowered, 1, "housekeeping did not run");
    attacker.close().await.unwrap();
}

#[tokio::test]
async fn migrate_runs_while_a_login_granted_nothing_holds_what_it_can() {
    let q = SuiteSchema::unmigrated().await;
    let (_role, mut attacker) = stranger(&q).await;
    hold_the_old_advisory_keys(&mut attacker, &q).await;
    tokio::time::timeout(
        Duration::from_secs(60),
        harel_jobs::migrate_schema(&q.pool, &q.schema),
    )
    .await
    .expect("migrate waits for a lock a stranger holds")
    .unwrap();
    attacker.close().await.unwrap();
}

#[tokio::test]
async fn concurrent_migrations_of_a_new_schema_all_succeed() {
    let q = SuiteSchema::unmigrated().await;
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let pool = q.pool.clone();
            let schema = q.schema.clone();
            tokio::spawn(async move { harel_jobs::migrate_schema(&pool, &schema).await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    let version: i32 = sqlx::query_scalar(q.sql("SELECT max(version) FROM @schema@._migrations"))
        .fetch_one(&q.pool)
        .await
        .unwrap();
    assert_eq!(version, harel_jobs::SCHEMA_VERSION);
}

/// A schema whose queue `limited` (a concurrency limit) holds one job, and a session of the
/// owner holding that queue's turn (nobody else can take it) until it commits.
async fn limited_queue_with_its_turn_held() -> (SuiteSchema, PgConnection) {
    let q = SuiteSchema::new().await;
    let jobs = queue(&q);
    jobs.create_queue("limited").await.unwrap();
    jobs.set_limits("limited", QueueLimits::none().concurrency(5))
        .await
        .unwrap();
    q.transport
        .publish(
            &q.pool,
            &OutgoingMessage::new("g", "k", "{}").queue("limited"),
        )
        .await
        .unwrap();
    let mut holder = PgConnection::connect(&database_url()).await.unwrap();
    sqlx::raw_sql(q.sql("BEGIN; SELECT 1 FROM @schema@.queues WHERE name = 'limited' FOR UPDATE"))
        .execute(&mut holder)
        .await
        .unwrap();
    (q, holder)
}

/// A claim waiting for a limited queue's turn, whose caller stops waiting: the server gives
/// up too, and nothing is leased once the turn comes.
#[tokio::test]
async fn a_claim_its_caller_gave_up_on_never_leases_anything() {
    let (q, mut holder) = limited_queue_with_its_turn_held().await;

    let request = ClaimRequest::new(LEASE)
        .queue("limited")
        .max_wait(Duration::from_millis(300));
    let began = Instant::now();
    let claimed = tokio::time::timeout(
        Duration::from_secs(2),
        q.transport.claim_many(&q.pool, &request),
    )
    .await;
    match claimed {
        Ok(Ok(claimed)) => assert!(claimed.is_empty(), "{claimed:?}"),
        Ok(Err(error)) => panic!("the claim failed: {error:?}"),
        Err(_) => {} // abandoned: the server must give up as well
    }
    let waited = began.elapsed();
    sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
    // a claim still waiting on the server would take its turn now
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (leased, attempts): (i64, i64) = sqlx::query_as(q.sql(
        "SELECT count(*) FILTER (WHERE locked_by IS NOT NULL), COALESCE(sum(head_attempts), 0)
           FROM @schema@.transport_groups",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert_eq!(
        (leased, attempts),
        (0, 0),
        "a claim abandoned after {waited:?} leased a job"
    );
    assert!(waited < Duration::from_secs(2), "the server never gave up");
    holder.close().await.unwrap();
}

/// A claim that names no wait waits for a limited queue's turn up to the documented 10 s
/// (it gave up after 1 ms, and ran the rest of the call with a 1 ms lock timeout, which a
/// brief lock such as autovacuum's turned into an error).
#[tokio::test]
async fn a_claim_without_a_wait_of_its_own_waits_for_a_limited_queues_turn() {
    let (q, mut holder) = limited_queue_with_its_turn_held().await;
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        sqlx::raw_sql("COMMIT").execute(&mut holder).await.unwrap();
        holder.close().await.unwrap();
    });

    let began = Instant::now();
    let claimed = q
        .transport
        .claim_many(&q.pool, &ClaimRequest::new(LEASE).queue("limited"))
        .await
        .unwrap();
    let waited = began.elapsed();
    release.await.unwrap();
    assert_eq!(claimed.len(), 1, "gave up after {waited:?}");
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
}

/// Any login can NOTIFY on the queue's channel (no grant needed): a forged position, taken
/// by a claim as its hint, does not lower the claim floors (which would make every claim
/// scan what lies above it); a real one, the position of a group that is there, does.
#[tokio::test]
async fn a_forged_notification_does_not_lower_the_claim_floors() {
    let q = SuiteSchema::new().await;
    let (_role, mut stranger) = stranger(&q).await;
    // the stranger's notification reaches the workers' channel
    let mut listener = sqlx::postgres::PgListener::connect_with(&q.pool)
        .await
        .unwrap();
    listener.listen(&q.schema.channel()).await.unwrap();
    sqlx::query("SELECT pg_notify($1, '0')")
        .bind(q.schema.channel())
        .execute(&mut stranger)
        .await
        .unwrap();
    let forged = listener.recv().await.unwrap();
    let position: i64 = forged.payload().parse().unwrap();

    // a claim on an empty queue raises the floors to about now
    let floors = || async {
        sqlx::query_scalar::<_, i64>(q.sql(
            "SELECT min(last_value) FROM (
                 SELECT last_value FROM @schema@.claim_floor_0 UNION ALL
                 SELECT last_value FROM @schema@.claim_floor_1 UNION ALL
                 SELECT last_value FROM @schema@.claim_floor_2 UNION ALL
                 SELECT last_value FROM @schema@.claim_floor_3 UNION ALL
                 SELECT last_value FROM @schema@.claim_floor_4) AS f",
        ))
        .fetch_one(&q.pool)
        .await
        .unwrap()
    };
    let hinted_claim = |hint: i64| {
        sqlx::query(
            q.sql("SELECT * FROM @schema@.harel_claim(gen_random_uuid(), 60000, 10, 0, $1)"),
        )
        .bind(hint)
        .execute(&q.pool)
    };
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_claim(gen_random_uuid(), 60000, 10)"))
        .execute(&q.pool)
        .await
        .unwrap();
    let raised = floors().await;
    assert!(raised > 0);
    hinted_claim(position).await.unwrap();
    assert_eq!(
        floors().await,
        raised,
        "a forged hint moved a floor (the claim scanned from it)"
    );

    // a real straggler below the floor: its position lowers the floor of its level
    q.transport
        .publish(&q.pool, &OutgoingMessage::new("late", "k", "{}"))
        .await
        .unwrap();
    let at: i64 = sqlx::query_scalar(q.sql(
        "SELECT (extract(epoch FROM available_at) * 1000000)::bigint
           FROM @schema@.transport_groups WHERE group_id = 'late'",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    sqlx::query(q.sql(
        "SELECT setval('@schema@.claim_floor_' || l, $1 + 1000000) FROM generate_series(0, 4) AS l",
    ))
    .bind(at)
    .execute(&q.pool)
    .await
    .unwrap();
    let claimed: Vec<(String,)> = sqlx::query_as(
        q.sql("SELECT group_id FROM @schema@.harel_claim(gen_random_uuid(), 60000, 10, 0, $1)"),
    )
    .bind(at)
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(claimed, [("late".to_owned(),)]);
    stranger.close().await.unwrap();
}

/// `own:` and a seq in 19 digits: the name of the group of that job, when it has none.
fn own(seq: i64) -> String {
    format!("own:{seq:019}")
}

/// One raw `harel_publish` of a job into `group` (as a caller bypassing the Rust checks),
/// into `queue`; its id.
async fn publish_raw(
    executor: &mut PgConnection,
    q: &SuiteSchema,
    group: &str,
    queue: &str,
) -> i64 {
    sqlx::query_scalar(q.sql(
        "SELECT s FROM @schema@.harel_publish(ARRAY[$1], ARRAY['k'], ARRAY['{}'],
                ARRAY[0::smallint], ARRAY[NULL::timestamptz], ARRAY[NULL::bigint],
                NULL, NULL, ARRAY[$2]) AS s",
    ))
    .bind(group)
    .bind(queue)
    .fetch_one(executor)
    .await
    .unwrap()
}

/// The group of job `id`.
async fn group_of(q: &SuiteSchema, id: i64) -> String {
    sqlx::query_scalar(q.sql("SELECT group_id FROM @schema@.jobs WHERE seq = $1"))
        .bind(id)
        .fetch_one(&q.pool)
        .await
        .unwrap()
}

/// Producer B names a group after the first id producer A's batch has drawn and not yet
/// inserted (A waits for B's new queue, in the middle of its publish), then lets A go on:
/// A's batch is queued whole, and B's job has a group of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_cannot_fail_another_producers_batch_by_a_reserved_group_name() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, PRODUCER_GRANTS).await;
    let mut b = PgConnection::connect(&role.url).await.unwrap();
    sqlx::raw_sql("BEGIN").execute(&mut b).await.unwrap();
    let before = publish_raw(&mut b, &q, "b-first", "race").await;

    const BATCH: usize = 2_000;
    let a_pool = pool_with(&role.url, 1).await;
    let transport = q.transport.clone();
    let a = tokio::spawn(async move {
        let batch: Vec<OutgoingMessage> = (0..BATCH)
            .map(|_| {
                OutgoingMessage::new("", "k", "{}")
                    .in_own_group()
                    .queue("race")
            })
            .collect();
        transport.publish_many(&a_pool, &batch).await
    });
    // A has drawn its ids and waits for B's queue
    let began = Instant::now();
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE usename = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&role.name)
        .fetch_one(&q.pool)
        .await
        .unwrap();
        if waiting == 1 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(30), "A never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let taken = publish_raw(&mut b, &q, &own(before + 1), "race").await;
    sqlx::raw_sql("COMMIT").execute(&mut b).await.unwrap();

    let published = a.await.unwrap().expect("A's batch failed");
    assert_eq!(published.len(), BATCH);
    assert_eq!(published[0].get(), before + 1, "the id B aimed at");
    assert_eq!(group_of(&q, before + 1).await, own(before + 1));
    assert_eq!(
        group_of(&q, taken).await,
        own(taken),
        "B's job in A's group"
    );
    assert_eq!(q.count("jobs").await, BATCH as i64 + 2);
    b.close().await.unwrap();
}

/// A raw publish into the group of another's job that has no group gets a group of its own.
#[tokio::test]
async fn a_producer_cannot_slip_a_job_into_another_jobs_own_group() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, PRODUCER_GRANTS).await;
    let victim = q
        .transport
        .publish(&q.pool, &OutgoingMessage::new("", "k", "{}").in_own_group())
        .await
        .unwrap()
        .get();
    let mut producer = PgConnection::connect(&role.url).await.unwrap();
    let slipped = publish_raw(&mut producer, &q, &own(victim), "default").await;
    assert_eq!(group_of(&q, victim).await, own(victim));
    assert_eq!(group_of(&q, slipped).await, own(slipped));
    producer.close().await.unwrap();
}

/// 1,000 first enqueues into new queue names, each rolled back, leave every id free; the
/// cap counts the queues that exist. Then, with 1,000 named queues, each housekeeping call
/// sweeps the default queue and a window of the others, and finds a straggler in the last
/// one within a bounded number of calls.
#[tokio::test]
async fn the_queue_cap_counts_queues_that_exist_and_housekeeping_sweeps_a_window() {
    // a database of its own: a schema at the cap holds over 10,000 sequences, more than one
    // transaction of a stock server can lock (max_locks_per_transaction 64 x 100
    // connections), so DROP SCHEMA would fail where DROP DATABASE does not
    let db = TestDatabase::new().await;
    let q = SuiteSchema::new_at(&db.url).await;
    let mut connection = PgConnection::connect(&db.url).await.unwrap();
    for n in 0..1_000 {
        sqlx::raw_sql("BEGIN")
            .execute(&mut connection)
            .await
            .unwrap();
        publish_raw(&mut connection, &q, "g", &format!("rolled-back-{n}")).await;
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut connection)
            .await
            .unwrap();
    }
    let jobs = queue(&q);
    jobs.create_queue("operator-made")
        .await
        .expect("the cap was used up by rollbacks");
    publish_raw(&mut connection, &q, "g", "first-real").await;
    assert_eq!(q.count("queues").await, 3, "default and the two");

    // fill the cap: 1,000 named queues (100 a transaction: each creates its sequences)
    for first in (1..=998).step_by(100) {
        let last = (first + 99).min(998);
        sqlx::raw_sql(AssertSqlSafe(
            q.sql(&format!(
                "SELECT @schema@.harel_ensure_queue('q-' || n)
                   FROM generate_series({first}, {last}) AS n"
            ))
            .0,
        ))
        .execute(&q.pool)
        .await
        .unwrap();
    }
    assert_eq!(q.count("queues").await, 1_001);
    let refused = sqlstate(
        &q.pool,
        q.sql("SELECT @schema@.harel_ensure_queue('one-too-many')")
            .0,
    )
    .await;
    assert_eq!(refused.as_deref(), Some("54000"));

    // a straggler below the floor of the last queue
    let last: i16 = sqlx::query_scalar(q.sql("SELECT max(id) FROM @schema@.queues"))
        .fetch_one(&q.pool)
        .await
        .unwrap();
    let name: String = sqlx::query_scalar(q.sql("SELECT name FROM @schema@.queues WHERE id = $1"))
        .bind(last)
        .fetch_one(&q.pool)
        .await
        .unwrap();
    publish_raw(&mut connection, &q, "straggler", &name).await;
    sqlx::query(AssertSqlSafe(q.sql(&format!(
        "SELECT setval('@schema@.claim_floor_q{last}_' || l,
                       (extract(epoch FROM clock_timestamp() + interval '1 hour') * 1000000)::bigint),
                setval('@schema@.fair_floor_q{last}', 4611686018427387903)
           FROM generate_series(0, 4) AS l"
    )).0))
    .execute(&q.pool)
    .await
    .unwrap();
    let mut calls = 0;
    let mut swept = Vec::new();
    loop {
        calls += 1;
        let lowered: i32 =
            sqlx::query_scalar(q.sql("SELECT floors_lowered FROM @schema@.harel_maintain()"))
                .fetch_one(&q.pool)
                .await
                .unwrap();
        let at: i64 = sqlx::query_scalar(q.sql("SELECT last_value FROM @schema@.maintain_sweep"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
        swept.push(at);
        if lowered > 0 {
            break;
        }
        assert!(
            calls < 20,
            "not found after {calls} calls (swept to {swept:?})"
        );
    }
    // each call went at most 64 queues further
    assert!(
        swept.windows(2).all(|w| w[1] > w[0] && w[1] - w[0] <= 64),
        "{swept:?}"
    );
    connection.close().await.unwrap();
}

/// After a limit of 1 start per day started a job, a raised limit (or one removed and set
/// again) starts jobs at once, not a day later.
#[tokio::test]
async fn a_changed_rate_limit_takes_effect_at_the_next_claim() {
    let q = SuiteSchema::new().await;
    let jobs = queue(&q);
    let day = Duration::from_secs(86_400);
    jobs.create_queue("rated").await.unwrap();
    jobs.set_limits("rated", QueueLimits::none().rate(1, day))
        .await
        .unwrap();
    let batch: Vec<OutgoingMessage> = (0..100)
        .map(|_| {
            OutgoingMessage::new("", "k", "{}")
                .in_own_group()
                .queue("rated")
        })
        .collect();
    q.transport.publish_many(&q.pool, &batch).await.unwrap();
    let claim = || async {
        q.transport
            .claim_many(&q.pool, &ClaimRequest::new(LEASE).queue("rated").limit(10))
            .await
            .unwrap()
            .len()
    };
    // claims until `n` jobs started (within 10 s)
    let starts = |n: usize, what: &'static str| async move {
        let began = Instant::now();
        let mut started = 0;
        while started < n {
            started += claim().await;
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "{what}: {started} started"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    assert_eq!(claim().await, 1, "the day's start");
    assert_eq!(claim().await, 0, "limited");

    // raised: starts within a moment (one interval of the new limit, a millisecond)
    jobs.set_limits(
        "rated",
        QueueLimits::none().rate(1_000, Duration::from_secs(1)),
    )
    .await
    .unwrap();
    starts(2, "the raised limit").await;

    // 1 a day again, which starts one; then removed, and set again higher
    jobs.set_limits("rated", QueueLimits::none().rate(1, day))
        .await
        .unwrap();
    starts(1, "the day's start").await;
    assert_eq!(claim().await, 0, "limited");
    jobs.set_limits("rated", QueueLimits::none()).await.unwrap();
    assert_eq!(claim().await, 10, "unlimited");
    jobs.set_limits(
        "rated",
        QueueLimits::none().rate(10, Duration::from_millis(100)),
    )
    .await
    .unwrap();
    starts(2, "the limit set again").await;
}

/// One `harel_worker_report` as `pool`'s role; its SQLSTATE if refused.
async fn report(pool: &PgPool, q: &SuiteSchema, queues: &str, count: &str) -> Option<String> {
    sqlstate(
        pool,
        q.sql(&format!(
            "SELECT @schema@.harel_worker_report(gen_random_uuid(), 'host', 1, {queues}, 1, 0,
                    {count}, {count}, {count}, false)"
        ))
        .0,
    )
    .await
}

/// The worker role reports what it likes: every field is bounded, sums saturate, the pools
/// kept are bounded, and the listing says how many it leaves out.
#[tokio::test]
async fn worker_reports_are_bounded_and_listings_say_what_they_leave_out() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, WORKER_GRANTS).await;
    let worker = pool_with(&role.url, 1).await;
    let long = "x".repeat(65);
    for queues in [
        format!("ARRAY['{long}']"),
        "ARRAY['a b']".to_owned(),
        "ARRAY['a', 'a']".to_owned(),
        "ARRAY[NULL]::text[]".to_owned(),
        "(SELECT array_agg('q' || n) FROM generate_series(1, 1001) AS n)".to_owned(),
    ] {
        assert_eq!(
            report(&worker, &q, &queues, "0").await.as_deref(),
            Some("22023"),
            "{queues}"
        );
    }
    // counters near the top of BIGINT, twice in one minute: the sums saturate
    for _ in 0..2 {
        assert_eq!(
            report(&worker, &q, "ARRAY['a']", "9223372036854775806").await,
            None
        );
    }
    let jobs = queue(&q);
    let minutes = jobs.throughput(5).await.expect("the throughput overflowed");
    assert!(
        minutes.iter().any(|m| m.succeeded == i64::MAX as u64),
        "{minutes:?}"
    );

    // 10,050 pools, the first 30 serving 1,000 queues of 64 characters each
    sqlx::raw_sql(q.sql(
        "SELECT @schema@.harel_worker_report(gen_random_uuid(), 'host', n, names.queues, 1, 0,
                1, 0, 0, false)
           FROM generate_series(1, 30) AS n,
                (SELECT array_agg(lpad(i::text, 64, 'q')) AS queues
                   FROM generate_series(1, 1000) AS i) AS names",
    ))
    .execute(&worker)
    .await
    .unwrap();
    sqlx::raw_sql(q.sql(
        "SELECT @schema@.harel_worker_report(gen_random_uuid(), 'host', n, ARRAY['a'], 1, 0,
                1, 0, 0, false)
           FROM generate_series(31, 10050) AS n",
    ))
    .execute(&worker)
    .await
    .unwrap();
    let list = jobs.workers(Duration::from_secs(300), 20).await.unwrap();
    assert_eq!(list.workers.len(), 20);
    assert_eq!(list.total, 10_001, "counted up to 10,001");
    assert!(list.not_shown() > 0);
    // the oldest first: the two above, then pools of 1,000 queues, each listed with 100
    let big: Vec<_> = list
        .workers
        .iter()
        .filter(|w| w.queue_count == 1_000)
        .collect();
    assert_eq!(big.len(), 18, "{:?}", list.workers);
    for pool in big {
        assert_eq!(
            pool.queues.len(),
            harel_jobs::MAX_WORKER_QUEUES_LISTED as usize
        );
    }
    // housekeeping keeps the 10,000 pools seen last (1,000 removed a call)
    for _ in 0..2 {
        sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
            .execute(&q.pool)
            .await
            .unwrap();
    }
    assert_eq!(q.count("workers").await, 10_000);
}

/// A pool's last report, at its shutdown, is final: a periodic report the shutdown
/// interrupted, whose statement still ran after it, does not make the pool look running
/// again (seen on a loaded machine: the dashboard showed a stopped pool as running).
#[tokio::test]
async fn a_stopped_pools_report_is_final() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, WORKER_GRANTS).await;
    let worker = pool_with(&role.url, 1).await;
    let id = uuid::Uuid::new_v4();
    let report = |succeeded: i64, stopping: bool| {
        sqlx::query(q.sql(
            "SELECT @schema@.harel_worker_report($1, 'host', 1, ARRAY['default'], 1, 0,
                    $2, 0, 0, $3)",
        ))
        .bind(id)
        .bind(succeeded)
        .bind(stopping)
        .execute(&worker)
    };
    report(5, false).await.unwrap();
    report(7, true).await.unwrap();
    // the interrupted one, older and lower, arrives last
    report(6, false).await.unwrap();
    let jobs = queue(&q);
    let list = jobs.workers(Duration::from_secs(300), 20).await.unwrap();
    let pool = list
        .workers
        .iter()
        .find(|pool| pool.id == id)
        .expect("the pool is listed");
    assert!(pool.stopped_at.is_some(), "{pool:?}");
    assert_eq!(pool.succeeded, 7, "{pool:?}");
    let minutes = jobs.throughput(5).await.unwrap();
    assert_eq!(minutes.iter().map(|m| m.succeeded).sum::<u64>(), 7);
}

/// The worker role declares schedules: at most 1,000 per schema, and the operator's
/// listing pages through every one, with the total.
#[tokio::test]
async fn schedules_are_bounded_and_listed_a_page_at_a_time() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, WORKER_GRANTS).await;
    let worker = pool_with(&role.url, 1).await;
    let declare = |name: String| {
        q.sql(&format!(
            "SELECT @schema@.harel_schedule_fire({name}, 'every 1s', NULL, now(), NULL, 'k', '{{}}',
                    0::smallint)"
        ))
        .0
    };
    // 999 names that sort before a real one
    sqlx::raw_sql(AssertSqlSafe(format!(
        "{} FROM generate_series(1, 999) AS n",
        declare("'!' || lpad(n::text, 5, '0')".to_owned())
    )))
    .execute(&worker)
    .await
    .unwrap();
    assert_eq!(sqlstate(&worker, declare("'real'".to_owned())).await, None);
    assert_eq!(
        sqlstate(&worker, declare("'one-too-many'".to_owned()))
            .await
            .as_deref(),
        Some("54000")
    );

    let jobs = queue(&q);
    let mut names = Vec::new();
    let mut query = ScheduleQuery::new().limit(300);
    loop {
        let page = jobs.schedules(&query).await.unwrap();
        assert_eq!(page.total, 1_000);
        names.extend(page.schedules.into_iter().map(|s| s.name));
        match page.next {
            Some(next) => query = ScheduleQuery::new().limit(300).after(next),
            None => break,
        }
    }
    assert_eq!(names.len(), 1_000);
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    assert!(names.contains(&"real".to_owned()));

    // an operator forgets one; a new name fits again
    assert!(jobs.delete_schedule("!00001").await.unwrap());
    assert!(!jobs.delete_schedule("!00001").await.unwrap());
    assert_eq!(
        sqlstate(&worker, declare("'one-more'".to_owned())).await,
        None
    );
}
