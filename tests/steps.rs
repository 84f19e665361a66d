//! Durable steps (`JobContext::step`) against a real PostgreSQL: a step's work runs once
//! across attempts and across a worker's crash, only the lease holder records, the limits,
//! how long steps are kept, and who may call the step functions.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::transport::ClaimRequest;
use harel_jobs::{
    Backoff, Client, JobContext, JobError, JobResult, MAX_STEP_RESULT_BYTES, Schema, StepError,
    Worker, job,
};
use harel_jobs_suite::{
    PRODUCER_GRANTS, SuiteSchema, TestRole, WORKER_GRANTS, database_url, pool_with,
};
use sqlx::{AssertSqlSafe, PgPool};

/// What the handlers of a test share.
#[derive(Default)]
struct Ledger {
    /// Times a step's work ran.
    work_ran: AtomicUsize,
    /// What each attempt's step returned, with the attempt.
    seen: Mutex<Vec<(u32, String)>>,
    /// The step errors handlers met, as text.
    errors: Mutex<Vec<String>>,
}

async fn wait_for(what: &str, limit: Duration, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn steps_of(q: &SuiteSchema, job: i64) -> Vec<(String, String)> {
    sqlx::query_as(
        q.sql("SELECT name, result::text FROM @schema@.job_steps WHERE job_id = $1 ORDER BY name"),
    )
    .bind(job)
    .fetch_all(&q.pool)
    .await
    .unwrap()
}

async fn maintain(q: &SuiteSchema) {
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
        .execute(&q.pool)
        .await
        .unwrap();
}

/// Records a step, then fails its first attempt.
#[job(max_attempts = 3)]
async fn charge_then_fail(ctx: JobContext<Arc<Ledger>>, order: i64) -> JobResult {
    let attempt = ctx.attempt();
    let ledger = ctx.state_arc();
    let charge: String = ctx
        .step("charge", async {
            ledger.work_ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, JobError>(format!("ch_{order}_attempt_{attempt}"))
        })
        .await?;
    ledger.seen.lock().unwrap().push((attempt, charge));
    if attempt == 1 {
        return Err(JobError::retry("the receipt mail failed"));
    }
    Ok(())
}

/// The work of a step runs in the first attempt, which records its result and then fails;
/// the second attempt gets the recorded result without running the work (a `#[job]`
/// handler, under a worker pool).
#[tokio::test]
async fn a_steps_work_runs_once_across_attempts() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let id = client
        .enqueue(&q.pool, ChargeThenFail { order: 7 })
        .await
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let handle = Worker::builder(q.pool.clone(), Arc::clone(&ledger))
        .register::<ChargeThenFail>()
        .schema(q.schema.clone())
        .backoff(Backoff::fixed(Duration::from_millis(10)))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    wait_for("two attempts", Duration::from_secs(20), async || {
        ledger.seen.lock().unwrap().len() >= 2
    })
    .await;
    handle.shutdown().await.unwrap();

    let seen = ledger.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (1, "ch_7_attempt_1".to_owned()),
            (2, "ch_7_attempt_1".to_owned())
        ],
        "the second attempt got the first attempt's result"
    );
    assert_eq!(
        ledger.work_ran.load(Ordering::SeqCst),
        1,
        "the work ran once"
    );
    assert_eq!(
        steps_of(&q, id.get()).await,
        [("charge".to_owned(), "\"ch_7_attempt_1\"".to_owned())]
    );
}

/// The step's work of the crash test: records its run in a table (the side effect), and
/// returns which process ran it.
#[job]
async fn charge_and_hang(ctx: JobContext<(PgPool, Schema, String)>, order: i64) -> JobResult {
    let (pool, schema, me) = ctx.state();
    let table = format!("\"{}\".side_effects", schema.name());
    let charged_by: String = ctx
        .step("charge", async {
            sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO {table} (job_id, by) VALUES ($1, $2)"
            )))
            .bind(order)
            .bind(me.as_str())
            .execute(pool)
            .await?;
            Ok::<_, JobError>(me.clone())
        })
        .await?;
    if me == "child" {
        // the step is recorded: wait here to be killed
        std::future::pending::<()>().await;
    }
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (job_id, by) VALUES ($1, $2)"
    )))
    .bind(-order)
    .bind(format!("{me} saw {charged_by}"))
    .execute(pool)
    .await?;
    Ok(())
}

const CRASH_CHILD: &str = "HAREL_STEPS_CRASH_CHILD_SCHEMA";

/// Not a test of its own: the worker process that `a_durable_step_survives_a_worker_crash`
/// starts (this test binary again, with [`CRASH_CHILD`] set) and kills. Without the
/// variable it returns at once.
#[tokio::test]
async fn crash_child_process() {
    let Ok(schema) = std::env::var(CRASH_CHILD) else {
        return;
    };
    let schema = Schema::new(&schema).unwrap();
    let pool = pool_with(&database_url(), 4).await;
    let state = (pool.clone(), schema.clone(), "child".to_owned());
    let _handle = Worker::builder(pool, state)
        .register::<ChargeAndHang>()
        .schema(schema)
        .lease(Duration::from_secs(1))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    std::future::pending::<()>().await;
}

/// Kills the child process when dropped (the test failed before it did).
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A worker process records a step and is killed (SIGKILL) before its job ends; once its
/// lease lapses, another worker claims the job, and its step returns the recorded result:
/// the step's work (its side effect) ran once.
#[tokio::test]
async fn a_durable_step_survives_a_worker_crash_and_is_not_run_again() {
    let q = SuiteSchema::new().await;
    sqlx::raw_sql(
        q.sql("CREATE TABLE @schema@.side_effects (job_id BIGINT NOT NULL, by TEXT NOT NULL)"),
    )
    .execute(&q.pool)
    .await
    .unwrap();
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let id = client
        .enqueue(&q.pool, ChargeAndHang { order: 3 })
        .await
        .unwrap();

    let mut child = Child(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["crash_child_process", "--exact", "--test-threads=1"])
            .env(CRASH_CHILD, q.schema.name())
            .env("DATABASE_URL", database_url())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(
        "the child to record its step",
        Duration::from_secs(60),
        async || !steps_of(&q, id.get()).await.is_empty(),
    )
    .await;
    child.0.kill().unwrap(); // SIGKILL: no shutdown, no settle, no lease given back
    child.0.wait().unwrap();

    let pool = q.pool.clone();
    let handle = Worker::builder(
        q.pool.clone(),
        (pool, q.schema.clone(), "parent".to_owned()),
    )
    .register::<ChargeAndHang>()
    .schema(q.schema.clone())
    .poll_interval(Duration::from_millis(50))
    .build()
    .unwrap()
    .start();
    let effects = async || -> Vec<(i64, String)> {
        sqlx::query_as(q.sql("SELECT job_id, by FROM @schema@.side_effects ORDER BY job_id"))
            .fetch_all(&q.pool)
            .await
            .unwrap()
    };
    wait_for(
        "the job to run again",
        Duration::from_secs(20),
        async || effects().await.len() >= 2,
    )
    .await;
    handle.shutdown().await.unwrap();
    assert_eq!(
        effects().await,
        [(-3, "parent saw child".to_owned()), (3, "child".to_owned())],
        "the parent's attempt got the child's recorded result, and did not charge again"
    );
    let job = client.job(id).await.unwrap();
    assert!(job.is_none(), "completed: {job:?}");
}

/// Records step "a", loses its lease (another worker takes the job over), then tries to
/// record step "b".
#[job]
async fn loses_its_lease(ctx: JobContext<(Arc<Ledger>, SuiteHandle)>, n: i64) -> JobResult {
    let (ledger, suite) = ctx.state();
    let _: i64 = ctx.step("a", async { Ok::<_, JobError>(n) }).await?;
    // another worker takes the job over: what a claim of the lapsed lease writes, a new
    // token (done here at once, so that this pool's own fetcher cannot take it first; made
    // here, not by gen_random_uuid(): Citus takes no volatile function in an UPDATE)
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{}\".transport_groups SET locked_by = $2 WHERE group_id = $1",
        suite.schema.name()
    )))
    .bind(ctx.group())
    .bind(uuid::Uuid::new_v4())
    .execute(&suite.pool)
    .await?;
    let recorded = ctx
        .step("b", async {
            ledger.work_ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, StepError>(n + 1)
        })
        .await;
    match recorded {
        Err(error @ StepError::LeaseLost { .. }) => {
            ledger.errors.lock().unwrap().push(error.to_string());
        }
        other => ledger.errors.lock().unwrap().push(format!("{other:?}")),
    }
    Ok(())
}

/// What a handler needs to reach the suite's schema.
#[derive(Clone)]
struct SuiteHandle {
    pool: PgPool,
    schema: Schema,
}

/// A worker whose lease lapsed and was claimed again records no step: `step` fails with
/// `StepError::LeaseLost` and nothing is stored; and the stale token can no longer read
/// the job's steps.
#[tokio::test]
async fn a_stale_lease_cannot_record_a_step() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let id = client
        .enqueue(&q.pool, LosesItsLease { n: 41 })
        .await
        .unwrap();
    let ledger = Arc::new(Ledger::default());
    let suite = SuiteHandle {
        pool: q.pool.clone(),
        schema: q.schema.clone(),
    };
    let handle = Worker::builder(q.pool.clone(), (Arc::clone(&ledger), suite))
        .register::<LosesItsLease>()
        .schema(q.schema.clone())
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    wait_for("the handler", Duration::from_secs(20), async || {
        !ledger.errors.lock().unwrap().is_empty()
    })
    .await;
    handle.shutdown().await.unwrap();
    let errors = ledger.errors.lock().unwrap().clone();
    assert_eq!(
        errors,
        ["the job's lease is lost: step \"b\" was not recorded"],
        "a typed LeaseLost"
    );
    assert_eq!(ledger.work_ran.load(Ordering::SeqCst), 1, "its work ran");
    assert_eq!(
        steps_of(&q, id.get()).await,
        [("a".to_owned(), "41".to_owned())],
        "and b was not stored"
    );
    // what an operator sees of them: names and sizes, not results
    let listed = client.job_steps(id).await.unwrap();
    assert_eq!(
        listed
            .steps
            .iter()
            .map(|s| (s.name.as_str(), s.bytes))
            .collect::<Vec<_>>(),
        [("a", 2)]
    );
    assert!(!listed.more);

    // the same at the function: the old token neither records nor reads
    let (group, old): (String, uuid::Uuid) = sqlx::query_as(q.sql(
        "SELECT group_id, gen_random_uuid() FROM @schema@.transport_groups WHERE head_seq = $1",
    ))
    .bind(id.get())
    .fetch_one(&q.pool)
    .await
    .unwrap();
    let recorded: (String, Option<String>) =
        sqlx::query_as(q.sql("SELECT * FROM @schema@.harel_record_step($1, $2, $3, 'c', '1')"))
            .bind(&group)
            .bind(id.get())
            .bind(old)
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert_eq!(recorded, ("lost".to_owned(), None));
    let read: (bool, Option<Vec<String>>) =
        sqlx::query_as(q.sql("SELECT held, names FROM @schema@.harel_steps($1, $2, $3)"))
            .bind(&group)
            .bind(id.get())
            .bind(old)
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert_eq!(read, (false, None));
    assert_eq!(steps_of(&q, id.get()).await.len(), 1);
}

/// Tries each limit in turn.
#[job]
async fn over_the_limits(ctx: JobContext<Arc<Ledger>>) -> JobResult {
    let ledger = ctx.state_arc();
    let mut errors = Vec::new();
    let mut attempt = async |name: String, bytes: usize| {
        let outcome = ctx
            .step(&name, async {
                ledger.work_ran.fetch_add(1, Ordering::SeqCst);
                Ok::<_, StepError>("x".repeat(bytes))
            })
            .await;
        errors.push(match outcome {
            Ok(_) => "ok".to_owned(),
            Err(StepError::InvalidName { bytes }) => format!("invalid name {bytes}"),
            Err(StepError::ResultTooLarge { bytes, .. }) => format!("too large {bytes}"),
            Err(StepError::JobFull { steps, .. }) => format!("full at {steps}"),
            Err(other) => format!("{other:?}"),
        });
    };
    attempt(String::new(), 1).await;
    attempt("n".repeat(256), 1).await;
    attempt("big".to_owned(), MAX_STEP_RESULT_BYTES - 1).await; // 2 bytes of quotes more
    attempt("fits".to_owned(), MAX_STEP_RESULT_BYTES - 2).await;
    ledger.errors.lock().unwrap().extend(errors);
    Ok(())
}

/// A job already holding 1,000 steps.
#[job]
async fn full_job(ctx: JobContext<Arc<Ledger>>) -> JobResult {
    let ledger = ctx.state_arc();
    let outcome = ctx
        .step("one more", async {
            ledger.work_ran.fetch_add(1, Ordering::SeqCst);
            Ok::<_, StepError>(1)
        })
        .await;
    ledger.errors.lock().unwrap().push(match outcome {
        Err(StepError::JobFull { steps, .. }) => format!("full at {steps}"),
        other => format!("{other:?}"),
    });
    Ok(())
}

/// Names of 1 to 255 bytes, results of at most 1 MiB of JSON, at most 1,000 steps and 8 MiB
/// a job: each refused with its typed error, nothing stored, the work not run where the
/// refusal can be known before; and the functions refuse the same for callers that bypass
/// the crate.
#[tokio::test]
async fn limits_are_refused_with_the_typed_error_and_nothing_stored() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let over = client.enqueue(&q.pool, OverTheLimits {}).await.unwrap();
    let full = client.enqueue(&q.pool, FullJob {}).await.unwrap();
    // the full job's 1,000 steps, written as its earlier attempts would have
    sqlx::query(q.sql(
        "INSERT INTO @schema@.job_steps (job_id, name, result, bytes)
         SELECT $1, 's' || n, '0', 1 FROM generate_series(1, 1000) AS n",
    ))
    .bind(full.get())
    .execute(&q.pool)
    .await
    .unwrap();
    let ledger = Arc::new(Ledger::default());
    let handle = Worker::builder(q.pool.clone(), Arc::clone(&ledger))
        .register::<OverTheLimits>()
        .register::<FullJob>()
        .schema(q.schema.clone())
        .concurrency(1)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    wait_for("both jobs", Duration::from_secs(20), async || {
        ledger.errors.lock().unwrap().len() >= 5
    })
    .await;
    handle.shutdown().await.unwrap();
    let mut errors = ledger.errors.lock().unwrap().clone();
    errors.sort();
    assert_eq!(
        errors,
        [
            "full at 1000".to_owned(),
            "invalid name 0".to_owned(),
            "invalid name 256".to_owned(),
            "ok".to_owned(),
            format!("too large {}", MAX_STEP_RESULT_BYTES + 1),
        ]
    );
    assert_eq!(
        ledger.work_ran.load(Ordering::SeqCst),
        2,
        "the work ran for the result too large and the one that fits, not before a refusal"
    );
    let names: Vec<String> = steps_of(&q, over.get())
        .await
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["fits"], "nothing stored but what fits");
    assert_eq!(steps_of(&q, full.get()).await.len(), 1000);

    // the functions, called as a lease holder that bypasses the crate's checks
    let id = client.enqueue(&q.pool, FullJob {}).await.unwrap();
    let message = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message.lease.id, id);
    let record = async |name: String, result: String| {
        sqlx::query_as::<_, (String,)>(
            q.sql("SELECT outcome FROM @schema@.harel_record_step($1, $2, $3, $4, $5)"),
        )
        .bind(&message.lease.group)
        .bind(id.get())
        .bind(message.lease.token.as_uuid())
        .bind(name)
        .bind(result)
        .fetch_one(&q.pool)
        .await
        .map(|(outcome,)| outcome)
        .map_err(|e| {
            harel_jobs::DatabaseError::from(e)
                .code()
                .unwrap_or_default()
        })
    };
    let mib = MAX_STEP_RESULT_BYTES;
    let string = |bytes: usize| format!("\"{}\"", "x".repeat(bytes - 2));
    assert_eq!(record(String::new(), "1".into()).await, Err("22023".into()));
    assert_eq!(
        record("n".repeat(256), "1".into()).await,
        Err("22023".into())
    );
    assert_eq!(
        record("big".into(), string(mib + 1)).await,
        Err("22023".into())
    );
    assert_eq!(
        record("bad".into(), "{not json".into()).await,
        Err("22P02".into())
    );
    for n in 0..7 {
        assert_eq!(
            record(format!("m{n}"), string(mib)).await,
            Ok("recorded".into())
        );
    }
    // 7 MiB recorded: one more MiB fits exactly, then not one byte more
    assert_eq!(
        record("m7".into(), string(mib)).await,
        Ok("recorded".into())
    );
    assert_eq!(record("m8".into(), "1".into()).await, Ok("full".into()));
    assert_eq!(record("m0".into(), "2".into()).await, Ok("exists".into()));
    assert_eq!(steps_of(&q, id.get()).await.len(), 8);
}

/// Records one step, then ends as its name says.
#[job(retain = "1h", max_attempts = 1)]
async fn kept(ctx: JobContext<()>, how: String) -> JobResult {
    let _: u8 = ctx.step("only", async { Ok::<_, JobError>(1) }).await?;
    match how.as_str() {
        "dead" => Err(JobError::permanent("dead on purpose")),
        "waits" => Err(JobError::snooze(Duration::from_secs(3600))),
        _ => Ok(()),
    }
}

/// The same without retention.
#[job]
async fn not_kept(ctx: JobContext<()>) -> JobResult {
    let _: u8 = ctx.step("only", async { Ok::<_, JobError>(1) }).await?;
    Ok(())
}

/// Steps are kept while their job is anywhere (waiting for its next attempt, retained in
/// the history, in the dead letters) and deleted by housekeeping once it is gone; the
/// sweep works 1,000 step rows a call.
#[tokio::test]
async fn steps_are_kept_with_their_job_and_deleted_by_maintain_after_it_is_gone() {
    let q = SuiteSchema::new().await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let retained = client
        .enqueue(&q.pool, Kept { how: "ok".into() })
        .await
        .unwrap();
    let dead = client
        .enqueue(&q.pool, Kept { how: "dead".into() })
        .await
        .unwrap();
    let waits = client
        .enqueue(
            &q.pool,
            Kept {
                how: "waits".into(),
            },
        )
        .await
        .unwrap();
    let gone = client.enqueue(&q.pool, NotKept {}).await.unwrap();
    // the worker's own housekeeping waits: this test calls it when it means to
    let mut election = q.pool.begin().await.unwrap();
    sqlx::query(q.sql("SELECT 1 FROM @schema@.elections WHERE name = 'housekeeping' FOR UPDATE"))
        .execute(&mut *election)
        .await
        .unwrap();
    let handle = Worker::builder(q.pool.clone(), ())
        .register::<Kept>()
        .register::<NotKept>()
        .schema(q.schema.clone())
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    let count_steps = async || q.count("job_steps").await;
    wait_for("four steps", Duration::from_secs(20), async || {
        count_steps().await == 4
            && q.count("job_history").await == 1
            && q.count("dead_letters").await == 1
            && client.job(gone).await.unwrap().is_none()
    })
    .await;
    handle.shutdown().await.unwrap();
    election.rollback().await.unwrap();

    maintain(&q).await;
    for kept in [retained, dead, waits] {
        assert_eq!(steps_of(&q, kept.get()).await.len(), 1, "{kept:?} kept");
    }
    assert!(steps_of(&q, gone.get()).await.is_empty(), "gone: deleted");

    // the retained job's history ends, the dead letter is deleted: their steps go
    sqlx::query(q.sql("UPDATE @schema@.job_history SET keep_until = now() - interval '1 second'"))
        .execute(&q.pool)
        .await
        .unwrap();
    client.dead_letters().delete(dead).await.unwrap();
    maintain(&q).await;
    assert!(steps_of(&q, retained.get()).await.is_empty());
    assert!(steps_of(&q, dead.get()).await.is_empty());
    assert_eq!(steps_of(&q, waits.get()).await.len(), 1, "still queued");

    // bounded: 2,500 rows of 25 jobs that are gone take three calls
    sqlx::query(q.sql(
        "INSERT INTO @schema@.job_steps (job_id, name, result, bytes)
         SELECT 1000000 + n / 100, 's' || n, '0', 1 FROM generate_series(0, 2499) AS n",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let mut left = Vec::new();
    for _ in 0..4 {
        maintain(&q).await;
        left.push(count_steps().await);
    }
    assert_eq!(left[..3], [1501, 501, 1], "1,000 rows a call: {left:?}");
    assert_eq!(steps_of(&q, waits.get()).await.len(), 1, "still queued");
}

/// Only a worker's grants reach the step functions, and through them only the leases it
/// holds; no role reads or writes `job_steps` itself.
#[tokio::test]
async fn only_the_lease_holder_reads_and_records_and_no_role_touches_the_table() {
    let q = SuiteSchema::new().await;
    let s = format!("\"{}\"", q.schema.name());
    let producer_role = TestRole::with_grants(&q, PRODUCER_GRANTS).await;
    let worker_role = TestRole::with_grants(&q, WORKER_GRANTS).await;
    let producer = pool_with(&producer_role.url, 1).await;
    let worker = pool_with(&worker_role.url, 1).await;
    let sqlstate = async |pool: &PgPool, sql: String| match sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(pool)
        .await
    {
        Ok(_) => None,
        Err(error) => harel_jobs::DatabaseError::from(error).code(),
    };
    let steps = format!("SELECT * FROM {s}.harel_steps('g', 1, gen_random_uuid())");
    let record =
        format!("SELECT * FROM {s}.harel_record_step('g', 1, gen_random_uuid(), 'n', '1')");
    for sql in [&steps, &record] {
        assert_eq!(
            sqlstate(&producer, sql.clone()).await.as_deref(),
            Some("42501"),
            "{sql}"
        );
        assert_eq!(sqlstate(&worker, sql.clone()).await, None, "{sql}");
    }
    for sql in [
        format!("SELECT * FROM {s}.job_steps"),
        format!("INSERT INTO {s}.job_steps VALUES (1, 'n', '1', 1, now())"),
        format!("DELETE FROM {s}.job_steps"),
    ] {
        for pool in [&producer, &worker] {
            assert_eq!(
                sqlstate(pool, sql.clone()).await.as_deref(),
                Some("42501"),
                "{sql}"
            );
        }
    }

    // a job that holds a step, leased by someone else: the worker role's guesses read and
    // record nothing
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let id = client.enqueue(&q.pool, NotKept {}).await.unwrap();
    let message = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .unwrap();
    let as_holder: (String,) = sqlx::query_as(
        q.sql("SELECT outcome FROM @schema@.harel_record_step($1, $2, $3, 'secret', '\"s3cr3t\"')"),
    )
    .bind(&message.lease.group)
    .bind(id.get())
    .bind(message.lease.token.as_uuid())
    .fetch_one(&worker)
    .await
    .unwrap();
    assert_eq!(as_holder.0, "recorded");
    let guessed: (bool, Option<Vec<String>>) = sqlx::query_as(
        q.sql("SELECT held, results FROM @schema@.harel_steps($1, $2, gen_random_uuid())"),
    )
    .bind(&message.lease.group)
    .bind(id.get())
    .fetch_one(&worker)
    .await
    .unwrap();
    assert_eq!(guessed, (false, None));
    let holder: (bool, Option<Vec<String>>) =
        sqlx::query_as(q.sql("SELECT held, results FROM @schema@.harel_steps($1, $2, $3)"))
            .bind(&message.lease.group)
            .bind(id.get())
            .bind(message.lease.token.as_uuid())
            .fetch_one(&worker)
            .await
            .unwrap();
    assert_eq!(holder, (true, Some(vec!["\"s3cr3t\"".to_owned()])));
    producer.close().await;
    worker.close().await;
}
