use harel_jobs::job;

#[job]
async fn transfer(#[group] from: i64, #[group] to: i64) {
    let _ = (from, to);
}

fn main() {}
