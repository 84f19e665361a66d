//! Scenario 2: worker crashes. The steady load while a random worker process gets SIGKILL
//! every 2 s and is restarted at once.

use std::time::Duration;

use rand::Rng;

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::{Setup, enqueue_work, interleaved, ms, scaled, serial};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s2_sigkilled_workers_lose_nothing_and_never_double_run_a_group() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let jobs = scaled(50_000);
    let groups = scaled(500).min(jobs);
    // a short lease, so the jobs of a killed worker come back quickly
    let lease = Duration::from_secs(3);
    let mut fleet = setup.fleet(
        "crash-w",
        &[
            ("HAREL_FW_CONCURRENCY", "16".into()),
            ms("HAREL_FW_LEASE_MS", lease),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
            // a job whose workers keep dying must not run out of attempts here
            ("HAREL_FW_MAX_ATTEMPTS", "1000".into()),
        ],
    );
    for slot in 0..4 {
        fleet.spawn(slot);
    }
    let specs = interleaved(0, jobs, groups, "crash", 2);
    enqueue_work(&setup.admin, &specs, 2_000).await;

    let mut kills = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM harel.jobs")
            .fetch_one(&setup.admin)
            .await
            .unwrap();
        if left == 0 || tokio::time::Instant::now() > deadline {
            break;
        }
        let running = fleet.running();
        assert_eq!(
            running.len(),
            4,
            "a worker died on its own: {:?}",
            fleet.crashed()
        );
        let victim = running[rand::rng().random_range(0..running.len())];
        let slot = fleet.procs[victim].slot;
        fleet.kill(victim, &setup.admin).await;
        kills += 1;
        fleet.spawn(slot);
    }
    checks::wait_until_done(&setup.admin, Duration::from_secs(120)).await;
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "2. worker crashes",
            load: format!("{jobs} jobs / {groups} groups, 4 procs × 16, lease 3 s"),
            faults: format!("{kills} × SIGKILL of a random worker (every 2 s), restarted"),
            enqueued: jobs,
            completed: counts.completed,
            duplicates: format!(
                "{} ({} killed mid-run, {} ran to the end but were killed before the ack)",
                counts.duplicates, counts.unfinished, counts.completed_twice
            ),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(lease),
            notes: format!(
                "overlaps {}, order violations {}, unexplained duplicates {}, stuck groups {}",
                counts.overlaps,
                counts.order_violations,
                counts.unexplained_duplicates,
                counts.stuck_groups
            ),
        },
        &counts,
    )
    .await;

    assert!(
        kills >= 5,
        "the run was long enough to kill workers: {kills}"
    );
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert_eq!(counts.expected, jobs);
    assert_eq!(counts.lost, 0, "every job completed: {counts:?}");
    assert_eq!(counts.distinct_keys, jobs);
    assert!(
        counts.unfinished > 0,
        "the kills hit running handlers (else this scenario proves nothing): {counts:?}"
    );
    assert_eq!(
        counts.unexplained_unfinished, 0,
        "every execution without an end belongs to a killed worker"
    );
    assert_eq!(
        counts.unexplained_duplicates, 0,
        "every re-execution follows an execution whose worker was killed"
    );
    assert_eq!(counts.overlaps, 0, "a group had two live executions");
    assert_eq!(
        counts.order_violations, 0,
        "a group ran out of message-id order"
    );
    assert_eq!(counts.queue_left, 0);
    assert_eq!(
        counts.stuck_groups, 0,
        "a group stayed leased past its lease"
    );
    assert_eq!(counts.leased_groups, 0);
    assert_eq!(counts.dead_letters, 0);
}
