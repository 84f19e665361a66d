use harel_jobs::job;

#[job]
async fn send((user_id, template): (i64, String)) {
    let _ = (user_id, template);
}

fn main() {}
