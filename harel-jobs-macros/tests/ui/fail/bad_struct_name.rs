use harel_jobs::job;

#[job]
async fn _2fa_reset(user_id: i64) {
    let _ = user_id;
}

fn main() {}
