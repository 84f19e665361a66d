//! Unique jobs against a real PostgreSQL: at most one queued job per key under concurrent
//! enqueues, duplicates as typed results that leave the transaction usable, and keys freed
//! (or held for a period) when their job leaves the queue.

use std::collections::HashSet;
use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, Settlement};
use harel_jobs::{
    Client, EnqueueOptions, Enqueued, InvalidMessage, Job, JobId, PublishError, Unique,
};
use harel_jobs_suite::SuiteSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Sync {
    account: u32,
}

impl Job for Sync {
    const KIND: &'static str = "sync";

    fn unique(&self) -> Option<Unique> {
        Some(Unique::new(format!("sync:{}", self.account)))
    }
}

fn queue(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

async fn claim_one(q: &SuiteSchema) -> harel_jobs::transport::ClaimedMessage {
    q.transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("a job to claim")
}

/// 16 tasks × 1,000 enqueues over 50 keys, each in its own transaction, some rolled back:
/// exactly one job per key, and every duplicate names that job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_enqueues_of_one_key_queue_exactly_one_job() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let mut tasks = Vec::new();
    for task in 0..16u32 {
        let queue = queue.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for n in 0..1_000u32 {
                let account = (n * 7 + task) % 50;
                let mut tx = queue.pool().begin().await.unwrap();
                let result = queue.enqueue(&mut *tx, Sync { account }).await;
                // some transactions roll back: their key must go to someone else
                if n % 10 == 3 {
                    tx.rollback().await.unwrap();
                    continue;
                }
                tx.commit().await.unwrap();
                match result {
                    Ok(id) => seen.push((account, id, true)),
                    Err(PublishError::Duplicate { existing }) => {
                        seen.push((account, existing, false))
                    }
                    Err(other) => panic!("{other}"),
                }
            }
            seen
        }));
    }
    let mut new = HashSet::new();
    let mut named = HashSet::new();
    for task in tasks {
        for (account, id, is_new) in task.await.unwrap() {
            if is_new {
                assert!(new.insert(account), "two jobs for account {account}");
            }
            named.insert((account, id));
        }
    }
    assert_eq!(new.len(), 50);
    assert_eq!(q.count("jobs").await, 50, "exactly one job per key");
    // every id reported (new or duplicate) for a key is that key's one job
    assert_eq!(named.len(), 50, "{named:?}");
    assert_eq!(q.count("unique_keys").await, 50);
}

/// A duplicate inside a transaction is a typed result: nothing written for it, the
/// transaction goes on and commits the rest.
#[tokio::test]
async fn a_duplicate_leaves_the_transaction_usable() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let first = queue.enqueue(&q.pool, Sync { account: 1 }).await.unwrap();
    let mut tx = q.pool.begin().await.unwrap();
    let duplicate = queue.enqueue(&mut *tx, Sync { account: 1 }).await;
    assert!(matches!(duplicate, Err(PublishError::Duplicate { existing }) if existing == first));
    assert_eq!(duplicate.unwrap_err().duplicate_of(), Some(first));
    let other = queue.enqueue(&mut *tx, Sync { account: 2 }).await.unwrap();
    tx.commit().await.unwrap();
    assert!(queue.job(other).await.unwrap().is_some());
    assert_eq!(q.count("jobs").await, 2);

    // in one batch: the first with a key takes it, the later ones are its duplicates
    let mut batch = queue.batch();
    batch.push(Sync { account: 3 }).unwrap();
    batch.push(Sync { account: 3 }).unwrap();
    batch.push(Sync { account: 1 }).unwrap();
    batch
        .push_with(
            Sync { account: 9 },
            &EnqueueOptions::new().unique(Unique::new("explicit")),
        )
        .unwrap();
    let outcomes = batch.enqueue_each(&q.pool).await.unwrap();
    let fresh = outcomes[0].id();
    assert!(!outcomes[0].is_duplicate());
    assert_eq!(outcomes[1], Enqueued::Duplicate { existing: fresh });
    assert_eq!(outcomes[2], Enqueued::Duplicate { existing: first });
    assert!(!outcomes[3].is_duplicate());
    assert_eq!(q.count("jobs").await, 4);
}

/// A second enqueue of a key another transaction has enqueued but not committed waits for
/// it: and takes the key if that transaction rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_held_by_an_open_transaction_goes_to_the_next_if_it_rolls_back() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let mut open = q.pool.begin().await.unwrap();
    queue
        .enqueue(&mut *open, Sync { account: 5 })
        .await
        .unwrap();
    let second = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.enqueue(queue.pool(), Sync { account: 5 }).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !second.is_finished(),
        "it must wait for the open transaction"
    );
    open.rollback().await.unwrap();
    let id = second.await.unwrap().expect("the key is free again");
    assert!(queue.job(id).await.unwrap().is_some());
}

/// A duplicate found inside a transaction that stays open holds no lock on the key: the
/// settle that frees the key does not wait for that transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_in_an_open_transaction_does_not_block_the_holders_settle() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    queue.enqueue(&q.pool, Sync { account: 8 }).await.unwrap();
    let lease = claim_one(&q).await.lease;
    let mut open = q.pool.begin().await.unwrap();
    let duplicate = queue.enqueue(&mut *open, Sync { account: 8 }).await;
    assert!(matches!(duplicate, Err(PublishError::Duplicate { .. })));
    // the holder completes while that transaction is still open
    let acked = tokio::time::timeout(Duration::from_secs(10), q.transport.ack(&q.pool, &lease))
        .await
        .expect("the settle waited for the duplicate's transaction")
        .unwrap();
    assert!(acked.is_applied());
    open.commit().await.unwrap();
    queue
        .enqueue(&q.pool, Sync { account: 8 })
        .await
        .expect("the key is free");
}

/// The key is freed when its job completes, dies or is cancelled; with a hold period it
/// stays held that long after completion (and not after a failure).
#[tokio::test]
async fn a_key_is_freed_when_its_job_leaves_the_queue_or_held_for_its_period() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);

    // completed: free at once
    queue.enqueue(&q.pool, Sync { account: 1 }).await.unwrap();
    let lease = claim_one(&q).await.lease;
    // running still holds it
    assert!(queue.enqueue(&q.pool, Sync { account: 1 }).await.is_err());
    assert!(q.transport.ack(&q.pool, &lease).await.unwrap().is_applied());
    queue.enqueue(&q.pool, Sync { account: 1 }).await.unwrap();

    // dead: free
    let lease = claim_one(&q).await.lease;
    let dead = Settlement::dead_letter("no such account");
    assert!(
        q.transport
            .settle(&q.pool, &lease, dead)
            .await
            .unwrap()
            .is_applied()
    );
    let again = queue.enqueue(&q.pool, Sync { account: 1 }).await.unwrap();

    // cancelled: free
    queue.cancel(again).await.unwrap();
    queue.enqueue(&q.pool, Sync { account: 1 }).await.unwrap();
    let lease = claim_one(&q).await.lease;
    assert!(q.transport.ack(&q.pool, &lease).await.unwrap().is_applied());

    // held for a period after completion: "at most once per period"
    let hourly = || {
        EnqueueOptions::new()
            .unique(Unique::new("hourly").hold_after_completion(Duration::from_millis(800)))
    };
    let mut batch = queue.batch();
    batch.push_with(Sync { account: 2 }, &hourly()).unwrap();
    let first = batch.enqueue(&q.pool).await.unwrap()[0];
    let lease = claim_one(&q).await.lease;
    assert!(q.transport.ack(&q.pool, &lease).await.unwrap().is_applied());
    let held = queue
        .enqueue(&q.pool, Sync { account: 2 })
        .unique(Unique::new("hourly"))
        .await;
    assert!(matches!(held, Err(PublishError::Duplicate { existing }) if existing == first));
    tokio::time::sleep(Duration::from_millis(900)).await;
    let after: JobId = queue
        .enqueue(&q.pool, Sync { account: 2 })
        .unique(Unique::new("hourly"))
        .await
        .expect("free after its period");
    assert!(after > first);

    // a dead job frees its key, whatever its hold
    let lease = claim_one(&q).await.lease;
    let dead = Settlement::dead_letter("broken");
    assert!(
        q.transport
            .settle(&q.pool, &lease, dead)
            .await
            .unwrap()
            .is_applied()
    );
    queue
        .enqueue(&q.pool, Sync { account: 2 })
        .unique(Unique::new("hourly"))
        .await
        .expect("a dead job frees its key");
}

/// Bad keys are refused before anything is sent.
#[tokio::test]
async fn bad_keys_are_refused_with_a_typed_error() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    for key in [String::new(), "k".repeat(1025), "nul\0".to_owned()] {
        let refused = queue
            .enqueue(&q.pool, Sync { account: 1 })
            .unique(Unique::new(key))
            .await;
        assert!(matches!(
            refused,
            Err(PublishError::Invalid(
                InvalidMessage::InvalidUniqueKey { .. }
            ))
        ));
    }
    assert_eq!(q.count("jobs").await, 0);
}
