//! Typed enqueueing against a real PostgreSQL: an `Enqueue`'s options, a `JobBatch` with
//! options per job, what is refused, and job ids.

use std::time::Duration;

use chrono::{DateTime, Utc};
use harel_jobs::{
    Enqueue, EnqueueOptions, InvalidMessage, Job, JobBatch, JobId, PublishError, transport,
};
use harel_jobs_suite::SuiteSchema;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Ping {
    n: u32,
}

impl Job for Ping {
    const KIND: &'static str = "ping";
}

/// When a job may start, as stored.
#[derive(Debug, PartialEq)]
enum Due {
    Now,
    /// `not_before` is this many µs after `enqueued_at`.
    After(i64),
    At(DateTime<Utc>),
}

/// A job's row: its group, its priority, its group's priority, when it is due (`At` when its
/// not-before time is `at`).
async fn row(q: &SuiteSchema, id: JobId, at: DateTime<Utc>) -> (String, i16, i16, Due) {
    let (group, priority, group_priority, not_before, after): (
        String,
        i16,
        i16,
        Option<DateTime<Utc>>,
        Option<i64>,
    ) = sqlx::query_as(q.sql(
        "SELECT m.group_id, m.priority, g.priority, m.not_before,
                (extract(epoch FROM m.not_before - m.enqueued_at) * 1e6)::bigint
           FROM @schema@.jobs m
           JOIN @schema@.transport_groups g USING (group_id)
          WHERE m.seq = $1",
    ))
    .bind(id.get())
    .fetch_one(&q.pool)
    .await
    .expect("the job's row");
    let due = match (not_before, after) {
        (None, _) => Due::Now,
        (Some(time), _) if time == at => Due::At(time),
        (Some(_), after) => Due::After(after.expect("not_before - enqueued_at")),
    };
    (group, priority, group_priority, due)
}

/// Each option of `JobBatch::push_with` is stored as the same option of a single `Enqueue`
/// is: group, priority (of the message and of the group it creates), delay (measured from
/// the enqueue on the database's clock) and not-before time. The last of delay and
/// not-before wins; options can be reused.
#[tokio::test]
async fn a_batch_job_gets_the_same_group_priority_delay_and_not_before_as_a_single_enqueue() {
    let q = SuiteSchema::new().await;
    let at: DateTime<Utc> = "2099-01-02T03:04:05.678901Z".parse().unwrap();
    let hour = Duration::from_millis(3_600_001);
    // (options, the same on a single enqueue, expected priority and due)
    type Single<'a> =
        fn(Enqueue<'a, Ping, &'a sqlx::PgPool>) -> Enqueue<'a, Ping, &'a sqlx::PgPool>;
    let cases: Vec<(EnqueueOptions, Single, i16, Due)> = vec![
        (EnqueueOptions::new(), |e| e, 2, Due::Now),
        (
            EnqueueOptions::new().priority(4),
            |e| e.priority(4),
            4,
            Due::Now,
        ),
        (
            EnqueueOptions::new().delay(hour),
            |e| e.delay(Duration::from_millis(3_600_001)),
            2,
            Due::After(3_600_001_000),
        ),
        (
            EnqueueOptions::new().not_before(at),
            |e| e.not_before("2099-01-02T03:04:05.678901Z".parse().unwrap()),
            2,
            Due::At(at),
        ),
        (
            EnqueueOptions::new()
                .priority(0)
                .not_before(at)
                .delay(Duration::from_secs(90)),
            |e| {
                e.priority(0)
                    .not_before("2099-01-02T03:04:05.678901Z".parse().unwrap())
                    .delay(Duration::from_secs(90))
            },
            0,
            Due::After(90_000_000),
        ),
    ];

    let mut batch = JobBatch::for_schema(&q.schema);
    for (n, (options, ..)) in cases.iter().enumerate() {
        batch.push_with(Ping { n: n as u32 }, options).unwrap();
    }
    let shared = EnqueueOptions::new().group("shared").priority(3);
    batch.push_with(Ping { n: 100 }, &shared).unwrap();
    batch.push_with(Ping { n: 101 }, &shared).unwrap();
    let ids = batch.enqueue(&q.pool).await.unwrap();
    assert_eq!(ids.len(), cases.len() + 2);

    for ((_, single, priority, due), id) in cases.iter().zip(&ids) {
        let single_id = single(Enqueue::new(Ping { n: 0 }, &q.pool))
            .schema(&q.schema)
            .await
            .unwrap();
        let in_batch = row(&q, *id, at).await;
        let alone = row(&q, single_id, at).await;
        for r in [&in_batch, &alone] {
            assert_eq!((r.1, r.2, &r.3), (*priority, *priority, due), "{r:?}");
            assert!(r.0.starts_with("own:"), "a group of its own: {r:?}");
        }
        assert_ne!(in_batch.0, alone.0, "each job gets a group of its own");
    }
    for id in &ids[cases.len()..] {
        assert_eq!(
            row(&q, *id, at).await,
            ("shared".to_owned(), 3, 3, Due::Now)
        );
    }
}

/// An out-of-range priority is one error type wherever it is refused, and nothing of it is
/// written: at `push_with` (the batch is unchanged) and at the await of an `Enqueue`.
#[tokio::test]
async fn an_out_of_range_priority_is_refused_at_push_and_at_enqueue_and_nothing_is_written() {
    let q = SuiteSchema::new().await;
    let mut batch = JobBatch::for_schema(&q.schema);
    batch.push(Ping { n: 1 }).unwrap();
    match batch.push_with(Ping { n: 2 }, &EnqueueOptions::new().priority(9)) {
        Err(PublishError::Invalid(InvalidMessage::InvalidPriority(e))) => assert_eq!(e.value(), 9),
        other => panic!("expected InvalidPriority, got {other:?}"),
    }
    assert_eq!(batch.len(), 1, "the refused job is not in the batch");
    match Enqueue::new(Ping { n: 3 }, &q.pool)
        .schema(&q.schema)
        .priority(5)
        .await
    {
        Err(PublishError::Invalid(InvalidMessage::InvalidPriority(e))) => {
            assert_eq!(e.value(), 5);
            assert_eq!(
                e.to_string(),
                "priority 5 is out of range: priorities are 0 (lowest) to 4 (highest)"
            );
        }
        other => panic!("expected InvalidPriority, got {other:?}"),
    }
    assert_eq!(q.count("jobs").await, 0);
    batch.enqueue(&q.pool).await.unwrap();
    assert_eq!(q.count("jobs").await, 1);
}

/// A batch over the limits is refused before it is sent, whichever way it is enqueued.
#[tokio::test]
async fn a_job_batch_over_the_limit_is_refused_and_nothing_is_written() {
    let q = SuiteSchema::new().await;
    let mut batch = JobBatch::for_schema(&q.schema);
    for n in 0..=transport::MAX_BATCH_MESSAGES as u32 {
        batch
            .push_with(Ping { n }, &harel_jobs::EnqueueOptions::new().group("g"))
            .unwrap();
    }
    match batch.enqueue(&q.pool).await {
        Err(PublishError::Invalid(InvalidMessage::TooManyMessages { count, max })) => {
            assert_eq!(
                (count, max),
                (
                    transport::MAX_BATCH_MESSAGES + 1,
                    transport::MAX_BATCH_MESSAGES
                )
            );
        }
        other => panic!("expected TooManyMessages, got {other:?}"),
    }
    assert_eq!(q.count("jobs").await, 0);
    assert_eq!(q.count("transport_groups").await, 0);
}

/// The ids an enqueue returns are the messages' sequence numbers, and round-trip through
/// text as a tool would take them.
#[tokio::test]
async fn job_ids_are_the_sequence_numbers_and_parse_back() {
    let q = SuiteSchema::new().await;
    let first = Enqueue::new(Ping { n: 1 }, &q.pool)
        .schema(&q.schema)
        .await
        .unwrap();
    let second = Enqueue::new(Ping { n: 2 }, &q.pool)
        .schema(&q.schema)
        .await
        .unwrap();
    assert!(second > first, "ids increase in enqueue order");
    let seqs: Vec<i64> = sqlx::query_scalar(q.sql("SELECT seq FROM @schema@.jobs ORDER BY seq"))
        .fetch_all(&q.pool)
        .await
        .unwrap();
    assert_eq!(seqs, [i64::from(first), second.get()]);
    assert_eq!(first.to_string().parse::<JobId>().unwrap(), first);
    assert_eq!(JobId::new(seqs[1]), second);
}
