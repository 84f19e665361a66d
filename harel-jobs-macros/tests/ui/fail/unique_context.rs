use harel_jobs::{JobContext, job};

#[job(unique(ctx, user_id))]
async fn daily_report(ctx: JobContext<()>, user_id: i64) {
    let _ = (ctx, user_id);
}

fn main() {}
