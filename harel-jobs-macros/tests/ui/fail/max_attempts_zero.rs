use harel_jobs::job;

#[job(max_attempts = 0)]
async fn send(user_id: i64) {
    let _ = user_id;
}

fn main() {}
