//! Scenario 3: database restart. PostgreSQL is stopped (`pg_ctl stop -m fast`) for 10 s and
//! started again, twice, while the workers run: they reconnect by themselves, their LISTEN
//! connection comes back, every job completes, none is lost.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::jobs::Work;
use crate::{Setup, enqueue_work, expect_keys, interleaved, ms, scaled, serial, wait_for};

const DOWN: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_database_restarts_lose_nothing_and_listen_comes_back() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let jobs = scaled(20_000);
    let groups = scaled(200).min(jobs);
    // the lease outlives the outage (heartbeats resume within 2 s of the restart)
    let lease = Duration::from_secs(30);
    let common = [
        ("HAREL_FW_CONCURRENCY", "8".to_string()),
        ms("HAREL_FW_LEASE_MS", lease),
        ms("HAREL_FW_HEARTBEAT_MS", Duration::from_secs(2)),
    ];
    let mut fleet = setup.fleet("restart-w", &common);
    for slot in 0..3 {
        fleet.spawn_with(slot, &[ms("HAREL_FW_POLL_MS", Duration::from_millis(500))]);
    }
    // the probe: polls once an hour, so after the restarts only a NOTIFY received on a
    // LISTEN connection that came back can start a job on it promptly
    let probe = fleet.spawn_with(3, &[ms("HAREL_FW_POLL_MS", Duration::from_secs(3600))]);
    let probe_name = fleet.procs[probe].name.clone();

    let specs = interleaved(0, jobs, groups, "restart", 5);
    enqueue_work(&setup.admin, &specs, 2_000).await;

    let mut restarts: Vec<DateTime<Utc>> = Vec::new();
    for round in 0..2 {
        tokio::time::sleep(Duration::from_secs(if round == 0 { 3 } else { 5 })).await;
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM harel.jobs")
            .fetch_one(&setup.admin)
            .await
            .unwrap();
        assert!(
            left > 0,
            "the load must still be running at restart {round}"
        );
        setup.cluster.stop_fast();
        tokio::time::sleep(DOWN).await;
        setup.cluster.start_server();
        restarts.push(Utc::now());
    }
    let last_restart = *restarts.last().unwrap();

    checks::wait_until_done(&setup.admin, Duration::from_secs(300)).await;
    assert_eq!(
        fleet.running().len(),
        4,
        "no worker died: {:?}",
        fleet.crashed()
    );

    // every process reconnected: each started executions after the last restart
    let reconnected: Vec<(String, i64)> = sqlx::query_as(
        "SELECT worker, count(*) FROM rel.ledger WHERE started_at > $1 GROUP BY worker",
    )
    .bind(last_restart)
    .fetch_all(&setup.admin)
    .await
    .unwrap();

    // LISTEN came back: with the other workers stopped, a new job starts on the probe
    // (poll interval 1 h) only if its listener reconnected and got the NOTIFY
    let others: Vec<usize> = fleet
        .running()
        .into_iter()
        .filter(|&i| i != probe)
        .collect();
    for i in others {
        fleet
            .terminate(i, Duration::from_secs(60), &setup.admin)
            .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // the probe is idle now
    let listeners: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN %'")
            .fetch_one(&setup.admin)
            .await
            .unwrap();
    let probe_key = 1_000_000_000;
    let mut tx = setup.admin.begin().await.unwrap();
    harel_jobs::Enqueue::new(
        Work {
            key: probe_key,
            sleep_ms: 0,
            text: None,
        },
        &mut *tx,
    )
    .group("restart-probe")
    .await
    .unwrap();
    expect_keys(&mut *tx, &[(probe_key, "restart-probe".into(), 0)]).await;
    tx.commit().await.unwrap();
    let admin = setup.admin.clone();
    wait_for(
        "the probe worker (poll interval 1 h) starts a new job: its LISTEN came back",
        Duration::from_secs(60),
        || {
            let admin = admin.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM rel.ledger WHERE key = $1 AND ended_at IS NOT NULL",
                )
                .bind(probe_key)
                .fetch_one(&admin)
                .await
                .unwrap_or(0)
                    == 1
            }
        },
    )
    .await;
    let probe_ran: String = sqlx::query_scalar("SELECT worker FROM rel.ledger WHERE key = $1")
        .bind(probe_key)
        .fetch_one(&setup.admin)
        .await
        .unwrap();

    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;
    let database_errors: u64 = fleet.procs.iter().map(|p| p.stat("database_errors")).sum();
    checks::report(
        &setup.admin,
        &Figures {
            scenario: "3. database restart",
            load: format!("{jobs} jobs / {groups} groups, 4 procs × 8, lease 30 s"),
            faults: "2 × `pg_ctl stop -m fast`, 10 s down, restart".into(),
            enqueued: jobs + 1,
            completed: counts.completed,
            duplicates: counts.duplicates.to_string(),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(lease),
            notes: format!(
                "all 4 processes reconnected; LISTEN probe (poll 1 h) ran the post-restart job; \
                 {database_errors} database errors retried; overlaps {}",
                counts.overlaps
            ),
        },
        &counts,
    )
    .await;

    assert_eq!(
        reconnected.len(),
        4,
        "every worker ran jobs after the restarts: {reconnected:?}"
    );
    assert!(listeners >= 1, "the probe holds a LISTEN connection");
    assert_eq!(probe_ran, probe_name);
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert_eq!(counts.expected, jobs + 1);
    assert_eq!(counts.lost, 0, "{counts:?}");
    assert_eq!(
        counts.duplicates, 0,
        "the outage is shorter than the lease: {counts:?}"
    );
    assert_eq!(counts.unfinished, 0);
    assert_eq!(counts.overlaps, 0);
    assert_eq!(counts.order_violations, 0);
    assert_eq!(counts.queue_left, 0);
    assert_eq!(counts.leased_groups, 0);
    assert_eq!(counts.dead_letters, 0);
    assert!(database_errors > 0, "the workers did see the outages");
}
