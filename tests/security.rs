//! Attacks on the queue from inside the database: a hostile `search_path`, and roles that
//! try to do more than their grants are for. Each test uses its own schema and roles.

use std::time::Duration;

use harel_jobs::transport::{
    ClaimRequest, Lease, LeaseOutcome, LeaseToken, OutgoingMessage, Settlement,
};
use harel_jobs::{Client, Count, DatabaseError, DeadLetterQuery, Stats, TransportError};
use harel_jobs_suite::{
    OPERATOR_GRANTS, PRODUCER_GRANTS, SuiteSchema, TestRole, WORKER_GRANTS, pool_with,
};
use sqlx::{AssertSqlSafe, Executor, PgPool};

/// A job of the workflows the roles enqueue.
#[derive(serde::Serialize, serde::Deserialize)]
struct Note {
    n: u32,
}

impl harel_jobs::Job for Note {
    const KIND: &'static str = "note";
}

const LONG: Duration = Duration::from_secs(600);

fn db(error: TransportError) -> DatabaseError {
    match error {
        TransportError::Database(e) => e,
        other => panic!("not a database error: {other:?}"),
    }
}

/// Runs `sql` as the pool's role and returns the SQLSTATE it fails with (`None`: it worked).
async fn sqlstate(pool: &PgPool, sql: String) -> Option<String> {
    match sqlx::raw_sql(AssertSqlSafe(sql)).execute(pool).await {
        Ok(_) => None,
        Err(error) => Some(DatabaseError::from(error).code().unwrap_or_default()),
    }
}

/// A schema of hostile look-alikes on the caller's search_path: `*(bigint, interval)` (which
/// `pg_catalog` has no exact match for), `cardinality(text[])` and `unnest(text[])` (more
/// specific than `pg_catalog`'s polymorphic ones). Each records its call and lies.
async fn plant_hostile_functions(q: &SuiteSchema, schema: &str) {
    let sql = format!(
        r#"
        CREATE SCHEMA "{schema}";
        CREATE TABLE "{schema}".calls (what text, by_role text);
        CREATE FUNCTION "{schema}".times(bigint, interval) RETURNS interval
            LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO "{schema}".calls VALUES ('*', current_user);
                RETURN interval '-1 hour';  -- every lease born expired
            END $$;
        CREATE OPERATOR "{schema}".* (LEFTARG = bigint, RIGHTARG = interval,
                                      FUNCTION = "{schema}".times);
        CREATE FUNCTION "{schema}".cardinality(text[]) RETURNS int
            LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO "{schema}".calls VALUES ('cardinality', current_user);
                RETURN 0;
            END $$;
        CREATE FUNCTION "{schema}".unnest(text[]) RETURNS SETOF text
            LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO "{schema}".calls VALUES ('unnest', current_user);
            END $$;
        "#
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&q.pool)
        .await
        .unwrap();
}

/// A pool whose sessions search `schema` first, as an application's might.
async fn pool_searching(schema: &str) -> PgPool {
    let url = harel_jobs_suite::database_url();
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let options = options.options([("search_path", format!("\"{schema}\", public"))]);
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap()
}

#[tokio::test]
async fn no_queue_function_runs_what_a_hostile_search_path_offers() {
    let q = SuiteSchema::new().await;
    let hostile = harel_jobs_suite::unique_name("evil");
    plant_hostile_functions(&q, &hostile).await;
    let caller = pool_searching(&hostile).await;
    // the look-alikes are really what this session would pick
    let picked: String = sqlx::query_scalar("SELECT (2::bigint * interval '1 second')::text")
        .fetch_one(&caller)
        .await
        .unwrap();
    assert_eq!(picked, "-01:00:00", "the hostile operator is on the path");
    sqlx::query(AssertSqlSafe(format!("DELETE FROM \"{hostile}\".calls")))
        .execute(&q.pool)
        .await
        .unwrap();

    // every function, through the path: publish (one, and a batch with a delay), claim,
    // extend, settle (release with a delay, ack, dead letter), maintain
    let t = &q.transport;
    t.publish(&caller, &OutgoingMessage::new("g1", "k", "{}"))
        .await
        .unwrap();
    let batch = [
        OutgoingMessage::new("g2", "k", "{}"),
        OutgoingMessage::new("g3", "k", "{}"),
        OutgoingMessage::new("g4", "k", "{}").delay(Duration::from_millis(1)),
    ];
    t.publish_many(&caller, &batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let claimed = t
        .claim_many(&caller, &ClaimRequest::new(LONG).limit(4))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4);
    let leases: Vec<Lease> = claimed.iter().map(|m| m.lease.clone()).collect();
    let lease_left: f64 = sqlx::query_scalar(q.sql(
        "SELECT min(extract(epoch FROM available_at - now()))::float8 \
         FROM @schema@.transport_groups WHERE locked_by IS NOT NULL",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert!(lease_left > 500.0, "leases shortened to {lease_left} s");
    assert!(
        t.extend_many(&caller, &leases, LONG)
            .await
            .unwrap()
            .is_empty()
    );
    let settlements = vec![
        (
            leases[0].clone(),
            Settlement::Release {
                delay: Duration::from_secs(60),
                error: Some("later".into()),
                count_attempt: true,
            },
        ),
        (leases[1].clone(), Settlement::Ack),
        (leases[2].clone(), Settlement::dead_letter("no")),
        (leases[3].clone(), Settlement::Ack),
    ];
    let outcomes = t.settle_many(&caller, &settlements, None).await.unwrap();
    assert!(outcomes.iter().all(|o| *o == LeaseOutcome::Applied));
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
        .execute(&caller)
        .await
        .unwrap();

    let calls: Vec<(String, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT what, by_role FROM \"{hostile}\".calls"
    )))
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert!(calls.is_empty(), "hostile functions ran: {calls:?}");
    let parked: f64 = sqlx::query_scalar(q.sql(
        "SELECT extract(epoch FROM available_at - now())::float8 \
         FROM @schema@.transport_groups WHERE group_id = $1",
    ))
    .bind(&leases[0].group)
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert!(
        parked > 50.0,
        "the release's delay was computed as {parked} s"
    );
    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA \"{hostile}\" CASCADE")))
        .execute(&q.pool)
        .await
        .unwrap();
}

/// Everything a producer must not do, each answered with SQLSTATE 42501.
fn producer_must_not(q: &SuiteSchema) -> Vec<String> {
    let s = format!("\"{}\"", q.schema.name());
    vec![
        format!("SELECT payload FROM {s}.transport_messages"),
        format!("SELECT * FROM {s}.transport_groups"),
        format!("SELECT * FROM {s}.dead_letters"),
        format!("UPDATE {s}.transport_groups SET locked_by = NULL, head_attempts = 0"),
        format!("UPDATE {s}.transport_groups SET available_at = 'infinity'"),
        format!("DELETE FROM {s}.transport_messages"),
        format!("DELETE FROM {s}.dead_letters"),
        format!(
            "INSERT INTO {s}.transport_messages (group_id, kind, payload, priority) \
             VALUES (repeat('x', 2000), 'k', '{{}}', 2)"
        ),
        format!("SELECT * FROM {s}.harel_claim(gen_random_uuid(), 60000, 10, 0)"),
        format!("SELECT * FROM {s}.harel_maintain()"),
        format!("SELECT * FROM {s}.harel_resolve_backlog(1000)"),
        format!("SELECT * FROM {s}.dependency_backlog"),
        format!(
            "SELECT * FROM {s}.harel_extend(ARRAY['g'], ARRAY[1::bigint], \
             ARRAY[gen_random_uuid()], 60000)"
        ),
        format!("SELECT {s}.harel_drop_empty_groups(ARRAY['g'], 200)"),
        format!("SELECT * FROM {s}.harel_job(1)"),
        format!("SELECT * FROM {s}.harel_list_jobs(NULL, NULL, NULL, 0, 10)"),
        format!("SELECT * FROM {s}.harel_list_jobs_newest(NULL, NULL, NULL, NULL, 10)"),
        format!("SELECT {s}.harel_queued_state(true, true, now(), 1, NULL, now())"),
        format!("SELECT {s}.harel_cancel(1, NULL, 0)"),
        format!("SELECT {s}.harel_run_now(1)"),
        format!("SELECT * FROM {s}.harel_cancel_group('g', NULL, 0, 10)"),
        format!("SELECT * FROM {s}.job_history"),
        format!("DELETE FROM {s}.unique_keys"),
        format!("SELECT {s}.harel_take_key('k', 1, NULL)"),
        format!("SELECT {s}.harel_release_key('k', 1, false)"),
        format!("SELECT {s}.harel_end_cancelled(ARRAY['g'])"),
        format!("SELECT {s}.harel_move_on('g')"),
        format!(
            "SELECT {s}.harel_schedule_fire('x', 'every 1s', now(), now(), 'g', 'k', '{{}}', \
             2::smallint)"
        ),
        format!("SELECT * FROM {s}.harel_schedules(NULL)"),
        format!("SELECT {s}.harel_schedule_control('x', 'pause')"),
        format!("DELETE FROM {s}.schedules"),
        format!("SELECT * FROM {s}.harel_set_queue('default', true)"),
        format!("SELECT * FROM {s}.harel_queues()"),
        format!("SELECT * FROM {s}.harel_depth()"),
        format!("SELECT * FROM {s}.harel_top_groups('waiting', 10)"),
        format!("SELECT * FROM {s}.harel_top_groups('size', 10)"),
        format!("SELECT {s}.harel_ensure_queue('made_up')"),
        format!("UPDATE {s}.queues SET paused_at = now()"),
        format!("SELECT * FROM {s}.queues"),
        format!(
            "SELECT {s}.harel_worker_report(gen_random_uuid(), 'h', 1, ARRAY['default'], 1, 0, \
             0, 0, 0, false)"
        ),
        format!("SELECT * FROM {s}.harel_workers(60000)"),
        format!("SELECT * FROM {s}.harel_throughput(10)"),
        format!("SELECT * FROM {s}.harel_throughput_by_queue(10, 8)"),
        format!("SELECT * FROM {s}.harel_retry_dead_letters(ARRAY[1::bigint])"),
        format!("SELECT * FROM {s}.workers"),
        format!("DELETE FROM {s}.throughput"),
        format!("SELECT * FROM {s}.job_steps"),
        format!("DELETE FROM {s}.job_steps"),
        format!("SELECT * FROM {s}.harel_steps('g', 1, gen_random_uuid())"),
        format!("SELECT * FROM {s}.harel_record_step('g', 1, gen_random_uuid(), 'n', '1')"),
        format!("SELECT * FROM {s}.job_waits"),
        format!("DELETE FROM {s}.job_dependencies"),
        format!("SELECT * FROM {s}.workflows"),
        format!("UPDATE {s}.workflow_tasks SET outcome = NULL"),
        format!(
            "SELECT {s}.harel_schedule_fire('nightly', 'every 60s', now(), NULL, NULL, 'k', \
             '{{}}', 2::smallint, NULL, NULL, NULL, now())"
        ),
        format!("UPDATE {s}.schedules SET paused_at = now()"),
        format!(
            "SELECT {s}.harel_hold(ARRAY[2::bigint], ARRAY['g'], NULL, ARRAY[1], ARRAY[1::bigint], ARRAY[false], NULL, NULL)"
        ),
        format!("SELECT {s}.harel_resolve_dependents(ARRAY[1::bigint], ARRAY['completed'])"),
        format!(
            "SELECT {s}.harel_release_waiting(ARRAY[1::bigint], ARRAY['g'], ARRAY[NULL::timestamptz])"
        ),
        format!("SELECT * FROM {s}.harel_workflows(NULL, NULL, 10)"),
        format!("SELECT * FROM {s}.harel_workflow(1)"),
        format!("SELECT * FROM {s}.harel_workflow_tasks(1, 0, 10)"),
        format!("SELECT * FROM {s}.harel_cancel_workflow(1, NULL, 0, NULL, 10)"),
        format!("SELECT * FROM {s}.harel_retry_workflow(1)"),
        format!("SELECT * FROM {s}.harel_workflow_task('g', 1, gen_random_uuid())"),
        format!("SELECT * FROM {s}.harel_job_workflow(1)"),
        format!("SELECT * FROM {s}.harel_retry_tasks(1, ARRAY[1])"),
        format!("SELECT {s}.harel_prune_workflows()"),
        format!("SELECT * FROM {s}.workflow_reruns"),
        format!("SELECT * FROM {s}.job_attempts"),
        format!("SELECT * FROM {s}.harel_job_attempts(1)"),
        format!("SELECT {s}.harel_jobs_gone(ARRAY[1::bigint])"),
        format!("SELECT {s}.harel_queue_id('default', false)"),
        format!(
            "SELECT {s}.harel_record_attempts(ARRAY[1::bigint], ARRAY[1], ARRAY[now()], \
             ARRAY['failed'], ARRAY['e'], now(), NULL)"
        ),
    ]
}

/// A producer may make its jobs wait only for jobs its own transaction enqueued (ADR 0037):
/// naming any other job is refused the same way whether that job is queued, completed and
/// kept, a dead letter, or unknown, so that an enqueue tells a producer nothing about jobs
/// it did not write (before, "unknown" was a refusal of its own and the others were
/// accepted: a binary search found the newest id, and each answer said whether a job was
/// queued or kept). A role that may read jobs (`EXECUTE` on `harel_job`) may name any.
#[tokio::test]
async fn a_producer_learns_nothing_from_the_jobs_it_names_as_parents() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, PRODUCER_GRANTS).await;
    let producer = pool_with(&role.url, 2).await;
    let t = &q.transport;
    // someone else's jobs: queued, completed and kept, a dead letter; and an id nobody has
    let queued = t
        .publish(&q.pool, &OutgoingMessage::new("a", "k", "{}"))
        .await
        .unwrap();
    let kept = t
        .publish(&q.pool, &OutgoingMessage::new("b", "k", "{}"))
        .await
        .unwrap();
    let dead = t
        .publish(&q.pool, &OutgoingMessage::new("c", "k", "{}"))
        .await
        .unwrap();
    for _ in 0..2 {
        let claimed = t
            .claim(&q.pool, &ClaimRequest::new(LONG))
            .await
            .unwrap()
            .unwrap();
        let settlement = if claimed.lease.id == kept {
            Settlement::Retain { keep: LONG }
        } else {
            Settlement::DeadLetter {
                error: "no".into(),
                attempts: None,
            }
        };
        assert!(
            t.settle(&q.pool, &claimed.lease, settlement)
                .await
                .unwrap()
                .is_applied()
        );
    }
    // (an id drawn by a transaction that rolled back: older than any new job, and no job's)
    let mut tx = q.pool.begin().await.unwrap();
    let unknown = t
        .publish(&mut *tx, &OutgoingMessage::new("never", "k", "{}"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut refusals = Vec::new();
    for parent in [queued, kept, dead, unknown] {
        let mut tx = producer.begin().await.unwrap();
        let refused = t
            .publish(
                &mut *tx,
                &OutgoingMessage::new("d", "k", "{}").after([parent]),
            )
            .await
            .expect_err("a producer may not name another transaction's job");
        refusals.push(refused.to_string().replace(&parent.to_string(), "N"));
        match refused {
            harel_jobs::PublishError::ForeignParent { parent: named } => assert_eq!(named, parent),
            other => panic!("{parent}: {other:?}"),
        }
        tx.rollback().await.unwrap();
    }
    refusals.dedup();
    assert_eq!(refusals.len(), 1, "every answer alike: {refusals:?}");
    assert_eq!(q.count("job_dependencies").await, 0);

    // its own transaction's jobs, named by id, are what it may wait for
    let mut tx = producer.begin().await.unwrap();
    let own = t
        .publish(&mut *tx, &OutgoingMessage::new("e", "k", "{}"))
        .await
        .unwrap();
    t.publish(&mut *tx, &OutgoingMessage::new("e", "k", "{}").after([own]))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(q.count("job_dependencies").await, 1);

    // a role that may read jobs may name any (and hears what it could read anyway)
    let reader = TestRole::with_grants(
        &q,
        &[
            "USAGE ON SCHEMA @schema@",
            "EXECUTE ON FUNCTION @schema@.harel_publish",
            "EXECUTE ON FUNCTION @schema@.harel_job",
        ],
    )
    .await;
    let reader = pool_with(&reader.url, 2).await;
    for parent in [queued, kept, dead] {
        t.publish(
            &reader,
            &OutgoingMessage::new("f", "k", "{}").after([parent]),
        )
        .await
        .unwrap();
    }
    let unknown = t
        .publish(
            &reader,
            &OutgoingMessage::new("f", "k", "{}").after([unknown]),
        )
        .await
        .expect_err("unknown");
    assert!(
        matches!(unknown, harel_jobs::PublishError::UnknownParent { .. }),
        "{unknown:?}"
    );
    producer.close().await;
    reader.close().await;
}

#[tokio::test]
async fn a_producer_can_enqueue_and_do_nothing_else() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, PRODUCER_GRANTS).await;
    let producer = pool_with(&role.url, 2).await;
    let t = &q.transport;

    // what it is for: enqueue into new and existing groups, one or many, in a transaction
    let mut tx = producer.begin().await.unwrap();
    t.publish(&mut *tx, &OutgoingMessage::new("held", "k", r#"{"n":1}"#))
        .await
        .unwrap();
    let batch = [
        OutgoingMessage::new("held", "k", r#"{"n":2}"#),
        OutgoingMessage::new("other", "k", r#"{"n":3}"#),
    ];
    t.publish_many(&mut *tx, &batch).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(q.count("jobs").await, 3);
    // and jobs that wait for others, and a workflow (what it enqueued only: a producer
    // cannot look a job up, so its parents are its own)
    let as_producer = harel_jobs::Client::with_schema(producer.clone(), q.schema.clone());
    let mut tx = producer.begin().await.unwrap();
    let parent = t
        .publish(&mut *tx, &OutgoingMessage::new("p", "k", "{}"))
        .await
        .unwrap();
    t.publish(
        &mut *tx,
        &OutgoingMessage::new("c", "k", "{}").after([parent]),
    )
    .await
    .unwrap();
    let mut workflow = as_producer.workflow("w");
    let first = workflow
        .task("first", Note { n: 1 }, &harel_jobs::EnqueueOptions::new())
        .unwrap();
    workflow
        .task(
            "second",
            Note { n: 2 },
            &harel_jobs::EnqueueOptions::new().after([first]),
        )
        .unwrap();
    workflow.enqueue(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(q.count("jobs").await, 7);

    // a worker holds "held"
    let held = t
        .claim(&q.pool, &ClaimRequest::new(LONG))
        .await
        .unwrap()
        .unwrap();
    let before: (Option<uuid::Uuid>, i32) = sqlx::query_as(
        q.sql("SELECT locked_by, head_attempts FROM @schema@.transport_groups WHERE group_id = $1"),
    )
    .bind(&held.lease.group)
    .fetch_one(&q.pool)
    .await
    .unwrap();

    for sql in producer_must_not(&q) {
        assert_eq!(
            sqlstate(&producer, sql.clone()).await.as_deref(),
            Some("42501"),
            "a producer ran: {sql}"
        );
    }
    let settle = t.ack(&producer, &held.lease).await.expect_err("settle");
    assert!(db(settle).is_permission_denied());
    let claim = t
        .claim(&producer, &ClaimRequest::new(LONG))
        .await
        .expect_err("claim");
    assert!(db(claim).is_permission_denied());

    // calling the function directly cannot get past the checks the Rust side makes
    let s = format!("\"{}\"", q.schema.name());
    for bad in [
        "repeat('x', 2000), 'k', '{}', 2::smallint",
        "'', 'k', '{}', 2::smallint",
        "'g', '', '{}', 2::smallint",
        "'g', 'k', 'not json', 2::smallint",
        "'g', 'k', '{}', 9::smallint",
    ] {
        let sql = format!(
            "SELECT {s}.harel_publish(ARRAY[x.g], ARRAY[x.k], ARRAY[x.p], ARRAY[x.pr], \
             ARRAY[NULL::timestamptz], ARRAY[NULL::bigint]) \
             FROM (SELECT {bad}) AS x(g, k, p, pr)"
        );
        let code = sqlstate(&producer, sql).await;
        assert!(
            matches!(code.as_deref(), Some("22023" | "22P02")),
            "{bad}: {code:?}"
        );
    }
    let forever = format!(
        "SELECT {s}.harel_publish(ARRAY['held'], ARRAY['k'], ARRAY['{{}}'], ARRAY[2::smallint], \
         ARRAY['infinity'::timestamptz], ARRAY[NULL::bigint])"
    );
    assert_eq!(sqlstate(&producer, forever).await.as_deref(), Some("22023"));
    // the name of a group of its own (for an id not given out yet, or given out) is a
    // group of its own: the job's own, never the one named (the bulk path inserts those
    // names without ON CONFLICT, and no producer may join another's job)
    for groups in [
        "ARRAY['own:9000000000000000001']",
        "ARRAY[NULL, 'own:9000000000000000002']",
    ] {
        let n = groups.matches(',').count() + 1;
        let sql = format!(
            "SELECT {s}.harel_publish({groups}, array_fill('k'::text, ARRAY[{n}]), \
             array_fill('{{}}'::text, ARRAY[{n}]), array_fill(2::smallint, ARRAY[{n}]), \
             array_fill(NULL::timestamptz, ARRAY[{n}]), array_fill(NULL::bigint, ARRAY[{n}]))"
        );
        let ids: Vec<i64> = sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_all(&producer)
            .await
            .unwrap();
        for id in ids {
            let group: String =
                sqlx::query_scalar(q.sql("SELECT group_id FROM @schema@.jobs WHERE seq = $1"))
                    .bind(id)
                    .fetch_one(&q.pool)
                    .await
                    .unwrap();
            assert_eq!(group, harel_jobs::transport::own_group(id), "{groups}");
        }
    }

    let after: (Option<uuid::Uuid>, i32) = sqlx::query_as(
        q.sql("SELECT locked_by, head_attempts FROM @schema@.transport_groups WHERE group_id = $1"),
    )
    .bind(&held.lease.group)
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert_eq!(before, after, "the held group was touched");
    assert_eq!(q.count("jobs").await, 7 + 3);
    producer.close().await;
}

#[tokio::test]
async fn a_worker_can_work_and_can_neither_enqueue_nor_touch_leases_it_does_not_hold() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, WORKER_GRANTS).await;
    let worker = pool_with(&role.url, 2).await;
    let t = &q.transport;
    for group in ["mine", "theirs", "theirs"] {
        t.publish(&q.pool, &OutgoingMessage::new(group, "k", "{}"))
            .await
            .unwrap();
    }
    // someone else holds "theirs"
    let theirs = loop {
        let m = t
            .claim(&q.pool, &ClaimRequest::new(LONG))
            .await
            .unwrap()
            .unwrap();
        if m.lease.group == "theirs" {
            break m;
        }
        assert!(
            t.settle(&q.pool, &m.lease, Settlement::release_now())
                .await
                .unwrap()
                .is_applied()
        );
    };

    // what it is for
    let mine = t
        .claim(&worker, &ClaimRequest::new(LONG))
        .await
        .unwrap()
        .expect("the free group");
    assert_eq!(mine.lease.group, "mine");
    assert!(
        t.extend_many(&worker, std::slice::from_ref(&mine.lease), LONG)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        t.ack(&worker, &mine.lease).await.unwrap(),
        LeaseOutcome::Applied
    );
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
        .execute(&worker)
        .await
        .unwrap();

    // not what it is for
    let publish = t
        .publish(&worker, &OutgoingMessage::new("theirs", "k", "{}"))
        .await
        .expect_err("a worker enqueued");
    assert!(matches!(publish, harel_jobs::PublishError::Database(e) if e.is_permission_denied()));
    for sql in producer_must_not(&q).into_iter().filter(|sql| {
        !sql.contains("harel_claim")
            && !sql.contains("harel_maintain")
            && !sql.contains("harel_resolve_backlog")
            && !sql.contains("harel_extend")
            && !sql.contains("harel_schedule_fire(")
            && !sql.contains("harel_schedules(")
            && !sql.contains("harel_worker_report")
            && !sql.contains("harel_steps(")
            && !sql.contains("harel_record_step(")
            && !sql.contains("harel_workflow_task(")
    }) {
        assert_eq!(
            sqlstate(&worker, sql.clone()).await.as_deref(),
            Some("42501"),
            "a worker ran: {sql}"
        );
    }
    // a lease it does not hold: a guessed token changes nothing
    let forged = Lease {
        token: LeaseToken::new(),
        ..theirs.lease.clone()
    };
    assert!(
        !t.extend_many(&worker, std::slice::from_ref(&forged), LONG)
            .await
            .unwrap()
            .is_empty()
    );
    for settlement in [
        Settlement::Ack,
        Settlement::release_now(),
        Settlement::dead_letter("x"),
    ] {
        assert_eq!(
            t.settle(&worker, &forged, settlement).await.unwrap(),
            LeaseOutcome::LeaseLost
        );
    }
    assert_eq!(
        t.ack(&q.pool, &theirs.lease).await.unwrap(),
        LeaseOutcome::Applied,
        "the real holder still holds it"
    );
    worker.close().await;
}

/// The queue's functions may be called only by roles granted them: migrate revokes the
/// EXECUTE that PostgreSQL gives PUBLIC on every new function.
#[tokio::test]
async fn a_role_without_grants_can_call_nothing() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, &["USAGE ON SCHEMA @schema@"]).await;
    let nobody = pool_with(&role.url, 1).await;
    let publish = q
        .transport
        .publish(&nobody, &OutgoingMessage::new("g", "k", "{}"))
        .await
        .expect_err("enqueued without a grant");
    assert!(matches!(publish, harel_jobs::PublishError::Database(e) if e.is_permission_denied()));
    let public: Vec<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p
          WHERE p.pronamespace = $1::regnamespace
            AND has_function_privilege('public', p.oid, 'EXECUTE')",
    )
    .bind(q.schema.name())
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert!(public.is_empty(), "executable by PUBLIC: {public:?}");
    // versions and checksums only, readable by everyone (workers check them at start-up)
    (&nobody)
        .execute(q.sql("SELECT version, checksum FROM @schema@._migrations"))
        .await
        .unwrap();
    nobody.close().await;
}

#[tokio::test]
async fn an_operator_can_read_stats_and_handle_dead_letters_and_cannot_work_jobs() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let operator = pool_with(&role.url, 2).await;
    let t = &q.transport;
    for n in 0..3 {
        t.publish(&q.pool, &OutgoingMessage::new(format!("g{n}"), "k", "{}"))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        let m = t
            .claim(&q.pool, &ClaimRequest::new(LONG))
            .await
            .unwrap()
            .unwrap();
        let dead = t.dead_letter(&q.pool, &m.lease, "broken").await.unwrap();
        assert_eq!(dead, LeaseOutcome::Applied);
    }

    let stats = Stats::fetch(&operator, &q.schema).await.unwrap();
    assert_eq!(
        (stats.jobs, stats.dead_letters),
        (Count::Exact(1), Count::Exact(2))
    );
    let dead = Client::with_schema(operator.clone(), q.schema.clone()).dead_letters();
    let letters = dead.list(&DeadLetterQuery::default()).await.unwrap();
    assert_eq!(letters.len(), 2);
    assert!(dead.get(letters[0].id).await.unwrap().is_some());
    assert!(dead.retry(letters[0].id).await.unwrap().is_some());
    assert!(dead.delete(letters[1].id).await.unwrap());
    let purged = dead.purge(chrono::Utc::now()).await.unwrap();
    assert_eq!((purged, dead.count().await.unwrap()), (0, 0));

    // look jobs up and cancel them, through the Client handle
    let queue = harel_jobs::Client::with_schema(operator.clone(), q.schema.clone());
    let waiting = t
        .publish(&q.pool, &OutgoingMessage::new("g9", "k", "{}"))
        .await
        .unwrap();
    let info = queue.job(waiting).await.unwrap().expect("found");
    assert_eq!(info.state, harel_jobs::JobState::Waiting);
    assert!(queue.job_attempts(waiting).await.unwrap().is_empty());
    let page = queue.jobs(&harel_jobs::JobQuery::new()).await.unwrap();
    assert!(page.jobs.iter().any(|j| j.id == waiting));
    let groups = queue.groups(&harel_jobs::GroupQuery::new()).await.unwrap();
    assert!(groups.groups.iter().any(|g| g.id == "g9"));
    assert!(queue.group("g9").await.unwrap().is_some());
    let cancelled = queue.cancel(waiting).reason("operator").await.unwrap();
    assert_eq!(cancelled, harel_jobs::CancelOutcome::Cancelled);
    assert!(matches!(
        queue.cancel_group("g0").await.unwrap(),
        harel_jobs::CancelOutcome::Group { .. }
    ));

    // pause, resume and trigger a schedule a worker declared; fire none of its ticks
    sqlx::query(q.sql(
        "SELECT @schema@.harel_schedule_fire('nightly', 'every 60s', NULL, NULL, NULL, NULL,
                NULL, NULL)",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    assert!(queue.pause_schedule("nightly").await.unwrap());
    assert!(queue.resume_schedule("nightly").await.unwrap());
    assert!(queue.trigger_schedule("nightly").await.unwrap());
    let listed = queue
        .schedules(&harel_jobs::ScheduleQuery::new())
        .await
        .unwrap();
    assert!(listed.schedules[0].trigger_requested_at.is_some());

    let claim = t
        .claim(&operator, &ClaimRequest::new(LONG))
        .await
        .expect_err("an operator claimed");
    assert!(db(claim).is_permission_denied());
    let s = format!("\"{}\"", q.schema.name());
    for sql in [
        format!("UPDATE {s}.transport_groups SET available_at = 'infinity'"),
        format!("DELETE FROM {s}.transport_messages"),
        format!("INSERT INTO {s}.dead_letters SELECT * FROM {s}.dead_letters"),
        format!("DELETE FROM {s}.job_history"),
        format!("UPDATE {s}.unique_keys SET held_until = NULL"),
        format!("SELECT {s}.harel_end_cancelled(ARRAY['g1'])"),
        format!("SELECT {s}.harel_resolve_dependents(ARRAY[1::bigint], ARRAY['completed'])"),
        format!(
            "SELECT {s}.harel_release_waiting(ARRAY[1::bigint], ARRAY['g'], ARRAY[NULL::timestamptz])"
        ),
        format!("UPDATE {s}.workflow_tasks SET outcome = NULL"),
        format!("SELECT * FROM {s}.harel_workflow_task('g', 1, gen_random_uuid())"),
        format!("SELECT * FROM {s}.harel_retry_tasks(1, ARRAY[1])"),
        format!("SELECT {s}.harel_prune_workflows()"),
        format!("DELETE FROM {s}.workflow_reruns"),
        format!("DELETE FROM {s}.job_attempts"),
        format!(
            "SELECT {s}.harel_record_attempts(ARRAY[1::bigint], ARRAY[1], ARRAY[now()], \
             ARRAY['failed'], ARRAY['e'], now(), NULL)"
        ),
    ] {
        assert_eq!(
            sqlstate(&operator, sql.clone()).await.as_deref(),
            Some("42501"),
            "{sql}"
        );
    }

    // workflows: listed, shown, cancelled and retried as a unit
    let mut w = harel_jobs::Client::with_schema(q.pool.clone(), q.schema.clone()).workflow("ops");
    let a = w
        .task("a", Note { n: 1 }, &harel_jobs::EnqueueOptions::new())
        .unwrap();
    w.task(
        "b",
        Note { n: 2 },
        &harel_jobs::EnqueueOptions::new().after([a]),
    )
    .unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let listed = queue
        .workflows(&harel_jobs::WorkflowQuery::new())
        .await
        .unwrap();
    assert!(listed.workflows.iter().any(|w| w.id == enqueued.id));
    assert!(queue.workflow_info(enqueued.id).await.unwrap().is_some());
    assert_eq!(
        queue
            .workflow_tasks(enqueued.id, 0, 10)
            .await
            .unwrap()
            .tasks
            .len(),
        2
    );
    let task = queue
        .job_workflow(enqueued.jobs[1])
        .await
        .unwrap()
        .expect("a task");
    assert_eq!((task.workflow, task.task.as_str()), (enqueued.id, "b"));
    let cancelled = queue.cancel_workflow(enqueued.id).await.unwrap();
    assert_eq!(cancelled.cancelled, 2);
    assert_eq!(queue.retry_workflow(enqueued.id).await.unwrap(), 2);
    operator.close().await;
}

/// Issue 42, item 12 (RELIABILITY.md, "Hardening III", row 12): the operator's documented
/// grants allow no table lock that blocks the queue. Every table and view of the schema,
/// every mode stronger than ACCESS SHARE, is refused (42501: before, `DELETE` on
/// `dead_letters` let the operator hold ACCESS EXCLUSIVE on it, which stopped a worker's
/// dead settle, an enqueue's read of the letters, housekeeping and the dashboard). The
/// ACCESS SHARE its `SELECT` allows, held on everything it can read, blocks none of an
/// enqueue, a claim, a dead settle, a delete of a letter nor housekeeping.
#[tokio::test]
async fn an_operator_can_take_no_lock_that_blocks_the_queue() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let operator = pool_with(&role.url, 2).await;
    let s = format!("\"{}\"", q.schema.name());
    let relations: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relkind IN ('r', 'v', 'p') ORDER BY 1",
    )
    .bind(q.schema.name())
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert!(
        relations.iter().any(|r| r == "dead_letters"),
        "{relations:?}"
    );
    let modes = [
        "ROW SHARE",
        "ROW EXCLUSIVE",
        "SHARE UPDATE EXCLUSIVE",
        "SHARE",
        "SHARE ROW EXCLUSIVE",
        "EXCLUSIVE",
        "ACCESS EXCLUSIVE",
    ];
    let mut taken = Vec::new();
    for relation in &relations {
        for mode in modes {
            let mut tx = operator.begin().await.unwrap();
            let sql = format!("LOCK TABLE {s}.\"{relation}\" IN {mode} MODE NOWAIT");
            let state = match sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await {
                Ok(_) => None,
                Err(error) => DatabaseError::from(error).code(),
            };
            if state.as_deref() != Some("42501") {
                taken.push(format!("{mode} on {relation} ({state:?})"));
            }
            tx.rollback().await.unwrap();
        }
    }
    assert!(taken.is_empty(), "the operator could lock: {taken:?}");

    // ACCESS SHARE on everything the operator may read, held while the queue works
    let t = &q.transport;
    for n in 0..2 {
        t.publish(&q.pool, &OutgoingMessage::new(format!("g{n}"), "k", "{}"))
            .await
            .unwrap();
    }
    let mut held = operator.begin().await.unwrap();
    let mut locked = 0;
    for relation in &relations {
        let sql = format!("LOCK TABLE {s}.\"{relation}\" IN ACCESS SHARE MODE NOWAIT");
        if sqlx::raw_sql(AssertSqlSafe(format!("SAVEPOINT l; {sql}; RELEASE l")))
            .execute(&mut *held)
            .await
            .is_err()
        {
            sqlx::raw_sql("ROLLBACK TO l")
                .execute(&mut *held)
                .await
                .unwrap();
        } else {
            locked += 1;
        }
    }
    assert!(
        locked >= 4,
        "the operator reads the jobs view and three tables"
    );
    let work = async {
        t.publish(&q.pool, &OutgoingMessage::new("g9", "k", "{}"))
            .await
            .unwrap();
        let m = t
            .claim(&q.pool, &ClaimRequest::new(LONG))
            .await
            .unwrap()
            .unwrap();
        let dead = t.dead_letter(&q.pool, &m.lease, "broken").await.unwrap();
        assert_eq!(dead, LeaseOutcome::Applied);
        sqlx::raw_sql(AssertSqlSafe(format!("SELECT * FROM {s}.harel_maintain()")))
            .execute(&q.pool)
            .await
            .unwrap();
        let letters = Client::with_schema(q.pool.clone(), q.schema.clone()).dead_letters();
        let listed = letters.list(&DeadLetterQuery::default()).await.unwrap();
        assert!(letters.delete(listed[0].id).await.unwrap());
    };
    tokio::time::timeout(Duration::from_secs(10), work)
        .await
        .expect("the queue's work waited for the operator's ACCESS SHARE locks");
    held.rollback().await.unwrap();

    // and the bounded delete refuses an unbounded call
    assert_eq!(
        sqlstate(
            &operator,
            format!("SELECT * FROM {s}.harel_delete_dead_letters(array(SELECT generate_series(1, 1001)::bigint))")
        )
        .await
        .as_deref(),
        Some("22023")
    );
    operator.close().await;
}
