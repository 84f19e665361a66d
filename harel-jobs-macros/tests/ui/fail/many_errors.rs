use harel_jobs::job;

#[job(priority = 9, retries = 3, timeout = "soon")]
fn send(&self, #[group] a: i64, #[group] b: &str) {}

fn main() {}
