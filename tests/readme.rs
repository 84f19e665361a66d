//! The guide's job example (docs/guide/writing-jobs.md), tested with `harel_jobs::testing` as
//! the guide's "Testing your jobs" (docs/guide/testing.md) shows it; the README's test
//! command, the one CI runs; and the license files the published crates ship.
//!
//! The testing page shows the part between the `README:` markers verbatim (its block is
//! `ignore`d there: it needs the `testing` feature and a database);
//! `the_guide_shows_this_test` fails when the two differ.

use harel_jobs::{JobContext, JobResult, job};

struct AppState {
    smtp_host: String,
}

/// Sends the welcome mail (the guide's job, as written in docs/guide/writing-jobs.md).
#[job(max_attempts = 5, priority = 2)]
async fn send_welcome_email(
    ctx: JobContext<AppState>,
    #[group] user_id: i64,
    template: String,
) -> JobResult {
    println!("via {}: {template} to {user_id}", ctx.state().smtp_host);
    Ok(())
}

// README: begin
use harel_jobs::testing::{TestSchema, TestWorker, WorkOutcome};

/// The code under test: signs a user up and enqueues their welcome mail, in one transaction.
async fn sign_up(
    client: &harel_jobs::Client,
    tx: &mut sqlx::PgConnection,
    user_id: i64,
) -> Result<(), harel_jobs::PublishError> {
    // … insert the user …
    let mail = SendWelcomeEmail {
        user_id,
        template: "welcome".into(),
    };
    client.enqueue(&mut *tx, mail).await?;
    Ok(())
}

#[tokio::test]
async fn sign_up_sends_the_welcome_mail() -> Result<(), Box<dyn std::error::Error>> {
    let test = TestSchema::new().await?; // a fresh schema in DATABASE_URL's database
    let state = AppState {
        smtp_host: "smtp.test".into(),
    };
    let worker = TestWorker::new(test.worker(state).register::<SendWelcomeEmail>())?;

    let mut tx = test.pool().begin().await?;
    sign_up(test.client(), &mut tx, 42).await?;
    // seen inside the uncommitted transaction
    let mail = test
        .assert_enqueued::<SendWelcomeEmail>(&mut *tx, |mail| mail.user_id == 42)
        .await;
    assert_eq!(mail.info.group, "send_welcome_email:42");

    // run it in-process, inside the transaction too
    let worked = worker.work_until_idle(&mut *tx).await?;
    assert_eq!(worked.len(), 1);
    assert_eq!(worked[0].outcome, WorkOutcome::Succeeded);
    test.assert_nothing_enqueued(&mut *tx).await;

    tx.rollback().await?;
    test.cleanup().await?;
    Ok(())
}
// README: end

#[test]
fn the_guide_shows_this_test() {
    let this = include_str!("readme.rs");
    let begin = this.find("// README: begin\n").expect("begin marker") + 17;
    let end = begin + this[begin..].find("// README: end").expect("end marker");
    let shown = &this[begin..end];
    let page = include_str!("../docs/guide/testing.md");
    let block = format!("```rust,ignore\n{shown}```");
    assert!(
        page.contains(&block),
        "docs/guide/testing.md's testing example differs from tests/readme.rs; paste this block:\n{block}"
    );
}

/// Each published crate ships the licenses (`cargo package` takes only the files of the
/// crate's own directory): copies of the repository's, kept identical.
#[test]
fn the_published_crates_ship_the_licenses() {
    let mit = include_str!("../LICENSE-MIT");
    let apache = include_str!("../LICENSE-APACHE");
    assert!(mit.contains("Copyright (c) The harel-jobs contributors"));
    assert!(apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"));
    for (krate, crate_mit, crate_apache) in [
        (
            "harel-jobs",
            include_str!("../harel-jobs/LICENSE-MIT"),
            include_str!("../harel-jobs/LICENSE-APACHE"),
        ),
        (
            "harel-jobs-macros",
            include_str!("../harel-jobs-macros/LICENSE-MIT"),
            include_str!("../harel-jobs-macros/LICENSE-APACHE"),
        ),
    ] {
        assert_eq!(
            crate_mit, mit,
            "{krate}/LICENSE-MIT differs from LICENSE-MIT"
        );
        assert_eq!(
            crate_apache, apache,
            "{krate}/LICENSE-APACHE differs from LICENSE-APACHE"
        );
    }
}

/// CI (`.ci/run`) runs exactly the README's test command, and that command, CI's clippy and
/// CI's doc cover every feature: without `--all-features`, tests/opentelemetry.rs and the
/// `#[cfg(feature = "opentelemetry")]` code were never compiled.
#[test]
fn ci_runs_the_readmes_test_command_with_every_feature() {
    let readme = include_str!("../README.md");
    let readme_command = readme
        .lines()
        .find(|line| line.starts_with("cargo test") && line.contains("# the whole test suite"))
        .and_then(|line| line.split('#').next())
        .map(str::trim)
        .expect("the README's quickstart shows the test command");
    let ci = include_str!("../.ci/run");
    let ci_command = ci
        .lines()
        .map(str::trim)
        .rfind(|line| !line.is_empty())
        .expect(".ci/run ends with a command");
    assert_eq!(
        ci_command, readme_command,
        ".ci/run must end with the README's test command"
    );
    assert!(
        readme_command.contains("--all-features"),
        "the test command must test every feature: {readme_command}"
    );
    for tool in ["cargo clippy", "cargo doc"] {
        let line = ci
            .lines()
            .find(|line| line.contains(tool) && !line.trim_start().starts_with('#'))
            .unwrap_or_else(|| panic!(".ci/run runs {tool}"));
        assert!(
            line.contains("--all-features"),
            ".ci/run's {tool} must cover every feature: {line}"
        );
    }
    let development = &readme[readme
        .find("## Development")
        .expect("a Development section")..];
    assert!(
        development.contains(&format!("`{readme_command}`")),
        "the Development section must show the same test command"
    );
}
