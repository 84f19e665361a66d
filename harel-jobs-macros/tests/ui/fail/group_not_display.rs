use harel_jobs::job;

#[job]
async fn send(#[group] user_ids: Vec<i64>) {
    let _ = user_ids;
}

fn main() {}
