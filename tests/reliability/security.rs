//! Security: the least privileges a worker and a producer need, determined by testing
//! (every grant listed is needed: revoking any one of them makes the role's operations fail
//! with a permission error, typed as `DatabaseError::is_permission_denied`), and the DSN
//! password never appearing in logs, errors or `Debug` output.

use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, OutgoingMessage, Settlement, Transport};
use harel_jobs::{DatabaseError, Enqueue, MigrateError, PublishError, TransportError};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

use crate::checks;
use crate::cluster::ClusterOptions;
use crate::jobs::Work;
use crate::{Setup, expect_keys, ms, serial};

/// What a worker role needs: the functions run as their owner, so no table rights.
pub const WORKER_GRANTS: &[&str] = &[
    "USAGE ON SCHEMA harel",
    "EXECUTE ON FUNCTION harel.harel_claim",
    "EXECUTE ON FUNCTION harel.harel_settle",
    "EXECUTE ON FUNCTION harel.harel_extend",
];

/// What a producer (enqueueing) role needs.
pub const PRODUCER_GRANTS: &[&str] = &[
    "USAGE ON SCHEMA harel",
    "EXECUTE ON FUNCTION harel.harel_publish",
];

async fn role_pool(setup: &Setup, role: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(2)
        .connect(&setup.cluster.url(role))
        .await
        .unwrap()
}

async fn exec(pool: &PgPool, sql: String) {
    sqlx::raw_sql(AssertSqlSafe(sql.clone()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn db(error: TransportError) -> DatabaseError {
    match error {
        TransportError::Database(e) => e,
        other => panic!("not a database error: {other:?}"),
    }
}

fn db_publish(error: PublishError) -> DatabaseError {
    match error {
        PublishError::Database(e) => e,
        other => panic!("not a database error: {other:?}"),
    }
}

/// Everything a worker does, through `pool`: claim, extend, release with an error, ack (and
/// drain a group), dead-letter. `admin` publishes the messages first.
async fn worker_ops(admin: &PgPool, pool: &PgPool) -> Result<(), DatabaseError> {
    // a worker calls migrate at start-up: on a current schema it only reads the bookkeeping
    harel_jobs::migrate(pool)
        .await
        .map_err(|error| match error {
            MigrateError::Database(e) | MigrateError::Migration { source: e, .. } => e,
            other => panic!("migrate: {other}"),
        })?;
    let t = Transport::default();
    for group in ["ops-a", "ops-b", "ops-c"] {
        t.publish(admin, &OutgoingMessage::new(group, "work", "{\"key\": 1}"))
            .await
            .unwrap();
    }
    let request = ClaimRequest::new(Duration::from_secs(30)).limit(3);
    let claimed = t.claim_many(pool, &request).await.map_err(db)?;
    assert_eq!(claimed.len(), 3);
    let leases: Vec<_> = claimed.iter().map(|m| m.lease.clone()).collect();
    let lost = t
        .extend_many(pool, &leases, Duration::from_secs(30))
        .await
        .map_err(db)?;
    assert!(lost.is_empty());
    let by_group = |g: &str| leases.iter().find(|l| l.group == g).unwrap().clone();
    let done = t
        .settle_many(
            pool,
            &[
                (
                    by_group("ops-a"),
                    Settlement::Release {
                        delay: Duration::ZERO,
                        error: Some("try again".into()),
                        count_attempt: true,
                    },
                ),
                (by_group("ops-b"), Settlement::Ack),
                (by_group("ops-c"), Settlement::dead_letter("gave up")),
            ],
            None,
        )
        .await
        .map_err(db)?;
    assert!(done.iter().all(|o| o.is_applied()));
    let again = t
        .claim(pool, &ClaimRequest::new(Duration::from_secs(30)))
        .await
        .map_err(db)?
        .expect("the released message");
    assert!(t.ack(pool, &again.lease).await.map_err(db)?.is_applied());
    Ok(())
}

/// Everything a producer does: enqueue into a new group, then into that existing group.
async fn producer_ops(pool: &PgPool) -> Result<(), DatabaseError> {
    for key in [1, 2] {
        let job = Work {
            key,
            sleep_ms: 0,
            text: None,
        };
        Enqueue::new(job, pool)
            .group("producer-ops")
            .await
            .map_err(db_publish)?;
    }
    Ok(())
}

async fn reset(admin: &PgPool) {
    exec(
        admin,
        "DELETE FROM harel.transport_messages; DELETE FROM harel.transport_groups;
         DELETE FROM harel.dead_letters;"
            .into(),
    )
    .await;
}

/// Creates `role` with exactly `grants`, checks that its operations succeed, then that
/// revoking any single grant makes them fail with a permission error.
async fn check_grants<F, Fut>(setup: &Setup, role: &str, grants: &[&str], ops: F)
where
    F: Fn(PgPool) -> Fut,
    Fut: std::future::Future<Output = Result<(), DatabaseError>>,
{
    let admin = &setup.admin;
    exec(admin, format!("CREATE ROLE {role} LOGIN")).await;
    for grant in grants {
        exec(admin, format!("GRANT {grant} TO {role}")).await;
    }
    let pool = role_pool(setup, role).await;
    reset(admin).await;
    ops(pool.clone())
        .await
        .unwrap_or_else(|e| panic!("{role} with its grants: {e}"));
    for grant in grants {
        exec(admin, format!("REVOKE {grant} FROM {role}")).await;
        reset(admin).await;
        let error = ops(pool.clone()).await.expect_err(&format!(
            "{role} worked without {grant}: the grant is not needed"
        ));
        assert!(
            error.is_permission_denied(),
            "{role} without {grant}: expected a permission error, got {error:?}"
        );
        eprintln!("{role} without {grant}: {error}");
        exec(admin, format!("GRANT {grant} TO {role}")).await;
    }
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_least_privilege_roles_need_exactly_the_documented_grants() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let admin = setup.admin.clone();
    let admin_for_ops = admin.clone();
    check_grants(&setup, "harel_worker", WORKER_GRANTS, move |pool| {
        let admin = admin_for_ops.clone();
        async move { worker_ops(&admin, &pool).await }
    })
    .await;
    check_grants(
        &setup,
        "harel_producer",
        PRODUCER_GRANTS,
        |pool| async move { producer_ops(&pool).await },
    )
    .await;
    reset(&admin).await;

    // a role without any grant: clear, typed permission errors
    exec(&admin, "CREATE ROLE harel_nobody LOGIN".into()).await;
    let nobody = role_pool(&setup, "harel_nobody").await;
    let publish = producer_ops(&nobody)
        .await
        .expect_err("nobody cannot enqueue");
    assert!(publish.is_permission_denied(), "{publish:?}");
    let claim = Transport::default()
        .claim(&nobody, &ClaimRequest::new(Duration::from_secs(30)))
        .await
        .expect_err("nobody cannot claim");
    assert!(db(claim).is_permission_denied());
    eprintln!("a role without grants enqueues: {publish}");

    // migrate on a current schema only reads the bookkeeping: a worker role may call it at
    // start-up; a role that cannot even read it is told so, typed
    let worker_pool = role_pool(&setup, "harel_worker").await;
    let migrate = harel_jobs::migrate(&worker_pool).await;
    eprintln!("migrate as harel_worker: {migrate:?}");
    assert!(migrate.is_ok(), "migrate as the worker role: {migrate:?}");
    let migrate = harel_jobs::migrate(&nobody).await;
    let migrate_denied = matches!(
        &migrate,
        Err(MigrateError::Database(e)) | Err(MigrateError::Migration { source: e, .. })
            if e.is_permission_denied()
    );

    // a real worker process and a real enqueue through the two roles
    exec(
        &admin,
        "GRANT USAGE ON SCHEMA rel TO harel_worker;
         GRANT SELECT, INSERT, UPDATE ON rel.ledger TO harel_worker;"
            .into(),
    )
    .await;
    let mut fleet = setup.fleet(
        "priv-w",
        &[
            ("HAREL_FW_DSN", setup.cluster.url("harel_worker")),
            ("HAREL_FW_MIGRATE", "1".into()),
            ("HAREL_FW_CONCURRENCY", "4".into()),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
        ],
    );
    fleet.spawn(0);
    let producer = role_pool(&setup, "harel_producer").await;
    for key in 0..20 {
        let job = Work {
            key,
            sleep_ms: 0,
            text: None,
        };
        Enqueue::new(job, &producer)
            .group(format!("priv-{}", key % 3))
            .await
            .unwrap();
        expect_keys(&admin, &[(key, format!("priv-{}", key % 3), 0)]).await;
    }
    let counts = checks::wait_until_done(&admin, Duration::from_secs(60)).await;
    fleet.terminate_all(Duration::from_secs(30), &admin).await;
    let worker_log = fleet.all_stderr();
    assert_eq!(
        counts.lost, 0,
        "the least-privilege worker ran every job: {counts:?}\n{worker_log}"
    );
    assert_eq!(counts.queue_left, 0);
    assert_eq!(fleet.procs[0].stat("succeeded"), 20);
    assert_eq!(fleet.procs[0].stat("database_errors"), 0, "{worker_log}");
    assert!(
        migrate_denied,
        "migrate as a role without grants: {migrate:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_the_dsn_password_never_appears_in_logs_errors_or_debug_output() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions {
        hba_first: vec![
            "host all harel_secret 127.0.0.1/32 scram-sha-256".into(),
            "local all harel_secret scram-sha-256".into(),
        ],
        ..ClusterOptions::default()
    })
    .await;
    let password = format!("Pw-{}", uuid::Uuid::new_v4().simple());
    let wrong = format!("Wrong-{}", uuid::Uuid::new_v4().simple());
    exec(
        &setup.admin,
        format!(
            "CREATE ROLE harel_secret LOGIN PASSWORD '{password}';
             GRANT USAGE ON SCHEMA harel, rel TO harel_secret;
             GRANT EXECUTE ON FUNCTION harel.harel_claim, harel.harel_settle, harel.harel_extend,
                   harel.harel_maintain TO harel_secret;
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA rel TO harel_secret;"
        ),
    )
    .await;
    let debug = [
        ("RUST_LOG", "debug".to_string()),
        ("HAREL_FW_DEBUG_DUMP", "1".into()),
        ("HAREL_FW_MIGRATE", "0".into()),
        ms("HAREL_FW_CONNECT_WAIT_MS", Duration::from_secs(3)),
        ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
    ];
    let mut fleet = setup.fleet("secret-w", &debug);
    let free_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let targets = [
        (
            "wrong password",
            setup.cluster.url_with_password("harel_secret", &wrong),
        ),
        (
            "unreachable server",
            format!("postgres://harel_secret:{password}@127.0.0.1:{free_port}/postgres"),
        ),
    ];
    let mut outputs = Vec::new();
    for (what, dsn) in &targets {
        let i = fleet.spawn_with(0, &[("HAREL_FW_DSN", dsn.clone())]);
        let status = fleet.procs[i]
            .wait_exit(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{what}: the worker did not give up"));
        assert_eq!(status.code(), Some(2), "{what}: connect failed, exit 2");
        let output = format!("{}{}", fleet.procs[i].stdout(), fleet.procs[i].stderr());
        assert!(
            output.contains("FAULT_WORKER_CONNECT_FAILED"),
            "{what}: {output}"
        );
        outputs.push((what.to_string(), output));
    }
    // the right password: a working worker, with debug logs and Debug dumps
    let i = fleet.spawn_with(
        1,
        &[(
            "HAREL_FW_DSN",
            setup.cluster.url_with_password("harel_secret", &password),
        )],
    );
    crate::enqueue_work(&setup.admin, &[(1, "secret".into(), 0)], 10).await;
    checks::wait_until_done(&setup.admin, Duration::from_secs(60)).await;
    fleet
        .terminate_all(Duration::from_secs(30), &setup.admin)
        .await;
    assert_eq!(fleet.procs[i].stat("succeeded"), 1);
    outputs.push((
        "right password".into(),
        format!("{}{}", fleet.procs[i].stdout(), fleet.procs[i].stderr()),
    ));

    // in-process: the errors of a wrong password, their Display and Debug
    let error = harel_jobs::connect_with(
        &setup.cluster.url_with_password("harel_secret", &wrong),
        &harel_jobs::ConnectConfig::default().wait(Duration::from_secs(1)),
    )
    .await
    .expect_err("wrong password");
    outputs.push(("connect error".into(), format!("{error} {error:?}")));

    for (what, output) in &outputs {
        eprintln!("--- {what}: {} bytes of output, first lines:", output.len());
        for line in output
            .lines()
            .filter(|l| !l.contains("sqlx::query"))
            .take(4)
        {
            eprintln!("    {}", &line[..line.len().min(300)]);
        }
        assert!(
            !output.contains(&password),
            "{what}: the password leaked:\n{output}"
        );
        assert!(
            !output.contains(&wrong),
            "{what}: the wrong password leaked:\n{output}"
        );
    }
    assert!(
        outputs[0].1.contains("password authentication failed"),
        "the wrong password is reported as such: {}",
        outputs[0].1
    );
    assert!(outputs[1].1.contains("unreachable"), "{}", outputs[1].1);
    assert!(
        outputs[2].1.contains("debug: worker = Worker"),
        "the dumps ran"
    );
}
