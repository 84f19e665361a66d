use harel_jobs::{job, JobContext};

#[job]
async fn send(#[group] ctx: JobContext<()>, user_id: i64) {
    let _ = (ctx, user_id);
}

fn main() {}
