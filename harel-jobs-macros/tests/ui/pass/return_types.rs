//! Every accepted return type.
#![deny(warnings)]

use harel_jobs::{JobError, JobResult, job};

type MyResult = Result<(), std::io::Error>;

#[job]
async fn unit(n: u32) {
    let _ = n;
}

#[job]
async fn explicit_unit(n: u32) -> () {
    let _ = n;
}

#[job]
async fn returns_job_result(n: u32) -> JobResult {
    let _ = n;
    Ok(())
}

#[job]
async fn returns_job_error(n: u32) -> Result<(), JobError> {
    let _ = n;
    Err(JobError::permanent("no"))
}

#[job]
async fn io_error(n: u32) -> Result<(), std::io::Error> {
    let _ = n;
    Ok(())
}

#[job]
async fn string_error(n: u32) -> Result<(), String> {
    let _ = n;
    Err("no".to_owned())
}

#[job]
async fn alias(n: u32) -> MyResult {
    let _ = n;
    Ok(())
}

#[job]
async fn boxed(n: u32) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _ = n;
    Ok(())
}

fn main() {
    let _ = (
        Unit { n: 1 },
        ExplicitUnit { n: 1 },
        ReturnsJobResult { n: 1 },
        ReturnsJobError { n: 1 },
        IoError { n: 1 },
        StringError { n: 1 },
        Alias { n: 1 },
        Boxed { n: 1 },
    );
}
