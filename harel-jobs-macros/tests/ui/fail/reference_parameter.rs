use harel_jobs::job;

#[job]
async fn send(user_id: i64, template: &str) {
    let _ = (user_id, template);
}

fn main() {}
