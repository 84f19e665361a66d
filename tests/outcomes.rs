//! The worker pool's outcome path when the database cannot take an outcome: error texts
//! PostgreSQL cannot store, delays it cannot represent, batches that run into a role's
//! `statement_timeout`, and a batch whose reply is lost after it committed. None of them may
//! stop the pool from writing the other outcomes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::transport::OutgoingMessage;
use harel_jobs::{
    Backoff, Client, Count, DeadLetterQuery, Handler, Job, JobContext, JobError, JobOptions,
    JobResult, Stats, Worker, WorkerBuilder,
};
use harel_jobs_suite::{SuiteSchema, TestRole, WORKER_GRANTS, pool_with};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::sync::watch;

/// What ran, and a gate [`Gated`] jobs wait at.
#[derive(Clone)]
struct Ran {
    keys: Arc<Mutex<Vec<String>>>,
    gate: Arc<watch::Sender<bool>>,
}

impl Default for Ran {
    fn default() -> Self {
        Self {
            keys: Arc::default(),
            gate: Arc::new(watch::channel(false).0),
        }
    }
}

impl Ran {
    fn push(&self, key: impl Into<String>) {
        self.keys.lock().unwrap().push(key.into());
    }
    fn count(&self) -> usize {
        self.keys.lock().unwrap().len()
    }
}

const QUICK_RETRIES: JobOptions = JobOptions::new()
    .max_attempts(2)
    .backoff(Backoff::fixed(Duration::from_millis(20)));

/// Succeeds, recording its key.
#[derive(Serialize, Deserialize)]
struct Good {
    key: String,
}

impl Job for Good {
    const KIND: &'static str = "good";
}

impl Handler<Ran> for Good {
    async fn handle(self, ctx: JobContext<Ran>) -> JobResult {
        ctx.state().push(self.key);
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
enum Mode {
    Fast,
}

/// Its payload names a mode; a mode that does not exist fails to decode, and serde's error
/// repeats the unknown name, whatever characters it holds.
#[derive(Serialize, Deserialize)]
struct Modal {
    mode: Mode,
}

impl Job for Modal {
    const KIND: &'static str = "modal";
}

impl Handler<Ran> for Modal {
    async fn handle(self, _: JobContext<Ran>) -> JobResult {
        Ok(())
    }
}

/// Fails with an error text holding a NUL character.
#[derive(Serialize, Deserialize)]
struct NulError;

impl Job for NulError {
    const KIND: &'static str = "nul_error";
    fn options() -> JobOptions {
        QUICK_RETRIES
    }
}

impl Handler<Ran> for NulError {
    async fn handle(self, _: JobContext<Ran>) -> JobResult {
        Err(JobError::retry("the device said \0 and stopped"))
    }
}

/// Snoozes for 200 years, longer than PostgreSQL's arithmetic the queue uses allows.
#[derive(Serialize, Deserialize)]
struct Sleepy;

impl Job for Sleepy {
    const KIND: &'static str = "sleepy";
}

impl Handler<Ran> for Sleepy {
    async fn handle(self, _: JobContext<Ran>) -> JobResult {
        Err(JobError::snooze(Duration::from_secs(200 * 365 * 24 * 3600)))
    }
}

/// Asks to be retried at once on its first attempt, then succeeds.
#[derive(Serialize, Deserialize)]
struct RetryNow;

impl Job for RetryNow {
    const KIND: &'static str = "retry_now";
}

impl Handler<Ran> for RetryNow {
    async fn handle(self, ctx: JobContext<Ran>) -> JobResult {
        ctx.state().push(format!("attempt {}", ctx.attempt()));
        if ctx.attempt() == 1 {
            return Err(JobError::retry_after(Duration::ZERO, "busy, try again now"));
        }
        Ok(())
    }
}

/// Waits at the gate, then fails for good: many of them end at once, in one batch.
#[derive(Serialize, Deserialize)]
struct Gated {
    key: String,
}

impl Job for Gated {
    const KIND: &'static str = "gated";
}

impl Handler<Ran> for Gated {
    async fn handle(self, ctx: JobContext<Ran>) -> JobResult {
        let _ = ctx.state().gate.subscribe().wait_for(|open| *open).await;
        ctx.state().push(self.key);
        Err(JobError::permanent("gave up"))
    }
}

fn builder(pool: PgPool, queue: &SuiteSchema, ran: &Ran) -> WorkerBuilder<Ran> {
    Worker::builder(pool, ran.clone())
        .schema(queue.schema.clone())
        .register::<Good>()
        .register::<Modal>()
        .register::<NulError>()
        .register::<Sleepy>()
        .register::<Gated>()
        .register::<RetryNow>()
        .poll_interval(Duration::from_millis(50))
}

async fn enqueue<J: Job>(queue: &SuiteSchema, job: J) {
    harel_jobs::Enqueue::new(job, &queue.pool)
        .schema(&queue.schema)
        .await
        .unwrap();
}

/// Waits until `done` holds, failing the test after `limit`.
async fn wait_for(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "{what}: not after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stats(queue: &SuiteSchema) -> Stats {
    Stats::fetch(&queue.pool, &queue.schema).await.unwrap()
}

#[tokio::test]
async fn error_texts_and_delays_the_database_cannot_take_never_stop_the_pool() {
    let queue = SuiteSchema::new().await;
    let ran = Ran::default();
    // a payload whose decode error repeats a NUL character, a handler error holding one,
    // a 200-year snooze; then ordinary jobs, which must all be acked
    let modal = OutgoingMessage::new("modal", "modal", r#"{"mode":"\u0000"}"#);
    queue.transport.publish(&queue.pool, &modal).await.unwrap();
    enqueue(&queue, NulError).await;
    enqueue(&queue, Sleepy).await;
    for n in 0..20 {
        enqueue(&queue, Good { key: n.to_string() }).await;
    }

    let handle = builder(queue.pool.clone(), &queue, &ran)
        .build()
        .unwrap()
        .start();
    // before the fix the completer retried the poisoned batch for ever: nothing was acked
    wait_for(
        "every good job and both dead letters",
        Duration::from_secs(30),
        async || {
            let stats = stats(&queue).await;
            ran.count() == 20
                && stats.dead_letters == Count::Exact(2)
                && stats.jobs == Count::Exact(1)
        },
    )
    .await;
    let worker = handle.shutdown().await.unwrap();
    assert_eq!(worker.succeeded, 20, "{worker:?}");
    assert_eq!((worker.dead_lettered, worker.snoozed), (2, 1), "{worker:?}");
    assert_eq!(worker.outcomes_dropped, 0, "{worker:?}");

    let letters = Client::with_schema(queue.pool.clone(), queue.schema.clone())
        .dead_letters()
        .list(&DeadLetterQuery::default())
        .await
        .unwrap();
    let error = |kind: &str| {
        letters
            .iter()
            .find(|l| l.kind == kind)
            .map(|l| l.last_error.clone())
            .unwrap()
    };
    assert!(
        error("modal").contains("unknown variant `\u{FFFD}`"),
        "{}",
        error("modal")
    );
    assert_eq!(
        error("nul_error"),
        "the device said \u{FFFD} and stopped (attempt 2 of 2)"
    );
    // the snooze was cut to the longest delay the queue takes: 100 years
    let years: f64 = sqlx::query_scalar(queue.sql(
        "SELECT extract(epoch FROM available_at - now())::float8 / (365.25 * 86400) \
         FROM @schema@.transport_groups",
    ))
    .fetch_one(&queue.pool)
    .await
    .unwrap();
    assert!((99.9..=100.0).contains(&years), "parked for {years} years");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_slower_than_the_roles_statement_timeout_is_split_until_it_lands() {
    const JOBS: usize = 12;
    let queue = SuiteSchema::new().await;
    let role = TestRole::with_grants(&queue, WORKER_GRANTS).await;
    // every dead letter costs 60 ms to insert; the worker's role allows 250 ms a statement:
    // a batch of 12 cannot land whole, batches of 3 can
    sqlx::raw_sql(queue.sql(
        "CREATE FUNCTION @schema@.slow_insert() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN PERFORM pg_sleep(0.06); RETURN NEW; END $$;
         CREATE TRIGGER slow_insert BEFORE INSERT ON @schema@.dead_letters
             FOR EACH ROW EXECUTE FUNCTION @schema@.slow_insert();",
    ))
    .execute(&queue.pool)
    .await
    .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ALTER ROLE \"{}\" SET statement_timeout = '250ms'",
        role.name
    )))
    .execute(&queue.pool)
    .await
    .unwrap();
    for n in 0..JOBS {
        enqueue(&queue, Gated { key: n.to_string() }).await;
    }

    let ran = Ran::default();
    let pool = pool_with(&role.url, 4).await;
    let handle = builder(pool, &queue, &ran)
        .concurrency(JOBS)
        .build()
        .unwrap()
        .start();
    wait_for("every job running", Duration::from_secs(20), async || {
        let claimed: i64 = sqlx::query_scalar(
            queue.sql("SELECT count(*) FROM @schema@.transport_groups WHERE locked_by IS NOT NULL"),
        )
        .fetch_one(&queue.pool)
        .await
        .unwrap();
        claimed == JOBS as i64
    })
    .await;
    ran.gate.send_replace(true);
    // before the fix the completer sent the whole batch again and again, timing out each time
    wait_for("every dead letter", Duration::from_secs(30), async || {
        stats(&queue).await.dead_letters == Count::Exact(JOBS as i64)
    })
    .await;
    let worker = handle.shutdown().await.unwrap();
    eprintln!("statement_timeout: {worker:?}");
    assert_eq!(worker.dead_lettered, JOBS as u64, "{worker:?}");
    assert!(
        worker.database_errors >= 1,
        "the batch was refused: {worker:?}"
    );
    assert_eq!(worker.outcomes_dropped, 0, "{worker:?}");
    assert_eq!(stats(&queue).await.jobs, Count::Exact(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_reply_is_lost_after_it_committed_is_answered_from_its_receipt() {
    let queue = SuiteSchema::new().await;
    // the ack's transaction takes 1.5 s (it deletes the job's group row, which holds the
    // job), the worker waits 1 s for a reply: it gives up on the connection, the transaction
    // commits anyway, the worker sends the batch again
    sqlx::raw_sql(queue.sql(
        "CREATE FUNCTION @schema@.slow_delete() RETURNS trigger LANGUAGE plpgsql AS
             $$ BEGIN PERFORM pg_sleep(1.5); RETURN OLD; END $$;
         CREATE TRIGGER slow_delete BEFORE DELETE ON @schema@.transport_groups
             FOR EACH ROW EXECUTE FUNCTION @schema@.slow_delete();",
    ))
    .execute(&queue.pool)
    .await
    .unwrap();
    enqueue(&queue, Good { key: "once".into() }).await;

    let ran = Ran::default();
    let handle = builder(queue.pool.clone(), &queue, &ran)
        .database_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
        .start();
    wait_for("the job acked", Duration::from_secs(30), async || {
        stats(&queue).await.jobs == Count::Exact(0)
    })
    .await;
    let worker = handle.shutdown().await.unwrap();
    eprintln!("reply lost: {worker:?}");
    assert_eq!(ran.count(), 1);
    assert!(
        worker.database_errors >= 1,
        "the reply was lost: {worker:?}"
    );
    // without the receipt the resend found its lease ended and reported it lost
    assert_eq!((worker.succeeded, worker.leases_lost), (1, 0), "{worker:?}");
}

/// The counters count what was decided, not what it looks like in the database: a retry
/// with no delay is a retry (it used to be counted as a release).
#[tokio::test]
async fn a_retry_without_delay_is_counted_as_a_retry() {
    let queue = SuiteSchema::new().await;
    let ran = Ran::default();
    enqueue(&queue, RetryNow).await;
    let handle = builder(queue.pool.clone(), &queue, &ran)
        .build()
        .unwrap()
        .start();
    wait_for("the job done", Duration::from_secs(20), async || {
        stats(&queue).await.jobs == Count::Exact(0)
    })
    .await;
    let worker = handle.shutdown().await.unwrap();
    assert_eq!(*ran.keys.lock().unwrap(), ["attempt 1", "attempt 2"]);
    assert_eq!(
        (worker.retried, worker.released, worker.succeeded),
        (1, 0, 1),
        "{worker:?}"
    );
}
