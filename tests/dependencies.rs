//! Jobs that wait for other jobs (ADR 0033), against a real PostgreSQL: released by the
//! settle that completes their last parent, cancelled (with the parent named) when a parent
//! dies or is cancelled, or run anyway when they asked; batches that wait for their own
//! earlier jobs; the refusals. The fan-in and crash runs over worker processes are in
//! tests/reliability/dependencies.rs.

use std::collections::BTreeSet;
use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, Lease, OutgoingMessage, Settlement};
use harel_jobs::{
    CancelOutcome, Client, EnqueueOptions, InvalidMessage, Job, JobBatch, JobContext, JobId,
    JobQuery, JobResult, JobState, OnParentFailure, Parent, PublishError, StateFilter, Unique,
    Worker,
};
use harel_jobs_suite::SuiteSchema;
use serde::{Deserialize, Serialize};
use sqlx::AssertSqlSafe;

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Step {
    n: u32,
}

impl Job for Step {
    const KIND: &'static str = "step";
}

fn client(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

/// Claims every due job (up to 100), for a minute.
async fn claim_due(q: &SuiteSchema) -> Vec<Lease> {
    q.transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(60)).limit(100),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.lease)
        .collect()
}

fn ids(leases: &[Lease]) -> BTreeSet<JobId> {
    leases.iter().map(|l| l.id).collect()
}

async fn state(client: &Client, id: JobId) -> JobState {
    client
        .job(id)
        .await
        .unwrap()
        .expect("the job is known")
        .state
}

async fn ack(q: &SuiteSchema, lease: &Lease) {
    assert!(q.transport.ack(&q.pool, lease).await.unwrap().is_applied());
}

/// A dependent is queued at once (pending), is never claimed while a parent is queued,
/// and the settle that completes its last parent releases it, in that transaction.
#[tokio::test]
async fn a_dependent_waits_for_every_parent_and_the_last_completion_releases_it() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let a = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    let b = client.enqueue(&q.pool, Step { n: 2 }).await.unwrap();
    let c = client
        .enqueue(&q.pool, Step { n: 3 })
        .after([a, b])
        .await
        .unwrap();
    assert_eq!(state(&client, c).await, JobState::Pending);
    assert_eq!(client.job_parents(c).await.unwrap().parents, [a, b]);
    let pending = client
        .jobs(&JobQuery::new().state(StateFilter::Pending))
        .await
        .unwrap();
    assert_eq!(
        pending.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [c],
        "listed as pending"
    );

    let leases = claim_due(&q).await;
    assert_eq!(
        ids(&leases),
        [a, b].into(),
        "the dependent is not claimable"
    );
    ack(&q, &leases[0]).await;
    assert_eq!(
        state(&client, c).await,
        JobState::Pending,
        "one parent left"
    );
    assert_eq!(
        client.job_parents(c).await.unwrap().parents,
        [leases[1].id],
        "what it still waits for"
    );
    assert!(claim_due(&q).await.is_empty());
    ack(&q, &leases[1]).await;
    assert_eq!(state(&client, c).await, JobState::Waiting, "released");
    let leases = claim_due(&q).await;
    assert_eq!(ids(&leases), [c].into());
    ack(&q, &leases[0]).await;
    assert_eq!(q.count("job_waits").await, 0, "nothing left behind");
    assert_eq!(q.count("job_dependencies").await, 0);
}

/// Only the lease holder's settle resolves: an ack under a lapsed lease is lost and
/// releases nothing; the current holder's does.
#[tokio::test]
async fn a_stale_lease_on_a_parent_releases_nothing() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let parent = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    let child = client
        .enqueue(&q.pool, Step { n: 2 })
        .after([parent])
        .await
        .unwrap();
    let stale = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_millis(100)).limit(10),
        )
        .await
        .unwrap()
        .remove(0)
        .lease;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let current = claim_due(&q).await;
    assert_eq!(
        ids(&current),
        [parent].into(),
        "claimed again after the lapse"
    );
    assert!(!q.transport.ack(&q.pool, &stale).await.unwrap().is_applied());
    assert_eq!(state(&client, child).await, JobState::Pending);
    ack(&q, &current[0]).await;
    assert_eq!(state(&client, child).await, JobState::Waiting);
}

/// A parent that becomes a dead letter cancels its dependents, naming it, and theirs in
/// turn; a dependent that asked to run anyway is released once its parents have ended.
#[tokio::test]
async fn a_dead_parent_cancels_its_dependents_and_theirs_unless_they_run_anyway() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let parent = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    let child = client
        .enqueue(&q.pool, Step { n: 2 })
        .after([parent])
        .await
        .unwrap();
    let grandchild = client
        .enqueue(&q.pool, Step { n: 3 })
        .after([child])
        .await
        .unwrap();
    let cleanup = client
        .enqueue(&q.pool, Step { n: 4 })
        .after([parent])
        .on_parent_failure(OnParentFailure::Run)
        .await
        .unwrap();

    let lease = claim_due(&q).await.remove(0);
    assert!(
        q.transport
            .dead_letter(&q.pool, &lease, "card declined")
            .await
            .unwrap()
            .is_applied()
    );
    match state(&client, child).await {
        JobState::Cancelled { reason, .. } => assert_eq!(
            reason.as_deref(),
            Some(&*format!(
                "job {parent}, which it waited for, became a dead letter"
            ))
        ),
        other => panic!("expected cancelled, got {other:?}"),
    }
    match state(&client, grandchild).await {
        JobState::Cancelled { reason, .. } => assert_eq!(
            reason.as_deref(),
            Some(&*format!("job {child}, which it waited for, was cancelled"))
        ),
        other => panic!("expected cancelled, got {other:?}"),
    }
    assert_eq!(
        state(&client, cleanup).await,
        JobState::Waiting,
        "runs anyway"
    );
    assert_eq!(ids(&claim_due(&q).await), [cleanup].into());
    assert_eq!(q.count("job_waits").await, 0);
    assert_eq!(q.count("job_dependencies").await, 0);
}

/// A cancelled parent (queued, so cancelled at once) cancels its dependents; a cancelled
/// dependent leaves nothing behind, and its parent's completion finds nothing to do.
#[tokio::test]
async fn cancels_reach_the_dependents_and_a_cancelled_dependent_leaves_nothing() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let parent = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    let child = client
        .enqueue(&q.pool, Step { n: 2 })
        .after([parent])
        .await
        .unwrap();
    assert_eq!(
        client.cancel(parent).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert!(matches!(
        state(&client, child).await,
        JobState::Cancelled { .. }
    ));

    let other = client.enqueue(&q.pool, Step { n: 3 }).await.unwrap();
    let waiting = client
        .enqueue(&q.pool, Step { n: 4 })
        .after([other])
        .await
        .unwrap();
    assert_eq!(
        client.cancel(waiting).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(q.count("job_waits").await, 0);
    assert_eq!(q.count("job_dependencies").await, 0);
    let leases = claim_due(&q).await;
    assert_eq!(ids(&leases), [other].into());
    ack(&q, &leases[0]).await;
    assert!(
        claim_due(&q).await.is_empty(),
        "the cancelled one never runs"
    );
}

/// A batch enqueues a fan-out, its fan-in and a chain in one round trip, each job
/// waiting for earlier jobs of the batch by reference; a reference of another batch is
/// refused before anything is sent.
#[tokio::test]
async fn a_batch_waits_for_its_own_earlier_jobs_by_reference() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut batch = client.batch();
    let shards: Vec<_> = (0..5)
        .map(|n| batch.add(Step { n }, &EnqueueOptions::new()).unwrap())
        .collect();
    let zip = batch
        .add(
            Step { n: 100 },
            &EnqueueOptions::new().after(shards.clone()),
        )
        .unwrap();
    batch
        .add(Step { n: 101 }, &EnqueueOptions::new().after([zip]))
        .unwrap();
    let mut other = JobBatch::new();
    assert!(matches!(
        other.add(Step { n: 0 }, &EnqueueOptions::new().after([zip])),
        Err(PublishError::Invalid(InvalidMessage::ParentNotInBatch))
    ));
    let ids_in_order = batch.enqueue(&q.pool).await.unwrap();
    let (zip_id, upload_id) = (ids_in_order[5], ids_in_order[6]);
    assert_eq!(state(&client, zip_id).await, JobState::Pending);

    let leases = claim_due(&q).await;
    assert_eq!(ids(&leases), ids_in_order[..5].iter().copied().collect());
    for lease in &leases {
        ack(&q, lease).await;
    }
    let leases = claim_due(&q).await;
    assert_eq!(ids(&leases), [zip_id].into(), "the fan-in, once");
    assert_eq!(state(&client, upload_id).await, JobState::Pending);
    ack(&q, &leases[0]).await;
    assert_eq!(ids(&claim_due(&q).await), [upload_id].into());

    // a raw publish has no batch to refer to
    let raw = OutgoingMessage::new("g", "step", "{}").after([Parent::InBatch(zip)]);
    assert!(matches!(
        q.transport.publish(&q.pool, &raw).await,
        Err(PublishError::Invalid(InvalidMessage::ParentNotInBatch))
    ));
}

/// A parent must be queued or kept: one that completed with retention counts as
/// completed, one that left no trace is refused with its id, and nothing is written.
#[tokio::test]
async fn a_parent_must_be_queued_or_kept() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let kept = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    let gone = client.enqueue(&q.pool, Step { n: 2 }).await.unwrap();
    for lease in claim_due(&q).await {
        let settlement = if lease.id == kept {
            Settlement::Retain {
                keep: Duration::from_secs(3600),
            }
        } else {
            Settlement::Ack
        };
        assert!(
            q.transport
                .settle(&q.pool, &lease, settlement)
                .await
                .unwrap()
                .is_applied()
        );
    }
    let after_kept = client
        .enqueue(&q.pool, Step { n: 3 })
        .after([kept])
        .await
        .unwrap();
    assert_eq!(
        state(&client, after_kept).await,
        JobState::Waiting,
        "a kept completion counts"
    );

    let mut tx = q.pool.begin().await.unwrap();
    let refused = client
        .enqueue(&mut *tx, Step { n: 4 })
        .after([kept, gone])
        .await;
    assert!(
        matches!(refused, Err(PublishError::UnknownParent { parent }) if parent == gone),
        "{refused:?}"
    );
    tx.rollback().await.unwrap();
    assert!(matches!(
        client
            .enqueue(&q.pool, Step { n: 5 })
            .after([JobId::new(0)])
            .await,
        Err(PublishError::UnknownParent { .. })
    ));
    assert_eq!(q.count("job_waits").await, 0, "nothing written");
}

/// A job id named as a parent must be older than the jobs being enqueued: a guessed id
/// of the call's own jobs (which could close a cycle) is refused.
#[tokio::test]
async fn a_parent_named_by_id_must_be_older_than_the_jobs_enqueued() {
    let q = SuiteSchema::new().await;
    let next: i64 =
        sqlx::query_scalar(q.sql("SELECT last_value + 1 FROM @schema@.transport_messages_seq_seq"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
    // the second job waits for the first by its (guessed) id, the first for the second
    let refused = sqlx::query(q.sql(
        "SELECT @schema@.harel_publish(ARRAY[NULL, NULL]::text[], ARRAY['step', 'step'],
                ARRAY['{}', '{}'], ARRAY[2, 2]::smallint[], ARRAY[NULL, NULL]::timestamptz[],
                ARRAY[NULL, NULL]::bigint[], NULL, NULL, NULL, NULL, NULL,
                ARRAY[1, 2], ARRAY[$1 + 1, $1]::bigint[], NULL)",
    ))
    .bind(next)
    .execute(&q.pool)
    .await
    .unwrap_err();
    let code = refused
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("22023"), "{refused}");
}

/// A dependent keeps its place in its group: the group's later jobs wait behind it (FIFO),
/// and its own delay counts from its release.
#[tokio::test]
async fn a_dependent_keeps_its_place_in_its_group_and_its_delay_counts_from_release() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let parent = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    let first = client
        .enqueue(&q.pool, Step { n: 2 })
        .group("user-7")
        .after([parent])
        .await
        .unwrap();
    let second = client
        .enqueue(&q.pool, Step { n: 3 })
        .group("user-7")
        .await
        .unwrap();
    let delayed = client
        .enqueue(&q.pool, Step { n: 4 })
        .after([parent])
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let leases = claim_due(&q).await;
    assert_eq!(
        ids(&leases),
        [parent].into(),
        "user-7 waits behind its first job"
    );
    // the parent completes a while after the enqueue: the delay counts from then
    tokio::time::sleep(Duration::from_millis(1500)).await;
    ack(&q, &leases[0]).await;
    let info = client.job(delayed).await.unwrap().unwrap();
    match info.state {
        JobState::Scheduled { at } => assert!(
            at >= info.enqueued_at + chrono::Duration::milliseconds(3_601_400),
            "an hour after the release, not after the enqueue: {at} ({})",
            info.enqueued_at
        ),
        other => panic!("expected scheduled, got {other:?}"),
    }
    let leases = claim_due(&q).await;
    assert_eq!(ids(&leases), [first].into());
    ack(&q, &leases[0]).await;
    assert_eq!(ids(&claim_due(&q).await), [second].into());
}

/// A parent that is a duplicate of a unique job that completed (its key held on after it,
/// the job not kept) counts as completed; a duplicate's holder younger than the job
/// waiting for it (two producers racing for a key) is refused with 40001, to try again.
#[tokio::test]
async fn a_parent_that_is_a_duplicate_waits_for_its_holder_or_counts_as_completed() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let once = Unique::new("nightly").hold_after_completion(Duration::from_secs(3600));
    let first = client
        .enqueue(&q.pool, Step { n: 1 })
        .unique(once.clone())
        .await
        .unwrap();
    let lease = claim_due(&q).await.remove(0);
    assert_eq!(lease.id, first);
    ack(&q, &lease).await;
    assert!(client.job(first).await.unwrap().is_none(), "not kept");
    let mut batch = client.batch();
    let again = batch
        .add(Step { n: 2 }, &EnqueueOptions::new().unique(once))
        .unwrap();
    batch
        .add(Step { n: 3 }, &EnqueueOptions::new().after([again]))
        .unwrap();
    let outcomes = batch.enqueue_each(&q.pool).await.unwrap();
    assert_eq!(
        outcomes[0],
        harel_jobs::Enqueued::Duplicate { existing: first }
    );
    assert_eq!(
        state(&client, outcomes[1].id()).await,
        JobState::Waiting,
        "its parent's completion is known by the key it holds on"
    );

    // (harel_publish's call, as a duplicate whose holder is younger would make it)
    let refused = sqlx::query(q.sql(
        "SELECT @schema@.harel_hold(ARRAY[-1000, 5]::bigint[], ARRAY[NULL, 'g'], NULL,
                ARRAY[2], ARRAY[-1]::bigint[], ARRAY[false, false], NULL, NULL)",
    ))
    .execute(&q.pool)
    .await
    .unwrap_err();
    let code = refused
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("40001"), "{refused}");
}

/// The previous release's producers call harel_publish with its eleven arguments: the new
/// function takes that call unchanged.
#[tokio::test]
async fn the_previous_releases_publish_call_still_works() {
    let q = SuiteSchema::new().await;
    let id: i64 = sqlx::query_scalar(q.sql(
        "SELECT s FROM @schema@.harel_publish(ARRAY[NULL]::text[], ARRAY['step'], ARRAY['{}'],
                ARRAY[2]::smallint[], ARRAY[NULL]::timestamptz[], ARRAY[NULL]::bigint[],
                NULL, NULL, NULL, NULL, NULL) AS s",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert_eq!(ids(&claim_due(&q).await), [JobId::new(id)].into());
}

/// What the handlers below share: the pool and the test's schema (its tables `debits` and
/// `receipts`).
struct Books {
    pool: sqlx::PgPool,
    schema: String,
}

/// Writes its debit and completes in the same transaction, then commits late: the
/// receipt waiting for it must see the debit.
#[harel_jobs::job]
async fn debit(ctx: JobContext<Books>, n: i64) -> JobResult {
    let books = ctx.state();
    let mut tx = books.pool.begin().await?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {}.debits (n) VALUES ($1)",
        books.schema
    )))
    .bind(n)
    .execute(&mut *tx)
    .await?;
    ctx.complete_in(&mut tx).await?;
    // a release that did not wait for this commit would let the receipt run now
    tokio::time::sleep(Duration::from_millis(20)).await;
    tx.commit().await?;
    Ok(())
}

/// Records whether its debit was there when it ran.
#[harel_jobs::job]
async fn receipt(ctx: JobContext<Books>, n: i64) -> JobResult {
    let books = ctx.state();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {0}.receipts (n, saw_debit)
         SELECT $1, EXISTS (SELECT 1 FROM {0}.debits d WHERE d.n = $1)",
        books.schema
    )))
    .bind(n)
    .execute(&books.pool)
    .await?;
    Ok(())
}

/// Through the macro's types and a worker pool: a dependent never starts before its
/// parent's `complete_in` writes are visible (the release commits with them).
#[tokio::test]
async fn a_dependent_never_starts_before_its_parents_complete_in_writes_are_visible() {
    let q = SuiteSchema::new().await;
    sqlx::raw_sql(q.sql(
        "CREATE TABLE @schema@.debits (n BIGINT PRIMARY KEY);
         CREATE TABLE @schema@.receipts (n BIGINT PRIMARY KEY, saw_debit BOOLEAN NOT NULL);",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let client = client(&q);
    let pairs = 60;
    let mut tx = q.pool.begin().await.unwrap();
    for n in 0..pairs {
        let debit = client.enqueue(&mut *tx, Debit { n }).await.unwrap();
        client
            .enqueue(&mut *tx, Receipt { n })
            .after([debit])
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let books = Books {
        pool: q.pool.clone(),
        schema: q.schema.to_string(),
    };
    let handle = Worker::builder(q.pool.clone(), books)
        .schema(q.schema.clone())
        .register::<Debit>()
        .register::<Receipt>()
        .concurrency(8)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while q.count("receipts").await < pairs {
        assert!(std::time::Instant::now() < deadline, "the receipts ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.unwrap();
    let blind: i64 =
        sqlx::query_scalar(q.sql("SELECT count(*) FROM @schema@.receipts WHERE NOT saw_debit"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert_eq!(blind, 0, "every receipt saw its debit");
}

/// A producer holds no lock on a parent, so a parent whose settle commits between the
/// producer's look at it and the producer's commit leaves a dependency nobody resolved:
/// housekeeping's sweep resolves it (a completion without trace as completed, a dead
/// letter as dead).
#[tokio::test]
async fn housekeeping_resolves_a_dependency_whose_parent_ended_unseen() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let gone = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    let dies = client.enqueue(&q.pool, Step { n: 2 }).await.unwrap();
    let holder = client.enqueue(&q.pool, Step { n: 3 }).await.unwrap();
    let released = client
        .enqueue(&q.pool, Step { n: 4 })
        .after([holder])
        .await
        .unwrap();
    let cancelled = client
        .enqueue(&q.pool, Step { n: 5 })
        .after([holder])
        .await
        .unwrap();
    for lease in claim_due(&q).await {
        if lease.id == gone {
            ack(&q, &lease).await;
        } else if lease.id == dies {
            assert!(
                q.transport
                    .dead_letter(&q.pool, &lease, "x")
                    .await
                    .unwrap()
                    .is_applied()
            );
        }
    }
    // the race's outcome, made by hand: the dependencies point at parents that ended
    // without seeing them
    for (job, parent) in [(released, gone), (cancelled, dies)] {
        sqlx::query(q.sql("UPDATE @schema@.job_dependencies SET parent_id = $2 WHERE job_id = $1"))
            .bind(job.get())
            .bind(parent.get())
            .execute(&q.pool)
            .await
            .unwrap();
    }
    assert_eq!(state(&client, released).await, JobState::Pending);
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
        .execute(&q.pool)
        .await
        .unwrap();
    assert_eq!(state(&client, released).await, JobState::Waiting);
    match state(&client, cancelled).await {
        JobState::Cancelled { reason, .. } => assert_eq!(
            reason.as_deref(),
            Some(&*format!(
                "job {dies}, which it waited for, became a dead letter"
            ))
        ),
        other => panic!("expected cancelled, got {other:?}"),
    }
    assert_eq!(q.count("job_dependencies").await, 0);
}

/// Enqueues `n` jobs of groups of their own, each waiting for `parent` (and, for the last
/// one, also `and` when given), in batches.
async fn dependents_of(q: &SuiteSchema, parent: JobId, n: u32) -> Vec<JobId> {
    let mut ids = Vec::new();
    let mut left = n;
    while left > 0 {
        let take = left.min(5_000);
        let mut batch = JobBatch::for_schema(&q.schema);
        for k in 0..take {
            batch
                .push_with(Step { n: k }, &EnqueueOptions::new().after([parent]))
                .unwrap();
        }
        ids.extend(batch.enqueue(&q.pool).await.unwrap());
        left -= take;
    }
    ids
}

/// The dependents still waiting for a parent, and the rows left to housekeeping.
async fn waiting_and_backlog(q: &SuiteSchema) -> (i64, i64) {
    (
        q.count("job_dependencies").await,
        q.count("dependency_backlog").await,
    )
}

/// The queued jobs not pending on parents (their own start time back).
async fn released(q: &SuiteSchema) -> i64 {
    sqlx::query_scalar(q.sql(
        "SELECT count(*) FROM @schema@.jobs
          WHERE not_before IS NULL OR not_before < '9999-12-31'",
    ))
    .fetch_one(&q.pool)
    .await
    .unwrap()
}

/// One page of the backlog, as the pool's housekeeping calls it: (parents, more).
async fn backlog_page(q: &SuiteSchema) -> (i32, bool) {
    sqlx::query_as(q.sql("SELECT parents, more FROM @schema@.harel_resolve_backlog(1000)"))
        .fetch_one(&q.pool)
        .await
        .unwrap()
}

/// A job with 2,500 dependents (ADR 0037): the settle that completes it releases at most
/// 1,000 in its transaction, whatever their number, and leaves the rest to housekeeping
/// with the parent's outcome; housekeeping releases them a page at a time. (Before, the
/// settle released all of them: 100,000 dependents took 4.4 s of the settle's batch.)
#[tokio::test]
async fn a_settle_resolves_a_bounded_number_of_dependents_and_housekeeping_the_rest() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let parent = client.enqueue(&q.pool, Step { n: 0 }).await.unwrap();
    let dependents = dependents_of(&q, parent, 2_500).await;
    let lease = claim_due(&q).await.remove(0);
    assert_eq!(lease.id, parent);
    ack(&q, &lease).await;
    assert_eq!(
        waiting_and_backlog(&q).await,
        (1_500, 1),
        "1,000 released by the settle, the rest left with the parent's outcome"
    );
    assert_eq!(released(&q).await, 1_000);
    assert_eq!(backlog_page(&q).await, (1, true));
    assert_eq!(waiting_and_backlog(&q).await, (500, 1));
    assert_eq!(backlog_page(&q).await, (1, false));
    assert_eq!(waiting_and_backlog(&q).await, (0, 0));
    assert_eq!(released(&q).await, 2_500);
    assert_eq!(backlog_page(&q).await, (0, false));
    assert_eq!(state(&client, dependents[2_499]).await, JobState::Waiting);
}

/// A dead parent's dependents left to housekeeping are cancelled as it ended, with the
/// parent named, even once its dead letter is deleted (the backlog keeps the outcome: a
/// parent found nowhere would otherwise count as completed), and the cascade reaches theirs.
#[tokio::test]
async fn dependents_left_to_housekeeping_end_as_their_parent_did() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let parent = client.enqueue(&q.pool, Step { n: 0 }).await.unwrap();
    let dependents = dependents_of(&q, parent, 1_200).await;
    let last = *dependents.last().unwrap();
    let grandchild = client
        .enqueue(&q.pool, Step { n: 1 })
        .after([last])
        .await
        .unwrap();
    let lease = claim_due(&q).await.remove(0);
    assert!(
        q.transport
            .dead_letter(&q.pool, &lease, "card declined")
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(q.count("dependency_backlog").await, 1);
    assert_eq!(state(&client, last).await, JobState::Pending);
    assert!(client.dead_letters().delete(parent).await.unwrap());
    while backlog_page(&q).await.1 {}
    for id in [last, grandchild] {
        match state(&client, id).await {
            JobState::Cancelled { reason, .. } => assert!(
                reason
                    .as_deref()
                    .is_some_and(|r| r.contains("which it waited for")),
                "{reason:?}"
            ),
            other => panic!("{id}: expected cancelled, got {other:?}"),
        }
    }
    assert_eq!(waiting_and_backlog(&q).await, (0, 0));
    assert_eq!(q.count("job_waits").await, 0);
}

/// One parent's thousands of dependents do not crowd out the few of the other parents of
/// its settle batch: the bound is shared round-robin, so a parent with 10 dependents beside
/// one with 3,000 has all 10 released by the settle.
#[tokio::test]
async fn a_settles_bound_is_shared_between_its_parents() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let big = client.enqueue(&q.pool, Step { n: 0 }).await.unwrap();
    let small = client.enqueue(&q.pool, Step { n: 1 }).await.unwrap();
    dependents_of(&q, big, 3_000).await;
    let few = dependents_of(&q, small, 10).await;
    let leases = claim_due(&q).await;
    assert_eq!(ids(&leases), [big, small].into());
    let outcomes = q
        .transport
        .settle_many(
            &q.pool,
            &leases
                .iter()
                .map(|l| (l.clone(), Settlement::Ack))
                .collect::<Vec<_>>(),
            None,
        )
        .await
        .unwrap();
    assert!(outcomes.iter().all(|o| o.is_applied()));
    for id in few {
        assert_eq!(state(&client, id).await, JobState::Waiting, "{id}");
    }
    let left: i64 = sqlx::query_scalar(
        q.sql("SELECT count(*) FROM @schema@.job_dependencies WHERE parent_id = $1"),
    )
    .bind(big.get())
    .fetch_one(&q.pool)
    .await
    .unwrap();
    assert_eq!(
        left,
        3_000 - (1_000 - 10),
        "the rest of the bound went to the big parent"
    );
}

/// A job enqueued after a parent that had already completed (kept): in a group of its own
/// it is released in the producer's own transaction (nobody else sees that group); in a
/// named group, which a worker may hold, the producer locks nothing and housekeeping
/// releases it (ADR 0037).
#[tokio::test]
async fn a_dependent_of_an_ended_parent_is_released_without_the_producer_holding_a_group() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let parent = client.enqueue(&q.pool, Step { n: 0 }).await.unwrap();
    let lease = claim_due(&q).await.remove(0);
    assert!(
        q.transport
            .settle(
                &q.pool,
                &lease,
                Settlement::Retain {
                    keep: Duration::from_secs(600)
                }
            )
            .await
            .unwrap()
            .is_applied()
    );
    let own = client
        .enqueue(&q.pool, Step { n: 1 })
        .after([parent])
        .await
        .unwrap();
    let named = client
        .enqueue(&q.pool, Step { n: 2 })
        .group("user-7")
        .after([parent])
        .await
        .unwrap();
    assert_eq!(
        state(&client, own).await,
        JobState::Waiting,
        "released at once"
    );
    assert_eq!(
        state(&client, named).await,
        JobState::Pending,
        "left to housekeeping"
    );
    assert_eq!(q.count("dependency_backlog").await, 1);
    assert_eq!(backlog_page(&q).await, (1, false));
    assert_eq!(state(&client, named).await, JobState::Waiting);
    assert_eq!(waiting_and_backlog(&q).await, (0, 0));
}
