//! `Stats`: exact on small tables, estimated past its window, and a bounded read
//! whatever the tables hold, dead row versions kept by a long-held snapshot included.

use std::time::Duration;

use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage, Priority};
use harel_jobs::{Count, Stats};
use harel_jobs_suite::SuiteSchema;
use sqlx::{Connection, PgConnection};

const LONG: Duration = Duration::from_secs(60);

/// Publishes `n` due jobs, each in a group of its own (`<prefix><i>`), 10,000 per round trip.
async fn publish(q: &SuiteSchema, prefix: &str, n: usize) {
    let mut conn = q.pool.acquire().await.unwrap();
    publish_on(q, &mut conn, prefix, n).await;
}

/// Runs `sql` (with `@schema@`) on the queue's pool.
async fn run(q: &SuiteSchema, sql: &str) {
    sqlx::query(q.sql(sql)).execute(&q.pool).await.unwrap();
}

/// [`publish`] on one connection.
async fn publish_on(q: &SuiteSchema, conn: &mut PgConnection, prefix: &str, n: usize) {
    for start in (0..n).step_by(10_000) {
        let chunk: Vec<OutgoingMessage> = (start..n.min(start + 10_000))
            .map(|i| OutgoingMessage::new(format!("{prefix}{i}"), "stats", "{}"))
            .collect();
        q.transport.publish_many(&mut *conn, &chunk).await.unwrap();
    }
}

/// [`run`] on one connection.
async fn run_on(q: &SuiteSchema, conn: &mut PgConnection, sql: &str) {
    sqlx::query(q.sql(sql)).execute(conn).await.unwrap();
}

/// Makes the row counts of what `conn` wrote visible in `pg_stat_user_tables` now. A
/// session sends them at most once a second, or within seconds once idle, so an estimate
/// read just after its writes would depend on timing (PostgreSQL 15 and later; the
/// statistics are sent before the answer to this statement).
async fn flush_statistics(conn: &mut PgConnection) {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(conn)
        .await
        .unwrap();
}

/// Pages of one of the queue's tables.
async fn pages(q: &SuiteSchema, table: &str) -> i64 {
    sqlx::query_scalar(q.sql(&format!(
        "SELECT pg_relation_size('@schema@.{table}'::regclass) / 8192"
    )))
    .fetch_one(&q.pool)
    .await
    .unwrap()
}

/// Fetches the stats on `conn` and returns them with the blocks the fetch read from the
/// queue's tables and indexes (PostgreSQL's own per-transaction counters: every block
/// request, from shared buffers or not).
async fn fetch_counting_blocks(q: &SuiteSchema, conn: &mut PgConnection) -> (Stats, i64) {
    let blocks = || {
        q.sql(
            "SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint
               FROM pg_class c WHERE c.relnamespace = '@schema@'::regnamespace",
        )
    };
    let mut tx = conn.begin().await.unwrap();
    let before: i64 = sqlx::query_scalar(blocks())
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let stats = Stats::fetch(&mut *tx, &q.schema).await.unwrap();
    let after: i64 = sqlx::query_scalar(blocks())
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (stats, after - before)
}

#[tokio::test]
async fn small_tables_are_counted_exactly() {
    let q = SuiteSchema::new().await;
    let stats = Stats::fetch(&q.pool, &q.schema).await.unwrap();
    assert_eq!(
        (stats.jobs, stats.groups, stats.claimable_groups),
        (Count::Exact(0), Count::Exact(0), Count::Exact(0))
    );
    assert_eq!(stats.dead_letters, Count::Exact(0));
    assert!(stats.is_idle());

    // 30 jobs in 10 groups, 5 more delayed in groups of their own, 2 dead letters, 1 leased
    let mut batch: Vec<OutgoingMessage> = (0..30)
        .map(|i| OutgoingMessage::new(format!("g{}", i % 10), "stats", "{}"))
        .collect();
    batch.extend(
        (0..5).map(|i| OutgoingMessage::new(format!("later{i}"), "stats", "{}").delay(LONG)),
    );
    // claimed first: the highest priority
    batch.extend((0..3).map(|i| {
        OutgoingMessage::new(format!("doomed{i}"), "stats", "{}").priority(Priority::HIGHEST)
    }));
    q.transport.publish_many(&q.pool, &batch).await.unwrap();
    let claimed = q
        .transport
        .claim_many(&q.pool, &ClaimRequest::new(LONG).limit(3))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    for message in &claimed[..2] {
        let outcome = q
            .transport
            .dead_letter(&q.pool, &message.lease, "broken")
            .await
            .unwrap();
        assert_eq!(outcome, LeaseOutcome::Applied);
    }

    let stats = Stats::fetch(&q.pool, &q.schema).await.unwrap();
    assert_eq!(stats.jobs, Count::Exact(30 + 5 + 1), "{stats:?}");
    assert_eq!(stats.groups, Count::Exact(10 + 5 + 1), "{stats:?}");
    // the delayed groups and the leased one are not claimable
    assert_eq!(stats.claimable_groups, Count::Exact(10), "{stats:?}");
    assert_eq!(stats.dead_letters, Count::Exact(2), "{stats:?}");
    assert!(!stats.is_idle());
}

#[tokio::test]
async fn a_table_past_the_window_is_estimated_and_exact_again_once_small() {
    let q = SuiteSchema::new().await;
    let n = 20_000;
    // each group's first job is stored in its group row, the second in transport_messages:
    // both tables past the window
    publish(&q, "many", n).await;
    publish(&q, "many", n).await;
    let window = 2 * i64::from(Stats::WINDOW_PAGES);
    assert!(pages(&q, "transport_messages").await > window);
    assert!(pages(&q, "transport_groups").await > window);

    let stats = Stats::fetch(&q.pool, &q.schema).await.unwrap();
    // the statistics may trail the inserts, but never go below the rows counted in the
    // window, which holds thousands of them
    match stats.jobs {
        Count::Estimated(jobs) => {
            assert!((1_000..=2 * n as i64).contains(&jobs), "{stats:?}");
        }
        other => panic!("jobs: {other:?}, expected an estimate"),
    }
    assert!(matches!(stats.groups, Count::Estimated(_)), "{stats:?}");
    match stats.claimable_groups {
        Count::AtLeast(claimable) => {
            assert!((1_000..n as i64).contains(&claimable), "{stats:?}");
        }
        other => panic!("claimable groups: {other:?}, expected a lower bound"),
    }
    assert_eq!(stats.dead_letters, Count::Exact(0));
    assert!(!stats.is_idle());

    // emptied and truncated: small again, so exact again
    run(
        &q,
        "TRUNCATE @schema@.transport_messages, @schema@.transport_groups",
    )
    .await;
    publish(&q, "few", 7).await;
    let stats = Stats::fetch(&q.pool, &q.schema).await.unwrap();
    assert_eq!(
        (stats.jobs, stats.groups),
        (Count::Exact(7), Count::Exact(7))
    );
}

/// The case: a session holds a snapshot while 50,000 jobs go through the queue, so
/// none of their deleted rows or superseded group versions can be removed. A `count(*)`
/// reads every page of both tables (1,566 blocks when this test was written, which fails
/// it); the fetch reads its windows and no more (263).
/// The statement is first prepared on empty tables, so the plan cached then must stay
/// bounded when the tables grow.
#[tokio::test]
async fn fifty_thousand_dead_rows_under_a_held_snapshot_do_not_make_the_fetch_read_more() {
    let q = SuiteSchema::new().await;
    let url = harel_jobs_suite::database_url();
    let mut dashboard = PgConnection::connect(&url).await.unwrap();
    let (stats, _) = fetch_counting_blocks(&q, &mut dashboard).await;
    assert!(stats.is_idle());

    // every write on one connection whose statistics are flushed before the fetch: the
    // estimates then count every insert and delete, however fast the test ran (with the
    // writes on the pool, `jobs` was 450 or 50,000 depending on which session had sent its
    // counts yet)
    let mut writer = PgConnection::connect(&url).await.unwrap();
    let dead = 50_000;
    publish_on(&q, &mut writer, "old", dead).await;
    let mut holder = PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut holder)
        .await
        .unwrap();
    // the snapshot is taken by the first query, and held until the commit below
    sqlx::query(q.sql("SELECT count(*) FROM @schema@.transport_groups"))
        .execute(&mut holder)
        .await
        .unwrap();
    // what a claim and an ack of each job write: the group row updated (leased), then the
    // message and the group row deleted
    run_on(
        &q,
        &mut writer,
        "UPDATE @schema@.transport_groups
            SET available_at = now() + interval '30 seconds', locked_by = gen_random_uuid()",
    )
    .await;
    run_on(&q, &mut writer, "DELETE FROM @schema@.transport_messages").await;
    run_on(&q, &mut writer, "DELETE FROM @schema@.transport_groups").await;
    // a live backlog behind the dead rows
    let live = 500;
    publish_on(&q, &mut writer, "new", live).await;
    flush_statistics(&mut writer).await;

    let window = 2 * i64::from(Stats::WINDOW_PAGES);
    let messages_pages = pages(&q, "transport_messages").await;
    let groups_pages = pages(&q, "transport_groups").await;
    assert!(
        messages_pages + groups_pages > 6 * window,
        "the dead rows take {messages_pages} + {groups_pages} pages"
    );

    let (stats, blocks) = fetch_counting_blocks(&q, &mut dashboard).await;
    eprintln!(
        "held snapshot, {dead} jobs gone, {live} waiting: the fetch read {blocks} blocks \
         (tables: {messages_pages} + {groups_pages} pages): {stats:?}"
    );
    // at most the two windows of each of the three tables, and no index
    assert!(
        blocks <= 3 * window,
        "the fetch read {blocks} blocks, more than its windows ({})",
        3 * window
    );
    // a lower bound: the live rows seen in the windows (most sit in the last pages; some
    // land in free space the inserts found earlier in the table)
    assert!(
        matches!(stats.claimable_groups, Count::AtLeast(n) if n > 0 && n <= live as i64),
        "{stats:?}"
    );
    assert!(
        matches!(stats.jobs, Count::Estimated(jobs) if jobs >= live as i64),
        "{stats:?}"
    );
    assert!(!stats.is_idle());

    // drained, still under the snapshot: idle is still exact (its EXISTS then reads the
    // dead versions until it finds none alive, the one unbounded part; printed, not asserted)
    run(&q, "DELETE FROM @schema@.transport_messages").await;
    run(&q, "DELETE FROM @schema@.transport_groups").await;
    let (stats, blocks) = fetch_counting_blocks(&q, &mut dashboard).await;
    eprintln!("held snapshot, drained: the fetch read {blocks} blocks: {stats:?}");
    assert!(stats.is_idle(), "{stats:?}");
    assert!(!stats.jobs.is_exact());

    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
}
