use harel_jobs::job;

#[job(priority = 1, priority = 3)]
async fn send(user_id: i64) {
    let _ = user_id;
}

fn main() {}
