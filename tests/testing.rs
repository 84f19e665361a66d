//! `harel_jobs::testing`: a fresh queue per test, assertions on what was enqueued (inside
//! the test's own transaction too), and jobs run in-process through the pool's own code.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use harel_jobs::testing::{TestError, TestSchema, TestWorker, WorkOutcome};
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
