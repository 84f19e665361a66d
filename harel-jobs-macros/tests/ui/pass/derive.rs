//! `derive(…)` puts the traits on the job struct: cloned, printed, compared, hashed.
#![deny(warnings)]

use std::collections::HashSet;

use harel_jobs::{JobContext, job};

#[job(derive(Clone, Debug, PartialEq, Eq, ::core::hash::Hash), priority = 3)]
async fn send_welcome_email(ctx: JobContext<()>, #[group] user_id: i64, template: String) {
    let _ = (ctx, user_id, template);
}

/// A job without parameters derives too.
#[job(derive(Clone, Copy, Debug, Default))]
async fn ping() {}

fn main() {
    let job = SendWelcomeEmail {
        user_id: 42,
        template: "hi".to_owned(),
    };
    let copy = job.clone();
    assert_eq!(job, copy);
    assert_eq!(
        format!("{job:?}"),
        "SendWelcomeEmail { user_id: 42, template: \"hi\" }"
    );
    let set: HashSet<SendWelcomeEmail> = [job, copy].into_iter().collect();
    assert_eq!(set.len(), 1);
    let ping = Ping::default();
    let _copied = ping;
    assert_eq!(format!("{ping:?}"), "Ping");
}
