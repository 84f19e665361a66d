use harel_jobs::job;

#[job]
async fn send(template: impl Into<String>) {
    let _ = template.into();
}

fn main() {}
