use harel_jobs::job;

#[job(retain = "0s")]
async fn archive(document_id: i64) {
    let _ = document_id;
}

fn main() {}
