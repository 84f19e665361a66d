//! Each subcommand: a call or a few to the public [`Client`] and [`DeadLetters`](crate::DeadLetters) API, then
//! its output. No SQL of its own.

use std::io::{self, Write};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use serde::Serialize;
use serde_json::json;

use super::args::{
    Cli, Command, DeadCommand, DeadSelection, GroupsCommand, JobsCommand, JobsList, QueuesCommand,
    SchedulesCommand, WorkflowsCommand,
};
use super::confirm::confirm;
use super::error::CliError;
use super::output::{
    AttemptView, DeadView, DepthView, FairKeyView, GroupView, JobView, QueueView, ScheduleView,
    StatsView, TaskOf, TaskView, WorkflowView, cancel_outcome, time,
};
use crate::client::{CancelOutcome, Client, JobQuery, RunNowOutcome, ScheduleQuery, StateFilter};
use crate::client::{DeadLetter, DeadLetterQuery};
use crate::client::{GroupQuery, GroupRank, KeyLimits, WorkflowQuery};
use crate::connect::{ConnectConfig, connect_with};
use crate::error::ClientError;
use crate::migrate::{SCHEMA_VERSION, check_schema};
use crate::schema::Schema;
use crate::vocabulary::{JobId, MAX_LIST_READS};
use crate::workflow::WorkflowId;

/// Where results go: JSON (one object) or text for people, on stdout.
pub(crate) struct Printer {
    json: bool,
}

impl Printer {
    pub(crate) fn new(json: bool) -> Self {
        Self { json }
    }

    /// Prints `value` as one line of JSON, or `human()`.
    fn emit<T: Serialize>(
        &self,
        value: &T,
        human: impl FnOnce() -> String,
    ) -> Result<(), CliError> {
        let text = if self.json {
            let mut text = serde_json::to_string(value).map_err(io::Error::other)?;
            text.push('\n');
            text
        } else {
            human()
        };
        let mut stdout = io::stdout().lock();
        stdout.write_all(text.as_bytes())?;
        stdout.flush()?;
        Ok(())
    }
}

/// Connects (unless the command needs nothing of the database), checks the schema, runs
/// the command.
pub(crate) async fn run(cli: Cli, out: &Printer) -> Result<(), CliError> {
    let schema = Schema::new(&cli.schema())?;
    // empty credentials and malformed host names: refused before anything is reached
    #[cfg(feature = "dashboard")]
    if let Command::Dashboard(args) = &cli.command {
        super::serve::check(args)?;
    }
    let url = cli.database_url().ok_or(CliError::NoDatabase)?;
    // one command: two connections; a dashboard serves several pages at once
    let connections = if is_dashboard(&cli.command) { 8 } else { 2 };
    let config = ConnectConfig::default()
        .max_connections(connections)
        .wait(cli.connect_timeout);
    let pool = connect_with(&url, &config).await?;
    let client = Client::with_schema(pool, schema);
    let result = match dispatch(cli.command, &client, out).await {
        Err(error) => Err(explain_refusal(&client, error).await),
        ok => ok,
    };
    client.pool().close().await;
    result
}

/// `error` with the privileges the role lacks, when PostgreSQL refused for lack of one and
/// the catalog says which; `error` as it is otherwise.
async fn explain_refusal(client: &Client, error: CliError) -> CliError {
    let Some(refusal) = error.permission_denied() else {
        return error;
    };
    let names = words(&refusal.to_string());
    match crate::privileges::missing(client.pool(), client.schema(), &names, &["SELECT"]).await {
        Ok(missing) if !missing.is_empty() => CliError::PermissionDenied {
            missing,
            source: Box::new(error),
        },
        // nothing found (or the catalog unreadable): the refusal and the general hint
        _ => error,
    }
}

/// The words of a message that may be an object's name.
fn words(message: &str) -> Vec<String> {
    let mut words: Vec<String> = message
        .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect();
    words.sort();
    words.dedup();
    words
}

#[cfg(feature = "dashboard")]
fn is_dashboard(command: &Command) -> bool {
    matches!(command, Command::Dashboard(_))
}

#[cfg(not(feature = "dashboard"))]
fn is_dashboard(_: &Command) -> bool {
    false
}

async fn dispatch(command: Command, client: &Client, out: &Printer) -> Result<(), CliError> {
    if !matches!(command, Command::Migrate) {
        check_schema(client.pool(), client.schema()).await?;
    }
    match command {
        Command::Migrate => migrate(client, out).await,
        Command::Stats => stats(client, out).await,
        Command::Jobs(JobsCommand::List(list)) => jobs_list(client, out, list).await,
        Command::Jobs(JobsCommand::Show { id }) => jobs_show(client, out, id).await,
        Command::Jobs(JobsCommand::RunNow { id }) => jobs_run_now(client, out, id).await,
        Command::Jobs(JobsCommand::Cancel {
            id,
            group,
            reason,
            yes,
        }) => match (id, group) {
            (Some(id), _) => jobs_cancel(client, out, id, reason).await,
            (None, Some(group)) => group_cancel(client, out, group, reason, yes).await,
            // clap requires one of them
            (None, None) => Ok(()),
        },
        Command::Groups(GroupsCommand::List { after, limit }) => {
            groups_list(client, out, after, limit).await
        }
        Command::Groups(GroupsCommand::Top { by, limit }) => {
            groups_top(client, out, by.into(), limit).await
        }
        Command::Groups(GroupsCommand::Show { id, limit }) => {
            groups_show(client, out, id, limit).await
        }
        Command::Dead(DeadCommand::List {
            kind,
            before,
            limit,
        }) => dead_list(client, out, kind, before, limit).await,
        Command::Dead(DeadCommand::Show { id }) => dead_show(client, out, id).await,
        Command::Dead(DeadCommand::Retry(selection)) => {
            dead_bulk(client, out, selection, DeadAction::Retry).await
        }
        Command::Dead(DeadCommand::Delete(selection)) => {
            dead_bulk(client, out, selection, DeadAction::Delete).await
        }
        Command::Dead(DeadCommand::Purge { older_than, yes }) => {
            let older_than = TimeDelta::from_std(older_than)
                .map_err(|_| CliError::InvalidArgument("--older-than is too long"))?;
            dead_purge(client, out, older_than, yes).await
        }
        Command::Queues(QueuesCommand::List) => queues_list(client, out).await,
        Command::Queues(QueuesCommand::Depth) => queues_depth(client, out).await,
        Command::Queues(QueuesCommand::Pause { name, create }) => {
            if create {
                client.create_queue(&name).await?;
            }
            let info = client.pause(&name).await?;
            out.emit(&QueueView::new(&info), || {
                format!("queue {name}: {}\n", QueueView::status(&info))
            })
        }
        Command::Queues(QueuesCommand::Resume { name }) => {
            let info = client.resume(&name).await?;
            out.emit(&QueueView::new(&info), || {
                format!("queue {name}: {}\n", QueueView::status(&info))
            })
        }
        Command::Queues(QueuesCommand::Keys { name, after, limit }) => {
            fair_keys(client, out, &name, after, limit).await
        }
        Command::Queues(QueuesCommand::Weight {
            name,
            key,
            weight,
            create,
        }) => {
            if create {
                client.create_queue(&name).await?;
            }
            client.set_fair_weight(&name, &key, weight).await?;
            out.emit(
                &json!({ "queue": name, "key": key, "weight": weight }),
                || format!("queue {name}: key {key:?} has weight {weight}\n"),
            )
        }
        Command::Queues(QueuesCommand::KeyLimit {
            name,
            running,
            rate,
            per,
            create,
            ..
        }) => {
            if create {
                client.create_queue(&name).await?;
            }
            let mut limits = KeyLimits::none();
            if let Some(n) = running {
                limits = limits.concurrency(n);
            }
            if let (Some(starts), Some(per)) = (rate, per) {
                limits = limits.rate(starts, per);
            }
            client.set_key_limits(&name, limits).await?;
            out.emit(&key_limits_json(&name, &limits), || {
                format!("queue {name}: {}\n", key_limits_text(&limits))
            })
        }
        Command::Schedules(SchedulesCommand::List { after, limit }) => {
            schedules(client, out, after, limit).await
        }
        Command::Schedules(SchedulesCommand::Delete { name, yes }) => {
            schedules_delete(client, out, name, yes).await
        }
        Command::Schedules(SchedulesCommand::Pause { name }) => {
            let changed = client.pause_schedule(&name).await?;
            out.emit(
                &json!({ "name": name, "paused": true, "changed": changed }),
                || {
                    if changed {
                        format!("paused the schedule {}\n", shell_word(&name))
                    } else {
                        format!("the schedule {} was already paused\n", shell_word(&name))
                    }
                },
            )
        }
        Command::Schedules(SchedulesCommand::Resume { name }) => {
            let changed = client.resume_schedule(&name).await?;
            out.emit(
                &json!({ "name": name, "paused": false, "changed": changed }),
                || {
                    if changed {
                        format!(
                            "resumed the schedule {}: its next tick is the next one to come\n",
                            shell_word(&name)
                        )
                    } else {
                        format!("the schedule {} was not paused\n", shell_word(&name))
                    }
                },
            )
        }
        Command::Schedules(SchedulesCommand::Trigger { name }) => {
            let requested = client.trigger_schedule(&name).await?;
            out.emit(&json!({ "name": name, "requested": requested }), || {
                if requested {
                    format!(
                        "asked the schedule {} to fire now: a worker that declares it enqueues the job\n",
                        shell_word(&name)
                    )
                } else {
                    format!(
                        "the schedule {} already has a request to fire waiting: one job\n",
                        shell_word(&name)
                    )
                }
            })
        }
        Command::Workflows(WorkflowsCommand::List {
            name,
            before,
            limit,
        }) => workflows_list(client, out, name, before, limit).await,
        Command::Workflows(WorkflowsCommand::Show { id, after, limit }) => {
            workflows_show(client, out, WorkflowId::new(id), after, limit).await
        }
        Command::Workflows(WorkflowsCommand::Cancel { id, reason, yes }) => {
            workflows_cancel(client, out, WorkflowId::new(id), reason, yes).await
        }
        Command::Workflows(WorkflowsCommand::Retry { id, yes }) => {
            workflows_retry(client, out, WorkflowId::new(id), yes).await
        }
        #[cfg(feature = "dashboard")]
        Command::Dashboard(args) => super::serve::serve(client, args).await,
    }
}

async fn migrate(client: &Client, out: &Printer) -> Result<(), CliError> {
    client.migrate().await?;
    let name = client.schema().name();
    out.emit(
        &json!({ "schema": name, "version": SCHEMA_VERSION }),
        || format!("schema {name} is migrated (version {SCHEMA_VERSION})\n"),
    )
}

async fn stats(client: &Client, out: &Printer) -> Result<(), CliError> {
    let stats = client.stats().await?;
    out.emit(&StatsView::new(&stats), || StatsView::human(&stats))
}

/// "more: `flag value`" under a page that has a next one.
fn more(shown: usize, flag: &str, cursor: Option<String>) -> String {
    match cursor {
        Some(cursor) if shown == 0 => {
            format!("(none in this stretch; more may follow: {flag} {cursor})\n")
        }
        Some(cursor) => format!("more: {flag} {cursor}\n"),
        None => String::new(),
    }
}

async fn jobs_list(client: &Client, out: &Printer, list: JobsList) -> Result<(), CliError> {
    let mut query = JobQuery::new().limit(list.limit);
    if let Some(state) = list.state {
        query = query.state(StateFilter::from(state));
    }
    if let Some(kind) = list.kind {
        query = query.kind(kind);
    }
    if let Some(group) = list.group {
        query = query.group(group);
    }
    if let Some(queue) = list.queue {
        query = query.queue(queue);
    }
    if let Some(after) = list.after {
        query = query.after(after);
    }
    // filters that keep few jobs (one queue's among many) read on, a bounded number of
    // bounded reads, and say where they stopped looking if they still did
    let page = client.jobs(&query.read_on(MAX_LIST_READS)).await?;
    let jobs: Vec<JobView> = page.jobs.iter().map(JobView::new).collect();
    out.emit(
        &json!({
            "jobs": jobs,
            "next": page.next.map(JobId::get),
            "stopped_at": page.stopped_at.map(JobId::get),
        }),
        || match page.stopped_at {
            Some(at) => {
                let mut text =
                    JobView::table(&page.jobs).render(&format!("no matching job up to id {at}"));
                text.push_str(&stopped_looking(at));
                text
            }
            None => {
                let mut text = JobView::table(&page.jobs).render("no jobs");
                text.push_str(&more(
                    page.jobs.len(),
                    "--after",
                    page.next.map(|id| id.to_string()),
                ));
                text
            }
        },
    )
}

/// Under a page whose reads stopped looking at job `at`: that they did, and how to go on.
fn stopped_looking(at: JobId) -> String {
    format!(
        "stopped looking at id {at} after {MAX_LIST_READS} reads: no other job up to it \
         matches; jobs after it were not looked at: --after {at}\n"
    )
}

/// The workflow task the job `id` is; a role granted before `harel_job_workflow` existed
/// is told it may not read it, and the rest is shown.
async fn task_of(client: &Client, id: JobId) -> Result<TaskOf, CliError> {
    match client.job_workflow(id).await {
        Ok(Some(task)) => Ok(TaskOf::Task(task)),
        Ok(None) => Ok(TaskOf::None),
        Err(ClientError::Database(error)) if error.is_permission_denied() => Ok(TaskOf::NotGranted),
        Err(error) => Err(error.into()),
    }
}

async fn jobs_show(client: &Client, out: &Printer, id: JobId) -> Result<(), CliError> {
    let job = client.job(id).await?.ok_or(CliError::NoJob(id))?;
    let parents = client.job_parents(id).await?;
    let steps = client.job_steps(id).await?;
    let attempts = client.job_attempts(id).await?;
    let task = task_of(client, id).await?;
    let mut json = serde_json::to_value(JobView::new(&job)).map_err(io::Error::other)?;
    json["attempt_history"] = json!(AttemptView::list(&attempts));
    json["workflow"] = task.json();
    json["waits_for"] = json!(parents.parents.iter().map(|p| p.get()).collect::<Vec<_>>());
    json["steps"] = json!(
        steps
            .steps
            .iter()
            .map(|s| json!({ "name": s.name, "bytes": s.bytes, "recorded_at": s.recorded_at }))
            .collect::<Vec<_>>()
    );
    out.emit(&json, || {
        let mut text = JobView::human(&job, &parents, &steps, task.text());
        text.push_str(&AttemptView::human(&attempts));
        text
    })
}

async fn jobs_cancel(
    client: &Client,
    out: &Printer,
    id: JobId,
    reason: Option<String>,
) -> Result<(), CliError> {
    let mut cancel = client.cancel(id);
    if let Some(reason) = reason {
        cancel = cancel.reason(reason);
    }
    let outcome = cancel.await?;
    if outcome == CancelOutcome::NotFound {
        return Err(CliError::NoJob(id));
    }
    let (name, sentence) = cancel_outcome(&outcome);
    out.emit(&json!({ "id": id.get(), "outcome": name }), || {
        format!("job {id}: {sentence}\n")
    })
}

async fn jobs_run_now(client: &Client, out: &Printer, id: JobId) -> Result<(), CliError> {
    let (name, sentence) = match client.run_now(id).await? {
        RunNowOutcome::NotFound => return Err(CliError::NoJob(id)),
        RunNowOutcome::Due => ("due", "due now: it starts at the next claim"),
        RunNowOutcome::Behind => (
            "behind",
            "its time dropped: it starts when the jobs before it in its group are done",
        ),
        RunNowOutcome::Running => ("running", "running already: nothing changed"),
        RunNowOutcome::Finished => ("finished", "finished already: nothing changed"),
        RunNowOutcome::NotWaiting => (
            "not_waiting",
            "it waits for no time of its own (due already, pending, or delayed by its \
             queue): nothing changed",
        ),
    };
    out.emit(&json!({ "id": id.get(), "outcome": name }), || {
        format!("job {id}: {sentence}\n")
    })
}

async fn group_cancel(
    client: &Client,
    out: &Printer,
    group: String,
    reason: Option<String>,
    yes: bool,
) -> Result<(), CliError> {
    let info = client
        .group(&group)
        .await?
        .ok_or_else(|| CliError::NoGroup(group.clone()))?;
    if info.jobs > 1 {
        let count = if info.jobs_capped {
            format!("{} or more", info.jobs)
        } else {
            info.jobs.to_string()
        };
        confirm(&format!("Cancel the {count} jobs of group {group:?}?"), yes)?;
    }
    let mut cancel = client.cancel_group(group.clone());
    if let Some(reason) = reason {
        cancel = cancel.reason(reason);
    }
    let outcome = cancel.await?;
    let (cancelled, running_requested) = match outcome {
        CancelOutcome::Group {
            cancelled,
            running_requested,
        } => (cancelled, running_requested),
        _ => (0, false),
    };
    let (_, sentence) = cancel_outcome(&outcome);
    out.emit(
        &json!({
            "group": group,
            "cancelled": cancelled,
            "running_requested": running_requested,
        }),
        || format!("group {group:?}: {sentence}\n"),
    )
}

async fn groups_list(
    client: &Client,
    out: &Printer,
    after: Option<String>,
    limit: u32,
) -> Result<(), CliError> {
    let mut query = GroupQuery::new().limit(limit);
    if let Some(after) = after {
        query = query.after(after);
    }
    let page = client.groups(&query).await?;
    let groups: Vec<GroupView> = page.groups.iter().map(GroupView::new).collect();
    out.emit(&json!({ "groups": groups, "next": page.next }), || {
        let mut text = GroupView::table(&page.groups).render("no groups hold jobs");
        text.push_str(&more(
            page.groups.len(),
            "--after",
            page.next.as_deref().map(shell_word),
        ));
        text
    })
}

async fn groups_top(
    client: &Client,
    out: &Printer,
    rank: GroupRank,
    limit: u32,
) -> Result<(), CliError> {
    let top = client.top_groups(rank, limit).await?;
    let groups: Vec<GroupView> = top.groups.iter().map(GroupView::new).collect();
    out.emit(
        &json!({ "groups": groups, "statistics_at": top.statistics_at }),
        || {
            let empty = match rank {
                GroupRank::LongestWaiting => "no group is waiting for a worker",
                _ => "no group stands out in the statistics (or they were not gathered yet)",
            };
            let mut text = GroupView::table(&top.groups).render(empty);
            if let Some(at) = top.statistics_at {
                text.push_str(&format!("ranked by the statistics of {}\n", time(at)));
            }
            text
        },
    )
}

/// `text` as one shell word: as it is when it is plain, else single-quoted.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@%+=,".contains(c));
    if plain {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

async fn groups_show(
    client: &Client,
    out: &Printer,
    id: String,
    limit: u32,
) -> Result<(), CliError> {
    let group = client
        .group(&id)
        .await?
        .ok_or_else(|| CliError::NoGroup(id.clone()))?;
    let page = client
        .jobs(
            &JobQuery::new()
                .group(id.clone())
                .state(StateFilter::Queued)
                .limit(limit),
        )
        .await?;
    let jobs: Vec<JobView> = page.jobs.iter().map(JobView::new).collect();
    out.emit(
        &json!({
            "group": GroupView::new(&group),
            "jobs": jobs,
            "next": page.next.map(JobId::get),
        }),
        || {
            let mut text = GroupView::human(&group);
            text.push('\n');
            text.push_str(&JobView::table(&page.jobs).render("no queued jobs"));
            if let Some(next) = page.next {
                text.push_str(&format!(
                    "more: harel-jobs jobs list --state queued --group {} --after {next}\n",
                    shell_word(&id)
                ));
            }
            text
        },
    )
}

async fn dead_list(
    client: &Client,
    out: &Printer,
    kind: Option<String>,
    before: Option<JobId>,
    limit: u32,
) -> Result<(), CliError> {
    let query = DeadLetterQuery {
        kind,
        before,
        limit,
    };
    let letters = client.dead_letters().list(&query).await?;
    let next = if letters.len() == limit as usize {
        letters.last().map(|letter| letter.id)
    } else {
        None
    };
    let views: Vec<DeadView> = letters.iter().map(DeadView::new).collect();
    out.emit(
        &json!({ "dead_letters": views, "next": next.map(JobId::get) }),
        || {
            let mut text = DeadView::table(&letters).render("no dead letters");
            text.push_str(&more(
                letters.len(),
                "--before",
                next.map(|id| id.to_string()),
            ));
            text
        },
    )
}

async fn dead_show(client: &Client, out: &Printer, id: JobId) -> Result<(), CliError> {
    let letter = client
        .dead_letters()
        .get(id)
        .await?
        .ok_or(CliError::NoDeadLetter(id))?;
    let attempts = client.job_attempts(id).await?;
    let task = task_of(client, id).await?;
    let mut json = serde_json::to_value(DeadView::new(&letter)).map_err(io::Error::other)?;
    json["attempt_history"] = json!(AttemptView::list(&attempts));
    json["workflow"] = task.json();
    out.emit(&json, || {
        let mut text = DeadView::human(&letter, task.text());
        text.push_str(&AttemptView::human(&attempts));
        text
    })
}

/// The dead letters a selection names: its ids, or (`--all`) every dead letter of its kind
/// that failed within `--since`, read a page of 1,000 at a time, newest first.
async fn select(client: &Client, selection: &DeadSelection) -> Result<Vec<JobId>, CliError> {
    if !selection.all {
        return Ok(selection.ids.clone());
    }
    let since = match selection.since {
        Some(since) => Some(
            Utc::now()
                - TimeDelta::from_std(since)
                    .map_err(|_| CliError::InvalidArgument("--since is too long"))?,
        ),
        None => None,
    };
    let dead = client.dead_letters();
    let mut query = DeadLetterQuery {
        kind: selection.kind.clone(),
        before: None,
        limit: 1_000,
    };
    let mut ids = Vec::new();
    loop {
        let page: Vec<DeadLetter> = dead.list(&query).await?;
        let Some(last) = page.last().map(|letter| letter.id) else {
            break;
        };
        ids.extend(
            page.iter()
                .filter(|letter| since.is_none_or(|since| letter.failed_at >= since))
                .map(|letter| letter.id),
        );
        if page.len() < 1_000 {
            break;
        }
        query.before = Some(last);
    }
    Ok(ids)
}

/// "3 dead letters", "1 dead letter".
fn letters(count: usize) -> String {
    if count == 1 {
        "1 dead letter".to_owned()
    } else {
        format!("{count} dead letters")
    }
}

/// What a bulk dead-letter command does to the letters it selected.
#[derive(Clone, Copy)]
enum DeadAction {
    Retry,
    Delete,
}

/// How many letters one statement of a bulk command takes: each chunk is all or none,
/// and none holds a transaction open for long.
const DEAD_CHUNK: usize = 1_000;

impl DeadAction {
    fn question(self, count: usize) -> String {
        match self {
            Self::Retry => format!("Put {} back in the queue?", letters(count)),
            Self::Delete => format!("Delete {} for good?", letters(count)),
        }
    }

    /// Applies the action to `ids` (one statement): the ids found, each with its new id
    /// after a retry.
    async fn apply(
        self,
        client: &Client,
        ids: &[JobId],
    ) -> Result<Vec<(JobId, Option<JobId>)>, CliError> {
        let dead = client.dead_letters();
        Ok(match self {
            Self::Retry => dead
                .retry_many(ids)
                .await?
                .into_iter()
                .map(|(id, new_id)| (id, Some(new_id)))
                .collect(),
            Self::Delete => dead
                .delete_many(ids)
                .await?
                .into_iter()
                .map(|id| (id, None))
                .collect(),
        })
    }

    fn report(self, done: &[(JobId, Option<JobId>)], not_found: &[i64]) -> serde_json::Value {
        match self {
            Self::Retry => {
                let pairs: Vec<_> = done
                    .iter()
                    .map(|(id, new_id)| json!({ "id": id.get(), "new_id": new_id.map(JobId::get) }))
                    .collect();
                json!({ "retried": pairs, "not_found": not_found })
            }
            Self::Delete => {
                let ids: Vec<i64> = done.iter().map(|(id, _)| id.get()).collect();
                json!({ "deleted": ids, "not_found": not_found })
            }
        }
    }

    fn human(self, done: &[(JobId, Option<JobId>)]) -> String {
        match self {
            Self::Retry => {
                let mut text = format!("retried {}\n", letters(done.len()));
                for (id, new_id) in done {
                    if let Some(new_id) = new_id {
                        text.push_str(&format!("  {id} -> job {new_id}\n"));
                    }
                }
                text
            }
            Self::Delete => format!("deleted {}\n", letters(done.len())),
        }
    }
}

/// `dead retry` and `dead delete`: select, confirm when more than one, apply a chunk per
/// statement, report; ids with no dead letter make the command fail (after the others
/// were done).
async fn dead_bulk(
    client: &Client,
    out: &Printer,
    selection: DeadSelection,
    action: DeadAction,
) -> Result<(), CliError> {
    let mut ids = select(client, &selection).await?;
    // oldest first across chunks too: a group's letters go back in their order
    ids.sort_unstable();
    ids.dedup();
    if ids.len() > 1 {
        confirm(&action.question(ids.len()), selection.yes)?;
    }
    let mut done = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(DEAD_CHUNK) {
        done.extend(action.apply(client, chunk).await?);
    }
    let found: std::collections::HashSet<JobId> = done.iter().map(|(id, _)| *id).collect();
    let missing: Vec<JobId> = ids.into_iter().filter(|id| !found.contains(id)).collect();
    let not_found: Vec<i64> = missing.iter().map(|id| id.get()).collect();
    out.emit(&action.report(&done, &not_found), || action.human(&done))?;
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CliError::NoDeadLetters(missing))
    }
}

async fn dead_purge(
    client: &Client,
    out: &Printer,
    older_than: TimeDelta,
    yes: bool,
) -> Result<(), CliError> {
    let before = Utc::now() - older_than;
    confirm(
        &format!(
            "Delete every dead letter that failed before {}?",
            time(before)
        ),
        yes,
    )?;
    let purged = client.dead_letters().purge(before).await?;
    out.emit(&json!({ "purged": purged, "before": before }), || {
        format!(
            "deleted {} that failed before {}\n",
            letters(usize::try_from(purged).unwrap_or(usize::MAX)),
            time(before)
        )
    })
}

async fn queues_list(client: &Client, out: &Printer) -> Result<(), CliError> {
    let queues = client.queues().await?;
    let views: Vec<QueueView> = queues.iter().map(QueueView::new).collect();
    out.emit(&json!({ "queues": views }), || {
        QueueView::table(&queues).render("no queues")
    })
}

async fn queues_depth(client: &Client, out: &Printer) -> Result<(), CliError> {
    let depth = client.depth().await?;
    let views: Vec<DepthView> = depth.iter().map(DepthView::new).collect();
    out.emit(&json!({ "depth": views }), || {
        DepthView::table(&depth).render("nothing is queued")
    })
}

/// A queue's limits per key in JSON.
fn key_limits_json(queue: &str, limits: &KeyLimits) -> serde_json::Value {
    json!({
        "queue": queue,
        "key_concurrency_limit": limits.concurrency_limit(),
        "key_rate_limit": limits.rate_limit().map(|rate| json!({
            "starts": rate.starts,
            "per_ms": rate.per.as_millis() as u64,
        })),
    })
}

/// A queue's limits per key in words.
fn key_limits_text(limits: &KeyLimits) -> String {
    let running = limits
        .concurrency_limit()
        .map(|n| format!("at most {n} running per key"));
    let rate = limits.rate_limit().map(|rate| {
        format!(
            "at most {} starts per key per {}",
            rate.starts,
            humantime_ms(rate.per)
        )
    });
    match (running, rate) {
        (Some(running), Some(rate)) => format!("{running}, {rate}"),
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => "no limit per key".to_owned(),
    }
}

/// A period as the command line takes it (500ms, 1s, 2m, 1h).
fn humantime_ms(period: Duration) -> String {
    let ms = period.as_millis();
    match ms {
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

async fn fair_keys(
    client: &Client,
    out: &Printer,
    queue: &str,
    after: Option<String>,
    limit: u32,
) -> Result<(), CliError> {
    let page = client.fair_keys(queue, after.as_deref(), limit).await?;
    let views: Vec<FairKeyView> = page.keys.iter().map(FairKeyView::new).collect();
    let mut json = key_limits_json(queue, &page.limits);
    json["keys"] = json!(views);
    json["next"] = json!(page.next);
    out.emit(&json, || {
        let mut text = if page.limits == KeyLimits::none() {
            String::new()
        } else {
            format!("{}\n", key_limits_text(&page.limits))
        };
        text.push_str(&FairKeyView::table(&page.keys).render("no fairness keys"));
        text.push_str(&more(
            page.keys.len(),
            "--after",
            page.next.as_deref().map(shell_word),
        ));
        text
    })
}

async fn schedules(
    client: &Client,
    out: &Printer,
    after: Option<String>,
    limit: u32,
) -> Result<(), CliError> {
    let mut query = ScheduleQuery::new().limit(limit);
    if let Some(after) = after {
        query = query.after(after);
    }
    let page = client.schedules(&query).await?;
    let views: Vec<ScheduleView> = page.schedules.iter().map(ScheduleView::new).collect();
    out.emit(
        &json!({ "schedules": views, "next": page.next, "total": page.total }),
        || {
            let mut text = ScheduleView::table(&page.schedules).render("no schedules");
            text.push_str(&more(
                page.schedules.len(),
                "--after",
                page.next.as_deref().map(shell_word),
            ));
            text
        },
    )
}

async fn schedules_delete(
    client: &Client,
    out: &Printer,
    name: String,
    yes: bool,
) -> Result<(), CliError> {
    confirm(
        &format!(
            "Forget the schedule {}? A worker that still declares it records it again, as new.",
            shell_word(&name)
        ),
        yes,
    )?;
    let deleted = client.delete_schedule(&name).await?;
    out.emit(&json!({ "deleted": deleted, "name": name }), || {
        if deleted {
            format!("deleted the schedule {}\n", shell_word(&name))
        } else {
            format!("no schedule is named {}\n", shell_word(&name))
        }
    })
}

async fn workflows_list(
    client: &Client,
    out: &Printer,
    name: Option<String>,
    before: Option<i64>,
    limit: u32,
) -> Result<(), CliError> {
    let mut query = WorkflowQuery::new().limit(limit);
    if let Some(name) = name {
        query = query.name(name);
    }
    if let Some(before) = before {
        query = query.before(WorkflowId::new(before));
    }
    let page = client.workflows(&query).await?;
    let views: Vec<WorkflowView> = page.workflows.iter().map(WorkflowView::new).collect();
    let next = page.next.map(WorkflowId::get);
    out.emit(&json!({ "workflows": views, "next": next }), || {
        let mut text = WorkflowView::table(&page.workflows).render("no workflows");
        text.push_str(&more(
            page.workflows.len(),
            "--before",
            next.map(|n| n.to_string()),
        ));
        text
    })
}

async fn workflows_show(
    client: &Client,
    out: &Printer,
    id: WorkflowId,
    after: u32,
    limit: u32,
) -> Result<(), CliError> {
    let Some(workflow) = client.workflow_info(id).await? else {
        return Err(CliError::NoWorkflow(id.get()));
    };
    let page = client.workflow_tasks(id, after, limit).await?;
    let tasks: Vec<TaskView> = page.tasks.iter().map(TaskView::new).collect();
    out.emit(
        &json!({ "workflow": WorkflowView::new(&workflow), "tasks": tasks, "next": page.next }),
        || {
            let cancelled = workflow
                .cancelled_at
                .map(|at| format!(", cancelled {}", time(at)))
                .unwrap_or_default();
            let mut text = format!(
                "workflow {id} ({}): {}, {} of {} tasks ended ({}), created {}{cancelled}\n",
                workflow.name,
                workflow.state.as_str(),
                workflow.ended,
                workflow.tasks,
                WorkflowView::outcomes(&workflow),
                time(workflow.created_at)
            );
            text.push_str(&TaskView::table(&page.tasks).render("no tasks"));
            text.push_str(&more(
                page.tasks.len(),
                "--after",
                page.next.map(|n| n.to_string()),
            ));
            text
        },
    )
}

async fn workflows_cancel(
    client: &Client,
    out: &Printer,
    id: WorkflowId,
    reason: Option<String>,
    yes: bool,
) -> Result<(), CliError> {
    let Some(workflow) = client.workflow_info(id).await? else {
        return Err(CliError::NoWorkflow(id.get()));
    };
    confirm(
        &format!(
            "Cancel the {} tasks of workflow {id} ({}) that have not ended?",
            workflow.tasks - workflow.ended,
            workflow.name
        ),
        yes,
    )?;
    let mut cancel = client.cancel_workflow(id);
    if let Some(reason) = reason {
        cancel = cancel.reason(reason);
    }
    let done = cancel.await?;
    out.emit(
        &json!({ "workflow": id.get(), "cancelled": done.cancelled,
                 "running_requested": done.running_requested }),
        || {
            format!(
                "workflow {id}: {} tasks cancelled, {} running asked to stop\n",
                done.cancelled, done.running_requested
            )
        },
    )
}

async fn workflows_retry(
    client: &Client,
    out: &Printer,
    id: WorkflowId,
    yes: bool,
) -> Result<(), CliError> {
    let Some(workflow) = client.workflow_info(id).await? else {
        return Err(CliError::NoWorkflow(id.get()));
    };
    confirm(
        &format!(
            "Enqueue again the {} failed tasks of workflow {id} ({})?",
            workflow.failed, workflow.name
        ),
        yes,
    )?;
    let retried = client.retry_workflow(id).await?;
    out.emit(&json!({ "workflow": id.get(), "retried": retried }), || {
        format!("workflow {id}: {retried} tasks enqueued again\n")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_printed_as_one_shell_word() {
        assert_eq!(shell_word("customer-42"), "customer-42");
        assert_eq!(
            shell_word("own:0000000000000000042"),
            "own:0000000000000000042"
        );
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word("$(rm -rf /)"), "'$(rm -rf /)'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn a_page_says_where_the_next_one_starts() {
        assert_eq!(more(3, "--after", None), "");
        assert_eq!(more(3, "--after", Some("9".into())), "more: --after 9\n");
        // a list whose reads stopped says so, where, and how to go on (issue 42, item 11)
        assert_eq!(
            stopped_looking(JobId::new(200_000)),
            "stopped looking at id 200000 after 100 reads: no other job up to it matches; \
             jobs after it were not looked at: --after 200000\n"
        );
        assert!(more(0, "--after", Some("9".into())).contains("more may follow: --after 9"));
    }

    #[test]
    fn a_refusal_names_its_object_among_its_words() {
        assert_eq!(
            words("permission denied for function harel_list_jobs (SQLSTATE 42501)"),
            [
                "42501",
                "SQLSTATE",
                "denied",
                "for",
                "function",
                "harel_list_jobs",
                "permission"
            ]
        );
        assert!(
            words("keine Berechtigung für Tabelle dead_letters")
                .contains(&"dead_letters".to_owned())
        );
    }
}
