use harel_jobs::job;

#[job(derive(Clone, Debg))]
async fn send(user_id: i64) {
    let _ = user_id;
}

fn main() {}
