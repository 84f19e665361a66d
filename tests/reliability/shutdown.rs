//! Scenario 6: graceful shutdown under load. SIGTERM to every worker mid-run, then new
//! workers: nothing lost, nothing waits for a lease to lapse (the lease is an hour, so any
//! job left leased would hang the second half of the run).

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::{Setup, Spec, ended, enqueue_work, ms, scaled, serial, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_sigterm_mid_run_gives_everything_back_at_once() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let jobs = scaled(10_000);
    let groups = scaled(200).min(jobs);
    let lease = Duration::from_secs(3600);
    let env = [
        ("HAREL_FW_CONCURRENCY", "16".to_string()),
        ms("HAREL_FW_LEASE_MS", lease),
        ms("HAREL_FW_POLL_MS", Duration::from_millis(500)),
        // handlers of 20 to 420 ms; the longest are cut off and given back
        ms("HAREL_FW_GRACE_MS", Duration::from_millis(300)),
    ];
    let mut first = setup.fleet("term-a", &env);
    for slot in 0..4 {
        first.spawn(slot);
    }
    let specs: Vec<Spec> = (0..jobs)
        .map(|k| (k, format!("term-{}", k % groups), 20 + (k as u64 % 5) * 100))
        .collect();
    enqueue_work(&setup.admin, &specs, 2_000).await;
    let admin = setup.admin.clone();
    wait_for("a third of the jobs done", Duration::from_secs(300), || {
        let admin = admin.clone();
        async move { ended(&admin).await >= jobs / 3 }
    })
    .await;

    let statuses = first
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let mid = checks::counts(&setup.admin).await;
    let released: u64 = first.procs.iter().map(|p| p.stat("released")).sum();
    let succeeded_first: u64 = first.procs.iter().map(|p| p.stat("succeeded")).sum();

    let mut second = setup.fleet("term-b", &env);
    for slot in 0..4 {
        second.spawn(slot);
    }
    checks::wait_until_done(&setup.admin, Duration::from_secs(300)).await;
    second
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "6. graceful shutdown",
            load: format!("{jobs} jobs of 20–420 ms / {groups} groups, 4 procs × 16, lease 1 h"),
            faults: "SIGTERM to all 4 workers after a third (grace 300 ms), then 4 new workers"
                .into(),
            enqueued: jobs,
            completed: counts.completed,
            duplicates: format!("{} (cut off by the grace period, given back)", counts.duplicates),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(lease),
            notes: format!(
                "after the SIGTERMs: {} groups still leased, {} messages left, {released} released, {succeeded_first} acked by the first workers; overlaps {}",
                mid.leased_groups, mid.queue_left, counts.overlaps
            ),
        },
        &counts,
    )
    .await;

    assert!(
        statuses.iter().all(|s| s.success()),
        "every worker shut down cleanly on SIGTERM: {statuses:?} {:?}",
        statuses.iter().map(|s| s.signal()).collect::<Vec<_>>()
    );
    assert!(mid.queue_left > 0, "the shutdown happened mid-run");
    assert_eq!(
        mid.leased_groups, 0,
        "after a graceful shutdown no group is left leased (nothing waits for the 1 h lease)"
    );
    assert!(
        released > 0,
        "some running jobs were cut off and given back"
    );
    assert!(second.crashed().is_empty() && first.crashed().is_empty());
    assert_eq!(counts.lost, 0, "{counts:?}");
    assert_eq!(counts.distinct_keys, jobs);
    // a duplicate is a job whose handler the grace period cut off (possibly after its last
    // side effect, before it returned): each was given back, and counted as released
    assert!(
        counts.duplicates as u64 <= released,
        "every re-run job had been given back by the shutdown: {counts:?}, released {released}"
    );
    assert_eq!(counts.unexplained_unfinished, 0);
    assert_eq!(counts.overlaps, 0);
    assert_eq!(counts.order_violations, 0);
    assert_eq!(counts.queue_left, 0);
    assert_eq!(counts.leased_groups, 0);
    assert_eq!(counts.dead_letters, 0);
}
