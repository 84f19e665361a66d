//! Limits per fairness key against a real PostgreSQL: at most N of a key's jobs leased at
//! once over every worker, counted from the database's own claim and settle times; a
//! saturated key's backlog waits in its order while other keys run, and comes back as its
//! jobs end; a changed limit applies at the next claim; an operator sees each key's running
//! jobs.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use harel_jobs::transport::{ClaimRequest, ClaimedMessage, OutgoingMessage};
use harel_jobs::{Client, ClientError, Count, KeyLimits};
use harel_jobs_suite::SuiteSchema;
use harel_jobs_suite::limits::{most_at_once, run_four_hold_pools};

const LEASE: Duration = Duration::from_secs(60);

fn client(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

/// `groups` groups of one job each under `key`, in `queue`, as one batch.
async fn flood(q: &SuiteSchema, queue: &str, key: &str, groups: usize, payload: &str) {
    let batch: Vec<_> = (0..groups)
        .map(|g| {
            OutgoingMessage::new(format!("{key}-{g}"), "hold", payload)
                .queue(queue)
                .fair_key(key)
        })
        .collect();
    q.transport.publish_many(&q.pool, &batch).await.unwrap();
}

async fn claim(q: &SuiteSchema, limit: u32) -> Vec<ClaimedMessage> {
    q.transport
        .claim_many(&q.pool, &ClaimRequest::new(LEASE).limit(limit))
        .await
        .unwrap()
}

/// How many of `claimed` each key has (the group names start with the key).
fn per_key(claimed: &[ClaimedMessage]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for message in claimed {
        let key = message.lease.group.split('-').next().unwrap().to_owned();
        *counts.entry(key).or_default() += 1;
    }
    counts
}

fn of(counts: &HashMap<String, usize>, key: &str) -> usize {
    counts.get(key).copied().unwrap_or(0)
}

/// A key at its limit starts nothing more; the other keys fill the claim; its backlog
/// waits (parked, not walked past at each claim) and comes back one group per lease of the
/// key that ends, in its order.
#[tokio::test]
async fn a_key_at_its_limit_waits_while_the_others_run() {
    let q = SuiteSchema::new().await;
    client(&q)
        .set_key_limits("default", KeyLimits::none().concurrency(2))
        .await
        .unwrap();
    flood(&q, "default", "A", 500, "{}").await;
    for c in 0..14 {
        flood(&q, "default", &format!("c{c}"), 1, "{}").await;
    }

    let first = claim(&q, 16).await;
    let counts = per_key(&first);
    assert_eq!(of(&counts, "A"), 2, "{counts:?}");
    assert_eq!(first.len(), 16, "{counts:?}");
    // A's two are its first groups: the order within a key holds
    let a_leases: Vec<_> = first
        .iter()
        .filter(|m| m.lease.group.starts_with("A-"))
        .collect();
    assert_eq!(a_leases[0].lease.group, "A-0");
    assert_eq!(a_leases[1].lease.group, "A-1");

    // the others end: A still has two running, so none of its own starts
    let others: Vec<_> = first
        .iter()
        .filter(|m| !m.lease.group.starts_with("A-"))
        .map(|m| m.lease.clone())
        .collect();
    q.transport.ack_many(&q.pool, &others).await.unwrap();
    let second = claim(&q, 16).await;
    assert!(second.is_empty(), "{:?}", per_key(&second));

    // A's first ends: exactly one more of A's starts, its next in order
    q.transport
        .ack_many(&q.pool, &[a_leases[0].lease.clone()])
        .await
        .unwrap();
    let third = claim(&q, 16).await;
    let a_next: Vec<_> = third.iter().map(|m| m.lease.group.clone()).collect();
    assert_eq!(a_next, vec!["A-2".to_owned()]);

    // the database agrees: two of A leased
    let running: i64 = sqlx::query_scalar(q.sql(
        "SELECT count(*) FROM @schema@.transport_groups
          WHERE fair_key = 'A' AND locked_by IS NOT NULL AND available_at > now()",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert_eq!(running, 2);

    // the operator's view: A's running jobs and the queue's limit
    let page = client(&q).fair_keys("default", None, 10).await.unwrap();
    assert_eq!(page.limits.concurrency_limit(), Some(2));
    let a = page.keys.iter().find(|k| k.key == "A").unwrap();
    assert_eq!(a.running, Count::Exact(2));
    assert_eq!(a.ready, Count::Exact(497));
}

/// Only the work that can start is ahead of a parked backlog: when nothing else is ready,
/// a claim leases the parked groups whose key has room (here room freed by a lease that
/// lapsed, which no settle reported).
#[tokio::test]
async fn parked_groups_start_when_their_key_has_room_again() {
    let q = SuiteSchema::new().await;
    client(&q)
        .set_key_limits("default", KeyLimits::none().concurrency(1))
        .await
        .unwrap();
    flood(&q, "default", "A", 20, "{}").await;
    let short = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_millis(300)).limit(16),
        )
        .await
        .unwrap();
    assert_eq!(short.len(), 1);
    assert!(claim(&q, 16).await.is_empty(), "A is at its limit");
    tokio::time::sleep(Duration::from_millis(400)).await;
    // the lease lapsed: A has room for one, its lapsed group first (FIFO within the group
    // is the group's own: it is another group's turn only by tag)
    let again = claim(&q, 16).await;
    assert_eq!(again.len(), 1, "{:?}", per_key(&again));
    q.transport
        .ack_many(&q.pool, &[again[0].lease.clone()])
        .await
        .unwrap();
    // drain the rest one at a time: every group of A is leased exactly once more
    let mut seen = vec![again[0].lease.group.clone()];
    for _ in 0..40 {
        let next = claim(&q, 16).await;
        assert!(next.len() <= 1, "{:?}", per_key(&next));
        if next.is_empty() {
            break;
        }
        seen.push(next[0].lease.group.clone());
        q.transport
            .ack_many(&q.pool, &[next[0].lease.clone()])
            .await
            .unwrap();
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 20, "{seen:?}");
}

/// A raised limit, or none, applies at the next claim: the parked groups are back in line.
#[tokio::test]
async fn a_changed_limit_applies_at_the_next_claim() {
    let q = SuiteSchema::new().await;
    let c = client(&q);
    c.set_key_limits("default", KeyLimits::none().concurrency(1))
        .await
        .unwrap();
    flood(&q, "default", "A", 100, "{}").await;
    assert_eq!(claim(&q, 16).await.len(), 1);
    assert!(claim(&q, 16).await.is_empty());

    c.set_key_limits("default", KeyLimits::none().concurrency(4))
        .await
        .unwrap();
    assert_eq!(claim(&q, 16).await.len(), 3);
    assert!(claim(&q, 16).await.is_empty());

    c.set_key_limits("default", KeyLimits::none())
        .await
        .unwrap();
    assert_eq!(claim(&q, 50).await.len(), 50);
    let page = c.fair_keys("default", None, 10).await.unwrap();
    assert_eq!(page.limits, KeyLimits::none());
    // without a limit the running count comes from a capped scan of the leases
    assert_eq!(page.keys[0].running, Count::Exact(54));

    // a lower limit lets the running jobs finish and starts none until under it
    c.set_key_limits("default", KeyLimits::none().concurrency(2))
        .await
        .unwrap();
    assert!(claim(&q, 16).await.is_empty());

    let error = c
        .set_key_limits("default", KeyLimits::none().concurrency(0))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::InvalidArgument(_)),
        "{error:?}"
    );
    let error = c
        .set_key_limits("no spaces!", KeyLimits::none())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ClientError::InvalidArgument(_)),
        "{error:?}"
    );
}

/// Four pools of concurrency 16 on a queue whose keys are limited to 2 each: 1,000 keys
/// with a job or two, and two keys with 60 each. No key ever has more than 2 jobs between
/// claim and settle at once (as the database timed them), the busy keys do reach 2, the
/// pools run many keys at once, and every job runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limit_per_key_holds_across_every_worker() {
    let q = SuiteSchema::new().await;
    client(&q).create_queue("partner").await.unwrap();
    client(&q)
        .set_key_limits("partner", KeyLimits::none().concurrency(2))
        .await
        .unwrap();
    let payload = r#"{"millis":20}"#;
    let mut batch = Vec::new();
    for k in 0..1000 {
        for g in 0..1 + k % 2 {
            batch.push(
                OutgoingMessage::new(format!("k{k}-{g}"), "hold", payload)
                    .queue("partner")
                    .fair_key(format!("k{k}")),
            );
        }
    }
    q.transport.publish_many(&q.pool, &batch).await.unwrap();
    flood(&q, "partner", "busyA", 60, payload).await;
    flood(&q, "partner", "busyB", 60, payload).await;
    let total = 1000 + 500 + 120;

    run_four_hold_pools(&q, total).await;

    let rows: Vec<(String, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(q.sql(
        "SELECT fair_key, started_at, finished_at FROM @schema@.job_history
          ORDER BY started_at",
    ))
    .fetch_all(&q.pool)
    .await
    .unwrap();
    let epoch = rows[0].1;
    let secs = |t: DateTime<Utc>| (t - epoch).as_seconds_f64();
    let mut by_key: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    let mut all = Vec::new();
    for (key, start, end) in rows {
        by_key
            .entry(key)
            .or_default()
            .push((secs(start), secs(end)));
        all.push((secs(start), secs(end)));
    }
    assert_eq!(by_key.len(), 1002);
    for (key, intervals) in &by_key {
        assert!(
            most_at_once(intervals) <= 2,
            "{key}: {} at once: {intervals:?}",
            most_at_once(intervals)
        );
    }
    assert_eq!(most_at_once(&by_key["busyA"]), 2);
    assert_eq!(most_at_once(&by_key["busyB"]), 2);
    assert!(most_at_once(&all) > 8, "{} at once", most_at_once(&all));
}

/// A rate per key: a burst of up to the rate, then the key's next groups are set aside until
/// the start times the rate gives them, one interval apart, while another key runs; the
/// next claim after that time starts the next one. Housekeeping forgets a key's rate state
/// once its times have passed.
#[tokio::test]
async fn a_key_past_its_rate_waits_for_its_start_times() {
    let q = SuiteSchema::new().await;
    let limits = KeyLimits::none().rate(2, Duration::from_millis(1000));
    client(&q).set_key_limits("default", limits).await.unwrap();
    flood(&q, "default", "A", 10, "{}").await;
    flood(&q, "default", "B", 1, "{}").await;

    let first = claim(&q, 16).await;
    let counts = per_key(&first);
    assert_eq!((of(&counts, "A"), of(&counts, "B")), (2, 1), "{counts:?}");
    let began = Instant::now();
    assert!(claim(&q, 16).await.is_empty(), "A used its burst");
    // A's other 8 wait for their start times: 500 ms apart, the first about 500 ms on
    let waits: Vec<f64> = sqlx::query_scalar(q.sql(
        "SELECT extract(epoch FROM available_at - now())::float8
           FROM @schema@.transport_groups
          WHERE fair_key = 'A' AND locked_by IS NULL ORDER BY available_at",
    ))
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(waits.len(), 8, "{waits:?}");
    assert!(waits[0] > 0.3 && waits[0] <= 0.51, "{waits:?}");
    for pair in waits.windows(2) {
        assert!((pair[1] - pair[0] - 0.5).abs() < 0.002, "{waits:?}");
    }
    // the next start of A comes when the first of them is due, and only one
    let mut next = Vec::new();
    while next.is_empty() {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "A never started again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        next = claim(&q, 16).await;
    }
    assert_eq!(next.len(), 1, "{:?}", per_key(&next));
    assert!(began.elapsed() >= Duration::from_millis(300));

    // the limits as set, read back; bad ones refused
    let page = client(&q).fair_keys("default", None, 10).await.unwrap();
    assert_eq!(page.limits, limits);
    for bad in [
        KeyLimits::none().rate(0, Duration::from_secs(1)),
        KeyLimits::none().rate(1, Duration::from_secs(86_401)),
        KeyLimits::none().rate(1, Duration::ZERO),
    ] {
        let error = client(&q).set_key_limits("default", bad).await.unwrap_err();
        assert!(
            matches!(error, ClientError::InvalidArgument(_)),
            "{error:?}"
        );
    }

    // once the rate's times have passed, housekeeping deletes the keys' rate state
    let rows = || async {
        sqlx::query_scalar::<_, i64>(q.sql("SELECT count(*) FROM @schema@.key_rates"))
            .fetch_one(&q.pool)
            .await
            .unwrap()
    };
    assert!(rows().await > 0);
    sqlx::query(q.sql(
        "UPDATE @schema@.key_rates SET tat_us = tat_us - 3600000000, slot_us = slot_us - 3600000000",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
        .execute(&q.pool)
        .await
        .unwrap();
    assert_eq!(rows().await, 0);
}

/// Four pools of concurrency 16, keys limited to 10 starts a second each: every key's
/// starts conform to its rate (with the burst of 10 it allows), as the database recorded
/// them, and the keys run side by side (each key's rate is its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_per_key_holds_across_every_worker() {
    let q = SuiteSchema::new().await;
    client(&q).create_queue("partner").await.unwrap();
    client(&q)
        .set_key_limits(
            "partner",
            KeyLimits::none().rate(10, Duration::from_secs(1)),
        )
        .await
        .unwrap();
    for key in ["A", "B", "C"] {
        flood(&q, "partner", key, 25, r#"{"millis":1}"#).await;
    }
    run_four_hold_pools(&q, 75).await;
    let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
        q.sql("SELECT fair_key, started_at FROM @schema@.job_history ORDER BY started_at"),
    )
    .fetch_all(&q.pool)
    .await
    .unwrap();
    let epoch = rows[0].1;
    let mut by_key: HashMap<String, Vec<f64>> = HashMap::new();
    for (key, start) in rows {
        by_key
            .entry(key)
            .or_default()
            .push((start - epoch).as_seconds_f64());
    }
    for (key, starts) in &by_key {
        assert_eq!(starts.len(), 25, "{key}");
        for i in 0..starts.len() {
            for j in i + 1..starts.len() {
                let least = (j - i) as f64 * 0.1 - 0.9 - 0.001;
                assert!(
                    starts[j] - starts[i] >= least,
                    "{key}: starts {i} and {j} only {:.3} s apart: {starts:?}",
                    starts[j] - starts[i]
                );
            }
        }
    }
    // the three keys' first starts came together, not one key after the other
    let firsts: Vec<f64> = by_key.values().map(|s| s[0]).collect();
    assert!(
        firsts.iter().all(|&t| t < 0.5),
        "each key's burst at once: {firsts:?}"
    );
}

/// A saturated key's backlog ahead of another key's work is parked within a claim or two,
/// not one claim's candidates at a time (each short claim would make a worker wait for its
/// next poll): key A at weight 1,000 ranks 1,000 of its 3,000 groups before B's one, and
/// A may run 1.
#[tokio::test]
async fn a_backlog_at_its_limit_is_set_aside_within_a_claim_or_two() {
    let q = SuiteSchema::new().await;
    let c = client(&q);
    c.set_key_limits("default", KeyLimits::none().concurrency(1))
        .await
        .unwrap();
    c.set_fair_weight("default", "A", 1000).await.unwrap();
    flood(&q, "default", "A", 3000, "{}").await;
    flood(&q, "default", "B", 1, "{}").await;
    let first = claim(&q, 16).await;
    assert_eq!(of(&per_key(&first), "A"), 1);
    let second = claim(&q, 16).await;
    let third = claim(&q, 16).await;
    let b = of(&per_key(&first), "B") + of(&per_key(&second), "B") + of(&per_key(&third), "B");
    assert_eq!(b, 1, "B waited behind A's parked backlog");
}

/// Raising a limit per key over many parked groups (issue 42, item 2): the operator's call
/// gives back at most a page of them (1,000), never waits for one another transaction holds,
/// and so never keeps the claims out; housekeeping gives the rest back, 10,000 a call. It
/// used to lock the queue's row, then every parked group (waiting for any a claim held),
/// and re-tag them all: over 10,000 parked keys it held the row 10.7 s, and a claim
/// meanwhile got nothing.
#[tokio::test]
async fn a_raised_limit_gives_parked_groups_back_in_pages_and_claims_go_on() {
    let q = SuiteSchema::new().await;
    let c = client(&q);
    c.set_key_limits("default", KeyLimits::none().concurrency(1))
        .await
        .unwrap();
    // 3,000 keys with a group each, parked as a claim parks them (the tag in the band)
    let parked: Vec<_> = (0..3000)
        .map(|i| OutgoingMessage::new(format!("p-{i}"), "hold", "{}").fair_key(format!("p{i}")))
        .collect();
    q.transport.publish_many(&q.pool, &parked).await.unwrap();
    sqlx::raw_sql(q.sql(
        "UPDATE @schema@.transport_groups SET fair_tag = fair_tag + 4611686018427387904
          WHERE group_id LIKE 'p-%'",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    flood(&q, "default", "ready", 10, "{}").await;
    let count_parked = || async {
        sqlx::query_scalar::<_, i64>(q.sql(
            "SELECT count(*) FROM @schema@.transport_groups
              WHERE fair_tag >= 4611686018427387904",
        ))
        .fetch_one(&q.pool)
        .await
        .unwrap()
    };
    let pending = || async {
        sqlx::query_scalar::<_, Option<i64>>(
            q.sql("SELECT unpark_through FROM @schema@.queues WHERE id = 0"),
        )
        .fetch_one(&q.pool)
        .await
        .unwrap()
    };

    // another transaction holds a parked group, as a claim deciding about it does
    let mut holder = q.pool.begin().await.unwrap();
    sqlx::raw_sql(
        q.sql("SELECT 1 FROM @schema@.transport_groups WHERE group_id = 'p-0' FOR NO KEY UPDATE"),
    )
    .execute(&mut *holder)
    .await
    .unwrap();
    let operator = client(&q);
    let change =
        tokio::spawn(async move { operator.set_key_limits("default", KeyLimits::none()).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // a claim during the change, waiting up to 3 s for the queue's turn
    let claimed: i64 = sqlx::query_scalar(q.sql(
        "SELECT count(*) FROM @schema@.harel_claim(gen_random_uuid(), 60000, 16, 0, NULL,
                                                   'default', 3000)",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    holder.rollback().await.unwrap();
    change.await.unwrap().unwrap();
    assert!(claimed > 0, "a claim during the change leased nothing");

    // the call gave back one page (and the claim may have leased up to 16 of them)
    let left = count_parked().await;
    assert!(
        (1_984..=2_009).contains(&left),
        "{left} parked groups left after the call (3,000 before, a page is 1,000)"
    );
    assert!(pending().await.is_some(), "no page left to housekeeping");
    // housekeeping gives back the rest, 10,000 a call, then clears the marker
    for _ in 0..2 {
        sqlx::raw_sql(q.sql("SELECT * FROM @schema@.harel_maintain()"))
            .execute(&q.pool)
            .await
            .unwrap();
    }
    assert_eq!(count_parked().await, 0);
    assert_eq!(pending().await, None);
    // and every group is claimable, in line
    let mut total = claimed as usize;
    loop {
        let n = claim(&q, 1000).await.len();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert_eq!(total, 3010);
}
