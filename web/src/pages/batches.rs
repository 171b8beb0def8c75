//! Batches and flows: the list, newest first, each with a progress bar, and
//! one batch with its counts, its flow's parent and its dead jobs.

use axum::extract::{Path, Query};
use axum::response::Response;
use maud::{Markup, html};
use redjob::backend::Backend;
use redjob::ops::{BatchId, BatchStatus};

use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::{relative, when};
use crate::layout::{Nav, button, name, render, seg};

/// Batches listed on one page.
const PAGE: usize = 50;

#[derive(serde::Deserialize, Default)]
pub(crate) struct ListQuery {
    /// Batches opened before this (Unix ms): the next page.
    before: Option<u64>,
}

/// Where a batch stands, in words.
fn state(s: &BatchStatus) -> String {
    if s.completed_ms.is_some() {
        if s.dead + s.cancelled > 0 {
            "complete, with failures".into()
        } else {
            "complete".into()
        }
    } else if s.cancelled_at_ms.is_some() {
        "cancelling (workers cancel its jobs as they fetch them)".into()
    } else if !s.sealed {
        "open (its enqueue has not finished)".into()
    } else {
        "running".into()
    }
}

/// Its progress: a bar of the jobs finished, and the percentage.
fn progress(s: &BatchStatus) -> Markup {
    let pct = s.percent();
    html! {
        progress value=(s.finished()) max=(s.total.max(1)) title=(format!("{} of {} finished", s.finished(), s.total)) {}
        " " (pct) "%"
    }
}

pub(crate) async fn list(ctx: Ctx, Query(q): Query<ListQuery>) -> WebResult<Response> {
    let client = &ctx.app.client;
    let batches = client.batches(q.before, PAGE).await?;
    let now = client.backend().now_ms().await?;
    let body = html! {
        h1 { "Batches" }
        p.muted { "Batches and flows (a flow's parent waits for the jobs of its batch), newest first. A batch is kept 7 days after it completed." }
        div #batches data-live {
            @if batches.is_empty() {
                p.muted { "No batch." }
            } @else {
                div.scroll {
                    table {
                        thead { tr {
                            th { "Batch" } th { "Description" } th { "State" } th { "Progress" }
                            th.num { "Succeeded" } th.num { "Dead" } th.num { "Cancelled" } th.num { "Pending" } th { "Opened" }
                        } }
                        tbody {
                            @for s in &batches {
                                tr {
                                    td { a href=(ctx.link(&format!("/batches/{}", seg(&s.id)))) { code { (s.id) } } }
                                    td { (name(s.description.as_deref().unwrap_or(""))) }
                                    td { (state(s)) }
                                    td { (progress(s)) }
                                    td.num { (s.succeeded) }
                                    td.num { (s.dead) }
                                    td.num { (s.cancelled) }
                                    td.num { (s.pending()) }
                                    td { (relative(now, s.created_ms)) }
                                }
                            }
                        }
                    }
                }
                @if batches.len() >= PAGE {
                    @if let Some(last) = batches.last() {
                        p { a href=(ctx.link(&format!("/batches?before={}", last.created_ms))) { "Older →" } }
                    }
                }
            }
        }
    };
    Ok(render(&ctx, "Batches", Nav::Batches, body))
}

pub(crate) async fn page(ctx: Ctx, Path(id): Path<String>) -> WebResult<Response> {
    let client = &ctx.app.client;
    let id: BatchId = id
        .parse()
        .map_err(|_| WebError::NotFound(format!("{id:?} is not a batch id")))?;
    let s = client.batch_status(&id).await?.ok_or_else(|| {
        WebError::NotFound(format!(
            "no batch {id}: unknown, or past its retention (7 days after it completed)"
        ))
    })?;
    let dead = client.batch_dead(&id, 1000).await?;
    let now = client.backend().now_ms().await?;
    let job_link = |q: &str, j: &str| ctx.link(&format!("/queues/{}/jobs/{}", seg(q), seg(j)));
    let body = html! {
        p.muted { a href=(ctx.link("/batches")) { "← Batches" } }
        h1 { "Batch " code { (s.id) } }
        @if s.completed_ms.is_none() && s.cancelled_at_ms.is_none() {
            div.bar { (button(&ctx, &format!("/batches/{id}/cancel"), "Cancel batch", "danger")) }
        }
        div #batch data-live {
            dl.facts {
                @if let Some(d) = &s.description { dt { "Description" } dd { (d) } }
                dt { "State" } dd { (state(&s)) }
                dt { "Progress" } dd { (progress(&s)) }
                dt { "Jobs" } dd { (s.total) " in all: " (s.succeeded) " succeeded, " (s.dead) " dead, " (s.cancelled) " cancelled, " (s.pending()) " pending" }
                @if let Some((q, p)) = s.parent_job() {
                    dt { "Flow's parent" }
                    dd { a href=(job_link(q, p.as_ref())) { code { (p) } } " in " (name(q)) ", runs once every job succeeded" }
                }
                @if let Some(f) = &s.first_failure {
                    dt { "First failure" } dd.warning { (f) }
                }
                dt { "Opened" } dd { (when(s.created_ms)) " (" (relative(now, s.created_ms)) ")" }
                @if let Some(at) = s.cancelled_at_ms {
                    dt { "Cancelled" } dd { (when(at)) " (" (relative(now, at)) ")" }
                }
                @if let Some(at) = s.completed_ms {
                    dt { "Completed" } dd { (when(at)) " (" (relative(now, at)) ")" }
                }
            }
            @if !dead.is_empty() {
                h2 { "Dead jobs" }
                p.muted { "In order of death (a batch keeps its first 1,000); each is a dead letter of its queue while the queue keeps it." }
                div.scroll {
                    table {
                        thead { tr { th { "Queue" } th { "Job" } } }
                        tbody {
                            @for (q, j) in &dead {
                                tr {
                                    td { (name(q)) }
                                    td { a href=(job_link(q, j.as_ref())) { code { (j) } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(render(&ctx, &format!("Batch {id}"), Nav::Batches, body))
}
