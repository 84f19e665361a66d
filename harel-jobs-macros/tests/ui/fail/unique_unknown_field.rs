use harel_jobs::{JobContext, job};

#[job(unique(user, day))]
async fn daily_report(ctx: JobContext<()>, user_id: i64, day: String) {
    let _ = (ctx, user_id, day);
}

fn main() {}
