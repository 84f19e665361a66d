//! The harel-jobs benchmark.
//!
//! ```text
//! cargo run --release --example bench -- [scenario] [--quick] [--runs N]
//! ```
//!
//! Creates a database of its own on `DATABASE_URL`'s server (default
//! `postgres://postgres@127.0.0.1:5432/postgres`), migrates the queue into its default
//! schema `harel`, runs the scenarios and drops the database at the end (also on an error or
//! Ctrl-C). Every figure is one line `name=value unit=… n=… min=… max=…`: the median of
//! `n` measured runs (after a warm-up), with the smallest and largest run. Lines starting
//! with `#` are context (machine, server settings, checks, evidence).
//!
//! Scenarios (default `all`, in this order): `enqueue`, `drain`, `grouped`, `steady`,
//! `depth`, `soak`, `ceiling`, `floor`, `scale`, `rss`, `profile`; by name only: `horizon`
//! (`--minutes M` per phase, `--rate R[,R…]`, `--handler-ms MS`), `retention`, `limits`,
//! `metrics` (the drain with and without a metrics recorder), `noisy` (the drain beside a
//! noisy neighbour), `fair` (three tenants on one queue: shares of starts, a light tenant's
//! latency), `workflows` (a fan-in callback and chains of three, beside plain drains),
//! `dependents` (a job with 100,000 dependents settled in a batch, and what housekeeping
//! then resolves), `keys` (a batch of 100,000 jobs under as many fairness keys beside one under one key, and
//! a limit per key removed over as many parked groups).
//! `--recorder` installs a Prometheus recorder for harel-jobs' metrics for the whole run;
//! `--otel` (built with `--features opentelemetry`) an OpenTelemetry layer in the tracing
//! subscriber. See BENCHMARKS.md for what each measures.

mod ceiling;
mod cpu;
mod db;
mod dependents;
mod depth;
mod drain;
mod enqueue;
mod env;
mod fair;
mod floor;
mod horizon;
mod jobs;
mod noise;
#[cfg(feature = "opentelemetry")]
mod otel;
mod pgbench;
mod profile;
mod queue;
mod recorder;
mod report;
mod rss;
mod scale;
mod soak;
mod steady;
mod workflows;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use harel_jobs::transport::Transport;
use sqlx::PgPool;

use crate::db::BenchDb;
use crate::report::Report;

/// The error type of the whole benchmark: anything, with a message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// A result with [`Error`].
pub type Res<T> = Result<T, Error>;

/// Returns an error with a formatted message.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(format!($($arg)*).into())
    };
}

const SCENARIOS: &[&str] = &[
    "enqueue", "drain", "grouped", "steady", "depth", "soak", "ceiling", "floor", "scale", "rss",
    "profile",
];
/// Scenarios run only when named (not part of `all`): `horizon` takes 20 minutes at its
/// defaults, and hours with `--minutes 60`; `metrics` installs a global recorder; `noisy`
/// loads the whole machine.
const BY_NAME_ONLY: &[&str] = &[
    "horizon",
    "retention",
    "limits",
    "metrics",
    "noisy",
    "fair",
    "workflows",
    "dependents",
    "keys",
];

/// What every scenario gets.
pub struct Ctx {
    /// The URL of the bench database.
    pub url: String,
    /// Its name.
    pub db_name: String,
    /// A general pool on it (20 connections): counts, resets, producers, measured enqueues.
    pub pool: PgPool,
    /// The pool the (untimed) fills use (2 connections), apart from the measured ones.
    pub fill_pool: PgPool,
    /// The transport of the default schema.
    pub transport: Transport,
    /// Small sizes, for smoke tests.
    pub quick: bool,
    /// Measured runs per figure.
    pub runs: usize,
    /// The figures printed so far.
    pub report: Report,
    /// The horizon scenario's settings.
    pub horizon: horizon::Options,
}

impl Ctx {
    /// `full` normally, `quick` with `--quick`.
    pub fn size<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }
}

struct Args {
    scenarios: Vec<&'static str>,
    quick: bool,
    runs: usize,
    horizon: horizon::Options,
    /// `--recorder`: a Prometheus recorder on for the whole run.
    recorder: bool,
}

fn usage() -> String {
    format!(
        "usage: bench [scenario] [--quick] [--runs N] [--recorder] [--otel]\n  --recorder: install a \
         Prometheus recorder for harel-jobs' metrics (the `metrics` scenario compares)\n  --otel: an \
         OpenTelemetry layer in the tracing subscriber (a bench built with --features \
         opentelemetry)\n  scenarios: all (default), {}; by name \
         only: {}\n  horizon: [--minutes M (each phase; fractions allowed)] [--rate R[,R…]] \
         [--handler-ms MS]\n  env: DATABASE_URL (default \
         postgres://postgres@127.0.0.1:5432/postgres)",
        SCENARIOS.join(", "),
        BY_NAME_ONLY.join(", ")
    )
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut scenarios = Vec::new();
    let mut quick = false;
    let mut runs = 3;
    let mut horizon = horizon::Options::default();
    let mut recorder = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--recorder" => recorder = true,
            // handled in main, before anything else
            "--otel" => {}
            "--runs" => {
                runs = iter
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n >= 1)
                    .ok_or("--runs needs a number >= 1")?;
            }
            "--minutes" => {
                horizon.minutes = Some(
                    iter.next()
                        .and_then(|m| m.parse::<f64>().ok())
                        .filter(|m| m.is_finite() && *m > 0.0)
                        .ok_or("--minutes needs a number of minutes > 0 (fractions allowed)")?,
                );
            }
            "--rate" => {
                let rates: Option<Vec<u64>> = iter.next().and_then(|list| {
                    list.split(',')
                        .map(|r| r.trim().parse().ok().filter(|r| *r >= 1))
                        .collect()
                });
                horizon.rates =
                    Some(rates.ok_or("--rate needs jobs/s >= 1, or a list: --rate 1000,5000")?);
            }
            "--handler-ms" => {
                horizon.handler_ms = Some(
                    iter.next()
                        .and_then(|m| m.parse::<f64>().ok())
                        .filter(|m| m.is_finite() && *m >= 0.0)
                        .ok_or("--handler-ms needs a number of ms >= 0")?,
                );
            }
            "-h" | "--help" => return Err(usage()),
            "all" => scenarios.extend_from_slice(SCENARIOS),
            name => match SCENARIOS.iter().chain(BY_NAME_ONLY).find(|s| **s == name) {
                Some(s) => scenarios.push(*s),
                None => return Err(format!("unknown argument {name:?}\n{}", usage())),
            },
        }
    }
    if scenarios.is_empty() {
        scenarios.extend_from_slice(SCENARIOS);
    }
    Ok(Args {
        scenarios,
        quick,
        runs,
        horizon,
        recorder,
    })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    // `--otel`: an OpenTelemetry layer too (a bench built with the `opentelemetry` feature)
    let otel = argv.iter().any(|arg| arg == "--otel");
    #[cfg(feature = "opentelemetry")]
    let tracer = otel.then(otel::install);
    #[cfg(not(feature = "opentelemetry"))]
    if otel {
        eprintln!("--otel needs a bench built with --features opentelemetry");
        return ExitCode::from(2);
    }
    if !otel {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,sqlx::query=error")
                }),
            )
            .init();
    }
    match argv.first().map(String::as_str) {
        Some(rss::CHILD_ARG) => return rss::child_main(&argv[1..]),
        Some(scale::CHILD_ARG) => return scale::child_main(&argv[1..]),
        _ => {}
    }
    let args = match parse_args(&argv) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    println!(
        "# opentelemetry feature: {}",
        if cfg!(feature = "opentelemetry") {
            "on"
        } else {
            "off"
        }
    );
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build: run with --release for meaningful figures");
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let admin_url = harel_jobs_suite::database_url();
    let mut database = match runtime.block_on(BenchDb::create(&admin_url)) {
        Ok(database) => database,
        Err(error) => {
            eprintln!("error: cannot create the bench database: {error}");
            return ExitCode::FAILURE;
        }
    };
    let started = Instant::now();
    let outcome = runtime.block_on(async {
        tokio::select! {
            result = run(&database, &args) => result.map_err(|e| e.to_string()),
            _ = tokio::signal::ctrl_c() => Err("interrupted (Ctrl-C)".to_owned()),
        }
    });
    // stop whatever still runs (worker pools, pgbench) before dropping the database
    runtime.shutdown_timeout(Duration::from_secs(2));
    database.drop_now();
    #[cfg(feature = "opentelemetry")]
    if let Some(tracer) = tracer {
        otel::finish(tracer);
    }
    match outcome {
        Ok(()) => {
            println!(
                "# done in {:.0} s; database {} dropped",
                started.elapsed().as_secs_f64(),
                database.name
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            eprintln!("(database {} dropped)", database.name);
            ExitCode::FAILURE
        }
    }
}

async fn run(database: &BenchDb, args: &Args) -> Res<()> {
    let pool = db::pool(&database.url, 20, &[]).await?;
    harel_jobs::migrate(&pool).await?;
    let fill_pool = db::pool(&database.url, 2, &[]).await?;
    let ctx = Ctx {
        url: database.url.clone(),
        db_name: database.name.clone(),
        pool,
        fill_pool,
        transport: Transport::default(),
        quick: args.quick,
        runs: args.runs,
        report: Report::default(),
        horizon: args.horizon.clone(),
    };
    env::print(&ctx).await?;
    if args.recorder {
        recorder::install_for_run()?;
    }
    println!(
        "# scenarios={} quick={} runs={}",
        args.scenarios.join(","),
        args.quick,
        args.runs
    );
    for scenario in &args.scenarios {
        let began = Instant::now();
        println!("# --- {scenario} ---");
        println!(
            "# before: {}; {}; {}",
            env::commit_probe(&ctx).await?,
            env::cpu_sample(),
            env::loadavg()
        );
        match *scenario {
            "enqueue" => enqueue::run(&ctx).await?,
            "drain" => drain::run(&ctx).await?,
            "grouped" => drain::run_grouped(&ctx).await?,
            "noisy" => drain::run_noisy(&ctx).await?,
            "retention" => drain::run_retention(&ctx).await?,
            "limits" => drain::run_limits(&ctx).await?,
            "steady" => steady::run(&ctx).await?,
            "depth" => depth::run(&ctx).await?,
            "soak" => soak::run(&ctx).await?,
            "ceiling" => ceiling::run(&ctx).await?,
            "floor" => floor::run(&ctx).await?,
            "scale" => scale::run(&ctx).await?,
            "horizon" => horizon::run(&ctx).await?,
            "rss" => rss::run(&ctx).await?,
            "profile" => profile::run(&ctx).await?,
            "metrics" => recorder::run(&ctx).await?,
            "fair" => fair::run(&ctx).await?,
            "keys" => enqueue::run_keys(&ctx).await?,
            "workflows" => workflows::run(&ctx).await?,
            "dependents" => dependents::run(&ctx).await?,
            other => bail!("unknown scenario {other}"),
        }
        println!(
            "# {scenario} took {:.0} s; after: {}; {}",
            began.elapsed().as_secs_f64(),
            env::commit_probe(&ctx).await?,
            env::loadavg()
        );
    }
    ctx.report.print_summary();
    println!(
        "# database errors and lost leases survived by the worker pools over the whole run: {}",
        queue::WORKER_ERRORS.load(std::sync::atomic::Ordering::Relaxed)
    );
    ctx.pool.close().await;
    ctx.fill_pool.close().await;
    Ok(())
}
