//! How long each dashboard page takes on a big queue: fills a schema of its own with
//! `--jobs` waiting jobs (default 1,000,000) in `--groups` groups (default 100,000), three
//! larger groups (20,000, 10,000 and 5,000 jobs) and
//! 1,000 dead letters, serves `harel_jobs::dashboard::router` on a local port, and times
//! each page (one warm-up, then `--runs` requests, default 10): median and slowest, in ms,
//! from the request's first byte to the response's last, on loopback (so: the page's
//! queries plus rendering). See BENCHMARKS.md, "Dashboard pages".
//!
//! ```sh
//! cargo run --release --example dashboard_pages [-- --jobs 1000000 --groups 100000 --keep]
//! ```
//!
//! The schema (`bench_dashboard`) is dropped at the end unless `--keep`; an existing one is
//! reused as it is (delete it to fill again).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use harel_jobs::{Client, Schema};
use sqlx::{AssertSqlSafe, PgPool};

const SCHEMA: &str = "bench_dashboard";
const CHUNK: i64 = 10_000;

struct Options {
    jobs: i64,
    groups: i64,
    runs: usize,
    keep: bool,
}

fn options() -> Options {
    let mut options = Options {
        jobs: 1_000_000,
        groups: 100_000,
        runs: 10,
        keep: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> i64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{name} takes a number"))
        };
        match arg.as_str() {
            "--jobs" => options.jobs = number("--jobs"),
            "--groups" => options.groups = number("--groups").max(1),
            "--runs" => options.runs = usize::try_from(number("--runs")).unwrap_or(10).max(1),
            "--keep" => options.keep = true,
            other => panic!("unknown argument {other}"),
        }
    }
    options
}

fn sql(template: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(template.replace("@schema@", SCHEMA))
}

/// Publishes `jobs` jobs round-robin over `groups` groups, 10,000 a call, and 1,000 dead
/// letters; then ANALYZE, as autovacuum would have done by then.
async fn fill(pool: &PgPool, options: &Options) -> Result<(), sqlx::Error> {
    let have: i64 = sqlx::query_scalar(sql("SELECT count(*) FROM @schema@.transport_groups"))
        .fetch_one(pool)
        .await?;
    if have > 0 {
        println!("reusing {SCHEMA} ({have} groups)");
        return Ok(());
    }
    let started = Instant::now();
    let mut from = 0;
    while from < options.jobs {
        let to = (from + CHUNK).min(options.jobs);
        sqlx::query(sql(
            "SELECT count(*) FROM @schema@.harel_publish(
                 (SELECT array_agg('customer-' || (i % $3)) FROM generate_series($1, $2 - 1) i),
                 (SELECT array_agg((ARRAY['send_email', 'charge_card', 'sync_crm', 'build_report'])[1 + i % 4])
                    FROM generate_series($1, $2 - 1) i),
                 (SELECT array_agg(json_build_object('n', i, 'note', 'a payload of a typical size')::text)
                    FROM generate_series($1, $2 - 1) i),
                 (SELECT array_agg((i % 5)::smallint) FROM generate_series($1, $2 - 1) i),
                 (SELECT array_agg(NULL::timestamptz) FROM generate_series($1, $2 - 1) i),
                 (SELECT array_agg(NULL::bigint) FROM generate_series($1, $2 - 1) i))",
        ))
        .bind(from)
        .bind(to)
        .bind(options.groups)
        .execute(pool)
        .await?;
        from = to;
    }
    // three customers far larger than the others, for the largest groups to find
    for (whale, jobs) in [("whale-1", 20_000), ("whale-2", 10_000), ("whale-3", 5_000)] {
        sqlx::query(sql(
            "SELECT count(*) FROM @schema@.harel_publish(
                 array_fill($1::text, ARRAY[$2]), array_fill('sync_crm'::text, ARRAY[$2]),
                 array_fill('{}'::text, ARRAY[$2]), array_fill(2::smallint, ARRAY[$2]),
                 array_fill(NULL::timestamptz, ARRAY[$2]), array_fill(NULL::bigint, ARRAY[$2]))",
        ))
        .bind(whale)
        .bind(jobs)
        .execute(pool)
        .await?;
    }
    sqlx::query(sql("INSERT INTO @schema@.dead_letters
             (id, group_id, kind, payload, priority, attempts, last_error, enqueued_at, failed_at)
         SELECT 10000000000 + i, 'customer-' || i, 'send_email', json_build_object('n', i), 2, 5,
                'smtp: 421 try again later', now() - interval '1 day', now() - (i || ' s')::interval
           FROM generate_series(1, 1000) i"))
    .execute(pool)
    .await?;
    sqlx::raw_sql(sql(
        "ANALYZE @schema@.transport_groups; ANALYZE @schema@.transport_messages;
         ANALYZE @schema@.dead_letters;",
    ))
    .execute(pool)
    .await?;
    println!(
        "filled {SCHEMA}: {} jobs in {} groups in {:.1} s",
        options.jobs,
        options.groups,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One GET on a connection of its own; the time to the response's last byte.
fn get(address: SocketAddr, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let mut stream = TcpStream::connect(address).expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let took = started.elapsed();
    let status = String::from_utf8_lossy(&response[..response.len().min(12)])
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, took)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options();
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let pool = harel_jobs::connect(&url).await?;
    let client = Client::with_schema(pool.clone(), Schema::new(SCHEMA)?);
    client.migrate().await?;
    fill(&pool, &options).await?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let router = harel_jobs::dashboard::router(client.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });

    let middle = options.jobs / 2;
    let pages = [
        "/".to_owned(),
        "/queues".to_owned(),
        "/jobs".to_owned(),
        format!("/jobs?after={middle}"),
        "/jobs?state=waiting&kind=send_email".to_owned(),
        "/jobs?state=running".to_owned(),
        "/jobs?state=dead".to_owned(),
        "/jobs?group=customer-42".to_owned(),
        format!("/jobs/{middle}"),
        "/groups".to_owned(),
        "/groups?after=customer-5".to_owned(),
        "/groups?sort=waiting".to_owned(),
        "/groups?sort=size".to_owned(),
        "/groups/show?id=customer-42".to_owned(),
        "/dead".to_owned(),
        "/dead/10000000500".to_owned(),
        "/schedules".to_owned(),
    ];
    println!("| page | median ms | slowest ms |\n|---|---:|---:|");
    for page in &pages {
        let path = page.clone();
        let runs = options.runs;
        let (status, mut times) = tokio::task::spawn_blocking(move || {
            let (status, _) = get(address, &path);
            let times: Vec<Duration> = (0..runs).map(|_| get(address, &path).1).collect();
            (status, times)
        })
        .await?;
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "| `{page}` ({status}) | {:.1} | {:.1} |",
            ms(times[times.len() / 2]),
            ms(times[times.len() - 1]),
        );
    }
    if !options.keep {
        sqlx::query(sql("DROP SCHEMA @schema@ CASCADE"))
            .execute(&pool)
            .await?;
    }
    Ok(())
}
