//! Evidence of where the time goes (printed as `#` lines, not figures):
//!
//! 1. `EXPLAIN (ANALYZE, BUFFERS)` of every statement inside one claim of 64 and its ack
//!    (`auto_explain` with `log_nested_statements`, loaded for one psql session only, after
//!    six unexplained rounds so PL/pgSQL uses its generic plans as a worker's long-lived
//!    connection does): on a fresh fill of 100,000 groups, after half of it went through
//!    the pool (dead rows, no vacuum), and after a `VACUUM`. One line per statement (time,
//!    buffers); the full plans go to `bench-results/explain-*.txt`;
//! 2. during 100,000-job drains at concurrency 16 and 64, and during the unbatched
//!    claim+ack loop: `pg_stat_user_functions` (with `track_functions = pl` for the
//!    measured sessions only: calls, jobs per call, time per call), the table counters
//!    (HOT updates, dead rows), the CPU time of this process vs the bench database's
//!    backends vs the whole machine, and a `top` snapshot.

use std::time::Duration;

use crate::cpu::{print_cpu, with_cpu};
use crate::depth::{TASKS, claim_ack_loop};
use crate::jobs::Probe;
use crate::queue::{self, expect_empty, fill_single, prepare};
use crate::{Ctx, Res, db};

/// One claim of 64 and the ack of what it claimed (psql).
const CLAIM_ACK_ROUND: &str = "
SELECT gen_random_uuid() AS tok \\gset
TRUNCATE claimed;
INSERT INTO claimed SELECT * FROM harel.harel_claim(:'tok', 30000, 64, 0);
SELECT count(*) AS n FROM claimed \\gset
SELECT count(*) FILTER (WHERE outcome = 'applied') AS acked
  FROM harel.harel_settle((SELECT array_agg(group_id) FROM claimed),
                          (SELECT array_agg(seq) FROM claimed),
                          array_fill(:'tok'::uuid, ARRAY[:n]),
                          array_fill('ack'::text, ARRAY[:n]),
                          array_fill(NULL::bigint, ARRAY[:n]),
                          array_fill(NULL::text, ARRAY[:n]),
                          array_fill(NULL::boolean, ARRAY[:n]),
                          array_fill(NULL::int, ARRAY[:n]),
                          gen_random_uuid(), gen_random_uuid());
";

/// A psql script: six rounds unexplained (PL/pgSQL switches to generic plans after five
/// calls, as on a worker's long-lived connections), then one round with every nested
/// statement explained by auto_explain (ANALYZE, BUFFERS), sent back as NOTICEs.
fn auto_explain_script() -> String {
    let mut script = String::from(
        "\\set ON_ERROR_STOP 1
LOAD 'auto_explain';
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = on;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_format = text;
SET auto_explain.log_level = notice;
SET auto_explain.log_min_duration = -1;
SET client_min_messages = notice;
CREATE TEMP TABLE claimed (group_id text, seq bigint, kind text, payload text, attempt int,
                           priority smallint, enqueued_at timestamptz, trace_context text);
",
    );
    for _ in 0..6 {
        script.push_str(CLAIM_ACK_ROUND);
    }
    script.push_str("SET auto_explain.log_min_duration = 0;\n");
    script.push_str(CLAIM_ACK_ROUND);
    script
}

/// Runs the auto_explain script; writes its whole output to `bench-results/` and prints
/// one line per explained statement (duration, statement).
async fn auto_explain(ctx: &Ctx, label: &str, file: &str) -> Res<()> {
    let script = std::env::temp_dir().join(format!(
        "harel_bench_{}_auto_explain.sql",
        std::process::id()
    ));
    std::fs::write(&script, auto_explain_script())?;
    let output = tokio::process::Command::new("psql")
        .args(["-X", "-q", "-d", &ctx.url, "-f"])
        .arg(&script)
        .kill_on_drop(true)
        .output()
        .await;
    let _ = std::fs::remove_file(&script);
    let Ok(output) = output else {
        println!("# auto_explain skipped: psql not available");
        return Ok(());
    };
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        // the error's own line, not the caret under it
        let error = text
            .lines()
            .find(|line| line.contains("ERROR:"))
            .or_else(|| text.lines().last())
            .unwrap_or("");
        println!("# auto_explain failed: {}", error.trim());
        return Ok(());
    }
    std::fs::create_dir_all("bench-results")?;
    let path = format!("bench-results/{file}");
    std::fs::write(&path, &text)?;
    println!(
        "# auto_explain of claim(64) + ack(64) {label} (generic plans; full plans in {path}):"
    );
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let Some(duration) = line.split("duration: ").nth(1) else {
            continue;
        };
        let query = lines
            .get(i + 1)
            .and_then(|l| l.trim().strip_prefix("Query Text:"))
            .unwrap_or("")
            .trim();
        let buffers = lines[i + 1..]
            .iter()
            .take_while(|l| !l.contains("duration: "))
            .find(|l| l.trim_start().starts_with("Buffers:"))
            .map(|l| l.trim())
            .unwrap_or("");
        let query: String = query.chars().take(90).collect();
        println!(
            "#   {} | {buffers} | {query}",
            duration.trim_end_matches("  plan:").trim()
        );
    }
    Ok(())
}

async fn top_snapshot() {
    let Ok(output) = tokio::process::Command::new("top")
        .args(["-b", "-n", "2", "-d", "1", "-w", "160"])
        .output()
        .await
    else {
        println!("# top not available");
        return;
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.rsplit("top - ").next().unwrap_or("");
    println!("# top -b (second frame, 1 s interval) during the drain:");
    for line in format!("top - {last}").lines().take(22) {
        println!("#   {line}");
    }
}

/// Prints the function and table counters of the sessions just closed, over `wall` s.
async fn print_counters(ctx: &Ctx, label: &str, units: u64, wall: f64) -> Res<()> {
    tokio::time::sleep(Duration::from_millis(600)).await;
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&ctx.pool)
        .await?;
    let functions: Vec<(String, i64, f64, f64)> = sqlx::query_as(
        "SELECT funcname::text, calls, total_time, self_time FROM pg_stat_user_functions
          WHERE schemaname = 'harel' ORDER BY total_time DESC",
    )
    .fetch_all(&ctx.pool)
    .await?;
    for (name, calls, total, own) in functions {
        println!(
            "# profile {label} function {name}: calls={calls} jobs_per_call={:.1} total_ms={total:.0} self_ms={own:.0} per_call_ms={:.3} share_of_wall={:.0}%",
            units as f64 / calls.max(1) as f64,
            total / calls.max(1) as f64,
            100.0 * total / 1000.0 / wall
        );
    }
    let tables: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT relname::text, n_tup_upd, n_tup_hot_upd, n_tup_del, n_dead_tup,
                pg_total_relation_size(relid)
           FROM pg_stat_user_tables WHERE schemaname = 'harel' AND relname LIKE 'transport%'
          ORDER BY relname",
    )
    .fetch_all(&ctx.pool)
    .await?;
    for (name, upd, hot, del, dead, size) in tables {
        println!(
            "# profile {label} table {name}: updated={upd} hot_updated={hot} deleted={del} dead_now={dead} total_size_kb={}",
            size / 1024
        );
    }
    Ok(())
}

/// A drain of `n` fresh single-message groups at `concurrency`, on sessions that count
/// their PL/pgSQL function calls (track_functions = pl, these sessions only).
async fn profiled_drain(ctx: &Ctx, concurrency: usize, n: u64, top: bool) -> Res<()> {
    let label = format!("drain_c{concurrency}");
    prepare(&ctx.pool, async || {
        fill_single(&ctx.fill_pool, &ctx.transport, n).await
    })
    .await?;
    let pool = db::pool(&ctx.url, 8, &[("track_functions", "pl")]).await?;
    sqlx::query("SELECT pg_stat_reset()")
        .execute(&ctx.pool)
        .await?;
    let snapshot = top.then(|| {
        tokio::spawn(async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            top_snapshot().await;
        })
    });
    let (outcome, cpu) = with_cpu(queue::drain(&pool, Probe::new(), concurrency, n)).await?;
    if let Some(snapshot) = snapshot {
        let _ = snapshot.await;
    }
    expect_empty(&ctx.pool, "profile").await?;
    println!(
        "# profile {label}: jobs={n} wall_s={:.2} jobs_s={:.0}",
        cpu.wall,
        outcome.rate()
    );
    print_cpu(&label, n, "job", &cpu);
    pool.close().await; // flushes the sessions' statistics
    print_counters(ctx, &label, n, cpu.wall).await
}

/// The unbatched claim+ack loop of the depth and ceiling scenarios, profiled the same way.
async fn profiled_unbatched(ctx: &Ctx, m: u64) -> Res<()> {
    let label = format!("unbatched_{TASKS}tasks");
    prepare(&ctx.pool, async || {
        fill_single(&ctx.fill_pool, &ctx.transport, m + m / 5).await
    })
    .await?;
    let pool = db::pool(&ctx.url, TASKS as u32, &[("track_functions", "pl")]).await?;
    sqlx::query("SELECT pg_stat_reset()")
        .execute(&ctx.pool)
        .await?;
    let (rate, cpu) = with_cpu(claim_ack_loop(&pool, &ctx.transport, TASKS, m)).await?;
    println!(
        "# profile {label}: pairs={m} wall_s={:.2} pairs_s={rate:.0}",
        cpu.wall
    );
    print_cpu(&label, m, "claim+ack", &cpu);
    pool.close().await;
    print_counters(ctx, &label, m, cpu.wall).await
}

pub async fn run(ctx: &Ctx) -> Res<()> {
    let n = ctx.size(100_000, 10_000);
    let worker_pool = db::pool(&ctx.url, 8, &[]).await?;

    // 1 and 2. the claim's and ack's statements: fresh, after churn, after VACUUM
    prepare(&ctx.pool, async || {
        fill_single(&ctx.fill_pool, &ctx.transport, n).await
    })
    .await?;
    auto_explain(
        ctx,
        &format!("on a fresh fill of {n} groups"),
        "explain-fresh.txt",
    )
    .await?;
    queue::drain_at_least(&worker_pool, Probe::new(), 64, n / 2).await?;
    auto_explain(
        ctx,
        &format!(
            "after {} jobs went through the pool, no vacuum since",
            n / 2
        ),
        "explain-churned.txt",
    )
    .await?;
    sqlx::query("VACUUM harel.transport_groups, harel.transport_messages")
        .execute(&ctx.pool)
        .await?;
    auto_explain(ctx, "after VACUUM", "explain-vacuumed.txt").await?;
    worker_pool.close().await;

    // 3. measured drains and the unbatched loop: function counters, CPU split, top
    profiled_drain(ctx, 16, n, false).await?;
    profiled_drain(ctx, 64, n, true).await?;
    profiled_unbatched(ctx, ctx.size(20_000, 2_000)).await?;
    queue::reset(&ctx.pool).await?;
    Ok(())
}
