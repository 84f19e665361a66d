use harel_jobs::job;

#[job]
async fn send(value: u32)
where
    u32: Copy,
{
    let _ = value;
}

fn main() {}
