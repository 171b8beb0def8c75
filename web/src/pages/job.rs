//! One job: its arguments, state, attempts, last error and times, and the
//! actions its state allows (run now, cancel, requeue, delete).

use std::borrow::Cow;

use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use redjob::backend::Backend;
use redjob::inspect::{Attempt, Inspect, JobState};
use redjob::ops::{Admin, Unserved};

use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::{SHOWN, job_type, num, pretty, relative, span, when};
use crate::layout::{Nav, button, name, render, seg};
use crate::params::parse_id;

pub(crate) async fn page(
    ctx: Ctx,
    Path((queue, id)): Path<(String, String)>,
) -> WebResult<Response> {
    let client = &ctx.app.client;
    let id = parse_id(&id)?;
    let job = client.job(&queue, &id).await?.ok_or_else(|| {
        WebError::NotFound(format!(
            "no job {id} in {queue:?}: it finished, was deleted, or never was"
        ))
    })?;
    let now = client.backend().now_ms().await?;
    // the live workers, read once for both below (the registry holds every
    // worker's last beat with its running jobs), and only when one needs them
    let waits = matches!(job.state, JobState::Ready | JobState::Scheduled);
    let workers = if job.state == JobState::InFlight || (waits && job.job_name().is_some()) {
        client.workers().await?
    } else {
        Vec::new()
    };
    let runner = if job.state == JobState::InFlight {
        workers.iter().find_map(|w| {
            let r = w
                .running
                .iter()
                .find(|r| r.queue == queue && r.id == id.to_string())?;
            Some((format!("{} (pid {})", w.host, w.pid), r.started_at_ms))
        })
    } else {
        None
    };
    // a waiting job of a type no live worker knows: for how long, and when
    // it is dead-lettered
    let unserved = match (job.state, job.job_name()) {
        (JobState::Ready | JobState::Scheduled | JobState::InFlight, Some(t)) => {
            Unserved::find(&workers, &queue, &t, id.sent_ms()).map(|u| (t, u))
        }
        _ => None,
    };
    // a flow's parent: the batch of children it waits for; a batch's job:
    // its batch, and in a flow the parent that waits for it
    let waits_for = match job.waits_for {
        Some(b) => client.batch_status(&b).await?,
        None => None,
    };
    let part_of = match job.batch() {
        Some(r) => client.batch_status(&r.batch).await?.map(|s| (r, s)),
        None => None,
    };
    let jpath = format!("/queues/{}/jobs/{id}", seg(&queue));
    // every state by name; `JobState` is `#[non_exhaustive]`, so a state
    // added later falls to its own name and a neutral time, never to "dead"
    let (state_label, time_label): (Cow<'_, str>, &str) = match job.state {
        JobState::Ready => ("ready".into(), "Due"),
        JobState::Scheduled => ("scheduled".into(), "Due"),
        JobState::InFlight => ("in flight".into(), "Lease ends"),
        JobState::Blocked => (
            job.key
                .as_ref()
                .map_or("blocked by its concurrency key".into(), |k| {
                    format!("blocked by key {:?}", k.key).into()
                }),
            "Due",
        ),
        JobState::Waiting => ("waiting for its children".into(), "Enqueued"),
        JobState::Finished => (
            job.finished
                .as_ref()
                .map_or("finished", |f| f.how.as_str())
                .into(),
            "Finished",
        ),
        JobState::Dead => ("dead".into(), "Died"),
        _ => (job.state.as_str().into(), "When"),
    };
    let body = html! {
        p.muted { a href=(ctx.link(&format!("/queues/{}", seg(&queue)))) { "← " (name(&queue)) } }
        h1 { (name(&job_type(&job))) " " code { (id) } }
        div.bar {
            @match job.state {
                JobState::Scheduled => {
                    (button(&ctx, &format!("{jpath}/run-now"), "Run now", "primary"))
                    (button(&ctx, &format!("{jpath}/cancel"), "Cancel", "danger"))
                }
                JobState::Dead => {
                    (button(&ctx, &format!("{jpath}/requeue"), "Requeue", "primary"))
                    (button(&ctx, &format!("{jpath}/delete"), "Delete", "danger"))
                }
                JobState::Finished if !job.body.is_empty() => {
                    (button(&ctx, &format!("{jpath}/retry"), "Run again", "primary"))
                }
                JobState::Finished => {}
                JobState::Ready | JobState::InFlight | JobState::Blocked | JobState::Waiting => {
                    (button(&ctx, &format!("{jpath}/cancel"), "Cancel", "danger"))
                }
                _ => {}
            }
        }
        div #job data-live {
            dl.facts {
                // one class attribute: maud writes `.badge` and `class=` as two
                dt { "State" } dd { span class=(badge(job.state == JobState::Dead)) { (state_label) } }
                dt { "Queue" } dd { (name(&queue)) }
                dt { "Priority" } dd { (job.priority) }
                dt { "Attempts" } dd { (job.attempts) }
                @if let Some(k) = &job.key {
                    dt { "Concurrency key" } dd { code { (k.key) } " (" (k.per_key) " at a time)" }
                }
                @if let Some(s) = &waits_for {
                    dt { "Waits for" }
                    dd { (s.finished()) " of " (s.total) " children finished (" (s.succeeded) " succeeded), batch " code { (s.id) } }
                }
                @if let Some((r, s)) = &part_of {
                    @match s.parent_job() {
                        Some((pq, pid)) => {
                            dt { "Waited for by" }
                            dd { a href=(ctx.link(&format!("/queues/{}/jobs/{pid}", seg(pq)))) { code { (pid) } } " (child " (r.index) " of " (s.total) ")" }
                        }
                        None => {
                            dt { "Batch" }
                            dd { code { (r.batch) } " (job " (r.index) " of " (s.total) ", " (s.finished()) " finished)" }
                        }
                    }
                }
                @if let Some(old) = job.retry_of() {
                    dt { "A copy of" } dd { a href=(ctx.link(&format!("/queues/{}/jobs/{old}", seg(&queue)))) { code { (old) } } }
                }
                @if let Some(f) = &job.finished {
                    @if let Some(by) = &f.by { dt { "By" } dd { (by) } }
                }
                dt { "Enqueued" } dd { (when(id.sent_ms())) " (" (relative(now, id.sent_ms())) ")" }
                dt { (time_label) } dd { (when(job.due_ms)) " (" (relative(now, job.due_ms)) ")" }
                @if let Some((worker, started)) = &runner {
                    dt { "Started" } dd { (when(*started)) " (" (relative(now, *started)) ") on " (worker) }
                }
                @if let Some((t, u)) = &unserved {
                    dt { "Waiting" }
                    dd.warning {
                        "for a worker that knows " code { (name(t)) } " since " (when(u.since_ms)) " (" (relative(now, u.since_ms)) ")"
                        @match u.dead_at_ms {
                            Some(at) => { ", dead-lettered at " (when(at)) " (" (relative(now, at)) ") unless one comes" }
                            None => { "; no live worker serves its queue" }
                        }
                    }
                }
            }
            @if let Some(e) = &job.last_error {
                h2 { @if job.state == JobState::Dead { "Why it died" } @else { "Last error" } }
                pre.error { (e) }
            }
            @if !job.runs.is_empty() {
                h2 { "Attempts" }
                (attempts(&job.runs))
            }
        }
        @let (text, cut) = pretty(&job);
        @if cut {
            h2 { "Body" }
            p.muted { "The first " (SHOWN / 1024) " KiB of its " (num(job.body.len() as u64)) " bytes, as stored." }
        } @else {
            h2 { "Arguments" }
        }
        pre { (text) }
    };
    Ok(render(&ctx, &format!("Job {id}"), Nav::Queues, body))
}

#[derive(serde::Deserialize, Default)]
pub(crate) struct FindQuery {
    id: Option<String>,
}

/// A job by id in whichever queue holds it (the search box of the queue
/// list): its page, or a not-found naming the id.
pub(crate) async fn find(ctx: Ctx, Query(q): Query<FindQuery>) -> WebResult<Response> {
    let text = q.id.as_deref().map(str::trim).unwrap_or_default();
    let id = parse_id(text)?;
    match ctx.app.client.locate(&id).await? {
        Some(found) => Ok(Redirect::to(
            &ctx.link(&format!("/queues/{}/jobs/{id}", seg(&found.queue))),
        )
        .into_response()),
        None => Err(WebError::NotFound(format!(
            "no job {id} in any queue: it finished, was deleted, or never was"
        ))),
    }
}

/// A job's or an event's attempts as a table: number, outcome, start, how
/// long, worker and error, what is not known said so.
pub(crate) fn attempts(runs: &[Attempt]) -> Markup {
    html! {
        table.runs {
            thead { tr { th { "#" } th { "Outcome" } th { "Started" } th { "Took" } th { "Worker" } th { "Error" } } }
            tbody {
                @for a in runs {
                    tr {
                        td { (a.number) }
                        td { span class=(badge(a.outcome.failed())) { (a.outcome.as_str()) } }
                        td {
                            @match (a.started_ms, a.lease_end_ms) {
                                (Some(s), _) => { (when(s)) }
                                (None, Some(l)) => { "unknown (lease ran out " (when(l)) ")" }
                                _ => { "unknown" }
                            }
                        }
                        td { @match a.duration() { Some(d) => { (span(d.as_millis() as u64)) }, None => { "unknown" } } }
                        td {
                            @match (&a.worker, &a.host) {
                                (Some(w), Some(h)) => { code { (w) } " on " (h) }
                                (Some(w), None) => { code { (w) } }
                                _ => { "unknown" }
                            }
                        }
                        td { @if let Some(e) = &a.error { pre.error { (e) } } }
                    }
                }
            }
        }
    }
}

/// The classes of a badge, red when `dead`.
fn badge(dead: bool) -> &'static str {
    if dead { "badge dead" } else { "badge" }
}
