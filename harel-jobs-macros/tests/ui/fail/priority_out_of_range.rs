use harel_jobs::job;

#[job(priority = 5)]
async fn send(user_id: i64) {
    let _ = user_id;
}

fn main() {}
