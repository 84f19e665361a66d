//! `harel_jobs::testing`: a fresh queue per test, assertions on what was enqueued (inside
//! the test's own transaction too), and jobs run in-process through the pool's own code.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use harel_jobs::testing::{TestError, TestSchema, TestWorker, WorkOptions, WorkOutcome, WorkedJob};
use harel_jobs::{Backoff, JobContext, JobError, JobResult, JobState, Schema, job};
use harel_jobs_suite::{database_url, pool_with};

/// Counts the handlers that ran.
#[derive(Default)]
struct Ran(AtomicU32);

#[job(derive(Debug))]
async fn send_welcome_email(ctx: JobContext<Ran>, user_id: i64) -> JobResult {
    ctx.state().0.fetch_add(1, Ordering::SeqCst);
    let _ = user_id;
    Ok(())
}

/// Fails every attempt (two of them).
#[job(max_attempts = 2)]
async fn flaky(ctx: JobContext<Ran>, n: u32) -> JobResult {
    ctx.state().0.fetch_add(1, Ordering::SeqCst);
    Err(JobError::retry(format!("flaky {n} failed")))
}

/// Fails for good at once.
#[job]
async fn refused(_ctx: JobContext<Ran>) -> JobResult {
    Err(JobError::permanent("refused"))
}

/// Snoozes for an hour.
#[job]
async fn sleepy(_ctx: JobContext<Ran>) -> JobResult {
    Err(JobError::snooze(Duration::from_secs(3600)))
}

async fn queue() -> TestSchema {
    TestSchema::connect(&database_url())
        .await
        .expect("a test queue")
}

/// A test worker of every job type above, retrying without delay.
fn worker(queue: &TestSchema) -> TestWorker<Ran> {
    TestWorker::new(
        queue
            .worker(Ran::default())
            .register::<SendWelcomeEmail>()
            .register::<Flaky>()
            .register::<Refused>()
            .register::<Sleepy>()
            .backoff(Backoff::fixed(Duration::ZERO)),
    )
    .expect("a valid worker")
}

async fn schema_exists(schema: &Schema) -> bool {
    let pool = pool_with(&database_url(), 1).await;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(schema.name())
            .fetch_one(&pool)
            .await
            .expect("pg_namespace");
    pool.close().await;
    exists
}

#[tokio::test]
async fn assertions_see_the_uncommitted_transaction_only() {
    let queue = queue().await;
    let mut tx = queue.pool().begin().await.unwrap();
    queue
        .client()
        .enqueue(&mut *tx, SendWelcomeEmail { user_id: 42 })
        .await
        .unwrap();
    queue
        .client()
        .enqueue(&mut *tx, SendWelcomeEmail { user_id: 7 })
        .await
        .unwrap();

    let found = queue
        .assert_enqueued::<SendWelcomeEmail>(&mut *tx, |job| job.user_id == 42)
        .await;
    assert_eq!(found.job.user_id, 42);
    assert_eq!(found.info.state, JobState::Waiting);
    queue
        .assert_not_enqueued::<SendWelcomeEmail>(&mut *tx, |job| job.user_id == 43)
        .await;
    let all = queue.enqueued::<SendWelcomeEmail>(&mut *tx).await.unwrap();
    let ids: Vec<i64> = all.iter().map(|job| job.job.user_id).collect();
    assert_eq!(ids, [42, 7], "in enqueue order");
    assert!(queue.enqueued::<Flaky>(&mut *tx).await.unwrap().is_empty());

    // outside the transaction: nothing yet
    queue.assert_nothing_enqueued(queue.pool()).await;
    tx.rollback().await.unwrap();
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn failed_assertions_panic_with_what_is_queued() {
    let queue = queue().await;
    queue
        .client()
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 42 })
        .await
        .unwrap();

    let missing = AssertUnwindSafe(
        queue.assert_enqueued::<SendWelcomeEmail>(queue.pool(), |job| job.user_id == 43),
    )
    .catch_unwind()
    .await;
    let message = panic_text(missing.expect_err("no job for user 43"));
    assert!(message.contains("no matching job"), "{message}");
    assert!(message.contains(r#"{\"user_id\":42}"#), "{message}");

    let present = AssertUnwindSafe(
        queue.assert_not_enqueued::<SendWelcomeEmail>(queue.pool(), |job| job.user_id == 42),
    )
    .catch_unwind()
    .await;
    assert!(panic_text(present.expect_err("user 42's job is queued")).contains("is queued"));

    let not_empty = AssertUnwindSafe(queue.assert_nothing_enqueued(queue.pool()))
        .catch_unwind()
        .await;
    let message = panic_text(not_empty.expect_err("the queue holds a job"));
    assert!(message.contains("send_welcome_email"), "{message}");
    queue.cleanup().await.unwrap();
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[tokio::test]
async fn work_until_idle_applies_the_pools_policy() {
    let queue = queue().await;
    let worker = worker(&queue);
    let q = queue.client();
    let ok = q
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 1 })
        .await
        .unwrap();
    let flaky = q.enqueue(queue.pool(), Flaky { n: 1 }).await.unwrap();
    let refused = q.enqueue(queue.pool(), Refused {}).await.unwrap();
    let sleepy = q.enqueue(queue.pool(), Sleepy {}).await.unwrap();

    let worked = worker.work_until_idle(queue.pool()).await.unwrap();
    let seen: Vec<_> = worked
        .iter()
        .map(|job| (job.id, job.kind.as_str(), job.attempt, job.outcome.clone()))
        .collect();
    assert_eq!(
        seen,
        [
            (ok, "send_welcome_email", 1, WorkOutcome::Succeeded),
            (
                flaky,
                "flaky",
                1,
                WorkOutcome::Retrying {
                    error: "flaky 1 failed".to_owned(),
                    delay: Duration::ZERO
                }
            ),
            (
                refused,
                "refused",
                1,
                WorkOutcome::Dead {
                    error: "refused".to_owned()
                }
            ),
            (
                sleepy,
                "sleepy",
                1,
                WorkOutcome::Snoozed {
                    delay: Duration::from_secs(3600)
                }
            ),
            (
                flaky,
                "flaky",
                2,
                WorkOutcome::Dead {
                    error: "flaky 1 failed (attempt 2 of 2)".to_owned()
                }
            ),
        ]
    );
    assert_eq!(worked[1].error(), Some("flaky 1 failed"));
    assert_eq!(worked[0].error(), None);

    // as written: the dead ones in the dead letters, the snoozed one scheduled, the
    // completed one gone
    assert!(matches!(
        q.job(flaky).await.unwrap().unwrap().state,
        JobState::Dead { .. }
    ));
    assert!(matches!(
        q.job(refused).await.unwrap().unwrap().state,
        JobState::Dead { .. }
    ));
    // (harel_job reports a snoozed job as waiting: its group, not the job, holds the delay)
    let snoozed = queue
        .assert_enqueued::<Sleepy>(queue.pool(), |_| true)
        .await;
    assert_eq!(snoozed.info.id, sleepy);
    assert!(q.job(ok).await.unwrap().is_none());
    assert!(worker.work_one(queue.pool()).await.unwrap().is_none());
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn work_inside_the_tests_transaction_rolls_back() {
    let queue = queue().await;
    let worker = worker(&queue);
    let id = queue
        .client()
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 5 })
        .await
        .unwrap();

    let mut tx = queue.pool().begin().await.unwrap();
    let worked = worker.work_one(&mut *tx).await.unwrap().expect("a due job");
    assert_eq!((worked.id, worked.outcome), (id, WorkOutcome::Succeeded));
    queue.assert_nothing_enqueued(&mut *tx).await;
    assert!(worker.work_one(&mut *tx).await.unwrap().is_none());
    tx.rollback().await.unwrap();

    // the claim and the ack were the transaction's: the job is queued again
    let again = queue
        .assert_enqueued::<SendWelcomeEmail>(queue.pool(), |job| job.user_id == 5)
        .await;
    assert_eq!(again.info.id, id);
    assert_eq!(again.info.state, JobState::Waiting);

    // and a job enqueued inside a transaction runs inside it
    let mut tx = queue.pool().begin().await.unwrap();
    let inner = queue
        .client()
        .enqueue(&mut *tx, SendWelcomeEmail { user_id: 6 })
        .await
        .unwrap();
    let worked = worker.work_until_idle(&mut *tx).await.unwrap();
    let ids: Vec<_> = worked.iter().map(|job| job.id).collect();
    assert_eq!(ids, [id, inner]);
    tx.commit().await.unwrap();
    queue.assert_nothing_enqueued(queue.pool()).await;
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_job_that_does_not_decode_is_a_typed_error() {
    let queue = queue().await;
    let message = harel_jobs::transport::OutgoingMessage::new(
        "g",
        "send_welcome_email",
        r#"{"user_id":"not a number"}"#,
    );
    harel_jobs::transport::Transport::new(queue.schema().clone())
        .publish(queue.pool(), &message)
        .await
        .unwrap();
    match queue.enqueued::<SendWelcomeEmail>(queue.pool()).await {
        Err(TestError::Decode { kind, .. }) => assert_eq!(kind, "send_welcome_email"),
        other => panic!("expected a decode error, got {other:?}"),
    }
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn cleanup_and_drop_remove_the_schema() {
    let queue = self::queue().await;
    let schema = queue.schema().clone();
    assert!(
        schema.name().starts_with("harel_test_"),
        "{}",
        schema.name()
    );
    assert!(schema_exists(&schema).await);
    queue.cleanup().await.unwrap();
    assert!(!schema_exists(&schema).await);

    // dropped without cleanup (a failed test): dropped on drop
    let queue = self::queue().await;
    let schema = queue.schema().clone();
    drop(queue);
    assert!(!schema_exists(&schema).await);

    // a panicking test
    let schema = tokio::spawn(async {
        let queue = self::queue().await;
        let schema = queue.schema().clone();
        let _keep = &queue;
        if !schema.name().is_empty() {
            std::panic::panic_any(schema);
        }
        unreachable!()
    })
    .await
    .expect_err("the task panicked")
    .into_panic()
    .downcast::<Schema>()
    .expect("the schema");
    assert!(!schema_exists(&schema).await);
}

#[tokio::test]
async fn queues_of_parallel_tests_do_not_see_each_other() {
    let (a, b) = tokio::join!(queue(), queue());
    assert_ne!(a.schema(), b.schema());
    a.client()
        .enqueue(a.pool(), SendWelcomeEmail { user_id: 1 })
        .await
        .unwrap();
    b.assert_nothing_enqueued(b.pool()).await;
    let worker = worker(&b);
    assert!(worker.work_one(b.pool()).await.unwrap().is_none());
    a.cleanup().await.unwrap();
    b.cleanup().await.unwrap();
}

#[tokio::test]
async fn sqlx_test_style_default_schema() {
    // what `#[sqlx::test]` hands a test: a pool on a database of its own
    let database = harel_jobs_suite::TestDatabase::new().await;
    let pool = pool_with(&database.url, 5).await;
    let queue = TestSchema::with_schema(pool.clone(), Schema::default())
        .await
        .unwrap();
    // code that names no schema enqueues into the default one
    SendWelcomeEmail { user_id: 9 }
        .enqueue(&pool)
        .await
        .unwrap();
    queue
        .assert_enqueued::<SendWelcomeEmail>(&pool, |job| job.user_id == 9)
        .await;
    let worker = worker(&queue);
    let worked = worker.work_until_idle(&pool).await.unwrap();
    assert_eq!(worked.len(), 1);
    queue.cleanup().await.unwrap();
    assert!(!pool.is_closed(), "a pool the test passed in stays open");
    pool.close().await;
}

#[tokio::test]
async fn the_handler_state_is_the_builders() {
    let queue = queue().await;
    let ran = Arc::new(AtomicU32::new(0));
    #[job]
    async fn count(ctx: JobContext<Arc<AtomicU32>>) {
        ctx.state().fetch_add(1, Ordering::SeqCst);
    }
    let worker = TestWorker::new(queue.worker(Arc::clone(&ran)).register::<Count>()).unwrap();
    for _ in 0..3 {
        queue
            .client()
            .enqueue(queue.pool(), Count {})
            .await
            .unwrap();
    }
    assert_eq!(worker.work_until_idle(queue.pool()).await.unwrap().len(), 3);
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    queue.cleanup().await.unwrap();
}

#[job(queue = "mail")]
async fn send_mail(_ctx: JobContext<Ran>, to: String) {
    let _ = to;
}

#[tokio::test]
async fn a_test_worker_serves_the_builders_queues() {
    let queue = queue().await;
    let q = queue.client();
    let mail = q
        .enqueue(queue.pool(), SendMail { to: "a@b".into() })
        .await
        .unwrap();
    let welcome = q
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 3 })
        .await
        .unwrap();
    // the default queue only: the mail waits
    let default_only = worker(&queue);
    let worked = default_only.work_until_idle(queue.pool()).await.unwrap();
    let ids: Vec<_> = worked.iter().map(|job| job.id).collect();
    assert_eq!(ids, [welcome]);
    queue
        .assert_enqueued::<SendMail>(queue.pool(), |job| job.to == "a@b")
        .await;
    // a worker serving `mail`
    let mail_worker = TestWorker::new(
        queue
            .worker(Ran::default())
            .register::<SendMail>()
            .queue("mail", 1),
    )
    .unwrap();
    let worked = mail_worker.work_until_idle(queue.pool()).await.unwrap();
    assert_eq!(worked.len(), 1);
    assert_eq!(
        (worked[0].id, &worked[0].outcome),
        (mail, &WorkOutcome::Succeeded)
    );
    queue.assert_nothing_enqueued(queue.pool()).await;
    queue.cleanup().await.unwrap();
}

/// Fails its first `fails` attempts, each retried after an hour (its own backoff), then
/// succeeds; three attempts at most.
#[job(backoff = "1h", max_attempts = 3)]
async fn stubborn(ctx: JobContext<Ran>, fails: u32) -> JobResult {
    ctx.state().0.fetch_add(1, Ordering::SeqCst);
    if ctx.attempt() <= fails {
        return Err(JobError::retry(format!("attempt {} failed", ctx.attempt())));
    }
    Ok(())
}

/// A test worker of the default queue with the builder's own (2 s doubling) backoff.
fn plain_worker(queue: &TestSchema) -> TestWorker<Ran> {
    TestWorker::new(
        queue
            .worker(Ran::default())
            .register::<SendWelcomeEmail>()
            .register::<Stubborn>()
            .register::<Sleepy>(),
    )
    .expect("a valid worker")
}

/// (id, attempt, outcome) of each attempt, in order.
fn attempts(worked: &[WorkedJob]) -> Vec<(harel_jobs::JobId, u32, WorkOutcome)> {
    worked
        .iter()
        .map(|job| (job.id, job.attempt, job.outcome.clone()))
        .collect()
}

/// A drain that loops for ever fails the test instead of hanging it.
async fn bounded<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .expect("the drain returned")
}

#[tokio::test]
async fn a_scheduled_job_runs_with_the_scheduled_option_only() {
    let queue = queue().await;
    let worker = plain_worker(&queue);
    let id = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 1 })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();

    assert!(
        worker
            .work_until_idle(queue.pool())
            .await
            .unwrap()
            .is_empty()
    );
    let drained = worker
        .drain(queue.pool(), WorkOptions::new().retries())
        .await
        .unwrap();
    assert!(drained.worked.is_empty(), "{drained:?}");
    assert!(matches!(
        queue.client().job(id).await.unwrap().unwrap().state,
        JobState::Scheduled { .. }
    ));

    // a retry waiting for its backoff, a scheduled job behind it in its group: the
    // scheduled option alone runs neither (the retry waits, and the group runs in order)
    let retrying = queue
        .enqueue(queue.pool(), Stubborn { fails: 1 })
        .group("r")
        .await
        .unwrap();
    let behind = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 2 })
        .group("r")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(worker.work_until_idle(queue.pool()).await.unwrap().len(), 1);

    let drained = bounded(worker.drain(queue.pool(), WorkOptions::new().scheduled()))
        .await
        .unwrap();
    assert_eq!(attempts(&drained.worked), [(id, 1, WorkOutcome::Succeeded)]);
    assert!(!drained.stopped_at_bound);
    assert!(matches!(
        queue.client().job(retrying).await.unwrap().unwrap().state,
        JobState::Retrying { .. }
    ));

    // both: the retry, then the job behind it
    let drained = bounded(worker.drain(queue.pool(), WorkOptions::new().scheduled().retries()))
        .await
        .unwrap();
    let ran: Vec<_> = drained
        .worked
        .iter()
        .map(|job| (job.id, job.attempt))
        .collect();
    assert_eq!(ran, [(retrying, 2), (behind, 1)]);
    queue.assert_nothing_enqueued(queue.pool()).await;
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn retries_run_at_once_with_the_retries_option() {
    let queue = queue().await;
    let worker = plain_worker(&queue);
    // its own backoff is an hour: a pool would run the third attempt two hours later
    let id = queue
        .enqueue(queue.pool(), Stubborn { fails: 2 })
        .await
        .unwrap();

    let drained = worker
        .drain(queue.pool(), WorkOptions::new())
        .await
        .unwrap();
    assert_eq!(drained.worked.len(), 1, "one attempt, then the backoff");
    let WorkOutcome::Retrying { delay, .. } = &drained.worked[0].outcome else {
        panic!("{drained:?}");
    };
    assert!(
        *delay >= Duration::from_secs(1800),
        "the job's own backoff: {delay:?}"
    );
    // retries only: the scheduled option is not needed
    let drained = bounded(worker.drain(queue.pool(), WorkOptions::new().retries()))
        .await
        .unwrap();
    let seen: Vec<_> = drained
        .worked
        .iter()
        .map(|job| (job.id, job.attempt, job.error().map(str::to_owned)))
        .collect();
    assert_eq!(
        seen,
        [(id, 2, Some("attempt 2 failed".to_owned())), (id, 3, None)]
    );
    assert_eq!(drained.worked[1].outcome, WorkOutcome::Succeeded);
    queue.assert_nothing_enqueued(queue.pool()).await;
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_job_failing_twice_completes_on_its_third_attempt_in_one_call() {
    let queue = queue().await;
    let worker = plain_worker(&queue);
    let id = queue
        .enqueue(queue.pool(), Stubborn { fails: 2 })
        .await
        .unwrap();
    let drained = bounded(worker.drain(queue.pool(), WorkOptions::new().scheduled().retries()))
        .await
        .unwrap();
    let seen: Vec<_> = drained
        .worked
        .iter()
        .map(|job| (job.id, job.attempt, job.error().map(str::to_owned)))
        .collect();
    assert_eq!(
        seen,
        [
            (id, 1, Some("attempt 1 failed".to_owned())),
            (id, 2, Some("attempt 2 failed".to_owned())),
            (id, 3, None),
        ]
    );
    assert_eq!(drained.worked[2].outcome, WorkOutcome::Succeeded);
    assert!(!drained.stopped_at_bound);
    assert!(queue.client().job(id).await.unwrap().is_none());
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn an_always_failing_job_ends_dead_after_its_last_attempt() {
    let queue = queue().await;
    let worker = plain_worker(&queue);
    let id = queue
        .enqueue(queue.pool(), Stubborn { fails: 99 })
        .await
        .unwrap();
    // inside the test's transaction first: rolled back, the job is as it was
    let mut tx = queue.pool().begin().await.unwrap();
    let drained = bounded(worker.drain(&mut *tx, WorkOptions::new().scheduled().retries()))
        .await
        .unwrap();
    assert_eq!(drained.worked.len(), 3, "{drained:?}");
    tx.rollback().await.unwrap();
    assert_eq!(
        queue.client().job(id).await.unwrap().unwrap().state,
        JobState::Waiting
    );

    let drained = bounded(worker.drain(queue.pool(), WorkOptions::new().scheduled().retries()))
        .await
        .unwrap();
    assert_eq!(drained.worked.len(), 3, "{drained:?}");
    assert_eq!(
        drained.worked[2].outcome,
        WorkOutcome::Dead {
            error: "attempt 3 failed (attempt 3 of 3)".to_owned()
        }
    );
    assert!(!drained.stopped_at_bound);
    assert!(matches!(
        queue.client().job(id).await.unwrap().unwrap().state,
        JobState::Dead { .. }
    ));
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_drain_stops_at_its_bound_and_says_so() {
    let queue = queue().await;
    let worker = plain_worker(&queue);
    // snoozes for an hour, every time
    let id = queue.enqueue(queue.pool(), Sleepy {}).await.unwrap();
    let drained = bounded(worker.drain(
        queue.pool(),
        WorkOptions::new().scheduled().retries().max_jobs(5),
    ))
    .await
    .unwrap();
    assert!(drained.stopped_at_bound);
    assert_eq!(drained.worked.len(), 5);
    assert!(drained.worked.iter().all(|job| job.id == id
        && job.outcome
            == WorkOutcome::Snoozed {
                delay: Duration::from_secs(3600)
            }));
    // not the bound: a drain that ran everything
    queue.client().cancel(id).await.unwrap();
    let drained = worker
        .drain(queue.pool(), WorkOptions::new().scheduled().retries())
        .await
        .unwrap();
    assert!(!drained.stopped_at_bound);
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn the_test_workers_backoff_overrides_the_jobs_own() {
    let queue = queue().await;
    let id = queue
        .enqueue(queue.pool(), Stubborn { fails: 2 })
        .await
        .unwrap();
    // without it, the job's hour wins over the builder's zero
    let builders = TestWorker::new(
        queue
            .worker(Ran::default())
            .register::<Stubborn>()
            .backoff(Backoff::fixed(Duration::ZERO)),
    )
    .unwrap();
    let worked = builders.work_until_idle(queue.pool()).await.unwrap();
    assert_eq!(worked.len(), 1);
    assert!(
        matches!(&worked[0].outcome, WorkOutcome::Retrying { delay, .. } if *delay >= Duration::from_secs(1800)),
        "{worked:?}"
    );

    let second = queue
        .enqueue(queue.pool(), Stubborn { fails: 2 })
        .await
        .unwrap();
    let immediate = plain_worker(&queue).retry_immediately();
    let worked = immediate.work_until_idle(queue.pool()).await.unwrap();
    let zero = |attempt: u32| WorkOutcome::Retrying {
        error: format!("attempt {attempt} failed"),
        delay: Duration::ZERO,
    };
    assert_eq!(
        attempts(&worked),
        [
            (second, 1, zero(1)),
            (second, 2, zero(2)),
            (second, 3, WorkOutcome::Succeeded)
        ]
    );
    // the first job still waits for its hour
    assert!(matches!(
        queue.client().job(id).await.unwrap().unwrap().state,
        JobState::Retrying { .. }
    ));
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_pending_dependent_waits_for_its_parent_then_runs_in_the_same_call() {
    let queue = queue().await;
    // the parent is in `mail`, an hour from now; its dependent in the default queue
    let parent = queue
        .enqueue(queue.pool(), SendMail { to: "a@b".into() })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let child = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 1 })
        .after([parent])
        .await
        .unwrap();
    assert_eq!(
        queue.client().job(child).await.unwrap().unwrap().state,
        JobState::Pending
    );

    // a worker that does not serve the parent's queue: nothing may run, however due
    // everything is made
    let default_only = plain_worker(&queue);
    let drained =
        bounded(default_only.drain(queue.pool(), WorkOptions::new().scheduled().retries()))
            .await
            .unwrap();
    assert!(drained.worked.is_empty(), "{drained:?}");
    assert_eq!(
        queue.client().job(child).await.unwrap().unwrap().state,
        JobState::Pending
    );
    assert!(
        !queue.make_due(queue.pool(), child).await.unwrap(),
        "a pending job is not made due"
    );
    assert!(
        default_only
            .work_until_idle(queue.pool())
            .await
            .unwrap()
            .is_empty()
    );

    // both queues: the parent (made due), then its dependent, in one call
    let both = TestWorker::new(
        queue
            .worker(Ran::default())
            .register::<SendMail>()
            .register::<SendWelcomeEmail>()
            .queue("mail", 1)
            .queue("default", 1),
    )
    .unwrap();
    let drained = bounded(both.drain(queue.pool(), WorkOptions::new().scheduled()))
        .await
        .unwrap();
    assert_eq!(
        attempts(&drained.worked),
        [
            (parent, 1, WorkOutcome::Succeeded),
            (child, 1, WorkOutcome::Succeeded)
        ]
    );
    queue.assert_nothing_enqueued(queue.pool()).await;
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_drain_keeps_fifo_within_a_group() {
    let queue = queue().await;
    let worker = plain_worker(&queue);
    // first a job that fails once (an hour's backoff), then one due in an hour, then one
    // due now, then one due in half an hour: all in group g
    let first = queue
        .enqueue(queue.pool(), Stubborn { fails: 1 })
        .group("g")
        .await
        .unwrap();
    let second = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 2 })
        .group("g")
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let third = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 3 })
        .group("g")
        .await
        .unwrap();
    let fourth = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 4 })
        .group("g")
        .delay(Duration::from_secs(1800))
        .await
        .unwrap();
    // another group's job due now runs meanwhile
    let other = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 5 })
        .group("h")
        .await
        .unwrap();
    let drained = bounded(worker.drain(queue.pool(), WorkOptions::new().scheduled().retries()))
        .await
        .unwrap();
    let in_g: Vec<_> = drained
        .worked
        .iter()
        .filter(|job| job.group == "g")
        .map(|job| (job.id, job.attempt))
        .collect();
    assert_eq!(
        in_g,
        [(first, 1), (first, 2), (second, 1), (third, 1), (fourth, 1)]
    );
    assert!(drained.worked.iter().any(|job| job.id == other));
    assert_eq!(drained.worked.len(), 6);
    queue.assert_nothing_enqueued(queue.pool()).await;
    queue.cleanup().await.unwrap();
}

#[tokio::test]
async fn make_due_runs_one_job_now() {
    let queue = queue().await;
    let worker = plain_worker(&queue);
    let later = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 1 })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let also_later = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 2 })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let retrying = queue
        .enqueue(queue.pool(), Stubborn { fails: 1 })
        .await
        .unwrap();
    assert_eq!(worker.work_until_idle(queue.pool()).await.unwrap().len(), 1);

    let mut tx = queue.pool().begin().await.unwrap();
    assert!(queue.make_due(&mut *tx, later).await.unwrap());
    assert!(queue.make_due(&mut *tx, retrying).await.unwrap());
    let worked = worker.work_until_idle(&mut *tx).await.unwrap();
    let mut ran: Vec<_> = worked.iter().map(|job| (job.id, job.attempt)).collect();
    ran.sort();
    assert_eq!(ran, [(later, 1), (retrying, 2)]);
    assert!(
        worked
            .iter()
            .all(|job| job.outcome == WorkOutcome::Succeeded)
    );
    tx.commit().await.unwrap();
    assert!(matches!(
        queue.client().job(also_later).await.unwrap().unwrap().state,
        JobState::Scheduled { .. }
    ));
    queue.cleanup().await.unwrap();
}

/// A drain inside the test's transaction locks only the groups it makes due: a scheduled
/// job it leaves waiting (retries only) can still be cancelled from another connection
/// while that transaction is open.
#[tokio::test]
async fn a_drain_in_a_transaction_locks_only_what_it_makes_due() {
    let queue = queue().await;
    let worker = worker(&queue);
    let id = queue
        .enqueue(queue.pool(), SendWelcomeEmail { user_id: 9 })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let mut tx = queue.pool().begin().await.unwrap();
    let drained = worker
        .drain(&mut *tx, WorkOptions::new().retries())
        .await
        .unwrap();
    assert!(drained.worked.is_empty(), "{drained:?}");
    let cancelled = tokio::time::timeout(
        Duration::from_secs(10),
        queue.client().cancel(id).reason("not needed"),
    )
    .await
    .expect("the cancel waited for the test's transaction: the drain locked the job's group")
    .unwrap();
    assert_eq!(cancelled, harel_jobs::CancelOutcome::Cancelled);
    tx.rollback().await.unwrap();
    queue.cleanup().await.unwrap();
}

/// A job with more dependents than one settle resolves (1,000, ADR 0037): the test worker
/// resolves the rest as the pool's housekeeping would, when nothing else is due, in the
/// test's own transaction, so a drain runs every one of them.
#[tokio::test]
async fn a_drain_runs_every_dependent_of_a_job_with_thousands() {
    let queue = queue().await;
    let mut tx = queue.pool().begin().await.unwrap();
    let parent = queue
        .enqueue(&mut *tx, SendWelcomeEmail { user_id: 0 })
        .await
        .unwrap();
    let mut batch = queue.client().batch();
    for user_id in 1..=1_500 {
        batch
            .push_with(
                SendWelcomeEmail { user_id },
                &harel_jobs::EnqueueOptions::new().after([parent]),
            )
            .unwrap();
    }
    batch.enqueue(&mut *tx).await.unwrap();
    let worker = plain_worker(&queue);
    let drained = bounded(worker.drain(&mut *tx, WorkOptions::new().max_jobs(2_000)))
        .await
        .unwrap();
    assert_eq!(drained.worked.len(), 1_501);
    assert!(!drained.stopped_at_bound);
    tx.rollback().await.unwrap();
    queue.cleanup().await.unwrap();
}

/// A shard of the export below.
#[job]
async fn export_shard(_ctx: JobContext<()>, n: u32) -> JobResult {
    let _ = n;
    Ok(())
}

/// The guide's batch callback (docs/guide/workflows.md, "A batch with a callback"), as
/// written there.
#[job]
async fn export_done(ctx: JobContext<()>, export: i64) -> JobResult {
    let task = ctx.workflow().await?.expect("a workflow's task");
    let counts = task.parents.unwrap_or_default();
    println!(
        "export {export}, batch {}: {} completed, {} dead, {} cancelled",
        task.workflow, counts.completed, counts.dead, counts.cancelled
    );
    Ok(())
}

/// What the callback below read, for the test to check.
#[derive(Default)]
struct Read(std::sync::Mutex<Option<(String, u32, u32, u32)>>);

/// A shard of the export whose callback keeps what it read.
#[job]
async fn read_shard(_ctx: JobContext<Arc<Read>>, n: u32) -> JobResult {
    let _ = n;
    Ok(())
}

/// The same callback, keeping what it read.
#[job]
async fn export_read(ctx: JobContext<Arc<Read>>) -> JobResult {
    let task = ctx.workflow().await?.expect("a workflow's task");
    let counts = task.parents.unwrap_or_default();
    *ctx.state().0.lock().unwrap() =
        Some((task.task, counts.completed, counts.dead, counts.cancelled));
    Ok(())
}

/// Issue 42, item 9: under a test worker inside the test's transaction, a task reads its
/// workflow (`JobContext::workflow`) as under a pool: the guide's callback completes
/// (before: it read `None`, the claim being the transaction's, and panicked into a dead
/// letter), and reads its batch's counts. On the pool too.
#[tokio::test]
async fn a_callback_reads_its_workflow_inside_the_tests_transaction() {
    let queue = queue().await;
    let worker = TestWorker::new(
        queue
            .worker(())
            .register::<ExportShard>()
            .register::<ExportDone>(),
    )
    .unwrap();
    for inside in [true, false] {
        let mut tx = queue.pool().begin().await.unwrap();
        let mut export = queue.client().workflow("export");
        for n in 0..3 {
            export
                .task(
                    format!("shard-{n}"),
                    ExportShard { n },
                    &harel_jobs::EnqueueOptions::new(),
                )
                .unwrap();
        }
        export
            .callback(
                "done",
                ExportDone { export: 7 },
                &harel_jobs::EnqueueOptions::new(),
            )
            .unwrap();
        export.enqueue(&mut *tx).await.unwrap();
        if !inside {
            tx.commit().await.unwrap();
            tx = queue.pool().begin().await.unwrap();
        }
        let worked = if inside {
            worker.work_until_idle(&mut *tx).await.unwrap()
        } else {
            worker.work_until_idle(queue.pool()).await.unwrap()
        };
        assert_eq!(worked.len(), 4);
        assert!(
            worked
                .iter()
                .all(|job| job.outcome == WorkOutcome::Succeeded),
            "{worked:?}"
        );
        assert_eq!(worked[3].kind, "export_done");
        tx.rollback().await.unwrap();
    }

    // and it reads the counts there
    let read = Arc::new(Read::default());
    let worker = TestWorker::new(
        queue
            .worker(Arc::clone(&read))
            .register::<ReadShard>()
            .register::<ExportRead>(),
    )
    .unwrap();
    let mut tx = queue.pool().begin().await.unwrap();
    let mut export = queue.client().workflow("export");
    for n in 0..3 {
        export
            .task(
                format!("shard-{n}"),
                ReadShard { n },
                &harel_jobs::EnqueueOptions::new(),
            )
            .unwrap();
    }
    export
        .callback("read", ExportRead {}, &harel_jobs::EnqueueOptions::new())
        .unwrap();
    export.enqueue(&mut *tx).await.unwrap();
    let worked = worker.work_until_idle(&mut *tx).await.unwrap();
    assert!(
        worked
            .iter()
            .all(|job| job.outcome == WorkOutcome::Succeeded)
    );
    assert_eq!(
        read.0.lock().unwrap().clone(),
        Some(("read".to_owned(), 3, 0, 0))
    );
    tx.rollback().await.unwrap();
    queue.cleanup().await.unwrap();
}
