//! Integration tests of the per-group PostgreSQL transport, one guarantee per test, each in
//! a migrated schema of its own on a real server (see `harel_jobs_suite::SuiteSchema`).
//!
//! Concurrency and races are in `transport_races.rs`; plans, the workers' clocks,
//! connecting and migrating in `transport_env.rs`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use harel_jobs::transport::{
    ClaimRequest, ClaimedMessage, Lease, LeaseOutcome, LeaseToken, MAX_BATCH_BYTES,
    MAX_BATCH_MESSAGES, MAX_GROUP_BYTES, MAX_PAYLOAD_BYTES, OutgoingMessage, Published, Receipt,
    Settlement, own_group,
};
use harel_jobs::{InvalidMessage, JobId, Priority, PublishError};
use harel_jobs_suite::SuiteSchema;
use uuid::Uuid;

const LONG: Duration = Duration::from_secs(60);

fn message(group: &str, payload: &str) -> OutgoingMessage {
    OutgoingMessage::new(group, "test", payload)
}

/// A release of the lease: the group waits `delay`, `error` is recorded, and the attempt
/// counts unless `count_attempt` is false.
fn release(delay: Duration, error: Option<&str>, count_attempt: bool) -> Settlement {
    Settlement::Release {
        delay,
        error: error.map(str::to_owned),
        count_attempt,
    }
}

fn at(group: &str, priority: u8) -> OutgoingMessage {
    message(group, "{}").priority(Priority::new(priority).unwrap())
}

async fn claim(q: &SuiteSchema, lease: Duration) -> Option<ClaimedMessage> {
    q.transport
        .claim(&q.pool, &ClaimRequest::new(lease))
        .await
        .expect("claim")
}

async fn claim_floor(q: &SuiteSchema, floor: u8) -> Option<ClaimedMessage> {
    let request = ClaimRequest::new(LONG).min_priority(Priority::new(floor).unwrap());
    q.transport.claim(&q.pool, &request).await.expect("claim")
}

async fn ack(q: &SuiteSchema, lease: &Lease) -> LeaseOutcome {
    q.transport.ack(&q.pool, lease).await.expect("ack")
}

/// Claims and acks until nothing is claimable; returns what was claimed, in order.
async fn drain(q: &SuiteSchema) -> Vec<ClaimedMessage> {
    let mut claimed = Vec::new();
    while let Some(m) = claim(q, LONG).await {
        assert_eq!(ack(q, &m.lease).await, LeaseOutcome::Applied);
        claimed.push(m);
    }
    claimed
}

/// The group's row: (priority, available_at, locked_by, head_seq, head_attempts).
type GroupRow = (i16, DateTime<Utc>, Option<Uuid>, Option<i64>, i32);

async fn group_row(q: &SuiteSchema, group: &str) -> Option<GroupRow> {
    sqlx::query_as(q.sql(
        "SELECT priority, available_at, locked_by, head_seq, head_attempts \
         FROM @schema@.transport_groups WHERE group_id = $1",
    ))
    .bind(group)
    .fetch_optional(&q.pool)
    .await
    .expect("group row")
}

/// The message's row: (group_id, kind, payload, priority, attempts, last_error).
type MessageRow = (String, String, String, i16, i32, Option<String>);

async fn message_row(q: &SuiteSchema, id: JobId) -> Option<MessageRow> {
    sqlx::query_as(q.sql(
        "SELECT group_id, kind, payload::text, priority, attempts, last_error \
         FROM @schema@.jobs WHERE seq = $1",
    ))
    .bind(id.get())
    .fetch_optional(&q.pool)
    .await
    .expect("message row")
}

/// The database's clock.
async fn db_now(q: &SuiteSchema) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(&q.pool)
        .await
        .expect("now")
}

/// Claims until something comes (polling), for waits whose end the database decides.
async fn claim_eventually(q: &SuiteSchema, lease: Duration) -> ClaimedMessage {
    for _ in 0..300 {
        if let Some(m) = claim(q, lease).await {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("nothing became claimable within 30 s");
}

// ---------------------------------------------------------------------------------------
// 1. transactional publish

#[tokio::test]
async fn publish_in_a_transaction_is_claimable_only_after_commit() {
    let q = SuiteSchema::new().await;
    let mut tx = q.pool.begin().await.unwrap();
    let seq = q
        .transport
        .publish(&mut *tx, &message("g", r#"{"n":1}"#))
        .await
        .unwrap();

    assert!(claim(&q, LONG).await.is_none(), "visible before commit");
    assert_eq!(q.count("jobs").await, 0);
    assert_eq!(q.count("transport_groups").await, 0);

    tx.commit().await.unwrap();
    let m = claim(&q, LONG).await.expect("visible after commit");
    assert_eq!((m.lease.group.as_str(), m.lease.id), ("g", seq));
    assert_eq!(m.payload, r#"{"n":1}"#);
}

#[tokio::test]
async fn rolled_back_publish_leaves_no_message_and_no_group() {
    let q = SuiteSchema::new().await;
    let mut tx = q.pool.begin().await.unwrap();
    q.transport
        .publish_many(
            &mut *tx,
            &[message("g", "1"), message("g", "2"), message("h", "3")],
        )
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    assert_eq!(q.count("jobs").await, 0);
    assert_eq!(q.count("transport_groups").await, 0);
    assert!(claim(&q, LONG).await.is_none());
}

// ---------------------------------------------------------------------------------------
// 3. FIFO

#[tokio::test]
async fn messages_of_a_group_are_claimed_in_publish_order() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    // single publishes, a batch interleaving groups (several messages of one group in it),
    // then single publishes again
    t.publish(&q.pool, &message("a", "0")).await.unwrap();
    t.publish(&q.pool, &message("b", "0")).await.unwrap();
    t.publish(&q.pool, &message("a", "1")).await.unwrap();
    let batch = [
        message("a", "2"),
        message("b", "1"),
        message("a", "3"),
        message("c", "0"),
        message("a", "4"),
        message("b", "2"),
        message("c", "1"),
    ];
    let seqs = t.publish_many(&q.pool, &batch).await.unwrap();
    assert_eq!(seqs.len(), batch.len());
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "batch seqs follow slice order: {seqs:?}"
    );
    t.publish(&q.pool, &message("a", "5")).await.unwrap();
    t.publish(&q.pool, &message("c", "2")).await.unwrap();

    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in drain(&q).await {
        seen.entry(m.lease.group.clone())
            .or_default()
            .push(m.payload);
    }
    let expected = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
    assert_eq!(seen["a"], expected(6));
    assert_eq!(seen["b"], expected(3));
    assert_eq!(seen["c"], expected(3));
    assert_eq!(q.count("transport_groups").await, 0);
}

// ---------------------------------------------------------------------------------------
// 4. round-robin

#[tokio::test]
async fn a_long_group_cannot_starve_groups_published_after_it() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let big: Vec<_> = (0..1000).map(|i| message("big", &i.to_string())).collect();
    t.publish_many(&q.pool, &big).await.unwrap();
    for i in 0..10 {
        t.publish(&q.pool, &message(&format!("small-{i}"), "{}"))
            .await
            .unwrap();
    }

    let mut claimed = Vec::new();
    for _ in 0..20 {
        let m = claim(&q, LONG).await.expect("work left");
        assert_eq!(ack(&q, &m.lease).await, LeaseOutcome::Applied);
        claimed.push(m.lease.group);
    }
    let small: HashSet<_> = claimed.iter().filter(|g| g.starts_with("small-")).collect();
    assert_eq!(small.len(), 10, "first 20 claims: {claimed:?}");
}

// ---------------------------------------------------------------------------------------
// 5. priority

#[tokio::test]
async fn higher_priority_groups_come_first_round_robin_within_a_priority() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let groups = [
        ("low-a", 0),
        ("mid-a", 2),
        ("high-a", 4),
        ("high-b", 4),
        ("mid-b", 2),
        ("low-b", 0),
    ];
    for round in 0..2 {
        for (group, priority) in groups {
            let m = message(group, &round.to_string()).priority(Priority::new(priority).unwrap());
            t.publish(&q.pool, &m).await.unwrap();
        }
    }
    let order: Vec<String> = drain(&q)
        .await
        .into_iter()
        .map(|m| format!("{}:{}", m.lease.group, m.payload))
        .collect();
    assert_eq!(
        order,
        [
            "high-a:0", "high-b:0", "high-a:1", "high-b:1", "mid-a:0", "mid-b:0", "mid-a:1",
            "mid-b:1", "low-a:0", "low-b:0", "low-a:1", "low-b:1",
        ]
    );
}

#[tokio::test]
async fn the_priority_floor_excludes_lower_groups() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    for (group, priority) in [("p0", 0), ("p1", 1), ("p3", 3)] {
        t.publish(&q.pool, &at(group, priority)).await.unwrap();
    }
    let got = |m: Option<ClaimedMessage>| m.map(|m| m.lease.group);
    assert_eq!(got(claim_floor(&q, 3).await).as_deref(), Some("p3"));
    assert_eq!(got(claim_floor(&q, 3).await), None);
    assert_eq!(got(claim_floor(&q, 4).await), None);
    assert_eq!(got(claim_floor(&q, 1).await).as_deref(), Some("p1"));
    assert_eq!(got(claim_floor(&q, 1).await), None);
    assert_eq!(got(claim_floor(&q, 0).await).as_deref(), Some("p0"));
}

#[tokio::test]
async fn a_group_keeps_the_priority_of_its_first_publish() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &at("g", 0)).await.unwrap();
    t.publish(&q.pool, &at("g", 4)).await.unwrap();
    assert_eq!(group_row(&q, "g").await.unwrap().0, 0);
    assert!(claim_floor(&q, 1).await.is_none(), "g must stay at 0");

    t.publish(&q.pool, &at("other", 1)).await.unwrap();
    let first = claim(&q, LONG).await.unwrap();
    assert_eq!(first.lease.group, "other");
    assert_eq!(first.priority, Priority::new(1).unwrap());
    assert_eq!(ack(&q, &first.lease).await, LeaseOutcome::Applied);

    let head = claim(&q, LONG).await.unwrap();
    assert_eq!(
        (head.lease.group.as_str(), head.priority),
        ("g", Priority::LOWEST)
    );
    assert_eq!(ack(&q, &head.lease).await, LeaseOutcome::Applied);
    // the p4 message is now the head, the group is still 0
    assert_eq!(group_row(&q, "g").await.unwrap().0, 0);
    t.publish(&q.pool, &at("later", 1)).await.unwrap();
    assert_eq!(claim(&q, LONG).await.unwrap().lease.group, "later");
}

// ---------------------------------------------------------------------------------------
// 6. fencing

#[tokio::test]
async fn a_lapsed_lease_is_fenced_off_after_takeover() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let seq = t.publish(&q.pool, &message("g", "{}")).await.unwrap();
    let first = claim(&q, Duration::from_millis(300)).await.unwrap();
    assert_eq!(first.attempt, 1);
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let second = claim(&q, LONG).await.expect("lapsed lease is claimable");
    assert_eq!(second.lease.id, seq);
    assert_eq!(second.attempt, 2);
    assert_ne!(second.lease.token, first.lease.token);

    let group_before = group_row(&q, "g").await.unwrap();
    let message_before = message_row(&q, seq).await.unwrap();
    assert_eq!(ack(&q, &first.lease).await, LeaseOutcome::LeaseLost);
    assert_eq!(
        t.settle(
            &q.pool,
            &first.lease,
            release(Duration::ZERO, Some("late"), true)
        )
        .await
        .unwrap(),
        LeaseOutcome::LeaseLost
    );
    let late_dead = t.dead_letter(&q.pool, &first.lease, "late").await.unwrap();
    assert_eq!(late_dead, LeaseOutcome::LeaseLost);
    assert_eq!(
        t.extend(&q.pool, &first.lease, Duration::from_secs(600))
            .await
            .unwrap(),
        LeaseOutcome::LeaseLost
    );
    assert_eq!(group_row(&q, "g").await.unwrap(), group_before);
    assert_eq!(message_row(&q, seq).await.unwrap(), message_before);
    assert_eq!(q.count("dead_letters").await, 0);
    assert!(
        claim(&q, LONG).await.is_none(),
        "still leased to the second"
    );

    assert_eq!(ack(&q, &second.lease).await, LeaseOutcome::Applied);
    assert_eq!(q.count("jobs").await, 0);
}

#[tokio::test]
async fn acking_an_acked_message_is_lease_lost() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish_many(&q.pool, &[message("g", "1"), message("g", "2")])
        .await
        .unwrap();
    let m = claim(&q, LONG).await.unwrap();
    assert_eq!(ack(&q, &m.lease).await, LeaseOutcome::Applied);
    assert_eq!(ack(&q, &m.lease).await, LeaseOutcome::LeaseLost);
    // the group moved on: its next message is untouched by the second ack
    let next = claim(&q, LONG).await.unwrap();
    assert_eq!(next.payload, "2");
    // a forged lease on the right group and message, with a wrong token, is lost too
    let forged = Lease {
        token: LeaseToken::new(),
        ..next.lease.clone()
    };
    assert_eq!(ack(&q, &forged).await, LeaseOutcome::LeaseLost);
    assert_eq!(ack(&q, &next.lease).await, LeaseOutcome::Applied);
    assert_eq!(ack(&q, &next.lease).await, LeaseOutcome::LeaseLost);
    assert_eq!(q.count("transport_groups").await, 0);
}

/// A settle whose reply was lost is sent again by the worker: with the batch's receipt it
/// is answered as already applied; without, the ended lease refuses it. Either way it is
/// not applied twice (a snooze used to give its attempt back twice: attempt 0 next).
#[tokio::test]
async fn a_settle_sent_again_changes_nothing_and_with_its_receipt_says_already_applied() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let seqs = t
        .publish_many(&q.pool, &[message("g", "1"), message("g", "2")])
        .await
        .unwrap();
    let snooze = |m: &ClaimedMessage| {
        vec![(
            m.lease.clone(),
            release(Duration::from_millis(1), None, false),
        )]
    };
    let head_attempts = || async { group_row(&q, "g").await.expect("group row").4 };

    let m = claim(&q, LONG).await.unwrap();
    assert_eq!((m.lease.id, m.attempt), (seqs[0], 1));
    let receipt = Receipt::new();
    let first = t.settle_many(&q.pool, &snooze(&m), Some(&receipt)).await;
    assert_eq!(first.unwrap(), [LeaseOutcome::Applied]);
    let again = t.settle_many(&q.pool, &snooze(&m), Some(&receipt)).await;
    assert_eq!(again.unwrap(), [LeaseOutcome::AlreadyApplied]);
    let without_receipt = t.settle_many(&q.pool, &snooze(&m), None).await;
    assert_eq!(without_receipt.unwrap(), [LeaseOutcome::LeaseLost]);
    assert_eq!(
        head_attempts().await,
        0,
        "the snooze gave its attempt back once"
    );

    let m = claim_eventually(&q, LONG).await;
    assert_eq!((m.lease.id, m.attempt), (seqs[0], 1), "still attempt 1");
    let next = receipt.next();
    let ack = vec![(m.lease.clone(), Settlement::Ack)];
    let first = t.settle_many(&q.pool, &ack, Some(&next)).await.unwrap();
    assert_eq!(first, [LeaseOutcome::Applied]);
    let again = t.settle_many(&q.pool, &ack, Some(&next)).await.unwrap();
    assert_eq!(again, [LeaseOutcome::AlreadyApplied]);
    let m = claim(&q, LONG).await.unwrap();
    assert_eq!(m.lease.id, seqs[1], "the second message is untouched");

    // each batch forgot the one before; harel_maintain prunes what stopped workers left
    assert_eq!(q.count("settle_receipts").await, 1);
    sqlx::query(
        q.sql("UPDATE @schema@.settle_receipts SET created_at = now() - interval '2 hours'"),
    )
    .execute(&q.pool)
    .await
    .unwrap();
    let pruned: i64 =
        sqlx::query_scalar(q.sql("SELECT receipts_pruned FROM @schema@.harel_maintain()"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert_eq!((pruned, q.count("settle_receipts").await), (1, 0));
}

#[tokio::test]
async fn a_batch_ack_reports_each_lease_in_input_order() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    for g in ["a", "b", "c"] {
        t.publish(&q.pool, &message(g, "{}")).await.unwrap();
    }
    let claimed = t
        .claim_many(&q.pool, &ClaimRequest::new(LONG).limit(3))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    assert_eq!(ack(&q, &claimed[1].lease).await, LeaseOutcome::Applied);
    let leases: Vec<Lease> = claimed.iter().rev().map(|m| m.lease.clone()).collect();
    let outcomes = t.ack_many(&q.pool, &leases).await.unwrap();
    assert_eq!(
        outcomes,
        [
            LeaseOutcome::Applied,
            LeaseOutcome::LeaseLost,
            LeaseOutcome::Applied
        ]
    );
    assert_eq!(q.count("jobs").await, 0);
}

// ---------------------------------------------------------------------------------------
// 7. release (a retry, a snooze, a shutdown's give-back)

#[tokio::test]
async fn a_release_with_a_delay_parks_the_whole_group_until_it_passes() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let seqs = t
        .publish_many(&q.pool, &[message("g", "1"), message("g", "2")])
        .await
        .unwrap();
    let m = claim(&q, LONG).await.unwrap();
    assert_eq!((m.lease.id, m.attempt), (seqs[0], 1));

    let delay = Duration::from_secs(3);
    let retry = release(delay, Some("boom: try later"), true);
    assert_eq!(
        t.settle(&q.pool, &m.lease, retry).await.unwrap(),
        LeaseOutcome::Applied
    );
    let (_, park_end, ..) = group_row(&q, "g").await.unwrap();

    // neither the released message nor the one behind it
    assert!(claim(&q, LONG).await.is_none(), "parked group was claimed");
    let (_, _, _, _, attempts, last_error) = message_row(&q, seqs[0]).await.unwrap();
    assert_eq!(attempts, 1);
    assert_eq!(last_error.as_deref(), Some("boom: try later"));

    let again = claim_eventually(&q, LONG).await;
    assert_eq!((again.lease.id, again.attempt), (seqs[0], 2));
    // the claim happened no earlier than the park's end (both on the database clock)
    let (_, lease_end, ..) = group_row(&q, "g").await.unwrap();
    let claimed_at = lease_end - chrono::Duration::from_std(LONG).unwrap();
    assert!(
        claimed_at >= park_end,
        "claimed at {claimed_at}, park ended at {park_end}"
    );
}

#[tokio::test]
async fn a_release_without_delay_frees_the_group_at_once_and_counts_the_attempt() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let seq = t.publish(&q.pool, &message("g", "{}")).await.unwrap();
    let m = claim(&q, LONG).await.unwrap();
    assert_eq!(
        t.settle(&q.pool, &m.lease, Settlement::release_now())
            .await
            .unwrap(),
        LeaseOutcome::Applied
    );
    let again = claim(&q, LONG).await.expect("freed at once");
    assert_eq!((again.lease.id, again.attempt), (seq, 2));
    // the old lease is gone with the release
    assert_eq!(ack(&q, &m.lease).await, LeaseOutcome::LeaseLost);
    assert_eq!(ack(&q, &again.lease).await, LeaseOutcome::Applied);
}

#[tokio::test]
async fn a_release_without_counting_gives_the_attempt_back() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let seq = t.publish(&q.pool, &message("g", "{}")).await.unwrap();
    for _ in 0..3 {
        let m = claim(&q, LONG).await.unwrap();
        assert_eq!((m.lease.id, m.attempt), (seq, 1));
        let snooze = release(Duration::ZERO, None, false);
        assert_eq!(
            t.settle(&q.pool, &m.lease, snooze).await.unwrap(),
            LeaseOutcome::Applied
        );
    }
    let m = claim(&q, LONG).await.unwrap();
    assert_eq!(m.attempt, 1);
    assert_eq!(
        t.settle(&q.pool, &m.lease, Settlement::release_now())
            .await
            .unwrap(),
        LeaseOutcome::Applied
    );
    assert_eq!(claim(&q, LONG).await.unwrap().attempt, 2);
}

// ---------------------------------------------------------------------------------------
// 8. extend

#[tokio::test]
async fn an_extended_lease_outlives_its_original_end() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &message("g", "{}")).await.unwrap();
    let m = claim(&q, Duration::from_millis(500)).await.unwrap();
    assert_eq!(
        t.extend(&q.pool, &m.lease, Duration::from_secs(60))
            .await
            .unwrap(),
        LeaseOutcome::Applied
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        claim(&q, LONG).await.is_none(),
        "claimed after the original end"
    );
    assert_eq!(ack(&q, &m.lease).await, LeaseOutcome::Applied);
}

#[tokio::test]
async fn extend_after_takeover_is_lease_lost() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &message("g", "{}")).await.unwrap();
    let first = claim(&q, Duration::from_millis(300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let second = claim(&q, Duration::from_secs(5)).await.unwrap();
    let before = group_row(&q, "g").await.unwrap();
    assert_eq!(
        t.extend(&q.pool, &first.lease, Duration::from_secs(600))
            .await
            .unwrap(),
        LeaseOutcome::LeaseLost
    );
    assert_eq!(group_row(&q, "g").await.unwrap(), before);
    assert_eq!(ack(&q, &second.lease).await, LeaseOutcome::Applied);
}

/// A worker may hold the stale lease and the current lease of one message at once (its
/// first attempt overran the lease and it claimed the message again): batch operations
/// must tell them apart by token, not by message.
#[tokio::test]
async fn batch_outcomes_tell_a_stale_lease_from_the_current_lease_of_the_same_message() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    for g in ["e", "n", "a"] {
        t.publish(&q.pool, &message(g, "{}")).await.unwrap();
    }
    let stale = t
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_millis(300)).limit(3),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let current = t
        .claim_many(&q.pool, &ClaimRequest::new(LONG).limit(3))
        .await
        .unwrap();
    let pair = |group: &str| -> [Lease; 2] {
        let find = |ms: &[ClaimedMessage]| {
            ms.iter()
                .find(|m| m.lease.group == group)
                .expect("claimed")
                .lease
                .clone()
        };
        [find(&stale), find(&current)]
    };

    let [stale_e, current_e] = pair("e");
    assert_eq!(stale_e.id, current_e.id);
    let lost = t
        .extend_many(&q.pool, &[stale_e.clone(), current_e.clone()], LONG)
        .await
        .unwrap();
    assert_eq!(lost, [stale_e]);

    let [stale_n, current_n] = pair("n");
    let with_error =
        |lease: &Lease, error: &str| (lease.clone(), release(Duration::ZERO, Some(error), true));
    let outcomes = t
        .settle_many(
            &q.pool,
            &[
                with_error(&stale_n, "from the stale lease"),
                with_error(&current_n, "from the current lease"),
            ],
            None,
        )
        .await
        .unwrap();
    assert_eq!(outcomes, [LeaseOutcome::LeaseLost, LeaseOutcome::Applied]);
    let (.., last_error) = message_row(&q, current_n.id).await.unwrap();
    assert_eq!(last_error.as_deref(), Some("from the current lease"));

    let [stale_a, current_a] = pair("a");
    let outcomes = t.ack_many(&q.pool, &[stale_a, current_a]).await.unwrap();
    assert_eq!(outcomes, [LeaseOutcome::LeaseLost, LeaseOutcome::Applied]);
    let outcomes = t
        .settle_many(
            &q.pool,
            &[(current_e.clone(), Settlement::dead_letter("x"))],
            None,
        )
        .await
        .unwrap();
    assert_eq!(outcomes, [LeaseOutcome::Applied]);
}

// ---------------------------------------------------------------------------------------
// 9. stale empty groups

#[tokio::test]
async fn a_claim_deletes_a_stale_empty_group_and_still_returns_work() {
    let q = SuiteSchema::new().await;
    // first in line: the highest priority, waiting for an hour, and no message
    sqlx::query(q.sql(
        "INSERT INTO @schema@.transport_groups (group_id, priority, available_at) \
         VALUES ('stale', 4, now() - interval '1 hour')",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    q.transport.publish(&q.pool, &at("real", 0)).await.unwrap();

    let m = claim(&q, LONG).await.expect("the claim still returns work");
    assert_eq!(m.lease.group, "real");
    assert!(group_row(&q, "stale").await.is_none(), "stale row kept");
}

// ---------------------------------------------------------------------------------------
// 11. dead letters

#[tokio::test]
async fn dead_letter_keeps_the_message_with_its_error_and_the_group_moves_on() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let first =
        OutgoingMessage::new("g", "send_mail", r#"{"to": "a@b"}"#).priority(Priority::HIGHEST);
    let seqs = t
        .publish_many(&q.pool, &[first, message("g", "2")])
        .await
        .unwrap();
    let m = claim(&q, LONG).await.unwrap();
    let retry = release(Duration::ZERO, Some("first failure"), true);
    assert_eq!(
        t.settle(&q.pool, &m.lease, retry).await.unwrap(),
        LeaseOutcome::Applied
    );
    let m = claim(&q, LONG).await.unwrap();
    assert_eq!(m.attempt, 2);
    assert_eq!(
        t.dead_letter(&q.pool, &m.lease, "gave up: 550 no such user")
            .await
            .unwrap(),
        LeaseOutcome::Applied
    );

    let row: (
        i64,
        String,
        String,
        String,
        i16,
        i32,
        String,
        DateTime<Utc>,
        DateTime<Utc>,
    ) = sqlx::query_as(q.sql(
        "SELECT id, group_id, kind, payload::text, priority, attempts, last_error, \
                    enqueued_at, failed_at FROM @schema@.dead_letters",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    let (id, group, kind, payload, priority, attempts, error, enqueued_at, failed_at) = row;
    assert_eq!(id, seqs[0].get());
    assert_eq!((group.as_str(), kind.as_str()), ("g", "send_mail"));
    assert_eq!(payload, r#"{"to": "a@b"}"#);
    assert_eq!((priority, attempts), (4, 2));
    assert_eq!(error, "gave up: 550 no such user");
    assert_eq!(enqueued_at, m.enqueued_at);
    assert!(failed_at >= enqueued_at);
    assert!(message_row(&q, seqs[0]).await.is_none());

    let next = claim(&q, LONG).await.expect("the group moves on");
    assert_eq!((next.lease.id, next.attempt), (seqs[1], 1));
    assert_eq!(
        t.dead_letter(&q.pool, &next.lease, "x").await.unwrap(),
        LeaseOutcome::Applied
    );
    assert_eq!(q.count("dead_letters").await, 2);
    assert_eq!(q.count("transport_groups").await, 0);
}

// ---------------------------------------------------------------------------------------
// 13. input

async fn assert_nothing_written(q: &SuiteSchema) {
    assert_eq!(q.count("jobs").await, 0);
    assert_eq!(q.count("transport_groups").await, 0);
}

#[tokio::test]
async fn invalid_messages_are_refused_and_nothing_is_written() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let too_long_group = "g".repeat(MAX_GROUP_BYTES + 1);
    let too_large = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES));
    type Expected = fn(&InvalidMessage) -> bool;
    let cases: Vec<(OutgoingMessage, Expected)> = vec![
        (message("", "{}"), |e| {
            matches!(e, InvalidMessage::EmptyGroup)
        }),
        (message(&too_long_group, "{}"), |e| {
            matches!(e, InvalidMessage::GroupTooLong { .. })
        }),
        (message("a\0b", "{}"), |e| {
            matches!(e, InvalidMessage::NulInGroup)
        }),
        (message("g", &too_large), |e| {
            matches!(e, InvalidMessage::PayloadTooLarge { .. })
        }),
        (message("g", "{not json"), |e| {
            matches!(e, InvalidMessage::PayloadNotJson(_))
        }),
        (message("g", "{} {}"), |e| {
            matches!(e, InvalidMessage::PayloadNotJson(_))
        }),
        (message("g", ""), |e| {
            matches!(e, InvalidMessage::PayloadNotJson(_))
        }),
    ];
    for (bad, expected) in &cases {
        match t.publish(&q.pool, bad).await {
            Err(PublishError::Invalid(e)) => assert!(expected(&e), "unexpected error {e:?}"),
            other => panic!("expected an invalid message, got {other:?}"),
        }
        assert_nothing_written(&q).await;
        // one bad message spoils its batch: none of it is written
        let batch = [message("ok", "{}"), bad.clone(), message("ok2", "1")];
        assert!(matches!(
            t.publish_many(&q.pool, &batch).await,
            Err(PublishError::Invalid(_))
        ));
        assert_nothing_written(&q).await;
    }
}

/// The batch limits hold before anything is sent: the old failure was a 15 s hang, 3.2 GB
/// resident and a reset connection for 260 payloads of 4 MiB. Refused on a closed pool too
/// (anything sent would be a database error there); a batch at the byte limit goes through.
#[tokio::test]
async fn a_batch_over_the_limits_is_refused_before_anything_is_sent() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let closed = harel_jobs_suite::pool_with(&harel_jobs_suite::database_url(), 1).await;
    closed.close().await;

    // 17 payloads of 4 MiB: over 64 MiB
    let largest = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES - 2));
    let too_large: Vec<OutgoingMessage> = (0..=MAX_BATCH_BYTES / MAX_PAYLOAD_BYTES)
        .map(|i| message(&format!("g{i}"), &largest))
        .collect();
    let too_many: Vec<OutgoingMessage> = (0..=MAX_BATCH_MESSAGES)
        .map(|i| message(&format!("g{}", i % 100), "{}"))
        .collect();
    for pool in [&closed, &q.pool] {
        match t.publish_many(pool, &too_large).await {
            Err(PublishError::Invalid(InvalidMessage::BatchTooLarge { len, max })) => {
                assert_eq!(max, MAX_BATCH_BYTES);
                assert!(len > MAX_BATCH_BYTES, "{len}");
            }
            other => panic!("expected BatchTooLarge, got {other:?}"),
        }
        match t.publish_many(pool, &too_many).await {
            Err(PublishError::Invalid(InvalidMessage::TooManyMessages { count, max })) => {
                assert_eq!((count, max), (MAX_BATCH_MESSAGES + 1, MAX_BATCH_MESSAGES));
            }
            other => panic!("expected TooManyMessages, got {other:?}"),
        }
        assert_nothing_written(&q).await;
    }

    // at the limit: 16 messages of exactly MAX_BATCH_BYTES / 16 bytes each
    let per_message = MAX_BATCH_BYTES / 16;
    let at_limit: Vec<OutgoingMessage> = (0..16)
        .map(|i| {
            let group = format!("g{i:02}");
            let payload = format!("\"{}\"", "x".repeat(per_message - group.len() - 4 - 2));
            message(&group, &payload)
        })
        .collect();
    let seqs = t.publish_many(&q.pool, &at_limit).await.unwrap();
    assert_eq!(seqs.len(), 16);
    let stored: i64 = sqlx::query_scalar(q.sql(
        "SELECT sum(octet_length(payload::text) + octet_length(group_id) + octet_length(kind))
           FROM @schema@.jobs",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert_eq!(stored, MAX_BATCH_BYTES as i64);
}

#[tokio::test]
async fn awkward_group_ids_are_stored_and_matched_exactly() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let longest_ascii = "x".repeat(MAX_GROUP_BYTES);
    let longest_emoji = "🦀".repeat(MAX_GROUP_BYTES / 4);
    assert_eq!(longest_emoji.len(), MAX_GROUP_BYTES);
    let ids: Vec<String> = [
        "abc",
        "a%",
        "a_c",
        "%",
        "_",
        "ab",
        "it's",
        "\"quoted\"",
        "back\\slash",
        "\\",
        "'; DROP TABLE x; --",
        "@schema@",
        "$1",
        "🦀 crab",
        " leading and trailing ",
        "tab\there",
        "line\nbreak",
        "ABC",
        "abc ",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([longest_ascii, longest_emoji])
    .collect();
    for (i, id) in ids.iter().enumerate() {
        t.publish(&q.pool, &message(id, &i.to_string()))
            .await
            .unwrap();
    }
    assert_eq!(q.count("transport_groups").await, ids.len() as i64);

    let claimed = t
        .claim_many(&q.pool, &ClaimRequest::new(LONG).limit(100))
        .await
        .unwrap();
    assert_eq!(claimed.len(), ids.len());
    for m in &claimed {
        let i: usize = m.payload.parse().unwrap();
        assert_eq!(m.lease.group, ids[i], "group id changed on the way");
    }

    // a lease naming a LIKE-ish pattern of another group matches nothing
    let abc = claimed.iter().find(|m| m.lease.group == "abc").unwrap();
    for pattern in ["a%", "a_c", "%", "_", "ABC", "abc "] {
        let lease = Lease {
            group: pattern.into(),
            ..abc.lease.clone()
        };
        assert_eq!(ack(&q, &lease).await, LeaseOutcome::LeaseLost, "{pattern}");
    }
    assert!(message_row(&q, abc.lease.id).await.is_some());
    assert_eq!(
        t.ack_many(
            &q.pool,
            &claimed.iter().map(|m| m.lease.clone()).collect::<Vec<_>>()
        )
        .await
        .unwrap()
        .into_iter()
        .filter(|o| o.is_applied())
        .count(),
        ids.len()
    );
    assert_nothing_written(&q).await;
}

#[tokio::test]
async fn payloads_round_trip_byte_for_byte() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let mib = format!("{{\"blob\": \"{}\"}}", "é🦀x".repeat(1024 * 1024 / 7));
    assert!(mib.len() >= 1024 * 1024 - 16);
    let payloads = [
        r#"{"text": "héllo wörld ✓ 你好 🦀"}"#.to_owned(),
        r#"{"nul": "a\u0000b", "esc": "\u00e9\ud83e\udd80\n\t\"\\"}"#.to_owned(),
        " { \"spaced\" :  [1, 2.50, 1e3] , \"dup\": 1, \"dup\": 2 } ".to_owned(),
        "\"just a string\"".to_owned(),
        "null".to_owned(),
        "12345678901234567890123456789".to_owned(),
        mib,
    ];
    for (i, payload) in payloads.iter().enumerate() {
        t.publish(&q.pool, &message(&format!("g{i}"), payload))
            .await
            .unwrap();
    }
    // also through serde_json
    let value = serde_json::json!({"nul": "a\u{0}b", "crab": "🦀", "n": [1, 2, 3]});
    let typed = OutgoingMessage::serialize("typed", "test", &value).unwrap();
    t.publish(&q.pool, &typed).await.unwrap();

    for m in drain(&q).await {
        if m.lease.group == "typed" {
            let back: serde_json::Value = serde_json::from_str(&m.payload).unwrap();
            assert_eq!(back, value);
            continue;
        }
        let i: usize = m.lease.group[1..].parse().unwrap();
        assert!(m.payload == payloads[i], "payload {i} changed");
    }
}

// ---------------------------------------------------------------------------------------
// 15 (a). the database clock

#[tokio::test]
async fn a_lease_ends_a_lease_length_after_the_claim_on_the_database_clock() {
    let q = SuiteSchema::new().await;
    q.transport
        .publish(&q.pool, &message("g", "{}"))
        .await
        .unwrap();
    claim(&q, Duration::from_secs(60)).await.unwrap();
    let remaining: f64 = sqlx::query_scalar(q.sql(
        "SELECT extract(epoch FROM available_at - now())::float8 \
         FROM @schema@.transport_groups WHERE group_id = 'g'",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert!(
        (55.0..=60.0).contains(&remaining),
        "lease ends {remaining} s from now"
    );
}

/// Leases and parks taken late in a long transaction last their whole length, counted from
/// the operation, not from the start of the transaction (when they would be over before
/// anyone could see them).
#[tokio::test]
async fn leases_taken_late_in_a_transaction_last_their_full_length() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let four = Duration::from_secs(4);
    let left = |q: &SuiteSchema| {
        q.sql(
            "SELECT extract(epoch FROM available_at - clock_timestamp())::float8 \
             FROM @schema@.transport_groups WHERE group_id = 'g'",
        )
    };
    t.publish(&q.pool, &message("g", "{}")).await.unwrap();
    let mut tx = q.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_sleep(5)")
        .execute(&mut *tx)
        .await
        .unwrap();

    let held = t
        .claim(&mut *tx, &ClaimRequest::new(four))
        .await
        .unwrap()
        .unwrap();
    let lease_left: f64 = sqlx::query_scalar(left(&q))
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert!(
        lease_left > 0.0,
        "the lease was over {} s before it was taken",
        -lease_left
    );

    assert!(
        t.extend(&mut *tx, &held.lease, four)
            .await
            .unwrap()
            .is_applied()
    );
    let extended_left: f64 = sqlx::query_scalar(left(&q))
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert!(
        extended_left > 0.0,
        "the extension was over {} s before it was made",
        -extended_left
    );

    let park = release(four, None, true);
    assert!(
        t.settle(&mut *tx, &held.lease, park)
            .await
            .unwrap()
            .is_applied()
    );
    tx.commit().await.unwrap();
    let park_left: f64 = sqlx::query_scalar(left(&q))
        .fetch_one(&q.pool)
        .await
        .unwrap();
    assert!(
        park_left > 0.0,
        "the park was over {} s before it was visible",
        -park_left
    );
    assert!(
        claim(&q, LONG).await.is_none(),
        "a parked group was claimed"
    );
}

// ---------------------------------------------------------------------------------------
// scheduling and wake-ups

#[tokio::test]
async fn a_delayed_message_waits_for_its_time_and_holds_back_its_group() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let delay = Duration::from_secs(3);
    let seqs = t
        .publish_many(
            &q.pool,
            &[
                message("delayed-head", "1").delay(delay),
                message("delayed-head", "2"),
                message("due-head", "1"),
                message("due-head", "2").delay(delay),
            ],
        )
        .await
        .unwrap();
    let not_before: DateTime<Utc> =
        sqlx::query_scalar(q.sql("SELECT not_before FROM @schema@.jobs WHERE seq = $1"))
            .bind(seqs[0].get())
            .fetch_one(&q.pool)
            .await
            .unwrap();

    let first = claim(&q, LONG).await.unwrap();
    assert_eq!(
        first.lease.id, seqs[2],
        "only due-head's first message is due"
    );
    assert_eq!(ack(&q, &first.lease).await, LeaseOutcome::Applied);
    assert!(claim(&q, LONG).await.is_none(), "a message started early");

    let mut claimed = Vec::new();
    while claimed.len() < 2 {
        let m = claim_eventually(&q, LONG).await;
        let (_, lease_end, ..) = group_row(&q, &m.lease.group).await.unwrap();
        let claimed_at = lease_end - chrono::Duration::from_std(LONG).unwrap();
        assert!(claimed_at >= not_before, "{} started early", m.lease.id);
        assert_eq!(ack(&q, &m.lease).await, LeaseOutcome::Applied);
        claimed.push(m.lease.id);
    }
    claimed.sort();
    assert_eq!(claimed, [seqs[0], seqs[3]]);
    let last = claim(&q, LONG)
        .await
        .expect("the message behind the delayed head");
    assert_eq!(last.lease.id, seqs[1]);
}

/// Every notification `listener` (listening on the queue's channel) receives before a
/// marker this sends on that channel from another session, once everything before it has
/// committed. PostgreSQL delivers notifications in the order their transactions committed,
/// so this is exactly what was sent before, however slow the machine: no quiet period to
/// wait out (a wake-up delivered later than such a period was counted as none, and one
/// expected was missed).
async fn notifications_until_marker(
    q: &SuiteSchema,
    listener: &mut sqlx::postgres::PgListener,
) -> Vec<String> {
    let marker = format!("test marker {}", Uuid::new_v4());
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(q.schema.channel())
        .bind(&marker)
        .execute(&q.pool)
        .await
        .unwrap();
    let mut payloads = Vec::new();
    loop {
        let notification = tokio::time::timeout(LONG, listener.recv())
            .await
            .expect("the marker arrives")
            .unwrap();
        assert_eq!(notification.channel(), q.schema.channel());
        if notification.payload() == marker {
            return payloads;
        }
        payloads.push(notification.payload().to_owned());
    }
}

#[tokio::test]
async fn publishing_wakes_listeners_on_commit_and_only_for_due_messages() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let mut listener = sqlx::postgres::PgListener::connect_with(&q.pool)
        .await
        .unwrap();
    listener.listen(&q.schema.channel()).await.unwrap();
    let none: Vec<String> = Vec::new();

    let mut tx = q.pool.begin().await.unwrap();
    t.publish(&mut *tx, &message("g", "{}")).await.unwrap();
    t.publish(&mut *tx, &message("h", "{}")).await.unwrap();
    assert_eq!(
        notifications_until_marker(&q, &mut listener).await,
        none,
        "woken before commit"
    );
    tx.commit().await.unwrap();
    let woken = notifications_until_marker(&q, &mut listener).await;
    assert_eq!(woken.len(), 1, "one transaction, one wake-up: {woken:?}");

    let mut tx = q.pool.begin().await.unwrap();
    t.publish(&mut *tx, &message("g", "{}")).await.unwrap();
    tx.rollback().await.unwrap();
    t.publish(&q.pool, &message("g", "{}").delay(LONG))
        .await
        .unwrap();
    assert_eq!(
        notifications_until_marker(&q, &mut listener).await,
        none,
        "woken by a rolled back or a delayed message"
    );
}

// ---------------------------------------------------------------------------------------
// 17. publishing into a leased or parked group

#[tokio::test]
async fn publish_into_a_leased_group_keeps_its_lease_and_priority() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &at("g", 1)).await.unwrap();
    let m = claim(&q, LONG).await.unwrap();
    let before = group_row(&q, "g").await.unwrap();

    t.publish(&q.pool, &at("g", 4)).await.unwrap();
    t.publish_many(&q.pool, &[at("g", 3), at("g", 0)])
        .await
        .unwrap();
    assert_eq!(group_row(&q, "g").await.unwrap(), before);
    assert!(claim(&q, LONG).await.is_none(), "a second consumer got in");

    assert_eq!(ack(&q, &m.lease).await, LeaseOutcome::Applied);
    let next = claim(&q, LONG).await.unwrap();
    assert_eq!(next.attempt, 1);
    assert_eq!(group_row(&q, "g").await.unwrap().0, 1);
}

#[tokio::test]
async fn publish_into_a_parked_group_does_not_unpark_it() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &message("g", "1")).await.unwrap();
    let m = claim(&q, LONG).await.unwrap();
    let park = release(Duration::from_secs(600), None, true);
    assert_eq!(
        t.settle(&q.pool, &m.lease, park).await.unwrap(),
        LeaseOutcome::Applied
    );
    let before = group_row(&q, "g").await.unwrap();

    t.publish(&q.pool, &message("g", "2")).await.unwrap();
    assert_eq!(group_row(&q, "g").await.unwrap(), before);
    assert!(claim(&q, LONG).await.is_none(), "parked group was claimed");
    assert!(before.1 > db_now(&q).await + chrono::Duration::seconds(500));
}

// ---------------------------------------------------------------------------------------
// 18. claim_many

#[tokio::test]
async fn claim_many_leases_distinct_groups_and_one_message_each() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let mut batch = Vec::new();
    for round in 0..3 {
        for g in 0..10 {
            batch.push(message(&format!("g{g}"), &round.to_string()));
        }
    }
    t.publish_many(&q.pool, &batch).await.unwrap();

    let mut held: Vec<ClaimedMessage> = Vec::new();
    for (limit, expected) in [(4, 4), (100, 6), (5, 0)] {
        let got = t
            .claim_many(&q.pool, &ClaimRequest::new(LONG).limit(limit))
            .await
            .unwrap();
        assert_eq!(got.len(), expected);
        held.extend(got);
    }
    let groups: HashSet<&str> = held.iter().map(|m| m.lease.group.as_str()).collect();
    assert_eq!(groups.len(), 10, "a group was leased twice");
    assert!(held.iter().all(|m| m.payload == "0"), "not the heads");

    let leases: Vec<Lease> = held.iter().map(|m| m.lease.clone()).collect();
    assert!(
        t.ack_many(&q.pool, &leases)
            .await
            .unwrap()
            .iter()
            .all(|o| o.is_applied())
    );
    let next = t
        .claim_many(&q.pool, &ClaimRequest::new(LONG).limit(100))
        .await
        .unwrap();
    assert_eq!(next.len(), 10);
    assert!(next.iter().all(|m| m.payload == "1"));
}

#[tokio::test]
async fn a_batch_without_groups_puts_each_message_in_a_group_of_its_own() {
    // the bulk path of harel_publish: every message of the batch without a group
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let own = |payload: &str| message("unused", payload).in_own_group();
    let batch = [
        own("0"),
        own("1").unique("k", None),
        own("2").unique("k", None), // a duplicate inside the batch: not queued
        own("3"),
    ];
    let outcomes = t.publish_many_outcomes(&q.pool, &batch).await.unwrap();
    let seqs: Vec<JobId> = outcomes.iter().map(|o| o.id()).collect();
    assert_eq!(outcomes[2], Published::Duplicate(seqs[1]), "{outcomes:?}");
    let queued = [seqs[0], seqs[1], seqs[3]];
    assert!(queued.is_sorted(), "seqs not in batch order: {seqs:?}");

    // one row per job: its group's, named after its seq; nothing in transport_messages
    for (seq, payload) in queued.iter().zip(["0", "1", "3"]) {
        assert!(
            group_row(&q, &own_group(seq.get())).await.is_some(),
            "no group row for {seq}"
        );
        let (group, _, stored, ..) = message_row(&q, *seq).await.expect("job");
        assert_eq!(
            (group.as_str(), stored.as_str()),
            (own_group(seq.get()).as_str(), payload)
        );
    }
    let (rows,): (i64,) = sqlx::query_as(q.sql("SELECT count(*) FROM @schema@.transport_messages"))
        .fetch_one(&q.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "a job of its own group stored as a message row");

    let payloads: Vec<String> = drain(&q).await.into_iter().map(|m| m.payload).collect();
    assert_eq!(payloads, ["0", "1", "3"]);
}

#[tokio::test]
async fn claim_rejects_nonsense_requests() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &message("g", "{}")).await.unwrap();
    assert!(
        t.claim_many(&q.pool, &ClaimRequest::new(LONG).limit(0))
            .await
            .is_err()
    );
    assert!(
        t.claim(&q.pool, &ClaimRequest::new(Duration::ZERO))
            .await
            .is_err()
    );
    // nothing was leased by the refused requests
    assert!(claim(&q, LONG).await.is_some());
}

// ---------------------------------------------------------------------------------------
// 19. claim floors: claims scan from just below the oldest claimable group

/// A delayed group committed after the claim floor passed its position (its transaction
/// wrote it long before committing) is not lost: harel_maintain's sweep lowers the floor to
/// it. (A group due at once goes into the ready domain: its floor and its NOTIFY hint are
/// tests/fair_share.rs's.)
#[tokio::test]
async fn a_group_committed_below_the_claim_floor_is_found_by_the_sweep() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let soon = Duration::from_millis(1);
    // a long transaction enqueues "late" and keeps going…
    let mut late = q.pool.begin().await.unwrap();
    t.publish(&mut *late, &message("late", "{}").delay(soon))
        .await
        .unwrap();
    // …while, well after it, "early" is enqueued and claimed: the claim raises the floor
    // past "late", which it cannot see yet
    tokio::time::sleep(Duration::from_millis(600)).await;
    t.publish(&q.pool, &message("early", "{}").delay(soon))
        .await
        .unwrap();
    let early = claim_eventually(&q, LONG).await;
    assert_eq!(early.lease.group, "early");
    assert!(claim(&q, LONG).await.is_none());
    let floor: i64 = sqlx::query_scalar(q.sql("SELECT last_value FROM @schema@.claim_floor_2"))
        .fetch_one(&q.pool)
        .await
        .unwrap();
    assert!(floor > 0, "the claims raised the floor");
    late.commit().await.unwrap();

    // committed, but below the floor: a plain claim does not see it
    assert!(
        claim(&q, LONG).await.is_none(),
        "the floor is meant to hide everything below it"
    );
    let (lowered,): (i32,) =
        sqlx::query_as(q.sql("SELECT floors_lowered FROM @schema@.harel_maintain()"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert_eq!(lowered, 1);
    assert_eq!(claim(&q, LONG).await.unwrap().lease.group, "late");
}

/// However many jobs a transaction enqueues, it wakes workers at most twice: a plain
/// wake-up, and the position of the oldest group it created (the claims' hint). Every
/// transaction of a session does so afresh.
#[tokio::test]
async fn a_transaction_sends_at_most_a_wake_up_and_its_oldest_new_position() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &message("existing", "{}"))
        .await
        .unwrap();
    let mut listener = sqlx::postgres::PgListener::connect_with(&q.pool)
        .await
        .unwrap();
    listener.listen(&q.schema.channel()).await.unwrap();
    let mut conn = q.pool.acquire().await.unwrap();
    for round in 0..2 {
        let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
        // into an existing group first: nothing new to point to, a plain wake-up
        t.publish(&mut *tx, &message("existing", "{}"))
            .await
            .unwrap();
        let mut positions = Vec::new();
        for n in 0..50 {
            t.publish(&mut *tx, &message(&format!("new-{round}-{n}"), "{}"))
                .await
                .unwrap();
            if n == 0 {
                // a due group's position is its start tag less 2^62 (harel_notify)
                let (at,): (i64,) = sqlx::query_as(q.sql(
                    "SELECT fair_tag - 4611686018427387904 \
                     FROM @schema@.transport_groups WHERE group_id = $1",
                ))
                .bind(format!("new-{round}-0"))
                .fetch_one(&mut *tx)
                .await
                .unwrap();
                positions.push(at);
            }
        }
        tx.commit().await.unwrap();
        let payloads = notifications_until_marker(&q, &mut listener).await;
        assert_eq!(
            payloads,
            ["".to_owned(), positions[0].to_string()],
            "round {round}"
        );
    }
}

/// A batch of messages without a group (harel_publish's bulk path: one plain insert) keeps
/// every field of each: kind, payload, priority, delay, unique key (a later batch's
/// duplicate dropped, held for its period after the ack), queue and trace context.
#[tokio::test]
async fn a_batch_without_groups_keeps_every_field_of_every_message() {
    let q = SuiteSchema::new().await;
    let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let own = |n: u32| OutgoingMessage::new("x", "bulk", format!("{{\"n\":{n}}}")).in_own_group();
    let batch = [
        own(1)
            .priority(Priority::new(4).unwrap())
            .trace_context(trace),
        own(2).unique("only-one", Some(Duration::from_secs(3600))),
        own(3).queue("mail"),
        own(4).delay(Duration::from_secs(3600)),
    ];
    let seqs = q.transport.publish_many(&q.pool, &batch).await.unwrap();
    // placed in the claim order at its time (a claim would also put it there)
    let (placed, due): (DateTime<Utc>, DateTime<Utc>) = sqlx::query_as(q.sql(
        "SELECT available_at, inline_not_before FROM @schema@.transport_groups \
          WHERE group_id = $1",
    ))
    .bind(own_group(seqs[3].get()))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert!(placed == due && due > Utc::now() + chrono::Duration::minutes(59));
    let again = q
        .transport
        .publish_many_outcomes(&q.pool, &[own(5).unique("only-one", None), own(6)])
        .await
        .unwrap();
    assert_eq!(again[0], Published::Duplicate(seqs[1]));

    let first = claim(&q, LONG).await.expect("the priority 4 one");
    assert_eq!(
        (first.payload.as_str(), first.kind.as_str(), first.priority),
        (r#"{"n":1}"#, "bulk", Priority::new(4).unwrap())
    );
    assert_eq!(first.trace_context.as_deref(), Some(trace));
    assert_eq!(first.lease.group, own_group(seqs[0].get()));
    assert_eq!(ack(&q, &first.lease).await, LeaseOutcome::Applied);
    let second = claim(&q, LONG).await.expect("the unique one");
    assert_eq!(
        (second.payload.as_str(), second.trace_context),
        (r#"{"n":2}"#, None)
    );
    assert_eq!(ack(&q, &second.lease).await, LeaseOutcome::Applied);
    let third = claim(&q, LONG).await.expect("the second batch's");
    assert_eq!(third.payload, r#"{"n":6}"#);
    assert_eq!(ack(&q, &third.lease).await, LeaseOutcome::Applied);
    assert!(claim(&q, LONG).await.is_none(), "the delayed one waits");
    let mail = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(LONG).queue("mail"))
        .await
        .unwrap()
        .expect("in its queue");
    assert_eq!(mail.payload, r#"{"n":3}"#);

    // the key is held for an hour after the job completed
    let later = q
        .transport
        .publish_many_outcomes(&q.pool, &[own(7).unique("only-one", None), own(8)])
        .await
        .unwrap();
    assert_eq!(later[0], Published::Duplicate(seqs[1]));
}

/// Called directly, harel_publish takes a group named like a group of its own (`own:` and 19
/// digits) for what the name means, a job without a group: each such job gets a group of
/// its own, named after its own id, whatever id the name gave (one given out already, whose
/// job may still be queued, or one not given out yet, which a later job draws).
#[tokio::test]
async fn a_group_named_like_one_of_its_own_is_a_group_of_its_own() {
    let q = SuiteSchema::new().await;
    let given = q
        .transport
        .publish_many(&q.pool, &[at("a", 2), at("b", 2)])
        .await
        .unwrap();
    let publish = |group: String| {
        let q = &q;
        async move {
            sqlx::query_scalar::<_, i64>(q.sql(
                "SELECT @schema@.harel_publish(ARRAY[$1, NULL], ARRAY['test', 'test'], \
                 ARRAY['{}', '{}'], ARRAY[2, 2]::smallint[], ARRAY[NULL, NULL]::timestamptz[], \
                 ARRAY[NULL, NULL]::bigint[])",
            ))
            .bind(group)
            .fetch_all(&q.pool)
            .await
            .unwrap()
        }
    };
    let group_of = |id: i64| {
        let q = &q;
        async move {
            sqlx::query_scalar::<_, String>(
                q.sql("SELECT group_id FROM @schema@.jobs WHERE seq = $1"),
            )
            .bind(id)
            .fetch_one(&q.pool)
            .await
            .unwrap()
        }
    };
    let mut ids = publish(own_group(given[0].get())).await;
    let next = ids[1] + 1;
    ids.extend(publish(own_group(next + 5)).await);
    ids.extend(publish(own_group(given[1].get())).await);
    for id in ids {
        assert_eq!(group_of(id).await, own_group(id));
    }
    assert_eq!(q.count("jobs").await, 8);
    assert_eq!(
        q.count("transport_messages").await,
        0,
        "nobody joined a group"
    );
}
