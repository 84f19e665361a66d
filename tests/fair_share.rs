//! Fair share between fairness keys (tenants) against a real PostgreSQL: claims give each
//! key with ready work starts in proportion to its weight, whatever the number of groups
//! behind it; delayed jobs and retries come back into the same share; weights change the
//! next tags; an operator lists the keys. Shares are counted from what the database
//! recorded (the claims' order, the start times of retained jobs), never from sleeps.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use harel_jobs::transport::{ClaimRequest, OutgoingMessage};
use harel_jobs::{
    Client, ClientError, Count, Handler, InvalidMessage, Job, JobContext, JobResult, PublishError,
};
use harel_jobs_suite::{SuiteSchema, database_url, pool_with};
use serde::{Deserialize, Serialize};

const LEASE: Duration = Duration::from_secs(60);

fn client(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

/// `groups` groups of `per_group` jobs each under `key`, enqueued as one batch.
async fn flood(q: &SuiteSchema, key: &str, groups: usize, per_group: usize) {
    let mut batch = Vec::with_capacity(groups * per_group);
    for n in 0..per_group {
        for g in 0..groups {
            batch.push(
                OutgoingMessage::new(format!("{key}-{g}"), "k", format!(r#"{{"n":{n}}}"#))
                    .fair_key(key),
            );
        }
    }
    q.transport.publish_many(&q.pool, &batch).await.unwrap();
}

/// Claims `limit` groups, acks them (each claim and settle its own transaction, as a
/// worker does) and returns the fairness keys of the jobs claimed, in claim order.
async fn claim_and_ack(q: &SuiteSchema, limit: u32) -> Vec<String> {
    let claimed = q
        .transport
        .claim_many(&q.pool, &ClaimRequest::new(LEASE).limit(limit))
        .await
        .unwrap();
    let mut keys = Vec::with_capacity(claimed.len());
    for message in &claimed {
        let info = client(q).job(message.lease.id).await.unwrap().unwrap();
        keys.push(info.fair_key);
    }
    let leases: Vec<_> = claimed.iter().map(|m| m.lease.clone()).collect();
    q.transport.ack_many(&q.pool, &leases).await.unwrap();
    keys
}

/// Each key's share of `keys`.
fn shares(keys: &[String]) -> HashMap<String, f64> {
    let mut counts: HashMap<String, f64> = HashMap::new();
    for key in keys {
        *counts.entry(key.clone()).or_default() += 1.0;
    }
    let total = keys.len() as f64;
    counts.values_mut().for_each(|n| *n /= total);
    counts
}

fn share(shares: &HashMap<String, f64>, key: &str) -> f64 {
    shares.get(key).copied().unwrap_or(0.0)
}

/// Key A floods 200 groups, key B has 2: round-robin over groups would give B 1% of the
/// starts; fair share gives each half, in every window of 40 starts while both have work.
#[tokio::test]
async fn keys_share_the_starts_whatever_their_number_of_groups() {
    let q = SuiteSchema::new().await;
    flood(&q, "A", 200, 5).await;
    flood(&q, "B", 2, 100).await;
    let mut starts = Vec::new();
    while starts.len() < 320 {
        starts.extend(claim_and_ack(&q, 4).await);
    }
    for window in starts.chunks(40) {
        let s = shares(window);
        assert!(
            (share(&s, "A") - 0.5).abs() <= 0.05,
            "A's share {:.3} in {window:?}",
            share(&s, "A")
        );
    }
}

/// Weights 3:1:1 between three backlogged keys: 60%, 20%, 20% of the starts (±10% of each
/// share) in every window of 50, whatever the number of groups behind each.
#[tokio::test]
async fn starts_follow_the_weights() {
    let q = SuiteSchema::new().await;
    client(&q).set_fair_weight("default", "A", 3).await.unwrap();
    flood(&q, "A", 300, 4).await;
    flood(&q, "B", 3, 200).await;
    flood(&q, "C", 30, 20).await;
    let mut starts = Vec::new();
    while starts.len() < 500 {
        starts.extend(claim_and_ack(&q, 5).await);
    }
    for window in starts.chunks(50) {
        let s = shares(window);
        for (key, expected) in [("A", 0.6), ("B", 0.2), ("C", 0.2)] {
            let got = share(&s, key);
            assert!(
                (got - expected).abs() <= expected * 0.1 + 1e-9,
                "{key}: {got:.3} of the starts, expected {expected} ({window:?})"
            );
        }
    }
}

/// A key with nothing ready takes nothing (its share goes to the others at once), and a
/// key that comes back starts at the current virtual time: it neither waits behind the
/// backlog nor catches up on what it did not use.
#[tokio::test]
async fn an_idle_key_takes_nothing_and_returns_to_its_share() {
    let q = SuiteSchema::new().await;
    flood(&q, "A", 100, 10).await;
    let alone = claim_and_ack(&q, 50).await;
    assert!(alone.iter().all(|k| k == "A"), "work-conserving: {alone:?}");
    // C arrives with a backlog of its own: from its first claim on, half the starts
    flood(&q, "C", 50, 2).await;
    let mut starts = Vec::new();
    while starts.len() < 80 {
        starts.extend(claim_and_ack(&q, 4).await);
    }
    let s = shares(&starts);
    assert!(
        (share(&s, "C") - 0.5).abs() <= 0.05,
        "C's share when it came back: {:.3}",
        share(&s, "C")
    );
    // …and not more: it did not bank the starts it did not use
    assert!(
        starts[..8].iter().filter(|k| *k == "C").count() <= 5,
        "{starts:?}"
    );
}

/// A light key's single jobs start at once beside a flood: each of C's jobs is among the
/// next claim's starts after its enqueue.
#[tokio::test]
async fn a_light_keys_jobs_start_at_once_beside_a_flood() {
    let q = SuiteSchema::new().await;
    flood(&q, "A", 500, 4).await;
    for _ in 0..20 {
        q.transport
            .publish(
                &q.pool,
                &OutgoingMessage::new("c", "k", "{}")
                    .in_own_group()
                    .fair_key("C"),
            )
            .await
            .unwrap();
        let keys = claim_and_ack(&q, 8).await;
        assert!(keys.contains(&"C".to_owned()), "C waited: {keys:?}");
        claim_and_ack(&q, 8).await;
    }
}

/// Delayed jobs join the share when they come due (a claim promotes them into the ready
/// domain with tags): a key whose 300 delayed jobs come due together does not take the
/// next 300 starts from a key that was waiting.
#[tokio::test]
async fn delayed_jobs_come_due_into_the_share() {
    let q = SuiteSchema::new().await;
    let delayed: Vec<_> = (0..300)
        .map(|n| {
            OutgoingMessage::new(format!("a-{n}"), "k", "{}")
                .fair_key("A")
                .delay(Duration::from_millis(300))
        })
        .collect();
    q.transport.publish_many(&q.pool, &delayed).await.unwrap();
    flood(&q, "B", 2, 100).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let mut starts = Vec::new();
    while starts.len() < 120 {
        starts.extend(claim_and_ack(&q, 4).await);
    }
    let s = shares(&starts);
    assert!(
        (share(&s, "A") - 0.5).abs() <= 0.1,
        "A's share once its delays ended: {:.3} ({starts:?})",
        share(&s, "A")
    );
}

/// A job in a long transaction draws its tag when it is enqueued and commits after the
/// claims moved the ready floor past it: its publisher's NOTIFY says where it is (a claim
/// with that hint finds it), and without a hint housekeeping's sweep does.
#[tokio::test]
async fn a_group_committed_below_the_ready_floor_is_found_by_its_hint_or_the_sweep() {
    let q = SuiteSchema::new().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&q.pool)
        .await
        .unwrap();
    listener.listen(&q.schema.channel()).await.unwrap();
    let late = straggle(&q, "late").await;
    let floor: i64 = sqlx::query_scalar(q.sql("SELECT last_value FROM @schema@.fair_floor_q0"))
        .fetch_one(&q.pool)
        .await
        .unwrap();
    late.commit().await.unwrap();
    let tag: i64 = sqlx::query_scalar(
        q.sql("SELECT fair_tag FROM @schema@.transport_groups WHERE group_id = 'late'"),
    )
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert!(
        tag < floor,
        "the claims moved the floor past it: tag {tag}, floor {floor}"
    );
    assert!(
        claim_and_ack(&q, 10).await.is_empty(),
        "the floor is meant to hide everything below it"
    );
    // the NOTIFY of its commit carries its tag; a claim with that hint finds it
    let mut hints = Vec::new();
    while let Ok(Ok(notification)) =
        tokio::time::timeout(Duration::from_millis(200), listener.recv()).await
    {
        hints.extend(notification.payload().parse::<i64>());
    }
    let hint = hints.into_iter().min().unwrap();
    assert!(hint < 0, "a tag's hint is below every time: {hint}");
    let hinted: Vec<(String,)> = sqlx::query_as(
        q.sql("SELECT group_id FROM @schema@.harel_claim(gen_random_uuid(), 60000, 10, 0, $1)"),
    )
    .bind(hint)
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(hinted, [("late".to_owned(),)]);

    // without a hint: housekeeping's sweep lowers the floor to it
    let later = straggle(&q, "later").await;
    later.commit().await.unwrap();
    assert!(claim_and_ack(&q, 10).await.is_empty());
    let (lowered,): (i32,) =
        sqlx::query_as(q.sql("SELECT floors_lowered FROM @schema@.harel_maintain()"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert!(lowered >= 1);
    let claimed = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(LEASE))
        .await
        .unwrap()
        .expect("found after the sweep");
    assert_eq!(claimed.lease.group, "later");
}

/// Enqueues `name` in a transaction and, while it stays open, enqueues and starts a job
/// four times, 300 ms apart: the claims move the ready floor past `name`'s tag.
async fn straggle(q: &SuiteSchema, name: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut late = q.pool.begin().await.unwrap();
    q.transport
        .publish(&mut *late, &OutgoingMessage::new(name, "k", "{}"))
        .await
        .unwrap();
    for round in 0..4 {
        flood_one(q, &format!("{name}-early-{round}")).await;
        let started = claim_and_ack(q, 10).await;
        assert_eq!(started.len(), 1);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    late
}

async fn flood_one(q: &SuiteSchema, group: &str) {
    q.transport
        .publish(&q.pool, &OutgoingMessage::new(group, "k", "{}"))
        .await
        .unwrap();
}

/// A weight applies to the groups tagged after it is set: those already waiting keep their
/// places (A and B alternate through their first 40 groups each although A's weight became
/// 3), and the groups tagged after it start at 3:1.
#[tokio::test]
async fn a_new_weight_applies_to_the_groups_tagged_after_it() {
    let q = SuiteSchema::new().await;
    flood(&q, "A", 40, 1).await;
    flood(&q, "B", 40, 1).await;
    client(&q).set_fair_weight("default", "A", 3).await.unwrap();
    let mut waiting = Vec::new();
    while waiting.len() < 40 {
        waiting.extend(claim_and_ack(&q, 8).await);
    }
    let s = shares(&waiting);
    assert!((share(&s, "A") - 0.5).abs() <= 0.05, "{waiting:?}");
    // tagged from now on: behind the waiting ones, at the new weight
    let batch: Vec<_> = ["A", "B"]
        .into_iter()
        .flat_map(|key| {
            (0..100).map(move |g| {
                OutgoingMessage::new(format!("{key}-new-{g}"), "k", "{}").fair_key(key)
            })
        })
        .collect();
    q.transport.publish_many(&q.pool, &batch).await.unwrap();
    let mut rest = Vec::new();
    while rest.len() < 120 {
        rest.extend(claim_and_ack(&q, 8).await);
    }
    let s = shares(&rest[..40]);
    assert!(
        (share(&s, "A") - 0.5).abs() <= 0.05,
        "the waiting ones first: {rest:?}"
    );
    let s = shares(&rest[40..120]);
    assert!(
        (share(&s, "A") - 0.75).abs() <= 0.075,
        "3:1 after: {rest:?}"
    );
}

/// Weights and the ready groups of every key are listed, a page at a time; bad input is
/// refused with a typed error.
#[tokio::test]
async fn weights_are_set_listed_and_checked() {
    let q = SuiteSchema::new().await;
    let c = client(&q);
    flood(&q, "A", 10, 1).await;
    flood(&q, "B", 3, 1).await;
    c.set_fair_weight("default", "A", 4).await.unwrap();
    c.set_fair_weight("default", "Z", 7).await.unwrap();
    let page = c.fair_keys("default", None, 2).await.unwrap();
    let listed: Vec<_> = page
        .keys
        .iter()
        .map(|k| (k.key.as_str(), k.weight, k.ready))
        .collect();
    assert_eq!(
        listed,
        [("A", 4, Count::Exact(10)), ("B", 1, Count::Exact(3))]
    );
    assert_eq!(page.next.as_deref(), Some("B"));
    let rest = c.fair_keys("default", Some("B"), 2).await.unwrap();
    let listed: Vec<_> = rest
        .keys
        .iter()
        .map(|k| (k.key.as_str(), k.weight, k.ready))
        .collect();
    assert_eq!(listed, [("Z", 7, Count::Exact(0))]);
    assert_eq!(rest.next, None);
    // weight 1 is the default: the setting goes
    c.set_fair_weight("default", "Z", 1).await.unwrap();
    let all = c.fair_keys("default", None, 10).await.unwrap();
    assert_eq!(all.keys.len(), 2);
    assert!(
        c.fair_keys("nosuchqueue", None, 10)
            .await
            .unwrap()
            .keys
            .is_empty()
    );

    for (weight, key) in [(0, "A"), (1001, "A")] {
        let error = c.set_fair_weight("default", key, weight).await.unwrap_err();
        assert!(
            matches!(error, ClientError::InvalidArgument(_)),
            "{error:?}"
        );
    }
    let long = "k".repeat(256);
    let error = c.set_fair_weight("default", &long, 2).await.unwrap_err();
    assert!(matches!(error, ClientError::InvalidArgument(_)));
    let error = q
        .transport
        .publish(
            &q.pool,
            &OutgoingMessage::new("g", "k", "{}").fair_key(long),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            PublishError::Invalid(InvalidMessage::InvalidFairKey { max: 255 })
        ),
        "{error:?}"
    );
    assert!(matches!(
        c.fair_keys("default", None, 0).await.unwrap_err(),
        ClientError::InvalidArgument(_)
    ));
}

/// A job's key is its group's: shown by `Client::job`, kept in the history and the dead
/// letters, and given back by a dead letter's retry.
#[tokio::test]
async fn a_jobs_key_is_shown_kept_and_retried_with_it() {
    let q = SuiteSchema::new().await;
    let c = client(&q);
    let id = q
        .transport
        .publish(
            &q.pool,
            &OutgoingMessage::new("g", "k", "{}").fair_key("tenant-7"),
        )
        .await
        .unwrap();
    assert_eq!(c.job(id).await.unwrap().unwrap().fair_key, "tenant-7");
    let listed = c.jobs(&harel_jobs::JobQuery::new()).await.unwrap();
    assert_eq!(listed.jobs[0].fair_key, "tenant-7");
    let message = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(LEASE))
        .await
        .unwrap()
        .unwrap();
    let outcome = q
        .transport
        .dead_letter(&q.pool, &message.lease, "boom")
        .await
        .unwrap();
    assert!(outcome.is_applied(), "{outcome:?}");
    assert_eq!(c.job(id).await.unwrap().unwrap().fair_key, "tenant-7");
    let new_id = c.dead_letters().retry(id).await.unwrap().unwrap();
    assert_eq!(c.job(new_id).await.unwrap().unwrap().fair_key, "tenant-7");
}

// --- a worker pool, shares from the database's start times --------------------------------

#[derive(Serialize, Deserialize)]
struct Tenant {
    key: String,
    group: u32,
}

impl Job for Tenant {
    const KIND: &'static str = "tenant";

    fn group(&self) -> Option<String> {
        Some(format!("{}-{}", self.key, self.group))
    }

    fn fair_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

impl Handler<()> for Tenant {
    async fn handle(self, _ctx: JobContext<()>) -> JobResult {
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(())
    }
}

/// Two worker pools (as two processes) at concurrency 4: A has 400 groups, B 40 (more
/// than the pools run at once, so B always has ready work); at weights 3:1 the starts the
/// database recorded split 75/25 (±10% of A's share) in every window of 200 starts while
/// both had work. (Round-robin over groups would give B a tenth.)
#[tokio::test]
async fn worker_pools_share_starts_by_weight_as_the_database_recorded() {
    let q = SuiteSchema::new().await;
    let c = client(&q);
    c.set_fair_weight("default", "A", 3).await.unwrap();
    let mut batch = c.batch();
    for n in 0..1200u32 {
        batch
            .push(Tenant {
                key: "A".into(),
                group: n % 400,
            })
            .unwrap();
    }
    for n in 0..400u32 {
        batch
            .push(Tenant {
                key: "B".into(),
                group: n % 40,
            })
            .unwrap();
    }
    batch.enqueue(&q.pool).await.unwrap();
    let mut workers = Vec::new();
    for _ in 0..2 {
        let pool = pool_with(&database_url(), 6).await;
        workers.push(
            Client::with_schema(pool, q.schema.clone())
                .worker(())
                .register::<Tenant>()
                .concurrency(4)
                .retain_completed(Duration::from_secs(3600))
                .poll_interval(Duration::from_millis(50))
                .build()
                .unwrap()
                .start(),
        );
    }
    let began = Instant::now();
    loop {
        let done: i64 = sqlx::query_scalar(q.sql("SELECT count(*) FROM @schema@.job_history"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
        if done == 1600 {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(120), "jobs stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
        q.sql("SELECT fair_key, started_at FROM @schema@.job_history ORDER BY started_at, id"),
    )
    .fetch_all(&q.pool)
    .await
    .unwrap();
    // while both had work: up to B's last start
    let last_b = rows.iter().rposition(|(key, _)| key == "B").unwrap();
    let keys: Vec<String> = rows[..=last_b].iter().map(|(k, _)| k.clone()).collect();
    assert!(keys.len() >= 1400, "B ran out early: {}", keys.len());
    let full_windows = keys.len() / 200;
    for window in keys.chunks(200).take(full_windows) {
        let s = shares(window);
        assert!(
            (share(&s, "A") - 0.75).abs() <= 0.075,
            "A's share {:.3} in a window of the recorded starts",
            share(&s, "A")
        );
    }
}

/// A customer's exports: one at a time per customer (the group), and the customer's share
/// of the starts (the fairness key), from one parameter.
#[harel_jobs::job]
async fn export(
    _ctx: JobContext<()>,
    #[group]
    #[fair_key]
    customer: String,
    part: u32,
) -> JobResult {
    let _ = (customer, part);
    Ok(())
}

/// `#[fair_key]` gives a job its parameter's value as its key (not prefixed by the kind, as
/// a group is); an enqueue's `fair_key` overrides it.
#[tokio::test]
async fn fair_key_on_a_parameter_is_the_jobs_key_unless_the_enqueue_names_one() {
    let q = SuiteSchema::new().await;
    let c = client(&q);
    let id = Export {
        customer: "acme".into(),
        part: 1,
    }
    .enqueue(&q.pool)
    .schema(&q.schema)
    .await
    .unwrap();
    let info = c.job(id).await.unwrap().unwrap();
    assert_eq!(info.fair_key, "acme");
    assert_eq!(info.group, "export:acme");
    let id = Export {
        customer: "acme".into(),
        part: 2,
    }
    .enqueue(&q.pool)
    .schema(&q.schema)
    .group("elsewhere")
    .fair_key("acme-gold")
    .await
    .unwrap();
    assert_eq!(c.job(id).await.unwrap().unwrap().fair_key, "acme-gold");
}

/// The round a newcomer waits for (docs/guide/fair-share.md, "What a key is guaranteed"):
/// a key with no ready job gets the tag V + q (q = 100,000 / weight, rounded), and each
/// other key k has at most ⌊q_new / q_k⌋ + 1 ready jobs ranked at or before it. Checked one
/// start at a time beside 40 keys of weight 1 with six jobs each and one of weight 3 with
/// sixty, after the line has moved: a newcomer of weight 1 waits for at most two jobs of
/// each weight-1 key and four of the weight-3 key; one of weight 2, for at most one and two.
#[tokio::test]
async fn a_newcomers_first_job_waits_at_most_one_round() {
    let quantum = |weight: u64| (100_000.0 / weight as f64).round() as u64;
    for newcomer_weight in [1_u64, 2] {
        let q = SuiteSchema::new().await;
        let c = client(&q);
        c.set_fair_weight("default", "heavy", 3).await.unwrap();
        c.set_fair_weight("default", "new", newcomer_weight as u32)
            .await
            .unwrap();
        flood(&q, "heavy", 20, 3).await;
        for k in 0..40 {
            flood(&q, &format!("k{k}"), 2, 3).await;
        }
        // the line moves first: V is no longer where the flood was tagged
        claim_and_ack(&q, 37).await;
        q.transport
            .publish(
                &q.pool,
                &OutgoingMessage::new("n", "k", "{}")
                    .in_own_group()
                    .fair_key("new"),
            )
            .await
            .unwrap();
        let mut before: HashMap<String, u64> = HashMap::new();
        loop {
            let keys = claim_and_ack(&q, 1).await;
            assert_eq!(keys.len(), 1, "the newcomer's job was never claimed");
            if keys[0] == "new" {
                break;
            }
            *before.entry(keys[0].clone()).or_default() += 1;
        }
        for (key, n) in &before {
            let weight = if key == "heavy" { 3 } else { 1 };
            let bound = quantum(newcomer_weight) / quantum(weight) + 1;
            assert!(
                *n <= bound,
                "newcomer of weight {newcomer_weight}: {n} of {key}'s jobs (weight {weight}) \
                 started before it, bound {bound}: {before:?}"
            );
        }
    }
}

/// What fair share cannot do (the same page): a producer that gives each job a key of its
/// own makes as many keys, each entitled to what a newcomer is, so a newcomer's first job
/// waits for one round of them: here 1,000 keys of one job each, published in one batch,
/// then a newcomer's 100 jobs. Its first job starts within the first 1,001 starts (one
/// job of each minted key at most), and its other jobs then run one after another (nothing
/// else is ready).
#[tokio::test]
async fn a_producer_that_mints_keys_delays_a_newcomer_by_one_round() {
    let q = SuiteSchema::new().await;
    let minted: Vec<OutgoingMessage> = (0..1000)
        .map(|i| {
            OutgoingMessage::new("m", "k", "{}")
                .in_own_group()
                .fair_key(format!("minted-{i}"))
        })
        .collect();
    q.transport.publish_many(&q.pool, &minted).await.unwrap();
    let newcomer: Vec<OutgoingMessage> = (0..100)
        .map(|_| {
            OutgoingMessage::new("n", "k", "{}")
                .in_own_group()
                .fair_key("newcomer")
        })
        .collect();
    q.transport.publish_many(&q.pool, &newcomer).await.unwrap();
    let mut starts = Vec::new();
    loop {
        let keys = claim_and_ack(&q, 256).await;
        if keys.is_empty() {
            break;
        }
        starts.extend(keys);
    }
    assert_eq!(starts.len(), 1100);
    let first = starts.iter().position(|k| k == "newcomer").unwrap();
    assert!(first <= 1000, "the newcomer's first job was start {first}");
    // one job of each minted key at most before it
    let mut seen = std::collections::HashSet::new();
    assert!(starts[..first].iter().all(|k| seen.insert(k.clone())));
    assert!(
        starts[first..first + 100].iter().all(|k| k == "newcomer"),
        "the newcomer's jobs were not one round's worth behind"
    );
}
