//! Scenario scale: one total concurrency (64) split over 1, 2, 4 and 8 worker *processes*
//! (this binary, re-run as children with a hidden argument, as `rss` does) on one
//! PostgreSQL, draining the same pre-filled queue of ungrouped no-op jobs.
//!
//! Per process count: jobs/s from the start signal to the moment the children's acks add up
//! to the fill (so the queue is empty, which is then checked), the ratio to the 1-process
//! rate of the same round, and how evenly the processes shared the jobs (each one's jobs ÷
//! the fair share; the goal is within ±20%). Rounds are interleaved (1, 2, 4, 8, 1, …) and
//! each run starts from a fresh fill. Printed per process count, to tell why a split is
//! slower: the server's and the worker processes' CPU time and the database's transactions,
//! per 1,000 jobs.
//!
//! The protocol with a child, one line each way: it connects, builds its pool and prints
//! `ready`; on `go` it starts the pool and prints `acked=N` whenever its count of acks
//! applied changes (at most every 2 ms); on `stop`, or when its stdin closes (the bench
//! ended, failed or was interrupted), it shuts the pool down, prints `done acked=N …` and
//! exits. Children are killed when their handles drop (an error or Ctrl-C in the bench).

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::AssertSqlSafe;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, oneshot};

use crate::cpu::{children_ticks, clock_ticks_per_second, machine_ticks, proc_ticks};
use crate::jobs::Probe;
use crate::queue::{self, expect_empty, fill_single, prepare};
use crate::report::{Target, quantile};
use crate::{Ctx, Res, bail, db};

/// The hidden first argument that makes this binary a scale child.
pub const CHILD_ARG: &str = "__scale-child";
/// The concurrency of all processes together.
const TOTAL_CONCURRENCY: usize = 64;
/// The process counts compared.
const PROCESSES: [usize; 4] = [1, 2, 4, 8];
/// Fairness goal: each process's share within this fraction of the fair share.
const FAIR_WITHIN: f64 = 0.2;
/// How long a child may take to get ready, and the bench to see no progress, before failing.
const PATIENCE: Duration = Duration::from_secs(60);

/// The child: `__scale-child <url> <concurrency>`.
pub fn child_main(args: &[String]) -> ExitCode {
    let (Some(url), Some(Ok(concurrency))) = (args.first(), args.get(1).map(|c| c.parse())) else {
        eprintln!("usage: {CHILD_ARG} <url> <concurrency>");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(child(url, concurrency)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("scale child: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The lines of stdin, read on a thread of their own (a blocking read the runtime need not
/// wait for when the child exits); the channel closes at the end of stdin.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

async fn child(url: &str, concurrency: usize) -> Res<()> {
    // the worker opens its own four connections; the pool is for its start-up checks
    let pool = db::pool(url, 2, &[]).await?;
    sqlx::query("SELECT 1").execute(&pool).await?;
    let worker = queue::worker(&pool, Probe::new(), concurrency)?;
    let mut stdin = stdin_lines();
    println!("ready");
    match stdin.recv().await.as_deref() {
        Some("go") => {}
        Some(other) => bail!("expected go, got {other:?}"),
        None => return Ok(()), // the bench went away before the start
    }
    let handle = worker.start();
    let mut reported = 0;
    let mut ticker = tokio::time::interval(Duration::from_millis(2));
    loop {
        tokio::select! {
            // `stop`, anything else, or the end of stdin: the bench is done with us
            _ = stdin.recv() => break,
            _ = ticker.tick() => {
                let acked = handle.stats().succeeded;
                if acked != reported {
                    reported = acked;
                    println!("acked={acked}");
                }
                if handle.is_finished() {
                    break; // a failed pool: shutdown() below says why
                }
            }
        }
    }
    let stats = handle.shutdown().await?;
    println!(
        "done acked={} retried={} dead={} errors={}",
        stats.succeeded,
        stats.retried,
        stats.dead_lettered,
        stats.database_errors + stats.leases_lost
    );
    pool.close().await;
    Ok(())
}

/// A running child: its stdin, its latest ack count, and its last line when it ends.
struct Worker {
    process: Child,
    stdin: ChildStdin,
    acked: Arc<AtomicU64>,
    done: oneshot::Receiver<Res<String>>,
}

/// Starts a child at `concurrency` and waits for its `ready`.
async fn spawn(ctx: &Ctx, concurrency: usize) -> Res<Worker> {
    let mut process = Command::new(std::env::current_exe()?)
        .arg(CHILD_ARG)
        .arg(&ctx.url)
        .arg(concurrency.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdin = process.stdin.take().ok_or("no stdin")?;
    let mut lines = BufReader::new(process.stdout.take().ok_or("no stdout")?).lines();
    match tokio::time::timeout(PATIENCE, lines.next_line()).await {
        Ok(Ok(Some(line))) if line == "ready" => {}
        Ok(Ok(other)) => bail!("scale child: expected ready, got {other:?}"),
        Ok(Err(error)) => return Err(error.into()),
        Err(_) => bail!("scale child: not ready after {PATIENCE:?}"),
    }
    let acked = Arc::new(AtomicU64::new(0));
    let (done_tx, done) = oneshot::channel();
    let counter = acked.clone();
    tokio::spawn(async move {
        let mut last = None;
        let ended = loop {
            match lines.next_line().await {
                Ok(Some(line)) => {
                    if let Some(n) = line.strip_prefix("acked=").and_then(|n| n.parse().ok()) {
                        counter.store(n, Ordering::Relaxed);
                    } else if line.starts_with("done ") {
                        last = Some(line);
                    }
                }
                Ok(None) => break last.ok_or_else(|| "scale child ended without done".into()),
                Err(error) => break Err(error.into()),
            }
        };
        let _ = done_tx.send(ended);
    });
    Ok(Worker {
        process,
        stdin,
        acked,
        done,
    })
}

/// A field `name=N` of a `done` line.
fn field(line: &str, name: &str) -> Res<u64> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("scale child: no {name} in {line:?}").into())
}

/// Where a run's work went, per 1,000 jobs: CPU of the server (the machine's busy time less
/// this process and its children: the server runs on this host) and of the worker processes,
/// and the database's transactions (claims, outcomes, heartbeats, LISTEN/NOTIFY).
#[derive(Clone, Copy, Default)]
struct Cost {
    server_cpu_ms: f64,
    client_cpu_ms: f64,
    transactions: f64,
    claim_ms: f64,
    settle_ms: f64,
}

/// The database's committed and rolled-back transactions so far, and the milliseconds
/// spent in harel_claim and in harel_settle (`track_functions = pl`, set on the bench
/// database by `run`). Backends report theirs at most once a second and when they exit.
async fn activity(ctx: &Ctx) -> Res<(i64, f64, f64)> {
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&ctx.pool)
        .await?;
    Ok(sqlx::query_as(
        "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database
                  WHERE datname = current_database()),
                COALESCE((SELECT sum(total_time) FROM pg_stat_user_functions
                           WHERE funcname = 'harel_claim'), 0)::float8,
                COALESCE((SELECT sum(total_time) FROM pg_stat_user_functions
                           WHERE funcname = 'harel_settle'), 0)::float8",
    )
    .fetch_one(&ctx.pool)
    .await?)
}

/// One run: a fresh fill of `n` jobs drained by `processes` children. Returns jobs/s, each
/// child's jobs and the run's cost.
async fn run_once(ctx: &Ctx, processes: usize, n: u64) -> Res<(f64, Vec<u64>, Cost)> {
    let n = prepare(&ctx.pool, async || {
        fill_single(&ctx.fill_pool, &ctx.transport, n).await
    })
    .await?;
    let concurrency = TOTAL_CONCURRENCY / processes;
    let mut workers = Vec::with_capacity(processes);
    for _ in 0..processes {
        workers.push(spawn(ctx, concurrency).await?);
    }

    // children made their connections: let their start-up transactions be reported first
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let activity_before = activity(ctx).await?;
    let (machine_before, _) = machine_ticks();
    let (self_before, children_before) = (
        proc_ticks(std::process::id()).unwrap_or(0),
        children_ticks(),
    );
    let started = Instant::now();
    for worker in &mut workers {
        worker.stdin.write_all(b"go\n").await?;
        worker.stdin.flush().await?;
    }
    let mut last = (0, Instant::now());
    let elapsed = loop {
        let acked: u64 = workers
            .iter()
            .map(|w| w.acked.load(Ordering::Relaxed))
            .sum();
        if acked >= n {
            break started.elapsed();
        }
        if acked != last.0 {
            last = (acked, Instant::now());
        } else if last.1.elapsed() > PATIENCE {
            bail!("scale: {acked} of {n} acked, no progress for {PATIENCE:?}");
        }
        for worker in &mut workers {
            if let Some(status) = worker.process.try_wait()? {
                bail!("scale: a child exited early ({status})");
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };

    for worker in &mut workers {
        worker.stdin.write_all(b"stop\n").await?;
        worker.stdin.flush().await?;
    }
    let mut shares = Vec::with_capacity(processes);
    for worker in workers {
        let Worker {
            mut process,
            stdin,
            done,
            ..
        } = worker;
        drop(stdin); // and its end, for a child that missed the line
        let line = tokio::time::timeout(PATIENCE, done)
            .await
            .map_err(|_| "scale child: no done line")?
            .map_err(|_| "scale child: its reader died")??;
        let status = tokio::time::timeout(PATIENCE, process.wait())
            .await
            .map_err(|_| "scale child: did not exit")??;
        if !status.success() {
            bail!("scale child failed ({status}): {line}");
        }
        if field(&line, "retried")? + field(&line, "dead")? > 0 {
            bail!("scale: jobs failed in a child: {line}");
        }
        let errors = field(&line, "errors")?;
        if errors > 0 {
            queue::WORKER_ERRORS.fetch_add(errors, Ordering::Relaxed);
            println!("# note: scale child survived {errors} database errors or lost leases");
        }
        shares.push(field(&line, "acked")?);
    }
    let (machine_after, _) = machine_ticks();
    let (self_after, children_after) = (
        proc_ticks(std::process::id()).unwrap_or(0),
        children_ticks(),
    );
    let ticks_per_second = clock_ticks_per_second();
    let ms_per_1000 = |ticks: u64| ticks as f64 / ticks_per_second * 1e6 / n as f64;
    let client = children_after.saturating_sub(children_before);
    let own = self_after.saturating_sub(self_before);
    let mut cost = Cost {
        server_cpu_ms: ms_per_1000(
            machine_after
                .saturating_sub(machine_before)
                .saturating_sub(client + own),
        ),
        client_cpu_ms: ms_per_1000(client),
        ..Cost::default()
    };
    expect_empty(&ctx.pool, "scale").await?;
    let total: u64 = shares.iter().sum();
    if total != n {
        bail!("scale: the children acked {total} jobs, expected {n}");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let activity_after = activity(ctx).await?;
    let per_1000 = 1000.0 / n as f64;
    cost.transactions = (activity_after.0 - activity_before.0) as f64 * per_1000;
    cost.claim_ms = (activity_after.1 - activity_before.1) * per_1000;
    cost.settle_ms = (activity_after.2 - activity_before.2) * per_1000;
    Ok((n as f64 / elapsed.as_secs_f64(), shares, cost))
}

/// Each share ÷ the fair share.
fn share_ratios(shares: &[u64]) -> Vec<f64> {
    let total: u64 = shares.iter().sum();
    let fair = total as f64 / shares.len() as f64;
    shares.iter().map(|s| *s as f64 / fair).collect()
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(100_000, 20_000);
    let rounds = ctx.runs.max(3);
    // the children's sessions time their function calls (see `activity`)
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER DATABASE \"{}\" SET track_functions = 'pl'",
        ctx.db_name
    )))
    .execute(&ctx.pool)
    .await?;
    // warm-up (page cache, the binary), not measured
    for processes in PROCESSES {
        run_once(ctx, processes, n / 5).await?;
    }
    let mut costs = vec![Vec::new(); PROCESSES.len()];
    let mut rates = vec![Vec::new(); PROCESSES.len()];
    let mut ratios = vec![Vec::new(); PROCESSES.len()];
    let mut min_shares = vec![Vec::new(); PROCESSES.len()];
    let mut max_shares = vec![Vec::new(); PROCESSES.len()];
    for round in 1..=rounds {
        let mut line = Vec::new();
        let mut one = f64::NAN;
        for (i, processes) in PROCESSES.into_iter().enumerate() {
            let (rate, shares, cost) = run_once(ctx, processes, n).await?;
            costs[i].push(cost);
            if processes == 1 {
                one = rate;
            }
            let fair = share_ratios(&shares);
            let (lo, hi) = fair
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            line.push(format!("p{processes}={rate:.0} shares={shares:?}"));
            rates[i].push(rate);
            ratios[i].push(rate / one);
            min_shares[i].push(lo);
            max_shares[i].push(hi);
        }
        println!("# scale round {round}: {}", line.join(" "));
    }
    // why a split is slower: the medians of each run's cost (printed, not goals)
    for (i, processes) in PROCESSES.into_iter().enumerate() {
        let median = |f: fn(&Cost) -> f64| {
            let mut values: Vec<f64> = costs[i].iter().map(f).collect();
            values.sort_by(f64::total_cmp);
            quantile(&values, 0.5)
        };
        println!(
            "# scale cost p{processes} per 1,000 jobs (medians): server CPU {:.0} ms, \
             worker processes' CPU {:.0} ms, transactions {:.1}, in harel_claim {:.1} ms, \
             in harel_settle {:.1} ms",
            median(|c| c.server_cpu_ms),
            median(|c| c.client_cpu_ms),
            median(|c| c.transactions),
            median(|c| c.claim_ms),
            median(|c| c.settle_ms),
        );
    }
    for (i, processes) in PROCESSES.into_iter().enumerate() {
        let each = TOTAL_CONCURRENCY / processes;
        ctx.report.figure(
            format!("scale_p{processes}"),
            "jobs/s",
            &rates[i],
            None,
            format!("processes={processes} concurrency_per_process={each} jobs={n}"),
        );
        if processes == 1 {
            continue;
        }
        ctx.report.figure(
            format!("scale_p{processes}_over_p1"),
            "ratio",
            &ratios[i],
            None,
            "jobs/s ÷ the 1-process jobs/s of the same round",
        );
        ctx.report.figure(
            format!("scale_p{processes}_share_min"),
            "ratio",
            &min_shares[i],
            Some(Target::AtLeast(1.0 - FAIR_WITHIN)),
            "the smallest process's jobs ÷ the fair share (jobs / processes)",
        );
        ctx.report.figure(
            format!("scale_p{processes}_share_max"),
            "ratio",
            &max_shares[i],
            Some(Target::AtMost(1.0 + FAIR_WITHIN)),
            "the largest process's jobs ÷ the fair share",
        );
    }
    queue::reset(&ctx.pool).await?;
    Ok(())
}
