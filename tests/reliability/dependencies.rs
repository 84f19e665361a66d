//! Scenario 15: jobs that wait for other jobs (ADR 0033), over worker processes.
//!
//! - A fan-in: 1,000 parents completing concurrently on four processes release their one
//!   dependent exactly once, after the last of them ended.
//! - Chains of three and fan-ins while a random worker gets SIGKILL every 1.5 s: no
//!   dependent is lost (a parent's completion and its dependents' release are one
//!   transaction), and none starts before a parent's execution ended.

use std::time::Duration;

use harel_jobs::{BatchRef, EnqueueOptions, JobBatch};
use rand::Rng;
use sqlx::PgPool;

use crate::cluster::ClusterOptions;
use crate::jobs::Work;
use crate::{Setup, expect_keys, ms, scaled, serial, wait_for};

fn work(key: i64, sleep_ms: u64) -> Work {
    Work {
        key,
        sleep_ms,
        text: None,
    }
}

/// Adds a job of its own group, waiting for `after`; records it as expected.
fn add(
    batch: &mut JobBatch,
    specs: &mut Vec<crate::Spec>,
    key: i64,
    sleep_ms: u64,
    after: &[BatchRef],
) -> BatchRef {
    specs.push((key, format!("own-{key}"), sleep_ms));
    batch
        .add(
            work(key, sleep_ms),
            &EnqueueOptions::new().after(after.iter().copied()),
        )
        .expect("add")
}

async fn enqueue(pool: &PgPool, batch: JobBatch, specs: &[crate::Spec]) {
    let mut tx = pool.begin().await.expect("begin");
    batch.enqueue(&mut *tx).await.expect("enqueue");
    expect_keys(&mut *tx, specs).await;
    tx.commit().await.expect("commit");
}

/// Keys with no completed execution.
async fn lost(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT e.key FROM rel.expected e
          WHERE NOT EXISTS (SELECT 1 FROM rel.ledger l
                             WHERE l.key = e.key AND l.ended_at IS NOT NULL)
          ORDER BY e.key LIMIT 20",
    )
    .fetch_all(pool)
    .await
    .expect("lost keys")
}

/// Executions of a dependent that started before any execution of one of its parents
/// had ended (`links`: (parent key, dependent key)).
async fn early_starts(pool: &PgPool, links: &[(i64, i64)]) -> i64 {
    let (parents, dependents): (Vec<i64>, Vec<i64>) = links.iter().copied().unzip();
    sqlx::query_scalar(
        "SELECT count(*) FROM unnest($1::bigint[], $2::bigint[]) AS k(parent, dependent)
           JOIN rel.ledger c ON c.key = k.dependent
          WHERE c.started_at < (SELECT min(p.ended_at) FROM rel.ledger p
                                 WHERE p.key = k.parent AND p.ended_at IS NOT NULL)
             OR NOT EXISTS (SELECT 1 FROM rel.ledger p
                             WHERE p.key = k.parent AND p.ended_at IS NOT NULL)",
    )
    .bind(parents)
    .bind(dependents)
    .fetch_one(pool)
    .await
    .expect("early starts")
}

async fn executions_of(pool: &PgPool, key: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM rel.ledger WHERE key = $1")
        .bind(key)
        .fetch_one(pool)
        .await
        .expect("executions")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15a_a_fan_in_of_1000_parents_on_four_processes_releases_its_child_once() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let parents = scaled(1_000);
    let mut fleet = setup.fleet(
        "fanin-w",
        &[
            ("HAREL_FW_CONCURRENCY", "16".into()),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(100)),
        ],
    );
    let mut batch = JobBatch::new();
    let mut specs = Vec::new();
    let refs: Vec<BatchRef> = (0..parents)
        .map(|key| add(&mut batch, &mut specs, key, 2, &[]))
        .collect();
    let child = parents;
    add(&mut batch, &mut specs, child, 0, &refs);
    enqueue(&setup.admin, batch, &specs).await;
    for slot in 0..4 {
        fleet.spawn(slot);
    }

    wait_for("the child ran", Duration::from_secs(120), || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM rel.ledger WHERE key = $1 AND ended_at IS NOT NULL",
        )
        .bind(child)
        .fetch_one(&setup.admin)
        .await
        .unwrap_or(0)
            > 0
    })
    .await;
    // time for a second release to show, if there were one
    tokio::time::sleep(Duration::from_secs(1)).await;
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;

    let workers: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT worker) FROM rel.ledger WHERE key < $1")
            .bind(child)
            .fetch_one(&setup.admin)
            .await
            .unwrap();
    assert_eq!(workers, 4, "the parents completed on all four processes");
    assert!(lost(&setup.admin).await.is_empty());
    assert_eq!(
        executions_of(&setup.admin, child).await,
        1,
        "the child was released and ran exactly once"
    );
    let links: Vec<(i64, i64)> = (0..parents).map(|p| (p, child)).collect();
    assert_eq!(
        early_starts(&setup.admin, &links).await,
        0,
        "the child started after every parent ended"
    );
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM harel.jobs) + (SELECT count(*) FROM harel.job_waits)
              + (SELECT count(*) FROM harel.job_dependencies)",
    )
    .fetch_one(&setup.admin)
    .await
    .unwrap();
    assert_eq!(left, 0, "nothing left behind");
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s15b_sigkilled_workers_lose_no_dependent() {
    let _serial = serial();
    let setup = Setup::new(ClusterOptions::default()).await;
    let chains = scaled(1_500);
    let lease = Duration::from_secs(3);
    let mut fleet = setup.fleet(
        "dep-crash-w",
        &[
            ("HAREL_FW_CONCURRENCY", "16".into()),
            ms("HAREL_FW_LEASE_MS", lease),
            ms("HAREL_FW_POLL_MS", Duration::from_millis(200)),
            ("HAREL_FW_MAX_ATTEMPTS", "1000".into()),
        ],
    );
    // chains a → b → c, and every 50 chains' ends into one fan-in job
    let mut links = Vec::new();
    let mut key = 0;
    for chunk_start in (0..chains).step_by(50) {
        let mut batch = JobBatch::new();
        let mut specs = Vec::new();
        let mut ends = Vec::new();
        let mut end_keys = Vec::new();
        for _ in chunk_start..(chunk_start + 50).min(chains) {
            let a = add(&mut batch, &mut specs, key, 10, &[]);
            let b = add(&mut batch, &mut specs, key + 1, 10, &[a]);
            ends.push(add(&mut batch, &mut specs, key + 2, 10, &[b]));
            links.push((key, key + 1));
            links.push((key + 1, key + 2));
            end_keys.push(key + 2);
            key += 3;
        }
        add(&mut batch, &mut specs, key, 0, &ends);
        links.extend(end_keys.iter().map(|&end| (end, key)));
        key += 1;
        enqueue(&setup.admin, batch, &specs).await;
    }
    for slot in 0..4 {
        fleet.spawn(slot);
    }

    let mut kills = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
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
    fleet
        .terminate_all(Duration::from_secs(60), &setup.admin)
        .await;

    let executions = crate::executions(&setup.admin).await;
    eprintln!(
        "scenario 15b: {key} jobs ({chains} chains of three, {} fan-ins), {kills} SIGKILLs, \
         {executions} executions",
        key - chains * 3
    );
    assert!(
        kills >= 3,
        "the run was long enough to kill workers: {kills}"
    );
    assert_eq!(lost(&setup.admin).await, Vec::<i64>::new(), "no job lost");
    assert_eq!(
        early_starts(&setup.admin, &links).await,
        0,
        "no dependent started before a parent's execution ended"
    );
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM harel.jobs) + (SELECT count(*) FROM harel.job_waits)
              + (SELECT count(*) FROM harel.job_dependencies)
              + (SELECT count(*) FROM harel.dead_letters)",
    )
    .fetch_one(&setup.admin)
    .await
    .unwrap();
    assert_eq!(left, 0, "nothing left behind");
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
}
