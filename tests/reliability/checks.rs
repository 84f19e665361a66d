//! The checks: counts and SQL over the ledger, never timings.
//!
//! An execution's interval is `[started_at, ended_at]`. An execution without an end (its
//! process was killed, aborted or stopped mid-run) is taken to have lasted until its process
//! was reaped (`rel.exits`), or for ever if its process never ended: so a check can only
//! be made to fail, never to pass, by a missing end.

use std::fmt;
use std::io::Write;
use std::time::Duration;

use sqlx::PgPool;

/// The counts of one run.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Rows in the ledger (handler starts).
    pub executions: i64,
    /// Keys that ran at least once.
    pub distinct_keys: i64,
    /// Executions without an end.
    pub unfinished: i64,
    /// Executions beyond the first, per key.
    pub duplicates: i64,
    /// Keys whose handler ended more than once (ran to the end, then ran again).
    pub completed_twice: i64,
    /// Expected keys.
    pub expected: i64,
    /// Expected keys with an ended execution.
    pub completed: i64,
    /// Expected keys without any ended execution.
    pub lost: i64,
    /// Pairs of executions of one group whose intervals overlap.
    pub overlaps: i64,
    /// Consecutive executions of a group (by start) whose message id went down.
    pub order_violations: i64,
    /// Executions that are not the last of their key and whose process was not killed.
    pub unexplained_duplicates: i64,
    /// Unfinished executions whose process was not killed, aborted or stopped.
    pub unexplained_unfinished: i64,
    /// Forbidden keys (never committed) that ran.
    pub forbidden_ran: i64,
    /// Messages left in the queue.
    pub queue_left: i64,
    /// Groups left leased past their lease.
    pub stuck_groups: i64,
    /// Groups still leased at all.
    pub leased_groups: i64,
    /// Dead letters.
    pub dead_letters: i64,
    /// Longest ended execution, in milliseconds.
    pub longest_ms: i64,
}

impl Counts {
    /// The longest any execution ran past its lease (0 if none did).
    pub fn max_lease_overrun(&self, lease: Duration) -> Duration {
        let over = self.longest_ms - lease.as_millis() as i64;
        Duration::from_millis(over.max(0) as u64)
    }
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar::<_, Option<i64>>(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("check query failed: {e}\n{sql}"))
        .unwrap_or(0)
}

/// Executions with their effective end (see the module's documentation).
const EFFECTIVE: &str = "
    SELECT l.exec_id, l.key, l.group_id, l.message_id, l.worker, l.started_at,
           COALESCE(l.ended_at, x.exited_at, 'infinity'::timestamptz) AS ended_at
      FROM rel.ledger l LEFT JOIN rel.exits x ON x.worker = l.worker";

/// The overlap check alone: pairs of executions of one group whose intervals intersect.
pub async fn overlaps(pool: &PgPool) -> i64 {
    count(
        pool,
        &format!(
            "WITH e AS ({EFFECTIVE})
             SELECT count(*) FROM e a JOIN e b
                ON a.group_id = b.group_id AND a.exec_id < b.exec_id
               AND a.started_at < b.ended_at AND b.started_at < a.ended_at"
        ),
    )
    .await
}

/// Every count, in the queue schema `harel`, with the ledger in the same database.
pub async fn counts(pool: &PgPool) -> Counts {
    counts_in(pool, pool).await
}

/// Every count, with the ledger (`rel`) in `ledger` and the queue (`harel`) in `queue`.
pub async fn counts_in(ledger: &PgPool, queue: &PgPool) -> Counts {
    let pool = ledger;
    Counts {
        executions: count(pool, "SELECT count(*) FROM rel.ledger").await,
        distinct_keys: count(pool, "SELECT count(DISTINCT key) FROM rel.ledger").await,
        unfinished: count(
            pool,
            "SELECT count(*) FROM rel.ledger WHERE ended_at IS NULL",
        )
        .await,
        duplicates: count(
            pool,
            "SELECT count(*) - count(DISTINCT key) FROM rel.ledger",
        )
        .await,
        completed_twice: count(
            pool,
            "SELECT count(*) FROM (SELECT key FROM rel.ledger WHERE ended_at IS NOT NULL
                                    GROUP BY key HAVING count(*) > 1) t",
        )
        .await,
        expected: count(pool, "SELECT count(*) FROM rel.expected").await,
        completed: count(
            pool,
            "SELECT count(*) FROM rel.expected e WHERE EXISTS
                (SELECT 1 FROM rel.ledger l WHERE l.key = e.key AND l.ended_at IS NOT NULL)",
        )
        .await,
        lost: count(
            pool,
            "SELECT count(*) FROM rel.expected e
              WHERE NOT EXISTS (SELECT 1 FROM rel.ledger l
                                 WHERE l.key = e.key AND l.ended_at IS NOT NULL)",
        )
        .await,
        overlaps: overlaps(pool).await,
        order_violations: count(
            pool,
            "SELECT count(*) FROM (
                 SELECT message_id, lag(message_id) OVER
                        (PARTITION BY group_id ORDER BY started_at, exec_id) AS previous
                   FROM rel.ledger) s
              WHERE previous > message_id",
        )
        .await,
        unexplained_duplicates: count(
            pool,
            "SELECT count(*) FROM (
                 SELECT l.worker, row_number() OVER
                        (PARTITION BY l.key ORDER BY l.started_at DESC, l.exec_id) AS from_last
                   FROM rel.ledger l) s
              WHERE from_last > 1
                AND NOT EXISTS (SELECT 1 FROM rel.exits x
                                 WHERE x.worker = s.worker AND x.how IN ('kill', 'abort'))",
        )
        .await,
        unexplained_unfinished: count(
            pool,
            "SELECT count(*) FROM rel.ledger l
              WHERE l.ended_at IS NULL
                AND NOT EXISTS (SELECT 1 FROM rel.exits x WHERE x.worker = l.worker)",
        )
        .await,
        forbidden_ran: count(
            pool,
            "SELECT count(*) FROM rel.ledger l JOIN rel.forbidden f ON f.key = l.key",
        )
        .await,
        queue_left: count(queue, "SELECT count(*) FROM harel.jobs").await,
        stuck_groups: count(
            queue,
            "SELECT count(*) FROM harel.transport_groups
              WHERE locked_by IS NOT NULL AND available_at < now()",
        )
        .await,
        leased_groups: count(
            queue,
            "SELECT count(*) FROM harel.transport_groups WHERE locked_by IS NOT NULL",
        )
        .await,
        dead_letters: count(queue, "SELECT count(*) FROM harel.dead_letters").await,
        longest_ms: count(
            pool,
            "SELECT (max(extract(epoch FROM ended_at - started_at)) * 1000)::bigint
               FROM rel.ledger WHERE ended_at IS NOT NULL",
        )
        .await,
    }
}

/// Waits until every expected key has an ended execution and the queue
/// is empty, or `limit` passes; returns the counts either way (the caller asserts).
pub async fn wait_until_done(pool: &PgPool, limit: Duration) -> Counts {
    wait_until_done_in(pool, pool, limit).await
}

/// [`wait_until_done`] with the ledger in `ledger` and the queue in `queue`.
pub async fn wait_until_done_in(ledger: &PgPool, queue: &PgPool, limit: Duration) -> Counts {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let queued: Result<i64, _> = sqlx::query_scalar("SELECT count(*) FROM harel.jobs")
            .fetch_one(queue)
            .await;
        let missing: Result<i64, _> = sqlx::query_scalar(
            "SELECT count(*) FROM rel.expected e WHERE NOT EXISTS
                (SELECT 1 FROM rel.ledger l WHERE l.key = e.key AND l.ended_at IS NOT NULL)",
        )
        .fetch_one(ledger)
        .await;
        if let (Ok(0), Ok(missing)) = (queued, missing)
            && (missing == 0 || tokio::time::Instant::now() >= deadline)
        {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    counts_in(ledger, queue).await
}

/// One line of the RELIABILITY.md table.
#[derive(Clone, Debug)]
pub struct Figures {
    pub scenario: &'static str,
    pub load: String,
    pub faults: String,
    pub enqueued: i64,
    pub completed: i64,
    pub duplicates: String,
    pub lost: i64,
    pub max_lease_overrun: Duration,
    pub notes: String,
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "| {} | {} | {} | {} | {} | {} | {} | {:.1} s | {} |",
            self.scenario,
            self.load,
            self.faults,
            self.enqueued,
            self.completed,
            self.duplicates,
            self.lost,
            self.max_lease_overrun.as_secs_f64(),
            self.notes
        )
    }
}

/// Prints the row and appends it to `$CARGO_TARGET_TMPDIR/reliability-report.md`.
pub async fn report(pool: &PgPool, figures: &Figures, counts: &Counts) {
    report_in(pool, pool, figures, counts).await
}

/// [`report`] with the ledger in `ledger` and the queue in `queue`.
pub async fn report_in(ledger: &PgPool, queue: &PgPool, figures: &Figures, counts: &Counts) {
    if counts.lost > 0 || counts.queue_left > 0 {
        diagnose_in(ledger, queue).await;
    }
    let row = figures.to_string();
    eprintln!("RELIABILITY {row}");
    eprintln!("RELIABILITY counts {counts:?}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("reliability-report.md");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(file, "{row}");
        let _ = writeln!(file, "<!-- {} {counts:?} -->", figures.scenario);
    }
}

/// Prints what is left in the queue (in `queue`) and which expected keys have not completed
/// (in `ledger`), for a failing run's report.
pub async fn diagnose_in(ledger: &PgPool, queue: &PgPool) {
    let pool = queue;
    let messages: Vec<(String, i64, String, i32, Option<String>)> = sqlx::query_as(
        "SELECT group_id, seq, kind, attempts, last_error FROM harel.jobs
          ORDER BY seq LIMIT 20",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    type GroupRow = (
        String,
        Option<uuid::Uuid>,
        chrono::DateTime<chrono::Utc>,
        Option<i64>,
        i32,
    );
    let groups: Vec<GroupRow> = sqlx::query_as(
        "SELECT group_id, locked_by, available_at, head_seq, head_attempts
               FROM harel.transport_groups ORDER BY group_id LIMIT 20",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    let missing: Vec<(i64, String)> = sqlx::query_as(
        "SELECT e.key, e.group_id FROM rel.expected e WHERE NOT EXISTS
            (SELECT 1 FROM rel.ledger l WHERE l.key = e.key AND l.ended_at IS NOT NULL)
          ORDER BY e.key LIMIT 20",
    )
    .fetch_all(ledger)
    .await
    .unwrap_or_default();
    eprintln!("DIAGNOSE messages left: {messages:#?}");
    eprintln!("DIAGNOSE groups: {groups:#?}");
    eprintln!("DIAGNOSE expected keys not completed: {missing:?}");
}
