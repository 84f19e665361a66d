//! Scenario 5: handlers that run 3× their lease. The heartbeat keeps them single; when the
//! heartbeat is blocked (the worker process is frozen with SIGSTOP for longer than the
//! lease: a partition), another worker takes the job over, and the stale worker's ack is
//! refused and reported when it wakes up.

use std::time::Duration;

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::{Setup, enqueue_work, ms, serial, wait_for};

const LEASE: Duration = Duration::from_secs(2);
const HANDLER_MS: u64 = 6_000; // 3 × the lease

fn env() -> Vec<(&'static str, String)> {
    vec![
        ("HAREL_FW_CONCURRENCY", "8".into()),
        ms("HAREL_FW_LEASE_MS", LEASE),
        ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
    ]
}

async fn count(pool: &sqlx::PgPool, sql: &'static str, worker: &str) -> i64 {
    sqlx::query_scalar(sql)
        .bind(worker)
        .fetch_one(pool)
        .await
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5a_the_heartbeat_keeps_handlers_three_times_their_lease_single() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let mut fleet = setup.fleet("slow-w", &env());
    fleet.spawn(0);
    fleet.spawn(1);
    let specs: Vec<_> = (0..12)
        .map(|k| (k, format!("slow-{k}"), HANDLER_MS))
        .collect();
    enqueue_work(&setup.admin, &specs, 100).await;
    checks::wait_until_done(&setup.admin, Duration::from_secs(120)).await;
    // idle for more than a lease: a job whose lease had lapsed would run again meanwhile
    tokio::time::sleep(LEASE * 2).await;
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;
    let leases_lost: u64 = fleet.procs.iter().map(|p| p.stat("leases_lost")).sum();
    let succeeded: u64 = fleet.procs.iter().map(|p| p.stat("succeeded")).sum();

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "5a. slow handlers, heartbeat on",
            load: "12 jobs of 6 s, lease 2 s, 2 procs × 8".into(),
            faults: "handlers run 3× the lease".into(),
            enqueued: 12,
            completed: counts.completed,
            duplicates: counts.duplicates.to_string(),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(LEASE),
            notes: format!("leases lost {leases_lost}, overlaps {}", counts.overlaps),
        },
        &counts,
    )
    .await;
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert_eq!(counts.lost, 0);
    assert_eq!(counts.executions, 12, "each slow job ran once: {counts:?}");
    assert_eq!(counts.duplicates, 0);
    assert_eq!(counts.overlaps, 0);
    assert_eq!(leases_lost, 0);
    assert_eq!(succeeded, 12);
    assert!(
        counts.max_lease_overrun(LEASE) >= LEASE,
        "the handlers did outlive their lease (else this proves nothing)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5b_a_partitioned_worker_loses_its_lease_and_its_late_ack_is_refused() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let mut fleet = setup.fleet("part-w", &env());
    let stale = fleet.spawn(0);
    let stale_name = fleet.procs[stale].name.clone();
    // two jobs that end while the worker is frozen (on waking, its completer and its
    // heartbeat race to find the lease lost), two that are still running when it wakes
    // (its heartbeat finds the lease lost first, for certain)
    let specs: Vec<_> = (0..4)
        .map(|k| {
            (
                k,
                format!("part-{k}"),
                if k < 2 { HANDLER_MS } else { 2 * HANDLER_MS },
            )
        })
        .collect();
    enqueue_work(&setup.admin, &specs, 100).await;
    let admin = setup.admin.clone();
    let name = stale_name.clone();
    wait_for(
        "the first worker runs the 4 jobs",
        Duration::from_secs(30),
        || {
            let (admin, name) = (admin.clone(), name.clone());
            async move {
                count(
                    &admin,
                    "SELECT count(*) FROM rel.ledger WHERE worker = $1",
                    &name,
                )
                .await
                    == 4
            }
        },
    )
    .await;

    // the partition: frozen, its heartbeat cannot reach the database
    fleet.stop_signal(stale);
    let fresh = fleet.spawn(1);
    let fresh_name = fleet.procs[fresh].name.clone();
    let name = fresh_name.clone();
    wait_for(
        "the second worker takes the 4 jobs over once their leases lapse, and completes the short ones",
        Duration::from_secs(60),
        || {
            let (admin, name) = (admin.clone(), name.clone());
            async move {
                count(
                    &admin,
                    "SELECT count(*) FILTER (WHERE key < 2 AND ended_at IS NOT NULL)
                          + count(*) FILTER (WHERE key >= 2)
                       FROM rel.ledger WHERE worker = $1",
                    &name,
                )
                .await
                    == 4
            }
        },
    )
    .await;

    // the partition heals: the stale worker's handlers finish and it tries to ack
    fleet.cont_signal(stale);
    let name = stale_name.clone();
    wait_for("the stale handlers end", Duration::from_secs(30), || {
        let (admin, name) = (admin.clone(), name.clone());
        async move {
            count(
                &admin,
                "SELECT count(*) FROM rel.ledger WHERE worker = $1 AND ended_at IS NOT NULL",
                &name,
            )
            .await
                == 4
        }
    })
    .await;
    checks::wait_until_done(&setup.admin, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(2)).await; // its completer writes (and is refused)
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;
    let stale_proc = &fleet.procs[stale];
    let fresh_proc = &fleet.procs[fresh];
    let takeovers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM rel.ledger n JOIN rel.ledger o
            ON o.key = n.key AND o.worker = $1 AND o.attempt = 1
         WHERE n.worker = $2 AND n.attempt = 2 AND n.started_at > o.started_at",
    )
    .bind(&stale_name)
    .bind(&fresh_name)
    .fetch_one(&setup.admin)
    .await
    .unwrap();

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "5b. slow handlers, worker partitioned",
            load: "2 jobs of 6 s + 2 of 12 s, lease 2 s".into(),
            faults: "SIGSTOP the holder past its lease, second worker takes over, SIGCONT".into(),
            enqueued: 4,
            completed: counts.completed,
            duplicates: format!(
                "{} (the stale executions, results refused)",
                counts.duplicates
            ),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(LEASE),
            notes: format!(
                "takeovers (attempt 2) {takeovers}; stale worker: leases_lost {}, succeeded {}; \
                 new holder: succeeded {}; overlapping intervals detected {}",
                stale_proc.stat("leases_lost"),
                stale_proc.stat("succeeded"),
                fresh_proc.stat("succeeded"),
                counts.overlaps
            ),
        },
        &counts,
    )
    .await;
    let stale_log = stale_proc.stderr();
    assert!(
        fleet
            .procs
            .iter()
            .all(|p| p.status.is_some_and(|s| s.success()))
    );
    assert_eq!(
        takeovers, 4,
        "the ledger shows each takeover (attempt 2 on the new holder)"
    );
    assert_eq!(
        stale_proc.stat("leases_lost"),
        4,
        "the stale worker reports its lost leases"
    );
    assert_eq!(stale_proc.stat("succeeded"), 0, "no stale ack was applied");
    assert_eq!(
        fresh_proc.stat("succeeded"),
        4,
        "each message completed once, by the new holder"
    );
    assert!(
        stale_log.contains("lease lost while the job runs"),
        "the stale worker's heartbeat finds the lost leases of the handlers still running:\n{stale_log}"
    );
    assert_eq!(
        stale_proc.stat("database_errors"),
        0,
        "the stale worker's heartbeat and acks got answers, not errors:\n{stale_log}"
    );
    // the checks see the fault: each stale execution overlaps its takeover
    assert_eq!(counts.overlaps, 4);
    assert_eq!(counts.duplicates, 4);
    assert_eq!(counts.lost, 0);
    assert_eq!(counts.queue_left, 0);
    assert_eq!(counts.dead_letters, 0);
}
