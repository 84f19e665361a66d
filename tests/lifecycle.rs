//! A job's life as users see and steer it, against a real PostgreSQL: `Client::job` in every
//! state, cancel (queued, racing a claim, running, lapsed, whole groups), retention and its
//! pruning.

use std::sync::Arc;
use std::time::{Duration, Instant};

use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage, Settlement};
use harel_jobs::{CancelOutcome, Client, Job, JobId, JobQuery, JobState};
use harel_jobs_suite::SuiteSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Note {
    n: u32,
}

impl Job for Note {
    const KIND: &'static str = "note";
}

fn queue(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

fn claim(lease: Duration, limit: u32) -> ClaimRequest {
    ClaimRequest::new(lease).limit(limit)
}

async fn state(queue: &Client, id: JobId) -> Option<JobState> {
    queue
        .job(id)
        .await
        .expect("look the job up")
        .map(|j| j.state)
}

/// Claims due jobs until `id` is among them; returns its lease.
async fn claim_job(q: &SuiteSchema, id: JobId) -> harel_jobs::transport::Lease {
    q.transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 100))
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.lease.id == id)
        .expect("the job was claimable")
        .lease
}

async fn publish(q: &SuiteSchema, group: &str, n: u32) -> JobId {
    let message = OutgoingMessage::serialize(group, Note::KIND, &Note { n }).unwrap();
    q.transport.publish(&q.pool, &message).await.unwrap()
}

/// Every state `Client::job` reports, each reached the way a worker reaches it.
#[tokio::test]
async fn a_job_is_found_in_every_state_it_goes_through() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);

    let id = queue.enqueue(&q.pool, Note { n: 1 }).await.unwrap();
    let info = queue.job(id).await.unwrap().expect("queued");
    assert_eq!(info.state, JobState::Waiting);
    assert_eq!((info.kind.as_str(), info.attempts), ("note", 0));
    assert_eq!(info.decode::<Note>().unwrap(), Note { n: 1 });
    assert_eq!(info.group, harel_jobs::transport::own_group(id.get()));

    let later = queue
        .enqueue(&q.pool, Note { n: 2 })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(matches!(
        state(&queue, later).await,
        Some(JobState::Scheduled { .. })
    ));

    // running: claimed, leased until about a minute from now
    let claimed = q
        .transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 10))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "only the due job");
    let lease = claimed[0].lease.clone();
    match state(&queue, id).await {
        Some(JobState::Running {
            since: Some(since),
            lease_until,
            cancel_requested: false,
        }) => assert!(lease_until - since > chrono::Duration::seconds(59)),
        other => panic!("expected running, got {other:?}"),
    }
    assert_eq!(queue.job(id).await.unwrap().unwrap().attempts, 1);

    // retrying: released with an error and a delay
    let released = Settlement::Release {
        delay: Duration::from_secs(600),
        error: Some("smtp down".into()),
        count_attempt: true,
    };
    let outcome = q.transport.settle(&q.pool, &lease, released).await.unwrap();
    assert_eq!(outcome, LeaseOutcome::Applied);
    let info = queue.job(id).await.unwrap().unwrap();
    assert!(matches!(info.state, JobState::Retrying { .. }), "{info:?}");
    assert_eq!(info.last_error.as_deref(), Some("smtp down"));
    assert_eq!(info.attempts, 1);

    // snoozed at its first attempt (given back uncounted, its group parked): scheduled at
    // the park's end, not waiting
    let snoozed = publish(&q, "snoozed", 4).await;
    let lease = claim_job(&q, snoozed).await;
    let snooze = Settlement::Release {
        delay: Duration::from_secs(600),
        error: None,
        count_attempt: false,
    };
    let outcome = q.transport.settle(&q.pool, &lease, snooze).await.unwrap();
    assert_eq!(outcome, LeaseOutcome::Applied);
    let info = queue.job(snoozed).await.unwrap().unwrap();
    match info.state {
        JobState::Scheduled { at } => assert!(at > chrono::Utc::now()),
        other => panic!("expected scheduled, got {other:?}"),
    }
    assert_eq!(info.attempts, 0);

    // completed with retention: kept, with its duration
    let kept = publish(&q, "kept", 3).await;
    let lease = claim_job(&q, kept).await;
    let retain = Settlement::Retain {
        keep: Duration::from_secs(3600),
    };
    assert!(
        q.transport
            .settle(&q.pool, &lease, retain)
            .await
            .unwrap()
            .is_applied()
    );
    let info = queue.job(kept).await.unwrap().expect("retained");
    assert!(
        matches!(
            info.state,
            JobState::Completed {
                started_at: Some(_),
                ..
            }
        ),
        "{info:?}"
    );
    assert!(info.duration().is_some());
    assert_eq!((info.group.as_str(), info.attempts), ("kept", 1));

    // completed without retention: gone
    let gone = publish(&q, "gone", 4).await;
    let lease = claim_job(&q, gone).await;
    assert!(q.transport.ack(&q.pool, &lease).await.unwrap().is_applied());
    assert_eq!(queue.job(gone).await.unwrap().map(|j| j.state), None);

    // dead
    let dead = publish(&q, "dead", 5).await;
    let lease = claim_job(&q, dead).await;
    let outcome = q
        .transport
        .settle(&q.pool, &lease, Settlement::dead_letter("bad address"))
        .await
        .unwrap();
    assert!(outcome.is_applied());
    let info = queue.job(dead).await.unwrap().unwrap();
    assert!(matches!(info.state, JobState::Dead { .. }));
    assert_eq!(info.last_error.as_deref(), Some("bad address"));

    assert!(queue.job(JobId::new(i64::MAX)).await.unwrap().is_none());
}

/// A queued job is cancelled at once, recorded with its reason, and its group moves on: a
/// job behind the head leaves alone, the head lets the next job through.
#[tokio::test]
async fn cancelling_a_queued_job_ends_it_at_once_and_its_group_moves_on() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let first = publish(&q, "user-1", 1).await;
    let second = publish(&q, "user-1", 2).await;
    let third = publish(&q, "user-1", 3).await;

    let outcome = queue
        .cancel(second)
        .reason("asked by support")
        .await
        .unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled);
    assert_eq!(
        state(&queue, second).await,
        Some(JobState::Cancelled {
            at: match state(&queue, second).await {
                Some(JobState::Cancelled { at, .. }) => at,
                other => panic!("{other:?}"),
            },
            reason: Some("asked by support".into()),
        })
    );
    assert_eq!(
        queue.cancel(second).await.unwrap(),
        CancelOutcome::AlreadyCancelled
    );

    assert_eq!(queue.cancel(first).await.unwrap(), CancelOutcome::Cancelled);
    // the group's next job is the third, claimable at once
    let claimed = q
        .transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 10))
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|m| m.lease.id).collect::<Vec<_>>(),
        [third]
    );
    assert!(
        q.transport
            .ack(&q.pool, &claimed[0].lease)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        q.count("transport_groups").await,
        0,
        "drained group dropped"
    );
    assert_eq!(queue.cancel(third).await.unwrap(), CancelOutcome::NotFound);

    // a retrying head (parked by a failed attempt) is cancelled at once too
    let retried = publish(&q, "user-2", 4).await;
    let lease = q
        .transport
        .claim(&q.pool, &claim(Duration::from_secs(60), 1))
        .await
        .unwrap()
        .expect("claimed")
        .lease;
    let release = Settlement::Release {
        delay: Duration::from_secs(3600),
        error: Some("try later".into()),
        count_attempt: true,
    };
    assert!(
        q.transport
            .settle(&q.pool, &lease, release)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        queue.cancel(retried).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(q.count("transport_groups").await, 0);
    // history keeps the attempt and the error
    let info = queue.job(retried).await.unwrap().unwrap();
    assert_eq!(
        (info.attempts, info.last_error.as_deref()),
        (1, Some("try later"))
    );
}

/// A claim and a cancel racing for one job: either the claim leased it (the cancel says it
/// is running) or the cancel ended it (and no claim ever returns it). Never both, never
/// neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_racing_a_claim_either_stops_the_job_before_it_runs_or_finds_it_running() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let (mut ran, mut stopped) = (0, 0);
    for round in 0..200u32 {
        let id = publish(&q, &format!("race-{round}"), round).await;
        let transport = q.transport.clone();
        let pool = q.pool.clone();
        let claimer = tokio::spawn(async move {
            transport
                .claim_many(&pool, &claim(Duration::from_secs(60), 10))
                .await
                .unwrap()
        });
        let cancelled = queue.cancel(id).await.unwrap();
        let claimed = claimer.await.unwrap();
        let got_it = claimed.iter().any(|m| m.lease.id == id);
        match cancelled {
            CancelOutcome::Cancelled => {
                assert!(!got_it, "round {round}: cancelled and claimed");
                stopped += 1;
            }
            CancelOutcome::Requested => {
                assert!(got_it, "round {round}: running, but nobody claimed it");
                ran += 1;
            }
            other => panic!("round {round}: {other:?}"),
        }
        for message in claimed {
            let _ = q.transport.ack(&q.pool, &message.lease).await.unwrap();
        }
    }
    let leftover = q
        .transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 1000))
        .await
        .unwrap();
    assert!(leftover.is_empty(), "a cancelled job stayed claimable");
    eprintln!("claim first: {ran}, cancel first: {stopped}");
}

/// A running job's cancel is recorded; its lease holder is told at the next heartbeat; its
/// settlement, whatever it says, ends it as cancelled; and its group moves on.
#[tokio::test]
async fn a_running_jobs_cancel_reaches_its_heartbeat_and_ends_it_as_cancelled() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let running = publish(&q, "user-3", 1).await;
    let next = publish(&q, "user-3", 2).await;
    let lease = q
        .transport
        .claim(&q.pool, &claim(Duration::from_secs(60), 1))
        .await
        .unwrap()
        .expect("claimed")
        .lease;

    let status = q
        .transport
        .heartbeat(
            &q.pool,
            std::slice::from_ref(&lease),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(status, [harel_jobs::transport::LeaseStatus::Held]);

    let outcome = queue.cancel(running).reason("user deleted").await.unwrap();
    assert_eq!(outcome, CancelOutcome::Requested);
    let info = queue.job(running).await.unwrap().expect("running");
    assert!(matches!(
        info.state,
        JobState::Running {
            cancel_requested: true,
            ..
        }
    ));
    // the pending cancel's reason is visible while its lease holder still runs it
    assert_eq!(info.cancel_reason.as_deref(), Some("user deleted"));
    // the job's group's next job, not running, has none
    let waiting = queue.job(next).await.unwrap().expect("queued");
    assert_eq!(waiting.cancel_reason, None);
    let status = q
        .transport
        .heartbeat(
            &q.pool,
            std::slice::from_ref(&lease),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(
        status,
        [harel_jobs::transport::LeaseStatus::CancelRequested]
    );
    // told, and still running until it settles: the reason is still there
    let info = queue.job(running).await.unwrap().expect("running");
    assert!(matches!(info.state, JobState::Running { .. }), "{info:?}");
    assert_eq!(info.cancel_reason.as_deref(), Some("user deleted"));

    // the handler failed (or succeeded: the same) — cancelled either way, not retried
    let release = Settlement::Release {
        delay: Duration::ZERO,
        error: Some("interrupted".into()),
        count_attempt: true,
    };
    let settled = q.transport.settle(&q.pool, &lease, release).await.unwrap();
    assert_eq!(settled, LeaseOutcome::Cancelled);
    match state(&queue, running).await {
        Some(JobState::Cancelled { reason, .. }) => {
            assert_eq!(reason.as_deref(), Some("user deleted"))
        }
        other => panic!("expected cancelled, got {other:?}"),
    }
    let claimed = q
        .transport
        .claim(&q.pool, &claim(Duration::from_secs(60), 1))
        .await
        .unwrap()
        .expect("the group moved on");
    assert_eq!(claimed.lease.id, next);
}

/// A running job whose cancel was asked for and whose worker died: the claim that finds its
/// lapsed lease ends it as cancelled, and it never runs again.
#[tokio::test]
async fn a_cancelled_job_whose_worker_died_never_runs_again() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let id = publish(&q, "user-4", 1).await;
    let first = q
        .transport
        .claim(&q.pool, &claim(Duration::from_millis(300), 1))
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(queue.cancel(id).await.unwrap(), CancelOutcome::Requested);
    tokio::time::sleep(Duration::from_millis(400)).await; // the lease lapses
    let again = q
        .transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 10))
        .await
        .unwrap();
    assert!(again.is_empty(), "ran again: {again:?}");
    assert!(matches!(
        state(&queue, id).await,
        Some(JobState::Cancelled { .. })
    ));
    assert_eq!(q.count("transport_groups").await, 0);
    // the dead worker's late outcome changes nothing
    let late = q.transport.ack(&q.pool, &first.lease).await.unwrap();
    assert_eq!(late, LeaseOutcome::LeaseLost);
}

/// Cancelling a group: every queued job (more than one round trip's worth) ends as
/// cancelled, a running one is asked to stop, and nothing of the group runs afterwards.
#[tokio::test]
async fn cancelling_a_group_cancels_its_queued_jobs_and_asks_its_running_one_to_stop() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let mut batch = queue.batch();
    for n in 0..2_500u32 {
        batch
            .push_with(
                Note { n },
                &harel_jobs::EnqueueOptions::new().group("user-5"),
            )
            .unwrap();
    }
    batch
        .push_with(
            Note { n: 9_999 },
            &harel_jobs::EnqueueOptions::new().group("user-6"),
        )
        .unwrap();
    let ids = batch.enqueue(&q.pool).await.unwrap();

    // not running: all 2,500 go, the group row too
    let outcome = queue
        .cancel_group("user-5")
        .reason("user deleted")
        .await
        .unwrap();
    assert_eq!(
        outcome,
        CancelOutcome::Group {
            cancelled: 2_500,
            running_requested: false
        }
    );
    assert!(matches!(
        state(&queue, ids[0]).await,
        Some(JobState::Cancelled { .. })
    ));
    assert!(matches!(
        state(&queue, ids[2_499]).await,
        Some(JobState::Cancelled { .. })
    ));
    assert_eq!(q.count("job_history").await, 2_500);

    // running: the others go, the running one is asked to stop
    let mut batch = queue.batch();
    for n in 0..3u32 {
        batch
            .push_with(
                Note { n },
                &harel_jobs::EnqueueOptions::new().group("user-7"),
            )
            .unwrap();
    }
    let ids7 = batch.enqueue(&q.pool).await.unwrap();
    let claimed = q
        .transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 10))
        .await
        .unwrap();
    let lease = claimed
        .iter()
        .find(|m| m.lease.id == ids7[0])
        .expect("head of user-7 claimed")
        .lease
        .clone();
    let outcome = queue.cancel_group("user-7").await.unwrap();
    assert_eq!(
        outcome,
        CancelOutcome::Group {
            cancelled: 2,
            running_requested: true
        }
    );
    assert_eq!(
        q.transport.ack(&q.pool, &lease).await.unwrap(),
        LeaseOutcome::Cancelled
    );
    for id in ids7 {
        assert!(matches!(
            state(&queue, id).await,
            Some(JobState::Cancelled { .. })
        ));
    }
    // the other group is untouched
    assert!(!matches!(
        state(&queue, ids[2_500]).await,
        Some(JobState::Cancelled { .. }) | None
    ));
    assert_eq!(
        queue.cancel_group("nobody").await.unwrap(),
        CancelOutcome::Group {
            cancelled: 0,
            running_requested: false
        }
    );
}

/// Bad arguments are typed errors that send nothing.
#[tokio::test]
async fn a_cancel_with_bad_arguments_is_refused_before_it_is_sent() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let id = publish(&q, "user-8", 1).await;
    let long = "x".repeat(harel_jobs::MAX_REASON_BYTES + 1);
    let refused = queue.cancel(id).reason(long).await;
    assert!(matches!(
        refused,
        Err(harel_jobs::ClientError::InvalidArgument(_))
    ));
    let refused = queue
        .cancel(id)
        .keep(Duration::from_secs(200 * 365 * 24 * 3600))
        .await;
    assert!(matches!(
        refused,
        Err(harel_jobs::ClientError::InvalidArgument(_))
    ));
    assert!(matches!(
        queue.cancel_group("").await,
        Err(harel_jobs::ClientError::InvalidArgument(_))
    ));
    assert_eq!(state(&queue, id).await, Some(JobState::Waiting));
}

/// The maintenance call prunes history past its keep period, in bounded batches.
#[tokio::test]
async fn history_is_pruned_after_its_keep_period() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let short = publish(&q, "short", 1).await;
    let long = publish(&q, "long", 2).await;
    queue
        .cancel(short)
        .keep(Duration::from_millis(1))
        .await
        .unwrap();
    queue.cancel(long).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let started = Instant::now();
    let (_, _, pruned): (i32, i64, i64) =
        sqlx::query_as(q.sql("SELECT * FROM @schema@.harel_maintain()"))
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert_eq!(pruned, 1);
    assert!(state(&queue, short).await.is_none());
    assert!(matches!(
        state(&queue, long).await,
        Some(JobState::Cancelled { .. })
    ));
    eprintln!("maintain took {:?}", started.elapsed());
}

mod with_a_worker {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    use harel_jobs::{
        CancelOutcome, Client, CompleteError, Handler, Job, JobContext, JobOptions, JobResult,
        JobState,
    };
    use harel_jobs_suite::SuiteSchema;
    use serde::{Deserialize, Serialize};
    use sqlx::PgPool;
    use tokio::sync::Notify;

    /// What the handlers share with the test.
    #[derive(Default)]
    struct Probe {
        started: Notify,
        proceed: Notify,
        saw_cancel: AtomicU32,
        runs: AtomicU32,
        lost: AtomicU32,
    }

    #[derive(Clone)]
    struct State {
        probe: Arc<Probe>,
        pool: PgPool,
        table: String,
    }

    /// Runs until its context says stop, then fails: a cancel must still end it as
    /// cancelled, not as a failure to retry.
    #[derive(Serialize, Deserialize)]
    struct Stubborn;

    impl Job for Stubborn {
        const KIND: &'static str = "stubborn";
    }

    impl Handler<State> for Stubborn {
        async fn handle(self, ctx: JobContext<State>) -> JobResult {
            ctx.state().probe.started.notify_one();
            ctx.cancelled().await;
            if ctx.cancel_requested() {
                ctx.state().probe.saw_cancel.fetch_add(1, Ordering::SeqCst);
            }
            Err("stopped".into())
        }
    }

    /// Inserts a row and completes its job in the same transaction; the first run waits
    /// for the test between the two.
    #[derive(Serialize, Deserialize)]
    struct Credit {
        n: i32,
    }

    impl Job for Credit {
        const KIND: &'static str = "credit";
        fn options() -> JobOptions {
            JobOptions::new().retain(Duration::from_secs(3600))
        }
    }

    impl Handler<State> for Credit {
        async fn handle(self, ctx: JobContext<State>) -> JobResult {
            let state = ctx.state();
            let run = state.probe.runs.fetch_add(1, Ordering::SeqCst);
            let mut tx = state.pool.begin().await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {} (n, run) VALUES ($1, $2)",
                state.table
            )))
            .bind(self.n)
            .bind(run as i32)
            .execute(&mut *tx)
            .await?;
            if run == 0 {
                state.probe.started.notify_one();
                state.probe.proceed.notified().await;
            }
            match ctx.complete_in(&mut tx).await {
                Ok(()) => {
                    tx.commit().await?;
                    Ok(())
                }
                Err(CompleteError::LeaseLost) => {
                    state.probe.lost.fetch_add(1, Ordering::SeqCst);
                    tx.rollback().await?;
                    Err("lease lost".into())
                }
                Err(other) => Err(other.into()),
            }
        }
    }

    async fn setup(q: &SuiteSchema) -> State {
        let table = format!("\"{}\".credits", q.schema.name());
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (n INT NOT NULL, run INT NOT NULL)"
        )))
        .execute(&q.pool)
        .await
        .unwrap();
        State {
            probe: Arc::default(),
            pool: q.pool.clone(),
            table,
        }
    }

    async fn wait_for_state(
        queue: &Client,
        id: harel_jobs::JobId,
        done: impl Fn(&JobState) -> bool,
    ) -> JobState {
        let started = Instant::now();
        loop {
            if let Some(info) = queue.job(id).await.unwrap()
                && done(&info.state)
            {
                return info.state;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "state never reached"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A worker's running job: the cancel reaches the handler within a heartbeat, and the
    /// job ends as cancelled though the handler returned an error (no retry).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_reaches_a_running_handler_and_the_job_ends_cancelled() {
        let q = SuiteSchema::new().await;
        let state = setup(&q).await;
        let probe = Arc::clone(&state.probe);
        let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
        let worker = queue
            .worker(state)
            .register::<Stubborn>()
            // a heartbeat every 500 ms: the cancel arrives within it, and a busy machine
            // does not let the lease lapse first (a lapse ends the job as cancelled too,
            // by the next claim, but not through this worker)
            .lease(Duration::from_millis(1500))
            .build()
            .unwrap()
            .start();
        let id = queue.enqueue(&q.pool, Stubborn).await.unwrap();
        probe.started.notified().await;
        assert_eq!(
            queue.cancel(id).reason("test").await.unwrap(),
            CancelOutcome::Requested
        );
        let ended = wait_for_state(&queue, id, |s| !matches!(s, JobState::Running { .. })).await;
        assert!(matches!(ended, JobState::Cancelled { .. }), "{ended:?}");
        assert_eq!(probe.saw_cancel.load(Ordering::SeqCst), 1);
        // counted once the settle has returned, which may be after its commit is seen:
        // read when the pool has stopped
        let stats = worker.shutdown().await.unwrap();
        assert_eq!((stats.cancelled, stats.retried), (1, 0));
    }

    /// Fenced transactional completion: the first run's lease is taken over while it is
    /// between its write and its completion; the second run writes and completes; the
    /// first one's completion fails and it rolls back. Exactly one row, and the job is
    /// retained as completed once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn completing_in_the_handlers_transaction_gives_exactly_one_effect() {
        let q = SuiteSchema::new().await;
        let state = setup(&q).await;
        let probe = Arc::clone(&state.probe);
        let queue = Client::with_schema(q.pool.clone(), q.schema.clone());
        let first = queue
            .worker(state.clone())
            .register::<Credit>()
            .build()
            .unwrap()
            .start();
        let id = queue.enqueue(&q.pool, Credit { n: 7 }).await.unwrap();
        probe.started.notified().await;
        // the first run's lease lapses (as if its heartbeats stopped) … (a time bound,
        // not clock_timestamp(): Citus takes no volatile function in an UPDATE)
        sqlx::query(q.sql("UPDATE @schema@.transport_groups SET available_at = $1"))
            .bind(chrono::Utc::now() - chrono::Duration::seconds(1))
            .execute(&q.pool)
            .await
            .unwrap();
        // … and another worker takes the job over and runs it to the end
        let second = queue
            .worker(state.clone())
            .register::<Credit>()
            .build()
            .unwrap()
            .start();
        wait_for_state(&queue, id, |s| matches!(s, JobState::Completed { .. })).await;
        probe.proceed.notify_one();
        let started = Instant::now();
        while probe.lost.load(Ordering::SeqCst) == 0 {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        second.shutdown().await.unwrap();
        first.shutdown().await.unwrap();
        let rows: Vec<(i32, i32)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT n, run FROM {}",
            state.table
        )))
        .fetch_all(&q.pool)
        .await
        .unwrap();
        assert_eq!(rows, [(7, 1)], "only the second run's write committed");
        let info = queue.job(id).await.unwrap().unwrap();
        assert!(matches!(info.state, JobState::Completed { .. }));
        assert_eq!(info.attempts, 2);
    }
}

/// Listing: every job exactly once, in id order, across pages; filters by state, kind and
/// group; and a filter that keeps few rows gives short pages with a cursor, never a skip.
#[tokio::test]
async fn jobs_are_listed_by_state_kind_and_group_page_by_page() {
    use harel_jobs::StateFilter;
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let mut batch = queue.batch();
    for n in 0..2_100u32 {
        batch
            .push_with(Note { n }, &harel_jobs::EnqueueOptions::new().group("bulk"))
            .unwrap();
    }
    let bulk = batch.enqueue(&q.pool).await.unwrap();
    // 2,100 cancelled (more than one call reads from one table), then a few of each state
    queue.cancel_group("bulk").await.unwrap();
    let waiting = publish(&q, "w", 1).await;
    let scheduled = queue
        .enqueue(&q.pool, Note { n: 2 })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let dead = publish(&q, "d", 3).await;
    let lease = q
        .transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 10))
        .await
        .unwrap();
    for message in lease {
        if message.lease.id == dead {
            let _ = q
                .transport
                .settle(&q.pool, &message.lease, Settlement::dead_letter("x"))
                .await
                .unwrap();
        }
    }
    let running = waiting; // claimed above with the dead one

    // everything, 500 a page: each id once, in order
    let mut seen = Vec::new();
    let mut query = JobQuery::new().limit(500);
    let mut pages = 0;
    loop {
        let page = queue.jobs(&query).await.unwrap();
        pages += 1;
        seen.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
        assert!(pages < 100);
    }
    let mut expected: Vec<JobId> = bulk.clone();
    expected.extend([running, scheduled, dead]);
    expected.sort();
    assert_eq!(seen, expected);

    // newest first, 500 a page: the same ids the other way round (the 2,100 cancelled
    // rows crossed from above)
    let mut newest = Vec::new();
    let mut query = JobQuery::new().newest_first().limit(500);
    let mut pages = 0;
    loop {
        let page = queue.jobs(&query).await.unwrap();
        pages += 1;
        newest.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
        assert!(pages < 100);
    }
    let mut reversed = expected.clone();
    reversed.reverse();
    assert_eq!(newest, reversed);
    // and filtered, in short pages: the queued ones first, then nothing skipped below
    let mut found = Vec::new();
    let mut query = JobQuery::new()
        .newest_first()
        .state(StateFilter::Queued)
        .limit(1);
    loop {
        let page = queue.jobs(&query).await.unwrap();
        found.extend(page.jobs.iter().map(|j| j.id));
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
    }
    assert_eq!(found, [scheduled, running]);
    let cancelled = queue
        .jobs(
            &JobQuery::new()
                .newest_first()
                .group("bulk")
                .state(StateFilter::Cancelled)
                .limit(1000),
        )
        .await
        .unwrap();
    assert_eq!(cancelled.jobs.len(), 1000);
    assert_eq!(cancelled.jobs[0].id, bulk[2_099]);
    assert_eq!(cancelled.next, Some(bulk[1_100]));

    // by state: the queued ones are past 2,100 cancelled rows; short pages, no skip
    let mut found = Vec::new();
    let mut query = JobQuery::new().state(StateFilter::Queued).limit(10);
    loop {
        let page = queue.jobs(&query).await.unwrap();
        found.extend(page.jobs.iter().map(|j| (j.id, j.state.clone())));
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
    }
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(matches!(found[0], (id, JobState::Running { .. }) if id == running));
    assert!(matches!(found[1], (id, JobState::Scheduled { .. }) if id == scheduled));

    let dead_page = queue
        .jobs(&JobQuery::new().state(StateFilter::Dead))
        .await
        .unwrap();
    assert_eq!(
        dead_page.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        [dead]
    );
    assert_eq!(dead_page.next, None);

    let group = queue
        .jobs(
            &JobQuery::new()
                .group("bulk")
                .state(StateFilter::Cancelled)
                .limit(1000),
        )
        .await
        .unwrap();
    assert_eq!(group.jobs.len(), 1000);
    assert_eq!(group.next, Some(bulk[999]));
    assert!(
        queue
            .jobs(&JobQuery::new().kind("nothing"))
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    assert!(matches!(
        queue.jobs(&JobQuery::new().limit(0)).await,
        Err(harel_jobs::ClientError::InvalidArgument(_))
    ));
}

/// Bulk retry and delete of dead letters: one statement each, letters of a group put back
/// in id order (FIFO kept), each into its own queue, unknown ids left out.
#[tokio::test]
async fn dead_letters_are_retried_and_deleted_in_bulk() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    sqlx::raw_sql(q.sql(
        "INSERT INTO @schema@.dead_letters
             (id, group_id, kind, payload, priority, attempts, last_error, enqueued_at, queue)
         VALUES (1001, 'g', 'note', '{\"n\":1}', 2, 3, 'x', now(), 'default'),
                (1002, 'g', 'note', '{\"n\":2}', 2, 3, 'x', now(), 'default'),
                (1003, 'g', 'note', '{\"n\":3}', 2, 3, 'x', now(), 'default'),
                (1004, 'm', 'note', '{\"n\":4}', 2, 3, 'x', now(), 'mail'),
                (1005, 'h', 'note', '{\"n\":5}', 2, 3, 'x', now(), 'default'),
                (1006, 'h', 'note', '{\"n\":6}', 2, 3, 'x', now(), 'default')",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let dead = queue.dead_letters();
    let ids = |raw: &[i64]| raw.iter().map(|&id| JobId::new(id)).collect::<Vec<_>>();

    // out of order, with an id that is no dead letter
    let retried = dead
        .retry_many(&ids(&[1003, 1004, 9999, 1001, 1002]))
        .await
        .unwrap();
    let old: Vec<i64> = retried.iter().map(|(old, _)| old.get()).collect();
    assert_eq!(old, [1001, 1002, 1003, 1004]);
    let new: Vec<JobId> = retried.iter().map(|&(_, new)| new).collect();
    assert!(new.windows(2).all(|w| w[0] < w[1]), "{new:?}");

    let in_g = queue.jobs(&JobQuery::new().group("g")).await.unwrap().jobs;
    let payloads: Vec<Note> = in_g.iter().map(|j| j.decode().unwrap()).collect();
    assert_eq!(payloads, [Note { n: 1 }, Note { n: 2 }, Note { n: 3 }]);
    let mail = queue.job(new[3]).await.unwrap().expect("retried into mail");
    assert_eq!(mail.queue, "mail");
    assert_eq!(mail.attempts, 0);
    assert!(matches!(mail.state, JobState::Waiting));

    let deleted = dead.delete_many(&ids(&[1006, 1001, 1005])).await.unwrap();
    assert_eq!(deleted, ids(&[1005, 1006]));
    assert_eq!(dead.count().await.unwrap(), 0);
    assert!(dead.retry_many(&[]).await.unwrap().is_empty());
    assert!(dead.delete_many(&[]).await.unwrap().is_empty());
}

/// Deletes go through bounded functions (issue 42, item 12): `delete_many` takes at most
/// 1,000 ids (a typed refusal, nothing deleted), and `purge` deletes every letter that failed
/// before its time, 1,000 a statement, however many there are, and leaves the later ones.
#[tokio::test]
async fn dead_letters_are_deleted_and_purged_in_bounded_statements() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    sqlx::raw_sql(q.sql(
        "INSERT INTO @schema@.dead_letters
             (id, group_id, kind, payload, priority, attempts, last_error, enqueued_at,
              failed_at, queue)
         SELECT n, 'g' || n, 'note', '{}', 2, 3, 'x', now(),
                now() - CASE WHEN n <= 2500 THEN interval '2 days' ELSE interval '1 hour' END,
                'default'
           FROM generate_series(1, 2600) AS n",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let dead = queue.dead_letters();
    let too_many: Vec<JobId> = (1..=1001).map(JobId::new).collect();
    assert!(matches!(
        dead.delete_many(&too_many).await,
        Err(harel_jobs::ClientError::InvalidArgument(_))
    ));
    assert_eq!(dead.count().await.unwrap(), 2600);
    let purged = dead
        .purge(chrono::Utc::now() - chrono::TimeDelta::days(1))
        .await
        .unwrap();
    assert_eq!(purged, 2500);
    assert_eq!(dead.count().await.unwrap(), 100);
}

/// A dead letter of a job without a group goes back without one: into a group of its own
/// named after its new id (callers cannot name a group so), also for a letter of a job that
/// an older release had retried into a group named after its first id.
#[tokio::test]
async fn a_dead_letter_of_a_job_without_a_group_is_retried_into_a_group_of_its_own() {
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    sqlx::raw_sql(q.sql(
        "INSERT INTO @schema@.dead_letters
             (id, group_id, kind, payload, priority, attempts, last_error, enqueued_at, queue)
         VALUES (1001, 'own:0000000000000001001', 'note', '{\"n\":1}', 2, 3, 'x', now(),
                 'default'),
                (1002, 'own:0000000000000000007', 'note', '{\"n\":2}', 2, 3, 'x', now(),
                 'default')",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let retried = queue
        .dead_letters()
        .retry_many(&[JobId::new(1001), JobId::new(1002)])
        .await
        .expect("retried");
    assert_eq!(retried.len(), 2);
    for (_, new) in retried {
        let job = queue.job(new).await.unwrap().expect("queued again");
        assert_eq!(
            job.group,
            harel_jobs::transport::own_group(new.get()),
            "{job:?}"
        );
        assert!(matches!(job.state, JobState::Waiting));
    }
}

/// `Client::run_now`: a retrying or scheduled job due at once; a running or finished one
/// refused; a job behind another in its group stays behind it.
#[tokio::test]
async fn run_now_makes_a_waiting_job_due_and_keeps_its_groups_order() {
    use harel_jobs::RunNowOutcome;
    let q = SuiteSchema::new().await;
    let queue = queue(&q);
    let hour = Duration::from_secs(3600);

    // retrying: an attempt failed, its next an hour away; made due, a claim takes it at once
    let retrying = publish(&q, "retry", 1).await;
    let lease = claim_job(&q, retrying).await;
    let release = Settlement::Release {
        delay: hour,
        error: Some("smtp down".into()),
        count_attempt: true,
    };
    assert!(
        q.transport
            .settle(&q.pool, &lease, release)
            .await
            .unwrap()
            .is_applied()
    );
    assert!(matches!(
        state(&queue, retrying).await,
        Some(JobState::Retrying { .. })
    ));
    assert_eq!(queue.run_now(retrying).await.unwrap(), RunNowOutcome::Due);
    // still counted as retrying (an attempt failed), its next attempt due now
    match state(&queue, retrying).await {
        Some(JobState::Retrying { after }) => assert!(after <= chrono::Utc::now()),
        other => panic!("expected a due retry, got {other:?}"),
    }
    let lease = claim_job(&q, retrying).await;
    assert_eq!(queue.job(retrying).await.unwrap().unwrap().attempts, 2);
    // running: refused
    assert_eq!(
        queue.run_now(retrying).await.unwrap(),
        RunNowOutcome::Running
    );
    // completed (retained): refused
    let retain = Settlement::Retain { keep: hour };
    assert!(
        q.transport
            .settle(&q.pool, &lease, retain)
            .await
            .unwrap()
            .is_applied()
    );
    assert_eq!(
        queue.run_now(retrying).await.unwrap(),
        RunNowOutcome::Finished
    );

    // scheduled in a group of its own: due at once
    let later = OutgoingMessage::serialize("unused", Note::KIND, &Note { n: 2 })
        .unwrap()
        .in_own_group()
        .delay(hour);
    let scheduled = q.transport.publish(&q.pool, &later).await.unwrap();
    assert!(matches!(
        state(&queue, scheduled).await,
        Some(JobState::Scheduled { .. })
    ));
    assert_eq!(queue.run_now(scheduled).await.unwrap(), RunNowOutcome::Due);
    assert_eq!(state(&queue, scheduled).await, Some(JobState::Waiting));
    claim_job(&q, scheduled).await;

    // behind another job of its group: its time dropped, its place kept
    let first = publish(&q, "fifo", 3).await;
    let behind = OutgoingMessage::serialize("fifo", Note::KIND, &Note { n: 4 })
        .unwrap()
        .delay(hour);
    let second = q.transport.publish(&q.pool, &behind).await.unwrap();
    assert!(matches!(
        state(&queue, second).await,
        Some(JobState::Scheduled { .. })
    ));
    assert_eq!(queue.run_now(second).await.unwrap(), RunNowOutcome::Behind);
    assert_eq!(state(&queue, second).await, Some(JobState::Waiting));
    // the claim takes the first, not the second
    let claimed = q
        .transport
        .claim_many(&q.pool, &claim(Duration::from_secs(60), 100))
        .await
        .unwrap();
    let ids: Vec<JobId> = claimed.iter().map(|m| m.lease.id).collect();
    assert_eq!(ids, [first]);
    assert_eq!(
        queue.run_now(second).await.unwrap(),
        RunNowOutcome::NotWaiting
    );
    // once the first is done, the second is due at once (not in an hour)
    assert!(
        q.transport
            .settle(&q.pool, &claimed[0].lease, Settlement::Ack)
            .await
            .unwrap()
            .is_applied()
    );
    claim_job(&q, second).await;

    // a waiting job waits for no time: nothing changes; an unknown id
    let waiting = publish(&q, "plain", 5).await;
    assert_eq!(
        queue.run_now(waiting).await.unwrap(),
        RunNowOutcome::NotWaiting
    );
    assert_eq!(
        queue.run_now(JobId::new(987_654_321)).await.unwrap(),
        RunNowOutcome::NotFound
    );
}

/// Enqueued once a second by the shutdown test's schedule; never registered.
#[derive(Serialize, Deserialize)]
struct Beat {
    at: chrono::DateTime<chrono::Utc>,
}

impl Job for Beat {
    const KIND: &'static str = "beat";
}

/// Holds its worker's shutdown until the test releases it.
#[derive(Serialize, Deserialize)]
struct Linger;

impl Job for Linger {
    const KIND: &'static str = "linger";
}

impl harel_jobs::Handler<Arc<tokio::sync::Semaphore>> for Linger {
    async fn handle(
        self,
        ctx: harel_jobs::JobContext<Arc<tokio::sync::Semaphore>>,
    ) -> harel_jobs::JobResult {
        let _permit = ctx.state().acquire().await;
        Ok(())
    }
}

/// Once a pool's graceful shutdown begins, its scheduler enqueues nothing more, although a
/// running handler keeps the pool alive for seconds (it used to go on ticking until the
/// handlers were done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutting_down_pool_enqueues_no_more_periodic_jobs() {
    let q = SuiteSchema::new().await;
    let c = queue(&q);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    c.enqueue(&q.pool, Linger).await.unwrap();
    let every = harel_jobs::Periodic::every("beat", Duration::from_secs(1)).unwrap();
    let handle = c
        .worker(Arc::clone(&gate))
        .register::<Linger>()
        .periodic(every, |at| Beat { at })
        .poll_interval(Duration::from_millis(50))
        .shutdown_grace(Duration::from_secs(30))
        .build()
        .unwrap()
        .start();
    let beats = || async {
        c.jobs(&JobQuery::new().kind("beat"))
            .await
            .unwrap()
            .jobs
            .len()
    };
    let started = Instant::now();
    while beats().await < 2 {
        assert!(started.elapsed() < Duration::from_secs(20), "no ticks");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // the handler runs (the pool has been up for two ticks); shut down behind it
    let shutdown = tokio::spawn(handle.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let at_shutdown = beats().await;
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert!(!shutdown.is_finished(), "the handler holds the shutdown");
    assert_eq!(
        beats().await,
        at_shutdown,
        "no tick enqueued during the shutdown's three seconds"
    );
    gate.add_permits(1);
    shutdown.await.unwrap().unwrap();
}
