//! What the live workers report: the worker processes with the jobs they run
//! (with quiet, resume and stop), and the periodic schedules they tick (with
//! run now, pause and resume).

use axum::response::Response;
use maud::{Markup, html};
use redjob::backend::Backend;
use redjob::ops::{Admin, WorkerControl, WorkerInfo};

use crate::Ctx;
use crate::error::WebResult;
use crate::fmt::{relative, span, when};
use crate::layout::{Nav, csrf, name, name_link, render, seg};

pub(crate) async fn workers(ctx: Ctx) -> WebResult<Response> {
    let client = &ctx.app.client;
    let workers = client.workers().await?;
    let now = client.backend().now_ms().await?;
    let ro = ctx.read_only;
    let body = html! {
        h1 { "Workers" }
        p.muted { "Worker processes alive now. Each refreshes its entry with its lease renewals; one that died is gone within three." }
        div #workers data-live {
            @if workers.is_empty() {
                p.muted { "No live worker." }
            }
            @for w in &workers {
                div.card {
                    h2 { (w.host) " " span.muted { "pid " (w.pid) } }
                    dl.facts {
                        dt { "Id" } dd { code { (w.id) } }
                        dt { "Queues" } dd {
                            @for (i, q) in w.queues.iter().enumerate() {
                                @if i > 0 { ", " }
                                (name(q))
                            }
                        }
                        dt { "Busy" } dd {
                            (w.running.len() + w.events.len()) " of " (w.concurrency)
                            @if !w.events.is_empty() { " (" (w.events.len()) " with events)" }
                            @if w.prefetched > 0 { ", " (w.prefetched) " prefetched" }
                        }
                        dt { "State" } dd { (state(w, now)) }
                        @if !w.subscribers.is_empty() {
                            dt { "Subscribers" } dd {
                                @for (i, s) in w.subscribers.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    (name(&s.subscriber)) " on " (name(&s.topic))
                                }
                            }
                        }
                        @if !w.job_types.is_empty() {
                            dt { "Job types" } dd {
                                details {
                                    summary { (w.job_types.len()) " known" }
                                    @for (i, t) in w.job_types.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        span title=(format!("queue {}, priority {}, unique {}{}, max attempts {}", t.queue, t.priority, t.unique.as_deref().unwrap_or("no"), t.unique_until.as_deref().map_or(String::new(), |u| format!(" until {u}")), t.max_attempts)) { (name(&t.name)) }
                                    }
                                }
                            }
                        }
                        dt { "Version" } dd { (w.version) }
                        dt { "Started" } dd { (when(w.started_at_ms)) " (" (relative(now, w.started_at_ms)) ")" }
                        dt { "Last beat" } dd { (relative(now, w.last_beat_ms)) }
                    }
                    // a stop is final: nothing more to do
                    @if !ro && !matches!(&w.control, Some(c) if c.what == WorkerControl::Stop) {
                        (controls(&ctx, w))
                    }
                    @if !w.running.is_empty() {
                        div.scroll {
                            table {
                                thead { tr { th { "Queue" } th { "Job" } th { "Type" } th.num { "Running for" } } }
                                tbody {
                                    @for r in &w.running {
                                        tr {
                                            td { (name_link(&ctx.link(&format!("/queues/{}", seg(&r.queue))), &r.queue)) }
                                            td { a href=(ctx.link(&format!("/queues/{}/jobs/{}", seg(&r.queue), seg(&r.id)))) { code { (r.id) } } }
                                            td { (name(r.job.as_deref().unwrap_or(""))) }
                                            td.num { (span(now.saturating_sub(r.started_at_ms))) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    @if !w.events.is_empty() {
                        div.scroll {
                            table {
                                thead { tr { th { "Topic" } th { "Subscriber" } th { "Event" } th { "Type" } th.num { "Running for" } } }
                                tbody {
                                    @for e in &w.events {
                                        tr {
                                            td { (name_link(&ctx.link(&format!("/topics/{}", seg(&e.topic))), &e.topic)) }
                                            td { (name(&e.subscriber)) }
                                            td { code { (e.id) } }
                                            td { (name(&e.event)) }
                                            td.num { (span(now.saturating_sub(e.started_at_ms))) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(render(&ctx, "Workers", Nav::Workers, body))
}

/// What a worker does, with who asked for it; a control it has not yet
/// followed says so.
fn state(w: &WorkerInfo, now: u64) -> Markup {
    match (&w.control, w.quiet) {
        (None, false) => html! { "running" },
        (None, true) => html! { span.badge.paused { "resuming" } },
        (Some(c), quiet) => {
            let what = match c.what {
                WorkerControl::Quiet if !quiet => "quieting",
                WorkerControl::Quiet => "quiet",
                _ => "stopping",
            };
            html! { span.badge.paused title=(when(c.at_ms)) { (what) " by " (c.by) " " (relative(now, c.at_ms)) } }
        }
    }
}

/// The buttons that quiet, resume or stop a worker (stop behind a second
/// click).
fn controls(ctx: &Ctx, w: &WorkerInfo) -> Markup {
    let quiet = matches!(&w.control, Some(c) if c.what == WorkerControl::Quiet);
    let form = |action: &str, label: &str, class: &str| {
        html! {
            form.inline method="post" action=(ctx.link(&format!("/workers/{action}"))) {
                (csrf(ctx))
                input type="hidden" name="id" value=(w.id);
                button type="submit" class=(class) { (label) }
            }
        }
    };
    html! {
        div.bar {
            @if quiet { (form("resume", "Resume", "")) } @else { (form("quiet", "Quiet", "")) }
            details.inline {
                summary.button { "Stop…" }
                p.muted { "It takes no more work, finishes what it runs (or releases it after its grace period) and leaves the registry; its application decides what follows." }
                (form("stop", "Stop this worker", "danger"))
            }
        }
    }
}

pub(crate) async fn periodic(ctx: Ctx) -> WebResult<Response> {
    let client = &ctx.app.client;
    let schedules = client.schedules().await?;
    let now = client.backend().now_ms().await?;
    let ro = ctx.read_only;
    let body = html! {
        h1 { "Periodic jobs" }
        p.muted { "The schedules live workers tick. Each tick is enqueued once, however many workers run it." }
        div #schedules .scroll data-live {
            table {
                thead { tr {
                    th { "Name" } th { "Queue" } th { "Job" } th { "Schedule" } th { "Last tick" } th { "Next tick" }
                    th.num { "Workers" } th { "Paused" } @if !ro { th { "" } }
                } }
                tbody {
                    @for s in &schedules {
                        tr {
                            td { (name(&s.name)) }
                            td { (name_link(&ctx.link(&format!("/queues/{}", seg(&s.queue))), &s.queue)) }
                            td { (name(&s.job)) }
                            td { code { (s.schedule) } }
                            td { @match s.last_ms { Some(t) => span title=(when(t)) { (relative(now, t)) }, None => span.muted { "never" } } }
                            td { @match s.next_ms { Some(t) => span title=(when(t)) { (relative(now, t)) }, None => span.muted { "never" } } }
                            td.num { (s.workers) }
                            td {
                                @match &s.paused {
                                    Some(p) => span.badge.paused title=(when(p.at_ms)) { "paused by " (p.by) " " (relative(now, p.at_ms)) },
                                    None => span.muted { "no" },
                                }
                            }
                            @if !ro {
                                td {
                                    @for (action, label) in [("run", "Run now"), (if s.paused.is_some() { "resume" } else { "pause" }, if s.paused.is_some() { "Resume" } else { "Pause" })] {
                                        @if action != "run" || s.body.is_some() {
                                            form.inline method="post" action=(ctx.link(&format!("/periodic/{action}"))) {
                                                (csrf(&ctx))
                                                input type="hidden" name="queue" value=(s.queue);
                                                input type="hidden" name="name" value=(s.name);
                                                button type="submit" { (label) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    @if schedules.is_empty() {
                        tr { td colspan="9" .muted { "No periodic schedule: no live worker ticks one." } }
                    }
                }
            }
        }
    };
    Ok(render(&ctx, "Periodic jobs", Nav::Periodic, body))
}
