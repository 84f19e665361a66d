//! The operator API under its 0.2 names: `Client`, whose dead letters carry its pool and
//! schema, and the names of 0.1 (`Queue`, `QueueStats`, `QueueError`, `TestQueue`,
//! `JobBatch::push_to_group`), deprecated, still compiling and doing the same.

use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage};
use harel_jobs::{
    Client, ClientError, Count, DeadLetterQuery, JobBatch, JobId, JobState, Stats, job,
};
use harel_jobs_suite::SuiteSchema;

const LEASE: Duration = Duration::from_secs(60);

/// Does nothing; enqueued, never run.
#[job]
async fn note(_ctx: harel_jobs::JobContext<()>, n: u32) -> harel_jobs::JobResult {
    let _ = n;
    Ok(())
}

fn client(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

/// Makes one dead letter in group `group` through the transport; returns its id.
async fn dead_letter(q: &SuiteSchema, group: &str) -> JobId {
    let t = &q.transport;
    t.publish(&q.pool, &OutgoingMessage::new(group, "note", r#"{"n":1}"#))
        .await
        .unwrap();
    let claimed = t
        .claim(&q.pool, &ClaimRequest::new(LEASE))
        .await
        .unwrap()
        .expect("a claim");
    let outcome = t.dead_letter(&q.pool, &claimed.lease, "broken").await;
    assert_eq!(outcome.unwrap(), LeaseOutcome::Applied);
    claimed.lease.id
}

/// The dead letters handle carries the client's pool and schema: no pool passed to any
/// call, and the `_in` twins run in the caller's transaction.
#[tokio::test]
async fn dead_letters_need_no_pool_passed() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let id = dead_letter(&q, "g").await;

    let dead = client.dead_letters();
    let letters = dead.list(&DeadLetterQuery::default()).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!((letters[0].id, letters[0].kind.as_str()), (id, "note"));
    assert_eq!(letters[0].last_error, "broken");
    assert_eq!(dead.count().await.unwrap(), 1);
    assert!(dead.get(id).await.unwrap().is_some());

    // retried in a transaction that rolls back: still a dead letter
    let mut tx = q.pool.begin().await.unwrap();
    assert!(dead.retry_in(&mut *tx, id).await.unwrap().is_some());
    assert_eq!(dead.count_in(&mut *tx).await.unwrap(), 0);
    tx.rollback().await.unwrap();
    assert_eq!(dead.count().await.unwrap(), 1);

    // retried on the client's pool: a job again, in its group
    let again = dead.retry(id).await.unwrap().expect("retried");
    assert_eq!(dead.count().await.unwrap(), 0);
    let job = client.job(again).await.unwrap().expect("the retried job");
    assert_eq!(job.state, JobState::Waiting);
    assert_eq!(job.group, "g");

    // an error is a ClientError like every other call's
    let error: ClientError = Client::with_schema(
        q.pool.clone(),
        harel_jobs::Schema::new("harel_no_such").unwrap(),
    )
    .dead_letters()
    .list(&DeadLetterQuery::default())
    .await
    .unwrap_err();
    assert!(matches!(error, ClientError::Database(_)), "{error:?}");
}

/// A client's figures are `Stats`, its errors `ClientError`.
#[tokio::test]
async fn stats_come_from_the_client() {
    let q = SuiteSchema::new().await;
    let client = client(&q);
    let stats: Stats = client.stats().await.unwrap();
    assert!(stats.is_idle());
    client
        .enqueue(&q.pool, Note { n: 1 })
        .await
        .expect("enqueue");
    let stats = client.stats().await.unwrap();
    assert_eq!(stats.jobs, Count::Exact(1));
    assert_eq!(stats, Stats::fetch(&q.pool, &q.schema).await.unwrap());
}

/// What 0.1 code wrote still compiles (with warnings) and does the same.
#[tokio::test]
#[allow(deprecated)]
async fn the_deprecated_names_still_work() {
    use harel_jobs::{Queue, QueueError, QueueStats};

    let q = SuiteSchema::new().await;
    let queue: Queue = Queue::with_schema(q.pool.clone(), q.schema.clone());
    let stats: QueueStats = queue.stats().await.unwrap();
    assert!(stats.is_idle());

    async fn look_up(queue: &Queue, id: JobId) -> Result<Option<JobState>, QueueError> {
        Ok(queue.job(id).await?.map(|job| job.state))
    }
    let id = queue.enqueue(&q.pool, Note { n: 1 }).await.unwrap();
    assert_eq!(look_up(&queue, id).await.unwrap(), Some(JobState::Waiting));

    // the deprecated push_to_group is push_with and a group
    let mut batch = JobBatch::for_schema(&q.schema);
    batch.push_to_group(Note { n: 2 }, "user-1").unwrap();
    let ids = batch.enqueue(&q.pool).await.unwrap();
    let job = queue.job(ids[0]).await.unwrap().expect("the batched job");
    assert_eq!(job.group, "user-1");
}

/// `testing::TestQueue` is `TestSchema`, and its `queue()` is `client()`.
#[tokio::test]
#[allow(deprecated)]
async fn the_deprecated_test_helper_names_still_work() {
    use harel_jobs::testing::{TestQueue as OldTestQueue, TestSchema};

    let old: OldTestQueue = OldTestQueue::with_pool(
        harel_jobs_suite::pool_with(&harel_jobs_suite::database_url(), 2).await,
    )
    .await
    .unwrap();
    let client: &Client = old.queue();
    assert_eq!(client.schema(), old.client().schema());
    client.enqueue(old.pool(), Note { n: 3 }).await.unwrap();
    let found = old.enqueued::<Note>(old.pool()).await.unwrap();
    assert_eq!(found.len(), 1);
    let renamed: TestSchema = old;
    renamed.cleanup().await.unwrap();
}

/// Issue 42, item 11 (RELIABILITY.md, "Hardening III", row 11): 120,000 queued jobs of
/// another queue, then 20,000 of queue `retired`. One read stops looking long before the
/// first match and says so, and where (`stopped_at`, which is `next`): never an empty page
/// that passes for "no job matches". Reading on reaches the matches, and walking the
/// pages from there finds every one of them, each page a bounded number of bounded reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_filter_reaches_its_jobs_behind_another_queues_or_says_where_it_stopped() {
    let q = SuiteSchema::new().await;
    let (first, last) = q.bury_matches_behind_others(120_000).await;
    let client = Client::with_schema(q.pool.clone(), q.schema.clone());
    let retired = harel_jobs::JobQuery::new()
        .queue("retired")
        .state(harel_jobs::StateFilter::Queued)
        .limit(1000);

    let page = client.jobs(&retired).await.unwrap();
    assert!(page.jobs.is_empty());
    let stopped = page.stopped_at.expect("the page says it stopped looking");
    assert_eq!(page.next, Some(stopped));
    assert!(stopped < first, "{stopped} {first}");

    let reading_on = retired.clone().read_on(harel_jobs::MAX_LIST_READS);
    let started = std::time::Instant::now();
    let page = client.jobs(&reading_on).await.unwrap();
    let took = started.elapsed();
    assert_eq!(page.jobs.len(), 1000, "stopped at {:?}", page.stopped_at);
    assert_eq!(page.jobs[0].id, first);
    assert!(page.jobs.iter().all(|job| job.queue == "retired"));
    assert_eq!(page.stopped_at, None);
    eprintln!("first page of the buried queue, reading on: {took:?}");

    // every match, page after page from there
    let (mut seen, mut pages, mut next) = (page.jobs.len(), 1, page.next);
    while let Some(after) = next {
        let page = client.jobs(&reading_on.clone().after(after)).await.unwrap();
        assert!(page.jobs.iter().all(|job| job.queue == "retired"));
        seen += page.jobs.len();
        pages += 1;
        next = page.next;
        assert!(pages <= 21, "{pages} pages");
    }
    assert_eq!(seen, 20_000);

    // newest first: the newest of them at once
    let newest = client
        .jobs(&retired.clone().newest_first().limit(10))
        .await
        .unwrap();
    assert_eq!(newest.jobs[0].id, last);
    assert_eq!(newest.stopped_at, None);
}
