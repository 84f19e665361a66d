//! The pages (GET): each one or a few bounded calls to the library, rendered as HTML.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::actions::{BULK_BATCH, BULK_BATCHES, CANCEL_ALL_CAP, CancelAllFilter};
use super::html::{
    Shell, action, badge, escape, fields, link, opt_time, page, query_value, short, span, table,
    time,
};
use super::{Ctx, PageError};
use crate::client::LevelDepth;
use crate::client::{
    AttemptInfo, AttemptOutcome, AttemptWorker, JobInfo, JobQuery, JobState, MAX_ATTEMPTS_KEPT,
    ScheduleQuery, StateFilter,
};
use crate::client::{DeadLetter, DeadLetterQuery};
use crate::client::{GroupInfo, GroupQuery, GroupRank};
use crate::error::ClientError;
use crate::vocabulary::JobId;
use crate::vocabulary::{Count, MAX_FAIR_KEY_BYTES, MAX_FAIR_WEIGHT};
use crate::vocabulary::{QUEUE_NAME_RULE, validate_queue_name};

/// Rows a list page shows.
pub(super) const PAGE_SIZE: u32 = 50;

/// Bounded reads one Jobs page makes at most while its filters keep fewer jobs than it
/// shows (each refresh of a live page makes them again).
pub(super) const JOBS_PAGE_READS: u32 = 20;

pub(super) type PageResult = Result<Html<String>, PageError>;

/// What an action reports back on the page it redirects to (`?done=…&n=…`): a code, never
/// free text, so a link cannot make the dashboard say something it did not do.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Done {
    pub(super) done: Option<String>,
    pub(super) n: Option<u64>,
}

impl Done {
    fn notice(&self) -> Option<String> {
        let n = self.n.unwrap_or(0);
        Some(match self.done.as_deref()? {
            "cancelled" => "Cancelled: the job will never run.".to_owned(),
            "requested" => {
                "Cancel requested: the running job is told at its next heartbeat and ends as \
                 cancelled."
                    .to_owned()
            }
            "too_late" => "Too late: the job had already finished.".to_owned(),
            "run_now" => "Due now: it starts at the next claim.".to_owned(),
            "run_now_behind" => {
                "Its time dropped: it starts when the jobs before it in its group are done."
                    .to_owned()
            }
            "run_now_running" => "It is running already: nothing changed.".to_owned(),
            "run_now_not_waiting" => {
                "It waits for no time of its own (due already, pending, or delayed by its \
                 queue): nothing changed."
                    .to_owned()
            }
            "group_cancelled" => format!("Cancelled {n} job(s) of the group."),
            "cancelled_all" => format!(
                "Cancelled {n} job(s): the queued ones will never run; running ones are told \
                 at their next heartbeat and end as cancelled."
            ),
            "cancelled_all_more" => format!(
                "Cancelled {n} job(s), at most 10,000 a click; more match: do it again for the \
                 rest."
            ),
            "retried" => format!("Put {n} dead letter(s) back in the queue."),
            "deleted" => format!("Deleted {n} dead letter(s)."),
            "retried_more" => format!(
                "Put {n} dead letter(s) back in the queue, 1,000 a transaction; more match: \
                 do it again for the rest."
            ),
            "deleted_more" => format!(
                "Deleted {n} dead letter(s), 1,000 a transaction; more match: do it again for \
                 the rest."
            ),
            "paused" => "Paused: no job of the queue starts until it is resumed.".to_owned(),
            "resumed" => "Resumed: workers start the queue's jobs again.".to_owned(),
            "weight_set" => {
                "Weight set: it applies to the key's groups that become ready from now on."
                    .to_owned()
            }
            "key_limit_set" => "Limit per key set: it applies from the next claim.".to_owned(),
            "workflow_cancelled" => format!(
                "Cancelled {n} task(s) of the workflow; running ones end as cancelled when \
                 their handlers return."
            ),
            "workflow_retried" => format!("Enqueued {n} failed task(s) again."),
            "schedule_paused" => {
                "Paused: no worker enqueues the schedule's ticks until it is resumed.".to_owned()
            }
            "schedule_resumed" => {
                "Resumed: its next tick is the next one to come (the paused ones are not caught \
                 up)."
                    .to_owned()
            }
            "schedule_triggered" => {
                "Triggered: a worker that declares the schedule enqueues one job at its next \
                 pass."
                    .to_owned()
            }
            "schedule_unchanged" => "Nothing to do: it was so already.".to_owned(),
            _ => return None,
        })
    }
}

impl Ctx {
    pub(super) fn shell<'a>(&'a self, title: &'a str, section: &'a str, done: &Done) -> Shell<'a> {
        Shell {
            title,
            section,
            schema: self.client.schema().name(),
            read_only: self.read_only,
            notice: done.notice(),
        }
    }

    pub(super) fn render(&self, shell: &Shell<'_>, body: &str) -> Html<String> {
        Html(page(shell, &self.base, body))
    }

    /// A path under the dashboard.
    pub(super) fn href(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(super) fn job_link(&self, id: JobId) -> String {
        link(&self.href(&format!("/jobs/{id}")), &id.to_string())
    }

    fn group_link(&self, group: &str) -> String {
        format!(
            "<a href=\"{}\">{}</a>",
            escape(&self.href(&format!("/groups/show?id={}", query_value(group)))),
            short(group, 40)
        )
    }
}

/// How often a page left open refreshes its live parts (assets/app.js reads it).
const LIVE_EVERY_MS: u32 = 5_000;

/// `inner` as a part of the page that refreshes itself while the page is open: app.js
/// fetches the page again every [`LIVE_EVERY_MS`] (the same bounded work as loading it) and
/// swaps in the part of the same name, unless the reader is acting (a focused field, a
/// selection, a confirmation open) or the tab is hidden.
fn live(name: &str, inner: &str) -> String {
    format!("<div data-live=\"{}\">{inner}</div>", escape(name))
}

/// The line that says a page updates itself (and, from app.js, when it is paused).
fn live_note() -> String {
    format!(
        "<p class=\"muted live\" id=\"live-status\" data-every=\"{LIVE_EVERY_MS}\">\
         Updates every {} s while this tab is shown; paused while you type, select text or \
         confirm.</p>",
        LIVE_EVERY_MS / 1000
    )
}

/// A job's state, its time, and whether a cancel was asked.
fn state_of(job: &JobInfo) -> (&'static str, Option<chrono::DateTime<chrono::Utc>>) {
    match &job.state {
        JobState::Pending => ("pending", None),
        JobState::Waiting => ("waiting", None),
        JobState::Scheduled { at } => ("scheduled", Some(*at)),
        JobState::Running { lease_until, .. } => ("running", Some(*lease_until)),
        JobState::Retrying { after } => ("retrying", Some(*after)),
        JobState::Completed { at, .. } => ("completed", Some(*at)),
        JobState::Dead { at } => ("dead", Some(*at)),
        JobState::Cancelled { at, .. } => ("cancelled", Some(*at)),
    }
}

fn jobs_table(ctx: &Ctx, jobs: &[JobInfo], empty: &str) -> String {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let (state, at) = state_of(job);
            vec![
                ctx.job_link(job.id),
                badge(state),
                escape(&job.kind),
                format!("<span class=\"queue-name\">{}</span>", escape(&job.queue)),
                ctx.group_link(&job.group),
                job.priority.get().to_string(),
                job.attempts.to_string(),
                time(job.enqueued_at),
                opt_time(at),
                job.last_error
                    .as_deref()
                    .map_or_else(String::new, |e| short(e, 80)),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "State",
            "Kind",
            "Queue",
            "Group",
            "Priority",
            "Attempts",
            "Enqueued",
            "Until / at",
            "Last error",
        ],
        &rows,
        empty,
    )
}

fn count_card(label: &str, count: Count, alert: bool) -> String {
    let hint = match count {
        Count::Exact(_) => "",
        Count::Estimated(_) => "<div class=\"hint\">estimated</div>",
        Count::AtLeast(_) => "<div class=\"hint\">at least</div>",
    };
    let class = if alert && count.value() > 0 {
        "value alert"
    } else {
        "value"
    };
    format!(
        "<div class=\"card\"><div class=\"label\">{}</div><div class=\"{class}\">{}</div>{hint}</div>",
        escape(label),
        escape(&count.to_string()),
    )
}

/// `/`: the queue's figures, its running jobs, its latest dead letters.
pub(crate) async fn overview(State(ctx): State<Ctx>, Query(done): Query<Done>) -> PageResult {
    let stats = ctx.client.stats().await?;
    let running = ctx
        .client
        .jobs(
            &JobQuery::new()
                .state(StateFilter::Running)
                .limit(20)
                .read_on(JOBS_PAGE_READS),
        )
        .await?;
    let dead = ctx
        .client
        .dead_letters()
        .list(&DeadLetterQuery {
            kind: None,
            before: None,
            limit: 10,
        })
        .await?;
    let depth = ctx.client.depth().await?;
    // (a schema holds at most MAX_SCHEDULES: one page has them all)
    let schedules = ctx.client.schedules(&ScheduleQuery::new()).await?;
    let next_tick = schedules.schedules.iter().filter_map(|s| s.next_tick).min();
    let now = Utc::now();
    let stale_schedules = schedules
        .schedules
        .iter()
        .filter(|s| stale(s.next_tick, now))
        .count();
    let throughput = ctx.client.throughput(CHART_MINUTES).await?;
    let by_queue = ctx
        .client
        .throughput_by_queue(CHART_MINUTES, CHART_QUEUES)
        .await?;
    let workers = ctx
        .client
        .workers(std::time::Duration::from_secs(5 * 60), WORKERS_SHOWN)
        .await?;
    let mut body = String::from("<div class=\"cards\">");
    body.push_str(&count_card("Jobs in the queue", stats.jobs, false));
    body.push_str(&count_card("Groups with jobs", stats.groups, false));
    body.push_str(&count_card(
        "Claimable groups",
        stats.claimable_groups,
        false,
    ));
    body.push_str(&count_card("Dead letters", stats.dead_letters, true));
    let load = Load::of(&stats, &depth);
    body.push_str(&oldest_ready_card(&ctx, &depth, &load));
    body.push_str(&format!(
        "<div class=\"card\" id=\"queue-now\"><div class=\"label\">Queue now</div>\
         <div class=\"value\">{}</div><div class=\"hint\">{}; {} schedule(s){}</div></div>",
        load.word(stats.is_idle()),
        escape(&load.summary()),
        schedules.total,
        if stale_schedules > 0 {
            format!(
                ", <a href=\"{}\" id=\"stale-schedules\">{stale_schedules} stale</a>",
                escape(&ctx.href("/schedules"))
            )
        } else {
            next_tick.map_or_else(String::new, |at| format!(", next tick {}", time(at)))
        },
    ));
    body.push_str("</div>");
    body.push_str(&format!(
        "<h2>The last {CHART_MINUTES} minutes</h2>{}",
        chart(&throughput, &by_queue)
    ));
    body.push_str(&format!(
        "<section id=\"depth\"><h2>Depth by queue and priority</h2>{}</section>",
        depth_table(&depth)
    ));
    body.push_str(&format!(
        "<section id=\"workers\"><h2>Workers seen in the last 5 minutes</h2>{}</section>",
        workers_table(&workers)
    ));
    body.push_str(&format!(
        "<h2>Running jobs</h2>{}",
        jobs_table(
            &ctx,
            &running.jobs,
            &match running.stopped_at {
                // not "no job is running" when the reads merely stopped looking
                Some(at) =>
                    format!("No job is running up to id {at}: the list stopped looking there."),
                None => "No job is running.".to_owned(),
            }
        )
    ));
    if running.next.is_some() {
        body.push_str(&format!(
            "<p class=\"pager\">{}</p>",
            link(&ctx.href("/jobs?state=running"), "All running jobs →")
        ));
    }
    body.push_str(&format!(
        "<section id=\"latest-dead\"><h2>Latest dead letters</h2>{}</section>",
        dead_table(&ctx, &dead, false)
    ));
    let body = format!("{}{}", live("overview", &body), live_note());
    let shell = ctx.shell("Overview", "/", &done);
    Ok(ctx.render(&shell, &body))
}

/// What the queue's groups are doing, summed over the depth's levels (in groups, each by
/// its first job), and how many jobs wait behind their group's first job.
#[derive(Debug, Default, PartialEq, Eq)]
struct Load {
    ready: i64,
    running: i64,
    retrying: i64,
    scheduled: i64,
    /// Jobs in the queue that are not their group's first: they wait for it to end.
    behind: i64,
    /// Whether every figure was counted exactly.
    exact: bool,
}

impl Load {
    fn of(stats: &crate::Stats, depth: &[LevelDepth]) -> Self {
        let mut load = Load {
            exact: stats.jobs.is_exact() && stats.groups.is_exact(),
            ..Load::default()
        };
        for level in depth {
            load.ready = load.ready.saturating_add(level.ready.value());
            load.running = load.running.saturating_add(level.running.value());
            load.retrying = load.retrying.saturating_add(level.retrying.value());
            load.scheduled = load.scheduled.saturating_add(level.scheduled.value());
            load.exact &= level.ready.is_exact()
                && level.running.is_exact()
                && level.retrying.is_exact()
                && level.scheduled.is_exact();
        }
        load.behind = stats
            .jobs
            .value()
            .saturating_sub(stats.groups.value())
            .max(0);
        load
    }

    /// One word for the card: idle, working (jobs run), ready (jobs wait for a worker),
    /// or waiting (nothing runs or is ready: only retries and later work).
    fn word(&self, idle: bool) -> &'static str {
        if idle {
            "idle"
        } else if self.running > 0 {
            "working"
        } else if self.ready > 0 {
            "ready"
        } else {
            "waiting"
        }
    }

    /// The figures behind the word, in a line.
    fn summary(&self) -> String {
        let about = if self.exact { "" } else { "about " };
        format!(
            "{about}{} running, {} ready, {} retrying, {} scheduled group(s)",
            self.running, self.ready, self.retrying, self.scheduled
        )
    }

    /// Why no job is ready, when none is but jobs are queued: what they wait behind.
    fn why_none_ready(&self) -> String {
        let about = if self.exact { "" } else { "about " };
        let mut behind = Vec::new();
        if self.running > 0 {
            behind.push("running");
        }
        if self.retrying > 0 {
            behind.push("retrying");
        }
        if self.scheduled > 0 {
            behind.push("scheduled");
        }
        let kinds = match behind.as_slice() {
            [] => String::new(),
            [one] => (*one).to_owned(),
            [first @ .., last] => format!("{} or {last}", first.join(", ")),
        };
        match (self.behind > 0, kinds.is_empty()) {
            (true, false) => format!(
                "no group is ready: {about}{} job(s) waiting behind {kinds} groups (a group \
                 runs its jobs one at a time)",
                self.behind
            ),
            (false, false) => format!("no group is ready: every group is {kinds}"),
            (true, true) => format!(
                "no group is ready: {about}{} job(s) waiting behind their groups' first jobs",
                self.behind
            ),
            (false, true) => "no job is waiting".to_owned(),
        }
    }
}

/// Since when the longest waiting ready group waits, in which queue, with a link to the
/// longest waiting groups; with none ready, what the queued jobs wait behind.
fn oldest_ready_card(ctx: &Ctx, depth: &[LevelDepth], load: &Load) -> String {
    let oldest = depth
        .iter()
        .filter_map(|level| Some((level.oldest_ready_at?, level)))
        .min_by_key(|(at, _)| *at);
    let (value, hint) = match oldest {
        Some((at, level)) => (
            span((chrono::Utc::now() - at).num_seconds()),
            format!(
                "since {} in {}, priority {} · {}",
                time(at),
                escape(&level.queue),
                level.priority.get(),
                link(&ctx.href("/groups?sort=waiting"), "longest waiting →")
            ),
        ),
        None => ("–".to_owned(), escape(&load.why_none_ready())),
    };
    format!(
        "<div class=\"card\" id=\"oldest-ready\"><div class=\"label\">Oldest ready job waits</div>\
         <div class=\"value\">{value}</div><div class=\"hint\">{hint}</div></div>"
    )
}

/// The depth by queue, priority level and state, in groups (each by its first job).
fn depth_table(depth: &[LevelDepth]) -> String {
    let rows: Vec<Vec<String>> = depth
        .iter()
        .map(|level| {
            vec![
                format!("<span class=\"queue-name\">{}</span>", escape(&level.queue)),
                level.priority.get().to_string(),
                escape(&level.ready.to_string()),
                opt_time(level.oldest_ready_at),
                escape(&level.running.to_string()),
                escape(&level.retrying.to_string()),
                escape(&level.scheduled.to_string()),
            ]
        })
        .collect();
    format!(
        "{}<p class=\"muted\">Counted in groups, each by its next job (the jobs behind it in \
         its group wait for it); for jobs without a group, one group is one job. Counts past \
         10,000 ready or 1,000 others per row are shown as at least (>=).</p>",
        table(
            &[
                "Queue",
                "Priority",
                "Ready",
                "Oldest ready since",
                "Running",
                "Retrying",
                "Scheduled",
            ],
            &rows,
            "Nothing is queued.",
        )
    )
}

/// Minutes the overview's chart shows.
const CHART_MINUTES: u32 = 30;

/// How many queues the chart draws a series of their own for (the others are one more).
const CHART_QUEUES: u32 = 8;

/// A series' name in the chart's legend and tooltips.
fn series_name(series: &crate::client::QueueSeries, folded: u32) -> String {
    match series.queue.as_deref() {
        None => format!("{folded} other queue(s)"),
        Some("") => "not by queue".to_owned(),
        Some(queue) => queue.to_owned(),
    }
}

/// Jobs succeeded, failed and dead per minute, as an inline SVG bar chart (no script, no
/// inline style): stacked bars, a colour per queue (classes `q0` to `q8`, the busiest at
/// the bottom), under the axes of the total they add up to, each bar with its figures as
/// a tooltip, and a legend naming the queues.
fn chart(
    minutes: &[crate::client::ThroughputMinute],
    by_queue: &crate::client::ThroughputByQueue,
) -> String {
    const WIDTH: u64 = 900;
    const HEIGHT: u64 = 140;
    // (saturating: the counts are what worker roles reported, whatever they are)
    let all = |m: &crate::client::ThroughputMinute| {
        m.succeeded.saturating_add(m.failed).saturating_add(m.dead)
    };
    // each series' figures of a minute (the two readings may straddle a minute's turn: a
    // minute one of them lacks counts 0 there)
    let of = |series: &crate::client::QueueSeries, at: chrono::DateTime<chrono::Utc>| {
        series
            .minutes
            .iter()
            .find(|m| m.minute == at)
            .map_or(0, all)
    };
    let stacked = |at| {
        by_queue
            .series
            .iter()
            .map(|series| of(series, at))
            .fold(0, u64::saturating_add)
    };
    let total: u64 = minutes.iter().map(all).fold(0, u64::saturating_add);
    let peak = minutes
        .iter()
        .map(|m| all(m).max(stacked(m.minute)))
        .max()
        .unwrap_or(0)
        .max(1);
    // a bar's height in the chart: `n` of `peak`, in u128 (no overflow), at most `HEIGHT`
    // (the peak reaches the top, where the y axis says it)
    let scaled = |n: u64| (u128::from(n) * u128::from(HEIGHT) / u128::from(peak)) as u64;
    let slot = WIDTH / (minutes.len().max(1) as u64);
    let mut bars = String::new();
    for (n, minute) in minutes.iter().enumerate() {
        let x = n as u64 * slot + 1;
        let w = slot.saturating_sub(2).max(1);
        let mut title = format!(
            "{}: {} succeeded, {} failed, {} dead",
            minute.minute.format("%H:%M"),
            minute.succeeded,
            minute.failed,
            minute.dead
        );
        let mut stack = String::new();
        let mut top = HEIGHT;
        for (index, series) in by_queue.series.iter().enumerate() {
            let count = of(series, minute.minute);
            if count == 0 {
                continue;
            }
            title.push_str(&format!(
                "; {} {count}",
                series_name(series, by_queue.folded)
            ));
            let height = scaled(count).min(top);
            top -= height;
            stack.push_str(&format!(
                "<rect x=\"{x}\" y=\"{top}\" width=\"{w}\" height=\"{height}\" \
                 class=\"q{}\"/>",
                index.min(CHART_QUEUES as usize)
            ));
        }
        bars.push_str(&format!(
            "<g class=\"minute\"><title>{}</title>\
             <rect x=\"{x}\" y=\"0\" width=\"{w}\" height=\"{HEIGHT}\" class=\"slot\"/>\
             {stack}</g>",
            escape(&title),
        ));
    }
    // the axes, in HTML around the SVG (text in a stretched SVG would stretch with it, and
    // the CSP allows no inline style): the y axis says the jobs a minute at the top of the
    // scale, half way and 0 (a gridline at each), the x axis a time every X_EVERY minutes,
    // each label in a cell as wide as a bar's slot, under its bar
    const X_EVERY: usize = 5;
    let grid = format!(
        "<line x1=\"0\" x2=\"{WIDTH}\" y1=\"0.5\" y2=\"0.5\" class=\"grid\"/>\
         <line x1=\"0\" x2=\"{WIDTH}\" y1=\"{half_y}\" y2=\"{half_y}\" class=\"grid\"/>",
        half_y = HEIGHT / 2,
    );
    let y_axis = format!(
        "<div class=\"y-axis\" id=\"chart-y\"><span>{peak}</span><span>{}</span>\
         <span>0</span></div>",
        if peak.is_multiple_of(2) {
            (peak / 2).to_string()
        } else {
            format!("{}.5", peak / 2)
        },
    );
    let count = minutes.len();
    let mut x_axis = String::from("<div class=\"x-axis\" id=\"chart-x\">");
    for (n, minute) in minutes.iter().enumerate() {
        let label = if (count - 1 - n).is_multiple_of(X_EVERY) {
            minute.minute.format("%H:%M").to_string()
        } else {
            String::new()
        };
        x_axis.push_str(&format!("<span>{label}</span>"));
    }
    x_axis.push_str("</div>");
    // the legend: a key per series, in the stack's order (bottom first)
    let mut legend = String::from("<span id=\"chart-legend\">");
    if by_queue.series.is_empty() {
        legend.push_str("by queue: none did anything yet");
    }
    for (index, series) in by_queue.series.iter().enumerate() {
        legend.push_str(&format!(
            "<span class=\"series\"><i class=\"key q{}\"></i>{}</span>",
            index.min(CHART_QUEUES as usize),
            escape(&series_name(series, by_queue.folded))
        ));
    }
    legend.push_str("</span>");
    format!(
        "<figure class=\"chart\"><div class=\"y-title\">jobs a minute (succeeded, failed or \
         dead), by queue</div>\
         <div class=\"plot\">{y_axis}<svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\" \
         aria-label=\"jobs per minute by queue: {total} in all, at most {peak} a minute\" \
         preserveAspectRatio=\"none\">{bars}{grid}</svg></div>\
         <div class=\"x-row\"><div class=\"y-axis-gap\"></div>{x_axis}</div>\
         <div class=\"x-title\">minute (UTC)</div>\
         <figcaption>{legend}<span>{total} in all, at most {peak} a minute \
         (reported by the worker pools every 10 s)</span></figcaption></figure>"
    )
}

/// How many pools the overview shows, and of each, how many queue names.
const WORKERS_SHOWN: u32 = 50;
const WORKER_QUEUES_SHOWN: usize = 10;

fn workers_table(list: &crate::client::WorkerList) -> String {
    let rows: Vec<Vec<String>> = list
        .workers
        .iter()
        .map(|worker| {
            let shown = worker.queues.len().min(WORKER_QUEUES_SHOWN);
            let more = (worker.queue_count as usize).saturating_sub(shown);
            let mut queues = escape(&worker.queues[..shown].join(", "));
            if more > 0 {
                queues.push_str(&format!(" and {more} more"));
            }
            vec![
                escape(&format!("{} (pid {})", worker.host, worker.pid)),
                queues,
                format!("{} / {}", worker.running, worker.concurrency),
                worker.succeeded.to_string(),
                worker.failed.to_string(),
                worker.dead.to_string(),
                time(worker.seen_at),
                worker
                    .stopped_at
                    .map_or_else(|| badge("running"), |_| badge("stopped")),
            ]
        })
        .collect();
    let mut html = table(
        &[
            "Worker pool",
            "Queues",
            "Running / slots",
            "Succeeded",
            "Failed",
            "Dead",
            "Last report",
            "",
        ],
        &rows,
        "No worker pool reported in the last 5 minutes.",
    );
    if list.not_shown() > 0 {
        html.push_str(&format!(
            "<p class=\"muted\" id=\"workers-not-shown\">{} more pool(s) reported in the last 5 \
             minutes and are not shown (the {WORKERS_SHOWN} longest running are).</p>",
            list.not_shown()
        ));
    }
    html
}

/// The filters of `/jobs`, its order and cursor, and the id searched for.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct JobsFilter {
    state: Option<String>,
    kind: Option<String>,
    group: Option<String>,
    queue: Option<String>,
    /// `oldest` for oldest first; anything else (or nothing) newest first.
    order: Option<String>,
    after: Option<i64>,
    /// A job id typed in the search box: its page, or "not found".
    id: Option<String>,
}

/// The states `/jobs` filters on: value and label.
const STATES: &[(&str, &str)] = &[
    ("", "any state"),
    ("queued", "queued (not finished)"),
    ("pending", "pending (waits for other jobs)"),
    ("waiting", "waiting"),
    ("scheduled", "scheduled"),
    ("running", "running"),
    ("retrying", "retrying"),
    ("completed", "completed"),
    ("dead", "dead"),
    ("cancelled", "cancelled"),
];

/// The state a `state` field names (`queued`: every job not yet ended).
pub(super) fn state_filter(state: &str) -> Option<StateFilter> {
    Some(match state {
        "queued" => StateFilter::Queued,
        "pending" => StateFilter::Pending,
        "waiting" => StateFilter::Waiting,
        "scheduled" => StateFilter::Scheduled,
        "running" => StateFilter::Running,
        "retrying" => StateFilter::Retrying,
        "completed" => StateFilter::Completed,
        "dead" => StateFilter::Dead,
        "cancelled" => StateFilter::Cancelled,
        _ => return None,
    })
}

/// An empty form field is no filter.
fn non_empty(value: Option<&String>) -> Option<&str> {
    value.map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// `/jobs`: jobs by state, kind, group and queue, newest first (or oldest first), a page
/// at a time; with `id`, the job's page (or a page saying there is no such job).
pub(crate) async fn jobs(
    State(ctx): State<Ctx>,
    Query(filter): Query<JobsFilter>,
    Query(done): Query<Done>,
) -> Result<Response, PageError> {
    let mut search_error = None;
    if let Some(wanted) = non_empty(filter.id.as_ref()) {
        match wanted.trim_start_matches('#').parse::<JobId>() {
            Ok(id) => match ctx.client.job(id).await? {
                Some(_) => {
                    return Ok(Redirect::to(&ctx.href(&format!("/jobs/{id}"))).into_response());
                }
                None => {
                    search_error = Some(format!(
                        "No job {id}: it never existed, or it completed without retention, \
                         or its history was pruned."
                    ));
                }
            },
            Err(_) => search_error = Some(format!("{wanted:?} is not a job id (a number).")),
        }
    }
    let state = non_empty(filter.state.as_ref());
    let kind = non_empty(filter.kind.as_ref());
    let group = non_empty(filter.group.as_ref());
    let queue = non_empty(filter.queue.as_ref());
    let mut oldest_first = filter.order.as_deref() == Some("oldest");
    let state_wanted = match state {
        Some(state) => Some(
            state_filter(state)
                .ok_or_else(|| PageError::BadRequest(format!("unknown state {state:?}")))?,
        ),
        None => None,
    };
    let query_for = |oldest_first: bool| {
        // a filter that keeps few jobs reads on, then says where it stopped looking
        let mut query = JobQuery::new().limit(PAGE_SIZE).read_on(JOBS_PAGE_READS);
        if !oldest_first {
            query = query.newest_first();
        }
        if let Some(state) = state_wanted {
            query = query.state(state);
        }
        if let Some(kind) = kind {
            query = query.kind(kind);
        }
        if let Some(group) = group {
            query = query.group(group);
        }
        if let Some(queue) = queue {
            query = query.queue(queue);
        }
        if let Some(after) = filter.after {
            query = query.after(JobId::new(after));
        }
        query
    };
    // a role granted before harel_list_jobs_newest existed lists oldest first, and is told
    let mut missing_grant = false;
    let page = match ctx.client.jobs(&query_for(oldest_first)).await {
        Err(ClientError::Database(error)) if !oldest_first && error.is_permission_denied() => {
            oldest_first = true;
            missing_grant = true;
            ctx.client.jobs(&query_for(true)).await?
        }
        other => other?,
    };

    let mut options = String::new();
    for (value, label) in STATES {
        let selected = if Some(*value) == state || (value.is_empty() && state.is_none()) {
            " selected"
        } else {
            ""
        };
        options.push_str(&format!(
            "<option value=\"{value}\"{selected}>{label}</option>"
        ));
    }
    let mut orders = String::new();
    for (value, label, this) in [
        ("newest", "newest first", !oldest_first),
        ("oldest", "oldest first", oldest_first),
    ] {
        let selected = if this { " selected" } else { "" };
        orders.push_str(&format!(
            "<option value=\"{value}\"{selected}>{label}</option>"
        ));
    }
    let mut body = format!(
        "<form class=\"filters\" method=\"get\" action=\"{action}\" id=\"job-search\">\
         <label>Job id<input type=\"text\" name=\"id\" id=\"search-id\" inputmode=\"numeric\" \
         value=\"{id}\" placeholder=\"go to a job\"></label>\
         <button type=\"submit\" id=\"search-go\">Go</button></form>",
        action = escape(&ctx.href("/jobs")),
        id = escape(non_empty(filter.id.as_ref()).unwrap_or_default()),
    );
    if let Some(error) = &search_error {
        body.push_str(&format!(
            "<p class=\"error\" id=\"search-result\" role=\"status\">{}</p>",
            escape(error)
        ));
    }
    if missing_grant {
        body.push_str(
            "<p class=\"notice\" id=\"missing-grant\">Oldest first: this role may not list \
             newest first (grant it EXECUTE on harel_list_jobs_newest, see the guide's \
             Database roles).</p>",
        );
    }
    body.push_str(&format!(
        "<form class=\"filters\" method=\"get\" action=\"{action}\">\
         <label>State<select name=\"state\" id=\"filter-state\">{options}</select></label>\
         <label>Kind<input type=\"text\" name=\"kind\" id=\"filter-kind\" value=\"{kind}\" placeholder=\"any kind\"></label>\
         <label>Group<input type=\"text\" name=\"group\" id=\"filter-group\" value=\"{group}\" placeholder=\"any group\"></label>\
         <label>Queue<input type=\"text\" name=\"queue\" id=\"filter-queue\" value=\"{queue}\" placeholder=\"any queue\"></label>\
         <label>Order<select name=\"order\" id=\"filter-order\">{orders}</select></label>\
         <button type=\"submit\" id=\"filter-apply\">Filter</button></form>",
        action = escape(&ctx.href("/jobs")),
        kind = escape(kind.unwrap_or_default()),
        group = escape(group.unwrap_or_default()),
        queue = escape(queue.unwrap_or_default()),
    ));
    // every job the filter matches, not only this page's: counted and confirmed on a page
    // of its own (counting here would be done again at each live refresh)
    if !ctx.read_only && CancelAllFilter::cancellable(state) {
        body.push_str(&format!(
            "<form method=\"get\" action=\"{}\" class=\"actions\">{}\
             <button type=\"submit\" class=\"danger\" id=\"cancel-all\">Cancel all matching…</button>\
             </form>",
            escape(&ctx.href("/jobs/cancel-all")),
            CancelAllFilter::new(state, kind, group, queue).hidden(),
        ));
    }
    let (direction, rest) = if oldest_first {
        ("Oldest first", "newer")
    } else {
        ("Newest first", "older")
    };
    let empty = match page.stopped_at {
        Some(at) => format!(
            "No matching job {} id {at}: this page stopped looking there; the next page \
             looks on.",
            if oldest_first { "up to" } else { "down to" }
        ),
        None => "No matching job.".to_owned(),
    };
    let mut listed = jobs_table(&ctx, &page.jobs, &empty);
    let shown = match (page.stopped_at, page.next) {
        (Some(at), _) => format!(
            "{direction}: {} shown; this page stopped looking at id {at} after \
             {JOBS_PAGE_READS} reads ({rest} jobs were not looked at: the next page looks on).",
            page.jobs.len()
        ),
        (None, Some(_)) => format!(
            "{direction}, at most {PAGE_SIZE} a page: {} shown; {rest} matching jobs are on \
             the next pages.",
            page.jobs.len()
        ),
        (None, None) => format!(
            "{direction}: {} shown; no {rest} matching job.",
            page.jobs.len()
        ),
    };
    listed.push_str(&format!(
        "<p class=\"muted\" id=\"jobs-shown\">{}</p>",
        escape(&shown)
    ));
    let mut pager = Vec::new();
    let filters = |href: &mut String| {
        for (name, value) in [
            ("state", state),
            ("kind", kind),
            ("group", group),
            ("queue", queue),
            ("order", oldest_first.then_some("oldest")),
        ] {
            if let Some(value) = value {
                href.push_str(&format!("&{name}={}", query_value(value)));
            }
        }
    };
    if filter.after.is_some() {
        // the filters without a cursor: `/jobs?state=…` (or `/jobs` with none)
        let mut params = String::new();
        filters(&mut params);
        let href = match params.strip_prefix('&') {
            Some(params) => format!("/jobs?{params}"),
            None => "/jobs".to_owned(),
        };
        pager.push(format!(
            "<a href=\"{}\" id=\"first-page\">← {}</a>",
            escape(&ctx.href(&href)),
            if oldest_first { "Oldest" } else { "Newest" }
        ));
    }
    if let Some(next) = page.next {
        let mut href = format!("/jobs?after={next}");
        filters(&mut href);
        pager.push(format!(
            "<a href=\"{}\" id=\"next-page\">{} →</a>",
            escape(&ctx.href(&href)),
            if oldest_first { "Newer" } else { "Older" }
        ));
    }
    if !pager.is_empty() {
        listed.push_str(&format!("<p class=\"pager\">{}</p>", pager.join(" · ")));
    }
    body.push_str(&live("jobs", &listed));
    body.push_str(&live_note());
    let shell = ctx.shell("Jobs", "/jobs", &done);
    let html = ctx.render(&shell, &body);
    Ok(match search_error {
        Some(_) => (StatusCode::NOT_FOUND, html).into_response(),
        None => html.into_response(),
    })
}

/// `/jobs/cancel-all`: how many jobs the Jobs page's filter matches that have not ended
/// (oldest first, up to [`CANCEL_ALL_CAP`], in at most [`BULK_BATCHES`] bounded reads), and
/// a form that cancels them, asked again in the browser with the count. Not in read-only
/// mode.
pub(crate) async fn cancel_all(
    State(ctx): State<Ctx>,
    Query(filter): Query<CancelAllFilter>,
) -> PageResult {
    if ctx.read_only {
        return Err(PageError::Forbidden("the dashboard is read-only"));
    }
    let mut query = filter.query()?;
    let after = filter.after()?;
    let (mut counted, mut running, mut first, mut upto) = (0u32, 0u32, None, None);
    // `capped`: the count stopped at its cap; `stopped`: it ran out of reads, here
    let (mut capped, mut stopped) = (false, None);
    'reads: for read in 0..BULK_BATCHES {
        let page = ctx.client.jobs(&query).await?;
        for job in &page.jobs {
            if counted == CANCEL_ALL_CAP {
                capped = true;
                break 'reads;
            }
            counted += 1;
            if matches!(job.state, JobState::Running { .. }) {
                running += 1;
            }
            first.get_or_insert(job.id);
            upto = Some(job.id);
        }
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
        if read + 1 == BULK_BATCHES {
            stopped = page.next;
        }
    }
    let what = filter.describe();
    let back = match filter.params().strip_prefix('&') {
        Some(params) => format!("/jobs?{params}"),
        None => "/jobs".to_owned(),
    };
    let since = after.map_or(String::new(), |after| format!(" after id {after}"));
    // the count stopped looking before the end: say where, and let it count on from there
    let count_on = |at: JobId| {
        format!(
            "<p id=\"count-stopped\">The count stopped looking at id {at} after {reads} reads \
             of up to {batch} jobs: jobs after it were not looked at.</p><p>{link}</p>",
            reads = BULK_BATCHES,
            batch = grouped(BULK_BATCH),
            link = link(
                &ctx.href(&format!("/jobs/cancel-all?after={at}{}", filter.params())),
                &format!("Count on from id {at} →"),
            )
            .replacen("<a ", "<a id=\"count-on\" ", 1),
        )
    };
    let mut body = String::new();
    match (first, upto) {
        (Some(first), Some(upto)) => {
            let at_least = capped || stopped.is_some();
            let counted = if at_least {
                format!("at least {counted}")
            } else {
                counted.to_string()
            };
            body.push_str(&format!(
                "<p id=\"cancel-count\">{counted} job(s) match ({what}){since}, ids {first} to \
                 {upto}; {running} of them running.</p>\
                 <form method=\"post\" action=\"{path}\" class=\"actions\" data-confirm=\"{question}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">{hidden}\
                 <input type=\"hidden\" name=\"from\" value=\"{from}\">\
                 <input type=\"hidden\" name=\"upto\" value=\"{upto}\">{capped}\
                 <input type=\"text\" name=\"reason\" id=\"cancel-reason\" placeholder=\"reason (kept with each job)\">\
                 <button type=\"submit\" class=\"danger\" id=\"cancel-all-confirm\">Cancel {counted} job(s)</button></form>\
                 <p class=\"muted\">Oldest first, {batch} read at a time, one cancel per job (a \
                 queued job never runs; a running one is told at its next heartbeat and ends as \
                 cancelled), at most {cap} a click; jobs enqueued after this count (a higher \
                 id) are left alone.</p>",
                counted = escape(&counted),
                what = escape(&what),
                path = escape(&ctx.href("/jobs/cancel-all")),
                question = escape(&format!("Cancel {counted} job(s) ({what})?")),
                csrf = escape(&ctx.csrf),
                hidden = filter.hidden(),
                // the jobs before the first match did not match: the click skips them
                from = first.get() - 1,
                // counted up to the cap (or the reads): the click says that more match
                capped = if at_least {
                    "<input type=\"hidden\" name=\"capped\" value=\"1\">"
                } else {
                    ""
                },
                batch = grouped(BULK_BATCH),
                cap = grouped(CANCEL_ALL_CAP),
            ));
            if let Some(at) = stopped {
                body.push_str(&count_on(at));
            }
        }
        _ => match stopped {
            // never "no job matches" when the count merely stopped looking
            Some(at) => {
                body.push_str(&format!(
                    "<p id=\"cancel-count\">No job matches ({}){since} up to id {at}; the \
                     count stopped there.</p>",
                    escape(&what)
                ));
                body.push_str(&count_on(at));
            }
            None => body.push_str(&format!(
                "<p id=\"cancel-count\">No job matches ({}){since}: nothing to cancel.</p>",
                escape(&what)
            )),
        },
    }
    body.push_str(&format!(
        "<p>{}</p>",
        link(&ctx.href(&back), "← Back to the jobs")
    ));
    let shell = ctx.shell("Cancel all matching jobs", "/jobs", &Done::default());
    Ok(ctx.render(&shell, &body))
}

/// A whole number with its thousands grouped: `10,000`.
fn grouped(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn parse_id(text: &str) -> Result<JobId, PageError> {
    text.parse()
        .map_err(|_| PageError::BadRequest(format!("{text:?} is not a job id")))
}

/// `/jobs/{id}`: one job, its payload, and a cancel button while it is queued.
pub(crate) async fn job(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    Query(done): Query<Done>,
) -> PageResult {
    let id = parse_id(&id)?;
    let job = ctx
        .client
        .job(id)
        .await?
        .ok_or_else(|| PageError::NotFound(format!("no job {id}")))?;
    let (state, at) = state_of(&job);
    let mut pairs = vec![
        ("State", badge(state)),
        ("Kind", escape(&job.kind)),
        (
            "Queue",
            format!(
                "<a href=\"{}\" class=\"queue-name\">{}</a>",
                escape(&ctx.href(&format!("/jobs?queue={}", query_value(&job.queue)))),
                escape(&job.queue)
            ),
        ),
        ("Group", ctx.group_link(&job.group)),
        ("Priority", job.priority.get().to_string()),
        ("Attempts", job.attempts.to_string()),
        ("Enqueued", time(job.enqueued_at)),
    ];
    let at_label = match &job.state {
        JobState::Scheduled { .. } => "Not before",
        JobState::Running { .. } => "Lease until",
        JobState::Retrying { .. } => "Next attempt",
        JobState::Completed { .. } => "Completed",
        JobState::Dead { .. } => "Failed",
        JobState::Cancelled { .. } => "Cancelled",
        JobState::Waiting | JobState::Pending => "",
    };
    if let Some(at) = at {
        pairs.push((at_label, time(at)));
    }
    match &job.state {
        JobState::Running {
            since,
            cancel_requested,
            ..
        } => {
            pairs.push(("Started", opt_time(*since)));
            if *cancel_requested {
                pairs.push(("Cancel", "requested".into()));
                if let Some(reason) = &job.cancel_reason {
                    pairs.push(("Reason", escape(reason)));
                }
            }
        }
        JobState::Completed { started_at, .. } => pairs.push(("Started", opt_time(*started_at))),
        JobState::Cancelled {
            reason: Some(reason),
            ..
        } => pairs.push(("Reason", escape(reason))),
        _ => {}
    }
    // the workflow task it is, what a pending job waits for, and the durable steps the
    // job recorded
    if let Some(task) = super::workflows::task_field(&ctx, id).await? {
        pairs.push(("Workflow", task));
    }
    let parents = ctx.client.job_parents(id).await?;
    if !parents.parents.is_empty() {
        let mut links: Vec<String> = parents.parents.iter().map(|p| ctx.job_link(*p)).collect();
        if parents.more {
            links.push("…".to_owned());
        }
        pairs.push(("Waits for", links.join(", ")));
    }
    let steps = ctx.client.job_steps(id).await?;
    if !steps.steps.is_empty() {
        let mut names: Vec<String> = steps
            .steps
            .iter()
            .map(|s| {
                format!(
                    "{} ({} B, {})",
                    escape(&s.name),
                    s.bytes,
                    time(s.recorded_at)
                )
            })
            .collect();
        if steps.more {
            names.push("…".to_owned());
        }
        pairs.push(("Steps recorded", names.join("; ")));
    }
    let mut body = live("job", &fields(&pairs));
    let queued = matches!(
        job.state,
        JobState::Pending
            | JobState::Waiting
            | JobState::Scheduled { .. }
            | JobState::Running { .. }
            | JobState::Retrying { .. }
    );
    if matches!(
        job.state,
        JobState::Retrying { .. } | JobState::Scheduled { .. }
    ) && !ctx.read_only
    {
        body.push_str(&action(
            &ctx.href(&format!("/jobs/{id}/run-now")),
            &ctx.csrf,
            &[],
            "Run now",
            "",
            Some(&format!(
                "Run job {id} now rather than at {}?",
                at.map(|at| at.format("%Y-%m-%d %H:%M:%S UTC").to_string())
                    .unwrap_or_else(|| "its time".to_owned())
            )),
        ));
    }
    if queued && !ctx.read_only {
        body.push_str(&format!(
            "<form method=\"post\" action=\"{}\" class=\"actions\" data-confirm=\"Cancel job {id}?\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <input type=\"text\" name=\"reason\" placeholder=\"reason (kept with the job)\">\
             <button type=\"submit\" class=\"danger\" id=\"cancel-job\">Cancel job</button></form>",
            escape(&ctx.href(&format!("/jobs/{id}/cancel"))),
            escape(&ctx.csrf),
        ));
    }
    if matches!(job.state, JobState::Dead { .. }) {
        let retry = if ctx.read_only {
            String::new()
        } else {
            action(
                &ctx.href("/dead/retry"),
                &ctx.csrf,
                &[("id", id.to_string()), ("single", "1".to_owned())],
                "Retry",
                "",
                Some(&format!("Put job {id} back in the queue?")),
            )
        };
        body.push_str(&format!(
            "<div class=\"actions\">{retry}{}</div>",
            link(&ctx.href(&format!("/dead/{id}")), "Its dead letter →")
        ));
    }
    // a role granted before harel_job_attempts existed sees the page without them
    let (attempts, attempts_note) = match ctx.client.job_attempts(id).await {
        Ok(attempts) => (attempts, ""),
        Err(ClientError::Database(error)) if error.is_permission_denied() => (
            Vec::new(),
            "<p class=\"notice\" id=\"missing-grant\">No attempt history: this role may not \
             read it (grant it EXECUTE on harel_job_attempts, see the guide's Database \
             roles).</p>",
        ),
        Err(error) => return Err(error.into()),
    };
    body.push_str(&format!(
        "<h2>Timeline</h2><ol class=\"timeline\" id=\"timeline\">{}</ol>{attempts_note}",
        timeline(&job, &attempts)
    ));
    if !attempts.is_empty() {
        body.push_str(&format!(
            "<h2>Attempts</h2><div id=\"attempts\">{}</div>",
            attempts_table(&attempts, job.attempts)
        ));
    }
    if let Some(error) = &job.last_error {
        body.push_str(&format!("<h2>Last error</h2><pre>{}</pre>", escape(error)));
    }
    body.push_str(&format!(
        "<h2>Payload</h2><pre id=\"payload\">{}</pre>",
        escape(&pretty(&job.payload))
    ));
    body.push_str(&live_note());
    let title = format!("Job {id}");
    let shell = ctx.shell(&title, "/jobs", &done);
    Ok(ctx.render(&shell, &body))
}

/// A job's life so far, oldest first, as list items: its enqueue, each attempt kept (its
/// start and how it ended), and where it stands now.
fn timeline(job: &JobInfo, attempts: &[AttemptInfo]) -> String {
    let mut events: Vec<(Option<DateTime<Utc>>, String)> =
        vec![(Some(job.enqueued_at), "enqueued".to_owned())];
    if let Some(oldest) = attempts.last()
        && oldest.number > 1
    {
        events.push((
            None,
            format!("{} earlier attempts not kept", oldest.number - 1),
        ));
    }
    for a in attempts.iter().rev() {
        let by = a
            .worker
            .as_ref()
            .map(|w| format!(" on {}", worker_name(w)))
            .unwrap_or_default();
        events.push((a.started_at, format!("attempt {} started{by}", a.number)));
        let first_line = |e: &Option<String>| {
            e.as_deref()
                .and_then(|e| e.lines().next())
                .map(|l| format!(": {}", truncate(l, 200)))
                .unwrap_or_default()
        };
        match a.outcome {
            AttemptOutcome::Failed => events.push((
                a.ended_at,
                format!("attempt {} failed{}", a.number, first_line(&a.error)),
            )),
            AttemptOutcome::Dead => events.push((
                a.ended_at,
                format!(
                    "attempt {} failed for good: dead{}",
                    a.number,
                    first_line(&a.error)
                ),
            )),
            AttemptOutcome::Lapsed => events.push((
                None,
                format!(
                    "attempt {} lapsed: no worker ended it (its worker stopped or lost the lease)",
                    a.number
                ),
            )),
            AttemptOutcome::Completed => events.push((a.ended_at, "completed".to_owned())),
            AttemptOutcome::Cancelled => events.push((a.ended_at, "cancelled".to_owned())),
            AttemptOutcome::Running => {}
        }
    }
    match &job.state {
        JobState::Pending => events.push((None, "waiting for the jobs it depends on".to_owned())),
        JobState::Waiting => events.push((None, "waiting for a worker".to_owned())),
        JobState::Scheduled { at } => events.push((Some(*at), "due".to_owned())),
        JobState::Running {
            lease_until,
            cancel_requested,
            ..
        } => {
            if *cancel_requested {
                events.push((None, "cancel requested".to_owned()));
            }
            events.push((Some(*lease_until), "lease ends unless extended".to_owned()));
        }
        JobState::Retrying { after } => {
            events.push((Some(*after), "next attempt due".to_owned()));
        }
        JobState::Cancelled { at, .. } if attempts.is_empty() || job.attempts == 0 => {
            events.push((Some(*at), "cancelled".to_owned()));
        }
        JobState::Dead { at } if attempts.is_empty() => {
            events.push((Some(*at), "dead".to_owned()));
        }
        _ => {}
    }
    events
        .into_iter()
        .map(|(at, what)| format!("<li>{} {}</li>", opt_time(at), escape(&what)))
        .collect()
}

/// A worker pool as an operator knows it: host and pid while it is listed, else its id.
fn worker_name(worker: &AttemptWorker) -> String {
    match (&worker.host, worker.pid) {
        (Some(host), Some(pid)) => format!("{host} (pid {pid})"),
        _ => worker.id.to_string(),
    }
}

/// At most `max` characters of `text`, with an ellipsis when cut.
fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The attempts kept, newest first: number, outcome, start, end, duration, worker, error
/// (each in full, in a collapsed block).
fn attempts_table(attempts: &[AttemptInfo], counted: u32) -> String {
    let rows: Vec<Vec<String>> = attempts
        .iter()
        .map(|a| {
            let took = match (a.started_at, a.ended_at) {
                (Some(start), Some(end)) => (end - start)
                    .to_std()
                    .map(|d| format!("{:.3} s", d.as_secs_f64()))
                    .unwrap_or_default(),
                _ => "–".to_owned(),
            };
            let error = a.error.as_deref().map_or_else(
                || "–".to_owned(),
                |e| {
                    format!(
                        "<details><summary>{}</summary><pre>{}</pre></details>",
                        escape(&truncate(e.lines().next().unwrap_or(""), 80)),
                        escape(e)
                    )
                },
            );
            vec![
                a.number.to_string(),
                badge(a.outcome.as_str()),
                opt_time(a.started_at),
                opt_time(a.ended_at),
                took,
                a.worker
                    .as_ref()
                    .map_or_else(|| "–".to_owned(), |w| escape(&worker_name(w))),
                error,
            ]
        })
        .collect();
    let mut html = table(
        &[
            "#", "Outcome", "Started", "Ended", "Took", "Worker", "Error",
        ],
        &rows,
        "no attempt",
    );
    if let Some(oldest) = attempts.last()
        && oldest.number > 1
    {
        html.push_str(&format!(
            "<p class=\"more\">{} earlier attempts of {counted} are not kept (a job keeps its {} most recent).</p>",
            oldest.number - 1,
            MAX_ATTEMPTS_KEPT
        ));
    }
    html
}

/// A JSON text pretty-printed (as it is if it does not parse).
fn pretty(payload: &str) -> String {
    serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| payload.to_owned())
}

fn groups_table(ctx: &Ctx, groups: &[GroupInfo], empty: &str) -> String {
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|group| {
            vec![
                ctx.group_link(&group.id),
                escape(&group.queue),
                badge(group.status.as_str()),
                group.priority.get().to_string(),
                match (group.jobs_capped, group.jobs_estimate) {
                    (true, Some(estimate)) => format!("≥{} (about {estimate})", group.jobs),
                    (true, None) => format!("≥{}", group.jobs),
                    (false, _) => group.jobs.to_string(),
                },
                group
                    .head
                    .map_or_else(|| "–".to_owned(), |id| ctx.job_link(id)),
                group.head_attempts.to_string(),
                time(group.available_at),
            ]
        })
        .collect();
    table(
        &[
            "Group",
            "Queue",
            "Status",
            "Priority",
            "Jobs",
            "First job",
            "Its attempts",
            "Since / until",
        ],
        &rows,
        empty,
    )
}

/// The order and cursor of `/groups`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct GroupsPage {
    /// `waiting` (longest waiting first), `size` (largest first), or by id.
    sort: Option<String>,
    after: Option<String>,
}

/// How many groups the rankings of `/groups` show.
const TOP_GROUPS: u32 = 50;

/// `/groups`: the groups holding jobs, in id order a page at a time, or the longest waiting,
/// or the largest.
pub(crate) async fn groups(State(ctx): State<Ctx>, Query(page): Query<GroupsPage>) -> PageResult {
    let rank = match page.sort.as_deref().unwrap_or_default() {
        "" | "id" => None,
        "waiting" => Some(GroupRank::LongestWaiting),
        "size" => Some(GroupRank::Largest),
        other => return Err(PageError::BadRequest(format!("unknown order {other:?}"))),
    };
    let mut body = String::from("<p class=\"tabs\">");
    for (sort, label, this) in [
        ("id", "By id", None),
        (
            "waiting",
            "Longest waiting",
            Some(GroupRank::LongestWaiting),
        ),
        ("size", "Largest", Some(GroupRank::Largest)),
    ] {
        let current = if this == rank {
            " aria-current=\"true\""
        } else {
            ""
        };
        body.push_str(&format!(
            "<a href=\"{}\" id=\"sort-{sort}\"{current}>{label}</a>",
            escape(&ctx.href(&format!("/groups?sort={sort}")))
        ));
    }
    body.push_str("</p>");
    match rank {
        None => {
            let mut query = GroupQuery::new().limit(PAGE_SIZE);
            if let Some(after) = page.after.filter(|a| !a.is_empty()) {
                query = query.after(after);
            }
            let groups = ctx.client.groups(&query).await?;
            body.push_str(&groups_table(&ctx, &groups.groups, "No group holds jobs."));
            if let Some(next) = groups.next {
                body.push_str(&format!(
                    "<p class=\"pager\"><a href=\"{}\">Next page →</a></p>",
                    escape(&ctx.href(&format!("/groups?after={}", query_value(&next))))
                ));
            }
        }
        Some(rank) => {
            let top = ctx.client.top_groups(rank, TOP_GROUPS).await?;
            let empty = match rank {
                GroupRank::LongestWaiting => "No group is waiting for a worker.",
                _ => "No group to rank.",
            };
            body.push_str(&groups_table(&ctx, &top.groups, empty));
            body.push_str(&match (rank, top.statistics_at) {
                (GroupRank::LongestWaiting, _) => format!(
                    "<p class=\"muted\">The ready groups that have waited longest (at most {TOP_GROUPS}) \
                     for a worker, in every queue.</p>"
                ),
                (_, Some(at)) => format!(
                    "<p class=\"muted\">Ranked by PostgreSQL's statistics of the queue, \
                     gathered {} (autovacuum's analyze refreshes them as the queue churns); \
                     each group's jobs counted up to 1,000.</p>",
                    time(at)
                ),
                (_, None) => "<p class=\"muted\">No group stands out in PostgreSQL's \
                              statistics of the queue: its groups are about as large as each \
                              other, or the statistics were not gathered yet.</p>"
                    .to_owned(),
            });
        }
    }
    let shell = ctx.shell("Groups", "/groups", &Done::default());
    Ok(ctx.render(&shell, &body))
}

/// The group of `/groups/show`.
#[derive(Debug, Deserialize)]
pub(crate) struct GroupId {
    id: String,
}

/// `/groups/show?id=…`: one group, its queued jobs, and a button to cancel them all.
pub(crate) async fn group(
    State(ctx): State<Ctx>,
    Query(group): Query<GroupId>,
    Query(done): Query<Done>,
) -> PageResult {
    let info = ctx.client.group(&group.id).await?;
    let jobs = ctx
        .client
        .jobs(
            &JobQuery::new()
                .group(group.id.clone())
                .state(StateFilter::Queued)
                .limit(PAGE_SIZE),
        )
        .await?;
    let mut body = match &info {
        Some(info) => groups_table(&ctx, std::slice::from_ref(info), "No group holds jobs."),
        None => "<p class=\"empty\">This group holds no job now.</p>".to_owned(),
    };
    if let (Some(info), false) = (&info, ctx.read_only) {
        let question = format!(
            "Cancel {} job(s) of group {}?",
            if info.jobs_capped {
                format!("{} or more", info.jobs)
            } else {
                info.jobs.to_string()
            },
            info.id
        );
        body.push_str(&format!(
            "<div class=\"actions\">{}</div>",
            action(
                &ctx.href("/groups/cancel"),
                &ctx.csrf,
                &[("id", info.id.clone())],
                "Cancel every job of this group",
                "danger",
                Some(&question),
            )
        ));
    }
    body.push_str(&format!(
        "<h2>Queued jobs</h2>{}",
        jobs_table(&ctx, &jobs.jobs, "No queued job.")
    ));
    if let Some(next) = jobs.next {
        body.push_str(&format!(
            "<p class=\"pager\"><a href=\"{}\">More →</a></p>",
            escape(&ctx.href(&format!(
                "/jobs?state=queued&order=oldest&group={}&after={next}",
                query_value(&group.id)
            )))
        ));
    }
    let title = format!("Group {}", group.id);
    let shell = ctx.shell(&title, "/groups", &done);
    Ok(ctx.render(&shell, &body))
}

/// A table of dead letters; with `select`, inside the bulk form, a checkbox each.
fn dead_table(ctx: &Ctx, letters: &[DeadLetter], select: bool) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|letter| {
            let mut row = Vec::with_capacity(7);
            if select {
                row.push(format!(
                    "<input type=\"checkbox\" name=\"id\" value=\"{}\" aria-label=\"select {}\">",
                    letter.id, letter.id
                ));
            }
            row.extend([
                link(
                    &ctx.href(&format!("/dead/{}", letter.id)),
                    &letter.id.to_string(),
                ),
                escape(&letter.kind),
                short(&letter.group, 40),
                letter.attempts.to_string(),
                time(letter.failed_at),
                short(&letter.last_error, 100),
            ]);
            row
        })
        .collect();
    let mut headers = Vec::with_capacity(7);
    if select {
        headers.push("");
    }
    headers.extend(["ID", "Kind", "Group", "Attempts", "Failed", "Error"]);
    table(&headers, &rows, "No dead letters.")
}

/// The filter and cursor of `/dead`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeadFilter {
    kind: Option<String>,
    before: Option<i64>,
}

/// Up to how many dead letters the count of "All that match" reads (each view of the first
/// page counts).
const BULK_COUNT_CAP: u32 = 10_000;

/// `/dead`: dead letters, newest first, with retry and delete (of those ticked, or of all
/// that match the filter).
pub(crate) async fn dead_letters(
    State(ctx): State<Ctx>,
    Query(filter): Query<DeadFilter>,
    Query(done): Query<Done>,
) -> PageResult {
    let kind = non_empty(filter.kind.as_ref());
    let query = DeadLetterQuery {
        kind: kind.map(str::to_owned),
        before: filter.before.map(JobId::new),
        limit: PAGE_SIZE,
    };
    let letters = ctx.client.dead_letters().list(&query).await?;
    let mut body = format!(
        "<form class=\"filters\" method=\"get\" action=\"{}\">\
         <label>Kind<input type=\"text\" name=\"kind\" value=\"{}\" placeholder=\"any kind\"></label>\
         <button type=\"submit\">Filter</button></form>",
        escape(&ctx.href("/dead")),
        escape(kind.unwrap_or_default()),
    );
    if ctx.read_only || letters.is_empty() {
        body.push_str(&dead_table(&ctx, &letters, false));
    } else {
        // one form, two buttons: the checked ids go to retry or delete
        body.push_str(&format!(
            "<form method=\"post\" action=\"{retry}\" data-confirm=\"Act on the selected dead letters?\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <div class=\"actions\"><label><input type=\"checkbox\" data-select-all> select all</label>\
             <button type=\"submit\" id=\"retry-selected\">Retry selected</button>\
             <button type=\"submit\" class=\"danger\" formaction=\"{delete}\" id=\"delete-selected\">Delete selected</button></div>\
             {table}</form>",
            retry = escape(&ctx.href("/dead/retry")),
            delete = escape(&ctx.href("/dead/delete")),
            csrf = escape(&ctx.csrf),
            table = dead_table(&ctx, &letters, true),
        ));
    }
    // every letter the filter matches, not only this page's: on the first page, those dead
    // by the time of the count (those that die after it are left alone)
    if let (false, None, Some(_)) = (ctx.read_only, filter.before, letters.first()) {
        let (count, asof) = ctx
            .client
            .dead_letters()
            .count_matching(kind, BULK_COUNT_CAP)
            .await?;
        let asof = asof.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let what = match kind {
            Some(kind) => format!("of kind {kind}"),
            None => "of every kind".to_owned(),
        };
        let counted = match count {
            crate::Count::AtLeast(n) => format!("at least {n}"),
            other => other.value().to_string(),
        };
        let form = |action: &str, label: &str, class: &str, id: &str, question: &str| {
            format!(
                "<form method=\"post\" action=\"{path}\" class=\"inline\" \
                 data-confirm=\"{question}\"><input type=\"hidden\" name=\"csrf\" \
                 value=\"{csrf}\"><input type=\"hidden\" name=\"action\" value=\"{action}\">\
                 <input type=\"hidden\" name=\"kind\" value=\"{kind}\">\
                 <input type=\"hidden\" name=\"asof\" value=\"{asof}\">\
                 <button type=\"submit\" class=\"{class}\" id=\"{id}\">{label}</button></form>",
                path = escape(&ctx.href("/dead/all")),
                question = escape(question),
                csrf = escape(&ctx.csrf),
                kind = escape(kind.unwrap_or_default()),
                asof = escape(&asof),
            )
        };
        body.push_str(&format!(
            "<section id=\"all-matching\"><h2>All that match</h2><p id=\"matching-count\">\
             {counted} dead letter(s) {what} (not only this page's), dead by {at}.</p>\
             <div class=\"actions\">{retry}{delete}</div><p class=\"muted\">Oldest first, \
             1,000 a transaction (a group's letters go back in order), at most {max} a click; \
             letters that die after this page was loaded are left alone.</p></section>",
            counted = escape(&counted),
            what = escape(&what),
            at = escape(&asof),
            max = BULK_BATCHES * BULK_BATCH,
            retry = form(
                "retry",
                &format!("Retry all {counted}"),
                "",
                "retry-all",
                &format!("Put {counted} dead letter(s) {what} back in the queue?"),
            ),
            delete = form(
                "delete",
                &format!("Delete all {counted}"),
                "danger",
                "delete-all",
                &format!("Delete {counted} dead letter(s) {what} for good?"),
            ),
        ));
    }
    if letters.len() == PAGE_SIZE as usize
        && let Some(last) = letters.last()
    {
        let mut href = format!("/dead?before={}", last.id);
        if let Some(kind) = kind {
            href.push_str(&format!("&kind={}", query_value(kind)));
        }
        body.push_str(&format!(
            "<p class=\"pager\"><a href=\"{}\">Older →</a></p>",
            escape(&ctx.href(&href))
        ));
    }
    let shell = ctx.shell("Dead letters", "/dead", &done);
    Ok(ctx.render(&shell, &body))
}

/// `/dead/{id}`: one dead letter, its error and payload, retry and delete.
pub(crate) async fn dead_letter(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    Query(done): Query<Done>,
) -> PageResult {
    let id = parse_id(&id)?;
    let letter = ctx
        .client
        .dead_letters()
        .get(id)
        .await?
        .ok_or_else(|| PageError::NotFound(format!("no dead letter {id}")))?;
    let mut pairs = vec![
        ("Kind", escape(&letter.kind)),
        ("Group", short(&letter.group, 80)),
        ("Priority", letter.priority.get().to_string()),
        ("Attempts", letter.attempts.to_string()),
        ("Enqueued", time(letter.enqueued_at)),
        ("Failed", time(letter.failed_at)),
    ];
    // a task's letter: its retry puts the task back into its workflow
    let task = super::workflows::task_field(&ctx, id).await?;
    let retry_note = if task.is_some() {
        " Retrying it retries its workflow's task (its dependents cancelled for it and its \
         callbacks run again)."
    } else {
        ""
    };
    if let Some(task) = task {
        pairs.push(("Workflow", task));
    }
    let mut body = fields(&pairs);
    if !ctx.read_only {
        let ids = [("id", id.to_string()), ("single", "1".to_owned())];
        body.push_str(&format!(
            "<div class=\"actions\">{}{}</div>",
            action(
                &ctx.href("/dead/retry"),
                &ctx.csrf,
                &ids,
                "Retry",
                "",
                (!retry_note.is_empty())
                    .then(|| format!("Put job {id} back in the queue?{retry_note}"))
                    .as_deref(),
            ),
            action(
                &ctx.href("/dead/delete"),
                &ctx.csrf,
                &ids,
                "Delete",
                "danger",
                Some(&format!("Delete dead letter {id} for good?")),
            ),
        ));
    }
    body.push_str(&format!(
        "<h2>Error</h2><pre id=\"error\">{}</pre><h2>Payload</h2><pre id=\"payload\">{}</pre>",
        escape(&letter.last_error),
        escape(&pretty(&letter.payload))
    ));
    let title = format!("Dead letter {id}");
    let shell = ctx.shell(&title, "/dead", &done);
    Ok(ctx.render(&shell, &body))
}

/// `/queues`: every queue, paused or not, its limits and load, with pause and resume.
pub(crate) async fn queues(State(ctx): State<Ctx>, Query(done): Query<Done>) -> PageResult {
    let queues = ctx.client.queues().await?;
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|queue| {
            let status = match queue.paused_at {
                Some(at) => format!("{} since {}", badge("paused"), time(at)),
                None => badge("running"),
            };
            let mut limits = Vec::new();
            if let Some(running) = queue.limits.concurrency_limit() {
                limits.push(format!("{running} at once"));
            }
            if let Some(rate) = queue.limits.rate_limit() {
                limits.push(format!("{} per {:?}", rate.starts, rate.per));
            }
            let mut row = vec![
                format!("<span class=\"queue-name\">{}</span>", escape(&queue.name)),
                status,
                if limits.is_empty() {
                    "–".to_owned()
                } else {
                    escape(&limits.join(", "))
                },
                escape(&queue.ready.to_string()),
                queue.oldest_ready_at.map_or_else(|| "–".to_owned(), time),
                escape(&queue.running.to_string()),
                format!(
                    "<a href=\"{}\" class=\"keys-link\">Keys</a> · \
                     <a href=\"{}\" class=\"jobs-link\">Jobs</a>",
                    escape(&ctx.href(&format!("/queues/keys?name={}", query_value(&queue.name)))),
                    escape(&ctx.href(&format!("/jobs?queue={}", query_value(&queue.name)))),
                ),
            ];
            if !ctx.read_only {
                let (path, label, class) = if queue.is_paused() {
                    ("/queues/resume", "Resume", "")
                } else {
                    ("/queues/pause", "Pause", "danger")
                };
                row.push(action(
                    &ctx.href(path),
                    &ctx.csrf,
                    &[("name", queue.name.clone())],
                    label,
                    class,
                    None,
                ));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "Queue",
        "Status",
        "Limits",
        "Ready groups",
        "Oldest ready since",
        "Running",
        "Fairness keys · jobs",
    ];
    if !ctx.read_only {
        headers.push("");
    }
    let body = format!(
        "{}<p class=\"muted\">A paused queue keeps taking jobs; no worker starts them until it \
         is resumed. Running jobs finish.</p>{}",
        live("queues", &table(&headers, &rows, "No queues.")),
        live_note()
    );
    let shell = ctx.shell("Queues", "/queues", &done);
    Ok(ctx.render(&shell, &body))
}

/// Fairness keys `/queues/keys` shows a page.
const KEYS_PAGE_SIZE: u32 = 100;

/// The queue and cursor of `/queues/keys`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct KeysPage {
    name: Option<String>,
    after: Option<String>,
}

/// The form that sets a fairness key's weight in `queue`: for a listed key (`Some`: the
/// key hidden, the weight shown), or for any key (`None`: a text field for it).
fn weight_form(ctx: &Ctx, queue: &str, key: Option<&str>, weight: u32) -> String {
    let key_field = match key {
        Some(key) => format!(
            "<input type=\"hidden\" name=\"key\" value=\"{}\">",
            escape(key)
        ),
        None => format!(
            "<label>Key<input type=\"text\" name=\"key\" id=\"new-key\" \
             maxlength=\"{MAX_FAIR_KEY_BYTES}\" placeholder=\"empty: the jobs without one\"></label>"
        ),
    };
    let (class, weight_field, button) = match key {
        Some(key) => (
            "inline weight",
            format!(
                "<input type=\"number\" name=\"weight\" min=\"1\" max=\"{MAX_FAIR_WEIGHT}\" \
                 step=\"1\" required value=\"{weight}\" aria-label=\"weight of {}\">",
                escape(if key.is_empty() { "(none)" } else { key })
            ),
            "<button type=\"submit\">Set</button>",
        ),
        None => (
            "filters weight",
            format!(
                "<label>Weight<input type=\"number\" name=\"weight\" id=\"new-weight\" \
                 min=\"1\" max=\"{MAX_FAIR_WEIGHT}\" step=\"1\" required value=\"{weight}\"></label>"
            ),
            "<button type=\"submit\" id=\"set-new-weight\">Set weight</button>",
        ),
    };
    format!(
        "<form method=\"post\" action=\"{action}\" class=\"{class}\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <input type=\"hidden\" name=\"name\" value=\"{queue}\">\
         {key_field}{weight_field}{button}</form>",
        action = escape(&ctx.href("/queues/weight")),
        csrf = escape(&ctx.csrf),
        queue = escape(queue),
    )
}

/// `/queues/keys?name=…`: a queue's fairness keys in key order, [`KEYS_PAGE_SIZE`] a page,
/// with their weights and ready groups, and forms to set a weight.
pub(crate) async fn queue_keys(
    State(ctx): State<Ctx>,
    Query(page): Query<KeysPage>,
    Query(done): Query<Done>,
) -> PageResult {
    let name = non_empty(page.name.as_ref())
        .ok_or_else(|| PageError::BadRequest("no queue named".into()))?;
    validate_queue_name(name).map_err(|_| PageError::BadRequest(QUEUE_NAME_RULE.into()))?;
    let after = page.after.as_deref().filter(|a| !a.is_empty());
    let keys = ctx.client.fair_keys(name, after, KEYS_PAGE_SIZE).await?;
    let rows: Vec<Vec<String>> = keys
        .keys
        .iter()
        .map(|info| {
            let shown = if info.key.is_empty() {
                "<span class=\"fair-key muted\">(none)</span>".to_owned()
            } else {
                format!("<span class=\"fair-key\">{}</span>", short(&info.key, 60))
            };
            let mut row = vec![
                shown,
                info.weight.to_string(),
                escape(&info.ready.to_string()),
                escape(&info.running.to_string()),
            ];
            if !ctx.read_only {
                row.push(weight_form(&ctx, name, Some(&info.key), info.weight));
            }
            row
        })
        .collect();
    let mut headers = vec!["Key", "Weight", "Ready groups", "Running"];
    if !ctx.read_only {
        headers.push("Set weight");
    }
    let empty = if after.is_some() {
        "No more keys after these."
    } else {
        "No fairness key in this queue: none has ready groups or a weight set."
    };
    let limit = keys.limits.concurrency_limit();
    let rate = keys.limits.rate_limit();
    let running_text = limit.map(|n| format!("at most <strong>{n}</strong> running at once"));
    let rate_text = rate.map(|r| {
        format!(
            "at most <strong>{}</strong> starts per {} ms",
            r.starts,
            r.per.as_millis()
        )
    });
    let mut body = format!(
        "<p id=\"key-limit\">{}</p>",
        match (running_text, rate_text) {
            (Some(running), Some(rate)) => format!("Each key: {running}, {rate}."),
            (Some(one), None) | (None, Some(one)) => format!("Each key: {one}."),
            (None, None) => "No limit per key.".to_owned(),
        }
    );
    body.push_str(&table(&headers, &rows, empty));
    if let Some(next) = keys.next {
        body.push_str(&format!(
            "<p class=\"pager\"><a href=\"{}\" id=\"more-keys\">More →</a></p>",
            escape(&ctx.href(&format!(
                "/queues/keys?name={}&after={}",
                query_value(name),
                query_value(&next)
            )))
        ));
    }
    body.push_str(
        "<p class=\"muted\">Among the keys with ready work at a priority level, workers start \
         each key's groups in proportion to its weight (1 unless set). A new weight applies to \
         the groups that become ready after it; those already waiting keep their places. \
         Ready groups are counted up to 10,000 per level (>= past that), those waiting for \
         room under the limit per key included; leased, retrying and scheduled groups are not \
         counted. Running jobs are exact under a limit per key, otherwise counted among the \
         first 10,000 leased or waiting groups per level. (none) is the key of jobs enqueued \
         without one.</p>",
    );
    if !ctx.read_only {
        body.push_str(&format!(
            "<section id=\"set-weight\"><h2>Set a key's weight</h2>{}</section>",
            weight_form(&ctx, name, None, 1)
        ));
        body.push_str(&format!(
            "<section id=\"set-key-limit\"><h2>Limit each key</h2>\
             <form method=\"post\" action=\"{action}\" class=\"filters\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <input type=\"hidden\" name=\"name\" value=\"{queue}\">\
             <label>Running at most<input type=\"number\" name=\"running\" \
             id=\"key-limit-running\" min=\"1\" max=\"1000000\" step=\"1\" value=\"{value}\" \
             placeholder=\"empty: no limit\"></label>\
             <label>Starts at most<input type=\"number\" name=\"rate\" id=\"key-limit-rate\" \
             min=\"1\" max=\"1000000\" step=\"1\" value=\"{starts}\" \
             placeholder=\"empty: no rate\"></label>\
             <label>per (ms)<input type=\"number\" name=\"per_ms\" id=\"key-limit-per\" \
             min=\"1\" max=\"86400000\" step=\"1\" value=\"{per}\"></label>\
             <button type=\"submit\" id=\"set-key-limit-button\">Set limits</button></form>\
             <p class=\"muted\">Over every worker; an empty field removes that limit. A key at \
             its running limit starts nothing more until one of its jobs ends; past its rate, its \
             next jobs wait for the start times the rate gives them.</p></section>",
            action = escape(&ctx.href("/queues/key-limit")),
            csrf = escape(&ctx.csrf),
            queue = escape(name),
            value = limit.map(|n| n.to_string()).unwrap_or_default(),
            starts = rate.map(|r| r.starts.to_string()).unwrap_or_default(),
            per = rate
                .map(|r| r.per.as_millis().to_string())
                .unwrap_or_else(|| "1000".to_owned()),
        ));
    }
    body.push_str(&format!(
        "<p class=\"pager\">{}</p>",
        link(&ctx.href("/queues"), "← All queues")
    ));
    let title = format!("Fairness keys of {name}");
    let shell = ctx.shell(&title, "/queues", &done);
    Ok(ctx.render(&shell, &body))
}

/// How far in the past a schedule's next tick may be before it is marked stale: a worker
/// declaring it fires a tick within a second or two of it, so a tick this late means no
/// such worker runs (or they are stuck).
const STALE_AFTER_MINUTES: i64 = 5;

/// Whether `next_tick` is more than [`STALE_AFTER_MINUTES`] before `now`.
fn stale(next_tick: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
    next_tick.is_some_and(|at| now - at > chrono::Duration::minutes(STALE_AFTER_MINUTES))
}

/// The cursor of `/schedules`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SchedulesPage {
    after: Option<String>,
}

/// `/schedules`: the periodic schedules and their ticks, [`PAGE_SIZE`] a page by name.
pub(crate) async fn schedules(
    State(ctx): State<Ctx>,
    Query(page): Query<SchedulesPage>,
    Query(done): Query<Done>,
) -> PageResult {
    let mut query = ScheduleQuery::new().limit(PAGE_SIZE);
    if let Some(after) = page.after.filter(|a| !a.is_empty()) {
        query = query.after(after);
    }
    let schedules = ctx.client.schedules(&query).await?;
    let now = Utc::now();
    let rows: Vec<Vec<String>> = schedules
        .schedules
        .iter()
        .map(|s| {
            let mut status = if let Some(at) = s.paused_at {
                format!("{} since {}", badge("paused"), time(at))
            } else if stale(s.next_tick, now) {
                format!(
                    "<span class=\"badge badge-stale\" title=\"its next tick is over \
                     {STALE_AFTER_MINUTES} min late: no worker declaring it seems to run\">stale</span>"
                )
            } else {
                badge("on time")
            };
            if let Some(at) = s.trigger_requested_at {
                status.push_str(&format!(
                    "<br><span class=\"trigger-waiting\">triggered at {}: waiting for a worker \
                     that declares it</span>",
                    time(at)
                ));
            }
            let mut row = vec![
                escape(&s.name),
                format!("<code>{}</code>", escape(&s.spec)),
                opt_time(s.last_tick),
                opt_time(s.next_tick),
                status,
                time(s.updated_at),
            ];
            if !ctx.read_only {
                let name = || vec![("name", s.name.clone())];
                let mut buttons = if s.paused_at.is_some() {
                    action(
                        &ctx.href("/schedules/resume"),
                        &ctx.csrf,
                        &name(),
                        "Resume",
                        "",
                        Some(&format!(
                            "Resume the schedule {}? Its next tick is the next one to come: the \
                             ticks that passed while paused are not caught up.",
                            s.name
                        )),
                    )
                } else {
                    action(
                        &ctx.href("/schedules/pause"),
                        &ctx.csrf,
                        &name(),
                        "Pause",
                        "danger",
                        Some(&format!(
                            "Pause the schedule {}? No worker enqueues its ticks until it is \
                             resumed.",
                            s.name
                        )),
                    )
                };
                if s.paused_at.is_none() {
                    buttons.push_str(&action(
                        &ctx.href("/schedules/trigger"),
                        &ctx.csrf,
                        &name(),
                        "Trigger now",
                        "",
                        Some(&format!(
                            "Enqueue one job of the schedule {} now, besides its ticks?",
                            s.name
                        )),
                    ));
                }
                row.push(buttons);
            }
            row
        })
        .collect();
    let mut headers = vec![
        "Name",
        "Schedule",
        "Last tick",
        "Next tick",
        "Status",
        "Declared or ticked",
    ];
    if !ctx.read_only {
        headers.push("");
    }
    let mut body = table(&headers, &rows, "No periodic schedules.");
    body.push_str(&format!(
        "<p class=\"muted\" id=\"schedules-total\">{} schedule(s) in all. A schedule is \
         stale when its next tick is more than {STALE_AFTER_MINUTES} minutes in the past: the \
         workers that declare it are gone or stuck. A paused schedule enqueues no tick until \
         resumed; a trigger enqueues one job at the next pass of a worker that declares it \
         (within seconds).</p>",
        schedules.total
    ));
    if let Some(next) = schedules.next {
        body.push_str(&format!(
            "<p class=\"pager\"><a href=\"{}\">Next page →</a></p>",
            escape(&ctx.href(&format!("/schedules?after={}", query_value(&next))))
        ));
    }
    let shell = ctx.shell("Schedules", "/schedules", &done);
    Ok(ctx.render(&shell, &body))
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_are_grouped() {
        assert_eq!(super::grouped(0), "0");
        assert_eq!(super::grouped(999), "999");
        assert_eq!(super::grouped(1_000), "1,000");
        assert_eq!(super::grouped(10_000), "10,000");
        assert_eq!(super::grouped(1_234_567), "1,234,567");
    }

    use super::*;

    #[test]
    fn notices_come_from_codes_only() {
        let done = |code: &str, n| Done {
            done: Some(code.to_owned()),
            n,
        };
        assert_eq!(
            done("retried", Some(3)).notice().as_deref(),
            Some("Put 3 dead letter(s) back in the queue.")
        );
        assert_eq!(done("<script>", Some(1)).notice(), None);
        assert_eq!(Done::default().notice(), None);
    }

    #[test]
    fn a_queue_with_nothing_ready_says_what_its_jobs_wait_behind() {
        let load = |running, retrying, behind| Load {
            ready: 0,
            running,
            retrying,
            scheduled: 0,
            behind,
            exact: true,
        };
        // the 3 a.m. case: 96 jobs queued behind leased groups
        assert_eq!(
            load(4, 0, 96).why_none_ready(),
            "no group is ready: 96 job(s) waiting behind running groups (a group runs its \
             jobs one at a time)"
        );
        assert_eq!(load(4, 0, 96).word(false), "working");
        assert!(
            load(1, 2, 5)
                .why_none_ready()
                .contains("5 job(s) waiting behind running or retrying groups")
        );
        assert_eq!(
            load(0, 2, 0).why_none_ready(),
            "no group is ready: every group is retrying"
        );
        assert_eq!(load(0, 0, 0).why_none_ready(), "no job is waiting");
        let estimated = Load {
            exact: false,
            ..load(3, 0, 10)
        };
        assert!(estimated.why_none_ready().contains("about 10 job(s)"));
    }

    #[test]
    fn the_chart_labels_its_axes() {
        let start = chrono::DateTime::parse_from_rfc3339("2026-12-07T02:30:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let minutes: Vec<crate::client::ThroughputMinute> = (0..30)
            .map(|n| crate::client::ThroughputMinute {
                minute: start + chrono::Duration::minutes(n),
                succeeded: if n == 29 { 6 } else { 1 },
                failed: if n == 29 { 1 } else { 0 },
                dead: 0,
            })
            .collect();
        // split by queue: mail did 1 a minute and 5 in the last, reports 2 in the last
        let series = |queue: &str, last: (u64, u64)| crate::client::QueueSeries {
            queue: Some(queue.to_owned()),
            minutes: minutes
                .iter()
                .enumerate()
                .map(|(n, m)| crate::client::ThroughputMinute {
                    minute: m.minute,
                    succeeded: if n == 29 {
                        last.0
                    } else {
                        u64::from(queue == "mail")
                    },
                    failed: if n == 29 { last.1 } else { 0 },
                    dead: 0,
                })
                .collect(),
        };
        let by_queue = crate::client::ThroughputByQueue {
            series: vec![series("mail", (4, 1)), series("reports", (2, 0))],
            folded: 0,
        };
        let html = chart(&minutes, &by_queue);
        // values on the y axis: the peak (7 a minute), half of it, 0
        assert!(
            html.contains(
                "<div class=\"y-axis\" id=\"chart-y\"><span>7</span><span>3.5</span>\
                 <span>0</span></div>"
            ),
            "{html}"
        );
        // time on the x axis: every 5 minutes back from the last, one cell a minute
        let x = &html[html.find("id=\"chart-x\"").unwrap_or(0)..];
        let x = &x[..x.find("</div>").unwrap_or(x.len())];
        assert_eq!(x.matches("<span>").count(), 30, "{x}");
        for label in ["02:34", "02:39", "02:44", "02:49", "02:54", "02:59"] {
            assert!(x.contains(&format!("<span>{label}</span>")), "{label}: {x}");
        }
        assert!(!x.contains("02:30"), "{x}");
        assert!(html.contains("jobs a minute") && html.contains("minute (UTC)"));
        // the peak minute's bar fills the chart's height, stacked by queue: mail's 5 of 7
        // at the bottom, reports' 2 on top
        assert!(html.contains("height=\"100\" class=\"q0\""), "{html}");
        assert!(
            html.contains("y=\"0\" width=\"28\" height=\"40\" class=\"q1\""),
            "{html}"
        );
        // a minute where reports did nothing has no rectangle of it
        assert_eq!(html.matches("class=\"q1\"").count(), 1, "{html}");
        // the legend names each queue beside its colour
        assert!(
            html.contains(
                "<span class=\"series\"><i class=\"key q0\"></i>mail</span>\
                 <span class=\"series\"><i class=\"key q1\"></i>reports</span>"
            ),
            "{html}"
        );
    }

    #[test]
    fn a_schedule_is_stale_past_its_margin_only() {
        let now = Utc::now();
        let ago = |minutes| Some(now - chrono::Duration::minutes(minutes));
        assert!(!stale(None, now));
        assert!(!stale(Some(now + chrono::Duration::minutes(60)), now));
        assert!(!stale(ago(STALE_AFTER_MINUTES), now));
        assert!(stale(ago(STALE_AFTER_MINUTES + 1), now));
    }

    #[test]
    fn every_state_of_the_filter_is_known() {
        for (value, _) in STATES.iter().skip(1) {
            assert!(state_filter(value).is_some(), "{value}");
        }
        assert!(state_filter("sleeping").is_none());
    }
}
