//! Scenario 7: poison and bad input. A payload that does not decode, an unknown job kind, a
//! handler that panics, one that hangs past its timeout, and one that `abort`s its worker
//! process every time (the worker is restarted after each death): each ends in the
//! dead-letter table with a clear error after its attempts, the job queued behind it in its
//! group then runs, and the other groups keep completing meanwhile.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use harel_jobs::transport::{OutgoingMessage, Transport};
use harel_jobs::{Client, DeadLetterQuery, Job, JobBatch};

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::fleet::record_exit;
use crate::jobs::{Aborts, Hangs, POISON_ATTEMPTS, Panics, Work};
use crate::{Setup, Spec, enqueue_work, ms, scaled, serial};

/// The poison kinds' own attempts.
const MAX_ATTEMPTS: u32 = POISON_ATTEMPTS;
/// The worker's default (good jobs, and a kind it does not know): one more than the aborting
/// job's deaths, each of which costs every job its process held an attempt.
const DEFAULT_ATTEMPTS: u32 = POISON_ATTEMPTS + 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_poison_jobs_end_as_dead_letters_without_blocking_anyone() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let lease = Duration::from_secs(1);
    let mut fleet = setup.fleet(
        "poison-w",
        &[
            ("HAREL_FW_CONCURRENCY", "4".into()),
            ms("HAREL_FW_LEASE_MS", lease),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(100)),
            ("HAREL_FW_MAX_ATTEMPTS", DEFAULT_ATTEMPTS.to_string()),
            ms("HAREL_FW_BACKOFF_MS", Duration::from_millis(200)),
            ms("HAREL_FW_TIMEOUT_MS", Duration::from_millis(500)),
        ],
    );
    fleet.spawn(0);
    fleet.spawn(1);

    // phase 1: the poison that does not kill its worker, each at the head of its own
    // group with a good job queued behind it, and plenty of good work in other groups
    let transport = Transport::default();
    let mut poison: Vec<(&str, harel_jobs::JobId)> = Vec::new();
    let raw = [
        ("poison-badpayload", "work", r#"{"wrong": true}"#),
        ("poison-unknown", "nobody_knows", "{}"),
    ];
    for (group, kind, payload) in raw {
        let id = transport
            .publish(&setup.admin, &OutgoingMessage::new(group, kind, payload))
            .await
            .unwrap();
        poison.push((group, id));
    }
    let mut batch = JobBatch::new();
    batch
        .push_with(
            Panics { key: -1 },
            &harel_jobs::EnqueueOptions::new().group("poison-panic"),
        )
        .unwrap();
    batch
        .push_with(
            Hangs { key: -2 },
            &harel_jobs::EnqueueOptions::new().group("poison-hang"),
        )
        .unwrap();
    let typed = batch.enqueue(&setup.admin).await.unwrap();
    for (group, id) in ["poison-panic", "poison-hang"].into_iter().zip(typed) {
        poison.push((group, id));
    }
    let behind = |groups: &[&str], first: i64| -> Vec<Spec> {
        groups
            .iter()
            .enumerate()
            .map(|(i, group)| (first + i as i64, group.to_string(), 0))
            .collect()
    };
    let groups: Vec<&str> = poison.iter().map(|(g, _)| *g).collect();
    enqueue_work(&setup.admin, &behind(&groups, 1_000_000), 100).await;
    let good = scaled(2_000);
    enqueue_work(
        &setup.admin,
        &crate::interleaved(0, good / 2, 50, "good", 20),
        1_000,
    )
    .await;
    let mut deaths = Vec::new();
    supervise(&setup, &mut fleet, &mut deaths, 4).await;
    assert!(
        deaths.is_empty(),
        "no worker died in phase 1: {deaths:?}\n{}",
        fleet.all_stderr()
    );

    // phase 2: a job that aborts its worker process on every attempt. The good work goes
    // in first, and the aborting job with the job behind it in one transaction right before
    // `supervise`: a death is only reaped (and its executions' end recorded) while
    // `supervise` runs, so a worker that died during a long enqueue would look as if it had
    // run on past its lease and overlapped the executions that took its groups over.
    let rest = crate::interleaved(good / 2, good - good / 2, 50, "good", 20);
    enqueue_work(&setup.admin, &rest, 1_000).await;
    let follower = behind(&["poison-abort"], 2_000_000);
    let mut tx = setup.admin.begin().await.unwrap();
    let id = harel_jobs::Enqueue::new(Aborts { key: -3 }, &mut *tx)
        .group("poison-abort")
        .await
        .unwrap();
    let mut jobs = JobBatch::new();
    jobs.push_with(
        Work {
            key: follower[0].0,
            sleep_ms: 0,
            text: None,
        },
        &harel_jobs::EnqueueOptions::new().group("poison-abort"),
    )
    .unwrap();
    jobs.enqueue(&mut *tx).await.unwrap();
    crate::expect_keys(&mut *tx, &follower).await;
    tx.commit().await.unwrap();
    poison.push(("poison-abort", id));
    supervise(&setup, &mut fleet, &mut deaths, 5).await;

    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = checks::counts(&setup.admin).await;

    let letters = Client::new(setup.admin.clone())
        .dead_letters()
        .list(&DeadLetterQuery::default())
        .await
        .unwrap();
    let letter = |group: &str| {
        letters
            .iter()
            .find(|l| l.group == group)
            .unwrap_or_else(|| panic!("no dead letter for {group}: {letters:#?}"))
    };
    // good jobs that completed while the poison was being worked through
    let completed_meanwhile: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM rel.ledger
          WHERE group_id LIKE 'good-%' AND ended_at IS NOT NULL
            AND ended_at > (SELECT min(started_at) FROM rel.ledger WHERE key < 0)
            AND ended_at < (SELECT max(failed_at) FROM harel.dead_letters)",
    )
    .fetch_one(&setup.admin)
    .await
    .unwrap();

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "7. poison and bad input",
            load: format!("{good} good jobs / 50 groups + 5 poison jobs (each with a job behind it), 2 procs × 4, {MAX_ATTEMPTS} attempts ({DEFAULT_ATTEMPTS} for the others)"),
            faults: format!(
                "bad payload, unknown kind, panic, hang past 500 ms timeout, abort() ({} worker deaths, restarted)",
                deaths.len()
            ),
            enqueued: good + 10,
            completed: counts.completed,
            duplicates: counts.duplicates.to_string(),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(lease),
            notes: format!(
                "5 dead letters with their errors; {completed_meanwhile} good jobs completed while the poison was retried"
            ),
        },
        &counts,
    )
    .await;
    for l in &letters {
        eprintln!(
            "dead letter {} {} attempts {}: {}",
            l.group, l.kind, l.attempts, l.last_error
        );
    }

    assert_eq!(letters.len(), 5, "{letters:#?}");
    let bad = letter("poison-badpayload");
    assert_eq!(
        bad.attempts, 1,
        "a payload that cannot decode is not retried"
    );
    assert!(
        bad.last_error
            .starts_with("payload does not decode as job kind \"work\"")
    );
    assert_eq!(bad.payload, r#"{"wrong": true}"#);
    let unknown = letter("poison-unknown");
    assert_eq!(unknown.attempts, DEFAULT_ATTEMPTS);
    assert!(
        unknown
            .last_error
            .starts_with("no handler registered for job kind \"nobody_knows\""),
        "{}",
        unknown.last_error
    );
    let panic = letter("poison-panic");
    assert_eq!(
        (panic.attempts, panic.kind.as_str()),
        (MAX_ATTEMPTS, Panics::KIND)
    );
    assert!(
        panic
            .last_error
            .starts_with("handler panicked: poison job -1 panics on purpose"),
        "{}",
        panic.last_error
    );
    let hang = letter("poison-hang");
    assert_eq!(
        (hang.attempts, hang.kind.as_str()),
        (MAX_ATTEMPTS, Hangs::KIND)
    );
    assert!(
        hang.last_error.starts_with("timed out after 500ms"),
        "{}",
        hang.last_error
    );
    let abort = letter("poison-abort");
    assert_eq!(abort.kind, Aborts::KIND);
    assert_eq!(
        abort.attempts, MAX_ATTEMPTS,
        "the attempts made, not the claims"
    );
    assert!(
        abort.last_error.contains("never reported a result"),
        "{}",
        abort.last_error
    );
    assert_eq!(
        deaths,
        vec![Some(libc::SIGABRT); MAX_ATTEMPTS as usize],
        "the aborting job killed its worker once per attempt, then was given up"
    );
    // every poison attempt is in the ledger: the abort's without an end
    let aborted_runs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM rel.ledger WHERE key = -3 AND ended_at IS NULL")
            .fetch_one(&setup.admin)
            .await
            .unwrap();
    assert_eq!(aborted_runs, MAX_ATTEMPTS as i64);
    assert!(
        completed_meanwhile > 0,
        "other groups kept completing while the poison was retried"
    );
    assert_eq!(
        counts.lost, 0,
        "the jobs behind the poison and all good jobs ran: {counts:?}"
    );
    assert_eq!(counts.overlaps, 0);
    assert_eq!(counts.order_violations, 0);
    assert_eq!(counts.queue_left, 0);
    let _ = Work::KIND;
}

/// Restarts every worker that dies, until `dead_letters` dead letters exist, the queue is
/// empty and every expected job completed (or 120 s pass).
async fn supervise(
    setup: &Setup,
    fleet: &mut crate::fleet::Fleet,
    deaths: &mut Vec<Option<i32>>,
    dead_letters: i64,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        for index in 0..fleet.procs.len() {
            if fleet.procs[index].status.is_some() {
                continue;
            }
            if let Some(status) = fleet.procs[index].exited() {
                let name = fleet.procs[index].name.clone();
                record_exit(&setup.admin, &name, "abort").await;
                deaths.push(status.signal());
                let slot = fleet.procs[index].slot;
                fleet.spawn(slot);
            }
        }
        let (dead, left, missing): (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM harel.dead_letters),
                    (SELECT count(*) FROM harel.jobs),
                    (SELECT count(*) FROM rel.expected e WHERE NOT EXISTS
                        (SELECT 1 FROM rel.ledger l WHERE l.key = e.key AND l.ended_at IS NOT NULL))",
        )
        .fetch_one(&setup.admin)
        .await
        .unwrap();
        if (dead >= dead_letters && left == 0 && missing == 0)
            || tokio::time::Instant::now() > deadline
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
