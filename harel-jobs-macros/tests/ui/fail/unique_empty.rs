use harel_jobs::job;

#[job(unique())]
async fn refresh(feed_id: i64) {
    let _ = feed_id;
}

fn main() {}
