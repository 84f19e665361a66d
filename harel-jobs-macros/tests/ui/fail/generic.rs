use harel_jobs::job;

#[job]
async fn send<T: serde::Serialize>(value: T) {
    let _ = value;
}

fn main() {}
