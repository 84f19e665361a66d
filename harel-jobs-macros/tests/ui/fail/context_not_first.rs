use harel_jobs::{job, JobContext};

#[job]
async fn send(user_id: i64, ctx: JobContext<()>) {
    let _ = (user_id, ctx);
}

fn main() {}
