//! Scenario 10: failover. A primary with a streaming standby (`pg_basebackup -R`), the
//! workers and the producers connected through a TCP proxy in the role of the virtual IP
//! (`proxy.rs`), and the replication link through another. Mid-drain the standby falls
//! behind (the link is partitioned: what the primary commits from then on never reaches
//! it), the primary's machine dies (SIGKILL to every server process; the proxy tells the
//! clients nothing, as a dead machine does), the standby is promoted and the address moves
//! to it. Run twice: with asynchronous replication, and with `synchronous_standby_names`.
//!
//! The ledger of executions lives in a third cluster that never fails: a ledger on the
//! primary would lose, with the primary, the records of what ran there, and "the queue lost
//! a job" could not be told from "the ledger lost a record". Jobs are known by the keys the
//! test gave them; what the producers saw of each transaction (committed, rolled back or
//! failed before commit, commit sent with no answer) is kept by the test.
//!
//! What each mode asserts is what the README's guarantees say of a failover:
//!
//! - both: every job committed before the standby fell behind, and every job committed
//!   after the failover, runs; no job whose transaction did not commit runs; no job runs
//!   twice on the new primary; two executions of a group overlap only across the failover
//!   (one claimed on the old primary, one on the new); every worker comes back by itself,
//!   its LISTEN included; nothing is left leased or queued.
//! - synchronous: no commit returns while the standby does not confirm it, so no job is
//!   lost; no two executions of a group ever overlap, and groups keep their order.
//! - asynchronous: jobs whose commit returned while the standby was behind can be lost,
//!   and only those; claims made then are lost too, so a group can have two consumers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use harel_jobs::{EnqueueOptions, JobBatch};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};

use crate::checks::{self, Figures};
use crate::cluster::{Cluster, ClusterOptions};
use crate::fleet::Fleet;
use crate::jobs::{Cooperative, LEDGER_DDL, Work};
use crate::proxy::Proxy;
use crate::{Spec, expect_keys, interleaved, ms, scaled, serial, wait_for};

/// How the standby is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replication {
    /// `synchronous_standby_names` empty: commits never wait for the standby.
    Asynchronous,
    /// `synchronous_standby_names = '*'` with `synchronous_commit = on`: a commit returns
    /// once the standby has flushed its WAL.
    Synchronous,
}

const LEASE: Duration = Duration::from_secs(20);
const HEARTBEAT: Duration = Duration::from_secs(2);
/// Long jobs, in groups of their own, due just after the standby falls behind.
const LONG_JOBS: i64 = 8;
const LONG_MS: u64 = 8_000;
const LONG_DELAY: Duration = Duration::from_secs(3);
const PER_TX: i64 = 20;

/// Key ranges: preloaded, long, and one per producer (before the lag, during it, after).
const LONG_KEYS: i64 = 10_000_000;
const PRODUCER_KEYS: [i64; 3] = [20_000_000, 21_000_000, 22_000_000];
const PROBE_KEY: i64 = 30_000_000;

/// What a producer saw of its transactions.
#[derive(Default)]
struct ProducerLog {
    /// `commit` returned OK.
    committed: Vec<Spec>,
    /// Rolled back on purpose, or failed before `commit` was sent.
    never_committed: Vec<i64>,
    /// `commit` was sent and no OK came back (an error), or the producer was stopped with
    /// the transaction under way.
    uncertain: Vec<i64>,
    /// The transaction under way (begun, not yet answered).
    in_flight: Vec<i64>,
    transactions: u64,
}

/// A producer enqueueing transactions of `PER_TX` jobs (every 5th rolled back), through
/// a pool of its own.
struct Producer {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<ProducerLog>>,
    task: tokio::task::JoinHandle<()>,
}

impl Producer {
    fn start(pool: PgPool, first_key: i64) -> Producer {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(ProducerLog::default()));
        let task = tokio::spawn(produce(
            pool,
            first_key,
            Arc::clone(&stop),
            Arc::clone(&log),
        ));
        Producer { stop, log, task }
    }

    fn committed_transactions(&self) -> usize {
        self.log.lock().unwrap().committed.len() / PER_TX as usize
    }

    fn in_flight(&self) -> bool {
        !self.log.lock().unwrap().in_flight.is_empty()
    }

    /// Stops after the transaction under way.
    async fn finish(self) -> ProducerLog {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the producer task");
        Arc::try_unwrap(self.log)
            .ok()
            .expect("the producer's log")
            .into_inner()
            .unwrap()
    }

    /// Stops at once: a transaction under way is uncertain.
    async fn abort(self) -> ProducerLog {
        self.task.abort();
        let _ = self.task.await;
        let mut log = Arc::try_unwrap(self.log)
            .ok()
            .expect("the producer's log")
            .into_inner()
            .unwrap();
        let in_flight = std::mem::take(&mut log.in_flight);
        log.uncertain.extend(in_flight);
        log
    }
}

async fn produce(
    pool: PgPool,
    first_key: i64,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<ProducerLog>>,
) {
    let mut next_key = first_key;
    while !stop.load(Ordering::Relaxed) {
        let transaction = {
            let mut log = log.lock().unwrap();
            log.transactions += 1;
            log.transactions
        };
        let specs: Vec<Spec> = (0..PER_TX)
            .map(|i| (next_key + i, format!("fo-p-{}", (next_key + i) % 20), 5))
            .collect();
        next_key += PER_TX;
        let keys: Vec<i64> = specs.iter().map(|s| s.0).collect();
        let never = |log: &Mutex<ProducerLog>| log.lock().unwrap().never_committed.extend(&keys);
        let Ok(mut tx) = pool.begin().await else {
            never(&log);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        log.lock().unwrap().in_flight = keys.clone();
        let mut batch = JobBatch::new();
        for (key, group, sleep_ms) in &specs {
            let job = Work {
                key: *key,
                sleep_ms: *sleep_ms,
                text: None,
            };
            batch
                .push_with(job, &harel_jobs::EnqueueOptions::new().group(group.clone()))
                .expect("push");
        }
        if batch.enqueue(&mut *tx).await.is_err() {
            drop(tx);
            log.lock().unwrap().in_flight.clear();
            never(&log);
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        if transaction % 5 == 0 {
            // an application transaction that changes its mind
            let _ = tx.rollback().await;
            log.lock().unwrap().in_flight.clear();
            never(&log);
            continue;
        }
        let committed = tx.commit().await;
        {
            let mut log = log.lock().unwrap();
            log.in_flight.clear();
            match committed {
                Ok(()) => log.committed.extend(specs),
                Err(_) => log.uncertain.extend(keys),
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A pool of `connections` for `url`, its sessions named `application_name`.
async fn pool_for(url: &str, application_name: &str, connections: u32) -> PgPool {
    let options: PgConnectOptions = url.parse().expect("a URL");
    PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(120))
        .connect_with(options.application_name(application_name))
        .await
        .expect("connect")
}

async fn scalar_i64(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{sql}"))
        .unwrap_or(0)
}

/// A count (or other number) from `sql`, in which `t` is a row of `times`: `lag_at`,
/// `killed_at`, `moved_at` (bound parameters).
async fn scalar_at(pool: &PgPool, times: &[DateTime<Utc>; 3], sql: &str) -> i64 {
    let sql = format!(
        "WITH t AS (SELECT $1::timestamptz AS lag_at, $2::timestamptz AS killed_at,
                           $3::timestamptz AS moved_at) {sql}"
    );
    sqlx::query_scalar::<_, Option<i64>>(AssertSqlSafe(sql.clone()))
        .bind(times[0])
        .bind(times[1])
        .bind(times[2])
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{sql}"))
        .unwrap_or(0)
}

/// Enqueues `specs` on the queue's database, each with `options` and its group, in
/// batches, and records them as expected in the ledger once committed.
async fn enqueue(queue: &PgPool, ledger: &PgPool, specs: &[Spec], options: &EnqueueOptions) {
    for chunk in specs.chunks(2_000) {
        let mut batch = JobBatch::new();
        for (key, group, sleep_ms) in chunk {
            let job = Work {
                key: *key,
                sleep_ms: *sleep_ms,
                text: None,
            };
            batch
                .push_with(job, &options.clone().group(group.clone()))
                .expect("push");
        }
        batch.enqueue(queue).await.expect("enqueue");
        expect_keys(ledger, chunk).await;
    }
}

/// Waits until the standby has replayed everything the primary has written so far.
async fn wait_replayed(primary: &PgPool, standby: &PgPool) {
    let lsn: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(primary)
        .await
        .expect("the primary's WAL position");
    let standby = standby.clone();
    wait_for(
        "the standby replays the primary's WAL",
        Duration::from_secs(60),
        || {
            let (standby, lsn) = (standby.clone(), lsn.clone());
            async move {
                sqlx::query_scalar::<_, bool>("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn")
                    .bind(lsn)
                    .fetch_one(&standby)
                    .await
                    .unwrap_or(false)
            }
        },
    )
    .await;
}

/// Waits until the primary lists one standby streaming, in `sync_state` `state`.
async fn wait_standby_state(primary: &PgPool, state: &'static str) {
    let primary = primary.clone();
    wait_for("the standby streams", Duration::from_secs(60), || {
        let primary = primary.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_replication
                      WHERE state = 'streaming' AND sync_state = $1",
            )
            .bind(state)
            .fetch_one(&primary)
            .await
            .unwrap_or(0)
                == 1
        }
    })
    .await;
}

/// Records what the producers saw, per phase: `rel.produced (key, phase, fate)`.
async fn record_produced(ledger: &PgPool, phase: &str, log: &ProducerLog) {
    let mut rows: Vec<(i64, &str)> = Vec::new();
    rows.extend(log.committed.iter().map(|s| (s.0, "committed")));
    rows.extend(log.never_committed.iter().map(|&k| (k, "never")));
    rows.extend(log.uncertain.iter().map(|&k| (k, "uncertain")));
    let (keys, fates): (Vec<i64>, Vec<&str>) = rows.into_iter().unzip();
    sqlx::query(
        "INSERT INTO rel.produced (key, phase, fate)
         SELECT k, $3, f FROM unnest($1::bigint[], $2::text[]) AS t(k, f)",
    )
    .bind(&keys)
    .bind(&fates)
    .bind(phase)
    .execute(ledger)
    .await
    .expect("record what the producer saw");
    expect_keys(ledger, &log.committed).await;
    sqlx::query(
        "INSERT INTO rel.forbidden (key, why)
         SELECT k, 'rolled back or failed before commit' FROM unnest($1::bigint[]) AS k",
    )
    .bind(&log.never_committed)
    .execute(ledger)
    .await
    .expect("record the keys that must never run");
}

/// `(key, group, attempt, worker, started_at, ended_at)` of an execution, for a failing
/// run's report.
type ExecutionRow = (
    i64,
    String,
    i32,
    String,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);

/// The figures of one run, beyond `checks::Counts`.
#[derive(Debug, Default)]
struct Measured {
    /// Transactions committed (OK returned) while the standby was behind, and their jobs.
    lag_committed_jobs: i64,
    /// Of those, jobs that ran (on the old primary, before it died).
    lag_committed_ran: i64,
    /// Jobs committed before the lag or after the failover that never ran.
    lost_outside_lag: i64,
    /// Expected jobs that never ran.
    lost: i64,
    /// Jobs whose commit got no answer, and how many of them ran.
    uncertain: i64,
    uncertain_ran: i64,
    /// Jobs that ran on the old primary and again on the new one.
    reran: i64,
    /// Of those, the ones whose first execution had ended before the new one started
    /// (completed, their ack lost with the old primary).
    reran_after_completion: i64,
    /// Jobs that ran twice on the new primary.
    twice_on_new_primary: i64,
    /// Overlapping executions of one group: one claimed on each primary / other pairs.
    overlaps_across: i64,
    overlaps_other: i64,
    /// The longest such overlap, in milliseconds.
    longest_overlap_ms: i64,
    /// Overlaps whose first execution stops when its context is cancelled, and the longest.
    overlaps_stopping: i64,
    longest_overlap_stopping_ms: i64,
    /// Executions started during the lag window (on the old primary, after the standby
    /// fell behind), long jobs among them.
    started_in_lag: i64,
    long_started_in_lag: i64,
    /// Sessions waiting for the standby when the primary died, and sessions waiting for a
    /// lock (behind them).
    waiting_for_standby: i64,
    waiting_behind: i64,
    /// Milliseconds from the partition of the replication link to the kill.
    lag_ms: i64,
    /// Milliseconds from the kill to the address move.
    failover_ms: i64,
    /// Milliseconds from the move to the first execution on the new primary.
    first_start_after_ms: i64,
    leases_lost: u64,
    database_errors: u64,
}

async fn measure(
    ledger: &PgPool,
    lag_at: DateTime<Utc>,
    killed_at: DateTime<Utc>,
    moved_at: DateTime<Utc>,
) -> Measured {
    let times = [lag_at, killed_at, moved_at];
    // the times, bound by `scalar_at`
    let q = |sql: &str| {
        sql.replace("$LAG", "(SELECT lag_at FROM t)")
            .replace("$KILL", "(SELECT killed_at FROM t)")
            .replace("$MOVE", "(SELECT moved_at FROM t)")
    };
    let ended =
        "EXISTS (SELECT 1 FROM rel.ledger l WHERE l.key = p.key AND l.ended_at IS NOT NULL)";
    let mut m = Measured {
        lag_committed_jobs: scalar_i64(
            ledger,
            "SELECT count(*) FROM rel.produced WHERE phase = 'lag' AND fate = 'committed'",
        )
        .await,
        ..Measured::default()
    };
    m.lag_committed_ran = scalar_i64(
        ledger,
        &format!(
            "SELECT count(*) FROM rel.produced p
              WHERE phase = 'lag' AND fate = 'committed' AND {ended}"
        ),
    )
    .await;
    m.lost = scalar_i64(
        ledger,
        &format!("SELECT count(*) FROM rel.expected p WHERE NOT {ended}"),
    )
    .await;
    m.lost_outside_lag = scalar_i64(
        ledger,
        &format!(
            "SELECT count(*) FROM rel.expected p WHERE NOT {ended}
                AND NOT EXISTS (SELECT 1 FROM rel.produced r
                                 WHERE r.key = p.key AND r.phase = 'lag')"
        ),
    )
    .await;
    m.uncertain = scalar_i64(
        ledger,
        "SELECT count(*) FROM rel.produced WHERE fate = 'uncertain'",
    )
    .await;
    m.uncertain_ran = scalar_i64(
        ledger,
        "SELECT count(*) FROM rel.produced p WHERE fate = 'uncertain'
            AND EXISTS (SELECT 1 FROM rel.ledger l WHERE l.key = p.key)",
    )
    .await;
    m.reran = scalar_at(
        ledger,
        &times,
        &q(
            "SELECT count(*) FROM (SELECT key FROM rel.ledger GROUP BY key
                HAVING min(started_at) < $MOVE AND max(started_at) >= $MOVE) t",
        ),
    )
    .await;
    m.reran_after_completion = scalar_at(
        ledger,
        &times,
        &q(
            "SELECT count(DISTINCT a.key) FROM rel.ledger a JOIN rel.ledger b
               ON a.key = b.key AND a.started_at < $MOVE AND b.started_at >= $MOVE
              AND a.ended_at <= b.started_at",
        ),
    )
    .await;
    m.twice_on_new_primary = scalar_at(
        ledger,
        &times,
        &q(
            "SELECT count(*) FROM (SELECT key FROM rel.ledger WHERE started_at >= $MOVE
                GROUP BY key HAVING count(*) > 1) t",
        ),
    )
    .await;
    // an execution without an end lasts for ever (none is expected: no worker is killed)
    let pairs = "WITH e AS (SELECT exec_id, key, group_id, kind, started_at,
                                   COALESCE(ended_at, 'infinity') AS ended_at FROM rel.ledger)
                 SELECT a.started_at AS a_start, b.started_at AS b_start,
                        CASE WHEN a.started_at < b.started_at THEN a.kind ELSE b.kind END AS first_kind,
                        CASE WHEN isfinite(least(a.ended_at, b.ended_at))
                             THEN least(a.ended_at, b.ended_at) - greatest(a.started_at, b.started_at)
                        END AS overlap
                   FROM e a JOIN e b ON a.group_id = b.group_id AND a.exec_id < b.exec_id
                    AND a.started_at < b.ended_at AND b.started_at < a.ended_at";
    m.overlaps_across = scalar_at(
        ledger,
        &times,
        &q(&format!(
            "SELECT count(*) FROM ({pairs}) o
              WHERE (a_start < $MOVE) <> (b_start < $MOVE)"
        )),
    )
    .await;
    m.overlaps_other = scalar_at(
        ledger,
        &times,
        &q(&format!(
            "SELECT count(*) FROM ({pairs}) o
              WHERE (a_start < $MOVE) = (b_start < $MOVE)"
        )),
    )
    .await;
    m.longest_overlap_ms = scalar_i64(
        ledger,
        &format!("SELECT (max(extract(epoch FROM overlap)) * 1000)::bigint FROM ({pairs}) o"),
    )
    .await;
    m.overlaps_stopping = scalar_i64(
        ledger,
        &format!("SELECT count(*) FROM ({pairs}) o WHERE first_kind = 'cooperative'"),
    )
    .await;
    m.longest_overlap_stopping_ms = scalar_i64(
        ledger,
        &format!(
            "SELECT (max(extract(epoch FROM overlap)) * 1000)::bigint FROM ({pairs}) o
              WHERE first_kind = 'cooperative'"
        ),
    )
    .await;
    m.started_in_lag = scalar_at(
        ledger,
        &times,
        &q("SELECT count(*) FROM rel.ledger WHERE started_at >= $LAG AND started_at < $MOVE"),
    )
    .await;
    m.long_started_in_lag = scalar_at(
        ledger,
        &times,
        &q(&format!(
            "SELECT count(*) FROM rel.ledger WHERE started_at >= $LAG AND started_at < $MOVE
                AND key >= {LONG_KEYS} AND key < {LONG_KEYS} + {LONG_JOBS}"
        )),
    )
    .await;
    if m.twice_on_new_primary > 0 {
        let rows: Vec<ExecutionRow> = sqlx::query_as(
            "SELECT key, group_id, attempt, worker, started_at, ended_at FROM rel.ledger
                  WHERE key IN (SELECT key FROM rel.ledger WHERE started_at >= $1
                                 GROUP BY key HAVING count(*) > 1)
                  ORDER BY key, started_at LIMIT 30",
        )
        .bind(moved_at)
        .fetch_all(ledger)
        .await
        .unwrap_or_default();
        eprintln!("FAILOVER ran twice on the new primary (moved at {moved_at}): {rows:#?}");
    }
    m.lag_ms = (killed_at - lag_at).num_milliseconds();
    m.failover_ms = (moved_at - killed_at).num_milliseconds();
    m.first_start_after_ms = scalar_at(
        ledger,
        &times,
        &q(
            "SELECT (extract(epoch FROM min(started_at) - $MOVE) * 1000)::bigint
              FROM rel.ledger WHERE started_at >= $MOVE",
        ),
    )
    .await;
    m
}

/// One run of the scenario (see the module's documentation), asserting what `mode`
/// guarantees.
/// `durable_outcomes`: the workers' outcomes wait for the WAL flush and the standby
/// (`WorkerBuilder::durable_outcomes`).
async fn failover(mode: Replication, durable_outcomes: bool) {
    let _serial = serial();
    // the ledger: a cluster of its own, never failed
    let ledger_cluster = Cluster::start(ClusterOptions::default());
    let ledger = ledger_cluster.admin_pool(8).await;
    sqlx::raw_sql(AssertSqlSafe(LEDGER_DDL))
        .execute(&ledger)
        .await
        .expect("create the ledger");
    sqlx::raw_sql(
        "CREATE TABLE rel.produced (key BIGINT PRIMARY KEY, phase TEXT NOT NULL,
                                    fate TEXT NOT NULL)",
    )
    .execute(&ledger)
    .await
    .expect("create rel.produced");

    // the primary, its standby behind a replication link that can be partitioned
    let primary = Cluster::start(ClusterOptions::default());
    let primary_pool = primary.admin_pool(4).await;
    harel_jobs::migrate(&primary_pool).await.expect("migrate");
    let link = Proxy::start(primary.port).await;
    let link_port = link.port;
    let standby = tokio::task::spawn_blocking(move || Cluster::standby(link_port, "harel_standby"))
        .await
        .expect("pg_basebackup and start the standby");
    let standby_pool = standby.admin_pool(4).await;
    wait_standby_state(&primary_pool, "async").await;
    if mode == Replication::Synchronous {
        // (on the primary only: the standby's copy of the settings was taken before)
        for statement in [
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
            "SELECT pg_reload_conf()",
        ] {
            sqlx::raw_sql(statement)
                .execute(&primary_pool)
                .await
                .expect("make the standby synchronous");
        }
        wait_standby_state(&primary_pool, "sync").await;
    }
    let settings: (String, String) = sqlx::query_as(
        "SELECT current_setting('synchronous_standby_names'), current_setting('synchronous_commit')",
    )
    .fetch_one(&primary_pool)
    .await
    .unwrap();

    // the virtual IP, on the primary
    let vip = Proxy::start(primary.port).await;

    let jobs = scaled(6_000);
    let groups = scaled(60).min(jobs);
    let specs = interleaved(0, jobs, groups, "fo", 10);
    enqueue(&primary_pool, &ledger, &specs, &EnqueueOptions::new()).await;

    let mut fleet = Fleet::new(
        ledger_cluster.dir().join("workers"),
        "failover-w",
        &[
            ("HAREL_FW_DSN", vip.url("postgres")),
            ("HAREL_FW_LEDGER_DSN", ledger_cluster.url("postgres")),
            ("HAREL_FW_CONCURRENCY", "8".into()),
            ms("HAREL_FW_LEASE_MS", LEASE),
            ms("HAREL_FW_HEARTBEAT_MS", HEARTBEAT),
            (
                "HAREL_FW_DURABLE_OUTCOMES",
                if durable_outcomes { "1" } else { "0" }.into(),
            ),
        ],
    );
    for slot in 0..3 {
        fleet.spawn_with(slot, &[ms("HAREL_FW_POLL_MS", Duration::from_millis(500))]);
    }
    // the probe polls once an hour: after the failover, only a NOTIFY on a LISTEN
    // connection that came back starts a new job on it promptly
    let probe = fleet.spawn_with(3, &[ms("HAREL_FW_POLL_MS", Duration::from_secs(3600))]);
    let probe_name = fleet.procs[probe].name.clone();

    let before = Producer::start(
        pool_for(&vip.url("postgres"), "fo-producer", 2).await,
        PRODUCER_KEYS[0],
    );
    let ledger_for_wait = ledger.clone();
    wait_for(
        "a quarter of the preloaded jobs ran",
        Duration::from_secs(120),
        || {
            let ledger = ledger_for_wait.clone();
            async move { crate::ended(&ledger).await >= jobs / 4 }
        },
    )
    .await;
    let before = before.finish().await;

    // jobs due just after the standby falls behind, each in a group of its own
    // (half of them stop as soon as their context is cancelled, half run on regardless)
    let long: Vec<Spec> = (0..LONG_JOBS)
        .map(|i| (LONG_KEYS + i, format!("fo-long-{i}"), LONG_MS))
        .collect();
    let mut batch = JobBatch::new();
    for (key, group, sleep_ms) in &long {
        let options = EnqueueOptions::new().group(group.clone()).delay(LONG_DELAY);
        if key % 2 == 0 {
            let job = Cooperative {
                key: *key,
                sleep_ms: *sleep_ms,
            };
            batch.push_with(job, &options).expect("push");
        } else {
            let job = Work {
                key: *key,
                sleep_ms: *sleep_ms,
                text: None,
            };
            batch.push_with(job, &options).expect("push");
        }
    }
    batch.enqueue(&primary_pool).await.expect("enqueue");
    expect_keys(&ledger, &long).await;
    let long_due: DateTime<Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&primary_pool)
        .await
        .map(|now: DateTime<Utc>| now + chrono::Duration::from_std(LONG_DELAY).unwrap())
        .unwrap();
    // everything committed so far is on the standby; from now on nothing reaches it
    wait_replayed(&primary_pool, &standby_pool).await;
    link.freeze();
    let lag_at = Utc::now();

    let lag = Producer::start(
        pool_for(&vip.url("postgres"), "fo-producer", 2).await,
        PRODUCER_KEYS[1],
    );
    match mode {
        Replication::Asynchronous => {
            // commits return without the standby: wait for some, and for the long jobs
            // to start on the old primary
            let ledger_for_wait = ledger.clone();
            wait_for(
                "the long jobs start, and the producer commits, while the standby is behind",
                Duration::from_secs(60),
                || {
                    let ledger = ledger_for_wait.clone();
                    let committed = lag.committed_transactions();
                    async move {
                        committed >= 2
                            && scalar_i64(
                                &ledger,
                                &format!(
                                    "SELECT count(DISTINCT key) FROM rel.ledger
                                      WHERE key >= {LONG_KEYS} AND key < {LONG_KEYS} + {LONG_JOBS}"
                                ),
                            )
                            .await
                                == LONG_JOBS
                    }
                },
            )
            .await;
        }
        Replication::Synchronous => {
            // commits wait for the standby (and hold their locks meanwhile): wait until
            // the long jobs are due, some claim waits for the standby, and the producer's
            // transaction waits, for the standby or behind a lock such a claim holds
            let primary_for_wait = primary_pool.clone();
            wait_for(
                "the long jobs are due, a claim waits for the standby, and so does the producer",
                Duration::from_secs(60),
                || {
                    let primary = primary_for_wait.clone();
                    let in_flight = lag.in_flight();
                    async move {
                        let waiting: Result<(bool, i64, i64), _> = sqlx::query_as(
                            "SELECT now() > $1 + interval '1 second',
                                    count(*) FILTER (WHERE application_name = 'fo-producer'
                                                       AND (wait_event = 'SyncRep'
                                                            OR wait_event_type = 'Lock')),
                                    count(*) FILTER (WHERE application_name <> 'fo-producer'
                                                       AND wait_event = 'SyncRep')
                               FROM pg_stat_activity",
                        )
                        .bind(long_due)
                        .fetch_one(&primary)
                        .await;
                        matches!(waiting, Ok((true, p, w)) if p >= 1 && w >= 1) && in_flight
                    }
                },
            )
            .await;
        }
    }
    let (waiting_for_standby, waiting_behind): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE wait_event = 'SyncRep'),
                count(*) FILTER (WHERE wait_event_type = 'Lock')
           FROM pg_stat_activity",
    )
    .fetch_one(&primary_pool)
    .await
    .unwrap();

    // the primary's machine dies: nobody holds the address, the server is gone
    vip.down();
    let killed_at = Utc::now();
    primary.kill();
    let lag = lag.abort().await;
    drop(primary_pool);
    let promoted = tokio::task::spawn_blocking(move || {
        standby.promote();
        standby
    })
    .await
    .expect("promote the standby");
    let queue = standby_pool;
    let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
        .fetch_one(&queue)
        .await
        .unwrap();
    assert!(!in_recovery, "the standby was promoted");
    let moved_at = Utc::now();
    vip.move_to(promoted.port);

    // the application goes on through the address, on a pool opened after the move
    let after = Producer::start(
        pool_for(&vip.url("postgres"), "fo-producer", 2).await,
        PRODUCER_KEYS[2],
    );
    let committed_after = |producer: &Producer| producer.committed_transactions();
    wait_for(
        "the producer commits on the new primary",
        Duration::from_secs(60),
        || {
            let n = committed_after(&after);
            async move { n >= 5 }
        },
    )
    .await;
    let after = after.finish().await;
    for (phase, log) in [("before", &before), ("lag", &lag), ("after", &after)] {
        record_produced(&ledger, phase, log).await;
    }
    sqlx::query(
        "INSERT INTO rel.produced (key, phase, fate)
         SELECT key, 'before', 'committed' FROM rel.expected e
          WHERE NOT EXISTS (SELECT 1 FROM rel.produced p WHERE p.key = e.key)",
    )
    .execute(&ledger)
    .await
    .unwrap();

    // done: the queue on the new primary is empty and every job that can run has run
    let (ledger_for_wait, queue_for_wait) = (ledger.clone(), queue.clone());
    wait_for(
        "the queue drains on the new primary",
        Duration::from_secs(240),
        || {
            let (ledger, queue) = (ledger_for_wait.clone(), queue_for_wait.clone());
            async move {
                let queued = scalar_i64(
                    &queue,
                    "SELECT (SELECT count(*) FROM harel.jobs)
                          + (SELECT count(*) FROM harel.transport_groups WHERE locked_by IS NOT NULL)",
                )
                .await;
                let missing = scalar_i64(
                    &ledger,
                    "SELECT count(*) FROM rel.expected e
                      WHERE NOT EXISTS (SELECT 1 FROM rel.ledger l
                                         WHERE l.key = e.key AND l.ended_at IS NOT NULL)
                        AND NOT EXISTS (SELECT 1 FROM rel.produced p
                                         WHERE p.key = e.key AND p.phase = 'lag')",
                )
                .await;
                queued == 0 && missing == 0
            }
        },
    )
    .await;
    let running = fleet.running().len();

    // LISTEN came back: with the others stopped, a new job starts on the probe (poll
    // interval 1 h) only if its listener found the new primary
    let others: Vec<usize> = fleet
        .running()
        .into_iter()
        .filter(|&i| i != probe)
        .collect();
    for i in others {
        fleet.terminate(i, Duration::from_secs(60), &ledger).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await; // the probe is idle now
    let probe_spec: Spec = (PROBE_KEY, "fo-probe".into(), 0);
    enqueue(&queue, &ledger, &[probe_spec], &EnqueueOptions::new()).await;
    // (waited for here, asserted after the report)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let probe_ran: Option<String> = loop {
        let ran: Option<String> = sqlx::query_scalar(
            "SELECT worker FROM rel.ledger WHERE key = $1 AND ended_at IS NOT NULL",
        )
        .bind(PROBE_KEY)
        .fetch_optional(&ledger)
        .await
        .unwrap();
        if ran.is_some() || tokio::time::Instant::now() >= deadline {
            break ran;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    fleet.terminate_all(Duration::from_secs(60), &ledger).await;

    let counts = checks::counts_in(&ledger, &queue).await;
    let mut m = measure(&ledger, lag_at, killed_at, moved_at).await;
    m.waiting_for_standby = waiting_for_standby;
    m.waiting_behind = waiting_behind;
    m.leases_lost = fleet.procs.iter().map(|p| p.stat("leases_lost")).sum();
    m.database_errors = fleet.procs.iter().map(|p| p.stat("database_errors")).sum();
    let per_worker: BTreeMap<String, u64> = fleet
        .procs
        .iter()
        .map(|p| (p.name.clone(), p.stat("leases_lost")))
        .collect();
    eprintln!(
        "FAILOVER {mode:?} durable outcomes {durable_outcomes} settings {settings:?} measured \
         {m:#?} leases lost {per_worker:?}"
    );

    let (scenario, faults) = match (mode, durable_outcomes) {
        (Replication::Asynchronous, _) => (
            "10a. failover, asynchronous replication",
            "replication link partitioned, primary SIGKILLed, standby promoted, address moved",
        ),
        (Replication::Synchronous, false) => (
            "10b. failover, synchronous replication",
            "as 10a, with `synchronous_standby_names = '*'`",
        ),
        (Replication::Synchronous, true) => (
            "10c. failover, synchronous replication, durable outcomes",
            "as 10b, the workers with `durable_outcomes(true)`",
        ),
    };
    checks::report_in(
        &ledger,
        &queue,
        &Figures {
            scenario,
            load: format!(
                "{jobs} jobs / {groups} groups + {LONG_JOBS} of 8 s + 3 producers; 4 procs × 8, lease 20 s"
            ),
            faults: faults.into(),
            enqueued: counts.expected,
            completed: counts.completed,
            duplicates: format!(
                "{} ({} ran to the end on the old primary, ack lost; {} twice on the new one)",
                counts.duplicates, m.reran_after_completion, m.twice_on_new_primary
            ),
            lost: counts.lost,
            max_lease_overrun: counts.max_lease_overrun(LEASE),
            notes: format!(
                "standby behind for {} ms before the kill; commits returned meanwhile: {} jobs ({} ran on the old \
                 primary, {} lost); at the kill {} sessions waited for the standby and {} for \
                 their locks; overlaps \
                 across the failover {} (longest {} ms; {} of them by a handler that stops when \
                 cancelled, longest {} ms), other overlaps {}; order violations {}; \
                 leases lost {}; address moved {} ms after the kill, first start on the new \
                 primary {} ms after the move; commit without answer: {} jobs, {} ran; the \
                 probe's LISTEN came back: {}",
                m.lag_ms,
                m.lag_committed_jobs,
                m.lag_committed_ran,
                m.lag_committed_jobs - m.lag_committed_ran,
                m.waiting_for_standby,
                m.waiting_behind,
                m.overlaps_across,
                m.longest_overlap_ms,
                m.overlaps_stopping,
                m.longest_overlap_stopping_ms,
                m.overlaps_other,
                counts.order_violations,
                m.leases_lost,
                m.failover_ms,
                m.first_start_after_ms,
                m.uncertain,
                m.uncertain_ran,
                probe_ran.is_some(),
            ),
        },
        &counts,
    )
    .await;

    // both modes
    assert_eq!(running, 4, "no worker died: {:?}", fleet.crashed());
    assert!(fleet.crashed().is_empty(), "{:?}", fleet.crashed());
    assert_eq!(
        probe_ran,
        Some(probe_name),
        "the probe (poll interval 1 h) ran the job enqueued after the failover: its LISTEN \
         came back"
    );
    assert!(
        before.committed.len() >= PER_TX as usize && after.committed.len() >= PER_TX as usize,
        "the producer committed before the lag and after the failover"
    );
    assert_eq!(
        m.lost_outside_lag, 0,
        "a job committed before the standby fell behind, or after the failover, never ran: {m:?}"
    );
    assert_eq!(
        counts.forbidden_ran, 0,
        "a job whose transaction never committed ran"
    );
    assert_eq!(
        m.twice_on_new_primary, 0,
        "a job ran twice on the new primary: {m:?}"
    );
    assert_eq!(
        m.overlaps_other, 0,
        "two executions of a group overlapped on one primary: {m:?}"
    );
    assert_eq!(counts.unfinished, 0);
    assert_eq!(counts.queue_left, 0);
    assert_eq!(counts.leased_groups, 0);
    assert_eq!(counts.dead_letters, 0);
    match mode {
        Replication::Synchronous => {
            assert_eq!(
                m.lag_committed_jobs, 0,
                "no commit returns while the synchronous standby does not confirm it"
            );
            assert!(m.waiting_for_standby >= 1, "commits waited for the standby");
            assert_eq!(
                counts.lost, 0,
                "a job was lost with synchronous replication"
            );
            assert_eq!(
                counts.overlaps, 0,
                "two workers ran one group at once with synchronous replication"
            );
            assert_eq!(counts.order_violations, 0, "a group ran out of order");
            if durable_outcomes {
                assert_eq!(
                    m.reran_after_completion, 0,
                    "a job that ran to the end ran again: its outcome was durable: {m:?}"
                );
            }
        }
        Replication::Asynchronous => {
            assert!(
                m.lag_committed_jobs > 0,
                "commits returned while the standby was behind"
            );
            assert!(
                m.leases_lost as i64 >= m.overlaps_across,
                "the first execution of each overlap had its result refused (lease lost): {m:?}"
            );
            assert_eq!(
                counts.lost,
                m.lag_committed_jobs - m.lag_committed_ran,
                "the jobs lost are exactly the ones committed while the standby was behind \
                 that had not run yet"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10a_failover_with_asynchronous_replication_loses_only_what_the_standby_never_had() {
    failover(Replication::Asynchronous, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10b_failover_with_synchronous_replication_loses_nothing_and_never_overlaps() {
    failover(Replication::Synchronous, false).await;
}

/// As 10b, with durable outcomes: a job that ran to the end is not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s10c_failover_with_synchronous_replication_and_durable_outcomes_runs_nothing_again() {
    failover(Replication::Synchronous, true).await;
}
