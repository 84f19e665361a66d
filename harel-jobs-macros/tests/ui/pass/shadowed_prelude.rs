//! The expansion names standard items by absolute paths: user items called `Option`,
//! `String`, `Result`, `Vec`, `Send`, `Future` do not break it.
#![allow(dead_code)]

use harel_jobs::{JobContext, job};

struct Option;
struct String;
struct Result;
struct Vec;
trait Send {}
trait Future {}
struct Some;

#[job]
async fn shadowed(ctx: JobContext<()>, #[group] key: u64, name: std::string::String) {
    let _ = (ctx, key, name);
}

fn main() {}
