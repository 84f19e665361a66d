//! Workflows and batches with a callback (ADR 0033), against a real PostgreSQL: a DAG of
//! typed tasks enqueued in one round trip, shown with each task's state and parents,
//! cancelled and retried as a unit; a callback that reads its batch's counts; the
//! refusals.

use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, Lease};
use harel_jobs::{
    Client, EnqueueOptions, InvalidMessage, Job, JobContext, JobError, JobId, JobResult, JobState,
    PublishError, Unique, Worker, WorkflowId, WorkflowQuery, WorkflowState,
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

async fn states(client: &Client, id: WorkflowId) -> Vec<(String, String)> {
    client
        .workflow_tasks(id, 0, 100)
        .await
        .unwrap()
        .tasks
        .into_iter()
        .map(|t| (t.name, t.state))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// A diamond a → (b, c) → d: enqueued in one call, shown as a unit with each task's state
/// and parents, run in its order, completed as a unit.
#[tokio::test]
async fn a_workflow_runs_its_tasks_in_their_order_and_is_shown_as_a_unit() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut diamond = client.workflow("diamond");
    let none = EnqueueOptions::new();
    let a = diamond.task("a", Step { n: 1 }, &none).unwrap();
    let b = diamond
        .task("b", Step { n: 2 }, &EnqueueOptions::new().after([a]))
        .unwrap();
    let c = diamond
        .task("c", Step { n: 3 }, &EnqueueOptions::new().after([a]))
        .unwrap();
    diamond
        .task("d", Step { n: 4 }, &EnqueueOptions::new().after([b, c]))
        .unwrap();
    let enqueued = diamond.enqueue(&q.pool).await.unwrap();
    assert_eq!(enqueued.jobs.len(), 4);
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.name.as_str(), info.tasks, info.ended, info.state),
        ("diamond", 4, 0, WorkflowState::Running)
    );
    let page = client.workflow_tasks(enqueued.id, 0, 100).await.unwrap();
    assert_eq!(page.tasks[3].parents, ["b", "c"], "the graph's edges");
    assert_eq!(page.tasks[3].job, enqueued.jobs[3]);
    assert_eq!(
        states(&client, enqueued.id).await,
        pairs(&[
            ("a", "waiting"),
            ("b", "pending"),
            ("c", "pending"),
            ("d", "pending")
        ])
    );

    for expected in [vec![0], vec![1, 2], vec![3]] {
        let leases = claim_due(&q).await;
        let mut ids: Vec<JobId> = leases.iter().map(|l| l.id).collect();
        ids.sort();
        let want: Vec<JobId> = expected.iter().map(|&i| enqueued.jobs[i]).collect();
        assert_eq!(ids, want);
        for lease in &leases {
            assert!(q.transport.ack(&q.pool, lease).await.unwrap().is_applied());
        }
    }
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!((info.ended, info.failed), (4, 0));
    assert_eq!(info.state, WorkflowState::Completed);
    assert!(
        states(&client, enqueued.id)
            .await
            .iter()
            .all(|(_, s)| s == "completed"),
        "each task's outcome is kept, although its job is not"
    );
    let d = &client
        .workflow_tasks(enqueued.id, 3, 1)
        .await
        .unwrap()
        .tasks[0];
    let outcomes = d.parent_outcomes.expect("released");
    assert_eq!((outcomes.completed, outcomes.dead), (2, 0));
}

/// The workflows listed newest first, by name, a page at a time.
#[tokio::test]
async fn workflows_are_listed_newest_first_a_page_at_a_time() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut ids = Vec::new();
    for name in ["nightly", "checkout", "nightly"] {
        let mut w = client.workflow(name);
        w.task("only", Step { n: 0 }, &EnqueueOptions::new())
            .unwrap();
        ids.push(w.enqueue(&q.pool).await.unwrap().id);
    }
    let first = client
        .workflows(&WorkflowQuery::new().limit(2))
        .await
        .unwrap();
    assert_eq!(
        first.workflows.iter().map(|w| w.id).collect::<Vec<_>>(),
        [ids[2], ids[1]]
    );
    let rest = client
        .workflows(&WorkflowQuery::new().limit(2).before(first.next.unwrap()))
        .await
        .unwrap();
    assert_eq!(
        rest.workflows.iter().map(|w| w.id).collect::<Vec<_>>(),
        [ids[0]]
    );
    assert!(rest.next.is_none());
    let nightly = client
        .workflows(&WorkflowQuery::new().name("nightly"))
        .await
        .unwrap();
    assert_eq!(
        nightly.workflows.iter().map(|w| w.id).collect::<Vec<_>>(),
        [ids[2], ids[0]]
    );
}

/// A task that dies cancels the tasks after it; the workflow, failed, is retried as a
/// unit: the failed tasks are enqueued anew, waiting as they did, and it completes.
#[tokio::test]
async fn a_failed_workflow_is_retried_from_its_failed_tasks() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut chain = client.workflow("chain");
    let first = chain
        .task("first", Step { n: 1 }, &EnqueueOptions::new())
        .unwrap();
    let second = chain
        .task(
            "second",
            Step { n: 2 },
            &EnqueueOptions::new().after([first]),
        )
        .unwrap();
    chain
        .task(
            "third",
            Step { n: 3 },
            &EnqueueOptions::new().after([second]),
        )
        .unwrap();
    let enqueued = chain.enqueue(&q.pool).await.unwrap();

    let lease = claim_due(&q).await.remove(0);
    assert!(q.transport.ack(&q.pool, &lease).await.unwrap().is_applied());
    let lease = claim_due(&q).await.remove(0);
    assert_eq!(lease.id, enqueued.jobs[1]);
    assert!(
        q.transport
            .dead_letter(&q.pool, &lease, "broken")
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        states(&client, enqueued.id).await,
        pairs(&[
            ("first", "completed"),
            ("second", "dead"),
            ("third", "cancelled")
        ])
    );
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!((info.state, info.failed), (WorkflowState::Failed, 2));

    assert_eq!(client.retry_workflow(enqueued.id).await.unwrap(), 2);
    assert_eq!(
        client.dead_letters().count().await.unwrap(),
        0,
        "not retried twice"
    );
    assert_eq!(
        states(&client, enqueued.id).await,
        pairs(&[
            ("first", "completed"),
            ("second", "waiting"),
            ("third", "pending")
        ])
    );
    assert_eq!(client.retry_workflow(enqueued.id).await.unwrap(), 0);
    for _ in 0..2 {
        let leases = claim_due(&q).await;
        assert_eq!(leases.len(), 1);
        assert!(
            q.transport
                .ack(&q.pool, &leases[0])
                .await
                .unwrap()
                .is_applied()
        );
    }
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.ended, info.failed),
        (WorkflowState::Completed, 3, 0)
    );
}

/// A workflow cancelled as a unit: every task that had not ended is cancelled with the
/// operator's reason (the last first, so none gets its parent's reason instead); a
/// running one is asked to stop.
#[tokio::test]
async fn a_workflow_is_cancelled_as_a_unit() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut w = client.workflow("export");
    let a = w.task("a", Step { n: 1 }, &EnqueueOptions::new()).unwrap();
    w.task("b", Step { n: 2 }, &EnqueueOptions::new().after([a]))
        .unwrap();
    w.task("c", Step { n: 3 }, &EnqueueOptions::new()).unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let running = claim_due(&q).await;
    assert_eq!(running.len(), 2);

    let cancelled = client
        .cancel_workflow(enqueued.id)
        .reason("customer left")
        .await
        .unwrap();
    assert_eq!((cancelled.cancelled, cancelled.running_requested), (1, 2));
    match client.job(enqueued.jobs[1]).await.unwrap().unwrap().state {
        JobState::Cancelled { reason, .. } => assert_eq!(reason.as_deref(), Some("customer left")),
        other => panic!("expected cancelled, got {other:?}"),
    }
    for lease in &running {
        // whatever the handlers return, they end as cancelled
        assert!(q.transport.ack(&q.pool, lease).await.unwrap().is_applied());
    }
    // the operator's cancel reads as one, with the counts by outcome (issue 42, item 8)
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.ended, info.failed),
        (WorkflowState::Cancelled, 3, 3)
    );
    assert_eq!((info.completed, info.dead, info.cancelled), (0, 0, 3));
    assert!(info.cancelled_at.is_some());
    let listed = client.workflows(&WorkflowQuery::new()).await.unwrap();
    assert_eq!(listed.workflows[0].state.as_str(), "cancelled");
    assert_eq!(listed.workflows[0].cancelled, 3);
    // a retry takes the cancel back: it runs again
    assert_eq!(client.retry_workflow(enqueued.id).await.unwrap(), 3);
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.ended, info.cancelled_at),
        (WorkflowState::Running, 0, None)
    );
}

/// A workflow whose tasks ended before the operator's cancel is not marked cancelled (the
/// cancel did nothing), and one that failed reads failed, with its counts by outcome.
#[tokio::test]
async fn a_workflow_reads_its_counts_by_outcome_and_only_a_real_cancel_marks_it() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut w = client.workflow("done");
    let a = w.task("a", Step { n: 1 }, &EnqueueOptions::new()).unwrap();
    w.task("b", Step { n: 2 }, &EnqueueOptions::new().after([a]))
        .unwrap();
    w.task("c", Step { n: 3 }, &EnqueueOptions::new()).unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    for lease in claim_due(&q).await {
        if lease.id == enqueued.jobs[0] {
            assert!(
                q.transport
                    .dead_letter(&q.pool, &lease, "broken")
                    .await
                    .unwrap()
                    .is_applied()
            );
        } else {
            assert!(q.transport.ack(&q.pool, &lease).await.unwrap().is_applied());
        }
    }
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(info.state, WorkflowState::Failed);
    assert_eq!(
        (info.ended, info.completed, info.dead, info.cancelled),
        (3, 1, 1, 1)
    );
    let done = client.cancel_workflow(enqueued.id).await.unwrap();
    assert_eq!((done.cancelled, done.running_requested), (0, 0));
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.cancelled_at),
        (WorkflowState::Failed, None)
    );
}

/// What a workflow refuses before anything is sent.
#[tokio::test]
async fn a_workflow_refuses_what_would_not_be_its_own() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let outside = client.enqueue(&q.pool, Step { n: 0 }).await.unwrap();
    let mut w = client.workflow("w");
    w.task("a", Step { n: 1 }, &EnqueueOptions::new()).unwrap();
    assert!(matches!(
        w.task("a", Step { n: 2 }, &EnqueueOptions::new()),
        Err(PublishError::Invalid(InvalidMessage::DuplicateTaskName(name))) if name == "a"
    ));
    assert!(matches!(
        w.task("b", Step { n: 2 }, &EnqueueOptions::new().after([outside])),
        Err(PublishError::Invalid(InvalidMessage::ParentOutsideWorkflow))
    ));
    assert!(matches!(
        w.task(
            "c",
            Step { n: 3 },
            &EnqueueOptions::new().unique(Unique::new("k"))
        ),
        Err(PublishError::Invalid(InvalidMessage::UniqueJobInWorkflow))
    ));
    assert!(matches!(
        w.task("", Step { n: 4 }, &EnqueueOptions::new()),
        Err(PublishError::Invalid(
            InvalidMessage::InvalidTaskName { .. }
        ))
    ));
    assert!(matches!(
        client.workflow("empty").enqueue(&q.pool).await,
        Err(PublishError::Invalid(InvalidMessage::EmptyWorkflow))
    ));
    assert_eq!(w.len(), 1, "the refused tasks were not added");
}

/// What the callback handler writes: the counts it read.
struct Tally {
    pool: sqlx::PgPool,
    schema: String,
}

/// Shard 0 fails for good; the others complete.
#[harel_jobs::job]
async fn shard(_ctx: JobContext<Tally>, n: u32) -> JobResult {
    if n == 0 {
        return Err(JobError::permanent("shard 0 is corrupt"));
    }
    // a slow shard: a workflow of them is still running when the cancel comes, however
    // fast the machine drains
    if n >= SLOW_SHARD {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Shards numbered from here take 5 ms each.
const SLOW_SHARD: u32 = 1_000_000;

/// Records its batch's counts as its context reads them.
#[harel_jobs::job]
async fn zip(ctx: JobContext<Tally>) -> JobResult {
    let task = ctx.workflow().await?.expect("a workflow's task");
    let counts = task.parents.expect("released after its parents");
    let tally = ctx.state();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {}.tally (workflow, task, completed, dead, cancelled)
         VALUES ($1, $2, $3, $4, $5)",
        tally.schema
    )))
    .bind(task.workflow.get())
    .bind(&task.task)
    .bind(i64::from(counts.completed))
    .bind(i64::from(counts.dead))
    .bind(i64::from(counts.cancelled))
    .execute(&tally.pool)
    .await?;
    Ok(())
}

/// A batch with a callback, through the macro's types and a worker pool: the callback runs
/// once, after every job of the batch ended, whatever their outcomes, and reads the
/// batch's id and counts.
#[tokio::test]
async fn a_batch_callback_runs_once_after_every_job_and_reads_the_counts() {
    let q = SuiteSchema::new().await;
    sqlx::raw_sql(q.sql(
        "CREATE TABLE @schema@.tally (workflow BIGINT, task TEXT, completed BIGINT,
                                      dead BIGINT, cancelled BIGINT)",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let client = client(&q);
    let mut batch = client.workflow("export");
    for n in 0..6 {
        batch
            .task(format!("shard-{n}"), Shard { n }, &EnqueueOptions::new())
            .unwrap();
    }
    batch
        .callback("zip", Zip {}, &EnqueueOptions::new())
        .unwrap();
    let enqueued = batch.enqueue(&q.pool).await.unwrap();
    client.cancel(enqueued.jobs[5]).await.unwrap();

    let tally = Tally {
        pool: q.pool.clone(),
        schema: q.schema.to_string(),
    };
    let handle = Worker::builder(q.pool.clone(), tally)
        .schema(q.schema.clone())
        .register::<Shard>()
        .register::<Zip>()
        .concurrency(4)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while q.count("tally").await == 0 {
        assert!(std::time::Instant::now() < deadline, "the callback ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    handle.shutdown().await.unwrap();
    let rows: Vec<(i64, String, i64, i64, i64)> = sqlx::query_as(
        q.sql("SELECT workflow, task, completed, dead, cancelled FROM @schema@.tally"),
    )
    .fetch_all(&q.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [(enqueued.id.get(), "zip".to_owned(), 4, 1, 1)],
        "once, with the batch's counts"
    );
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.ended, info.failed),
        (WorkflowState::Failed, 7, 2)
    );
}

/// Only the lease holder reads a task's workflow: another token reads nothing.
#[tokio::test]
async fn only_the_lease_holder_reads_its_tasks_workflow() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut w = client.workflow("w");
    w.task("a", Step { n: 1 }, &EnqueueOptions::new()).unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let lease = claim_due(&q).await.remove(0);
    let read = |token: uuid::Uuid| {
        let q = &q;
        let lease = &lease;
        async move {
            let rows: Vec<(i64, String)> = sqlx::query_as(
                q.sql("SELECT workflow_id, task FROM @schema@.harel_workflow_task($1, $2, $3)"),
            )
            .bind(&lease.group)
            .bind(lease.id.get())
            .bind(token)
            .fetch_all(&q.pool)
            .await
            .unwrap();
            rows
        }
    };
    assert_eq!(
        read(lease.token.as_uuid()).await,
        [(enqueued.id.get(), "a".to_owned())]
    );
    assert!(read(uuid::Uuid::new_v4()).await.is_empty());
}

/// A task that runs after failure and had counted a parent's failure waits for the
/// parent's retry instead, and its counts take the failure back.
#[tokio::test]
async fn a_retry_makes_the_tasks_that_counted_the_failure_wait_for_the_new_job() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut w = client.workflow("report");
    let a = w.task("a", Step { n: 1 }, &EnqueueOptions::new()).unwrap();
    let b = w.task("b", Step { n: 2 }, &EnqueueOptions::new()).unwrap();
    w.callback("report", Step { n: 3 }, &EnqueueOptions::new())
        .unwrap();
    let _ = (a, b);
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let leases = claim_due(&q).await;
    assert_eq!(leases.len(), 2);
    let (lease_a, lease_b) = if leases[0].id == enqueued.jobs[0] {
        (&leases[0], &leases[1])
    } else {
        (&leases[1], &leases[0])
    };
    assert!(
        q.transport
            .dead_letter(&q.pool, lease_b, "flaky")
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(client.retry_workflow(enqueued.id).await.unwrap(), 1);
    assert!(
        q.transport
            .ack(&q.pool, lease_a)
            .await
            .unwrap()
            .is_applied()
    );
    let report = |tasks: Vec<harel_jobs::TaskInfo>| tasks.into_iter().nth(2).unwrap();
    let waiting = report(
        client
            .workflow_tasks(enqueued.id, 0, 10)
            .await
            .unwrap()
            .tasks,
    );
    assert_eq!(waiting.state, "pending", "it waits for b's new job");
    let lease = claim_due(&q).await.remove(0);
    assert!(q.transport.ack(&q.pool, &lease).await.unwrap().is_applied());
    let released = report(
        client
            .workflow_tasks(enqueued.id, 0, 10)
            .await
            .unwrap()
            .tasks,
    );
    let outcomes = released.parent_outcomes.expect("released");
    assert_eq!(
        (outcomes.completed, outcomes.dead, outcomes.cancelled),
        (2, 0, 0),
        "the failure taken back"
    );
}

/// A worker pool settles a workflow's tasks while an operator cancels it: neither waits for
/// the other in a cycle (PostgreSQL would abort one), and the counts add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_workflow_beside_its_settles_never_deadlocks() {
    let q = SuiteSchema::new().await;
    sqlx::raw_sql(q.sql(
        "CREATE TABLE @schema@.tally (workflow BIGINT, task TEXT, completed BIGINT,
                                      dead BIGINT, cancelled BIGINT)",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let client = client(&q);
    for round in 0..3 {
        let mut w = client.workflow("big");
        for n in 0..300 {
            w.task(
                format!("t{n}"),
                Shard { n: SLOW_SHARD + n },
                &EnqueueOptions::new(),
            )
            .unwrap();
        }
        let enqueued = w.enqueue(&q.pool).await.unwrap();
        let tally = Tally {
            pool: q.pool.clone(),
            schema: q.schema.to_string(),
        };
        let handle = Worker::builder(q.pool.clone(), tally)
            .schema(q.schema.clone())
            .register::<Shard>()
            .concurrency(16)
            .poll_interval(Duration::from_millis(20))
            .build()
            .unwrap()
            .start();
        tokio::time::sleep(Duration::from_millis(20 * round)).await;
        let cancelled = client
            .cancel_workflow(enqueued.id)
            .reason("enough")
            .await
            .expect("the cancel is not aborted");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
            if info.ended == 300 {
                assert_eq!(info.state, WorkflowState::Cancelled, "{cancelled:?}");
                assert_eq!(info.completed + info.cancelled, 300, "{info:?}");
                assert_eq!(info.dead, 0, "{info:?}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{info:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stats = handle.shutdown().await.unwrap();
        assert_eq!(stats.database_errors, 0, "no settle was aborted: {stats:?}");
    }
}

/// A no-op task for the lock-order test.
#[harel_jobs::job]
async fn node(_ctx: JobContext<()>, n: u32) -> JobResult {
    let _ = n;
    Ok(())
}

/// The deadlocks PostgreSQL detected in `database` so far (read after the pools that ran
/// there closed: a backend reports its counts when it ends).
async fn deadlocks(admin: &sqlx::PgPool, database: &str) -> i64 {
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(admin)
        .await
        .unwrap();
    sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = $1")
        .bind(database)
        .fetch_one(admin)
        .await
        .unwrap()
}

/// Two worker pools drain a workflow of 30 layers of 100 tasks (each waiting for two tasks
/// of the layer before); with `groups`, spread over that many groups, so that every settle
/// releases tasks into groups the other pool's settles hold. Returns the drain's time, the
/// deadlocks PostgreSQL detected and the database errors the pools met.
async fn drain_layers(groups: Option<u32>, cancel_after: Option<Duration>) -> (Duration, i64, u64) {
    let database = harel_jobs_suite::TestDatabase::new().await;
    let admin = harel_jobs_suite::pool_with(&harel_jobs_suite::database_url(), 1).await;
    let q = SuiteSchema::new_at(&database.url).await;
    let client = client(&q);
    let before = deadlocks(&admin, &database.name).await;
    let mut w = client.workflow("layers");
    let mut previous: Vec<harel_jobs::BatchRef> = Vec::new();
    for layer in 0..30u32 {
        let mut this = Vec::new();
        for i in 0..100u32 {
            let n = layer * 100 + i;
            let mut options = EnqueueOptions::new();
            if let Some(groups) = groups {
                options = options.group(format!("g{}", n % groups));
            }
            if !previous.is_empty() {
                let a = previous[i as usize];
                let b = previous[((i + 37) % 100) as usize];
                options = options.after([a, b]);
            }
            this.push(w.task(format!("t{n}"), Node { n }, &options).unwrap());
        }
        previous = this;
    }
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let start = std::time::Instant::now();
    let pools: Vec<_> = (0..2)
        .map(|_| {
            Worker::builder(q.pool.clone(), ())
                .schema(q.schema.clone())
                .register::<Node>()
                .concurrency(16)
                .poll_interval(Duration::from_millis(20))
                .build()
                .unwrap()
                .start()
        })
        .collect();
    if let Some(after) = cancel_after {
        tokio::time::sleep(after).await;
        let cancelled = client.cancel_workflow(enqueued.id).await.unwrap();
        assert!(
            cancelled.cancelled > 0,
            "cancelled while running: {cancelled:?}"
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
        if info.ended == 3_000 {
            if cancel_after.is_none() {
                assert_eq!(info.state, WorkflowState::Completed);
            }
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{info:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drained = start.elapsed();
    let mut errors = 0;
    for handle in pools {
        errors += handle.shutdown().await.unwrap().database_errors;
    }
    q.pool.close().await;
    drop(client);
    let after = deadlocks(&admin, &database.name).await;
    (drained, after - before, errors)
}

/// Two worker pools drain a workflow of 30 layers of 100 tasks (each waiting for two tasks of
/// the layer before) spread over 40 groups, so that every settle releases tasks into groups
/// the other pool's settles hold. Every path that locks groups and waits takes them in one
/// order (ADR 0037): PostgreSQL detects no deadlock, and no settle is aborted. (The drain
/// beside the same graph with a group per task is in the bench: `bench workflows`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settles_releasing_into_each_others_groups_never_deadlock() {
    let (drained, deadlocks, errors) = drain_layers(Some(40), None).await;
    println!("drained in {drained:?}, deadlocks {deadlocks}, database errors {errors}");
    assert_eq!(deadlocks, 0, "deadlocks detected while draining");
    assert_eq!(errors, 0, "no settle was aborted");
}

/// An operator cancels that workflow while the two pools drain it: the cancel's pages take
/// their groups in the settles' order and its cascades take none by waiting, so PostgreSQL
/// detects no deadlock (before: 17 of 48 deadlocks in such runs had the cancel in the cycle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_workflow_beside_settles_in_its_groups_never_deadlocks() {
    let (took, deadlocks, errors) = drain_layers(Some(40), Some(Duration::from_millis(300))).await;
    println!("ended in {took:?}, deadlocks {deadlocks}, database errors {errors}");
    assert_eq!(deadlocks, 0, "deadlocks detected while cancelling");
    assert_eq!(errors, 0, "no settle was aborted");
}

/// Claims every due job and settles it: a dead letter for the jobs in `die`, an ack for the
/// others; returns how many it settled.
async fn settle_due(q: &SuiteSchema, die: &[JobId]) -> usize {
    let leases = claim_due(q).await;
    let (dying, acked): (Vec<Lease>, Vec<Lease>) =
        leases.iter().cloned().partition(|l| die.contains(&l.id));
    for lease in &dying {
        let outcome = q.transport.dead_letter(&q.pool, lease, "broken").await;
        assert!(outcome.unwrap().is_applied());
    }
    if !acked.is_empty() {
        let outcomes = q.transport.ack_many(&q.pool, &acked).await.unwrap();
        assert!(outcomes.iter().all(|o| o.is_applied()));
    }
    leases.len()
}

/// Issue 42, item 6: a dead letter of a workflow's task, retried as a dead letter
/// (`DeadLetters::retry`, what `dead retry` and the dashboard's Retry call), stays in its
/// workflow: the task points at the new job, the task cancelled for it waits for it again,
/// the callback that counted it runs again, and the workflow completes; a retry of the
/// workflow afterwards finds nothing to retry (before: the new job was outside the
/// workflow, which still showed the dead task, and `retry_workflow` failed with NotKept).
#[tokio::test]
async fn a_retried_dead_letter_of_a_task_stays_in_its_workflow() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut w = client.workflow("chain");
    let a = w.task("a", Step { n: 1 }, &EnqueueOptions::new()).unwrap();
    let b = w
        .task("b", Step { n: 2 }, &EnqueueOptions::new().after([a]))
        .unwrap();
    w.task("c", Step { n: 3 }, &EnqueueOptions::new().after([b]))
        .unwrap();
    w.callback("report", Step { n: 4 }, &EnqueueOptions::new())
        .unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let b_job = enqueued.jobs[1];
    while settle_due(&q, &[b_job]).await > 0 {}
    assert_eq!(
        states(&client, enqueued.id).await,
        pairs(&[
            ("a", "completed"),
            ("b", "dead"),
            ("c", "cancelled"),
            ("report", "completed")
        ])
    );

    let new_b = client
        .dead_letters()
        .retry(b_job)
        .await
        .unwrap()
        .expect("retried");
    assert_ne!(new_b, b_job);
    let tasks = client
        .workflow_tasks(enqueued.id, 0, 100)
        .await
        .unwrap()
        .tasks;
    assert_eq!(tasks[1].job, new_b, "the task points at the new job");
    assert_eq!(
        tasks.iter().map(|t| t.state.as_str()).collect::<Vec<_>>(),
        ["completed", "waiting", "pending", "pending"],
        "c waits for b again, and the callback for both"
    );
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state.as_str(), info.ended, info.failed),
        ("running", 1, 0)
    );
    assert_eq!(
        client.retry_workflow(enqueued.id).await.unwrap(),
        0,
        "nothing left to retry, and no NotKept"
    );
    assert!(client.dead_letters().retry(b_job).await.unwrap().is_none());

    while settle_due(&q, &[]).await > 0 {}
    let tasks = client
        .workflow_tasks(enqueued.id, 0, 100)
        .await
        .unwrap()
        .tasks;
    assert!(tasks.iter().all(|t| t.state == "completed"), "{tasks:?}");
    let counts = tasks[3].parent_outcomes.expect("released");
    assert_eq!(
        (counts.completed, counts.dead, counts.cancelled),
        (3, 0, 0),
        "the callback ran again with the recovery's counts"
    );
    let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
    assert_eq!(
        (info.state.as_str(), info.ended, info.failed),
        ("completed", 4, 0)
    );
}

/// Issue 42, item 6, retried together or one by one (`retry_many`, what "Retry all" and
/// `dead retry --all` call): a task cancelled because two parents died runs again once
/// both are retried, not before.
#[tokio::test]
async fn a_task_cancelled_for_two_dead_parents_comes_back_with_the_second() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    for together in [true, false] {
        let mut w = client.workflow("diamond");
        let a = w.task("a", Step { n: 1 }, &EnqueueOptions::new()).unwrap();
        let b = w
            .task("b", Step { n: 2 }, &EnqueueOptions::new().after([a]))
            .unwrap();
        let c = w
            .task("c", Step { n: 3 }, &EnqueueOptions::new().after([a]))
            .unwrap();
        w.task("d", Step { n: 4 }, &EnqueueOptions::new().after([b, c]))
            .unwrap();
        let enqueued = w.enqueue(&q.pool).await.unwrap();
        let (b_job, c_job) = (enqueued.jobs[1], enqueued.jobs[2]);
        while settle_due(&q, &[b_job, c_job]).await > 0 {}
        assert_eq!(
            states(&client, enqueued.id).await,
            pairs(&[
                ("a", "completed"),
                ("b", "dead"),
                ("c", "dead"),
                ("d", "cancelled")
            ])
        );
        let dead = client.dead_letters();
        if together {
            assert_eq!(dead.retry_many(&[b_job, c_job]).await.unwrap().len(), 2);
        } else {
            dead.retry(b_job).await.unwrap().expect("retried");
            assert_eq!(
                states(&client, enqueued.id).await[3].1,
                "cancelled",
                "c is still dead: d stays cancelled"
            );
            dead.retry(c_job).await.unwrap().expect("retried");
        }
        assert_eq!(
            states(&client, enqueued.id).await,
            pairs(&[
                ("a", "completed"),
                ("b", "waiting"),
                ("c", "waiting"),
                ("d", "pending")
            ])
        );
        while settle_due(&q, &[]).await > 0 {}
        let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
        assert_eq!((info.state.as_str(), info.ended), ("completed", 4));
    }
}

/// What the shards and the callback below share: whether shard 0 fails, and the counts
/// each run of the callback read.
#[derive(Default)]
struct Notes {
    shard_0_fails: std::sync::atomic::AtomicBool,
    reports: std::sync::Mutex<Vec<(u32, u32, u32)>>,
}

/// Fails for good while `shard_0_fails` says so, for shard 0.
#[harel_jobs::job]
async fn part(ctx: JobContext<std::sync::Arc<Notes>>, n: u32) -> JobResult {
    if n == 0
        && ctx
            .state()
            .shard_0_fails
            .load(std::sync::atomic::Ordering::SeqCst)
    {
        return Err(JobError::permanent("shard 0 is corrupt"));
    }
    Ok(())
}

/// "Notify when done": records the counts its batch ended with.
#[harel_jobs::job]
async fn notify_done(ctx: JobContext<std::sync::Arc<Notes>>) -> JobResult {
    let task = ctx.workflow().await?.expect("a workflow's task");
    let counts = task.parents.unwrap_or_default();
    ctx.state()
        .reports
        .lock()
        .unwrap()
        .push((counts.completed, counts.dead, counts.cancelled));
    Ok(())
}

/// Issue 42, item 7: a batch's callback that already ran reports the recovery: after a
/// retry of the failed job (through `retry_workflow`, and through its dead letter's
/// retry), it runs again once the retried job ends, with the new counts (before: it stayed
/// completed with its old counts, and ran once).
#[tokio::test]
async fn a_callback_that_ran_runs_again_with_the_counts_of_the_retry() {
    for through_the_dead_letter in [false, true] {
        let q = SuiteSchema::new().await;
        let client = client(&q);
        let notes = std::sync::Arc::new(Notes::default());
        notes
            .shard_0_fails
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let worker = harel_jobs::testing::TestWorker::new(
            Worker::builder(q.pool.clone(), std::sync::Arc::clone(&notes))
                .schema(q.schema.clone())
                .register::<Part>()
                .register::<NotifyDone>(),
        )
        .unwrap();
        let mut batch = client.workflow("export");
        for n in 0..4 {
            batch
                .task(format!("part-{n}"), Part { n }, &EnqueueOptions::new())
                .unwrap();
        }
        batch
            .callback("notify", NotifyDone {}, &EnqueueOptions::new())
            .unwrap();
        let enqueued = batch.enqueue(&q.pool).await.unwrap();
        worker.work_until_idle(&q.pool).await.unwrap();
        let reports = || notes.reports.lock().unwrap().clone();
        assert_eq!(reports(), [(3, 1, 0)]);

        notes
            .shard_0_fails
            .store(false, std::sync::atomic::Ordering::SeqCst);
        if through_the_dead_letter {
            client
                .dead_letters()
                .retry(enqueued.jobs[0])
                .await
                .unwrap()
                .expect("retried");
        } else {
            assert_eq!(
                client.retry_workflow(enqueued.id).await.unwrap(),
                2,
                "the dead part, and the callback that counted it"
            );
        }
        assert_eq!(
            states(&client, enqueued.id).await[4],
            ("notify".to_owned(), "pending".to_owned()),
            "it waits for the retry"
        );
        worker.work_until_idle(&q.pool).await.unwrap();
        assert_eq!(
            reports(),
            [(3, 1, 0), (4, 0, 0)],
            "notify when done reported the recovery ({through_the_dead_letter})"
        );
        let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
        assert_eq!(
            (info.state.as_str(), info.ended, info.failed),
            ("completed", 5, 0)
        );
    }
}

/// How many rows `table` holds for the workflow `id`.
async fn rows_of(q: &SuiteSchema, table: &str, id: WorkflowId) -> i64 {
    let column = if table == "workflows" {
        "id"
    } else {
        "workflow_id"
    };
    sqlx::query_scalar(q.sql(&format!(
        "SELECT count(*) FROM @schema@.{table} WHERE {column} = $1"
    )))
    .bind(id.get())
    .fetch_one(&q.pool)
    .await
    .unwrap()
}

/// Housekeeping's call, as a worker makes it.
async fn maintain(q: &SuiteSchema) {
    sqlx::query(q.sql("SELECT * FROM @schema@.harel_maintain()"))
        .execute(&q.pool)
        .await
        .unwrap();
}

/// Issue 42, item 10: housekeeping prunes the workflows that ended long enough ago (every
/// task ended 7 days ago, none of their jobs kept), all their rows, a bounded stretch a
/// call; a workflow still running, one that ended lately, and one whose dead letter is
/// kept stay (before: nothing was ever pruned).
#[tokio::test]
async fn housekeeping_prunes_the_workflows_that_ended_long_ago() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let enqueue = |name: &'static str, tasks: u32, callback: bool| {
        let client = client.clone();
        let pool = q.pool.clone();
        async move {
            let mut w = client.workflow(name);
            for n in 0..tasks {
                w.task(format!("t{n}"), Step { n }, &EnqueueOptions::new())
                    .unwrap();
            }
            if callback {
                w.callback("done", Step { n: 0 }, &EnqueueOptions::new())
                    .unwrap();
            }
            w.enqueue(&pool).await.unwrap()
        }
    };
    let done = enqueue("done", 3, true).await;
    let dead = enqueue("dead", 2, false).await;
    let big = enqueue("big", 2_500, false).await;
    while settle_due(&q, &[dead.jobs[0]]).await > 0 {}
    // one whose job's completion is kept 30 days (retention)
    let retained = enqueue("retained", 1, false).await;
    let lease = claim_due(&q).await;
    assert_eq!(lease.len(), 1);
    let kept = harel_jobs::transport::Settlement::Retain {
        keep: Duration::from_secs(30 * 86_400),
    };
    let outcome = q.transport.settle(&q.pool, &lease[0], kept).await;
    assert!(outcome.unwrap().is_applied());
    let running = enqueue("running", 2, false).await;
    let lease = claim_due(&q).await;
    assert_eq!(lease.len(), 2);
    assert!(
        q.transport
            .ack(&q.pool, &lease[0])
            .await
            .unwrap()
            .is_applied()
    );
    // a week and a day ago
    sqlx::query(q.sql(
        "UPDATE @schema@.workflow_tasks SET ended_at = ended_at - interval '8 days'
          WHERE ended_at IS NOT NULL",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let lately = enqueue("lately", 1, false).await;
    while settle_due(&q, &[]).await > 0 {}
    assert_eq!(
        q.count("workflow_tasks").await,
        3 + 1 + 2 + 2_500 + 1 + 2 + 1
    );

    // a call walks at most 1,000 task rows
    let mut calls = 0;
    let mut tasks_before = q.count("workflow_tasks").await;
    while rows_of(&q, "workflow_tasks", big.id).await > 0 {
        maintain(&q).await;
        calls += 1;
        let tasks = q.count("workflow_tasks").await;
        assert!(tasks_before - tasks <= 1_000, "{tasks_before} -> {tasks}");
        tasks_before = tasks;
        assert!(calls < 20, "pruned within a few walks");
    }
    for _ in 0..3 {
        maintain(&q).await;
    }
    for (id, kept) in [
        (done.id, false),
        (big.id, false),
        (dead.id, true),
        (retained.id, true),
        (running.id, true),
        (lately.id, true),
    ] {
        for table in [
            "workflows",
            "workflow_tasks",
            "workflow_ends",
            "workflow_reruns",
        ] {
            let rows = rows_of(&q, table, id).await;
            if kept {
                assert!(table == "workflow_reruns" || rows > 0, "{id} {table}");
            } else {
                assert_eq!(rows, 0, "{id} {table}: pruned");
            }
        }
    }
    assert!(client.workflow_info(done.id).await.unwrap().is_none());

    // the dead letter deleted, the retained completion expired: nothing keeps those
    // workflows any more
    assert!(client.dead_letters().delete(dead.jobs[0]).await.unwrap());
    sqlx::query(q.sql("UPDATE @schema@.job_history SET keep_until = now() - interval '1 second'"))
        .execute(&q.pool)
        .await
        .unwrap();
    for _ in 0..6 {
        maintain(&q).await;
    }
    for id in [dead.id, retained.id] {
        assert_eq!(rows_of(&q, "workflows", id).await, 0);
        assert_eq!(rows_of(&q, "workflow_tasks", id).await, 0);
    }
    assert_eq!(rows_of(&q, "workflows", running.id).await, 1);
    assert_eq!(rows_of(&q, "workflows", lately.id).await, 1);
}

/// A task that failed with more dependents than its settle resolves (ADR 0037: the rest wait
/// in the backlog for housekeeping, to be cancelled for it) is retried before housekeeping
/// came: the dependents still waiting for its old job wait for the new one instead (not
/// cancelled later for a failure the retry took back), the backlog forgets the old job, and
/// the whole workflow completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_takes_back_the_dependents_left_to_housekeeping() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let mut w = client.workflow("wide");
    let a = w.task("a", Node { n: 0 }, &EnqueueOptions::new()).unwrap();
    for n in 1..=1_200 {
        w.task(
            format!("t{n}"),
            Node { n },
            &EnqueueOptions::new().after([a]),
        )
        .unwrap();
    }
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let lease = claim_due(&q).await.remove(0);
    assert_eq!(lease.id, enqueued.jobs[0]);
    assert!(
        q.transport
            .dead_letter(&q.pool, &lease, "flaky")
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        q.count("dependency_backlog").await,
        1,
        "most left to housekeeping"
    );
    assert!(q.count("job_dependencies").await > 1_000);
    assert_eq!(client.retry_workflow(enqueued.id).await.unwrap(), 101);
    assert_eq!(q.count("dependency_backlog").await, 0);
    let handle = Worker::builder(q.pool.clone(), ())
        .schema(q.schema.clone())
        .register::<Node>()
        .concurrency(16)
        .poll_interval(Duration::from_millis(20))
        .build()
        .unwrap()
        .start();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let info = client.workflow_info(enqueued.id).await.unwrap().unwrap();
        if info.ended == 1_201 {
            assert_eq!(info.state, WorkflowState::Completed, "{info:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{info:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.shutdown().await.unwrap();
}
