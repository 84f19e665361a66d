use std::rc::Rc;

use harel_jobs::job;

async fn yield_now() {}

#[job]
async fn send(user_id: i64) {
    let local = Rc::new(user_id);
    yield_now().await;
    let _ = local;
}

fn main() {}
