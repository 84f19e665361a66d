//! Attempt history (`Client::job_attempts`) against a real PostgreSQL: every attempt of a
//! job with its times, worker and error; a lapsed lease said as such; at most
//! `MAX_ATTEMPTS_KEPT` kept per job; nothing written for a job that succeeds at once; the
//! rows of jobs that are gone swept by housekeeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage, Settlement};
use harel_jobs::{
    AttemptOutcome, Backoff, Client, JobContext, JobError, JobResult, JobState, MAX_ATTEMPTS_KEPT,
    Worker, job,
};
use harel_jobs_suite::SuiteSchema;

async fn wait_for(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn attempt_rows(q: &SuiteSchema, job: i64) -> i64 {
    sqlx::query_scalar(q.sql("SELECT count(*) FROM @schema@.job_attempts WHERE job_id = $1"))
        .bind(job)
        .fetch_one(&q.pool)
        .await
        .unwrap()
}

fn applied(outcome: LeaseOutcome) {
    assert_eq!(outcome, LeaseOutcome::Applied);
}

async fn maintain(q: &SuiteSchema) {
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
        .execute(&q.pool)
        .await
        .unwrap();
}

/// Fails its first `fail` attempts with "boom N", then succeeds.
#[job(max_attempts = 5)]
async fn flaky(ctx: JobContext<Arc<AtomicU32>>, fail: u32) -> JobResult {
    ctx.state().fetch_add(1, Ordering::SeqCst);
    if ctx.attempt() <= fail {
        return Err(JobError::retry(format!("boom {}", ctx.attempt())));
    }
    Ok(())
}

/// A job that fails twice and then succeeds shows three attempts, newest first: completed,
/// then the two failures with their errors, each with its times and the pool that ran it
/// (its id, host and pid as the pool reports them). A job that runs out of attempts shows
/// each failure and the dead one.
#[tokio::test]
async fn every_attempt_is_recorded_with_its_times_worker_and_error() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let retried = client.enqueue(&q.pool, Flaky { fail: 2 }).await.unwrap();
    let dead = client.enqueue(&q.pool, Flaky { fail: 9 }).await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let handle = Worker::builder(q.pool.clone(), Arc::clone(&runs))
        .register::<Flaky>()
        .schema(q.schema.clone())
        .backoff(Backoff::fixed(Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .retain_completed(Duration::from_secs(3600))
        .build()
        .unwrap()
        .start();
    wait_for("both jobs to end", Duration::from_secs(30), async || {
        let a = client.job(retried).await.unwrap().map(|j| j.state);
        let b = client.job(dead).await.unwrap().map(|j| j.state);
        matches!(a, Some(JobState::Completed { .. })) && matches!(b, Some(JobState::Dead { .. }))
    })
    .await;
    handle.shutdown().await.unwrap();
    // a pool reports itself as it stops
    let workers = client.workers(Duration::from_secs(600), 100).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3 + 5);

    let attempts = client.job_attempts(retried).await.unwrap();
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| (a.number, a.outcome, a.error.clone()))
        .collect();
    assert_eq!(
        summary,
        [
            (3, AttemptOutcome::Completed, None),
            (2, AttemptOutcome::Failed, Some("boom 2".to_owned())),
            (1, AttemptOutcome::Failed, Some("boom 1".to_owned())),
        ]
    );
    let pool_id = attempts[0]
        .worker
        .as_ref()
        .expect("the worker is recorded")
        .id;
    for a in &attempts {
        let started = a.started_at.expect("started");
        let ended = a.ended_at.expect("ended");
        assert!(started <= ended, "{a:?}");
        let worker = a.worker.as_ref().expect("the worker is recorded");
        assert_eq!(worker.id, pool_id, "one pool ran them all");
    }
    assert!(
        attempts[1].ended_at <= attempts[0].started_at,
        "attempt 2 ended before attempt 3 began: {attempts:?}"
    );
    if let Some(pool) = workers.workers.iter().find(|w| w.id == pool_id) {
        let worker = attempts[0].worker.as_ref().unwrap();
        assert_eq!(worker.host.as_deref(), Some(pool.host.as_str()));
        assert_eq!(worker.pid, Some(pool.pid));
    } else {
        panic!("the recorded worker {pool_id} is not a pool that reported: {workers:?}");
    }

    let attempts = client.job_attempts(dead).await.unwrap();
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| (a.number, a.outcome, a.error.clone()))
        .collect();
    assert_eq!(
        summary,
        [
            (
                5,
                AttemptOutcome::Dead,
                Some("boom 5 (attempt 5 of 5)".to_owned())
            ),
            (4, AttemptOutcome::Failed, Some("boom 4".to_owned())),
            (3, AttemptOutcome::Failed, Some("boom 3".to_owned())),
            (2, AttemptOutcome::Failed, Some("boom 2".to_owned())),
            (1, AttemptOutcome::Failed, Some("boom 1".to_owned())),
        ]
    );
}

/// An attempt whose lease ran out with no settle (its worker died) shows as lapsed, with
/// no end and no worker; the running attempt after it shows as running; an attempt given
/// back uncounted (a snooze) is no attempt.
#[tokio::test]
async fn a_lapsed_lease_and_a_running_attempt_are_said_as_such() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let id = q
        .transport
        .publish(&q.pool, &OutgoingMessage::new("g", "k", "{}"))
        .await
        .unwrap();
    // attempt 1: claimed with a short lease, never settled (the worker "died")
    let first = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_millis(200)))
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(first.attempt, 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    // attempt 2: snoozed (not counted), then claimed again as attempt 2, which runs
    let snoozed = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("claimed after the lease ran out");
    assert_eq!(snoozed.attempt, 2);
    applied(
        q.transport
            .settle(
                &q.pool,
                &snoozed.lease,
                Settlement::Release {
                    delay: Duration::ZERO,
                    error: None,
                    count_attempt: false,
                },
            )
            .await
            .unwrap(),
    );
    let running = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(running.attempt, 2);
    assert_eq!(running.lease.id, id);

    let attempts = client.job_attempts(id).await.unwrap();
    let summary: Vec<_> = attempts
        .iter()
        .map(|a| {
            (
                a.number,
                a.outcome,
                a.ended_at.is_some(),
                a.worker.is_some(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (2, AttemptOutcome::Running, false, false),
            (1, AttemptOutcome::Lapsed, false, false),
        ]
    );
    assert!(attempts[0].started_at.is_some());

    // the running attempt fails: recorded, with the transport's worker id
    let worker = uuid::Uuid::new_v4();
    let transport = q.transport.clone().worker_id(worker);
    applied(
        transport
            .settle(
                &q.pool,
                &running.lease,
                Settlement::Release {
                    delay: Duration::from_secs(3600),
                    error: Some("timed out".to_owned()),
                    count_attempt: true,
                },
            )
            .await
            .unwrap(),
    );
    let attempts = client.job_attempts(id).await.unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Failed);
    assert_eq!(attempts[0].error.as_deref(), Some("timed out"));
    assert_eq!(attempts[0].worker.as_ref().map(|w| w.id), Some(worker));
    assert_eq!(
        attempts[0].worker.as_ref().map(|w| w.host.clone()),
        Some(None),
        "a worker id that never reported has no host"
    );
    assert_eq!(attempts[1].outcome, AttemptOutcome::Lapsed);
}

/// A job keeps its `MAX_ATTEMPTS_KEPT` most recent attempts: the table never holds more
/// for it, and the listing shows the newest ones.
#[tokio::test]
async fn a_job_keeps_its_most_recent_attempts_only() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let id = q
        .transport
        .publish(&q.pool, &OutgoingMessage::new("g", "k", "{}"))
        .await
        .unwrap();
    let total = MAX_ATTEMPTS_KEPT + 5;
    for n in 1..=total {
        let claimed = q
            .transport
            .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("claimed");
        assert_eq!(claimed.attempt, n);
        applied(
            q.transport
                .settle(
                    &q.pool,
                    &claimed.lease,
                    Settlement::Release {
                        delay: Duration::ZERO,
                        error: Some(format!("failure {n}")),
                        count_attempt: true,
                    },
                )
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        attempt_rows(&q, id.get()).await,
        i64::from(MAX_ATTEMPTS_KEPT)
    );
    let attempts = client.job_attempts(id).await.unwrap();
    assert_eq!(attempts.len(), MAX_ATTEMPTS_KEPT as usize);
    assert_eq!(attempts[0].number, total);
    assert_eq!(attempts[0].error, Some(format!("failure {total}")));
    assert_eq!(
        attempts.last().unwrap().number,
        total - MAX_ATTEMPTS_KEPT + 1
    );
    assert!(attempts.iter().all(|a| a.outcome == AttemptOutcome::Failed));
}

/// A job that succeeds on its first attempt writes no attempt row (its one attempt is read
/// from the job itself); the rows of a job that is gone (acked after failures, not
/// retained) are swept by housekeeping, those of a job still queued are kept.
#[tokio::test]
async fn nothing_is_written_for_a_first_success_and_gone_jobs_are_swept() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let t = &q.transport;
    let quick = t
        .publish(&q.pool, &OutgoingMessage::new("a", "k", "{}"))
        .await
        .unwrap();
    let claimed = t
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    applied(
        t.settle(
            &q.pool,
            &claimed.lease,
            Settlement::Retain {
                keep: Duration::from_secs(3600),
            },
        )
        .await
        .unwrap(),
    );
    assert_eq!(q.count("job_attempts").await, 0);
    let attempts = client.job_attempts(quick).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Completed);
    assert!(attempts[0].started_at.is_some() && attempts[0].ended_at.is_some());

    // one job fails once then is acked (gone); another fails once and stays queued
    let gone = t
        .publish(&q.pool, &OutgoingMessage::new("b", "k", "{}"))
        .await
        .unwrap();
    let kept = t
        .publish(&q.pool, &OutgoingMessage::new("c", "k", "{}"))
        .await
        .unwrap();
    for _ in 0..2 {
        let claimed = t
            .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
            .await
            .unwrap()
            .unwrap();
        applied(
            t.settle(
                &q.pool,
                &claimed.lease,
                Settlement::Release {
                    delay: Duration::ZERO,
                    error: Some("once".to_owned()),
                    count_attempt: true,
                },
            )
            .await
            .unwrap(),
        );
    }
    let again = t
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.lease.id, gone);
    applied(
        t.settle(&q.pool, &again.lease, Settlement::Ack)
            .await
            .unwrap(),
    );
    assert_eq!(attempt_rows(&q, gone.get()).await, 1);
    assert_eq!(attempt_rows(&q, kept.get()).await, 1);
    maintain(&q).await;
    assert_eq!(attempt_rows(&q, gone.get()).await, 0, "swept");
    assert_eq!(attempt_rows(&q, kept.get()).await, 1, "kept with its job");
    assert!(client.job_attempts(gone).await.unwrap().is_empty());
    assert_eq!(client.job_attempts(kept).await.unwrap().len(), 1);
}

/// A job given up on by a claim that found it out of attempts (its handler did not run)
/// marks its last attempt dead and keeps what that attempt recorded (its start, worker and
/// error); a last attempt that lapsed shows as dead with no start and no worker, not with
/// the giving-up claim's.
#[tokio::test]
async fn giving_up_after_the_last_attempt_keeps_what_it_recorded() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let first_pool = uuid::Uuid::new_v4();
    let second_pool = uuid::Uuid::new_v4();
    let first = q.transport.clone().worker_id(first_pool);
    let second = q.transport.clone().worker_id(second_pool);

    // attempt 1 failed on the first pool; the second pool's claim (attempt 2) finds the
    // job out of attempts and gives up on it
    let failed = first
        .publish(&q.pool, &OutgoingMessage::new("a", "k", "{}"))
        .await
        .unwrap();
    let claimed = first
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    applied(
        first
            .settle(
                &q.pool,
                &claimed.lease,
                Settlement::Release {
                    delay: Duration::ZERO,
                    error: Some("the partner timed out".to_owned()),
                    count_attempt: true,
                },
            )
            .await
            .unwrap(),
    );
    let before = client.job_attempts(failed).await.unwrap();
    let again = second
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.attempt, 2);
    applied(
        second
            .settle(
                &q.pool,
                &again.lease,
                Settlement::DeadLetter {
                    error: "attempt 1 of 1 never reported a result".to_owned(),
                    attempts: Some(1),
                },
            )
            .await
            .unwrap(),
    );
    let after = client.job_attempts(failed).await.unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].outcome, AttemptOutcome::Dead);
    assert_eq!(
        (
            after[0].started_at,
            after[0].worker.as_ref().map(|w| w.id),
            after[0].error.as_deref()
        ),
        (
            before[0].started_at,
            Some(first_pool),
            Some("the partner timed out")
        ),
        "what attempt 1 recorded"
    );

    // attempt 1 lapsed; the second pool gives up on the job the same way
    let lapsed = first
        .publish(&q.pool, &OutgoingMessage::new("b", "k", "{}"))
        .await
        .unwrap();
    first
        .claim(&q.pool, &ClaimRequest::new(Duration::from_millis(100)))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = second
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.lease.id, again.attempt), (lapsed, 2));
    applied(
        second
            .settle(
                &q.pool,
                &again.lease,
                Settlement::DeadLetter {
                    error: "attempt 1 of 1 never reported a result".to_owned(),
                    attempts: Some(1),
                },
            )
            .await
            .unwrap(),
    );
    let after = client.job_attempts(lapsed).await.unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0].outcome, AttemptOutcome::Dead);
    assert_eq!(after[0].started_at, None, "not the giving-up claim's start");
    assert!(after[0].worker.is_none(), "not the giving-up pool");
}
