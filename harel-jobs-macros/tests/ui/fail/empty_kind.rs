use harel_jobs::job;

#[job(kind = "")]
async fn send(user_id: i64) {
    let _ = user_id;
}

fn main() {}
