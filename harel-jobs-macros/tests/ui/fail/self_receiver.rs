use harel_jobs::job;

struct Mailer;

impl Mailer {
    #[job]
    async fn send(&self, user_id: i64) {
        let _ = user_id;
    }
}

fn main() {}
