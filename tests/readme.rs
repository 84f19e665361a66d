//! The guide's job example (docs/guide/writing-jobs.md), tested with `harel_jobs::testing` as
//! the guide's "Testing your jobs" (docs/guide/testing.md) shows it; the README's test
//! command, the one CI runs; the license files the published crates ship; and the relative
//! links of the repository's documents.
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

/// The repository's Markdown files whose relative links are checked: the root documents,
/// the guide, the decision records and the SQL and peers' READMEs.
fn linked_documents(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> = [
        "README.md",
        "BENCHMARKS.md",
        "RELIABILITY.md",
        "CHANGELOG.md",
        "harel-jobs/sql/README.md",
        "migrations/README.md",
    ]
    .iter()
    .map(|path| root.join(path))
    .collect();
    for dir in [
        "docs/guide",
        "docs/adr",
        "examples/bench/peers/graphile",
        "examples/bench/peers/awa",
        "examples/bench/peers/underway",
    ] {
        let entries = std::fs::read_dir(root.join(dir)).expect("a documentation folder");
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.extension().is_some_and(|ext| ext == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// GitHub's anchor for a heading: lower case, punctuation dropped but `-` and `_`, spaces
/// as `-`.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Lines outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut in_code = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                return false;
            }
            !in_code
        })
        .collect()
}

/// The anchors of a Markdown file's headings (a repeated heading gets `-1`, `-2`, …).
fn anchors(text: &str) -> std::collections::HashSet<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut anchors = std::collections::HashSet::new();
    for line in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let anchor = heading_anchor(heading);
        let count = seen.entry(anchor.clone()).or_default();
        anchors.insert(if *count == 0 {
            anchor.clone()
        } else {
            format!("{anchor}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// The targets of a line's inline links (`[text](target)`) and of a reference definition
/// (`[name]: target`).
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find([')', ' ']).unwrap_or(after.len());
        targets.push(&after[..end]);
        rest = &after[end..];
    }
    if let Some(definition) = line.strip_prefix('[')
        && let Some((_, target)) = definition.split_once("]: ")
    {
        targets.push(target.trim());
    }
    targets
}

/// Every relative link of the documents resolves: its file exists, and a `#fragment` into
/// a Markdown file names one of its headings. (A renamed section or a moved file breaks a
/// link silently otherwise; web links are not checked.)
#[test]
fn relative_links_in_the_docs_resolve() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in linked_documents(root) {
        let text = std::fs::read_to_string(&file).expect("a readable document");
        let dir = file.parent().expect("a file in a folder");
        for line in prose_lines(&text) {
            for target in link_targets(line) {
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    dir.join(path)
                };
                let shown = file
                    .strip_prefix(root)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                if !linked.exists() {
                    broken.push(format!("{shown}: {target} (no such file)"));
                } else if !fragment.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                    let linked_text = std::fs::read_to_string(&linked).expect("a readable file");
                    if !anchors(&linked_text).contains(fragment) {
                        broken.push(format!("{shown}: {target} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} relative links found: is the parser right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
