//! Test helper for tests/transport_env.rs: makes one claim from its own process, so the
//! clock-skew test can run it under libfaketime.
//!
//! Usage: `harel-transport-claim <schema> <lease_ms>` (the server is `DATABASE_URL`, or the
//! tests' default). Prints one JSON line: the process's own clock (`now_ms`, Unix epoch
//! milliseconds, so the caller can check the clock really is shifted) and what it claimed
//! (`null`, or the group and sequence number; the lease is kept, not acked).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harel_jobs::Schema;
use harel_jobs::transport::{ClaimRequest, Transport};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, schema, lease_ms] = args.as_slice() else {
        eprintln!("usage: harel-transport-claim <schema> <lease_ms>");
        std::process::exit(2);
    };
    let schema = Schema::new(schema).expect("schema name");
    let lease = Duration::from_millis(lease_ms.parse().expect("lease_ms"));

    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64;
    let pool = harel_jobs_suite::pool_with(&harel_jobs_suite::database_url(), 1).await;
    let claimed = Transport::new(schema)
        .claim(&pool, &ClaimRequest::new(lease))
        .await
        .expect("claim");
    pool.close().await;

    let claimed = claimed.map(|m| serde_json::json!({"group": m.lease.group, "seq": m.lease.seq}));
    println!(
        "{}",
        serde_json::json!({"now_ms": now_ms, "claimed": claimed})
    );
}
