use harel_jobs::{Job, JobContext, job};

#[job(
    max_attempts = 10,
    priority = 0,
    timeout = "1m30s",
    backoff = "250ms",
    backoff_max = "2h",
    retain = "24h",
    unique(invoice_id, hold = "10m"),
    kind = "billing.charge",
    crate = harel_jobs,
)]
async fn charge(ctx: JobContext<()>, #[group] invoice_id: i64, cents: u64) {
    let _ = (ctx, invoice_id, cents);
}

fn main() {
    assert_eq!(Charge::KIND, "billing.charge");
    let options = Charge::options();
    assert_eq!(options.max_attempts, Some(10));
    assert_eq!(options.priority.map(|p| p.get()), Some(0));
    assert_eq!(options.timeout, Some(std::time::Duration::from_secs(90)));
    let job = Charge { invoice_id: 3, cents: 100 };
    assert_eq!(job.group().as_deref(), Some("billing.charge:3"));
    assert_eq!(options.retain, Some(std::time::Duration::from_secs(86_400)));
    let unique = job.unique().unwrap();
    assert_eq!(unique.key(), "billing.charge:[3]");
    assert_eq!(unique.hold(), Some(std::time::Duration::from_secs(600)));
}
