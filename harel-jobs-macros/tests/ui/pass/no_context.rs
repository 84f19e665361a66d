//! A job without context, never constructed in this crate (only deserialised by a worker):
//! no dead-code warning, and it runs on a pool of any state.
#![deny(warnings)]

use harel_jobs::{Handler, job};

#[job]
async fn cleanup(days: u32) {
    let _ = days;
}

fn runs_on<S, J: Handler<S>>() {}

struct AppState;

fn main() {
    runs_on::<(), Cleanup>();
    runs_on::<AppState, Cleanup>();
    runs_on::<std::sync::Arc<String>, Cleanup>();
}
