//! Scenario 8: connection exhaustion. The cluster allows 20 connections (17 for
//! non-superusers); six workers with pools of 5, plus four connections of each worker's own
//! (claims, outcomes, heartbeat, LISTEN), want 54. The late ones wait and retry with a clear
//! log line, nobody crashes, and once the first workers stop the late ones take over, even
//! though two of them still want more connections than the server has: a worker that cannot
//! open its own connections borrows idle pooled ones.

use std::time::Duration;

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::{Setup, enqueue_work, interleaved, ms, scaled, serial, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_workers_beyond_max_connections_wait_and_take_over() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions {
        max_connections: 20,
        ..ClusterOptions::default()
    })
    .await;
    // the workers log in as a plain role: superuser_reserved_connections keeps 3 slots for
    // the test's own (superuser) connections
    sqlx::raw_sql(
        "CREATE ROLE app LOGIN;
         GRANT USAGE ON SCHEMA harel, rel TO app;
         GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA harel, rel TO app;
         GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA harel TO app;",
    )
    .execute(&setup.admin)
    .await
    .unwrap();
    let env = [
        ("HAREL_FW_DSN", setup.cluster.url("app")),
        ("HAREL_FW_MIGRATE", "0".into()),
        ("HAREL_FW_POOL", "5".into()),
        // each pool opens and keeps its 5 connections, and each worker wants 4 more of its
        // own: 4 workers want 36 of the 17 slots, the 2 late ones still 18
        ("HAREL_FW_MIN_POOL", "5".into()),
        ("HAREL_FW_CONCURRENCY", "3".into()),
        ms("HAREL_FW_LEASE_MS", Duration::from_secs(10)),
        ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
        ms("HAREL_FW_CONNECT_WAIT_MS", Duration::from_secs(600)),
    ];
    let mut fleet = setup.fleet("conn-w", &env);
    let jobs = scaled(3_000);
    let first_half = interleaved(0, jobs / 2, 100, "conn", 20);
    enqueue_work(&setup.admin, &first_half, 1_000).await;
    for slot in 0..4 {
        fleet.spawn(slot);
    }
    // let the first four fill the server (and keep their connections: pools keep idle ones)
    tokio::time::sleep(Duration::from_secs(4)).await;
    let late: Vec<usize> = (4..6).map(|slot| fleet.spawn(slot)).collect();
    let admin = setup.admin.clone();
    wait_for(
        "the late workers log that the server is full",
        Duration::from_secs(60),
        || {
            let logs: Vec<String> = late.iter().map(|&i| fleet.procs[i].stderr()).collect();
            async move { logs.iter().all(|log| log.contains("SQLSTATE 53300")) }
        },
    )
    .await;
    let connections: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = 'app'")
            .fetch_one(&admin)
            .await
            .unwrap();
    assert_eq!(
        fleet.running().len(),
        6,
        "nobody crashed: {:?}",
        fleet.crashed()
    );

    // the first four stop; the late ones get connections and the rest of the work
    for i in 0..4 {
        fleet
            .terminate(i, Duration::from_secs(60), &setup.admin)
            .await;
    }
    let second_half = interleaved(jobs / 2, jobs - jobs / 2, 100, "conn", 20);
    enqueue_work(&setup.admin, &second_half, 1_000).await;
    checks::wait_until_done(&setup.admin, Duration::from_secs(300)).await;
    let late_names: Vec<String> = late.iter().map(|&i| fleet.procs[i].name.clone()).collect();
    let by_late: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM rel.ledger WHERE worker = ANY($1) AND ended_at IS NOT NULL",
    )
    .bind(&late_names)
    .fetch_one(&setup.admin)
    .await
    .unwrap();
    let late_logs: Vec<String> = late.iter().map(|&i| fleet.procs[i].stderr()).collect();
    let statuses = fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let leases_lost: u64 = fleet.procs.iter().map(|p| p.stat("leases_lost")).sum();
    let counts = checks::counts(&setup.admin).await;
    let retry_line = late_logs[0]
        .lines()
        .find(|l| l.contains("SQLSTATE 53300"))
        .unwrap_or("")
        .to_owned();

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "8. connection exhaustion",
            load: format!("{jobs} jobs / 100 groups; 6 procs × pool 5 (× 3 handlers)"),
            faults: "max_connections 20 (17 for the workers' role): 54 wanted".into(),
            enqueued: jobs,
            completed: counts.completed,
            duplicates: counts.duplicates.to_string(),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(Duration::from_secs(10)),
            notes: format!(
                "{connections} worker connections at the peak; the 2 late workers waited, then ran {by_late} jobs; 0 crashes; \
                 {leases_lost} leases lost by workers starved of connections (each duplicate is one of them)"
            ),
        },
        &counts,
    )
    .await;
    eprintln!("the late workers' log line: {retry_line}");

    assert!(statuses.iter().all(|s| s.success()), "{statuses:?}");
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert!(
        connections <= 17,
        "the server capped the role at 17: {connections}"
    );
    assert!(
        retry_line.contains("database not reachable yet, retrying")
            && retry_line.contains("SQLSTATE 53300"),
        "a clear line: {retry_line}"
    );
    assert!(by_late > 0, "throughput recovered on the late workers");
    // a worker short of connections may fail to heartbeat in time: then its lease lapses,
    // the job runs again elsewhere and the worker reports the lost lease; never silently
    assert!(
        counts.duplicates as u64 <= leases_lost,
        "every duplicate is a lease its worker reported lost: {counts:?}, leases lost {leases_lost}"
    );
    assert_eq!(counts.lost, 0, "{counts:?}");
    assert_eq!(counts.overlaps, 0);
    assert_eq!(counts.order_violations, 0);
    assert_eq!(counts.queue_left, 0);
    assert_eq!(counts.dead_letters, 0);
}
