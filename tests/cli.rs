//! The `harel-jobs` command line, run as a real process (tests/bin/cli.rs, the same
//! `harel_jobs::cli::main` as the crate's `harel-jobs` binary) against a real PostgreSQL.
//! Every command that touches a queue runs as a role with exactly the operator's grants of
//! the guide's "Database roles" (least privilege); the test's own pool (the schema's owner)
//! only sets jobs up and checks what the command did, through the library.

use std::time::Duration;

use assert_cmd::Command;
use harel_jobs::transport::{ClaimRequest, LeaseOutcome, OutgoingMessage};
use harel_jobs::{Client, JobId, JobState};
use harel_jobs_suite::{OPERATOR_GRANTS, PRODUCER_GRANTS, SuiteSchema, TestRole, database_url};
use serde_json::Value;

/// The binary with no database or schema from the environment.
fn bare() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_harel-jobs-cli"));
    command
        .env_remove("DATABASE_URL")
        .env_remove("HAREL_SCHEMA")
        .timeout(Duration::from_secs(60));
    command
}

/// The binary on `q`'s schema as the role at `url`.
fn cli(url: &str, q: &SuiteSchema) -> Command {
    let mut command = bare();
    command
        .args(["--database-url", url, "--schema", q.schema.name()])
        .args(["--connect-timeout", "5s"]);
    command
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

fn run(command: &mut Command, args: &[&str]) -> Run {
    let output = command.args(args).output().expect("the binary runs");
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs and expects exit 0.
fn ok(command: &mut Command, args: &[&str]) -> Run {
    let run = run(command, args);
    assert_eq!(run.code, 0, "{args:?}\n{}\n{}", run.stdout, run.stderr);
    run
}

/// Runs and expects exit `code` with `needle` on stderr (and nothing on stdout).
fn fails(command: &mut Command, args: &[&str], code: i32, needle: &str) -> Run {
    let run = run(command, args);
    assert_eq!(run.code, code, "{args:?}\n{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains(needle),
        "{args:?}: {needle:?} not in {}",
        run.stderr
    );
    run
}

async fn publish(q: &SuiteSchema, group: Option<&str>, kind: &str, payload: &str) -> JobId {
    let message = match group {
        Some(group) => OutgoingMessage::new(group, kind, payload),
        None => OutgoingMessage::new("unused", kind, payload).in_own_group(),
    };
    q.transport.publish(&q.pool, &message).await.unwrap()
}

/// Publishes a job and makes it a dead letter with `error`.
async fn dead_letter(q: &SuiteSchema, kind: &str, error: &str) -> JobId {
    let id = publish(q, None, kind, "{\"n\":1}").await;
    let claimed = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(60)).limit(100),
        )
        .await
        .unwrap();
    let message = claimed
        .into_iter()
        .find(|m| m.lease.id == id)
        .expect("claimed");
    let outcome = q
        .transport
        .dead_letter(&q.pool, &message.lease, error)
        .await
        .unwrap();
    assert_eq!(outcome, LeaseOutcome::Applied);
    id
}

fn queue(q: &SuiteSchema) -> Client {
    Client::with_schema(q.pool.clone(), q.schema.clone())
}

async fn dead_count(q: &SuiteSchema) -> i64 {
    Client::with_schema(q.pool.clone(), q.schema.clone())
        .dead_letters()
        .count()
        .await
        .unwrap()
}

#[test]
fn every_command_has_help_with_examples() {
    for path in [
        &[][..],
        &["migrate"],
        &["stats"],
        &["jobs", "list"],
        &["jobs", "show"],
        &["jobs", "cancel"],
        &["groups", "list"],
        &["groups", "top"],
        &["groups", "show"],
        &["dead", "list"],
        &["dead", "show"],
        &["dead", "retry"],
        &["dead", "delete"],
        &["dead", "purge"],
        &["schedules", "list"],
        &["workflows", "list"],
        &["workflows", "show"],
        &["workflows", "cancel"],
        &["workflows", "retry"],
    ] {
        let mut args = path.to_vec();
        args.push("--help");
        let run = ok(&mut bare(), &args);
        assert!(run.stdout.contains("Usage: harel-jobs"), "{path:?}");
        assert!(run.stdout.contains("Example"), "{path:?}: {}", run.stdout);
    }
    for group in ["jobs", "groups", "dead", "schedules", "workflows"] {
        let run = ok(&mut bare(), &[group, "--help"]);
        assert!(run.stdout.contains("list"), "{group}");
    }
}

#[test]
fn malformed_arguments_are_usage_errors() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["jobs"],
        &["jobs", "show"],
        &["jobs", "show", "forty-two"],
        &["jobs", "list", "--state", "sleeping"],
        &["jobs", "list", "--limit", "0"],
        &["jobs", "list", "--limit", "1001"],
        &["jobs", "cancel"],
        &["jobs", "cancel", "1", "--group", "g"],
        &["dead", "retry"],
        &["dead", "retry", "1", "--all"],
        &["dead", "delete", "1", "--since", "1h"],
        &["dead", "purge"],
        &["dead", "purge", "--older-than", "7 days"],
        &["dead", "purge", "--older-than", "5300w"],
        &["stats", "--connect-timeout", "soon"],
    ] {
        let run = run(&mut bare(), args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty() || args.is_empty(), "{args:?}");
    }
    // no database named anywhere, or a schema name that cannot be one
    fails(
        &mut bare(),
        &["stats"],
        2,
        "pass --database-url or set DATABASE_URL",
    );
    let url = database_url();
    let mut command = bare();
    command.args(["--database-url", &url, "--schema", "Robert'); DROP"]);
    fails(&mut command, &["stats"], 2, "invalid schema name");
}

#[test]
fn the_password_never_shows() {
    let secret = "hunter2-s3cret";
    // unreachable: nothing listens on port 1
    let url = format!("postgres://operator:{secret}@127.0.0.1:1/jobs");
    let mut command = bare();
    command.args(["--database-url", &url, "--connect-timeout", "1s"]);
    let run = fails(&mut command, &["stats"], 1, "unreachable");
    assert!(
        run.stderr.contains("operator@127.0.0.1:1/jobs"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains(secret) && !run.stdout.contains(secret));

    // a URL that does not parse: a usage error, still without the password
    let url = format!("postgres://operator:{secret}@127.0.0.1:notaport/jobs");
    let mut command = bare();
    command.args(["--database-url", &url]);
    let run = fails(&mut command, &["stats"], 2, "invalid database url");
    assert!(!run.stderr.contains(secret), "{}", run.stderr);

    // refused by the server (no such role)
    let options: sqlx::postgres::PgConnectOptions = database_url().parse().unwrap();
    let url = format!(
        "postgres://no_such_role_harel:{secret}@{}:{}/postgres",
        options.get_host(),
        options.get_port()
    );
    let mut command = bare();
    command.args(["--database-url", &url]);
    let run = fails(&mut command, &["stats"], 1, "refused the connection");
    assert!(!run.stderr.contains(secret), "{}", run.stderr);

    // help shows where the URL comes from, never its value
    let url = format!("postgres://operator:{secret}@127.0.0.1:5432/jobs");
    let run = ok(bare().env("DATABASE_URL", &url), &["--help"]);
    assert!(run.stdout.contains("DATABASE_URL"));
    assert!(!run.stdout.contains(secret), "{}", run.stdout);
}

#[tokio::test]
async fn a_wrong_or_unmigrated_schema_is_named_and_left_alone() {
    let q = SuiteSchema::unmigrated().await;
    let url = database_url();
    for args in [&["stats"][..], &["jobs", "list"], &["dead", "list"]] {
        let run = fails(&mut cli(&url, &q), args, 1, "is not migrated");
        assert!(run.stderr.contains(q.schema.name()), "{}", run.stderr);
        assert!(run.stderr.contains("harel-jobs migrate"), "{}", run.stderr);
    }
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)")
            .bind(q.schema.name())
            .fetch_one(&q.pool)
            .await
            .unwrap();
    assert!(!exists, "looking at a schema must not create it");

    // migrate creates it (as the owner), and then it answers
    let run = ok(&mut cli(&url, &q), &["--json", "migrate"]);
    assert_eq!(run.json()["version"], harel_jobs::SCHEMA_VERSION);
    let run = ok(&mut cli(&url, &q), &["stats"]);
    assert!(
        run.stdout.contains("jobs:") && run.stdout.contains("idle:"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn a_role_without_the_operators_grants_is_told_which_it_lacks() {
    let q = SuiteSchema::new().await;
    let producer = TestRole::with_grants(&q, PRODUCER_GRANTS).await;
    let run = fails(
        &mut cli(&producer.url, &q),
        &["jobs", "list"],
        1,
        "permission denied",
    );
    assert!(
        run.stderr
            .contains("docs/guide/operating.md, \"Database roles\""),
        "{}",
        run.stderr
    );
}

/// A login granted nothing is told it lacks USAGE on the schema (not that the schema is
/// not migrated); one with USAGE is told which EXECUTE, SELECT or DELETE it lacks: each
/// with the role's name and the statement that grants it.
#[tokio::test]
async fn a_role_is_told_which_privilege_it_lacks() {
    let q = SuiteSchema::new().await;
    let schema = q.schema.name();
    let nothing = TestRole::with_grants(&q, &[]).await;
    for args in [&["stats"][..], &["jobs", "list"], &["dead", "list"]] {
        let run = fails(&mut cli(&nothing.url, &q), args, 1, "lacks USAGE on schema");
        assert!(!run.stderr.contains("not migrated"), "{}", run.stderr);
        assert!(
            run.stderr.contains(&format!(
                "role \"{}\" lacks USAGE on schema {schema}",
                nothing.name
            )),
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.contains(&format!(
                "GRANT USAGE ON SCHEMA {schema} TO {}",
                nothing.name
            )),
            "{}",
            run.stderr
        );
    }
    // the library says so too, to a worker at start-up
    let pool = harel_jobs_suite::pool_with(&nothing.url, 1).await;
    let error = harel_jobs::check_schema(&pool, &q.schema)
        .await
        .unwrap_err();
    match &error {
        harel_jobs::MigrateError::PermissionDenied(missing) => {
            assert_eq!(missing.role, nothing.name);
            assert_eq!(missing.privilege, "USAGE");
            assert_eq!(missing.object, schema);
        }
        other => panic!("{other:?}"),
    }
    pool.close().await;

    // USAGE and the tables, all operator's EXECUTEs but harel_list_jobs
    let grants: Vec<&str> = OPERATOR_GRANTS
        .iter()
        .copied()
        .filter(|grant| !grant.ends_with(".harel_list_jobs"))
        .collect();
    let operator = TestRole::with_grants(&q, &grants).await;
    ok(&mut cli(&operator.url, &q), &["stats"]);
    let run = fails(
        &mut cli(&operator.url, &q),
        &["jobs", "list"],
        1,
        &format!(
            "role \"{}\" lacks EXECUTE on function {schema}.harel_list_jobs",
            operator.name
        ),
    );
    assert!(
        run.stderr.contains(&format!(
            "GRANT EXECUTE ON FUNCTION {schema}.harel_list_jobs TO {}",
            operator.name
        )),
        "{}",
        run.stderr
    );

    // USAGE alone: SELECT on a table; SELECT on the dead letters without the function that
    // deletes them (no table grant deletes them: issue 42, item 12): its EXECUTE
    let usage = TestRole::with_grants(&q, &["USAGE ON SCHEMA @schema@"]).await;
    let run = fails(
        &mut cli(&usage.url, &q),
        &["dead", "list"],
        1,
        "lacks SELECT",
    );
    assert!(
        run.stderr.contains(&format!(
            "role \"{}\" lacks SELECT on table {schema}.dead_letters",
            usage.name
        )),
        "{}",
        run.stderr
    );
    let id = dead_letter(&q, "send_email", "boom").await;
    let reader = TestRole::with_grants(
        &q,
        &[
            "USAGE ON SCHEMA @schema@",
            "SELECT ON @schema@.dead_letters",
        ],
    )
    .await;
    let run = fails(
        &mut cli(&reader.url, &q),
        &["dead", "delete", &id.to_string(), "--yes"],
        1,
        &format!(
            "role \"{}\" lacks EXECUTE on function {schema}.harel_delete_dead_letters",
            reader.name
        ),
    );
    assert!(
        run.stderr.contains(&format!(
            "GRANT EXECUTE ON FUNCTION {schema}.harel_delete_dead_letters TO {}",
            reader.name
        )),
        "{}",
        run.stderr
    );
    assert_eq!(dead_count(&q).await, 1);
}

/// An empty token, or basic auth with an empty user or password, would let anyone in: the
/// dashboard refuses to start (before it reaches the database or binds the port).
#[tokio::test]
async fn the_dashboard_refuses_empty_credentials() {
    // a migrated schema, so that only the credentials can stop it
    let q = SuiteSchema::new().await;
    let url = database_url();
    let start = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = cli(&url, &q);
        command
            .args(["dashboard", "--listen", "127.0.0.1:0"])
            .env_remove("HAREL_DASHBOARD_TOKEN")
            .env_remove("HAREL_DASHBOARD_BASIC_AUTH")
            // were it to serve, it would not end: a failure, not a hang
            .timeout(Duration::from_secs(20));
        for (name, value) in env {
            command.env(name, value);
        }
        let output = command.args(args).output().expect("the binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            output.status.code().is_some(),
            "{args:?} {env:?}: it served (killed after 20 s): {stderr}"
        );
        (output.status.code().unwrap_or(0), stderr)
    };
    /// Arguments, environment, and the credential the message names.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        (&[], &[("HAREL_DASHBOARD_TOKEN", "")], "token"),
        (&[], &[("HAREL_DASHBOARD_TOKEN", "  ")], "token"),
        (&["--token", ""], &[], "token"),
        (&["--basic-auth", ":"], &[], "user"),
        (&["--basic-auth", ":p4ss"], &[], "user"),
        (&["--basic-auth", " :p4ss"], &[], "user"),
        (&["--basic-auth", "ops:"], &[], "password"),
        (&["--basic-auth", "ops: "], &[], "password"),
        (&[], &[("HAREL_DASHBOARD_BASIC_AUTH", ":")], "user"),
        (&[], &[("HAREL_DASHBOARD_BASIC_AUTH", "ops:")], "password"),
    ];
    for (args, env, what) in cases {
        let (code, stderr) = start(args, env);
        assert_eq!(code, 2, "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{what} of --basic-auth")) || *what == "token",
            "{args:?} {env:?}: {stderr}"
        );
        assert!(stderr.contains(" is empty"), "{args:?} {env:?}: {stderr}");
        assert!(!stderr.contains("p4ss"), "{stderr}");
        assert!(!stderr.contains("http://"), "it served: {stderr}");
    }
    // and a malformed --allowed-host
    let (code, stderr) = start(&["--allowed-host", "http://jobs.internal/"], &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a URL"), "{stderr}");
}

#[tokio::test]
async fn stats_and_jobs_list_show_and_cancel() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    let first = publish(&q, None, "send_email", "{\"to\":\"a@example.com\"}").await;
    let second = publish(&q, None, "send_email", "{\"to\":\"b@example.com\"}").await;
    let report = publish(&q, Some("customer-42"), "report", "{\"n\":7}").await;

    let stats = ok(&mut op(), &["--json", "stats"]).json();
    assert_eq!(
        stats["jobs"],
        serde_json::json!({"value": 3, "kind": "exact"})
    );
    assert_eq!(stats["dead_letters"]["value"], 0);
    assert_eq!(stats["idle"], false);

    // a table for people, JSON for scripts
    let table = ok(&mut op(), &["jobs", "list"]).stdout;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATE"),
        "{table}"
    );
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[3].contains("customer-42") && lines[3].contains("waiting"),
        "{table}"
    );
    let listed = ok(
        &mut op(),
        &["--json", "jobs", "list", "--kind", "send_email"],
    )
    .json();
    let ids: Vec<i64> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [first.get(), second.get()]);
    assert_eq!(listed["jobs"][0]["payload"]["to"], "a@example.com");
    assert_eq!(listed["jobs"][0]["state"], "waiting");
    assert_eq!(listed["next"], Value::Null);

    // pages
    let page = ok(&mut op(), &["--json", "jobs", "list", "--limit", "2"]).json();
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2);
    assert_eq!(page["next"], second.get());
    let cursor = second.to_string();
    let rest = ok(&mut op(), &["--json", "jobs", "list", "--after", &cursor]).json();
    assert_eq!(rest["jobs"][0]["id"], report.get());
    let text = ok(&mut op(), &["jobs", "list", "--limit", "2"]).stdout;
    assert!(
        text.ends_with(&format!("more: --after {second}\n")),
        "{text}"
    );
    let none = ok(&mut op(), &["jobs", "list", "--state", "dead"]).stdout;
    assert_eq!(none, "no jobs\n");

    // one job
    let shown = ok(&mut op(), &["jobs", "show", &report.to_string()]).stdout;
    assert!(
        shown.contains("state:") && shown.contains("waiting"),
        "{shown}"
    );
    assert!(shown.contains("group:       customer-42"), "{shown}");
    assert!(
        shown.contains("payload:\n  {\n    \"n\": 7\n  }\n"),
        "{shown}"
    );
    let json = ok(&mut op(), &["--json", "jobs", "show", &report.to_string()]).json();
    assert_eq!(
        (json["id"].as_i64(), &json["kind"]),
        (Some(report.get()), &Value::from("report"))
    );
    assert_eq!(json["attempt_history"], serde_json::json!([]), "never ran");
    fails(
        &mut op(),
        &["jobs", "show", "999999999"],
        1,
        "no job 999999999",
    );

    // cancel one job: no confirmation for one job
    let said = ok(
        &mut op(),
        &["jobs", "cancel", &first.to_string(), "--reason", "runaway"],
    );
    assert!(said.stdout.contains("cancelled"), "{}", said.stdout);
    let job = queue(&q).job(first).await.unwrap().expect("kept");
    assert_eq!(
        job.state,
        JobState::Cancelled {
            at: match job.state {
                JobState::Cancelled { at, .. } => at,
                ref other => panic!("{other:?}"),
            },
            reason: Some("runaway".into())
        }
    );
    let again = ok(&mut op(), &["--json", "jobs", "cancel", &first.to_string()]).json();
    assert_eq!(again["outcome"], "already_cancelled");
    fails(
        &mut op(),
        &["jobs", "cancel", "999999999"],
        1,
        "no job 999999999",
    );

    // run now: a report scheduled for an hour from now is due at once; a waiting job is
    // left as it is
    let later = q
        .transport
        .publish(
            &q.pool,
            &harel_jobs::transport::OutgoingMessage::new("unused", "report", "{}")
                .in_own_group()
                .delay(std::time::Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let said = ok(&mut op(), &["jobs", "run-now", &later.to_string()]);
    assert!(said.stdout.contains("due now"), "{}", said.stdout);
    assert_eq!(
        queue(&q).job(later).await.unwrap().unwrap().state,
        JobState::Waiting
    );
    let json = ok(
        &mut op(),
        &["--json", "jobs", "run-now", &second.to_string()],
    )
    .json();
    assert_eq!(json["outcome"], "not_waiting");
    fails(
        &mut op(),
        &["jobs", "run-now", "999999999"],
        1,
        "no job 999999999",
    );
}

/// A job's queue is in `jobs show` (JSON and text) and in a column of `jobs list`, and
/// `jobs list --queue` lists only that queue's jobs.
#[tokio::test]
async fn jobs_show_and_list_the_queue() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    let plain = publish(&q, None, "report", "{}").await;
    let mail = q
        .transport
        .publish(
            &q.pool,
            &OutgoingMessage::new("unused", "send_email", "{}")
                .in_own_group()
                .queue("mail"),
        )
        .await
        .unwrap();

    let json = ok(&mut op(), &["--json", "jobs", "show", &mail.to_string()]).json();
    assert_eq!(json["queue"], "mail", "{json}");
    let json = ok(&mut op(), &["--json", "jobs", "show", &plain.to_string()]).json();
    assert_eq!(json["queue"], "default", "{json}");
    let shown = ok(&mut op(), &["jobs", "show", &mail.to_string()]).stdout;
    assert!(shown.contains("queue:       mail\n"), "{shown}");

    let table = ok(&mut op(), &["jobs", "list"]).stdout;
    let lines: Vec<&str> = table.lines().collect();
    let headers: Vec<&str> = lines[0]
        .split("  ")
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    assert_eq!(headers[..4], ["ID", "STATE", "QUEUE", "KIND"], "{table}");
    let column = lines[0].find("QUEUE").expect("a QUEUE column");
    assert!(lines[1][column..].starts_with("default "), "{table}");
    assert!(lines[2][column..].starts_with("mail "), "{table}");

    let listed = ok(&mut op(), &["--json", "jobs", "list", "--queue", "mail"]).json();
    let ids: Vec<i64> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [mail.get()], "{listed}");
    assert_eq!(listed["jobs"][0]["queue"], "mail");
    let text = ok(&mut op(), &["jobs", "list", "--queue", "mail"]).stdout;
    assert_eq!(text.lines().count(), 2, "{text}");
    let none = ok(&mut op(), &["jobs", "list", "--queue", "nosuchqueue"]).stdout;
    assert_eq!(none, "no jobs\n");
}

/// A running job whose cancel was asked with a reason shows the reason at once, before
/// its handler returns: in `jobs show` (JSON and text) and `jobs list`.
#[tokio::test]
async fn a_running_jobs_pending_cancel_shows_its_reason() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    let id = publish(&q, None, "export", "{}").await;
    let claimed = q
        .transport
        .claim_many(
            &q.pool,
            &ClaimRequest::new(Duration::from_secs(60)).limit(10),
        )
        .await
        .unwrap();
    assert!(claimed.iter().any(|m| m.lease.id == id), "claimed");

    let json = ok(
        &mut op(),
        &[
            "--json",
            "jobs",
            "cancel",
            &id.to_string(),
            "--reason",
            "runaway export",
        ],
    )
    .json();
    assert_eq!(json["outcome"], "requested", "{json}");
    let json = ok(&mut op(), &["--json", "jobs", "show", &id.to_string()]).json();
    assert_eq!(json["state"], "running", "{json}");
    assert_eq!(json["cancel_requested"], true, "{json}");
    assert_eq!(json["cancel_reason"], "runaway export", "{json}");
    let shown = ok(&mut op(), &["jobs", "show", &id.to_string()]).stdout;
    assert!(shown.contains("cancel reason: runaway export\n"), "{shown}");
    let listed = ok(&mut op(), &["--json", "jobs", "list", "--state", "running"]).json();
    assert_eq!(
        listed["jobs"][0]["cancel_reason"], "runaway export",
        "{listed}"
    );
}

#[tokio::test]
async fn groups_are_listed_shown_and_cancelled_only_when_confirmed() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    for n in 0..3 {
        publish(&q, Some("customer-42"), "sync", &format!("{{\"n\":{n}}}")).await;
    }
    publish(&q, Some("customer 7's"), "sync", "{}").await;

    let listed = ok(&mut op(), &["--json", "groups", "list"]).json();
    let groups = listed["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["id"], "customer 7's");
    assert_eq!(
        (&groups[1]["id"], &groups[1]["jobs"]),
        (&Value::from("customer-42"), &Value::from(3))
    );
    assert_eq!(groups[1]["status"], "waiting");
    let page = ok(&mut op(), &["groups", "list", "--limit", "1"]).stdout;
    assert!(
        page.ends_with("more: --after 'customer 7'\\''s'\n"),
        "{page}"
    );
    let rest = ok(
        &mut op(),
        &["--json", "groups", "list", "--after", "customer 7's"],
    )
    .json();
    assert_eq!(rest["groups"][0]["id"], "customer-42");

    // ranked: both wait, customer-42's first job since it was enqueued first
    let top = ok(&mut op(), &["--json", "groups", "top"]).json();
    let ids: Vec<&str> = top["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["customer-42", "customer 7's"]);
    assert_eq!(top["statistics_at"], Value::Null);
    let depth = ok(&mut op(), &["--json", "queues", "depth"]).json();
    assert_eq!(
        depth["depth"][0]["ready"],
        serde_json::json!({"value": 2, "kind": "exact"})
    );
    assert_eq!(
        (&depth["depth"][0]["queue"], &depth["depth"][0]["priority"]),
        (&Value::from("default"), &Value::from(2))
    );
    let table = ok(&mut op(), &["queues", "depth"]).stdout;
    assert!(table.starts_with("QUEUE"), "{table}");
    ok(
        &mut op(),
        &["groups", "top", "--by", "size", "--limit", "5"],
    );
    fails(&mut op(), &["groups", "top", "--limit", "101"], 2, "101");
    fails(&mut op(), &["groups", "top", "--by", "age"], 2, "age");

    let shown = ok(&mut op(), &["groups", "show", "customer-42"]).stdout;
    assert!(shown.contains("jobs:") && shown.contains("3"), "{shown}");
    assert_eq!(shown.matches(" sync ").count(), 3, "{shown}");
    fails(
        &mut op(),
        &["groups", "show", "nobody"],
        1,
        "no group \"nobody\"",
    );

    // more than one job: asks first; without a terminal it refuses and changes nothing
    let run = fails(
        &mut op(),
        &["jobs", "cancel", "--group", "customer-42"],
        1,
        "pass --yes",
    );
    assert!(run.stdout.is_empty());
    let group = queue(&q)
        .group("customer-42")
        .await
        .unwrap()
        .expect("intact");
    assert_eq!(group.jobs, 3);
    let done = ok(
        &mut op(),
        &[
            "--json",
            "jobs",
            "cancel",
            "--group",
            "customer-42",
            "--yes",
        ],
    )
    .json();
    assert_eq!(done["cancelled"], 3);
    assert!(queue(&q).group("customer-42").await.unwrap().is_none());
    fails(
        &mut op(),
        &["jobs", "cancel", "--group", "customer-42", "--yes"],
        1,
        "no group",
    );
}

#[tokio::test]
async fn dead_letters_are_listed_retried_deleted_and_purged() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    let a = dead_letter(&q, "send_email", "smtp: connection refused").await;
    let b = dead_letter(&q, "send_email", "smtp: 550 mailbox unavailable").await;
    let c = dead_letter(&q, "report", "line one\nline two").await;

    let listed = ok(&mut op(), &["--json", "dead", "list"]).json();
    let ids: Vec<i64> = listed["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [c.get(), b.get(), a.get()], "newest first");
    let table = ok(
        &mut op(),
        &["dead", "list", "--kind", "send_email", "--limit", "1"],
    )
    .stdout;
    assert!(table.contains("550 mailbox unavailable"), "{table}");
    assert!(table.ends_with(&format!("more: --before {b}\n")), "{table}");
    let table = ok(&mut op(), &["dead", "list", "--kind", "report"]).stdout;
    assert!(
        table.contains("line one line two"),
        "one line per row: {table}"
    );

    let shown = ok(&mut op(), &["dead", "show", &a.to_string()]).stdout;
    assert!(
        shown.contains("last error:  smtp: connection refused"),
        "{shown}"
    );
    assert!(shown.contains("\"n\": 1"), "{shown}");
    // its attempts, newest first: the one that died, with its error
    assert!(
        shown.contains("attempts (newest first):\n  #1 dead, started ")
            && shown.contains(": smtp: connection refused\n"),
        "{shown}"
    );
    let json = ok(&mut op(), &["--json", "dead", "show", &a.to_string()]).json();
    assert_eq!(json["attempt_history"][0]["outcome"], "dead");
    assert_eq!(json["attempt_history"][0]["number"], 1);
    assert_eq!(
        json["attempt_history"][0]["error"],
        "smtp: connection refused"
    );
    let json = ok(&mut op(), &["--json", "jobs", "show", &a.to_string()]).json();
    assert_eq!(json["attempt_history"].as_array().map(Vec::len), Some(1));
    fails(
        &mut op(),
        &["dead", "show", "999999999"],
        1,
        "no dead letter 999999999",
    );

    // last night's send_email letters: a failed two days ago; b2 and b within 12 hours.
    // More than one, so it asks; with no terminal to ask at, nothing is retried
    let b2 = dead_letter(&q, "send_email", "smtp: timeout").await;
    sqlx::query(q.sql(
        "UPDATE @schema@.dead_letters SET failed_at = now() - interval '2 days' WHERE id = $1",
    ))
    .bind(a.get())
    .execute(&q.pool)
    .await
    .unwrap();
    let last_night = [
        "dead",
        "retry",
        "--all",
        "--kind",
        "send_email",
        "--since",
        "12h",
    ];
    fails(&mut op(), &last_night, 1, "pass --yes");
    assert_eq!(dead_count(&q).await, 4);
    let retried = ok(
        &mut op(),
        &[&["--json"][..], &last_night, &["--yes"]].concat(),
    )
    .json();
    let pairs = retried["retried"].as_array().unwrap();
    let old_ids: Vec<i64> = pairs.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(old_ids, [b.get(), b2.get()], "oldest first");
    for pair in pairs {
        let new_id = JobId::new(pair["new_id"].as_i64().unwrap());
        let job = queue(&q)
            .job(new_id)
            .await
            .unwrap()
            .expect("back in the queue");
        assert_eq!(
            (job.state, job.kind.as_str()),
            (JobState::Waiting, "send_email")
        );
    }
    assert_eq!(
        dead_count(&q).await,
        2,
        "a (too old) and c (another kind) stay"
    );
    let none = ok(
        &mut op(),
        &[
            "--json",
            "dead",
            "retry",
            "--all",
            "--kind",
            "nothing_of_this_kind",
            "--yes",
        ],
    )
    .json();
    assert_eq!(none["retried"], serde_json::json!([]));

    // two ids ask first; an unknown id fails, after the others are done; one id never asks
    let run = fails(
        &mut op(),
        &["dead", "retry", &c.to_string(), "999999999"],
        1,
        "pass --yes",
    );
    assert!(run.stdout.is_empty());
    let run = fails(
        &mut op(),
        &["dead", "retry", &c.to_string(), "999999999", "--yes"],
        1,
        "no dead letter 999999999",
    );
    assert!(
        run.stdout.contains("retried 1 dead letter"),
        "{}",
        run.stdout
    );
    ok(&mut op(), &["dead", "retry", &a.to_string()]);
    assert_eq!(dead_count(&q).await, 0);

    let d = dead_letter(&q, "report", "boom").await;
    let e = dead_letter(&q, "report", "boom").await;
    fails(
        &mut op(),
        &["dead", "delete", &d.to_string(), &e.to_string()],
        1,
        "pass --yes",
    );
    assert_eq!(dead_count(&q).await, 2);
    ok(&mut op(), &["dead", "delete", &d.to_string()]);
    assert_eq!(dead_count(&q).await, 1);
    fails(
        &mut op(),
        &["dead", "delete", &d.to_string()],
        1,
        "no dead letter",
    );

    // purge: always asks; --older-than spares the recent ones
    fails(
        &mut op(),
        &["dead", "purge", "--older-than", "0s"],
        1,
        "pass --yes",
    );
    let kept = ok(
        &mut op(),
        &["--json", "dead", "purge", "--older-than", "1d", "--yes"],
    )
    .json();
    assert_eq!(kept["purged"], 0);
    assert_eq!(dead_count(&q).await, 1);
    let purged = ok(
        &mut op(),
        &["--json", "dead", "purge", "--older-than", "0s", "--yes"],
    )
    .json();
    assert_eq!(purged["purged"], 1);
    assert_eq!(dead_count(&q).await, 0);
    assert_eq!(ok(&mut op(), &["dead", "list"]).stdout, "no dead letters\n");
}

#[tokio::test]
async fn schedules_are_listed() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    assert_eq!(
        ok(&mut op(), &["schedules", "list"]).stdout,
        "no schedules\n"
    );
    sqlx::query(q.sql(
        "INSERT INTO @schema@.schedules (name, spec, last_tick, next_tick, updated_at)
         VALUES ('nightly_report', 'cron 0 3 * * * (UTC)', now() - interval '1 day',
                 now() + interval '1 hour', now())",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let table = ok(&mut op(), &["schedules", "list"]).stdout;
    assert!(
        table.contains("nightly_report") && table.contains("cron 0 3 * * *"),
        "{table}"
    );
    let json = ok(&mut op(), &["--json", "schedules", "list"]).json();
    assert_eq!(json["schedules"][0]["name"], "nightly_report");
    assert_eq!(json["total"], 1);

    // a page at a time, with the cursor of the next
    sqlx::query(
        q.sql("INSERT INTO @schema@.schedules (name, spec) VALUES ('a_first', 'every 1s')"),
    )
    .execute(&q.pool)
    .await
    .unwrap();
    let first = ok(&mut op(), &["schedules", "list", "--limit", "1"]).stdout;
    assert!(
        first.contains("a_first") && first.contains("--after a_first"),
        "{first}"
    );
    let json = ok(
        &mut op(),
        &[
            "--json",
            "schedules",
            "list",
            "--limit",
            "1",
            "--after",
            "a_first",
        ],
    )
    .json();
    assert_eq!(json["schedules"][0]["name"], "nightly_report");
    assert_eq!(json["total"], 2);

    // forgetting one asks first
    fails(&mut op(), &["schedules", "delete", "a_first"], 1, "--yes");
    let json = ok(
        &mut op(),
        &["--json", "schedules", "delete", "a_first", "--yes"],
    )
    .json();
    assert_eq!(json["deleted"], true);
    let json = ok(
        &mut op(),
        &["--json", "schedules", "delete", "a_first", "--yes"],
    )
    .json();
    assert_eq!(json["deleted"], false);
}

#[tokio::test]
async fn schedules_are_paused_resumed_and_triggered() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    sqlx::query(q.sql(
        "INSERT INTO @schema@.schedules (name, spec, next_tick)
         VALUES ('nightly_report', 'every 3600s', now() + interval '1 hour')",
    ))
    .execute(&q.pool)
    .await
    .unwrap();
    let table = ok(&mut op(), &["schedules", "list"]).stdout;
    assert!(
        table.contains("STATE") && table.contains("active"),
        "{table}"
    );

    let paused = ok(&mut op(), &["schedules", "pause", "nightly_report"]).stdout;
    assert_eq!(paused, "paused the schedule nightly_report\n");
    let again = ok(
        &mut op(),
        &["--json", "schedules", "pause", "nightly_report"],
    )
    .json();
    assert_eq!(again["changed"], false);
    let table = ok(&mut op(), &["schedules", "list"]).stdout;
    assert!(table.contains("paused since"), "{table}");
    let json = ok(&mut op(), &["--json", "schedules", "list"]).json();
    assert!(json["schedules"][0]["paused_at"].is_string(), "{json}");
    fails(
        &mut op(),
        &["schedules", "trigger", "nightly_report"],
        1,
        "is paused",
    );

    let resumed = ok(&mut op(), &["schedules", "resume", "nightly_report"]).stdout;
    assert!(
        resumed.starts_with("resumed the schedule nightly_report"),
        "{resumed}"
    );
    let json = ok(&mut op(), &["--json", "schedules", "list"]).json();
    assert!(json["schedules"][0]["paused_at"].is_null(), "{json}");

    let triggered = ok(
        &mut op(),
        &["--json", "schedules", "trigger", "nightly_report"],
    )
    .json();
    assert_eq!(triggered["requested"], true);
    let table = ok(&mut op(), &["schedules", "list"]).stdout;
    assert!(table.contains("triggered"), "{table}");
    let json = ok(&mut op(), &["--json", "schedules", "list"]).json();
    assert!(
        json["schedules"][0]["trigger_requested_at"].is_string(),
        "{json}"
    );

    // an unknown name is refused, and not created
    for action in ["pause", "resume", "trigger"] {
        fails(
            &mut op(),
            &["schedules", action, "nope"],
            1,
            "no schedule named",
        );
    }
    let json = ok(&mut op(), &["--json", "schedules", "list"]).json();
    assert_eq!(json["total"], 1);
}

/// A job of the workflows below.
#[derive(serde::Serialize, serde::Deserialize)]
struct Note {
    n: u32,
}

impl harel_jobs::Job for Note {
    const KIND: &'static str = "note";
}

#[tokio::test]
async fn workflows_are_listed_shown_cancelled_and_retried() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    assert_eq!(
        ok(&mut op(), &["workflows", "list"]).stdout,
        "no workflows\n"
    );
    let mut w = queue(&q).workflow("nightly-export");
    let shard = w
        .task("shard", Note { n: 1 }, &harel_jobs::EnqueueOptions::new())
        .unwrap();
    w.task(
        "zip",
        Note { n: 2 },
        &harel_jobs::EnqueueOptions::new().after([shard]),
    )
    .unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let id = enqueued.id.to_string();

    let table = ok(&mut op(), &["workflows", "list"]).stdout;
    assert!(
        table.contains("nightly-export") && table.contains("running"),
        "{table}"
    );
    let shown = ok(&mut op(), &["workflows", "show", &id]).stdout;
    assert!(
        shown.contains("zip") && shown.contains("pending") && shown.contains("shard"),
        "the tasks, their states and what each waits for: {shown}"
    );
    let zip = enqueued.jobs[1].to_string();
    let shown = ok(&mut op(), &["jobs", "show", &zip]).stdout;
    assert!(
        shown.contains("pending")
            && shown.contains("waits for")
            && shown.contains(&enqueued.jobs[0].to_string()),
        "{shown}"
    );
    let json = ok(&mut op(), &["--json", "jobs", "show", &zip]).json();
    assert_eq!(json["waits_for"][0], enqueued.jobs[0].get());
    let json = ok(&mut op(), &["--json", "workflows", "show", &id]).json();
    assert_eq!(json["workflow"]["tasks"], 2);
    assert_eq!(json["tasks"][1]["waits_for"][0], "shard");
    assert_eq!(json["tasks"][1]["state"], "pending");
    fails(
        &mut op(),
        &["workflows", "show", "999999"],
        1,
        "no workflow 999999",
    );

    // cancel and retry ask first
    fails(&mut op(), &["workflows", "cancel", &id], 1, "--yes");
    let json = ok(
        &mut op(),
        &[
            "--json",
            "workflows",
            "cancel",
            &id,
            "--reason",
            "test",
            "--yes",
        ],
    )
    .json();
    assert_eq!(json["cancelled"], 2);
    // the operator's cancel reads as one, with the counts by outcome (issue 42, item 8)
    let json = ok(&mut op(), &["--json", "workflows", "list"]).json();
    assert_eq!(json["workflows"][0]["state"], "cancelled");
    assert_eq!(json["workflows"][0]["cancelled"], 2);
    assert_eq!(json["workflows"][0]["dead"], 0);
    assert!(json["workflows"][0]["cancelled_at"].is_string());
    let table = ok(&mut op(), &["workflows", "list"]).stdout;
    assert!(
        table.contains("cancelled") && !table.contains("failed"),
        "{table}"
    );
    let shown = ok(&mut op(), &["workflows", "show", &id]).stdout;
    assert!(
        shown.contains(": cancelled, 2 of 2 tasks ended (0 completed, 0 dead, 2 cancelled)"),
        "{shown}"
    );
    fails(&mut op(), &["workflows", "retry", &id], 1, "--yes");
    let json = ok(&mut op(), &["--json", "workflows", "retry", &id, "--yes"]).json();
    assert_eq!(json["retried"], 2);
    let json = ok(&mut op(), &["--json", "workflows", "show", &id]).json();
    assert_eq!(json["tasks"][0]["state"], "waiting");
    assert_eq!(json["tasks"][1]["state"], "pending");
}

/// Issue 42, item 6: `jobs show` and `dead show` (text and JSON) say which workflow and
/// task a job is; `dead retry` of a task's letter puts the task back into its workflow
/// (its new job is the task's, `jobs show` says so), and `workflows retry` then has
/// nothing to retry instead of failing.
#[tokio::test]
async fn a_tasks_job_and_dead_letter_name_their_workflow_and_a_retry_keeps_it() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    let mut w = queue(&q).workflow("nightly-export");
    let shard = w
        .task("shard", Note { n: 1 }, &harel_jobs::EnqueueOptions::new())
        .unwrap();
    w.task(
        "zip",
        Note { n: 2 },
        &harel_jobs::EnqueueOptions::new().after([shard]),
    )
    .unwrap();
    let enqueued = w.enqueue(&q.pool).await.unwrap();
    let id = enqueued.id.to_string();
    let named = format!("workflow {id} (nightly-export), task shard");

    let shown = ok(&mut op(), &["jobs", "show", &enqueued.jobs[0].to_string()]).stdout;
    assert!(shown.contains(&named), "{shown}");
    let lease = q
        .transport
        .claim(&q.pool, &ClaimRequest::new(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("the shard");
    assert_eq!(lease.lease.id, enqueued.jobs[0]);
    let outcome = q
        .transport
        .dead_letter(&q.pool, &lease.lease, "corrupt")
        .await
        .unwrap();
    assert_eq!(outcome, LeaseOutcome::Applied);
    let letter = enqueued.jobs[0].to_string();
    let shown = ok(&mut op(), &["dead", "show", &letter]).stdout;
    assert!(shown.contains(&named), "{shown}");
    let json = ok(&mut op(), &["--json", "dead", "show", &letter]).json();
    assert_eq!(json["workflow"]["id"], enqueued.id.get());
    assert_eq!(json["workflow"]["name"], "nightly-export");
    assert_eq!(json["workflow"]["task"], "shard");
    let json = ok(
        &mut op(),
        &["--json", "jobs", "show", &enqueued.jobs[1].to_string()],
    )
    .json();
    assert_eq!(json["workflow"]["task"], "zip");
    assert_eq!(json["state"], "cancelled");

    let json = ok(&mut op(), &["--json", "dead", "retry", &letter]).json();
    let new_id = json["retried"][0]["new_id"].as_i64().expect("retried");
    let json = ok(&mut op(), &["--json", "workflows", "show", &id]).json();
    assert_eq!(json["workflow"]["state"], "running");
    assert_eq!(json["tasks"][0]["job"], new_id);
    assert_eq!(json["tasks"][0]["state"], "waiting");
    assert_eq!(
        json["tasks"][1]["state"], "pending",
        "zip waits for it again"
    );
    let shown = ok(&mut op(), &["jobs", "show", &new_id.to_string()]).stdout;
    assert!(shown.contains(&named), "{shown}");
    let json = ok(&mut op(), &["--json", "workflows", "retry", &id, "--yes"]).json();
    assert_eq!(json["retried"], 0);
    // a job of no workflow says nothing of one
    let plain = dead_letter(&q, "plain", "no").await.to_string();
    let json = ok(&mut op(), &["--json", "dead", "show", &plain]).json();
    assert!(json["workflow"].is_null());
    assert!(
        !ok(&mut op(), &["dead", "show", &plain])
            .stdout
            .contains("workflow")
    );
}

#[tokio::test]
async fn queues_are_listed_paused_and_resumed() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    // a queue no job went to: refused (a typo must not make a paused queue for ever),
    // unless asked to create it
    fails(
        &mut op(),
        &["queues", "pause", "partner_api"],
        1,
        "no queue named \"partner_api\"",
    );
    fails(
        &mut op(),
        &["queues", "key-limit", "partner_api", "5"],
        1,
        "no queue named",
    );
    fails(
        &mut op(),
        &["queues", "weight", "partner_api", "k", "2"],
        1,
        "no queue named",
    );
    assert!(
        queue(&q)
            .queues()
            .await
            .unwrap()
            .iter()
            .all(|info| info.name != "partner_api"),
        "nothing created"
    );
    let paused = ok(&mut op(), &["queues", "pause", "partner_api", "--create"]).stdout;
    assert!(
        paused.starts_with("queue partner_api: paused since "),
        "{paused}"
    );
    let info = queue(&q)
        .queues()
        .await
        .unwrap()
        .into_iter()
        .find(|info| info.name == "partner_api")
        .expect("created by the pause --create");
    assert!(info.is_paused());

    let listed = ok(&mut op(), &["--json", "queues", "list"]).json();
    let partner = listed["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|queue| queue["name"] == "partner_api")
        .cloned()
        .expect("listed");
    assert_eq!(partner["paused"], true);
    assert_eq!(
        partner["running"],
        serde_json::json!({"value": 0, "kind": "exact"})
    );
    let table = ok(&mut op(), &["queues", "list"]).stdout;
    assert!(table.starts_with("QUEUE"), "{table}");
    assert!(
        table.contains("partner_api") && table.contains("paused since"),
        "{table}"
    );

    let resumed = ok(&mut op(), &["--json", "queues", "resume", "partner_api"]).json();
    assert_eq!(
        (&resumed["name"], &resumed["paused"]),
        (&Value::from("partner_api"), &Value::from(false))
    );
    let info = queue(&q).queues().await.unwrap();
    assert!(info.iter().all(|queue| !queue.is_paused()), "{info:?}");

    fails(
        &mut op(),
        &["queues", "pause", "no spaces!"],
        2,
        "queue names are",
    );
    fails(&mut op(), &["queues", "pause"], 2, "<NAME>");
}

/// A queue's fairness keys: weights set by an operator role, listed a page at a time with
/// their ready groups, in a table and in JSON; a weight out of range is a usage error.
#[tokio::test]
async fn fairness_keys_are_listed_and_weighted() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    for (group, key) in [("a1", "tenant-a"), ("a2", "tenant-a"), ("b1", "tenant-b")] {
        q.transport
            .publish(
                &q.pool,
                &OutgoingMessage::new(group, "k", "{}").fair_key(key),
            )
            .await
            .unwrap();
    }
    let set = ok(&mut op(), &["queues", "weight", "default", "tenant-b", "3"]).stdout;
    assert_eq!(set, "queue default: key \"tenant-b\" has weight 3\n");
    let set = ok(
        &mut op(),
        &["--json", "queues", "weight", "default", "tenant-c", "7"],
    )
    .json();
    assert_eq!(set["weight"], 7);

    let page = ok(
        &mut op(),
        &["--json", "queues", "keys", "default", "--limit", "2"],
    )
    .json();
    assert_eq!(
        page["keys"],
        serde_json::json!([
            {"key": "tenant-a", "weight": 1, "ready": {"value": 2, "kind": "exact"},
             "running": {"value": 0, "kind": "exact"}},
            {"key": "tenant-b", "weight": 3, "ready": {"value": 1, "kind": "exact"},
             "running": {"value": 0, "kind": "exact"}},
        ])
    );
    assert_eq!(page["next"], "tenant-b");
    assert_eq!(page["key_concurrency_limit"], Value::Null);
    let rest = ok(
        &mut op(),
        &["--json", "queues", "keys", "default", "--after", "tenant-b"],
    )
    .json();
    assert_eq!(rest["keys"][0]["key"], "tenant-c");
    assert_eq!(rest["next"], Value::Null);
    let table = ok(&mut op(), &["queues", "keys", "default", "--limit", "2"]).stdout;
    assert!(table.starts_with("KEY"), "{table}");
    assert!(
        table.contains("tenant-a") && table.contains("more: --after tenant-b"),
        "{table}"
    );

    // a limit per key, set and removed by the operator role, shown with the keys
    let set = ok(&mut op(), &["queues", "key-limit", "default", "2"]).stdout;
    assert_eq!(set, "queue default: at most 2 running per key\n");
    let page = ok(&mut op(), &["--json", "queues", "keys", "default"]).json();
    assert_eq!(page["key_concurrency_limit"], 2);
    let table = ok(&mut op(), &["queues", "keys", "default"]).stdout;
    assert!(
        table.starts_with("at most 2 running per key\nKEY"),
        "{table}"
    );
    let set = ok(
        &mut op(),
        &[
            "queues",
            "key-limit",
            "default",
            "2",
            "--rate",
            "20",
            "--per",
            "1s",
        ],
    )
    .stdout;
    assert_eq!(
        set,
        "queue default: at most 2 running per key, at most 20 starts per key per 1s\n"
    );
    let page = ok(&mut op(), &["--json", "queues", "keys", "default"]).json();
    assert_eq!(
        page["key_rate_limit"],
        serde_json::json!({"starts": 20, "per_ms": 1000})
    );
    fails(
        &mut op(),
        &["queues", "key-limit", "default", "--rate", "5"],
        2,
        "--per",
    );
    let set = ok(
        &mut op(),
        &["--json", "queues", "key-limit", "default", "--none"],
    )
    .json();
    assert_eq!(set["key_concurrency_limit"], Value::Null);
    fails(
        &mut op(),
        &["queues", "key-limit", "default"],
        2,
        "<RUNNING>",
    );
    fails(
        &mut op(),
        &["queues", "key-limit", "default", "0"],
        2,
        "1..=1000000",
    );

    fails(
        &mut op(),
        &["queues", "weight", "default", "x", "0"],
        2,
        "1..=1000",
    );
    fails(
        &mut op(),
        &["queues", "weight", "default", "x", "1001"],
        2,
        "1..=1000",
    );
}

/// A URL of another database than PostgreSQL is refused at once, as a usage error that
/// names its scheme (it used to be tried as PostgreSQL for the whole connect timeout), and
/// without the password.
#[test]
fn a_url_of_another_database_is_refused_at_once() {
    for url in [
        "mysql://app:s3cret@127.0.0.1:3306/jobs",
        "redis://127.0.0.1:6379",
    ] {
        let mut command = bare();
        // a wait long enough that a retry loop would show as a timeout of the test instead
        command.args(["--database-url", url, "--connect-timeout", "10m"]);
        let run = fails(&mut command, &["stats"], 2, "not a PostgreSQL database url");
        assert!(
            run.stderr.contains("postgres:// or postgresql://"),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains("s3cret"), "{}", run.stderr);
    }
    let mut command = bare();
    command.args(["--database-url", "mysql://127.0.0.1/jobs"]);
    fails(&mut command, &["stats"], 2, "its scheme is \"mysql\"");
    // a postgresql:// URL is one
    let options: sqlx::postgres::PgConnectOptions = database_url().parse().unwrap();
    let url = format!(
        "postgresql://{}@{}:{}/postgres",
        options.get_username(),
        options.get_host(),
        options.get_port()
    );
    let mut command = bare();
    command.args(["--database-url", &url, "--schema", "harel_no_such_schema"]);
    let run = run(&mut command, &["stats"]);
    assert!(
        !run.stderr.contains("not a PostgreSQL database url"),
        "{}",
        run.stderr
    );
}

/// With DATABASE_URL set, a usage error does not tell to pass --database-url (nor does the
/// usage line make it look required).
#[test]
fn usage_does_not_ask_for_a_database_url_the_environment_gives() {
    let run = run(
        bare()
            .env("DATABASE_URL", "postgres://u@127.0.0.1:1/d")
            .env("HAREL_SCHEMA", "billing_jobs"),
        &["dead", "purge"],
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("--older-than"), "{}", run.stderr);
    assert!(!run.stderr.contains("--database-url"), "{}", run.stderr);
    assert!(!run.stderr.contains("--schema"), "{}", run.stderr);
    // the environment still names the database and the schema: the schema is the one asked
    // for (not migrated: named in the error)
    let mut command = bare();
    command
        .env("DATABASE_URL", database_url())
        .env("HAREL_SCHEMA", "harel_env_schema_absent");
    fails(&mut command, &["stats"], 1, "harel_env_schema_absent");
}

/// Three jobs with long cells, one of them dead (a long error).
async fn long_rows(q: &SuiteSchema) {
    let long = "x".repeat(50);
    publish(q, Some(&long), &format!("kind_{long}"), "{}").await;
    publish(q, None, "send_email", "{}").await;
    dead_letter(q, "import_feed", &format!("the feed is gone: {long}")).await;
}

fn widest(text: &str) -> usize {
    text.lines()
        .map(|line| line.chars().count())
        .max()
        .unwrap_or(0)
}

/// COLUMNS narrows a listing to its width (the widest columns cut with `…`), and a pipe
/// never gets colour escapes, NO_COLOR or not.
#[tokio::test]
async fn a_listing_fits_the_width_and_a_pipe_gets_no_colour() {
    let q = SuiteSchema::new().await;
    long_rows(&q).await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || {
        let mut command = cli(&role.url, &q);
        command.env_remove("COLUMNS").env_remove("NO_COLOR");
        command
    };

    let wide = ok(&mut op(), &["jobs", "list"]).stdout;
    assert!(widest(&wide) > 120, "{wide}");
    assert!(!wide.contains('\x1b'), "{wide:?}");
    for columns in ["80", "100"] {
        let narrow = ok(op().env("COLUMNS", columns), &["jobs", "list"]).stdout;
        assert!(
            widest(&narrow) <= columns.parse().unwrap(),
            "{columns}:\n{narrow}"
        );
        assert!(narrow.contains('…'), "{narrow}");
        assert_eq!(narrow.lines().count(), wide.lines().count(), "{narrow}");
        assert!(narrow.lines().next().unwrap().starts_with("ID"), "{narrow}");
        assert!(!narrow.contains('\x1b'), "{narrow:?}");
    }
    let dead = ok(op().env("COLUMNS", "80"), &["dead", "list"]).stdout;
    assert!(widest(&dead) <= 80, "{dead}");
    let plain = ok(
        op().env("NO_COLOR", "1"),
        &["jobs", "list", "--state", "dead"],
    )
    .stdout;
    assert!(
        plain.contains("dead") && !plain.contains('\x1b'),
        "{plain:?}"
    );
}

/// Runs the command line on a pseudo-terminal (`script`), so that stdout is a terminal.
fn on_terminal(url: &str, q: &SuiteSchema, args: &[&str], no_color: bool) -> String {
    let quote = |arg: &str| format!("'{}'", arg.replace('\'', r"'\''"));
    let mut line = vec![
        quote(env!("CARGO_BIN_EXE_harel-jobs-cli")),
        "--database-url".to_owned(),
        quote(url),
        "--schema".to_owned(),
        quote(q.schema.name()),
    ];
    line.extend(args.iter().map(|arg| quote(arg)));
    let mut command = std::process::Command::new("script");
    command
        .args(["-q", "-e", "-c", &line.join(" "), "/dev/null"])
        .env_remove("DATABASE_URL")
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null());
    if no_color {
        command.env("NO_COLOR", "1");
    }
    let output = command.output().expect("script runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{stdout}");
    stdout
}

/// On a terminal, state words are coloured (dead in red, waiting plain), unless NO_COLOR
/// is set; the table fits the terminal.
#[tokio::test]
async fn a_terminal_gets_coloured_states_unless_no_color() {
    let q = SuiteSchema::new().await;
    long_rows(&q).await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;

    let coloured = on_terminal(&role.url, &q, &["jobs", "list"], false);
    assert!(coloured.contains("\x1b[31mdead\x1b[0m"), "{coloured:?}");
    assert!(!coloured.contains("\x1b[31mwaiting"), "{coloured:?}");
    // a terminal of no size (script's without one): 80 columns
    assert!(widest(&coloured.replace("\x1b[31m", "").replace("\x1b[0m", "")) <= 81);
    let shown = on_terminal(&role.url, &q, &["--json", "jobs", "list"], false);
    assert!(!shown.contains('\x1b'), "JSON is never coloured: {shown:?}");

    let plain = on_terminal(&role.url, &q, &["jobs", "list"], true);
    assert!(plain.contains("dead"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");
}

/// Issue 42, item 11 (RELIABILITY.md, "Hardening III", row 11): `jobs list --queue` (and
/// `--kind`) behind 120,000 jobs of another queue lists the matches (it read on, a bounded
/// number of bounded reads), where it used to end with "none in this stretch".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_list_reaches_a_queue_behind_another_queues_jobs() {
    let q = SuiteSchema::new().await;
    let role = TestRole::with_grants(&q, OPERATOR_GRANTS).await;
    let op = || cli(&role.url, &q);
    let (first, _) = q.bury_matches_behind_others(120_000).await;

    let text = ok(&mut op(), &["jobs", "list", "--queue", "retired"]).stdout;
    assert!(!text.contains("none in this stretch"), "{text}");
    assert_eq!(
        text.lines().count(),
        52,
        "50 jobs, the header and more: {text}"
    );
    assert!(
        text.lines().nth(1).unwrap().starts_with(&first.to_string()),
        "{text}"
    );
    assert!(
        text.ends_with(&format!("more: --after {}\n", first.get() + 49)),
        "{text}"
    );

    for filter in [
        ["--queue", "retired", "--state", "waiting"],
        ["--kind", "old_report", "--state", "queued"],
    ] {
        let mut args = vec!["--json", "jobs", "list", "--limit", "1000"];
        args.extend(filter);
        let listed = ok(&mut op(), &args).json();
        let jobs = listed["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 1000, "{filter:?}");
        assert_eq!(jobs[0]["id"].as_i64(), Some(first.get()), "{filter:?}");
        assert!(jobs.iter().all(|j| j["queue"] == "retired"), "{filter:?}");
        assert_eq!(listed["stopped_at"], Value::Null, "{filter:?}");
    }
}
