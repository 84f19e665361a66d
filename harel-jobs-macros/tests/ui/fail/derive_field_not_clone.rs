use harel_jobs::job;

#[derive(serde::Serialize, serde::Deserialize)]
struct Template(String);

#[job(derive(Clone))]
async fn send(user_id: i64, template: Template) {
    let _ = (user_id, template.0);
}

fn main() {}
