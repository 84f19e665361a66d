//! The workflow pages (ADR 0033): `/workflows` lists them, newest first; `/workflows/{id}`
//! shows one as a unit (its tasks' states, the graph as layers and as each task's parents)
//! with its cancel and retry; the two POSTs act on it.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Redirect;
use serde::Deserialize;

use super::html::{action, badge, escape, fields, link, opt_time, query_value, table, time};
use super::pages::{Done, PAGE_SIZE, PageResult};
use super::{Ctx, PageError};
use crate::client::{TaskInfo, WorkflowInfo, WorkflowQuery};
use crate::error::ClientError;
use crate::vocabulary::JobId;
use crate::workflow::WorkflowId;

/// Tasks a workflow page shows.
const TASKS_PAGE: u32 = 200;

/// `/workflows`' query: a name, a cursor.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListPage {
    name: Option<String>,
    before: Option<i64>,
}

/// `GET /workflows`.
pub(crate) async fn list(State(ctx): State<Ctx>, Query(page): Query<ListPage>) -> PageResult {
    let mut query = WorkflowQuery::new().limit(PAGE_SIZE);
    let name = page.name.filter(|n| !n.trim().is_empty());
    if let Some(name) = &name {
        query = query.name(name.clone());
    }
    if let Some(before) = page.before {
        query = query.before(WorkflowId::new(before));
    }
    let workflows = ctx.client.workflows(&query).await?;
    let rows: Vec<Vec<String>> = workflows
        .workflows
        .iter()
        .map(|w| {
            vec![
                link(
                    &ctx.href(&format!("/workflows/{}", w.id)),
                    &w.id.to_string(),
                ),
                escape(&w.name),
                badge(w.state.as_str()),
                format!("{} / {}", w.ended, w.tasks),
                w.dead.to_string(),
                w.cancelled.to_string(),
                time(w.created_at),
            ]
        })
        .collect();
    let mut body = format!(
        "<form method=\"get\" class=\"filters\" action=\"{}\">\
         <input type=\"text\" name=\"name\" value=\"{}\" placeholder=\"workflow name\">\
         <button type=\"submit\">Filter</button></form>",
        escape(&ctx.href("/workflows")),
        escape(name.as_deref().unwrap_or_default())
    );
    body.push_str(&table(
        &[
            "Id",
            "Name",
            "State",
            "Tasks ended",
            "Dead",
            "Cancelled",
            "Enqueued",
        ],
        &rows,
        "No workflows.",
    ));
    if let Some(next) = workflows.next {
        let mut href = format!("/workflows?before={next}");
        if let Some(name) = &name {
            href.push_str(&format!("&name={}", query_value(name)));
        }
        body.push_str(&format!(
            "<p class=\"pager\"><a href=\"{}\" id=\"next-page\">Older →</a></p>",
            escape(&ctx.href(&href))
        ));
    }
    let shell = ctx.shell("Workflows", "/workflows", &Done::default());
    Ok(ctx.render(&shell, &body))
}

/// `/workflows/{id}`'s query: the tasks' cursor, and what an action did.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ShowPage {
    after: Option<u32>,
    // (Done's fields, not `#[serde(flatten)]`: a flattened query takes every value as
    // text, and `n` would not parse)
    done: Option<String>,
    n: Option<u64>,
}

fn parse_id(text: &str) -> Result<WorkflowId, PageError> {
    text.parse()
        .map(WorkflowId::new)
        .map_err(|_| PageError::BadRequest(format!("{text:?} is not a workflow id")))
}

/// Each task's layer in the graph: 1 for a task without parents, else one more than its
/// deepest parent's (parents come before their tasks; a parent on an earlier page counts
/// as layer 1).
fn layers(tasks: &[TaskInfo]) -> Vec<(u32, &TaskInfo)> {
    let mut depth: HashMap<&str, u32> = HashMap::new();
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        let layer = task
            .parents
            .iter()
            .map(|p| depth.get(p.as_str()).copied().unwrap_or(1) + 1)
            .max()
            .unwrap_or(1);
        depth.insert(task.name.as_str(), layer);
        out.push((layer, task));
    }
    out
}

/// The graph drawn as layers: each layer's tasks, with their states, left to right.
fn graph(ctx: &Ctx, tasks: &[TaskInfo]) -> String {
    let mut by_layer: Vec<Vec<&TaskInfo>> = Vec::new();
    for (layer, task) in layers(tasks) {
        let index = layer as usize - 1;
        if by_layer.len() <= index {
            by_layer.resize(index + 1, Vec::new());
        }
        by_layer[index].push(task);
    }
    let mut out = String::from("<div class=\"graph\" id=\"workflow-graph\">");
    for (index, layer) in by_layer.iter().enumerate() {
        out.push_str(&format!(
            "<div class=\"layer\"><p class=\"muted\">layer {}</p>",
            index + 1
        ));
        for task in layer {
            out.push_str(&format!(
                "<div class=\"node\" data-task=\"{}\">{} {}</div>",
                escape(&task.name),
                link(&ctx.href(&format!("/jobs/{}", task.job)), &task.name),
                badge(&task.state)
            ));
        }
        out.push_str("</div>");
    }
    out.push_str("</div>");
    out
}

fn summary(workflow: &WorkflowInfo) -> String {
    let mut pairs = vec![
        ("Name", escape(&workflow.name)),
        ("State", badge(workflow.state.as_str())),
        (
            "Tasks",
            format!(
                "<span id=\"workflow-counts\">{} ended of {}: {} completed, {} dead, {} \
                 cancelled</span>",
                workflow.ended,
                workflow.tasks,
                workflow.completed,
                workflow.dead,
                workflow.cancelled
            ),
        ),
        ("Enqueued", time(workflow.created_at)),
    ];
    if let Some(at) = workflow.cancelled_at {
        pairs.push(("Cancelled", time(at)));
    }
    fields(&pairs)
}

/// The "Workflow" field of a job's and a dead letter's page: the workflow (linked) and the
/// task the job is, `None` for a job of no workflow; a role granted before
/// `harel_job_workflow` existed is told it may not read it.
pub(crate) async fn task_field(ctx: &Ctx, id: JobId) -> Result<Option<String>, PageError> {
    match ctx.client.job_workflow(id).await {
        Ok(Some(task)) => Ok(Some(format!(
            "<span id=\"job-workflow\">{}, task {}</span>",
            link(
                &ctx.href(&format!("/workflows/{}", task.workflow)),
                &format!("workflow {} ({})", task.workflow, task.workflow_name)
            ),
            escape(&task.task)
        ))),
        Ok(None) => Ok(None),
        Err(ClientError::Database(error)) if error.is_permission_denied() => Ok(Some(
            "<span class=\"muted\" id=\"job-workflow\">not shown: this role may not read it \
             (grant it EXECUTE on harel_job_workflow, see the guide's Database roles)</span>"
                .to_owned(),
        )),
        Err(error) => Err(error.into()),
    }
}

/// `GET /workflows/{id}`.
pub(crate) async fn show(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    Query(page): Query<ShowPage>,
) -> PageResult {
    let id = parse_id(&id)?;
    let workflow = ctx
        .client
        .workflow_info(id)
        .await?
        .ok_or_else(|| PageError::NotFound(format!("no workflow {id}")))?;
    let after = page.after.unwrap_or(0);
    let tasks = ctx.client.workflow_tasks(id, after, TASKS_PAGE).await?;
    let mut body = summary(&workflow);
    if !ctx.read_only {
        let open = workflow.tasks - workflow.ended;
        if open > 0 {
            body.push_str(&action(
                &ctx.href(&format!("/workflows/{id}/cancel")),
                &ctx.csrf,
                &[],
                "Cancel workflow",
                "danger",
                Some(&format!(
                    "Cancel the {open} task(s) of workflow {id} that have not ended?"
                )),
            ));
        }
        if workflow.failed > 0 {
            body.push_str(&action(
                &ctx.href(&format!("/workflows/{id}/retry")),
                &ctx.csrf,
                &[],
                "Retry failed tasks",
                "",
                Some(&format!(
                    "Enqueue the {} failed task(s) of workflow {id} again?",
                    workflow.failed
                )),
            ));
        }
    }
    body.push_str("<h2>Graph</h2>");
    body.push_str(&graph(&ctx, &tasks.tasks));
    let rows: Vec<Vec<String>> = tasks
        .tasks
        .iter()
        .map(|t| {
            vec![
                t.ordinal.to_string(),
                escape(&t.name),
                ctx.job_link(t.job),
                badge(&t.state),
                if t.parents.is_empty() {
                    "–".to_owned()
                } else {
                    escape(&t.parents.join(", "))
                },
                t.parent_outcomes
                    .map(|o| {
                        format!(
                            "{} completed, {} dead, {} cancelled",
                            o.completed, o.dead, o.cancelled
                        )
                    })
                    .unwrap_or_default(),
                opt_time(t.ended_at),
            ]
        })
        .collect();
    body.push_str("<h2>Tasks</h2>");
    body.push_str(&table(
        &[
            "#",
            "Task",
            "Job",
            "State",
            "Waits for",
            "Its parents",
            "Ended",
        ],
        &rows,
        "No tasks.",
    ));
    if let Some(next) = tasks.next {
        body.push_str(&format!(
            "<p class=\"pager\"><a href=\"{}\">Next tasks →</a></p>",
            escape(&ctx.href(&format!("/workflows/{id}?after={next}")))
        ));
    }
    let title = format!("Workflow {id}");
    let done = Done {
        done: page.done,
        n: page.n,
    };
    let shell = ctx.shell(&title, "/workflows", &done);
    Ok(ctx.render(&shell, &body))
}

/// `POST /workflows/{id}/cancel`.
pub(crate) async fn cancel(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    ctx.authorise(&body)?;
    let id = parse_id(&id)?;
    let done = ctx.client.cancel_workflow(id).await?;
    Ok(ctx.redirect(&format!(
        "/workflows/{id}?done=workflow_cancelled&n={}",
        done.cancelled + done.running_requested
    )))
}

/// `POST /workflows/{id}/retry`.
pub(crate) async fn retry(
    State(ctx): State<Ctx>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Redirect, PageError> {
    ctx.authorise(&body)?;
    let id = parse_id(&id)?;
    let retried = ctx.client.retry_workflow(id).await?;
    Ok(ctx.redirect(&format!(
        "/workflows/{id}?done=workflow_retried&n={retried}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(name: &str, parents: &[&str]) -> TaskInfo {
        TaskInfo {
            ordinal: 0,
            name: name.to_owned(),
            job: JobId::new(1),
            state: "pending".to_owned(),
            kind: None,
            attempts: None,
            last_error: None,
            parents: parents.iter().map(|p| (*p).to_owned()).collect(),
            parent_outcomes: None,
            ended_at: None,
        }
    }

    #[test]
    fn a_tasks_layer_is_one_more_than_its_deepest_parents() {
        let tasks = [
            task("a", &[]),
            task("b", &["a"]),
            task("c", &[]),
            task("d", &["b", "c"]),
        ];
        let got: Vec<(u32, &str)> = layers(&tasks)
            .into_iter()
            .map(|(layer, t)| (layer, t.name.as_str()))
            .collect();
        assert_eq!(got, [(1, "a"), (2, "b"), (1, "c"), (3, "d")]);
    }
}
