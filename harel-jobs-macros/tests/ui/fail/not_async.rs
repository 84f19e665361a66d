use harel_jobs::{job, JobResult};

#[job]
fn send_email(user_id: i64) -> JobResult {
    let _ = user_id;
    Ok(())
}

fn main() {}
