//! What the command line prints: the JSON shape of each thing it shows (stable, documented
//! in the guide's "Command line", docs/guide/monitoring.md) and the tables and key-value
//! lists people read.

use std::io::IsTerminal;
use std::sync::OnceLock;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::client::DeadLetter;
use crate::client::GroupInfo;
use crate::client::Stats;
use crate::client::{
    AttemptInfo, CancelOutcome, JobInfo, JobParents, JobState, JobSteps, ScheduleInfo,
};
use crate::client::{FairKeyInfo, LevelDepth, QueueInfo};
use crate::client::{TaskInfo, WorkflowInfo};
use crate::vocabulary::Count;
use crate::workflow::WorkflowTask;

/// The widest a table cell gets before it is cut (with `…`).
const MAX_CELL_CHARS: usize = 60;

/// A time as the command line writes it: RFC 3339 in UTC, to the second.
pub(crate) fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn opt_time(at: Option<DateTime<Utc>>) -> String {
    at.map_or_else(|| "-".to_owned(), time)
}

/// A payload as JSON: the value itself, or its text if it does not parse.
fn payload(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// A text on one line: control characters (newlines, tabs, escapes a terminal would obey)
/// become spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A cell: on one line, cut to [`MAX_CELL_CHARS`].
fn cell(text: &str) -> String {
    cut(&one_line(text), MAX_CELL_CHARS)
}

/// `text` cut to `max` characters, its last one `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// What stdout takes: how wide a line may be, and whether it shows colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Terminal {
    /// The widest a table's line gets (`None`: as wide as its cells, each cut to
    /// [`MAX_CELL_CHARS`]).
    pub(crate) width: Option<usize>,
    /// Whether state words are coloured (ANSI escapes).
    pub(crate) colour: bool,
}

/// The terminal the process's output goes to, once [`Terminal::install`]ed.
static TERMINAL: OnceLock<Terminal> = OnceLock::new();

impl Terminal {
    /// A terminal whose width cannot be read, nor is `COLUMNS` set.
    const DEFAULT_WIDTH: usize = 80;
    /// The narrowest a table is fitted to (a tiny or bogus width would cut every cell to
    /// nothing).
    const MIN_WIDTH: usize = 40;

    /// Plain text of any width: a pipe, a file, a test.
    pub(crate) const PLAIN: Self = Self {
        width: None,
        colour: false,
    };

    /// What stdout is: on a terminal, its width (else `COLUMNS`, else 80) and colour unless
    /// `NO_COLOR` is set (to anything but nothing); otherwise (a pipe, a file) no colour
    /// ever, and the width `COLUMNS` says if set, no limit if not.
    pub(crate) fn detect() -> Self {
        let is_terminal = std::io::stdout().is_terminal();
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|columns| columns.trim().parse::<usize>().ok())
            .filter(|columns| *columns > 0);
        let width = if is_terminal {
            let size = terminal_size::terminal_size().map(|(width, _)| usize::from(width.0));
            Some(
                size.filter(|width| *width > 0)
                    .or(columns)
                    .unwrap_or(Self::DEFAULT_WIDTH),
            )
        } else {
            columns
        };
        let no_colour = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
        Self {
            width: width.map(|width| width.max(Self::MIN_WIDTH)),
            colour: is_terminal && !no_colour,
        }
    }

    /// Makes `self` what every table and field list is rendered for, from now on (the first
    /// call wins).
    pub(crate) fn install(self) {
        let _ = TERMINAL.set(self);
    }

    /// The installed terminal, or [`PLAIN`](Self::PLAIN).
    fn current() -> Self {
        TERMINAL.get().copied().unwrap_or(Self::PLAIN)
    }

    /// `word` (the first word of `text`) in its state's colour: red for what failed,
    /// green for what completed, yellow for what runs or waits on a retry, cyan for what
    /// waits on a time or a parent; `text` as it is for anything else, or without colour.
    fn state(self, text: &str) -> String {
        if !self.colour {
            return text.to_owned();
        }
        let word = text.split(' ').next().unwrap_or_default();
        let code = match word {
            "dead" | "failed" => "31",
            "completed" => "32",
            "running" | "leased" | "retrying" => "33",
            "cancelled" => "35",
            "scheduled" | "pending" | "parked" => "36",
            _ => return text.to_owned(),
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }
}

/// A table: a header row and rows, columns padded to their widest cell.
pub(crate) struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(headers: Vec<&'static str>) -> Self {
        Self {
            headers,
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells.iter().map(|c| cell(c)).collect());
    }

    /// The table as text for the installed [`Terminal`], ending with a newline; `empty`
    /// alone when it has no rows.
    pub(crate) fn render(&self, empty: &str) -> String {
        self.render_for(empty, Terminal::current())
    }

    /// The table as text for `terminal`: columns padded to their widest cell, the widest
    /// columns narrowed (their cells cut with `…`) until a line fits its width, state
    /// words coloured if it shows colour.
    pub(crate) fn render_for(&self, empty: &str, terminal: Terminal) -> String {
        if self.rows.is_empty() {
            return format!("{empty}\n");
        }
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        if let Some(max) = terminal.width {
            // a column narrows to its header (at least 4 characters: "ab…"), widest first
            let floors: Vec<usize> = self
                .headers
                .iter()
                .zip(&widths)
                .map(|(header, width)| header.chars().count().max(4).min(*width))
                .collect();
            let gaps = 2 * widths.len().saturating_sub(1);
            let mut total: usize = widths.iter().sum::<usize>() + gaps;
            while total > max {
                let widest = (0..widths.len())
                    .filter(|&i| widths[i] > floors[i])
                    .max_by_key(|&i| (widths[i], std::cmp::Reverse(i)));
                let Some(widest) = widest else { break };
                widths[widest] -= 1;
                total -= 1;
            }
        }
        let coloured: Vec<bool> = self
            .headers
            .iter()
            .map(|header| matches!(*header, "STATE" | "STATUS"))
            .collect();
        let line = |cells: &mut dyn Iterator<Item = &str>, header: bool| {
            let padded: Vec<String> = cells
                .zip(&widths)
                .zip(&coloured)
                .map(|((cell, width), coloured)| {
                    let text = cut(cell, *width);
                    let pad = " ".repeat(width.saturating_sub(text.chars().count()));
                    if *coloured && !header {
                        format!("{}{pad}", terminal.state(&text))
                    } else {
                        format!("{text}{pad}")
                    }
                })
                .collect();
            format!("{}\n", padded.join("  ").trim_end())
        };
        let mut out = line(&mut self.headers.iter().copied(), true);
        for row in &self.rows {
            out.push_str(&line(&mut row.iter().map(String::as_str), false));
        }
        out
    }
}

/// `key: value` lines, keys aligned; values kept whole (on one line); a `state` or
/// `status` coloured as in tables.
pub(crate) fn fields(pairs: &[(&str, String)]) -> String {
    let terminal = Terminal::current();
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    pairs
        .iter()
        .map(|(key, value)| {
            let value = one_line(value);
            let value = if matches!(*key, "state" | "status") {
                terminal.state(&value)
            } else {
                value
            };
            format!("{:<width$} {value}\n", format!("{key}:"))
        })
        .collect()
}

/// A figure of [`Stats`] in JSON: `{"value": 12, "kind": "exact"}` (or `"estimated"`,
/// `"at_least"`).
#[derive(Serialize)]
pub(crate) struct CountView {
    value: i64,
    kind: &'static str,
}

impl From<Count> for CountView {
    fn from(count: Count) -> Self {
        let kind = match count {
            Count::Exact(_) => "exact",
            Count::Estimated(_) => "estimated",
            Count::AtLeast(_) => "at_least",
        };
        Self {
            value: count.value(),
            kind,
        }
    }
}

/// `stats`.
#[derive(Serialize)]
pub(crate) struct StatsView {
    jobs: CountView,
    groups: CountView,
    claimable_groups: CountView,
    dead_letters: CountView,
    idle: bool,
}

impl StatsView {
    pub(crate) fn new(stats: &Stats) -> Self {
        Self {
            jobs: stats.jobs.into(),
            groups: stats.groups.into(),
            claimable_groups: stats.claimable_groups.into(),
            dead_letters: stats.dead_letters.into(),
            idle: stats.is_idle(),
        }
    }

    pub(crate) fn human(stats: &Stats) -> String {
        fields(&[
            ("jobs", stats.jobs.to_string()),
            ("groups", stats.groups.to_string()),
            ("claimable groups", stats.claimable_groups.to_string()),
            ("dead letters", stats.dead_letters.to_string()),
            ("idle", stats.is_idle().to_string()),
        ])
    }
}

/// A job in JSON.
#[derive(Serialize)]
pub(crate) struct JobView {
    id: i64,
    state: &'static str,
    /// The queue it is in (`default` unless enqueued into another).
    queue: String,
    kind: String,
    group: String,
    /// The fairness key (`""`: none).
    fair_key: String,
    priority: u8,
    attempts: u32,
    enqueued_at: DateTime<Utc>,
    /// The time that goes with the state: scheduled for, lease until, retry after,
    /// completed, dead or cancelled at (`null` while waiting).
    state_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    cancel_requested: bool,
    cancel_reason: Option<String>,
    last_error: Option<String>,
    payload: Value,
}

/// The state's name, its time, when the attempt started, whether a cancel was asked, and
/// the cancel's reason.
type StateParts = (
    &'static str,
    Option<DateTime<Utc>>,
    Option<DateTime<Utc>>,
    bool,
    Option<String>,
);

fn state_parts(state: &JobState, cancel_reason: Option<String>) -> StateParts {
    match state {
        JobState::Pending => ("pending", None, None, false, None),
        JobState::Waiting => ("waiting", None, None, false, None),
        JobState::Scheduled { at } => ("scheduled", Some(*at), None, false, None),
        JobState::Running {
            since,
            lease_until,
            cancel_requested,
        } => (
            "running",
            Some(*lease_until),
            *since,
            *cancel_requested,
            cancel_reason.filter(|_| *cancel_requested),
        ),
        JobState::Retrying { after } => ("retrying", Some(*after), None, false, None),
        JobState::Completed { started_at, at } => {
            ("completed", Some(*at), *started_at, false, None)
        }
        JobState::Dead { at } => ("dead", Some(*at), None, false, None),
        JobState::Cancelled { at, reason } => ("cancelled", Some(*at), None, false, reason.clone()),
    }
}

impl JobView {
    pub(crate) fn new(job: &JobInfo) -> Self {
        let (state, state_at, started_at, cancel_requested, cancel_reason) =
            state_parts(&job.state, job.cancel_reason.clone());
        Self {
            id: job.id.get(),
            state,
            queue: job.queue.clone(),
            kind: job.kind.clone(),
            group: job.group.clone(),
            fair_key: job.fair_key.clone(),
            priority: job.priority.get(),
            attempts: job.attempts,
            enqueued_at: job.enqueued_at,
            state_at,
            started_at,
            cancel_requested,
            cancel_reason,
            last_error: job.last_error.clone(),
            payload: payload(&job.payload),
        }
    }

    /// A table of jobs.
    pub(crate) fn table(jobs: &[JobInfo]) -> Table {
        let mut table = Table::new(vec![
            "ID", "STATE", "QUEUE", "KIND", "GROUP", "PRI", "ATTEMPTS", "ENQUEUED", "STATE AT",
            "ERROR",
        ]);
        for job in jobs {
            let view = Self::new(job);
            let state = if view.cancel_requested {
                format!("{} (cancel asked)", view.state)
            } else {
                view.state.to_owned()
            };
            table.row(vec![
                view.id.to_string(),
                state,
                view.queue,
                view.kind,
                view.group,
                view.priority.to_string(),
                view.attempts.to_string(),
                time(view.enqueued_at),
                opt_time(view.state_at),
                view.last_error.unwrap_or_default(),
            ]);
        }
        table
    }

    /// One job, field by field (`workflow`: the task it is, as [`TaskOf::text`] says
    /// it), then its payload pretty-printed.
    pub(crate) fn human(
        job: &JobInfo,
        parents: &JobParents,
        steps: &JobSteps,
        workflow: Option<String>,
    ) -> String {
        let view = Self::new(job);
        let mut pairs = vec![
            ("id", view.id.to_string()),
            ("state", view.state.to_owned()),
            ("queue", view.queue.clone()),
            ("kind", view.kind.clone()),
            ("group", view.group.clone()),
            ("fair key", view.fair_key.clone()),
            ("priority", view.priority.to_string()),
            ("attempts", view.attempts.to_string()),
            ("enqueued at", time(view.enqueued_at)),
        ];
        let at_label = match view.state {
            "scheduled" => Some("not before"),
            "running" => Some("lease until"),
            "retrying" => Some("next attempt"),
            "completed" => Some("completed at"),
            "dead" => Some("failed at"),
            "cancelled" => Some("cancelled at"),
            _ => None,
        };
        if let (Some(label), Some(at)) = (at_label, view.state_at) {
            pairs.push((label, time(at)));
        }
        if let Some(started) = view.started_at {
            pairs.push(("started at", time(started)));
        }
        if view.cancel_requested {
            pairs.push(("cancel", "requested".to_owned()));
        }
        if let Some(reason) = &view.cancel_reason {
            pairs.push(("cancel reason", reason.clone()));
        }
        if let Some(error) = &view.last_error {
            pairs.push(("last error", error.clone()));
        }
        if let Some(workflow) = workflow {
            pairs.push(("workflow", workflow));
        }
        if !parents.parents.is_empty() {
            let mut ids: Vec<String> = parents.parents.iter().map(|p| p.to_string()).collect();
            if parents.more {
                ids.push("…".to_owned());
            }
            pairs.push(("waits for", ids.join(", ")));
        }
        if !steps.steps.is_empty() {
            let mut names: Vec<String> = steps
                .steps
                .iter()
                .map(|s| format!("{} ({} B, {})", s.name, s.bytes, time(s.recorded_at)))
                .collect();
            if steps.more {
                names.push("…".to_owned());
            }
            pairs.push(("steps recorded", names.join("; ")));
        }
        let mut out = fields(&pairs);
        out.push_str("payload:\n");
        out.push_str(&pretty(&view.payload));
        out
    }
}

/// A JSON value pretty-printed, indented by two spaces, ending with a newline.
fn pretty(value: &Value) -> String {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string());
    text.lines().map(|line| format!("  {line}\n")).collect()
}

/// A group in JSON.
#[derive(Serialize)]
pub(crate) struct GroupView {
    id: String,
    queue: String,
    status: &'static str,
    priority: u8,
    available_at: DateTime<Utc>,
    head: Option<i64>,
    head_attempts: u32,
    jobs: u32,
    jobs_capped: bool,
    jobs_estimate: Option<u64>,
    cancel_requested: bool,
}

impl GroupView {
    pub(crate) fn new(group: &GroupInfo) -> Self {
        Self {
            id: group.id.clone(),
            queue: group.queue.clone(),
            status: group.status.as_str(),
            priority: group.priority.get(),
            available_at: group.available_at,
            head: group.head.map(|id| id.get()),
            head_attempts: group.head_attempts,
            jobs: group.jobs,
            jobs_capped: group.jobs_capped,
            jobs_estimate: group.jobs_estimate,
            cancel_requested: group.cancel_requested,
        }
    }

    fn jobs_text(group: &GroupInfo) -> String {
        match (group.jobs_capped, group.jobs_estimate) {
            (true, Some(estimate)) => format!(">={} (~{estimate})", group.jobs),
            (true, None) => format!(">={}", group.jobs),
            (false, _) => group.jobs.to_string(),
        }
    }

    /// A table of groups.
    pub(crate) fn table(groups: &[GroupInfo]) -> Table {
        let mut table = Table::new(vec![
            "GROUP",
            "STATUS",
            "PRI",
            "JOBS",
            "HEAD",
            "ATTEMPTS",
            "SINCE/UNTIL",
        ]);
        for group in groups {
            table.row(vec![
                group.id.clone(),
                group.status.as_str().to_owned(),
                group.priority.get().to_string(),
                Self::jobs_text(group),
                group
                    .head
                    .map_or_else(|| "-".to_owned(), |id| id.to_string()),
                group.head_attempts.to_string(),
                time(group.available_at),
            ]);
        }
        table
    }

    /// One group, field by field.
    pub(crate) fn human(group: &GroupInfo) -> String {
        let at_label = match group.status.as_str() {
            "leased" => "lease until",
            "parked" => "claimable at",
            _ => "waiting since",
        };
        let mut pairs = vec![
            ("group", group.id.clone()),
            ("queue", group.queue.clone()),
            ("status", group.status.as_str().to_owned()),
            ("priority", group.priority.get().to_string()),
            ("jobs", Self::jobs_text(group)),
            (
                "head",
                group
                    .head
                    .map_or_else(|| "-".to_owned(), |id| id.to_string()),
            ),
            ("head attempts", group.head_attempts.to_string()),
            (at_label, time(group.available_at)),
        ];
        if group.cancel_requested {
            pairs.push(("cancel", "requested".to_owned()));
        }
        fields(&pairs)
    }
}

/// A dead letter in JSON.
#[derive(Serialize)]
pub(crate) struct DeadView {
    id: i64,
    kind: String,
    group: String,
    priority: u8,
    attempts: u32,
    enqueued_at: DateTime<Utc>,
    failed_at: DateTime<Utc>,
    last_error: String,
    payload: Value,
}

impl DeadView {
    pub(crate) fn new(letter: &DeadLetter) -> Self {
        Self {
            id: letter.id.get(),
            kind: letter.kind.clone(),
            group: letter.group.clone(),
            priority: letter.priority.get(),
            attempts: letter.attempts,
            enqueued_at: letter.enqueued_at,
            failed_at: letter.failed_at,
            last_error: letter.last_error.clone(),
            payload: payload(&letter.payload),
        }
    }

    /// A table of dead letters.
    pub(crate) fn table(letters: &[DeadLetter]) -> Table {
        let mut table = Table::new(vec![
            "ID",
            "KIND",
            "GROUP",
            "ATTEMPTS",
            "FAILED AT",
            "ERROR",
        ]);
        for letter in letters {
            table.row(vec![
                letter.id.to_string(),
                letter.kind.clone(),
                letter.group.clone(),
                letter.attempts.to_string(),
                time(letter.failed_at),
                letter.last_error.clone(),
            ]);
        }
        table
    }

    /// One dead letter, field by field (`workflow`: the task it is, as [`TaskOf::text`]
    /// says it), then its payload pretty-printed.
    pub(crate) fn human(letter: &DeadLetter, workflow: Option<String>) -> String {
        let view = Self::new(letter);
        let mut pairs = vec![
            ("id", view.id.to_string()),
            ("kind", view.kind.clone()),
            ("group", view.group.clone()),
            ("priority", view.priority.to_string()),
            ("attempts", view.attempts.to_string()),
            ("enqueued at", time(view.enqueued_at)),
            ("failed at", time(view.failed_at)),
            ("last error", view.last_error.clone()),
        ];
        if let Some(workflow) = workflow {
            pairs.push(("workflow", workflow));
        }
        let mut out = fields(&pairs);
        out.push_str("payload:\n");
        out.push_str(&pretty(&view.payload));
        out
    }
}

/// A schedule in JSON.
#[derive(Serialize)]
pub(crate) struct ScheduleView {
    name: String,
    spec: String,
    last_tick: Option<DateTime<Utc>>,
    next_tick: Option<DateTime<Utc>>,
    updated_at: DateTime<Utc>,
    paused_at: Option<DateTime<Utc>>,
    trigger_requested_at: Option<DateTime<Utc>>,
}

impl ScheduleView {
    pub(crate) fn new(schedule: &ScheduleInfo) -> Self {
        Self {
            name: schedule.name.clone(),
            spec: schedule.spec.clone(),
            last_tick: schedule.last_tick,
            next_tick: schedule.next_tick,
            updated_at: schedule.updated_at,
            paused_at: schedule.paused_at,
            trigger_requested_at: schedule.trigger_requested_at,
        }
    }

    /// A table of schedules.
    pub(crate) fn table(schedules: &[ScheduleInfo]) -> Table {
        let mut table = Table::new(vec![
            "NAME",
            "SPEC",
            "STATE",
            "LAST TICK",
            "NEXT TICK",
            "UPDATED",
        ]);
        for schedule in schedules {
            // paused wins: a pause drops a waiting trigger
            let state = match (schedule.paused_at, schedule.trigger_requested_at) {
                (Some(at), _) => format!("paused since {}", time(at)),
                (None, Some(_)) => "triggered".to_owned(),
                (None, None) => "active".to_owned(),
            };
            table.row(vec![
                schedule.name.clone(),
                schedule.spec.clone(),
                state,
                opt_time(schedule.last_tick),
                opt_time(schedule.next_tick),
                time(schedule.updated_at),
            ]);
        }
        table
    }
}

/// A workflow in JSON.
#[derive(Serialize)]
pub(crate) struct WorkflowView {
    id: i64,
    name: String,
    state: &'static str,
    created_at: DateTime<Utc>,
    tasks: u32,
    ended: u32,
    /// Dead or cancelled (`dead` + `cancelled`).
    failed: u32,
    completed: u32,
    dead: u32,
    cancelled: u32,
    /// When an operator cancelled it (`null`: nobody did, or a retry took it back).
    cancelled_at: Option<DateTime<Utc>>,
}

impl WorkflowView {
    pub(crate) fn new(workflow: &WorkflowInfo) -> Self {
        Self {
            id: workflow.id.get(),
            name: workflow.name.clone(),
            state: workflow.state.as_str(),
            created_at: workflow.created_at,
            tasks: workflow.tasks,
            ended: workflow.ended,
            failed: workflow.failed,
            completed: workflow.completed,
            dead: workflow.dead,
            cancelled: workflow.cancelled,
            cancelled_at: workflow.cancelled_at,
        }
    }

    /// Its ended tasks by outcome: "2 completed, 1 dead, 3 cancelled".
    pub(crate) fn outcomes(workflow: &WorkflowInfo) -> String {
        format!(
            "{} completed, {} dead, {} cancelled",
            workflow.completed, workflow.dead, workflow.cancelled
        )
    }

    /// A table of workflows.
    pub(crate) fn table(workflows: &[WorkflowInfo]) -> Table {
        let mut table = Table::new(vec![
            "ID",
            "NAME",
            "STATE",
            "TASKS",
            "ENDED",
            "COMPLETED",
            "DEAD",
            "CANCELLED",
            "CREATED",
        ]);
        for workflow in workflows {
            table.row(vec![
                workflow.id.to_string(),
                workflow.name.clone(),
                workflow.state.as_str().to_owned(),
                workflow.tasks.to_string(),
                workflow.ended.to_string(),
                workflow.completed.to_string(),
                workflow.dead.to_string(),
                workflow.cancelled.to_string(),
                time(workflow.created_at),
            ]);
        }
        table
    }
}

/// The workflow task a job is, as `jobs show` and `dead show` say it.
pub(crate) enum TaskOf {
    /// It is this task.
    Task(WorkflowTask),
    /// It is no workflow's task (or no longer its task's job).
    None,
    /// The role may not read it (no `EXECUTE` on `harel_job_workflow`: granted before it
    /// existed).
    NotGranted,
}

impl TaskOf {
    /// In JSON: `{"id", "name", "task"}`, or `null`.
    pub(crate) fn json(&self) -> Value {
        match self {
            Self::Task(task) => serde_json::json!({
                "id": task.workflow.get(),
                "name": task.workflow_name,
                "task": task.task,
            }),
            Self::None | Self::NotGranted => Value::Null,
        }
    }

    /// For people: "workflow 5 (export), task shard-0", or why it is not known.
    pub(crate) fn text(&self) -> Option<String> {
        match self {
            Self::Task(task) => Some(format!(
                "workflow {} ({}), task {}",
                task.workflow, task.workflow_name, task.task
            )),
            Self::None => None,
            Self::NotGranted => Some(
                "not shown: this role may not read it (grant it EXECUTE on harel_job_workflow, \
                 see the guide's Database roles)"
                    .to_owned(),
            ),
        }
    }
}

/// A workflow's task in JSON.
#[derive(Serialize)]
pub(crate) struct TaskView {
    ordinal: u32,
    name: String,
    job: i64,
    state: String,
    kind: Option<String>,
    attempts: Option<u32>,
    last_error: Option<String>,
    waits_for: Vec<String>,
    parent_outcomes: Option<ParentOutcomesView>,
    ended_at: Option<DateTime<Utc>>,
}

/// A task's parents' outcomes in JSON.
#[derive(Serialize)]
pub(crate) struct ParentOutcomesView {
    completed: u32,
    dead: u32,
    cancelled: u32,
}

impl TaskView {
    pub(crate) fn new(task: &TaskInfo) -> Self {
        Self {
            ordinal: task.ordinal,
            name: task.name.clone(),
            job: task.job.get(),
            state: task.state.clone(),
            kind: task.kind.clone(),
            attempts: task.attempts,
            last_error: task.last_error.clone(),
            waits_for: task.parents.clone(),
            parent_outcomes: task.parent_outcomes.map(|o| ParentOutcomesView {
                completed: o.completed,
                dead: o.dead,
                cancelled: o.cancelled,
            }),
            ended_at: task.ended_at,
        }
    }

    /// A table of tasks: the graph as each task's parents.
    pub(crate) fn table(tasks: &[TaskInfo]) -> Table {
        let mut table = Table::new(vec!["#", "TASK", "JOB", "STATE", "WAITS FOR", "ENDED"]);
        for task in tasks {
            table.row(vec![
                task.ordinal.to_string(),
                task.name.clone(),
                task.job.to_string(),
                task.state.clone(),
                if task.parents.is_empty() {
                    "-".to_owned()
                } else {
                    task.parents.join(", ")
                },
                opt_time(task.ended_at),
            ]);
        }
        table
    }
}

/// A fairness key in JSON.
#[derive(Serialize)]
pub(crate) struct FairKeyView {
    key: String,
    weight: u32,
    ready: CountView,
    running: CountView,
}

impl FairKeyView {
    pub(crate) fn new(key: &FairKeyInfo) -> Self {
        Self {
            key: key.key.clone(),
            weight: key.weight,
            ready: key.ready.into(),
            running: key.running.into(),
        }
    }

    /// A table of fairness keys (`""` shown as `(none)`).
    pub(crate) fn table(keys: &[FairKeyInfo]) -> Table {
        let mut table = Table::new(vec!["KEY", "WEIGHT", "READY", "RUNNING"]);
        for key in keys {
            let name = if key.key.is_empty() {
                "(none)".to_owned()
            } else {
                key.key.clone()
            };
            table.row(vec![
                name,
                key.weight.to_string(),
                key.ready.to_string(),
                key.running.to_string(),
            ]);
        }
        table
    }
}

/// A queue's rate limit in JSON.
#[derive(Serialize)]
pub(crate) struct RateView {
    starts: u32,
    per_ms: u64,
}

/// A named queue in JSON.
#[derive(Serialize)]
pub(crate) struct QueueView {
    name: String,
    paused: bool,
    paused_at: Option<DateTime<Utc>>,
    concurrency_limit: Option<u32>,
    rate_limit: Option<RateView>,
    ready: CountView,
    oldest_ready_at: Option<DateTime<Utc>>,
    running: CountView,
}

impl QueueView {
    pub(crate) fn new(queue: &QueueInfo) -> Self {
        Self {
            name: queue.name.clone(),
            paused: queue.is_paused(),
            paused_at: queue.paused_at,
            concurrency_limit: queue.limits.concurrency_limit(),
            rate_limit: queue.limits.rate_limit().map(|rate| RateView {
                starts: rate.starts,
                per_ms: u64::try_from(rate.per.as_millis()).unwrap_or(u64::MAX),
            }),
            ready: queue.ready.into(),
            oldest_ready_at: queue.oldest_ready_at,
            running: queue.running.into(),
        }
    }

    /// `paused since …` or `running`.
    pub(crate) fn status(queue: &QueueInfo) -> String {
        queue.paused_at.map_or_else(
            || "running".to_owned(),
            |at| format!("paused since {}", time(at)),
        )
    }

    /// The limits as a person reads them: `5 at once, 10 per 1s`, or `-`.
    pub(crate) fn limits(queue: &QueueInfo) -> String {
        let mut parts = Vec::new();
        if let Some(running) = queue.limits.concurrency_limit() {
            parts.push(format!("{running} at once"));
        }
        if let Some(rate) = queue.limits.rate_limit() {
            parts.push(format!("{} per {:?}", rate.starts, rate.per));
        }
        if parts.is_empty() {
            "-".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// A table of queues.
    pub(crate) fn table(queues: &[QueueInfo]) -> Table {
        let mut table = Table::new(vec![
            "QUEUE",
            "STATUS",
            "LIMITS",
            "READY",
            "OLDEST READY",
            "RUNNING",
        ]);
        for queue in queues {
            table.row(vec![
                queue.name.clone(),
                Self::status(queue),
                Self::limits(queue),
                queue.ready.to_string(),
                queue.oldest_ready_at.map_or_else(|| "-".to_owned(), time),
                queue.running.to_string(),
            ]);
        }
        table
    }
}

/// A cancel's outcome: its name in JSON, and a sentence.
pub(crate) fn cancel_outcome(outcome: &CancelOutcome) -> (&'static str, String) {
    match outcome {
        CancelOutcome::Cancelled => ("cancelled", "cancelled: it will never run".into()),
        CancelOutcome::Requested => (
            "requested",
            "running: its handler is told at its next heartbeat, and it ends as cancelled".into(),
        ),
        CancelOutcome::AlreadyCompleted => ("already_completed", "too late: it completed".into()),
        CancelOutcome::AlreadyDead => ("already_dead", "too late: it is a dead letter".into()),
        CancelOutcome::AlreadyCancelled => ("already_cancelled", "it was cancelled before".into()),
        CancelOutcome::NotFound => ("not_found", "no such job".into()),
        CancelOutcome::Group {
            cancelled,
            running_requested,
        } => (
            "group",
            format!(
                "{cancelled} job(s) cancelled{}",
                if *running_requested {
                    "; its running job is told to stop and ends as cancelled"
                } else {
                    ""
                }
            ),
        ),
    }
}

/// An attempt in JSON ([`Client::job_attempts`](crate::Client::job_attempts)).
#[derive(Serialize)]
pub(crate) struct AttemptView {
    number: u32,
    outcome: &'static str,
    started_at: Option<DateTime<Utc>>,
    ended_at: Option<DateTime<Utc>>,
    /// The worker pool's id, host and pid (host and pid while the pool is listed).
    worker: Option<Value>,
    error: Option<String>,
}

impl AttemptView {
    pub(crate) fn list(attempts: &[AttemptInfo]) -> Vec<Self> {
        attempts
            .iter()
            .map(|a| Self {
                number: a.number,
                outcome: a.outcome.as_str(),
                started_at: a.started_at,
                ended_at: a.ended_at,
                worker: a.worker.as_ref().map(
                    |w| serde_json::json!({ "id": w.id.to_string(), "host": w.host, "pid": w.pid }),
                ),
                error: a.error.clone(),
            })
            .collect()
    }

    /// The attempts, newest first, one line each (and the first line of its error), as a
    /// section after a job's fields; empty when there are none.
    pub(crate) fn human(attempts: &[AttemptInfo]) -> String {
        if attempts.is_empty() {
            return String::new();
        }
        let mut out = String::from("attempts (newest first):\n");
        for a in attempts {
            let mut line = format!("  #{} {}", a.number, a.outcome);
            if let Some(start) = a.started_at {
                line.push_str(&format!(", started {}", time(start)));
            }
            if let Some(end) = a.ended_at {
                line.push_str(&format!(", ended {}", time(end)));
            }
            if let Some(w) = &a.worker {
                match (&w.host, w.pid) {
                    (Some(host), Some(pid)) => line.push_str(&format!(", on {host} (pid {pid})")),
                    _ => line.push_str(&format!(", by worker {}", w.id)),
                }
            }
            if let Some(error) = a.error.as_deref().and_then(|e| e.lines().next()) {
                line.push_str(&format!(": {error}"));
            }
            out.push_str(&one_line(&line));
            out.push('\n');
        }
        if let Some(oldest) = attempts.last()
            && oldest.number > 1
        {
            out.push_str(&format!(
                "  ({} earlier attempts not kept)\n",
                oldest.number - 1
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_and_cut_long_cells_on_one_line() {
        let mut table = Table::new(vec!["ID", "ERROR"]);
        table.row(vec!["1".into(), "short".into()]);
        table.row(vec![
            "12345".into(),
            format!("line one\nline two{}", "x".repeat(100)),
        ]);
        let text = table.render("nothing");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], "ID     ERROR");
        assert_eq!(lines[1], "1      short");
        assert!(lines[2].starts_with("12345  line one line two"), "{text}");
        assert!(lines[2].ends_with('…'), "{text}");
        assert_eq!(lines[2].chars().count(), 7 + MAX_CELL_CHARS);
        assert_eq!(Table::new(vec!["ID"]).render("no jobs"), "no jobs\n");
    }

    #[test]
    fn tables_fit_the_width_widest_columns_first() {
        let mut table = Table::new(vec!["ID", "STATE", "KIND", "ERROR"]);
        table.row(vec![
            "1".into(),
            "dead".into(),
            "k".repeat(30),
            "e".repeat(60),
        ]);
        let fitted = |width| {
            table.render_for(
                "nothing",
                Terminal {
                    width: Some(width),
                    colour: false,
                },
            )
        };
        let text = fitted(60);
        assert!(
            text.lines().all(|line| line.chars().count() <= 60),
            "{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        // the error narrowed first, to the kind's width, then both in turn
        let expected = format!("1   dead   {}…  {}…", "k".repeat(22), "e".repeat(23));
        assert_eq!(lines[1], expected, "{text}");
        // too narrow for the headers: each column keeps its header (or 4 characters)
        let text = fitted(10);
        assert_eq!(
            text.lines().next(),
            Some("ID  STATE  KIND  ERROR"),
            "{text}"
        );
        // wide enough: as without a width
        assert_eq!(fitted(500), table.render_for("nothing", Terminal::PLAIN));
    }

    #[test]
    fn state_words_are_coloured_only_for_a_colour_terminal() {
        let mut table = Table::new(vec!["ID", "STATE", "KIND"]);
        for (id, state) in [("1", "dead"), ("2", "completed"), ("3", "waiting")] {
            table.row(vec![id.into(), state.into(), "dead".into()]);
        }
        let colour = Terminal {
            width: None,
            colour: true,
        };
        let text = table.render_for("nothing", colour);
        let lines: Vec<&str> = text.lines().collect();
        // padded outside the escapes, so that columns stay aligned; other columns plain
        assert_eq!(lines[0], "ID  STATE      KIND");
        assert_eq!(lines[1], "1   \x1b[31mdead\x1b[0m       dead");
        assert_eq!(lines[2], "2   \x1b[32mcompleted\x1b[0m  dead");
        assert_eq!(lines[3], "3   waiting    dead");
        let plain = table.render_for("nothing", Terminal::PLAIN);
        assert!(!plain.contains('\x1b'), "{plain:?}");
    }

    #[test]
    fn fields_align_and_keep_terminal_escapes_out() {
        let text = fields(&[("id", "7".into()), ("last error", "a\u{1b}[2Jb".into())]);
        assert_eq!(text, "id:         7\nlast error: a [2Jb\n");
    }

    #[test]
    fn payloads_are_json_values_or_their_text() {
        assert_eq!(payload("{\"a\":1}"), serde_json::json!({"a": 1}));
        assert_eq!(payload("not json"), Value::String("not json".into()));
    }
}

/// `queues depth`: one queue's depth at one priority level.
#[derive(Serialize)]
pub(crate) struct DepthView {
    queue: String,
    priority: u8,
    ready: CountView,
    running: CountView,
    retrying: CountView,
    scheduled: CountView,
    oldest_ready_at: Option<DateTime<Utc>>,
}

impl DepthView {
    pub(crate) fn new(level: &LevelDepth) -> Self {
        Self {
            queue: level.queue.clone(),
            priority: level.priority.get(),
            ready: level.ready.into(),
            running: level.running.into(),
            retrying: level.retrying.into(),
            scheduled: level.scheduled.into(),
            oldest_ready_at: level.oldest_ready_at,
        }
    }

    /// A table of the levels.
    pub(crate) fn table(depth: &[LevelDepth]) -> Table {
        let mut table = Table::new(vec![
            "QUEUE",
            "PRI",
            "READY",
            "OLDEST READY",
            "RUNNING",
            "RETRYING",
            "SCHEDULED",
        ]);
        for level in depth {
            table.row(vec![
                level.queue.clone(),
                level.priority.get().to_string(),
                level.ready.to_string(),
                level.oldest_ready_at.map_or_else(|| "-".to_owned(), time),
                level.running.to_string(),
                level.retrying.to_string(),
                level.scheduled.to_string(),
            ]);
        }
        table
    }
}
