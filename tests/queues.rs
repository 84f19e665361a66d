//! Named queues against a real PostgreSQL: each claimed on its own, a group in one queue,
//! a flood in one queue never taking another's slots, pause and resume, and the limits
//! across every worker (concurrency, rate).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use harel_jobs::transport::{ClaimRequest, OutgoingMessage};
use harel_jobs::{
    Client, ClientError, InvalidMessage, Job, JobContext, JobResult, PublishError, QueueLimits,
    WorkerHandle, job,
};
use harel_jobs_suite::SuiteSchema;
use harel_jobs_suite::limits::{Hold, most_at_once, run_four_hold_pools};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

const LEASE: Duration = Duration::from_secs(60);

fn queue(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

fn in_queue(queue: &str, group: &str, n: u32) -> OutgoingMessage {
    OutgoingMessage::new(group, "k", format!(r#"{{"n":{n}}}"#)).queue(queue)
}

async fn claim_from(q: &SuiteSchema, queue: &str, limit: u32) -> Vec<(String, harel_jobs::JobId)> {
    q.transport
        .claim_many(&q.pool, &ClaimRequest::new(LEASE).limit(limit).queue(queue))
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.lease.group, m.lease.id))
        .collect()
}

/// A claim takes jobs of its queue only; each queue keeps its groups' FIFO order.
#[tokio::test]
async fn each_queue_is_claimed_on_its_own() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    let batch = [
        in_queue("mail", "m1", 1),
        in_queue("default", "d1", 2),
        in_queue("mail", "m1", 3),
        in_queue("webhooks", "w1", 4),
    ];
    let ids = t.publish_many(&q.pool, &batch).await.unwrap();
    t.publish(&q.pool, &OutgoingMessage::new("d2", "k", "{}"))
        .await
        .unwrap();

    assert!(claim_from(&q, "nothing-here", 10).await.is_empty());
    let mail = claim_from(&q, "mail", 10).await;
    assert_eq!(
        mail,
        vec![("m1".to_owned(), ids[0])],
        "the group's head only"
    );
    let hooks = claim_from(&q, "webhooks", 10).await;
    assert_eq!(hooks, vec![("w1".to_owned(), ids[3])]);
    let mut default: Vec<String> = claim_from(&q, "default", 10)
        .await
        .into_iter()
        .map(|(group, _)| group)
        .collect();
    default.sort();
    assert_eq!(default, ["d1", "d2"]);
    let queues: Vec<String> = queue(&q)
        .queues()
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.name)
        .collect();
    assert_eq!(queues, ["default", "mail", "webhooks"]);
}

/// A group belongs to the queue of the job that created it: another queue's job for it is
/// refused, nothing written, whether alone or in a batch.
#[tokio::test]
async fn a_group_belongs_to_one_queue() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &in_queue("mail", "user-1", 1))
        .await
        .unwrap();

    let mut tx = q.pool.begin().await.unwrap();
    let error = t
        .publish(&mut *tx, &in_queue("default", "user-1", 2))
        .await
        .expect_err("into another queue's group");
    assert!(
        matches!(error, PublishError::GroupInAnotherQueue),
        "{error:?}"
    );
    tx.rollback().await.unwrap();

    let batch = [
        in_queue("mail", "user-2", 3),
        in_queue("other", "user-1", 4),
    ];
    let error = t.publish_many(&q.pool, &batch).await.expect_err("batch");
    assert!(matches!(error, PublishError::GroupInAnotherQueue));
    let batch = [in_queue("mail", "new", 5), in_queue("other", "new", 6)];
    let error = t.publish_many(&q.pool, &batch).await.expect_err("split");
    assert!(matches!(error, PublishError::GroupInAnotherQueue));
    assert_eq!(q.count("jobs").await, 1, "nothing else written");

    // same queue: fine, alone and in a batch
    t.publish(&q.pool, &in_queue("mail", "user-1", 7))
        .await
        .unwrap();
    let batch = [in_queue("mail", "user-1", 8), in_queue("mail", "new", 9)];
    t.publish_many(&q.pool, &batch).await.unwrap();
    assert_eq!(q.count("jobs").await, 4);

    let bad = t.publish(&q.pool, &in_queue("no spaces", "g", 1)).await;
    assert!(matches!(
        bad,
        Err(PublishError::Invalid(
            InvalidMessage::InvalidQueueName { .. }
        ))
    ));
}

/// A dead letter retried goes back to its own queue.
#[tokio::test]
async fn a_retried_dead_letter_goes_back_to_its_queue() {
    let q = SuiteSchema::new().await;
    let t = &q.transport;
    t.publish(&q.pool, &in_queue("mail", "g", 1)).await.unwrap();
    let claimed = t
        .claim(&q.pool, &ClaimRequest::new(LEASE).queue("mail"))
        .await
        .unwrap()
        .unwrap();
    let outcome = t.dead_letter(&q.pool, &claimed.lease, "broken").await;
    assert_eq!(
        outcome.unwrap(),
        harel_jobs::transport::LeaseOutcome::Applied
    );
    let dead = queue(&q).dead_letters();
    let letter = dead.get(claimed.lease.id).await.unwrap().unwrap();
    assert_eq!(letter.queue, "mail");
    dead.retry(letter.id).await.unwrap().unwrap();
    assert!(claim_from(&q, "default", 10).await.is_empty());
    assert_eq!(claim_from(&q, "mail", 10).await.len(), 1);
}

/// A paused queue gives nothing to claims, still takes enqueues, and shows as paused;
/// resumed, its jobs are claimed again. Other queues never stop.
#[tokio::test]
async fn a_paused_queue_is_not_claimed_until_resumed() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    queue.create_queue("mail").await.unwrap();
    let paused = queue.pause("mail").await.unwrap();
    assert!(paused.is_paused());
    let t = &q.transport;
    t.publish(&q.pool, &in_queue("mail", "a", 1)).await.unwrap();
    t.publish(&q.pool, &in_queue("default", "b", 2))
        .await
        .unwrap();

    assert!(claim_from(&q, "mail", 10).await.is_empty());
    assert_eq!(claim_from(&q, "default", 10).await.len(), 1);
    let listed = queue.queues().await.unwrap();
    let mail = listed.iter().find(|info| info.name == "mail").unwrap();
    assert!(mail.is_paused());
    assert_eq!(mail.ready.exact(), Some(1), "waiting while paused");
    assert!(mail.oldest_ready_at.is_some(), "{mail:?}");

    assert!(!queue.resume("mail").await.unwrap().is_paused());
    assert_eq!(claim_from(&q, "mail", 10).await.len(), 1);
    let mail = queue.queues().await.unwrap().remove(1);
    assert_eq!(
        (mail.ready.exact(), mail.running.exact()),
        (Some(0), Some(1))
    );
    assert_eq!(mail.oldest_ready_at, None, "nothing ready");
}

/// Pausing, resuming or limiting a queue no job went to (and nobody created) is refused
/// with `UnknownQueue`, and creates nothing: `queues()` still lists no such queue. Created
/// first, the same calls work.
#[tokio::test]
async fn an_unknown_queue_is_refused_and_not_created() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let unknown = |result: Result<harel_jobs::QueueInfo, ClientError>| match result {
        Err(ClientError::UnknownQueue(name)) => assert_eq!(name, "nosuchqueue"),
        other => panic!("expected UnknownQueue, got {other:?}"),
    };
    unknown(queue.pause("nosuchqueue").await);
    unknown(queue.resume("nosuchqueue").await);
    unknown(
        queue
            .set_limits("nosuchqueue", QueueLimits::none().concurrency(5))
            .await,
    );
    unknown(
        queue
            .set_limits(
                "nosuchqueue",
                QueueLimits::none().rate(10, Duration::from_secs(1)),
            )
            .await,
    );
    unknown(queue.set_limits("nosuchqueue", QueueLimits::none()).await);
    let names: Vec<String> = queue
        .queues()
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.name)
        .collect();
    assert!(!names.iter().any(|name| name == "nosuchqueue"), "{names:?}");
    assert!(
        queue
            .depth()
            .await
            .unwrap()
            .iter()
            .all(|level| level.queue != "nosuchqueue")
    );

    // created, it can be limited, paused and resumed
    queue.create_queue("nosuchqueue").await.unwrap();
    let limited = queue
        .set_limits("nosuchqueue", QueueLimits::none().concurrency(5))
        .await
        .unwrap();
    assert_eq!(limited.limits.concurrency_limit(), Some(5));
    assert!(queue.pause("nosuchqueue").await.unwrap().is_paused());
    assert!(!queue.resume("nosuchqueue").await.unwrap().is_paused());
    let listed = queue.queues().await.unwrap();
    let created = listed
        .iter()
        .find(|info| info.name == "nosuchqueue")
        .expect("listed once created");
    assert_eq!(created.limits.concurrency_limit(), Some(5));
}

// ---- worker pools ----------------------------------------------------------------------

/// What the handlers below share: a gate the bulk jobs wait at, and what ran.
struct Gate {
    /// Bulk jobs wait for a permit here (none until the test adds them).
    bulk: Semaphore,
    bulk_started: AtomicUsize,
    urgent_done: tokio::sync::Notify,
}

#[job(queue = "bulk")]
async fn bulk_job(ctx: JobContext<Arc<Gate>>, n: u32) -> JobResult {
    let _ = n;
    ctx.state().bulk_started.fetch_add(1, Ordering::SeqCst);
    let permit = ctx.state().bulk.acquire().await;
    drop(permit);
    Ok(())
}

#[job(queue = "urgent")]
async fn urgent_job(ctx: JobContext<Arc<Gate>>) -> JobResult {
    ctx.state().urgent_done.notify_one();
    Ok(())
}

/// A pool refuses to build with a registered kind whose queue it does not serve (its jobs
/// would wait for ever), unless told that another pool serves that queue.
#[tokio::test]
async fn a_pool_refuses_a_kind_whose_queue_it_does_not_serve() {
    let q = SuiteSchema::new().await;
    let gate = || {
        Arc::new(Gate {
            bulk: Semaphore::new(0),
            bulk_started: AtomicUsize::new(0),
            urgent_done: tokio::sync::Notify::new(),
        })
    };
    let refused = queue(&q)
        .worker(gate())
        .register::<BulkJob>()
        .build()
        .expect_err("refused: the pool serves only the default queue");
    match &refused {
        harel_jobs::ConfigError::UnservedQueue {
            kind,
            queue,
            served,
        } => {
            assert_eq!((*kind, *queue), ("bulk_job", "bulk"));
            assert_eq!(served, &["default".to_owned()]);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        refused.to_string().contains(".served_elsewhere(\"bulk\")"),
        "{refused}"
    );
    let refused = queue(&q)
        .worker(gate())
        .register::<BulkJob>()
        .register::<UrgentJob>()
        .queue("urgent", 1)
        .build()
        .expect_err("refused: bulk is not served");
    assert!(matches!(
        refused,
        harel_jobs::ConfigError::UnservedQueue { queue: "bulk", .. }
    ));
    // served here, or said to be served by another pool
    assert!(
        queue(&q)
            .worker(gate())
            .register::<BulkJob>()
            .queue("bulk", 1)
            .build()
            .is_ok()
    );
    assert!(
        queue(&q)
            .worker(gate())
            .register::<BulkJob>()
            .register::<UrgentJob>()
            .queue("urgent", 1)
            .served_elsewhere("bulk")
            .build()
            .is_ok()
    );
}

/// 10,000 jobs of a slow queue take every one of its slots; a job of the other queue still
/// starts, while every slow job is still blocked (with shared slots it never would).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_in_one_queue_never_takes_the_slots_of_another() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let mut batch = queue.batch();
    for n in 0..10_000 {
        batch.push(BulkJob { n }).unwrap();
    }
    batch.enqueue(&q.pool).await.unwrap();
    assert_eq!(<BulkJob as Job>::QUEUE, "bulk");

    let gate = Arc::new(Gate {
        bulk: Semaphore::new(0),
        bulk_started: AtomicUsize::new(0),
        urgent_done: tokio::sync::Notify::new(),
    });
    let worker = queue
        .worker(Arc::clone(&gate))
        .register::<BulkJob>()
        .register::<UrgentJob>()
        .queue("bulk", 4)
        .queue("urgent", 2)
        .build()
        .unwrap()
        .start();
    while gate.bulk_started.load(Ordering::SeqCst) < 4 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let urgent_done = gate.urgent_done.notified();
    queue.enqueue(&q.pool, UrgentJob {}).await.unwrap();
    tokio::time::timeout(Duration::from_secs(60), urgent_done)
        .await
        .expect("the urgent job never started: the bulk queue took its slots");
    assert_eq!(
        gate.bulk_started.load(Ordering::SeqCst),
        4,
        "the bulk queue ran only its own 4 at once"
    );
    gate.bulk.close();
    worker.shutdown().await.unwrap();
}

/// Enqueues `count` jobs of `millis` each, runs them on four pools of `concurrency` 16 and
/// returns each job's (start, finish) as the database recorded them.
async fn run_on_four_pools(q: &SuiteSchema, count: u32, millis: u64) -> Vec<(f64, f64)> {
    let queue = queue(q);
    let mut batch = queue.batch();
    for _ in 0..count {
        batch.push(Hold { millis }).unwrap();
    }
    batch.enqueue(&q.pool).await.unwrap();
    run_four_hold_pools(q, i64::from(count)).await;
    let rows: Vec<(DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        q.sql("SELECT started_at, finished_at FROM @schema@.job_history ORDER BY started_at"),
    )
    .fetch_all(&q.pool)
    .await
    .unwrap();
    let epoch = rows[0].0;
    rows.into_iter()
        .map(|(start, end)| {
            let secs = |t: DateTime<Utc>| (t - epoch).as_seconds_f64();
            (secs(start), secs(end))
        })
        .collect()
}

/// Four pools of concurrency 16 on a queue limited to 5: never more than 5 leases at once
/// (each job's lease from its claim to its settle, as the database timed them), and the 5
/// are used.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrency_limit_holds_across_every_worker() {
    let q = SuiteSchema::new().await;
    queue(&q).create_queue("partner").await.unwrap();
    queue(&q)
        .set_limits("partner", QueueLimits::none().concurrency(5))
        .await
        .unwrap();
    let intervals = run_on_four_pools(&q, 120, 40).await;
    assert_eq!(intervals.len(), 120);
    assert_eq!(most_at_once(&intervals), 5, "{intervals:?}");
    // how busy the 5 slots were, from the first claim to the last settle (printed only: a
    // ratio of times on a shared machine)
    let busy: f64 = intervals.iter().map(|(start, end)| end - start).sum();
    let span = intervals.iter().map(|&(_, end)| end).fold(0.0, f64::max);
    eprintln!(
        "5 slots {:.0}% busy over {span:.2} s",
        100.0 * busy / (5.0 * span)
    );
}

/// A rate of 10 starts a second across four pools: every start conforms to the rate
/// (with the burst of 10 it allows): start j comes no sooner than (j - i) / 10 s after
/// start i, less the 0.9 s of the burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rate_limit_holds_across_every_worker() {
    let q = SuiteSchema::new().await;
    let limits = QueueLimits::none().rate(10, Duration::from_secs(1));
    queue(&q).create_queue("partner").await.unwrap();
    queue(&q).set_limits("partner", limits).await.unwrap();
    let intervals = run_on_four_pools(&q, 30, 1).await;
    let starts: Vec<f64> = intervals.iter().map(|&(start, _)| start).collect();
    for i in 0..starts.len() {
        for j in i + 1..starts.len() {
            let least = (j - i) as f64 * 0.1 - 0.9 - 0.001;
            assert!(
                starts[j] - starts[i] >= least,
                "starts {i} and {j} only {:.3} s apart: {starts:?}",
                starts[j] - starts[i]
            );
        }
    }
    let listed = queue(&q).queues().await.unwrap();
    let partner = listed.iter().find(|info| info.name == "partner").unwrap();
    assert_eq!(partner.limits, limits);
}

/// A periodic job goes to its type's queue (and is unique like any other job).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_periodic_job_goes_to_its_queue() {
    #[derive(Serialize, Deserialize)]
    struct Report {
        at: DateTime<Utc>,
    }
    impl Job for Report {
        const KIND: &'static str = "report";
        const QUEUE: &'static str = "reports";
    }

    let q = SuiteSchema::new().await;
    let every = harel_jobs::Periodic::every("reports", Duration::from_secs(1)).unwrap();
    let worker = queue(&q)
        .worker(())
        .register::<Hold>()
        // (Hold's queue: this pool only enqueues the reports)
        .served_elsewhere("partner")
        .periodic(every, |at| Report { at })
        .build()
        .unwrap()
        .start();
    let began = Instant::now();
    let mut reports = Vec::new();
    while reports.is_empty() {
        assert!(began.elapsed() < Duration::from_secs(30), "no tick fired");
        tokio::time::sleep(Duration::from_millis(100)).await;
        reports = claim_from(&q, "reports", 10).await;
    }
    worker.shutdown().await.unwrap();
    assert!(claim_from(&q, "default", 10).await.is_empty());
}

/// A pool serving the partner queue (2 slots, jobs kept in the history), polling every
/// `poll`.
fn partner_pool(queue: &Client, poll: Duration) -> WorkerHandle {
    queue
        .worker(())
        .register::<Hold>()
        .queue("partner", 2)
        .retain_completed(Duration::from_secs(3600))
        .poll_interval(poll)
        .build()
        .unwrap()
        .start()
}

/// How many jobs finished (kept in the history).
async fn finished(q: &SuiteSchema) -> i64 {
    sqlx::query_scalar(q.sql("SELECT count(*) FROM @schema@.job_history"))
        .fetch_one(&q.pool)
        .await
        .unwrap()
}

/// Pausing a queue reaches a running pool: a job enqueued while it is paused does not run
/// (over several poll intervals); once resumed, it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_pool_honours_pause_and_resume() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let worker = partner_pool(&queue, Duration::from_millis(50));
    let done = || finished(&q);
    queue.enqueue(&q.pool, Hold { millis: 1 }).await.unwrap();
    let began = Instant::now();
    while done().await < 1 {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the job never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    queue.pause("partner").await.unwrap();
    queue.enqueue(&q.pool, Hold { millis: 1 }).await.unwrap();
    // twenty poll intervals, and the NOTIFY of the enqueue: nothing runs
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(done().await, 1, "a paused queue's job ran");

    queue.resume("partner").await.unwrap();
    let began = Instant::now();
    while done().await < 2 {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "the resumed job never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await.unwrap();
}

/// Resuming wakes listening workers at once: with a poll interval of ten minutes, only the
/// resume's NOTIFY can start the job that waited while the queue was paused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_queue_wakes_its_workers_without_a_poll() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let worker = partner_pool(&queue, Duration::from_secs(600));
    let done = || finished(&q);
    let wait_for = |count: i64, what: &'static str| async move {
        let began = Instant::now();
        while done().await < count {
            // far below the poll interval: only a notification can have woken the worker
            assert!(began.elapsed() < Duration::from_secs(60), "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    // the first job's NOTIFY proves the pool listens
    queue.enqueue(&q.pool, Hold { millis: 1 }).await.unwrap();
    wait_for(1, "the first job never ran").await;

    queue.pause("partner").await.unwrap();
    queue.enqueue(&q.pool, Hold { millis: 1 }).await.unwrap();
    // the enqueue's NOTIFY wakes the fetcher, whose claim finds the queue paused
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(done().await, 1, "a paused queue's job ran");

    queue.resume("partner").await.unwrap();
    wait_for(2, "the resumed job waited for a poll").await;
    worker.shutdown().await.unwrap();
}

/// A job's queue, as `Client::job` and `Client::jobs` report it, in every place a job can
/// be: waiting, cancelled, completed and kept, dead; and the listing filters by queue.
#[tokio::test]
async fn a_job_knows_its_queue_wherever_it_is() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let t = &q.transport;
    let ids = t
        .publish_many(
            &q.pool,
            &[
                in_queue("mail", "a", 1),
                in_queue("mail", "a", 2),
                in_queue("mail", "b", 3),
                in_queue("mail", "c", 4),
                in_queue("default", "d", 5),
            ],
        )
        .await
        .unwrap();
    let job_queue = |id: harel_jobs::JobId| {
        let queue = queue.clone();
        async move { queue.job(id).await.unwrap().expect("found").queue }
    };
    assert_eq!(job_queue(ids[1]).await, "mail", "waiting behind its head");
    assert_eq!(job_queue(ids[4]).await, "default");

    queue.cancel(ids[1]).await.unwrap();
    assert_eq!(job_queue(ids[1]).await, "mail", "cancelled");
    let claimed = q
        .transport
        .claim_many(&q.pool, &ClaimRequest::new(LEASE).limit(10).queue("mail"))
        .await
        .unwrap();
    for message in claimed {
        let settlement = if message.lease.id == ids[0] {
            harel_jobs::transport::Settlement::Retain {
                keep: Duration::from_secs(60),
            }
        } else {
            harel_jobs::transport::Settlement::dead_letter("broken")
        };
        let outcome = t.settle(&q.pool, &message.lease, settlement).await.unwrap();
        assert_eq!(outcome, harel_jobs::transport::LeaseOutcome::Applied);
    }
    assert_eq!(job_queue(ids[0]).await, "mail", "completed and kept");
    assert_eq!(job_queue(ids[2]).await, "mail", "dead");

    let page = queue
        .jobs(&harel_jobs::JobQuery::new().queue("mail"))
        .await
        .unwrap();
    let listed: Vec<harel_jobs::JobId> = page.jobs.iter().map(|job| job.id).collect();
    assert_eq!(listed, ids[..4].to_vec());
    assert!(page.jobs.iter().all(|job| job.queue == "mail"));
}

/// Concurrent transactions creating the same new queues, in different orders within their
/// batches, all commit (no deadlock), and each queue is created once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_create_each_new_queue_once() {
    let q = SuiteSchema::new().await;
    let mut tasks = Vec::new();
    for task in 0..8u32 {
        let pool = q.pool.clone();
        let transport = q.transport.clone();
        tasks.push(tokio::spawn(async move {
            let mut names: Vec<String> = (0..5).map(|n| format!("new-{n}")).collect();
            names.rotate_left(task as usize % 5);
            if task % 2 == 1 {
                names.reverse();
            }
            let batch: Vec<OutgoingMessage> = names
                .iter()
                .enumerate()
                .map(|(i, name)| in_queue(name, &format!("t{task}-{i}"), task))
                .collect();
            let mut tx = pool.begin().await.unwrap();
            transport.publish_many(&mut *tx, &batch).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.commit().await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut listed: Vec<String> = queue(&q)
        .queues()
        .await
        .unwrap()
        .into_iter()
        .map(|info| info.name)
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        ["default", "new-0", "new-1", "new-2", "new-3", "new-4"]
    );
    assert_eq!(q.count("jobs").await, 40);
}
