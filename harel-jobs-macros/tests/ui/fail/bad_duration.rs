use harel_jobs::job;

#[job(timeout = "30", backoff = "1.5s")]
async fn send(user_id: i64) {
    let _ = user_id;
}

fn main() {}
