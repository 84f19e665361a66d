use harel_jobs::job;

#[job]
struct SendEmail {
    user_id: i64,
}

fn main() {}
