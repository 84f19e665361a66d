//! Scenario 4: database killed. PostgreSQL gets SIGKILL mid-run (postmaster and server
//! processes, as when its machine dies) and restarts with crash recovery. A producer
//! enqueues in transactions and counts a job as committed only once `commit` returned OK:
//! every such job runs; no job of a transaction that rolled back, or was still open at the
//! kill, ever runs. Jobs whose commit errored may or may not exist: they are only counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use harel_jobs::JobBatch;
use sqlx::PgPool;

use crate::checks::{self, Figures};
use crate::cluster::ClusterOptions;
use crate::jobs::Work;
use crate::{Setup, Spec, expect_keys, ms, serial};

/// What the producer knows about its transactions.
#[derive(Default)]
struct Produced {
    /// `commit` returned OK.
    committed: Vec<Spec>,
    /// Rolled back on purpose, or failed before `commit` was sent.
    never_committed: Vec<i64>,
    /// `commit` was sent and failed: unknown.
    uncertain: Vec<i64>,
    transactions: u64,
}

const PER_TX: i64 = 20;

async fn produce(pool: PgPool, stop: Arc<AtomicBool>) -> Produced {
    let mut produced = Produced::default();
    let mut next_key = 0i64;
    while !stop.load(Ordering::Relaxed) {
        produced.transactions += 1;
        let specs: Vec<Spec> = (0..PER_TX)
            .map(|i| {
                let key = next_key + i;
                (key, format!("kill-{}", key % 100), 5)
            })
            .collect();
        next_key += PER_TX;
        let keys: Vec<i64> = specs.iter().map(|s| s.0).collect();
        let mut tx = match pool.begin().await {
            Ok(tx) => tx,
            Err(_) => {
                produced.never_committed.extend(keys);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut batch = JobBatch::new();
        for (key, group, sleep_ms) in &specs {
            let job = Work {
                key: *key,
                sleep_ms: *sleep_ms,
                text: None,
            };
            batch
                .push_with(job, &harel_jobs::EnqueueOptions::new().group(group.clone()))
                .unwrap();
        }
        if batch.enqueue(&mut *tx).await.is_err() {
            drop(tx);
            produced.never_committed.extend(keys);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if produced.transactions % 5 == 0 {
            // an application transaction that changes its mind
            let _ = tx.rollback().await;
            produced.never_committed.extend(keys);
            continue;
        }
        match tx.commit().await {
            Ok(()) => produced.committed.extend(specs),
            Err(_) => produced.uncertain.extend(keys),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    produced
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_killed_database_runs_every_committed_job_and_no_uncommitted_one() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let lease = Duration::from_secs(10);
    let mut fleet = setup.fleet(
        "dbkill-w",
        &[
            ("HAREL_FW_CONCURRENCY", "8".into()),
            ms("HAREL_FW_LEASE_MS", lease),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(500)),
        ],
    );
    for slot in 0..4 {
        fleet.spawn(slot);
    }

    let producer_pool = setup.cluster.admin_pool(2).await;
    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn(produce(producer_pool.clone(), Arc::clone(&stop)));
    tokio::time::sleep(Duration::from_secs(5)).await;

    // a transaction left open at the kill: its jobs must never run
    let open_keys: Vec<i64> = (0..PER_TX).map(|i| 900_000_000 + i).collect();
    let open_pool = setup.cluster.admin_pool(1).await;
    let mut open_tx = open_pool.begin().await.unwrap();
    let mut batch = JobBatch::new();
    for &key in &open_keys {
        batch
            .push_with(
                Work {
                    key,
                    sleep_ms: 0,
                    text: None,
                },
                &harel_jobs::EnqueueOptions::new().group(format!("open-{}", key % 5)),
            )
            .unwrap();
    }
    batch.enqueue(&mut *open_tx).await.unwrap();

    setup.cluster.kill();
    drop(open_tx); // its connection is gone with the server
    tokio::time::sleep(Duration::from_secs(2)).await;
    setup.cluster.start_server(); // crash recovery
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap();

    // the bookkeeping, after the fact: committed keys are expected, the others forbidden
    expect_keys(&setup.admin, &produced.committed).await;
    let mut forbidden: Vec<(i64, &str)> = produced
        .never_committed
        .iter()
        .map(|&k| (k, "rolled back or failed before commit"))
        .collect();
    forbidden.extend(open_keys.iter().map(|&k| (k, "open at the kill")));
    let (keys, whys): (Vec<i64>, Vec<&str>) = forbidden.into_iter().unzip();
    sqlx::query("INSERT INTO rel.forbidden SELECT * FROM unnest($1::bigint[], $2::text[])")
        .bind(&keys)
        .bind(&whys)
        .execute(&setup.admin)
        .await
        .unwrap();

    let counts = checks::wait_until_done(&setup.admin, Duration::from_secs(180)).await;
    // let any straggler that should not exist show up before counting
    tokio::time::sleep(Duration::from_secs(2)).await;
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;
    let counts = {
        let _ = counts;
        checks::counts(&setup.admin).await
    };
    let uncertain_ran: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT key) FROM rel.ledger WHERE key = ANY($1)")
            .bind(&produced.uncertain)
            .fetch_one(&setup.admin)
            .await
            .unwrap();

    checks::report(
        &setup.admin,
        &Figures {
            scenario: "4. database killed",
            load: format!(
                "producer: {} transactions × {PER_TX} jobs (every 5th rolled back); 4 procs × 8, lease 10 s",
                produced.transactions
            ),
            faults: "SIGKILL to the postmaster and every server process, restart with crash recovery".into(),
            enqueued: produced.committed.len() as i64,
            completed: counts.completed,
            duplicates: counts.duplicates.to_string(),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(lease),
            notes: format!(
                "{} never-committed jobs (incl. {} open at the kill) ran: {}; commit errored for {} jobs, {} of them ran",
                keys.len(),
                open_keys.len(),
                counts.forbidden_ran,
                produced.uncertain.len(),
                uncertain_ran
            ),
        },
        &counts,
    )
    .await;

    assert!(
        setup
            .cluster
            .server_log()
            .contains("database system was not properly shut down; automatic recovery in progress"),
        "the restart ran crash recovery"
    );
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert!(
        produced.committed.len() > 100,
        "the producer committed before and after the kill"
    );
    assert!(
        !produced.never_committed.is_empty(),
        "some transactions rolled back or failed"
    );
    assert_eq!(counts.lost, 0, "a committed job never ran: {counts:?}");
    assert_eq!(
        counts.forbidden_ran, 0,
        "a job whose transaction never committed ran"
    );
    assert_eq!(counts.overlaps, 0);
    assert_eq!(counts.order_violations, 0);
    assert_eq!(counts.queue_left, 0);
    assert_eq!(counts.leased_groups, 0);
    assert_eq!(counts.dead_letters, 0);
}
