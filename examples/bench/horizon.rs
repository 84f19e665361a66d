//! Scenario horizon: what a long-held snapshot does to the queue.
//!
//! Producers enqueue ungrouped jobs at a fixed rate (single-job `Enqueue`s spread over a few
//! tasks, open loop: a producer behind its schedule sends one job after another until it has
//! caught up, or above 2,000 jobs/s the jobs that fell due in one `JobBatch` of up to 20;
//! the rate reached is printed beside the one offered), and a worker pool at concurrency 32 runs handlers that record their
//! start and then sleep a few ms. After a warm-up, three phases of equal length:
//!
//! 1. *clean*;
//! 2. *held*: another session runs `BEGIN; SELECT txid_current();` and stays idle in that
//!    transaction, so no row version deleted from then on can be removed, by VACUUM or by the
//!    index scans' own clean-up (autovacuum as the server has it; where it is off, the worker
//!    pool's maintenance task vacuums the queue tables, as in production);
//! 3. *recovery*: that session commits.
//!
//! Per phase: the claim's round trip (a probe on a connection of its own, every 100 ms:
//! `Transport::claim_many` with limit 1 inside a transaction that is rolled back, so it
//! scans the same index range as the pool's claims and takes no job from it), the pool's own
//! claims (server time per `harel_claim` call, from `pg_stat_user_functions`), the
//! enqueue→handler-start latency of the jobs started in the phase, completed ÷ enqueued, the
//! backlog at the end, and the dead rows and sizes of the queue tables. A `#` timeline row
//! every 30 s (every 5 s when phases are shorter than 2 minutes), and in recovery, how long
//! the start latency's p99 took to come back within twice the clean phase's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use harel_jobs::transport::{ClaimRequest, Transport};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions as _, Connection as _, PgConnection, PgPool};

use crate::jobs::Probe;
use crate::queue::{finish, reset, worker};
use crate::report::{Histogram, quantile};
use crate::steady::produce;
use crate::{Ctx, Res, bail, db};

/// The scenario's settings from the command line (`--minutes`, `--rate`, `--handler-ms`).
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Each phase's length in minutes (fractions allowed). Default 3; 20 s with `--quick`.
    pub minutes: Option<f64>,
    /// The producers' rates, one run each. Default 1,000 then 5,000; 1,000 with `--quick`.
    pub rates: Option<Vec<u64>>,
    /// How long each handler sleeps. Default 1 ms.
    pub handler_ms: Option<f64>,
}

/// The rates.
const RATES: [u64; 2] = [1_000, 5_000];
const DEFAULT_PHASE: Duration = Duration::from_secs(180);
const QUICK_PHASE: Duration = Duration::from_secs(20);
const DEFAULT_HANDLER_MS: f64 = 1.0;
/// The highest rate produced with single-job enqueues only (see [`producer_batch`]).
const SINGLE_ENQUEUE_RATE: u64 = 2_000;
/// The worker pool's concurrency.
const CONCURRENCY: usize = 32;
/// Production before the clean phase, not measured.
const WARMUP: Duration = Duration::from_secs(5);
/// The claim probe's period.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// The start latencies are collected per slot of this length.
const SLOT: Duration = Duration::from_secs(1);
/// Recovery is judged on windows of this many slots.
const RECOVERY_WINDOW_SLOTS: usize = 5;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Clean,
    Held,
    Recovery,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Clean, Phase::Held, Phase::Recovery];

    fn name(self) -> &'static str {
        match self {
            Phase::Clean => "clean",
            Phase::Held => "held",
            Phase::Recovery => "recovery",
        }
    }
}

/// The in-process counters at one instant.
#[derive(Clone, Copy)]
struct Counters {
    at: Instant,
    published: u64,
    started: u64,
    succeeded: u64,
}

/// One queue table's statistics.
#[derive(Clone)]
struct TableStats {
    name: String,
    dead: i64,
    bytes: i64,
    vacuums: i64,
}

/// What the server says at one instant.
#[derive(Clone)]
struct DbStats {
    tables: Vec<TableStats>,
    /// `harel_claim` calls by the pool's sessions, and their total time (ms).
    claim_calls: i64,
    claim_ms: f64,
    /// The age (in transactions) of the oldest transaction or snapshot in the database.
    horizon_age: Option<i32>,
}

impl DbStats {
    async fn read(pool: &PgPool) -> Res<DbStats> {
        let rows: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, n_dead_tup, pg_total_relation_size(relid),
                    vacuum_count + autovacuum_count
               FROM pg_stat_user_tables
              WHERE schemaname = 'harel' AND relname NOT LIKE '\\_%'
              ORDER BY relname",
        )
        .fetch_all(pool)
        .await?;
        let (claim_calls, claim_ms): (i64, f64) = sqlx::query_as(
            "SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_time), 0)::float8
               FROM pg_stat_user_functions
              WHERE schemaname = 'harel' AND funcname = 'harel_claim'",
        )
        .fetch_one(pool)
        .await?;
        let horizon_age: Option<i32> = sqlx::query_scalar(
            "SELECT max(greatest(age(backend_xid), age(backend_xmin)))
               FROM pg_stat_activity WHERE datname = current_database()",
        )
        .fetch_one(pool)
        .await?;
        Ok(DbStats {
            tables: rows
                .into_iter()
                .map(|(name, dead, bytes, vacuums)| TableStats {
                    name,
                    dead,
                    bytes,
                    vacuums,
                })
                .collect(),
            claim_calls,
            claim_ms,
            horizon_age,
        })
    }

    fn dead(&self) -> i64 {
        self.tables.iter().map(|t| t.dead).sum()
    }

    fn mb(&self) -> f64 {
        self.tables.iter().map(|t| t.bytes).sum::<i64>() as f64 / 1_048_576.0
    }

    fn vacuums(&self) -> i64 {
        self.tables.iter().map(|t| t.vacuums).sum()
    }

    /// `name:dead` per table.
    fn dead_by_table(&self) -> String {
        let parts: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{}:{}", t.name, t.dead))
            .collect();
        parts.join(",")
    }

    /// `name:MB` per table.
    fn mb_by_table(&self) -> String {
        let parts: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{}:{:.1}", t.name, t.bytes as f64 / 1_048_576.0))
            .collect();
        parts.join(",")
    }

    /// Mean server time (ms) per `harel_claim` call since `before`, and the calls.
    fn claim_mean_since(&self, before: &DbStats) -> (f64, i64) {
        let calls = self.claim_calls - before.claim_calls;
        let ms = self.claim_ms - before.claim_ms;
        (
            if calls > 0 {
                ms / calls as f64
            } else {
                f64::NAN
            },
            calls,
        )
    }
}

/// Everything the run shares between its tasks.
struct Run {
    rate: u64,
    probe: Arc<Probe>,
    published: Arc<AtomicU64>,
    /// The claim probe's samples: (when, round trip in ms, whether it found a job).
    claims: Arc<Mutex<Vec<(Instant, f64, bool)>>>,
    handle: harel_jobs::WorkerHandle,
}

impl Run {
    fn counters(&self) -> Counters {
        Counters {
            at: Instant::now(),
            published: self.published.load(Ordering::Relaxed),
            started: self.probe.started(),
            succeeded: self.handle.stats().succeeded,
        }
    }

    /// The start latencies recorded since the last call.
    fn take_starts(&self) -> Histogram {
        let delays = std::mem::take(&mut *self.probe.delays.lock().unwrap());
        let mut histogram = Histogram::default();
        for (_, delay_us) in delays {
            histogram.record_us(delay_us);
        }
        histogram
    }

    /// The claim probe's round trips (ms, sorted) in `[from, to)`, and how many found a job.
    fn claims_between(&self, from: Instant, to: Instant) -> (Vec<f64>, usize) {
        let claims = self.claims.lock().unwrap();
        let within: Vec<&(Instant, f64, bool)> = claims
            .iter()
            .filter(|(at, _, _)| *at >= from && *at < to)
            .collect();
        let found = within.iter().filter(|(_, _, found)| *found).count();
        let mut ms: Vec<f64> = within.iter().map(|(_, ms, _)| *ms).collect();
        ms.sort_by(f64::total_cmp);
        (ms, found)
    }
}

/// What one phase measured.
struct PhaseResult {
    phase: Phase,
    seconds: f64,
    claims: Vec<f64>,
    claims_found: usize,
    starts: Histogram,
    /// p99 of the start latency per window of [`RECOVERY_WINDOW_SLOTS`] slots: (seconds from
    /// the phase's start to the window's start, p99 ms, samples).
    windows: Vec<(f64, f64, u64)>,
    enqueued: u64,
    completed: u64,
    backlog: u64,
    end: DbStats,
    pool_claim_mean_ms: f64,
    pool_claim_calls: i64,
}

/// A `BEGIN; SELECT txid_current();` session, idle in its transaction until committed.
struct Holder {
    connection: PgConnection,
    since: Instant,
}

impl Holder {
    async fn begin(url: &str) -> Res<Holder> {
        let options: PgConnectOptions = url.parse()?;
        let mut connection = options
            .application_name("harel-bench-horizon-holder")
            .connect()
            .await?;
        sqlx::raw_sql("BEGIN").execute(&mut connection).await?;
        let (pid, xid): (i32, String) =
            sqlx::query_as("SELECT pg_backend_pid(), txid_current()::text")
                .fetch_one(&mut connection)
                .await?;
        println!(
            "# horizon: session pid={pid} ran BEGIN; SELECT txid_current() (= {xid}) and stays idle in transaction"
        );
        Ok(Holder {
            connection,
            since: Instant::now(),
        })
    }

    async fn commit(mut self) -> Res<()> {
        sqlx::raw_sql("COMMIT")
            .execute(&mut self.connection)
            .await?;
        println!(
            "# horizon: the session committed after {:.0} s",
            self.since.elapsed().as_secs_f64()
        );
        self.connection.close().await?;
        Ok(())
    }
}

/// Every [`PROBE_EVERY`] until `end`: one claim (limit 1) in a transaction rolled back.
async fn claim_probe(
    url: String,
    claims: Arc<Mutex<Vec<(Instant, f64, bool)>>>,
    end: Instant,
) -> Res<()> {
    let options: PgConnectOptions = url.parse()?;
    let mut connection = options
        .application_name("harel-bench-horizon-probe")
        .connect()
        .await?;
    let transport = Transport::default();
    let mut ticks = tokio::time::interval(PROBE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while Instant::now() < end {
        ticks.tick().await;
        let mut tx = connection.begin().await?;
        let at = Instant::now();
        let request = ClaimRequest::new(Duration::from_secs(30));
        let claimed = transport.claim_many(&mut *tx, &request).await?;
        let ms = at.elapsed().as_secs_f64() * 1000.0;
        tx.rollback().await?;
        claims.lock().unwrap().push((at, ms, !claimed.is_empty()));
    }
    connection.close().await?;
    Ok(())
}

/// How many producer tasks for `rate` jobs/s: one per 125 jobs/s, 4 to 16 (each waits for
/// its enqueue's commit, a WAL flush: 0.5 to 3 ms on the bench machine).
fn producers_for(rate: u64) -> usize {
    (rate / 125).clamp(4, 16) as usize
}

/// The most jobs a producer behind its schedule sends in one round trip at `rate` jobs/s:
/// single-job `Enqueue`s up to [`SINGLE_ENQUEUE_RATE`], which they reach on the bench
/// machine; above it, the jobs that fell due in one `JobBatch` of up to 20 (one commit and
/// one `NOTIFY` for all of them), since single-job commits serialise on the notify queue's
/// lock at about 2,000/s.
fn producer_batch(rate: u64) -> u64 {
    if rate <= SINGLE_ENQUEUE_RATE { 1 } else { 20 }
}

/// The timeline row's length for phases of `phase`.
fn row_length(phase: Duration) -> Duration {
    if phase < Duration::from_secs(120) {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(30)
    }
}

fn ms(value: f64) -> String {
    if value.is_nan() {
        "-".to_owned()
    } else if value < 10.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.0}")
    }
}

/// Runs one phase from `start` to `start + length`, printing a timeline row every
/// [`row_length`].
async fn run_phase(
    ctx: &Ctx,
    run: &Run,
    phase: Phase,
    start: Instant,
    length: Duration,
    t0: Instant,
) -> Res<PhaseResult> {
    let end = start + length;
    let row = row_length(length);
    let first = run.counters();
    let db_first = DbStats::read(&ctx.pool).await?;
    let (mut row_counters, mut row_db) = (first, db_first.clone());
    let mut row_start = start;
    let mut row_starts = Histogram::default();
    let mut slots: Vec<Histogram> = Vec::new();
    let mut slot_end = start;
    while slot_end < end {
        slot_end = (slot_end + SLOT).min(end);
        tokio::time::sleep_until(slot_end.into()).await;
        let slot = run.take_starts();
        row_starts.merge(&slot);
        slots.push(slot);
        // a row every `row`; a last piece shorter than half a row joins the row before it
        let full = slot_end.duration_since(row_start) >= row && end - slot_end >= row / 2;
        if !full && slot_end < end {
            continue;
        }
        let counters = run.counters();
        let db = DbStats::read(&ctx.pool).await?;
        let seconds = counters.at.duration_since(row_counters.at).as_secs_f64();
        let (claims, _) = run.claims_between(row_start, slot_end);
        let (pool_claim, _) = db.claim_mean_since(&row_db);
        println!(
            "# horizon r={} t={:.0}s {} enqueued/s={:.0} completed/s={:.0} backlog={} claim_ms p50={} p99={} pool_claim_ms={} start_ms p50={} p99={} dead_rows={} mb={:.1} vacuums={} horizon_age={}",
            run.rate,
            slot_end.duration_since(t0).as_secs_f64(),
            phase.name(),
            (counters.published - row_counters.published) as f64 / seconds,
            (counters.succeeded - row_counters.succeeded) as f64 / seconds,
            counters.published - counters.started,
            ms(quantile(&claims, 0.5)),
            ms(quantile(&claims, 0.99)),
            ms(pool_claim),
            ms(row_starts.quantile_ms(0.5)),
            ms(row_starts.quantile_ms(0.99)),
            db.dead(),
            db.mb(),
            db.vacuums(),
            db.horizon_age.map_or("-".to_owned(), |age| age.to_string()),
        );
        row_counters = counters;
        row_db = db;
        row_start = slot_end;
        row_starts = Histogram::default();
    }
    // the last row ended with the phase
    let (last, end_db) = (row_counters, row_db);
    let mut starts = Histogram::default();
    for slot in &slots {
        starts.merge(slot);
    }
    let windows = slots
        .chunks(RECOVERY_WINDOW_SLOTS)
        .enumerate()
        .map(|(i, window)| {
            let mut merged = Histogram::default();
            for slot in window {
                merged.merge(slot);
            }
            let from = (i * RECOVERY_WINDOW_SLOTS) as f64 * SLOT.as_secs_f64();
            (from, merged.quantile_ms(0.99), merged.len())
        })
        .collect();
    let (claims, claims_found) = run.claims_between(start, end);
    let (pool_claim_mean_ms, pool_claim_calls) = end_db.claim_mean_since(&db_first);
    Ok(PhaseResult {
        phase,
        seconds: last.at.duration_since(first.at).as_secs_f64(),
        claims,
        claims_found,
        starts,
        windows,
        enqueued: last.published - first.published,
        completed: last.succeeded - first.succeeded,
        backlog: last.published - last.started,
        end: end_db,
        pool_claim_mean_ms,
        pool_claim_calls,
    })
}

/// One run at `rate`: warm-up, clean, held, recovery; then the backlog drains and every
/// job is checked to have run once.
async fn horizon_once(
    ctx: &Ctx,
    worker_pool: &PgPool,
    rate: u64,
    phase_length: Duration,
    work: Duration,
) -> Res<Vec<PhaseResult>> {
    reset(&ctx.pool).await?;
    let probe = Probe::recording(work);
    let handle = worker(worker_pool, probe.clone(), CONCURRENCY)?.start();
    tokio::time::sleep(Duration::from_millis(500)).await; // LISTEN up, first claim done

    let tasks = producers_for(rate);
    let producer_pool = db::pool(&ctx.url, tasks as u32, &[]).await?;
    let t0 = Instant::now();
    let clean_start = t0 + WARMUP;
    let end = clean_start + 3 * phase_length;
    let run = Run {
        rate,
        probe,
        published: Arc::new(AtomicU64::new(0)),
        claims: Arc::new(Mutex::new(Vec::new())),
        handle,
    };
    let mut producers = Vec::new();
    for i in 0..tasks {
        // stagger the producers so their schedules interleave
        let offset = Duration::from_secs_f64(i as f64 / rate as f64);
        producers.push(tokio::spawn(produce(
            producer_pool.clone(),
            rate as f64 / tasks as f64,
            t0 + offset,
            end,
            Arc::clone(&run.published),
            None,
            producer_batch(rate),
        )));
    }
    let prober = tokio::spawn(claim_probe(ctx.url.clone(), Arc::clone(&run.claims), end));
    println!(
        "# horizon r={rate}: producers={tasks} (open loop; jobs per round trip at most {}) concurrency={CONCURRENCY} handler_sleep_ms={} phase_s={:.0} warmup_s={}",
        producer_batch(rate),
        work.as_secs_f64() * 1000.0,
        phase_length.as_secs_f64(),
        WARMUP.as_secs()
    );

    tokio::time::sleep_until(clean_start.into()).await;
    run.take_starts(); // the warm-up's
    let mut results = Vec::new();
    let mut holder = None;
    for (i, phase) in Phase::ALL.into_iter().enumerate() {
        match phase {
            Phase::Clean => {}
            Phase::Held => holder = Some(Holder::begin(&ctx.url).await?),
            Phase::Recovery => {
                if let Some(holder) = holder.take() {
                    holder.commit().await?;
                }
            }
        }
        let start = clean_start + phase_length * i as u32;
        results.push(run_phase(ctx, &run, phase, start, phase_length, t0).await?);
    }
    for producer in producers {
        producer.await??;
    }
    prober.await??;
    producer_pool.close().await;
    let total = run.published.load(Ordering::Relaxed);
    let what = format!("horizon r={rate}");
    let drained = finish(&ctx.pool, run.handle, &run.probe, total, &what).await?;
    println!(
        "# horizon r={rate}: {total} jobs enqueued, each ran once; after the producers stopped, the last job started {:.1} s later",
        drained.as_secs_f64()
    );
    Ok(results)
}

/// Prints the figures of one run.
fn report(ctx: &Ctx, rate: u64, results: &[PhaseResult]) {
    let fig = |name: String, unit: &'static str, value: f64, extra: String| {
        ctx.report.figure(name, unit, &[value], None, extra);
    };
    for r in results {
        let p = format!("horizon_r{rate}_{}", r.phase.name());
        let probe = format!(
            "label=\"claim probe: claim_many(limit 1) in a transaction rolled back, every 100 ms\" samples={} found_a_job={}",
            r.claims.len(),
            r.claims_found
        );
        for (q, name) in [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")] {
            let value = quantile(&r.claims, q);
            fig(format!("{p}_claim_{name}"), "ms", value, probe.clone());
        }
        fig(
            format!("{p}_pool_claim_mean"),
            "ms",
            r.pool_claim_mean_ms,
            format!(
                "label=\"server time per harel_claim call of the pool (pg_stat_user_functions)\" calls={} jobs_per_call={:.1}",
                r.pool_claim_calls,
                r.completed as f64 / r.pool_claim_calls.max(1) as f64
            ),
        );
        let starts = format!(
            "label=\"enqueue to handler start, jobs started in the phase\" samples={}",
            r.starts.len()
        );
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            let value = r.starts.quantile_ms(q);
            fig(format!("{p}_start_{name}"), "ms", value, starts.clone());
        }
        fig(
            format!("{p}_completed_over_enqueued"),
            "ratio",
            r.completed as f64 / r.enqueued.max(1) as f64,
            format!(
                "completed_s={:.0} enqueued_s={:.0} offered_s={rate} phase_s={:.0}",
                r.completed as f64 / r.seconds,
                r.enqueued as f64 / r.seconds,
                r.seconds
            ),
        );
        fig(
            format!("{p}_backlog"),
            "jobs",
            r.backlog as f64,
            "label=\"enqueued, handler not started, at the phase's end\"".to_owned(),
        );
        fig(
            format!("{p}_dead_rows"),
            "rows",
            r.end.dead() as f64,
            format!(
                "label=\"n_dead_tup of the queue tables at the phase's end\" {} vacuums_so_far={}",
                r.end.dead_by_table(),
                r.end.vacuums()
            ),
        );
        fig(
            format!("{p}_size"),
            "MB",
            r.end.mb(),
            format!(
                "label=\"pg_total_relation_size of the queue tables at the phase's end\" {}",
                r.end.mb_by_table()
            ),
        );
    }
    let [clean, held, recovery] = results else {
        return;
    };
    fig(
        format!("horizon_r{rate}_held_over_clean_claim_p99"),
        "ratio",
        quantile(&held.claims, 0.99) / quantile(&clean.claims, 0.99),
        "label=\"claim probe p99, held / clean\"".to_owned(),
    );
    fig(
        format!("horizon_r{rate}_held_over_clean_start_p99"),
        "ratio",
        held.starts.quantile_ms(0.99) / clean.starts.quantile_ms(0.99),
        "label=\"enqueue to start p99, held / clean\"".to_owned(),
    );
    let threshold = 2.0 * clean.starts.quantile_ms(0.99);
    let within = |p99: f64| p99 <= threshold;
    let first_within = recovery.windows.iter().find(|(_, p99, _)| within(*p99));
    let relapses = first_within.map_or(0, |(from, _, _)| {
        recovery
            .windows
            .iter()
            .filter(|(at, p99, _)| at > from && !within(*p99))
            .count()
    });
    let windows: Vec<String> = recovery
        .windows
        .iter()
        .map(|(from, p99, _)| format!("{from:.0}s:{}", ms(*p99)))
        .collect();
    println!(
        "# horizon r={rate} recovery: start p99 per {} s window after the commit (ms): {}",
        RECOVERY_WINDOW_SLOTS as f64 * SLOT.as_secs_f64(),
        windows.join(" ")
    );
    fig(
        format!("horizon_r{rate}_recovery_time"),
        "s",
        first_within.map_or(recovery.seconds, |(from, _, _)| *from),
        format!(
            "label=\"from the commit to the first {} s window whose start p99 is within 2x the clean phase's ({} ms)\" recovered={} windows_above_later={relapses}",
            RECOVERY_WINDOW_SLOTS as f64 * SLOT.as_secs_f64(),
            ms(threshold),
            if first_within.is_some() {
                "yes"
            } else {
                "no (not within the phase)"
            }
        ),
    );
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let options = &ctx.horizon;
    // whole seconds, so the timeline's rows and the recovery's windows line up
    let phase = match options.minutes {
        Some(minutes) => Duration::from_secs((minutes * 60.0).round() as u64),
        None => ctx.size(DEFAULT_PHASE, QUICK_PHASE),
    };
    if phase < Duration::from_secs(5) {
        bail!("horizon: phases of at least 5 s (--minutes 0.1 or more)");
    }
    let rates = match &options.rates {
        Some(rates) => rates.clone(),
        None => RATES[..ctx.size(RATES.len(), 1)].to_vec(),
    };
    let work = Duration::from_secs_f64(options.handler_ms.unwrap_or(DEFAULT_HANDLER_MS) / 1000.0);

    let (autovacuum, idle_timeout, old_snapshot): (String, String, String) = sqlx::query_as(
        "SELECT current_setting('autovacuum'), current_setting('idle_in_transaction_session_timeout'),
                current_setting('old_snapshot_threshold')",
    )
    .fetch_one(&ctx.pool)
    .await?;
    let vacuum = if autovacuum == "on" {
        "autovacuum vacuums the queue tables (the migration tunes their thresholds)"
    } else {
        "the worker pool's maintenance task vacuums the queue tables (past 2,000 dead rows and 20% of the live ones, checked every 5 s)"
    };
    println!(
        "# horizon: autovacuum={autovacuum} (the server's setting): {vacuum}; idle_in_transaction_session_timeout={idle_timeout} old_snapshot_threshold={old_snapshot}"
    );
    println!(
        "# horizon: timeline rows every {} s (t: seconds since the producers started, after a warm-up of {} s): enqueued/completed per s, backlog (enqueued, not started), claim probe round trip, the pool's server time per harel_claim call, enqueue->start latency of the jobs started in the row, dead rows and MB of the queue tables, vacuums so far, age of the oldest transaction or snapshot (xids)",
        row_length(phase).as_secs(),
        WARMUP.as_secs()
    );
    // the pool's sessions count their function calls (these sessions only)
    let worker_pool = db::pool(&ctx.url, 8, &[("track_functions", "pl")]).await?;
    for rate in rates {
        let results = horizon_once(ctx, &worker_pool, rate, phase, work).await?;
        report(ctx, rate, &results);
    }
    worker_pool.close().await;
    reset(&ctx.pool).await?;
    Ok(())
}
