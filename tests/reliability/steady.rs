//! Scenario 1: steady load. 50,000 jobs over 500 groups, 4 worker processes × 16 handlers:
//! every job runs exactly once, each group in message-id order, never two at once.

use std::time::Duration;

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::{Setup, enqueue_work, interleaved, ms, per_worker, scaled, serial};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_steady_load_runs_every_job_exactly_once_in_group_order() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let jobs = scaled(50_000);
    let groups = scaled(500).min(jobs);
    let lease = Duration::from_secs(30);
    let mut fleet = setup.fleet(
        "steady-w",
        &[
            ("HAREL_FW_CONCURRENCY", "16".into()),
            ms("HAREL_FW_LEASE_MS", lease),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
        ],
    );
    for slot in 0..4 {
        fleet.spawn(slot);
    }
    let specs = interleaved(0, jobs, groups, "steady", 0);
    enqueue_work(&setup.admin, &specs, 2_000).await;

    checks::wait_until_done(&setup.admin, Duration::from_secs(400)).await;
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;
    let spread = per_worker(&setup.admin).await;

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "1. steady load",
            load: format!("{jobs} jobs / {groups} groups, 4 procs × 16"),
            faults: "none".into(),
            enqueued: jobs,
            completed: counts.completed,
            duplicates: counts.duplicates.to_string(),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(lease),
            notes: format!(
                "overlaps {}, order violations {}, per worker {:?}",
                counts.overlaps,
                counts.order_violations,
                spread.iter().map(|(_, n)| *n).collect::<Vec<_>>()
            ),
        },
        &counts,
    )
    .await;

    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert_eq!(counts.expected, jobs);
    assert_eq!(counts.lost, 0, "lost jobs: {counts:?}");
    assert_eq!(
        counts.executions, jobs,
        "every job ran exactly once: {counts:?}"
    );
    assert_eq!(counts.distinct_keys, jobs);
    assert_eq!(counts.duplicates, 0);
    assert_eq!(counts.unfinished, 0);
    assert_eq!(counts.overlaps, 0, "two executions of a group overlapped");
    assert_eq!(
        counts.order_violations, 0,
        "a group ran out of message-id order"
    );
    assert_eq!(counts.queue_left, 0);
    assert_eq!(counts.leased_groups, 0);
    assert_eq!(counts.dead_letters, 0);
    assert_eq!(
        spread.len(),
        4,
        "every worker process took part: {spread:?}"
    );
    let stats_succeeded: u64 = fleet.procs.iter().map(|p| p.stat("succeeded")).sum();
    assert_eq!(
        stats_succeeded as i64, jobs,
        "the workers' own counters agree"
    );
}
