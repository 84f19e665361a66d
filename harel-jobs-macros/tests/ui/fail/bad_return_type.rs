use harel_jobs::job;

#[job]
async fn send(user_id: i64) -> Option<()> {
    let _ = user_id;
    None
}

fn main() {}
