use harel_jobs::job;

#[job(backoff = "10s", backoff_max = "5s")]
async fn send(user_id: i64) {
    let _ = user_id;
}

fn main() {}
