//! The actions (POST): cancel a job, a group or every job a filter matches, retry or delete
//! dead letters, pause or resume a queue, set a fairness key's weight or the queue's limit
//! per key, pause, resume or trigger a schedule. Each checks the read-only switch and the
//! CSRF token first, then calls the library and redirects (303) to a page that shows the
//! outcome.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Redirect;
use chrono::{DateTime, Utc};
use rand::Rng as _;
use serde::Deserialize;

use super::html::query_value;
use super::pages::state_filter;
use super::{Ctx, PageError};
use crate::client::{CancelOutcome, JobQuery, JobState, KeyLimits, RunNowOutcome, StateFilter};
use crate::vocabulary::{JobId, MAX_FAIR_KEY_BYTES, MAX_FAIR_WEIGHT};
use crate::vocabulary::{QUEUE_NAME_RULE, validate_fair_key, validate_queue_name};

/// A new CSRF token: 32 random bytes, in hex.
pub(crate) fn new_csrf_token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `a` and `b` are equal, in a time that does not depend on where they differ.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A posted form (`application/x-www-form-urlencoded`): its fields in order, repeated
/// names kept (the ids of a bulk action).
pub(super) struct Form(Vec<(String, String)>);

impl Form {
    fn parse(body: &[u8]) -> Self {
        Self(
            form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Ctx {
    /// The form, once the dashboard allows actions and the form carries this router's
    /// CSRF token.
    pub(super) fn authorise(&self, body: &[u8]) -> Result<Form, PageError> {
        if self.read_only {
            return Err(PageError::Forbidden("the dashboard is read-only"));
        }
        let form = Form::parse(body);
        let token = form.get("csrf").unwrap_or_default();
        if !constant_time_eq(token.as_bytes(), self.csrf.as_bytes()) {
            return Err(PageError::Forbidden(
                "missing or wrong CSRF token: reload the page and try again",
            ));
        }
        Ok(form)
    }

    pub(super) fn redirect(&self, path: &str) -> Redirect {
        Redirect::to(&format!("{}{path}", self.base))
    }
}

/// The most ids one bulk action takes (a page shows fewer): one statement each.
const MAX_IDS: usize = 1_000;

fn ids(form: &Form) -> Result<Vec<JobId>, PageError> {
    let ids = form
        .all("id")
        .map(|id| {
            id.parse()
                .map_err(|_| PageError::BadRequest(format!("{id:?} is not an id")))
        })
        .collect::<Result<Vec<JobId>, _>>()?;
    if ids.is_empty() {
        return Err(PageError::BadRequest(
            "no dead letter selected: tick some first".into(),
        ));
    }
    if ids.len() > MAX_IDS {
        return Err(PageError::BadRequest(format!(
            "at most {MAX_IDS} dead letters at a time"
        )));
    }
    Ok(ids)
}

/// Dead letters one bulk transaction takes, in a bulk action over a filter.
pub(super) const BULK_BATCH: u32 = 1_000;

/// Batches one bulk action over a filter runs at most (the rest: press again).
pub(super) const BULK_BATCHES: u32 = 100;

/// `POST /dead/all` (`action`: `retry` or `delete`; `kind`: the filter, empty for any;
/// `asof`: the database time of the count the confirmation showed): every dead letter the
/// filter matches that had died by `asof` (a letter's id is its job's, taken at enqueue:
/// only its death time tells a letter counted from one that died later), oldest first (a
/// group's letters go back in order), [`BULK_BATCH`] per transaction, at most
/// [`BULK_BATCHES`] batches; redirects with how many were done.
pub(crate) async fn dead_all(State(ctx): State<Ctx>, body: Bytes) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let retry = match form.get("action") {
        Some("retry") => true,
        Some("delete") => false,
        _ => return Err(PageError::BadRequest("retry or delete?".into())),
    };
    let kind = form.get("kind").map(str::trim).filter(|k| !k.is_empty());
    let asof: DateTime<Utc> = form
        .get("asof")
        .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
        .map(|at| at.with_timezone(&Utc))
        .ok_or_else(|| PageError::BadRequest("no time of the count to stop at".into()))?;
    let dead = ctx.client.dead_letters();
    let mut query = JobQuery::new().state(StateFilter::Dead).limit(BULK_BATCH);
    if let Some(kind) = kind {
        query = query.kind(kind);
    }
    let (mut done, mut more) = (0usize, false);
    for batch in 0..BULK_BATCHES {
        // oldest first, in bounded reads (harel_list_jobs reads 2,000 rows a call)
        let page = ctx.client.jobs(&query).await?;
        let ids: Vec<JobId> = page
            .jobs
            .iter()
            .filter(|job| matches!(job.state, JobState::Dead { at } if at <= asof))
            .map(|job| job.id)
            .collect();
        // one statement, so one transaction, per batch
        done += if retry {
            dead.retry_many(&ids).await?.len()
        } else {
            dead.delete_many(&ids).await?.len()
        };
        match page.next {
            Some(next) => query = query.after(next),
            None => break,
        }
        more = batch + 1 == BULK_BATCHES;
    }
    let code = match (retry, more) {
        (true, false) => "retried",
        (true, true) => "retried_more",
        (false, false) => "deleted",
        (false, true) => "deleted_more",
    };
    let mut path = format!("/dead?done={code}&n={done}");
    if let Some(kind) = kind {
        path.push_str(&format!("&kind={}", query_value(kind)));
    }
    Ok(ctx.redirect(&path))
}

/// Jobs one "Cancel all matching" counts, and cancels, at most (one click; the rest: press
/// again).
pub(super) const CANCEL_ALL_CAP: u32 = 10_000;

/// The Jobs page's filter that "Cancel all matching" acts on: its state (none: every job
/// not yet ended), kind, group and queue (not its order nor its cursor).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct CancelAllFilter {
    state: Option<String>,
    kind: Option<String>,
    group: Option<String>,
    queue: Option<String>,
    /// The count page's `after`: count on from where an earlier count stopped looking.
    after: Option<String>,
}

impl CancelAllFilter {
    /// The filter of these fields (`None` or empty: not filtered on).
    pub(super) fn new(
        state: Option<&str>,
        kind: Option<&str>,
        group: Option<&str>,
        queue: Option<&str>,
    ) -> Self {
        Self {
            state: state.map(str::to_owned),
            kind: kind.map(str::to_owned),
            group: group.map(str::to_owned),
            queue: queue.map(str::to_owned),
            after: None,
        }
    }

    fn from_form(form: &Form) -> Self {
        let field = |name: &str| form.get(name).map(str::to_owned);
        Self {
            state: field("state"),
            kind: field("kind"),
            group: field("group"),
            queue: field("queue"),
            // the count's: where its first match came after
            after: field("from"),
        }
    }

    /// An empty field is no filter.
    fn field(value: Option<&String>) -> Option<&str> {
        value.map(|v| v.trim()).filter(|v| !v.is_empty())
    }

    /// The filter's fields that are set, by name.
    fn fields(&self) -> [(&'static str, Option<&str>); 4] {
        [
            ("state", Self::field(self.state.as_ref())),
            ("kind", Self::field(self.kind.as_ref())),
            ("group", Self::field(self.group.as_ref())),
            ("queue", Self::field(self.queue.as_ref())),
        ]
    }

    /// Whether a job in `state` (the Jobs page's state filter) can be cancelled: not one
    /// that ended (completed, dead, cancelled).
    pub(super) fn cancellable(state: Option<&str>) -> bool {
        !matches!(state, Some("completed" | "dead" | "cancelled"))
    }

    /// Where the count (or the click) starts: after this id (`None`: from the first job).
    pub(super) fn after(&self) -> Result<Option<JobId>, PageError> {
        Self::field(self.after.as_ref())
            .map(|id| {
                id.parse()
                    .map_err(|_| PageError::BadRequest(format!("{id:?} is not a job id")))
            })
            .transpose()
    }

    /// The jobs it matches that have not ended, oldest first, [`BULK_BATCH`] a read (each
    /// read bounded by `harel_list_jobs`), from [`after`](Self::after) on.
    pub(super) fn query(&self) -> Result<JobQuery, PageError> {
        let [(_, state), (_, kind), (_, group), (_, queue)] = self.fields();
        let state = match state {
            None => StateFilter::Queued,
            Some(name) if !Self::cancellable(Some(name)) => {
                return Err(PageError::BadRequest(format!(
                    "{name} jobs have ended: there is nothing to cancel"
                )));
            }
            Some(name) => state_filter(name)
                .ok_or_else(|| PageError::BadRequest(format!("unknown state {name:?}")))?,
        };
        let mut query = JobQuery::new().state(state).limit(BULK_BATCH);
        if let Some(kind) = kind {
            query = query.kind(kind);
        }
        if let Some(group) = group {
            query = query.group(group);
        }
        if let Some(queue) = queue {
            query = query.queue(queue);
        }
        if let Some(after) = self.after()? {
            query = query.after(after);
        }
        Ok(query)
    }

    /// The filter in words: `waiting, of kind k, in group g, in queue q` (`not yet ended`
    /// without a state).
    pub(super) fn describe(&self) -> String {
        let [(_, state), (_, kind), (_, group), (_, queue)] = self.fields();
        let mut parts = vec![match state {
            None | Some("queued") => "not yet ended".to_owned(),
            Some(state) => state.to_owned(),
        }];
        if let Some(kind) = kind {
            parts.push(format!("of kind {kind}"));
        }
        if let Some(group) = group {
            parts.push(format!("in group {group}"));
        }
        if let Some(queue) = queue {
            parts.push(format!("in queue {queue}"));
        }
        parts.join(", ")
    }

    /// The filter as query parameters, each after a `&` (empty with none set).
    pub(super) fn params(&self) -> String {
        self.fields()
            .into_iter()
            .filter_map(|(name, value)| value.map(|v| format!("&{name}={}", query_value(v))))
            .collect()
    }

    /// The filter as hidden form fields.
    pub(super) fn hidden(&self) -> String {
        self.fields()
            .into_iter()
            .filter_map(|(name, value)| {
                value.map(|v| {
                    format!(
                        "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
                        super::html::escape(v)
                    )
                })
            })
            .collect()
    }
}

/// `POST /jobs/cancel-all` (the filter's `state`, `kind`, `group`, `queue`; `from`: the id
/// the count's first match came after, none from a page of an earlier release; `upto`: the
/// highest id the confirmation counted; `capped`: `1` when that count stopped at
/// [`CANCEL_ALL_CAP`]; `reason` optional): cancels every job the filter
/// matches that has not ended and whose id is above `from` and at most `upto` (jobs
/// enqueued after the count are left alone; those up to `from` the count found not
/// matching, and the click reads no more of them), oldest first, [`BULK_BATCH`] read at a
/// time and one cancel per job (each its own transaction, as
/// [`Client::cancel`](crate::Client::cancel)), at most
/// [`CANCEL_ALL_CAP`] jobs and [`BULK_BATCHES`] reads a click; a running job is told to
/// stop and ends as cancelled. Redirects to the Jobs page, filtered so, with how many.
pub(crate) async fn cancel_all(State(ctx): State<Ctx>, body: Bytes) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let filter = CancelAllFilter::from_form(&form);
    let mut query = filter.query()?;
    let upto: JobId = form
        .get("upto")
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| PageError::BadRequest("no id of the count to stop at".into()))?;
    let reason = form.get("reason").map(str::trim).filter(|r| !r.is_empty());
    // the count stopped at its cap: jobs past `upto` matched then, not only since
    let capped = form.get("capped") == Some("1");
    let (mut done, mut more) = (0u32, false);
    'reads: for read in 0..BULK_BATCHES {
        let page = ctx.client.jobs(&query).await?;
        for job in &page.jobs {
            if job.id > upto {
                more = capped;
                break 'reads;
            }
            if done == CANCEL_ALL_CAP {
                more = true;
                break 'reads;
            }
            let mut cancel = ctx.client.cancel(job.id);
            if let Some(reason) = reason {
                cancel = cancel.reason(reason);
            }
            // one that ended meanwhile (or is gone) is not counted
            if matches!(
                cancel.await?,
                CancelOutcome::Cancelled | CancelOutcome::Requested
            ) {
                done += 1;
            }
        }
        match page.next {
            Some(next) if next < upto => query = query.after(next),
            Some(_) => {
                more = capped;
                break;
            }
            None => break,
        }
        more = read + 1 == BULK_BATCHES;
    }
    let code = if more {
        "cancelled_all_more"
    } else {
        "cancelled_all"
    };
    Ok(ctx.redirect(&format!("/jobs?done={code}&n={done}{}", filter.params())))
}

/// `POST /jobs/{id}/run-now`: a retrying or scheduled job due now (or, behind others of its
/// group, without its time); back to its page saying what was done.
pub(crate) async fn run_now(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    ctx.authorise(&body)?;
    let id: JobId = id
        .parse()
        .map_err(|_| PageError::BadRequest(format!("{id:?} is not a job id")))?;
    let done = match ctx.client.run_now(id).await? {
        RunNowOutcome::NotFound => return Err(PageError::NotFound(format!("no job {id}"))),
        RunNowOutcome::Due => "run_now",
        RunNowOutcome::Behind => "run_now_behind",
        RunNowOutcome::Running => "run_now_running",
        RunNowOutcome::Finished => "too_late",
        RunNowOutcome::NotWaiting => "run_now_not_waiting",
    };
    Ok(ctx.redirect(&format!("/jobs/{id}?done={done}")))
}

/// `POST /jobs/{id}/cancel` (`reason` optional).
pub(crate) async fn cancel_job(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let id: JobId = id
        .parse()
        .map_err(|_| PageError::BadRequest(format!("{id:?} is not a job id")))?;
    let mut cancel = ctx.client.cancel(id);
    if let Some(reason) = form.get("reason").filter(|r| !r.trim().is_empty()) {
        cancel = cancel.reason(reason);
    }
    let done = match cancel.await? {
        CancelOutcome::NotFound => return Err(PageError::NotFound(format!("no job {id}"))),
        CancelOutcome::Cancelled => "cancelled",
        CancelOutcome::Requested => "requested",
        _ => "too_late",
    };
    Ok(ctx.redirect(&format!("/jobs/{id}?done={done}")))
}

/// `POST /groups/cancel` (`id`: the group).
pub(crate) async fn cancel_group(
    State(ctx): State<Ctx>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let group = form
        .get("id")
        .ok_or_else(|| PageError::BadRequest("no group named".into()))?
        .to_owned();
    let cancelled = match ctx.client.cancel_group(group.clone()).await? {
        CancelOutcome::Group { cancelled, .. } => cancelled,
        _ => 0,
    };
    Ok(ctx.redirect(&format!(
        "/groups/show?id={}&done=group_cancelled&n={cancelled}",
        query_value(&group)
    )))
}

/// `POST /queues/pause` (`name`).
pub(crate) async fn pause_queue(
    State(ctx): State<Ctx>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    set_paused(&ctx, &body, true).await
}

/// `POST /queues/resume` (`name`).
pub(crate) async fn resume_queue(
    State(ctx): State<Ctx>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    set_paused(&ctx, &body, false).await
}

async fn set_paused(ctx: &Ctx, body: &[u8], pause: bool) -> Result<Redirect, PageError> {
    let form = ctx.authorise(body)?;
    let name = form
        .get("name")
        .ok_or_else(|| PageError::BadRequest("no queue named".into()))?;
    let done = if pause {
        ctx.client.pause(name).await?;
        "paused"
    } else {
        ctx.client.resume(name).await?;
        "resumed"
    };
    Ok(ctx.redirect(&format!("/queues?done={done}")))
}

/// `POST /schedules/pause`, `/schedules/resume`, `/schedules/trigger` (`name`): then back
/// to the schedules, saying what was done.
pub(crate) async fn control_schedule(
    State(ctx): State<Ctx>,
    Path(action): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let name = form
        .get("name")
        .ok_or_else(|| PageError::BadRequest("no schedule named".into()))?;
    let (changed, done) = match action.as_str() {
        "pause" => (ctx.client.pause_schedule(name).await?, "schedule_paused"),
        "resume" => (ctx.client.resume_schedule(name).await?, "schedule_resumed"),
        "trigger" => (
            ctx.client.trigger_schedule(name).await?,
            "schedule_triggered",
        ),
        _ => return Err(PageError::NotFound(format!("no action {action:?}"))),
    };
    let done = if changed { done } else { "schedule_unchanged" };
    Ok(ctx.redirect(&format!("/schedules?done={done}")))
}

/// `POST /queues/weight` (`name`, `key`, `weight`): a fairness key's weight in a queue,
/// then back to the queue's keys.
pub(crate) async fn set_weight(State(ctx): State<Ctx>, body: Bytes) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let name = form
        .get("name")
        .ok_or_else(|| PageError::BadRequest("no queue named".into()))?;
    validate_queue_name(name).map_err(|_| PageError::BadRequest(QUEUE_NAME_RULE.into()))?;
    // (the empty key is a key: the jobs enqueued without one)
    let key = form
        .get("key")
        .ok_or_else(|| PageError::BadRequest("no fairness key given".into()))?;
    validate_fair_key(key).map_err(|_| {
        PageError::BadRequest(format!(
            "a fairness key is at most {MAX_FAIR_KEY_BYTES} bytes, without NUL"
        ))
    })?;
    let weight = weight(form.get("weight").unwrap_or_default())?;
    ctx.client.set_fair_weight(name, key, weight).await?;
    Ok(ctx.redirect(&format!(
        "/queues/keys?name={}&done=weight_set",
        query_value(name)
    )))
}

/// `POST /queues/key-limit` (`name`, `running`, `rate`, `per_ms`: an empty `running` or
/// `rate` removes that limit): the limits on each fairness key of a queue, then back to
/// the queue's keys.
pub(crate) async fn set_key_limit(
    State(ctx): State<Ctx>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let name = form
        .get("name")
        .ok_or_else(|| PageError::BadRequest("no queue named".into()))?;
    validate_queue_name(name).map_err(|_| PageError::BadRequest(QUEUE_NAME_RULE.into()))?;
    let whole = |field: &str, max: u64| -> Result<Option<u64>, PageError> {
        match form.get(field).map(str::trim).unwrap_or_default() {
            "" => Ok(None),
            text => text
                .parse()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .map(Some)
                .ok_or_else(|| {
                    PageError::BadRequest(format!(
                        "{field} is a whole number from 1 to {max}, or empty"
                    ))
                }),
        }
    };
    let mut limits = KeyLimits::none();
    if let Some(n) = whole("running", 1_000_000)? {
        limits = limits.concurrency(n as u32);
    }
    if let Some(starts) = whole("rate", 1_000_000)? {
        let per_ms = whole("per_ms", 86_400_000)?
            .ok_or_else(|| PageError::BadRequest("a rate needs its period (per_ms)".into()))?;
        limits = limits.rate(starts as u32, Duration::from_millis(per_ms));
    }
    ctx.client.set_key_limits(name, limits).await?;
    Ok(ctx.redirect(&format!(
        "/queues/keys?name={}&done=key_limit_set",
        query_value(name)
    )))
}

/// A weight as a form gives it: a whole number from 1 to [`MAX_FAIR_WEIGHT`].
fn weight(text: &str) -> Result<u32, PageError> {
    text.trim()
        .parse()
        .ok()
        .filter(|w| (1..=MAX_FAIR_WEIGHT).contains(w))
        .ok_or_else(|| {
            PageError::BadRequest(format!(
                "a weight is a whole number from 1 to {MAX_FAIR_WEIGHT}"
            ))
        })
}

/// `POST /dead/retry` (`id`, repeated): back to the dead letters, or with `single`, to the
/// retried job's page.
pub(crate) async fn retry_dead(State(ctx): State<Ctx>, body: Bytes) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let ids = ids(&form)?;
    let retried: Vec<JobId> = ctx
        .client
        .dead_letters()
        .retry_many(&ids)
        .await?
        .into_iter()
        .map(|(_, new_id)| new_id)
        .collect();
    match (form.get("single"), retried.as_slice()) {
        (Some(_), [new_id]) => Ok(ctx.redirect(&format!("/jobs/{new_id}?done=retried&n=1"))),
        _ => Ok(ctx.redirect(&format!("/dead?done=retried&n={}", retried.len()))),
    }
}

/// `POST /dead/delete` (`id`, repeated).
pub(crate) async fn delete_dead(
    State(ctx): State<Ctx>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    let form = ctx.authorise(&body)?;
    let ids = ids(&form)?;
    let deleted = ctx.client.dead_letters().delete_many(&ids).await?.len();
    Ok(ctx.redirect(&format!("/dead?done=deleted&n={deleted}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_compared_whole() {
        let (a, b) = (new_csrf_token(), new_csrf_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(constant_time_eq(a.as_bytes(), a.as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), b.as_bytes()));
        assert!(!constant_time_eq(a.as_bytes(), &a.as_bytes()[..63]));
        assert!(!constant_time_eq(b"", a.as_bytes()));
    }

    #[test]
    fn forms_keep_repeated_fields() {
        let form = Form::parse(b"csrf=t&id=1&id=22&reason=a+b%26c");
        assert_eq!(form.get("csrf"), Some("t"));
        assert_eq!(form.all("id").collect::<Vec<_>>(), ["1", "22"]);
        assert_eq!(form.get("reason"), Some("a b&c"));
        assert!(ids(&Form::parse(b"id=x")).is_err());
        assert!(ids(&Form::parse(b"csrf=t")).is_err());
    }

    #[test]
    fn weights_are_whole_numbers_in_range() {
        assert_eq!(weight("1").ok(), Some(1));
        assert_eq!(weight(" 1000 ").ok(), Some(MAX_FAIR_WEIGHT));
        for bad in ["", "0", "1001", "-1", "2.5", "x", "99999999999999999999"] {
            assert!(
                matches!(weight(bad), Err(PageError::BadRequest(_))),
                "{bad:?}"
            );
        }
    }
}
