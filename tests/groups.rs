//! `Queue::groups` and `Queue::group` against a real PostgreSQL: each status, the job
//! counts and their cap, keyset pages, and refused arguments.

use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage, Settlement};
use harel_jobs::{GROUP_JOBS_COUNT_CAP, GroupQuery, GroupStatus, JobId, Queue, QueueError};
use harel_jobs_suite::TestQueue;

fn queue(q: &TestQueue) -> Queue {
    Queue::with_schema(q.pool.clone(), q.schema.clone())
}

async fn publish(q: &TestQueue, message: OutgoingMessage) -> JobId {
    JobId::new(q.transport.publish(&q.pool, &message).await.unwrap())
}

#[tokio::test]
async fn groups_show_their_status_head_and_job_count() {
    let q = TestQueue::new().await;
    let queue = queue(&q);
    // a: three jobs, leased; b: one job, parked for a retry; c: scheduled for later;
    // d: two waiting jobs
    let a = publish(&q, OutgoingMessage::new("a", "k", "{}")).await;
    for _ in 0..2 {
        publish(&q, OutgoingMessage::new("a", "k", "{}")).await;
    }
    let b = publish(&q, OutgoingMessage::new("b", "k", "{}")).await;
    let claimed = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(60)).limit(10),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let b_lease = claimed
        .iter()
        .find(|m| m.lease.seq == b.get())
        .expect("b claimed")
        .lease
        .clone();
    let retry = Settlement::Release {
        delay: Duration::from_secs(3600),
        error: Some("boom".into()),
        count_attempt: true,
    };
    let settled = q.transport.settle(&q.pool, &b_lease, retry).await.unwrap();
    assert_eq!(settled, LeaseOutcome::Applied);
    publish(
        &q,
        OutgoingMessage::new("c", "k", "{}").delay(Duration::from_secs(3600)),
    )
    .await;
    let d = publish(
        &q,
        OutgoingMessage::new("d", "k", "{}").queue("partner_api"),
    )
    .await;
    publish(
        &q,
        OutgoingMessage::new("d", "k", "{}").queue("partner_api"),
    )
    .await;

    let page = queue.groups(&GroupQuery::new()).await.unwrap();
    assert_eq!(page.next, None);
    let seen: Vec<_> = page
        .groups
        .iter()
        .map(|g| (g.id.as_str(), g.status, g.jobs, g.head, g.head_attempts))
        .collect();
    assert_eq!(
        seen,
        [
            ("a", GroupStatus::Leased, 3, Some(a), 1),
            ("b", GroupStatus::Parked, 1, Some(b), 1),
            ("c", GroupStatus::Parked, 1, page.groups[2].head, 0),
            ("d", GroupStatus::Waiting, 2, Some(d), 0),
        ]
    );
    assert!(page.groups.iter().all(|g| !g.jobs_capped));
    let queues: Vec<&str> = page.groups.iter().map(|g| g.queue.as_str()).collect();
    assert_eq!(queues, ["default", "default", "default", "partner_api"]);

    let one = queue.group("d").await.unwrap().expect("d holds jobs");
    assert_eq!((one.id.as_str(), one.jobs, one.head), ("d", 2, Some(d)));
    assert!(queue.group("nobody").await.unwrap().is_none());
}

#[tokio::test]
async fn groups_come_in_keyset_pages() {
    let q = TestQueue::new().await;
    let queue = queue(&q);
    for n in 0..7 {
        publish(&q, OutgoingMessage::new(format!("g{n}"), "k", "{}")).await;
    }
    let mut query = GroupQuery::new().limit(3);
    let mut ids = Vec::new();
    let mut pages = 0;
    loop {
        let page = queue.groups(&query).await.unwrap();
        pages += 1;
        ids.extend(page.groups.into_iter().map(|g| g.id));
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(ids, ["g0", "g1", "g2", "g3", "g4", "g5", "g6"]);
}

#[tokio::test]
async fn a_large_group_is_counted_up_to_the_cap() {
    let q = TestQueue::new().await;
    let queue = queue(&q);
    let over = GROUP_JOBS_COUNT_CAP as usize + 5;
    let mut tx = q.pool.begin().await.unwrap();
    for _ in 0..over {
        q.transport
            .publish(&mut *tx, &OutgoingMessage::new("big", "k", "{}"))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let big = queue.group("big").await.unwrap().expect("found");
    assert_eq!((big.jobs, big.jobs_capped), (GROUP_JOBS_COUNT_CAP, true));
}

#[tokio::test]
async fn bad_group_arguments_are_refused_before_they_are_sent() {
    let q = TestQueue::new().await;
    let queue = queue(&q);
    for limit in [0, 1001] {
        let error = queue
            .groups(&GroupQuery::new().limit(limit))
            .await
            .unwrap_err();
        assert!(matches!(error, QueueError::InvalidArgument(_)), "{error}");
    }
    for id in [String::new(), "x".repeat(1025), "a\0b".into()] {
        let error = queue.group(&id).await.unwrap_err();
        assert!(matches!(error, QueueError::InvalidArgument(_)), "{error}");
    }
}
