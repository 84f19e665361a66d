//! Upgrading a queue: a schema made by the first releases (one migration holding tables and
//! functions, kept as `tests/fixtures/legacy_0001_transport.sql`) with jobs in every state
//! is migrated by this release, and every job then runs or stays a dead letter. And the
//! function files: one changed file is applied again alone.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harel_jobs::transport::OutgoingMessage;
use harel_jobs::{
    Client, DeadLetterQuery, Handler, Job, JobContext, JobResult, Worker, check_schema,
    migrate_schema,
};
use harel_jobs_suite::{SuiteSchema, TestRole, pool_with};
use serde::{Deserialize, Serialize};
use sqlx::AssertSqlSafe;

const LEGACY_0001: &str = include_str!("fixtures/legacy_0001_transport.sql");

/// Migrates `q`'s schema as the first releases did: bookkeeping, then their one migration.
async fn migrate_as_the_first_release(q: &SuiteSchema) {
    let schema = format!("\"{}\"", q.schema.name());
    let channel = format!("'{}'", q.schema.channel());
    let mut tx = q.pool.begin().await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}._migrations (
             version    INT         PRIMARY KEY,
             name       TEXT        NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now(),
             checksum   TEXT);"
    )))
    .execute(&mut *tx)
    .await
    .unwrap();
    let rendered = LEGACY_0001
        .replace("@schema@", &schema)
        .replace("@channel@", &channel);
    sqlx::raw_sql(AssertSqlSafe(rendered))
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {schema}._migrations (version, name, checksum) VALUES (1, 'transport', md5($1))"
    )))
    .bind(LEGACY_0001)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

#[derive(Serialize, Deserialize)]
struct Legacy {
    n: u32,
}

impl Job for Legacy {
    const KIND: &'static str = "legacy";
}

type Ran = Arc<Mutex<Vec<u32>>>;

impl Handler<Ran> for Legacy {
    async fn handle(self, ctx: JobContext<Ran>) -> JobResult {
        ctx.state().lock().unwrap().push(self.n);
        Ok(())
    }
}

fn job(group: &str, n: u32) -> OutgoingMessage {
    OutgoingMessage::new(group, "legacy", format!("{{\"n\":{n}}}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_the_first_release_with_jobs_in_every_state_upgrades_and_loses_nothing() {
    let q = SuiteSchema::unmigrated().await;
    migrate_as_the_first_release(&q).await;
    let s = format!("\"{}\"", q.schema.name());

    // waiting (a group of two, and one alone), scheduled, leased, parked for a retry, dead,
    // enqueued as the first release did (its six-argument harel_publish)
    let publish =
        |groups: Vec<&'static str>, ns: Vec<i32>, priority: i16, delay_ms: Option<i64>| {
            let sql = format!(
                "SELECT {s}.harel_publish($1, array_fill('legacy'::text, ARRAY[cardinality($1)]),
                    ARRAY(SELECT format('{{\"n\":%s}}', n) FROM unnest($2::int[]) AS n),
                    array_fill($3::smallint, ARRAY[cardinality($1)]),
                    array_fill(NULL::timestamptz, ARRAY[cardinality($1)]),
                    array_fill($4::bigint, ARRAY[cardinality($1)]))"
            );
            let pool = q.pool.clone();
            async move {
                sqlx::query(AssertSqlSafe(sql))
                    .bind(groups.into_iter().map(str::to_owned).collect::<Vec<_>>())
                    .bind(ns)
                    .bind(priority)
                    .bind(delay_ms)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        };
    publish(vec!["two", "two", "one"], vec![1, 2, 3], 2, None).await;
    publish(vec!["later"], vec![4], 2, Some(1500)).await;
    for (group, n) in [("leased", 5), ("parked", 6), ("dead", 7)] {
        publish(vec![group], vec![n], 4, None).await;
    }
    // the first release's claim: (token, lease ms, limit, min priority)
    let token = uuid::Uuid::new_v4();
    let claimed: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT group_id, seq FROM {s}.harel_claim($1, 1500, 3, 4)"
    )))
    .bind(token)
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(claimed.len(), 3);
    let lease = |group: &str| {
        let (group, seq) = claimed.iter().find(|(g, _)| g == group).unwrap().clone();
        (group, seq, token)
    };
    let (group, seq, token) = lease("parked");
    // a retry after 1.5 s, through 0001's release function (the name is that release's)
    sqlx::query(AssertSqlSafe(format!(
        "SELECT * FROM {s}.harel_nack(ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY[1500::bigint], \
         ARRAY['first try failed'], ARRAY[true])"
    )))
    .bind(group)
    .bind(seq)
    .bind(token)
    .execute(&q.pool)
    .await
    .unwrap();
    let (group, seq, token) = lease("dead");
    sqlx::query(AssertSqlSafe(format!(
        "SELECT * FROM {s}.harel_ack(ARRAY[$1], ARRAY[$2], ARRAY[$3], ARRAY['gave up'])"
    )))
    .bind(group)
    .bind(seq)
    .bind(token)
    .execute(&q.pool)
    .await
    .unwrap();

    migrate_schema(&q.pool, &q.schema).await.expect("upgrade");
    check_schema(&q.pool, &q.schema)
        .await
        .expect("current after the upgrade");
    let versions: Vec<i32> =
        sqlx::query_scalar(q.sql("SELECT version FROM @schema@._migrations ORDER BY version"))
            .fetch_all(&q.pool)
            .await
            .unwrap();
    // every version up to this release's
    let expected: Vec<i32> = (1..=harel_jobs::SCHEMA_VERSION).collect();
    assert_eq!(versions, expected);
    let functions: BTreeSet<String> = sqlx::query_scalar(
        "SELECT p.proname::text FROM pg_proc p WHERE p.pronamespace = $1::regnamespace",
    )
    .bind(q.schema.name())
    .fetch_all(&q.pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let expected: BTreeSet<String> = [
        "harel_cancel",
        "harel_cancel_group",
        "harel_cancel_waiting",
        "harel_cancel_workflow",
        "harel_claim",
        "harel_delete_dead_letters",
        "harel_delete_schedule",
        "harel_depth",
        "harel_drop_empty_groups",
        "harel_elect",
        "harel_end_cancelled",
        "harel_ensure_queue",
        "harel_extend",
        "harel_fair_keys",
        "harel_fair_tags",
        "harel_hold",
        "harel_job",
        "harel_job_attempts",
        "harel_job_parents",
        "harel_job_workflow",
        "harel_job_steps",
        "harel_jobs_gone",
        "harel_list_groups",
        "harel_list_jobs",
        "harel_list_jobs_newest",
        "harel_maintain",
        "harel_move_on",
        "harel_notify",
        "harel_publish",
        "harel_prune_workflows",
        "harel_publish_workflow",
        "harel_purge_dead_letters",
        "harel_queue_id",
        "harel_queued_state",
        "harel_queues",
        "harel_record_attempts",
        "harel_record_step",
        "harel_release_key",
        "harel_release_waiting",
        "harel_resolve_backlog",
        "harel_resolve_dependents",
        "harel_retry_dead_letters",
        "harel_retry_tasks",
        "harel_retry_workflow",
        "harel_run_now",
        "harel_schedule_control",
        "harel_schedule_fire",
        "harel_schedules",
        "harel_set_fair_weight",
        "harel_set_key_limits",
        "harel_set_queue",
        "harel_settle",
        "harel_steps",
        "harel_take_key",
        "harel_throughput",
        "harel_throughput_by_queue",
        "harel_top_groups",
        "harel_unpark",
        "harel_unpark_queue",
        "harel_worker_report",
        "harel_workers",
        "harel_workflow",
        "harel_workflow_task",
        "harel_workflow_tasks",
        "harel_workflows",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        functions, expected,
        "0001's ack and release functions are gone (harel_settle does both)"
    );

    // a worker of this release runs everything that was waiting, scheduled, leased (once
    // the old lease lapses) and parked (once its retry is due), and leaves the dead letter
    let ran = Ran::default();
    let handle = Worker::builder(q.pool.clone(), Arc::clone(&ran))
        .register::<Legacy>()
        .schema(q.schema.clone())
        .poll_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while ran.lock().unwrap().len() < 6 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dead = Client::with_schema(q.pool.clone(), q.schema.clone()).dead_letters();
    let letters = dead.list(&DeadLetterQuery::default()).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].last_error, "gave up");
    assert!(dead.retry(letters[0].id).await.unwrap().is_some());
    while ran.lock().unwrap().len() < 7 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = handle.shutdown().await.unwrap();
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    assert_eq!(ran, [1, 2, 3, 4, 5, 6, 7], "every job ran once: {stats:?}");
    assert_eq!(q.count("jobs").await, 0);
}

/// A fix to one function is one changed file: migrate applies that file again, and nothing
/// else; a function applied by a newer release is left alone.
#[tokio::test]
async fn a_changed_function_file_is_applied_again_and_only_it() {
    let q = SuiteSchema::new().await;
    let definition = |name: &'static str| {
        let q = &q;
        async move {
            let row: (String, String) = sqlx::query_as(
                "SELECT p.xmin::text, pg_get_functiondef(p.oid) FROM pg_proc p \
                 WHERE p.pronamespace = $1::regnamespace AND p.proname = $2",
            )
            .bind(q.schema.name())
            .bind(name)
            .fetch_one(&q.pool)
            .await
            .unwrap();
            row
        }
    };
    let claim_before = definition("harel_claim").await;
    let publish_before = definition("harel_publish").await;

    // as if the claim had been applied from another text by this release
    sqlx::raw_sql(q.sql(
        "CREATE OR REPLACE FUNCTION @schema@.harel_claim(
             p_token UUID, p_lease_ms BIGINT, p_limit INT, p_min_priority INT DEFAULT 0,
             p_hint BIGINT DEFAULT NULL, p_queue TEXT DEFAULT 'default',
             p_wait_ms INT DEFAULT NULL)
         RETURNS TABLE (group_id TEXT, seq BIGINT, kind TEXT, payload TEXT, attempt INT,
                        priority SMALLINT, enqueued_at TIMESTAMPTZ, trace_context TEXT)
         LANGUAGE sql AS $$ SELECT NULL::text, NULL::bigint, NULL::text, NULL::text,
                                   NULL::int, NULL::smallint, NULL::timestamptz, NULL::text
                             WHERE false $$;
         UPDATE @schema@._functions SET checksum = md5('an older text')
          WHERE name = 'harel_claim';",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    assert!(
        check_schema(&q.pool, &q.schema).await.is_err(),
        "stale function noticed"
    );

    migrate_schema(&q.pool, &q.schema).await.unwrap();
    let claim_after = definition("harel_claim").await;
    assert_ne!(claim_after.0, claim_before.0, "harel_claim applied again");
    assert_eq!(claim_after.1, claim_before.1, "… from this release's file");
    assert_eq!(
        definition("harel_publish").await,
        publish_before,
        "nothing else"
    );
    check_schema(&q.pool, &q.schema).await.unwrap();

    // a newer release's function stays
    sqlx::query(q.sql(
        "UPDATE @schema@._functions SET checksum = md5('newer'), release = '999.0.0' \
          WHERE name = 'harel_claim'",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    migrate_schema(&q.pool, &q.schema).await.unwrap();
    assert_eq!(definition("harel_claim").await, claim_after);
}

/// A worker started on a schema that is not migrated for this release claims nothing and
/// says why, instead of counting database errors for ever.
#[tokio::test]
async fn a_worker_on_a_schema_not_migrated_for_this_release_stops_and_says_so() {
    let q = SuiteSchema::unmigrated().await;
    let start = || {
        Worker::builder(q.pool.clone(), Ran::default())
            .register::<Legacy>()
            .schema(q.schema.clone())
            .build()
            .unwrap()
            .start()
    };
    let mut handle = start();
    let stopped = tokio::time::timeout(Duration::from_secs(10), handle.stopped())
        .await
        .expect("the pool stops on its own");
    match stopped {
        Err(harel_jobs::WorkerError::NotMigrated { schema, reason }) => {
            assert_eq!(schema, q.schema.name());
            assert!(reason.contains("run harel_jobs::migrate"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    // migrated by the first release only: the same
    migrate_as_the_first_release(&q).await;
    let mut handle = start();
    let stopped = tokio::time::timeout(Duration::from_secs(10), handle.stopped()).await;
    assert!(
        matches!(
            stopped,
            Ok(Err(harel_jobs::WorkerError::NotMigrated { .. }))
        ),
        "{stopped:?}"
    );

    // migrated: it runs
    migrate_schema(&q.pool, &q.schema).await.unwrap();
    let handle = start();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!handle.is_finished());
    handle.shutdown().await.unwrap();
}

/// An upgrade that replaces functions with new signatures (0005: harel_publish takes unique
/// keys, harel_extend reports cancels) keeps the grants roles had on them: a producer and a
/// worker set up for the first release go on working after `migrate`, without new grants.
#[tokio::test]
async fn roles_keep_their_grants_on_functions_an_upgrade_replaces() {
    let q = SuiteSchema::unmigrated().await;
    migrate_as_the_first_release(&q).await;
    let role = TestRole::with_grants(
        &q,
        &[
            "USAGE ON SCHEMA @schema@",
            "EXECUTE ON FUNCTION @schema@.harel_publish",
            "EXECUTE ON FUNCTION @schema@.harel_extend",
        ],
    )
    .await;
    harel_jobs::migrate_schema(&q.pool, &q.schema)
        .await
        .unwrap();

    let pool = pool_with(&role.url, 1).await;
    let seq = q
        .transport
        .publish(&pool, &job("granted", 1))
        .await
        .expect("the producer's grant survived the new harel_publish");
    let claimed = q
        .transport
        .claim(
            &q.pool,
            &harel_jobs::transport::ClaimRequest::new(Duration::from_secs(60)),
        )
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(claimed.lease.id, seq);
    let statuses = q
        .transport
        .heartbeat(&pool, &[claimed.lease], Duration::from_secs(60))
        .await
        .expect("the worker's grant survived the new harel_extend");
    assert_eq!(statuses, [harel_jobs::transport::LeaseStatus::Held]);
    // and nothing more than it had
    let denied = sqlx::query(q.sql("SELECT @schema@.harel_cancel(1, NULL, 0)"))
        .execute(&pool)
        .await
        .expect_err("no grant on harel_cancel");
    assert_eq!(
        denied.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("42501")
    );
    pool.close().await;
}

/// Migration 0010: a group a caller named like a group of its own (`own:` and 19 digits,
/// refused from this release on) before upgrading keeps its jobs, and the sequence moves
/// past its name, so the plain insert of a batch of jobs without a group never meets it.
#[tokio::test]
async fn a_group_named_like_one_of_its_own_before_0010_never_meets_a_new_job() {
    let q = SuiteSchema::new().await;
    // as the old harel_publish accepted it: a named group whose name is a seq 50 ahead
    let named: String = sqlx::query_scalar(q.sql(
        "WITH s AS (SELECT nextval('@schema@.transport_messages_seq_seq') AS seq)
         INSERT INTO @schema@.transport_groups
                (group_id, priority, available_at, inline_seq, inline_kind, inline_payload,
                 inline_enqueued_at)
         SELECT 'own:' || lpad((s.seq + 50)::text, 19, '0'), 2, now(), s.seq, 'legacy',
                '{\"n\":0}', now()
           FROM s
         RETURNING group_id",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    // and one whose name is above every bigint, which no seq can reach
    sqlx::raw_sql(q.sql(
        "INSERT INTO @schema@.transport_groups
                (group_id, priority, available_at, inline_seq, inline_kind, inline_payload,
                 inline_enqueued_at)
         VALUES ('own:9999999999999999999', 2, now(),
                 nextval('@schema@.transport_messages_seq_seq'), 'legacy', '{\"n\":0}', now())",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    // 0010 runs again, as on a schema of the release before it (and 0011 to 0022 after
    // it, their objects dropped first)
    sqlx::raw_sql(q.sql(
        "DELETE FROM @schema@._migrations WHERE version >= 10;
         DROP TABLE @schema@.dependency_backlog;
         ALTER TABLE @schema@.queues DROP COLUMN unpark_through;
         DROP TABLE @schema@.workflow_reruns;
         DROP SEQUENCE @schema@.workflow_sweep, @schema@.workflow_sweep_task;
         DROP TABLE @schema@.elections;
         DROP SEQUENCE @schema@.maintain_sweep;
         DROP TABLE @schema@.job_steps;
         DROP SEQUENCE @schema@.step_sweep;
         DROP TABLE @schema@.job_attempts;
         DROP SEQUENCE @schema@.attempt_sweep;
         ALTER TABLE @schema@.job_history DROP COLUMN worker;
         ALTER TABLE @schema@.schedules DROP COLUMN paused_at,
             DROP COLUMN trigger_requested_at;
         ALTER TABLE @schema@.throughput DROP COLUMN queue, ADD PRIMARY KEY (minute, worker);
         ALTER TABLE @schema@.workers DROP COLUMN counted_queues,
             DROP COLUMN counted_succeeded, DROP COLUMN counted_failed,
             DROP COLUMN counted_dead;
         DROP VIEW @schema@.jobs;
         CREATE VIEW @schema@.jobs AS SELECT 1::bigint AS seq;
         DROP TABLE @schema@.fair_keys;
         DROP TABLE @schema@.key_rates;
         DROP TABLE @schema@.job_waits, @schema@.job_dependencies, @schema@.workflows,
             @schema@.workflow_tasks, @schema@.workflow_ends;
         DROP SEQUENCE @schema@.dependents_seen, @schema@.dependency_sweep;
         DROP INDEX @schema@.transport_groups_limited_by_key;
         ALTER TABLE @schema@.queues DROP COLUMN key_concurrency_limit,
             DROP COLUMN key_rate_limit, DROP COLUMN key_rate_period_ms;
         DROP INDEX @schema@.transport_groups_timed, @schema@.transport_groups_ready,
                    @schema@.transport_groups_ready_by_key;
         ALTER TABLE @schema@.transport_groups DROP COLUMN fair_key, DROP COLUMN fair_tag;
         ALTER TABLE @schema@.dead_letters DROP COLUMN fair_key;
         ALTER TABLE @schema@.job_history DROP COLUMN fair_key;
         CREATE INDEX transport_groups_claimable
             ON @schema@.transport_groups (queue_id, priority, available_at);
         DO $$ DECLARE s RECORD; BEGIN
             FOR s IN SELECT c.relname FROM pg_class c
                       WHERE c.relnamespace = '@schema@'::regnamespace AND c.relkind = 'S'
                         AND c.relname ~ '^fair_' LOOP
                 EXECUTE format('DROP SEQUENCE @schema@.%I', s.relname);
             END LOOP;
         END $$;",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    migrate_schema(&q.pool, &q.schema)
        .await
        .expect("0010 again");

    let transport = &q.transport;
    let batch: Vec<OutgoingMessage> = (1..=100)
        .map(|n| OutgoingMessage::new("x", "legacy", format!("{{\"n\":{n}}}")).in_own_group())
        .collect();
    let seqs = transport
        .publish_many(&q.pool, &batch)
        .await
        .expect("a batch of jobs without a group, past the named group's seq");
    let past: i64 = named["own:".len()..].parse().unwrap();
    assert!(
        seqs.iter().all(|seq| seq.get() > past),
        "{seqs:?} after {past}"
    );
    assert_eq!(
        q.count("transport_groups").await,
        102,
        "every job, and both named groups"
    );
    assert!(matches!(
        transport
            .publish(&q.pool, &OutgoingMessage::new(&named, "legacy", "{}"))
            .await,
        Err(harel_jobs::PublishError::Invalid(
            harel_jobs::InvalidMessage::ReservedGroup
        ))
    ));
}

/// Migration 0012: the view `jobs`, which the operators' grant reads, shows each job's queue
/// and trace context wherever the job is stored: the first job of a named group (inline in
/// the group's row), a later job of that group (a row of `transport_messages`, which has no
/// queue of its own: its group's applies), a job in a group of its own, and one in the
/// default queue without a context. The view's earlier columns keep their order, and a role
/// granted only `SELECT` on the view reads the queue's name without a right on `queues`.
#[tokio::test]
async fn the_jobs_view_shows_each_jobs_queue_and_trace_context() {
    let q = SuiteSchema::new().await;
    let trace = |n: u8| format!("00-{n:032x}-{n:016x}-01");
    let with_state = format!("{}\nvendor=seven", trace(2));
    let ids: Vec<i64> = sqlx::query_scalar(q.sql(
        "SELECT * FROM @schema@.harel_publish(
             ARRAY['customer-7', 'customer-7', NULL, 'plain'],
             ARRAY['mail', 'mail', 'report', 'plain'],
             ARRAY['{}', '{}', '{}', '{}'], ARRAY[2, 2, 2, 2]::smallint[],
             ARRAY[NULL, NULL, NULL, NULL]::timestamptz[],
             ARRAY[NULL, NULL, NULL, NULL]::bigint[], NULL, NULL,
             ARRAY['mail', 'mail', 'reports', NULL], $1)",
    ))
    .bind(vec![
        Some(trace(1)),
        Some(with_state.clone()),
        Some(trace(3)),
        None,
    ])
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(ids.len(), 4);
    // where each job is stored: only the group's second job is a row of transport_messages
    let in_messages: Vec<i64> =
        sqlx::query_scalar(q.sql("SELECT seq FROM @schema@.transport_messages ORDER BY seq"))
            .fetch_all(&q.pool)
            .await
            .unwrap();
    assert_eq!(in_messages, [ids[1]]);

    let expected = vec![
        (
            ids[0],
            "customer-7".to_owned(),
            Some("mail".to_owned()),
            Some(trace(1)),
        ),
        (
            ids[1],
            "customer-7".to_owned(),
            Some("mail".to_owned()),
            Some(with_state),
        ),
        (
            ids[2],
            harel_jobs::transport::own_group(ids[2]),
            Some("reports".to_owned()),
            Some(trace(3)),
        ),
        (ids[3], "plain".to_owned(), Some("default".to_owned()), None),
    ];
    let read = |pool: sqlx::PgPool| {
        let sql =
            q.sql("SELECT seq, group_id, queue, trace_context FROM @schema@.jobs ORDER BY seq");
        async move {
            let rows: Vec<(i64, String, Option<String>, Option<String>)> =
                sqlx::query_as(sql).fetch_all(&pool).await.unwrap();
            rows
        }
    };
    assert_eq!(read(q.pool.clone()).await, expected);

    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns
          WHERE table_schema = $1 AND table_name = 'jobs' ORDER BY ordinal_position",
    )
    .bind(q.schema.name())
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(
        columns,
        [
            "seq",
            "group_id",
            "kind",
            "payload",
            "priority",
            "enqueued_at",
            "not_before",
            "attempts",
            "last_error",
            "queue",
            "trace_context",
            "fair_key"
        ]
    );

    let role =
        TestRole::with_grants(&q, &["USAGE ON SCHEMA @schema@", "SELECT ON @schema@.jobs"]).await;
    let pool = pool_with(&role.url, 1).await;
    assert_eq!(
        read(pool.clone()).await,
        expected,
        "read with the view's grant alone"
    );
    pool.close().await;
}

/// Migration 0019: a worker role of the previous release (granted `harel_worker_report` of
/// ten arguments) keeps reporting after the upgrade with its old call, which the new
/// function takes (its totals by queue default to NULL); what such a pool did counts under
/// its queue when it serves one, else under "" (not by queue), and rows written before the
/// upgrade count under "".
#[tokio::test]
async fn a_worker_of_the_previous_release_reports_after_0019() {
    let q = SuiteSchema::new().await;
    // the schema as the previous release left it: 0019 not applied (nor those after it,
    // their objects dropped), the old signature (its body does not matter here) and a row
    // of throughput without a queue
    sqlx::raw_sql(q.sql(
        "DELETE FROM @schema@._migrations WHERE version >= 19;
         DROP TABLE @schema@.dependency_backlog;
         ALTER TABLE @schema@.queues DROP COLUMN unpark_through;
         DROP TABLE @schema@.workflow_reruns;
         DROP SEQUENCE @schema@.workflow_sweep, @schema@.workflow_sweep_task;
         ALTER TABLE @schema@.workflow_ends DROP COLUMN cancelled;
         ALTER TABLE @schema@.workflows DROP COLUMN cancelled_at;
         ALTER TABLE @schema@.throughput DROP COLUMN queue, ADD PRIMARY KEY (minute, worker);
         ALTER TABLE @schema@.workers DROP COLUMN counted_queues,
             DROP COLUMN counted_succeeded, DROP COLUMN counted_failed,
             DROP COLUMN counted_dead;
         DROP FUNCTION @schema@.harel_worker_report(UUID, TEXT, INT, TEXT[], INT, INT, BIGINT,
             BIGINT, BIGINT, BOOLEAN, TEXT[], BIGINT[], BIGINT[], BIGINT[]);
         CREATE FUNCTION @schema@.harel_worker_report(UUID, TEXT, INT, TEXT[], INT, INT, BIGINT,
             BIGINT, BIGINT, BOOLEAN) RETURNS VOID LANGUAGE sql AS 'SELECT';
         INSERT INTO @schema@.throughput (minute, worker, succeeded, failed, dead)
         VALUES (date_trunc('minute', now()), gen_random_uuid(), 5, 0, 0);",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let role = TestRole::with_grants(
        &q,
        &[
            "USAGE ON SCHEMA @schema@",
            "EXECUTE ON FUNCTION @schema@.harel_worker_report",
        ],
    )
    .await;
    migrate_schema(&q.pool, &q.schema).await.unwrap();

    let worker = pool_with(&role.url, 1).await;
    sqlx::raw_sql(q.sql(
        "SELECT @schema@.harel_worker_report(gen_random_uuid(), 'old', 1, ARRAY['mail'], 1, 0,
                3, 1, 0, false);
         SELECT @schema@.harel_worker_report(gen_random_uuid(), 'old', 2,
                ARRAY['mail', 'default'], 1, 0, 2, 0, 0, false);",
    ))
    .execute(&worker)
    .await
    .expect("the previous release's call, with its grant, after the upgrade");
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(q.sql(
        "SELECT queue, sum(succeeded)::bigint, sum(failed)::bigint
           FROM @schema@.throughput GROUP BY queue ORDER BY queue",
    ))
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(rows, [("".to_owned(), 7, 0), ("mail".to_owned(), 3, 1)]);
    worker.close().await;
}

/// Migration 0022: a workflow of the previous release (one task dead, two cancelled for
/// it, one completed) reads its counts by outcome after the upgrade (the cancelled counted
/// from the tasks' recorded outcomes), and an operator role of that release keeps its
/// grants on harel_workflow and harel_workflows (dropped and created again with two more
/// columns), its calls naming the old columns working unchanged.
#[tokio::test]
async fn a_workflow_of_the_previous_release_reads_its_counts_by_outcome_after_0022() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let mut w = client.workflow("old");
    let options = harel_jobs::EnqueueOptions::new;
    let a = w.task("a", Legacy { n: 1 }, &options()).unwrap();
    let b = w.task("b", Legacy { n: 2 }, &options().after([a])).unwrap();
    w.task("c", Legacy { n: 3 }, &options().after([b])).unwrap();
    w.task("d", Legacy { n: 4 }, &options()).unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let claimed = q
        .transport
        .claim_many(
            &q.pool,
            &harel_jobs::transport::ClaimRequest::new(Duration::from_secs(60)).limit(10),
        )
        .await
        .unwrap();
    for message in claimed {
        let outcome = if message.lease.id == enqueued.jobs[0] {
            q.transport.dead_letter(&q.pool, &message.lease, "x").await
        } else {
            q.transport.ack(&q.pool, &message.lease).await
        };
        assert!(outcome.unwrap().is_applied());
    }
    // the schema as the previous release left it: 0022 not applied, the old functions
    // (their bodies do not matter here)
    sqlx::raw_sql(q.sql(
        "DELETE FROM @schema@._migrations WHERE version = 22;
         DROP TABLE @schema@.workflow_reruns;
         DROP SEQUENCE @schema@.workflow_sweep, @schema@.workflow_sweep_task;
         ALTER TABLE @schema@.workflow_ends DROP COLUMN cancelled;
         ALTER TABLE @schema@.workflows DROP COLUMN cancelled_at;
         DROP FUNCTION @schema@.harel_workflow(BIGINT);
         DROP FUNCTION @schema@.harel_workflows(TEXT, BIGINT, INT);
         CREATE FUNCTION @schema@.harel_workflow(BIGINT) RETURNS TABLE (id BIGINT, name TEXT,
             created_at TIMESTAMPTZ, tasks INT, ended INT, failed INT)
             LANGUAGE sql AS 'SELECT 0::bigint, '''', now(), 0, 0, 0';
         CREATE FUNCTION @schema@.harel_workflows(TEXT, BIGINT, INT) RETURNS TABLE (id BIGINT,
             name TEXT, created_at TIMESTAMPTZ, tasks INT, ended INT, failed INT)
             LANGUAGE sql AS 'SELECT 0::bigint, '''', now(), 0, 0, 0';",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let role = TestRole::with_grants(
        &q,
        &[
            "USAGE ON SCHEMA @schema@",
            "EXECUTE ON FUNCTION @schema@.harel_workflow",
            "EXECUTE ON FUNCTION @schema@.harel_workflows",
        ],
    )
    .await;
    migrate_schema(&q.pool, &q.schema).await.unwrap();

    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state.as_str(), info.ended, info.failed),
        ("failed", 4, 3)
    );
    assert_eq!((info.completed, info.dead, info.cancelled), (1, 1, 2));
    assert_eq!(info.cancelled_at, None);
    let operator = pool_with(&role.url, 1).await;
    let old: (i64, i32, i32) =
        sqlx::query_as(q.sql("SELECT id, ended, failed FROM @schema@.harel_workflow($1)"))
            .bind(enqueued.id.get())
            .fetch_one(&operator)
            .await
            .expect("the previous release's call, with its grant, after the upgrade");
    assert_eq!(old, (enqueued.id.get(), 4, 3));
    let listed: Vec<(i64, i32)> =
        sqlx::query_as(q.sql("SELECT id, failed FROM @schema@.harel_workflows(NULL, NULL, 10)"))
            .fetch_all(&operator)
            .await
            .expect("and the list's");
    assert_eq!(listed, [(enqueued.id.get(), 3)]);
    operator.close().await;
}

/// `migrate` gives the functions Citus-only settings where the `citus` extension is, and
/// nowhere else (ADR 0036): on plain PostgreSQL every function keeps its file's generic
/// plans and carries no Citus setting; on a Citus coordinator (the suite run against one)
/// none forces generic plans and `harel_claim` lets its `SET LOCAL lock_timeout` reach the
/// worker node.
#[tokio::test]
async fn the_citus_settings_are_given_on_citus_only() {
    let q = SuiteSchema::new().await;
    let citus: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')",
    )
    .fetch_one(&q.pool)
    .await
    .unwrap();
    let functions: Vec<(String, Vec<String>)> = sqlx::query_as(
        "SELECT p.proname::text, COALESCE(p.proconfig, '{}')::text[]
           FROM pg_catalog.pg_proc p WHERE p.pronamespace = $1::regnamespace",
    )
    .bind(q.schema.name())
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert!(functions.len() > 50, "{functions:?}");
    for (name, config) in &functions {
        let generic = config
            .iter()
            .any(|c| c == "plan_cache_mode=force_generic_plan");
        let propagates = config
            .iter()
            .any(|c| c == "citus.propagate_set_commands=local");
        if citus {
            assert!(!generic, "{name}: {config:?}");
            assert_eq!(propagates, name == "harel_claim", "{name}: {config:?}");
        } else {
            // (every function file sets generic plans: the unit test of src/migrate.rs)
            assert!(generic, "{name}: {config:?}");
            assert!(
                !config.iter().any(|c| c.starts_with("citus.")),
                "{name}: {config:?}"
            );
        }
    }
}
