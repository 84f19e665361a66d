//! Scenario floor: the physical floor of an at-least-once queue with leases, beside harel's
//! functions and harel's worker pool, in one run.
//!
//! - floor: pgbench, 2 clients of `pgbench/floor.sql` with k = 64 on `public.floor_jobs`
//!   (one row per job, one index on `available_at`): each transaction leases 64 jobs with
//!   one `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING id` (durable)
//!   and deletes them, fenced on the lease, with `synchronous_commit = off`: two round
//!   trips, as harel's claim and settle;
//! - functions: pgbench, 2 clients of `pgbench/claim_ack_batch.sql` with k = 64 (the
//!   ceiling scenario's batched run);
//! - pool: the worker pool draining no-op jobs at concurrency 64, then at 16 (the ceiling
//!   scenario's batched ours).
//!
//! Each on a fresh fill of the same number of ungrouped jobs, interleaved (floor,
//! functions, pool 64, pool 16, floor, …) so the machine's noise hits all alike; the ratios
//! to the floor are paired within each round. At least 3 rounds, whatever `--runs` says.

use sqlx::{AssertSqlSafe, PgPool};

use crate::ceiling::{POOL_STREAMS, ours_batched, pgbench_batched};
use crate::pgbench::{self, FLOOR, FLOOR_TABLE};
use crate::queue::{self, prepare};
use crate::{Ctx, Res, bail, db};

/// Jobs leased and deleted per floor transaction (and claimed per functions transaction).
const K: u64 = 64;
/// The pool's concurrencies compared with the floor.
const POOL_CONCURRENCIES: [usize; 2] = [64, 16];

/// Empties `public.floor_jobs` and fills it with `n` due jobs, enqueued 1 µs apart (in id
/// order); then analyzes and checkpoints, as the other fills do.
async fn refill_floor(ctx: &Ctx, n: u64) -> Res<u64> {
    prepare(&ctx.pool, async || {
        sqlx::query("TRUNCATE public.floor_jobs")
            .execute(&ctx.pool)
            .await?;
        sqlx::query(
            "INSERT INTO public.floor_jobs (available_at, payload)
             SELECT now() - interval '1 minute' + i * interval '1 microsecond', '{}'::json
               FROM generate_series(1, $1) AS i",
        )
        .bind(n as i64)
        .execute(&ctx.fill_pool)
        .await?;
        sqlx::query("ANALYZE public.floor_jobs")
            .execute(&ctx.pool)
            .await?;
        Ok(n)
    })
    .await
}

/// jobs/s of the floor script, 2 clients, on a fresh fill of `fill` jobs; checks that
/// exactly the jobs it counted are gone.
async fn floor_once(ctx: &Ctx, fill: u64) -> Res<f64> {
    let n = refill_floor(ctx, fill).await?;
    let run = pgbench::run_batched(&ctx.url, FLOOR, K, POOL_STREAMS, n).await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM public.floor_jobs")
        .fetch_one(&ctx.pool)
        .await?;
    if left != (n - run.jobs) as i64 {
        bail!(
            "floor: {} of {n} jobs completed, but {left} rows left",
            run.jobs
        );
    }
    Ok(run.jobs_per_s)
}

/// One round, in order: floor, functions, pool at each concurrency. Returns jobs/s of each.
async fn round(ctx: &Ctx, worker_pool: &PgPool, fill: u64) -> Res<Vec<f64>> {
    let mut rates = vec![
        floor_once(ctx, fill).await?,
        pgbench_batched(ctx, K, POOL_STREAMS, fill).await?,
    ];
    for concurrency in POOL_CONCURRENCIES {
        rates.push(ours_batched(ctx, worker_pool, concurrency, fill).await?);
    }
    Ok(rates)
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    if !pgbench::available() {
        println!("# floor skipped: pgbench is not installed");
        return Ok(());
    }
    let fill = ctx.size(100_000, 20_000);
    let rounds = ctx.runs.max(3);
    sqlx::raw_sql(AssertSqlSafe(FLOOR_TABLE))
        .execute(&ctx.pool)
        .await?;
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;

    round(ctx, &worker_pool, fill / 5).await?; // warm-up, not measured
    let scripts = ["floor.sql", "claim_ack_batch.sql"];
    let mut cases: Vec<(String, String)> = ["floor_sql_k64", "floor_functions_k64"]
        .iter()
        .zip(scripts)
        .map(|(name, script)| {
            let extra = format!("clients={POOL_STREAMS} k={K} jobs={fill} script=pgbench/{script}");
            ((*name).to_owned(), extra)
        })
        .collect();
    for concurrency in POOL_CONCURRENCIES {
        cases.push((
            format!("floor_pool_c{concurrency}"),
            format!("worker pool concurrency={concurrency} jobs={fill}"),
        ));
    }
    let mut samples = vec![Vec::new(); cases.len()];
    for i in 0..rounds {
        let rates = round(ctx, &worker_pool, fill).await?;
        let line: Vec<String> = cases
            .iter()
            .zip(&rates)
            .map(|((name, _), rate)| format!("{name}={rate:.0}"))
            .collect();
        println!("# floor round {}: {}", i + 1, line.join(" "));
        for (sample, rate) in samples.iter_mut().zip(rates) {
            sample.push(rate);
        }
    }
    worker_pool.close().await;

    for ((name, extra), sample) in cases.iter().zip(&samples) {
        ctx.report
            .figure(name.as_str(), "jobs/s", sample, None, extra.as_str());
    }
    let floor = &samples[0];
    for ((name, _), sample) in cases.iter().zip(&samples).skip(1) {
        let ratios: Vec<f64> = sample.iter().zip(floor).map(|(x, f)| x / f).collect();
        let what = name.trim_start_matches("floor_");
        ctx.report.figure(
            format!("floor_ratio_{what}"),
            "ratio",
            &ratios,
            None,
            format!("{what}/floor_sql_k64 (paired rounds)"),
        );
    }
    sqlx::query("DROP TABLE public.floor_jobs")
        .execute(&ctx.pool)
        .await?;
    queue::reset(&ctx.pool).await?;
    Ok(())
}
