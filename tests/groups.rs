//! `Client::groups`, `Client::group`, `Client::top_groups` and `Client::depth` against a real
//! PostgreSQL: each status, the job counts and their cap, keyset pages, rankings, depth by
//! queue, priority and state, and refused arguments.

use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage, Settlement};
use harel_jobs::{
    Client, ClientError, Count, GROUP_JOBS_COUNT_CAP, GroupQuery, GroupRank, GroupStatus, JobId,
    Priority,
};
use harel_jobs_suite::SuiteSchema;

fn queue(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

async fn publish(q: &SuiteSchema, message: OutgoingMessage) -> JobId {
    q.transport.publish(&q.pool, &message).await.unwrap()
}

/// a: three jobs, leased; b: one job, parked for a retry; c: scheduled for later; d: two
/// waiting jobs in queue partner_api. Returns a's, b's and d's first job.
async fn four_groups(q: &SuiteSchema) -> (JobId, JobId, JobId) {
    // a: three jobs, leased; b: one job, parked for a retry; c: scheduled for later;
    // d: two waiting jobs
    let a = publish(q, OutgoingMessage::new("a", "k", "{}")).await;
    for _ in 0..2 {
        publish(q, OutgoingMessage::new("a", "k", "{}")).await;
    }
    let b = publish(q, OutgoingMessage::new("b", "k", "{}")).await;
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
        .find(|m| m.lease.id == b)
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
        q,
        OutgoingMessage::new("c", "k", "{}").delay(Duration::from_secs(3600)),
    )
    .await;
    let d = publish(q, OutgoingMessage::new("d", "k", "{}").queue("partner_api")).await;
    publish(q, OutgoingMessage::new("d", "k", "{}").queue("partner_api")).await;
    (a, b, d)
}

#[tokio::test]
async fn groups_show_their_status_head_and_job_count() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let (a, b, d) = four_groups(&q).await;

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
    let q = SuiteSchema::new().await;
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
    let q = SuiteSchema::new().await;
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
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    for limit in [0, 1001] {
        let error = queue
            .groups(&GroupQuery::new().limit(limit))
            .await
            .unwrap_err();
        assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
    }
    for id in [String::new(), "x".repeat(1025), "a\0b".into()] {
        let error = queue.group(&id).await.unwrap_err();
        assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
    }
}

/// The depth by queue, priority level and state: each group counted once, by its first job,
/// in the state the job is in; queues in creation order, the highest level first.
#[tokio::test]
async fn depth_is_counted_by_queue_priority_and_state() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    four_groups(&q).await;
    publish(
        &q,
        OutgoingMessage::new("e", "k", "{}").priority(Priority::HIGHEST),
    )
    .await;
    for group in ["f", "f2"] {
        publish(&q, OutgoingMessage::new(group, "k", "{}")).await;
    }
    for group in ["c2", "c3"] {
        let later = OutgoingMessage::new(group, "k", "{}").delay(Duration::from_secs(600));
        publish(&q, later).await;
    }
    // the highest level first: e runs
    let claimed = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(60)).limit(1),
        )
        .await
        .unwrap();
    assert_eq!(claimed[0].lease.group, "e");

    let depth = queue.depth().await.unwrap();
    let seen: Vec<_> = depth
        .iter()
        .map(|d| {
            (
                d.queue.as_str(),
                d.priority.get(),
                [d.ready, d.running, d.retrying, d.scheduled],
            )
        })
        .collect();
    let exact = |n: [i64; 4]| n.map(Count::Exact);
    assert_eq!(
        seen,
        [
            ("default", 4, exact([0, 1, 0, 0])),
            ("default", 2, exact([2, 1, 1, 3])),
            ("partner_api", 2, exact([1, 0, 0, 0])),
        ]
    );
    let oldest: Vec<bool> = depth.iter().map(|d| d.oldest_ready_at.is_some()).collect();
    assert_eq!(oldest, [false, true, true]);
}

/// Longest waiting: the ready groups oldest first across queues and priority levels;
/// leased and parked groups are not waiting.
#[tokio::test]
async fn the_longest_waiting_groups_come_first_whatever_their_queue() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    four_groups(&q).await;
    publish(
        &q,
        OutgoingMessage::new("e", "k", "{}").priority(Priority::HIGHEST),
    )
    .await;
    publish(&q, OutgoingMessage::new("f", "k", "{}").queue("mail")).await;

    let top = queue
        .top_groups(GroupRank::LongestWaiting, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = top.groups.iter().map(|g| g.id.as_str()).collect();
    assert_eq!(ids, ["d", "e", "f"]);
    assert!(top.groups.iter().all(|g| g.status == GroupStatus::Waiting));
    let two = queue
        .top_groups(GroupRank::LongestWaiting, 2)
        .await
        .unwrap();
    assert_eq!(two.groups.len(), 2);
    assert_eq!(two.groups[1].id, "e");
}

/// Largest: ranked by the statistics (after ANALYZE), counted up to the cap, the
/// statistics' estimate beside the count.
#[tokio::test]
async fn the_largest_groups_come_from_the_statistics() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let mut messages = Vec::new();
    for (group, jobs) in [("big", 1_500), ("mid", 300)] {
        messages.extend((0..jobs).map(|_| OutgoingMessage::new(group, "k", "{}")));
    }
    for n in 0..200 {
        messages.extend((0..2).map(|_| OutgoingMessage::new(format!("small{n}"), "k", "{}")));
    }
    q.transport.publish_many(&q.pool, &messages).await.unwrap();
    sqlx::raw_sql(q.sql("ANALYZE @schema@.transport_messages"))
        .execute(&q.pool)
        .await
        .unwrap();

    let top = queue.top_groups(GroupRank::Largest, 2).await.unwrap();
    let seen: Vec<_> = top
        .groups
        .iter()
        .map(|g| (g.id.as_str(), g.jobs, g.jobs_capped, g.jobs_estimate))
        .collect();
    assert_eq!(
        seen,
        [
            ("big", GROUP_JOBS_COUNT_CAP, true, Some(1_500)),
            ("mid", 300, false, Some(300)),
        ]
    );
    assert!(top.statistics_at.is_some());
    for limit in [0, 101] {
        let error = queue
            .top_groups(GroupRank::Largest, limit)
            .await
            .unwrap_err();
        assert!(matches!(error, ClientError::InvalidArgument(_)), "{error}");
    }
}
