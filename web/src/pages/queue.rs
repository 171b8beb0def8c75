//! One queue: its figures and settings, its jobs by state a page at a time,
//! search by id, and pause, resume and purge.

use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use redjob::JobId;
use redjob::backend::Backend;
use redjob::inspect::{Cursor, Inspect, JobInfo, JobState};
use redjob::ops::{Admin, QueueSettings, Setting};
use redjob::queue::Queues;
use serde::Deserialize;

use super::overview::line;
use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::{job_type, num, preview, relative, shorten};
use crate::layout::{Nav, button, csrf, link_button, name, query, render, seg};

#[derive(Deserialize, Default)]
pub(crate) struct QueueQuery {
    state: Option<String>,
    after: Option<String>,
    id: Option<String>,
}

/// The states listed on the queue page (dead letters have their own); the
/// finished jobs are the queue's history, newest first; the blocked ones wait
/// for their concurrency keys, listed by key.
const TABS: [(JobState, &str, &str); 5] = [
    (JobState::Ready, "ready", "Ready"),
    (JobState::Scheduled, "scheduled", "Scheduled"),
    (JobState::InFlight, "in_flight", "In flight"),
    (JobState::Blocked, "blocked", "Blocked"),
    (JobState::Finished, "finished", "Finished"),
];

pub(crate) async fn page(
    ctx: Ctx,
    Path(queue): Path<String>,
    Query(q): Query<QueueQuery>,
) -> WebResult<Response> {
    let client = &ctx.app.client;
    let qpath = format!("/queues/{}", seg(&queue));
    let mut missing = None;
    if let Some(id) = q.id.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        match id.parse::<JobId>() {
            Ok(id) if client.job(&queue, &id).await?.is_some() => {
                return Ok(Redirect::to(&ctx.link(&format!("{qpath}/jobs/{id}"))).into_response());
            }
            _ => missing = Some(id.to_string()),
        }
    }
    let now = client.backend().now_ms().await?;
    let l = line(client, queue.clone())
        .await?
        .ok_or_else(|| WebError::NotFound(format!("no queue {queue:?}")))?;
    let attrs = client.queues().attributes(&queue).await?;
    let settings = client.settings(&queue).await?;
    let usage = client.limit_usage(&queue).await?;
    let times = client.run_times(&queue).await?;
    let keys = client.keys(&queue, None, KEYS_SHOWN).await?;
    let (state, key, _) = match q.state.as_deref().filter(|s| !s.is_empty()) {
        None => TABS[0],
        Some(wanted) => TABS
            .iter()
            .find(|(_, k, _)| *k == wanted)
            .copied()
            .ok_or_else(|| {
                let known: Vec<&str> = TABS.iter().map(|(_, k, _)| *k).collect();
                WebError::BadRequest(format!(
                    "no state {wanted:?}: use one of {}",
                    known.join(", ")
                ))
            })?,
    };
    let after = match q.after.as_deref().filter(|s| !s.is_empty()) {
        Some(c) => Some(
            c.parse::<Cursor>()
                .map_err(|e| WebError::BadRequest(e.to_string()))?,
        ),
        None => None,
    };
    let list = client
        .list(&queue, state, after.as_ref(), ctx.app.page_size)
        .await?;
    // the history's events (purges) above its first page
    let events = if state == JobState::Finished && after.is_none() {
        client.history_events(&queue).await?
    } else {
        Vec::new()
    };
    // a tab's count; none for the history (no count kept)
    let count = |s: JobState| match s {
        JobState::Ready => Some(l.counts.ready),
        JobState::Scheduled => Some(l.counts.scheduled),
        JobState::InFlight => Some(l.counts.in_flight),
        JobState::Blocked => Some(l.counts.blocked),
        JobState::Dead => Some(l.counts.dead),
        _ => None,
    };
    let body = html! {
        h1 { (name(&queue)) " " @if l.paused { span.badge.paused { "paused" } } }
        div.bar {
            @if l.paused {
                (button(&ctx, &format!("{qpath}/resume"), "Resume", "primary"))
            } @else {
                (button(&ctx, &format!("{qpath}/pause"), "Pause", ""))
            }
            @if usage.throttled_until_ms.is_some() {
                (button(&ctx, &format!("{qpath}/unthrottle"), "End throttle", ""))
            }
            (link_button(&ctx, &format!("{qpath}/purge"), "Purge…", "danger"))
            form.inline method="get" action=(ctx.link(&qpath)) {
                input type="search" name="id" placeholder="Job id" aria-label="Find a job by id" size="34";
                " " button type="submit" { "Find" }
            }
        }
        @if let Some(id) = &missing {
            p.error role="alert" { "No job " code { (id) } " in this queue." }
        }
        div #figures .cards data-live {
            div.card { b { (num(l.counts.ready)) } span { "ready" } }
            div.card { b { (num(l.counts.scheduled)) } span { "scheduled" } }
            div.card { b { (num(l.counts.in_flight)) } span { "in flight" } }
            div.card { b { a href=(ctx.link(&format!("{qpath}/dead"))) { (num(l.counts.dead)) } } span { "dead" } }
            @if l.counts.blocked > 0 {
                div.card { b { (num(l.counts.blocked)) } span { "blocked by keys" } }
            }
            div.card { b { (num(l.stats.processed)) } span { "processed" } }
            div.card { b { (num(l.stats.failed)) } span { "failed" } }
        }
        div #chart data-live { (crate::chart::chart(&l.minutes)) }
        p.muted {
            "Lease " (attrs.vt) " s · delay " (attrs.delay) " s · maxsize "
            @if attrs.maxsize < 0 { "none" } @else { (attrs.maxsize) " bytes" }
        }
        @if !times.is_empty() {
            section #run-times {
                h2 { "Run times" }
                table {
                    thead { tr { th { "Type" } th.num { "Runs" } th.num { "p50" } th.num { "p99" } } }
                    tbody {
                        @for t in &times {
                            tr {
                                td { (name(&t.job_type)) }
                                td.num { (num(t.count())) }
                                td.num { (bound(t.quantile(0.5))) }
                                td.num { (bound(t.quantile(0.99))) }
                            }
                        }
                    }
                }
                p.muted { "Each figure is the upper bound of its bucket (1-2-5 steps from 1 ms to 1,000 s)." }
            }
        }
        @if !keys.keys.is_empty() {
            (keys_section(&keys))
        }
        (settings_form(&ctx, &qpath, &settings, &usage))
        nav.tabs aria-label="Jobs by state" {
            @for (s, k, label) in TABS {
                a href=(ctx.link(&format!("{qpath}{}", query(&[("state", k)]))))
                    aria-current=[(s == state).then_some("page")] {
                        (label)
                        @if let Some(n) = count(s) { " (" (num(n)) ")" }
                    }
            }
            a href=(ctx.link(&format!("{qpath}/dead"))) { "Dead (" (num(l.counts.dead)) ")" }
        }
        div #jobs data-live {
            @if !events.is_empty() {
                ul #events {
                    @for e in &events {
                        li {
                            (crate::fmt::when(e.at_ms)) ": " (e.what)
                            @if e.count > 0 { " " (num(e.count)) " jobs" }
                            @if let Some(by) = &e.by { " by " (by) }
                        }
                    }
                }
            }
            (jobs_table(&ctx, &queue, &list.jobs, now))
            div.pager {
                @if after.is_some() {
                    a href=(ctx.link(&format!("{qpath}{}", query(&[("state", key)])))) { "← First page" }
                }
                @if let Some(next) = list.next {
                    a href=(ctx.link(&format!("{qpath}{}", query(&[("state", key), ("after", &next.to_string())])))) { "Next page →" }
                }
            }
        }
    };
    Ok(render(&ctx, &queue, Nav::Queues, body))
}

/// How many of a queue's concurrency keys its page shows.
const KEYS_SHOWN: usize = 20;

/// The queue's concurrency keys (a first page of them): each key's places,
/// running, holding and blocked jobs.
fn keys_section(page: &redjob::ops::KeyPage) -> Markup {
    html! {
        section #keys {
            h2 { "Concurrency keys" }
            table {
                thead {
                    tr {
                        th { "Key" } th.num { "Per key" } th.num { "Running" } th.num { "Holding" }
                        th.num { "Blocked" }
                    }
                }
                tbody {
                    @for k in &page.keys {
                        tr {
                            td { code { (k.key) } }
                            td.num { (k.per_key) }
                            td.num { (num(k.running)) }
                            td.num { (num(k.holding)) }
                            td.num { (num(k.blocked)) }
                        }
                    }
                }
            }
            @if page.next.is_some() {
                p.muted { "The first " (page.keys.len()) " keys: " code { "redjob queue keys <queue>" } " lists them all." }
            }
        }
    }
}

/// The queue's settings in force for every worker, stored with the queue or
/// the defaults, and (unless read-only) a form that changes them.
fn settings_form(
    ctx: &Ctx,
    qpath: &str,
    s: &QueueSettings,
    usage: &redjob::ops::LimitUsage,
) -> Markup {
    let dead = s.in_force().dead_letters;
    let count = dead.max_count.map_or("none".into(), |n| n.to_string());
    let age = dead
        .max_age
        .map_or("none".into(), redjob::ops::duration_text);
    let from = origin(s.dead_letters.is_some(), s.set_by.dead_letters.as_ref());
    let h = s.in_force().history;
    let hfrom = origin(s.history.is_some(), s.set_by.history.as_ref());
    let hcount = h.max_count.map_or("none".into(), |n| n.to_string());
    let hage = h.max_age.map_or("none".into(), redjob::ops::duration_text);
    let hargs = h
        .args_max_age
        .map_or("none".into(), redjob::ops::duration_text);
    let per_worker = s
        .in_force()
        .concurrency
        .per_worker
        .map_or("none".into(), |n| n.to_string());
    // not stored: left empty, so that saving the form unchanged stores nothing
    let stored_per_worker = if s.concurrency.is_some() {
        per_worker.clone()
    } else {
        String::new()
    };
    let cfrom = origin(s.concurrency.is_some(), s.set_by.concurrency.as_ref());
    let global = s
        .in_force()
        .concurrency
        .global
        .map_or("none".into(), |n| n.to_string());
    let stored_global = if s.concurrency.is_some() {
        global.clone()
    } else {
        String::new()
    };
    let rate = s.in_force().rate_limit.to_string();
    let stored_rate = if s.rate_limit.is_some() {
        rate.clone()
    } else {
        String::new()
    };
    let rfrom = origin(s.rate_limit.is_some(), s.set_by.rate_limit.as_ref());
    html! {
        section #settings {
            h2 { "Settings" }
            p.muted { "In force for every worker of this queue, which follows a change at once; a worker's own value is stored only where none is." }
            @if let Some(g) = usage.concurrency.global {
                p #usage-global { "In use across all workers: " (usage.in_flight) " of " (g) " running." }
            }
            @if usage.rate_limit.is_limited() {
                p #usage-rate {
                    "Rate: " (usage.started_in_window) " of " (usage.rate_limit.max) " started in the last "
                    (redjob::ops::duration_text(usage.rate_limit.period)) "."
                }
            }
            @if let Some(at) = usage.held_until_ms {
                p #usage-held { "Next start held back until " (crate::fmt::when(at)) "." }
            }
            @if let Some(at) = usage.throttled_until_ms {
                p #usage-throttled { "Throttled by a handler until " (crate::fmt::when(at)) " (apart from a pause)." }
            }
            @if ctx.read_only {
                p { "Dead letters (" (from) "): at most " (count) ", for " (age) "." }
                p {
                    "History (" (hfrom) "): " (if h.enabled { "on" } else { "off" }) ", at most " (hcount) ", for " (hage)
                    ", arguments for " (hargs) "."
                }
                p { "Concurrency (" (cfrom) "): at most " (per_worker) " at once in each worker, " (global) " across all workers." }
                p { "Rate limit (" (rfrom) "): " (rate) "." }
            } @else {
                p.muted { "Dead letters (" (from) "):" }
                form.inline method="post" action=(ctx.link(&format!("{qpath}/settings"))) {
                    (crate::layout::csrf(ctx))
                    // the values shown: a field saved as shown is left as
                    // stored then (see the concurrency's form)
                    input type="hidden" name="dead_max_count_was" value=(count);
                    input type="hidden" name="dead_max_age_was" value=(age);
                    label { "Dead letters: at most " input type="text" name="dead_max_count" value=(count) size="8"; }
                    " "
                    label { "for " input type="text" name="dead_max_age" value=(age) size="8"; }
                    " " button type="submit" { "Save" }
                }
                @if s.dead_letters.is_some() { (reset_form(ctx, qpath, Setting::DeadLetters)) }
                p.muted { "History of finished jobs (" (hfrom) "):" }
                form.inline method="post" action=(ctx.link(&format!("{qpath}/settings"))) {
                    (crate::layout::csrf(ctx))
                    input type="hidden" name="history_was" value=(if h.enabled { "on" } else { "off" });
                    input type="hidden" name="history_max_count_was" value=(hcount);
                    input type="hidden" name="history_max_age_was" value=(hage);
                    input type="hidden" name="history_args_max_age_was" value=(hargs);
                    label { "History: "
                        select name="history" {
                            option value="on" selected[h.enabled] { "on" }
                            option value="off" selected[!h.enabled] { "off" }
                        }
                    }
                    " "
                    label { "at most " input type="text" name="history_max_count" value=(hcount) size="8"; }
                    " "
                    label { "for " input type="text" name="history_max_age" value=(hage) size="8"; }
                    " "
                    label { "arguments for " input type="text" name="history_args_max_age" value=(hargs) size="8"; }
                    " " button type="submit" { "Save" }
                }
                @if s.history.is_some() { (reset_form(ctx, qpath, Setting::History)) }
                p.muted { "Concurrency (" (cfrom) "):" }
                form.inline method="post" action=(ctx.link(&format!("{qpath}/settings"))) {
                    (crate::layout::csrf(ctx))
                    // the values shown: a field saved as shown is left as
                    // stored, so that saving the other does not put back a
                    // part another operator changed meanwhile
                    input type="hidden" name="concurrency_was" value=(stored_per_worker);
                    input type="hidden" name="global_was" value=(stored_global);
                    label { "At most " input type="text" name="concurrency" value=(stored_per_worker) placeholder="none" size="8"; " at once in each worker" }
                    " "
                    label { "and " input type="text" name="global" value=(stored_global) placeholder="none" size="8"; " across all workers" }
                    " " button type="submit" { "Save" }
                }
                @if s.concurrency.is_some() { (reset_form(ctx, qpath, Setting::Concurrency)) }
                p.muted { "Rate limit across all workers (" (rfrom) "): starts per period, such as 50/1s or 100/1m, or none." }
                form.inline method="post" action=(ctx.link(&format!("{qpath}/settings"))) {
                    (crate::layout::csrf(ctx))
                    // the value shown: saved as shown, it is left as stored
                    input type="hidden" name="rate_limit_was" value=(stored_rate);
                    label { "At most " input type="text" name="rate_limit" value=(stored_rate) placeholder="none" size="10"; }
                    " " button type="submit" { "Save" }
                }
                @if s.rate_limit.is_some() { (reset_form(ctx, qpath, Setting::RateLimit)) }
            }
        }
    }
}

/// A stored setting's "reset to default" button: the setting is stored no
/// more (a worker's builder value is stored again by the first worker that
/// reads it, else the default is in force).
fn reset_form(ctx: &Ctx, qpath: &str, setting: Setting) -> Markup {
    html! {
        form.inline method="post" action=(ctx.link(&format!("{qpath}/settings"))) {
            (crate::layout::csrf(ctx))
            input type="hidden" name="reset" value=(setting.name());
            button type="submit" title="Remove the stored value: the workers' own value (stored again by the first worker that reads it), else the default, is in force" { "Reset to default" }
        }
    }
}

/// Where a setting in force comes from: who stored it and when, or the
/// default.
fn origin(stored: bool, change: Option<&redjob::ops::Change>) -> String {
    match (stored, change) {
        (false, _) => "default".into(),
        (true, None) => "stored with the queue".into(),
        (true, Some(c)) => format!("set by {} at {}", c.by, crate::fmt::when(c.at_ms)),
    }
}

/// A table of jobs: id, type, arguments, attempts, priority, time, last error.
pub(crate) fn jobs_table(ctx: &Ctx, queue: &str, jobs: &[JobInfo], now: u64) -> Markup {
    html! {
        div.scroll {
            table {
                thead { tr {
                    th { "Id" } th { "Type" } th { "Arguments" } th.num { "Attempts" } th.num { "Priority" }
                    th { "When" } th { "Last error" }
                } }
                tbody {
                    @for j in jobs {
                        tr {
                            td { a href=(ctx.link(&format!("/queues/{}/jobs/{}", seg(queue), j.id))) { code { (j.id) } } }
                            td { (name(&job_type(j))) }
                            td.args { (preview(j, 120)) }
                            td.num { (j.attempts) }
                            td.num { (j.priority) }
                            td title=(crate::fmt::when(j.due_ms)) { (time_of(j, now)) }
                            td.error { (shorten(j.last_error.as_deref().unwrap_or(""), 80)) }
                        }
                    }
                    @if jobs.is_empty() {
                        tr { td colspan="7" .muted { "No jobs here." } }
                    }
                }
            }
        }
    }
}

/// What a job's time means in its state.
pub(crate) fn time_of(j: &JobInfo, now: u64) -> String {
    let at = relative(now, j.due_ms);
    match j.state {
        JobState::Ready => format!("due {at}"),
        JobState::Scheduled => format!("due {at}"),
        JobState::InFlight => format!("lease ends {at}"),
        JobState::Blocked => match &j.key {
            Some(k) => format!("due {at}, waits for key {:?}", k.key),
            None => format!("due {at}, waits for its key"),
        },
        JobState::Finished => match &j.finished {
            Some(f) => format!("{} {at}", f.how.as_str()),
            None => format!("finished {at}"),
        },
        JobState::Waiting => format!("enqueued {at}, waits for its children"),
        JobState::Dead => format!("died {at}"),
        _ => format!("{} {at}", j.state.as_str()),
    }
}

/// Asks before a purge.
pub(crate) async fn confirm_purge(ctx: Ctx, Path(queue): Path<String>) -> WebResult<Response> {
    crate::ctx::writable(&ctx)?;
    // counted now; the form carries the count's cutoff, so the purge takes
    // the jobs counted and none sent since
    let n = ctx.app.client.count_purge(&queue).await?;
    let qpath = format!("/queues/{}", seg(&queue));
    let waiting = n.count;
    let body = html! {
        h1 { "Purge " (name(&queue)) "?" }
        p { "This deletes its " b { (num(waiting)) } " jobs: ready, scheduled and running (a running job's outcome is dropped). Jobs sent from now on, its dead letters, settings and counters stay." }
        form method="post" action=(ctx.link(&format!("{qpath}/purge"))) {
            (csrf(&ctx))
            input type="hidden" name="upto" value=(n.upto_ms);
            div.bar {
                button type="submit" class="danger" { "Delete " (num(waiting)) " jobs" }
                a.button href=(ctx.link(&qpath)) { "Cancel" }
            }
        }
    };
    Ok(render(&ctx, &format!("Purge {queue}"), Nav::Queues, body))
}

/// A run-time quantile as the bound of its bucket: `≤ 50ms`, `> 1000s`.
fn bound(d: Option<std::time::Duration>) -> String {
    match d {
        Some(std::time::Duration::MAX) => "> 1000s".into(),
        Some(d) => format!("≤ {}", redjob::ops::duration_text(d)),
        None => "-".into(),
    }
}
