//! The quickstart: enqueue a few jobs inside one transaction, run the worker pool until
//! they are done, print what happened.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! Connects to `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`) and
//! works in its own schema, `harel_quickstart`, which it drops and creates afresh each run
//! (so a schema left by an older release never gets in the way).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use harel_jobs::{Client, JobContext, JobError, JobResult, JobState, Schema, job};

/// What the handlers share: here, a way to report, and a count of finished jobs.
#[derive(Default)]
struct AppState {
    lines: Mutex<Vec<String>>,
    finished: AtomicUsize,
}

impl AppState {
    fn say(&self, line: String) {
        println!("  {line}");
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }
}

/// Sends the welcome mail (here: prints it).
#[job(max_attempts = 5, priority = 3)]
async fn send_welcome_email(
    ctx: JobContext<AppState>,
    #[group] user_id: i64,
    template: String,
) -> JobResult {
    ctx.state()
        .say(format!("mail {template:?} sent to user {user_id}"));
    ctx.state().finished.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// One step of an order's fulfilment. `#[group] order_id`: the steps of one order run one
/// at a time, in the order they were enqueued.
#[job]
async fn fulfil_order(
    ctx: JobContext<AppState>,
    #[group] order_id: i64,
    step: u32,
    action: String,
) -> JobResult {
    tokio::time::sleep(Duration::from_millis(20)).await;
    ctx.state()
        .say(format!("order {order_id}: step {step} ({action}) done"));
    ctx.state().finished.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Syncs with a partner whose API fails the first time: retried after a short backoff.
#[job(max_attempts = 3, backoff = "300ms")]
async fn sync_partner(ctx: JobContext<AppState>, partner: String) -> JobResult {
    if ctx.attempt() == 1 {
        ctx.state().say(format!(
            "partner {partner}: attempt 1 failed (timeout), retrying after the backoff"
        ));
        return Err(JobError::retry("partner API timed out"));
    }
    ctx.state().say(format!(
        "partner {partner}: synced on attempt {}",
        ctx.attempt()
    ));
    ctx.state().finished.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // warnings (a retry, a lost lease, a database error) go to stderr
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let started = Instant::now();

    // Connect (waiting for the database if it is starting) and create the queue's schema.
    let pool = harel_jobs::connect(&url).await?;
    sqlx::query("DROP SCHEMA IF EXISTS harel_quickstart CASCADE")
        .execute(&pool)
        .await?;
    // The client: a pool and the schema its queues live in.
    let client = Client::with_schema(pool.clone(), Schema::new("harel_quickstart")?);
    client.migrate().await?;

    // Enqueue inside one transaction: the jobs exist if and only if it commits.
    let mut tx = pool.begin().await?;
    let mut ids = Vec::new();
    let welcome = SendWelcomeEmail {
        user_id: 42,
        template: "welcome".into(),
    };
    ids.push(client.enqueue(&mut *tx, welcome).await?);
    for (step, action) in [(1, "reserve stock"), (2, "charge card"), (3, "ship")] {
        let fulfil = FulfilOrder {
            order_id: 7,
            step,
            action: action.into(),
        };
        ids.push(client.enqueue(&mut *tx, fulfil).await?);
    }
    let sync = SyncPartner {
        partner: "acme".into(),
    };
    ids.push(client.enqueue(&mut *tx, sync).await?);
    tx.commit().await?;
    let expected = ids.len();
    println!("harel-jobs quickstart: {expected} jobs enqueued in one transaction");

    // Run the embedded worker pool until every job is done, keeping completed jobs for an
    // hour so that we can look at them below.
    let worker = client
        .worker(AppState::default())
        .retain_completed(Duration::from_secs(3600))
        .register::<SendWelcomeEmail>()
        .register::<FulfilOrder>()
        .register::<SyncPartner>()
        .concurrency(8)
        .build()?;
    let handle = worker.start();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stats = client.stats().await?;
        if stats.is_idle() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("jobs still queued after 30 s: {stats:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = handle.shutdown().await?;
    println!(
        "done in {:.1} s: {} succeeded, {} retried, {} dead",
        started.elapsed().as_secs_f64(),
        stats.succeeded,
        stats.retried,
        stats.dead_lettered
    );
    if stats.succeeded as usize != expected || stats.dead_lettered != 0 {
        return Err("not every job succeeded".into());
    }

    // What became of each job, as the queue remembers it.
    for id in ids {
        let Some(job) = client.job(id).await? else {
            return Err(format!("job {id} is not retained").into());
        };
        let JobState::Completed { .. } = job.state else {
            return Err(format!("job {id} is {:?}", job.state).into());
        };
        let took = job.duration().unwrap_or_default();
        println!(
            "  job {id} {} (group {}): completed after {} attempt(s), last one {} ms",
            job.kind,
            job.group,
            job.attempts,
            took.as_millis()
        );
    }
    Ok(())
}
