//! Every queue with its jobs by state, counters, pause state and how long its
//! next job has waited; totals on top.

use axum::extract::Query;
use axum::response::Response;
use maud::html;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, OverviewQuery, OverviewSort, QueueLine};
use redjob::{Client, Error};
use serde::Deserialize;

use crate::Ctx;
use crate::chart;
use crate::error::{WebError, WebResult};
use crate::fmt::{num, span};
use crate::layout::{Nav, csrf, name_link, query as query_string, render_every, seg};

/// The line of `name` for its own page (counts, counters, the last hour,
/// pause); `None` when it was deleted meanwhile.
pub(crate) async fn line(client: &Client, name: String) -> redjob::Result<Option<QueueLine>> {
    let read = async {
        let mut l = QueueLine::new(&name);
        l.counts = client.counts(&name).await?;
        l.stats = client.stats(&name).await?;
        l.minutes = client.minutes(&name).await?;
        l.paused = client.is_paused(&name).await?;
        Ok(l)
    };
    match read.await {
        Ok(l) => Ok(Some(l)),
        Err(Error::QueueNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The overview's query string: `q` (names containing it), `sort` (a
/// column, see [`OverviewSort`]), `desc`, `page` (from 1), `range` (`week`
/// for the chart of the last 7 days by hour; else the last hour by minute).
#[derive(Deserialize, Default)]
pub(crate) struct OverviewParams {
    #[serde(default)]
    q: String,
    #[serde(default)]
    range: String,
    #[serde(default)]
    sort: String,
    #[serde(default)]
    desc: String,
    page: Option<usize>,
}

/// The least time between two refreshes of the week's chart.
const WEEK_REFRESH: std::time::Duration = std::time::Duration::from_secs(60);

/// The columns a header sorts by, with their titles.
const COLUMNS: [(&str, &str); 9] = [
    ("name", "Queue"),
    ("ready", "Ready"),
    ("scheduled", "Scheduled"),
    ("in_flight", "In flight"),
    ("dead", "Dead"),
    ("processed", "Processed"),
    ("failed", "Failed"),
    ("latency", "Latency"),
    ("paused", "Paused"),
];

pub(crate) async fn page(ctx: Ctx, Query(p): Query<OverviewParams>) -> WebResult<Response> {
    let client = &ctx.app.client;
    let sort: OverviewSort = match p.sort.as_str() {
        "" => OverviewSort::Name,
        s => s
            .parse()
            .map_err(|e: Error| WebError::BadRequest(e.to_string()))?,
    };
    let desc = p.desc == "1";
    let week = match p.range.as_str() {
        "" | "hour" => false,
        "week" => true,
        other => {
            return Err(WebError::BadRequest(format!(
                "no range {other:?}: hour or week"
            )));
        }
    };
    let mut query = OverviewQuery::default().filter(p.q.clone()).sort(sort);
    // the chart's ring: the week's is asked for only when shown (169 fields
    // a queue against 61)
    query = if week {
        query.with_hours()
    } else {
        query.with_minutes()
    };
    if desc {
        query = query.descending();
    }
    // two round trips however many queues: the set of queues, then one
    // pipelined read of them all (the chart adds up every matching queue's
    // hour, so the page is cut here)
    let o = client.overview(&query).await?;
    let skipped = o.skipped;
    let size = ctx.app.page_size.max(1);
    let pages = o.matched.div_ceil(size).max(1);
    let at = p.page.unwrap_or(1).clamp(1, pages);
    let lines: Vec<&QueueLine> = o.lines.iter().skip((at - 1) * size).take(size).collect();
    let link = |sort: &str, desc: bool, page: usize| {
        let page = if page > 1 {
            page.to_string()
        } else {
            String::new()
        };
        ctx.link(&format!(
            "/{}",
            query_string(&[
                ("q", p.q.as_str()),
                ("sort", if sort == "name" { "" } else { sort }),
                ("desc", if desc { "1" } else { "" }),
                ("page", page.as_str()),
                ("range", if week { "week" } else { "" }),
            ])
        ))
    };
    let total = (o.total.counts, o.total.stats);
    let mut cards = vec![
        ("ready", total.0.ready),
        ("scheduled", total.0.scheduled),
        ("in flight", total.0.in_flight),
        ("dead", total.0.dead),
        ("processed", total.1.processed),
        ("failed", total.1.failed),
    ];
    // as on a queue's page: shown when some wait for their key's place
    if total.0.blocked > 0 {
        cards.insert(4, ("blocked by keys", total.0.blocked));
    }
    let points = if week {
        redjob::backend::last_week(
            o.now_ms,
            o.lines.iter().flat_map(|l| l.hours.iter().copied()),
        )
    } else {
        redjob::backend::last_hour(
            o.now_ms,
            o.lines.iter().flat_map(|l| l.minutes.iter().copied()),
        )
    };
    // the other range's link, keeping the rest of the query
    let range_link = |week: bool| {
        ctx.link(&format!(
            "/{}",
            query_string(&[
                ("q", p.q.as_str()),
                (
                    "sort",
                    if sort == OverviewSort::Name {
                        ""
                    } else {
                        sort.as_str()
                    }
                ),
                ("desc", if desc { "1" } else { "" }),
                ("range", if week { "week" } else { "" }),
            ])
        ))
    };
    let body = html! {
        h1 { "Queues" }
        form.inline method="get" action=(ctx.link("/find")) {
            input type="search" name="id" placeholder="Job id" aria-label="Find a job by id in any queue" size="34";
            " " button type="submit" { "Find" }
        }
        form.inline method="get" action=(ctx.link("/")) {
            input type="search" name="q" value=(p.q) placeholder="Queue name contains" aria-label="Show the queues whose name contains" size="24";
            @if sort != OverviewSort::Name { input type="hidden" name="sort" value=(sort.as_str()); }
            @if week { input type="hidden" name="range" value="week"; }
            @if desc { input type="hidden" name="desc" value="1"; }
            " " button type="submit" { "Filter" }
        }
        @if !skipped.is_empty() {
            p.warning role="alert" {
                (skipped.len()) @if skipped.len() == 1 { " entry skipped" } @else { " entries skipped" }
                " in the namespace's set of queues: not valid queue names, so no queue can have them (another RSMQ port's looser names, or a stray SADD): "
                @for (i, name) in skipped.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (format!("{name:?}")) }
                }
            }
        }
        div #totals .cards data-live {
            @for (label, n) in cards {
                div.card { b { (num(n)) } span { (label) } }
            }
        }
        nav.tabs aria-label="Chart range" {
            @for (is_week, title) in [(false, "Last hour"), (true, "Last 7 days")] {
                a href=(range_link(is_week)) aria-current=[(is_week == week).then_some("page")] { (title) }
            }
        }
        div #chart data-live {
            (chart::chart_of(&points, if week { chart::Span::Week } else { chart::Span::Hour }))
        }
        div #queues .scroll data-live {
            table {
                thead { tr {
                    @for (key, title) in COLUMNS {
                        @let on = sort.as_str() == key;
                        // a column sorts largest first at its first click, but the name
                        @let next = if on { !desc } else { key != "name" };
                        th class=[(key != "name" && key != "paused").then_some("num")]
                            title=[(key == "latency").then_some("How long the oldest ready job has waited (at any priority)")]
                            aria-sort=[on.then_some(if desc { "descending" } else { "ascending" })] {
                            a href=(link(key, next, 1)) { (title) @if on { @if desc { " ↓" } @else { " ↑" } } }
                        }
                    }
                } }
                tbody {
                    @for l in &lines {
                        tr {
                            // a long name is cut short, whole on hover
                            td { (name_link(&ctx.link(&format!("/queues/{}", seg(&l.name))), &l.name)) }
                            td.num { (num(l.counts.ready)) }
                            td.num { (num(l.counts.scheduled)) }
                            td.num { (num(l.counts.in_flight)) }
                            td.num {
                                a href=(ctx.link(&format!("/queues/{}/dead", seg(&l.name)))) { (num(l.counts.dead)) }
                            }
                            td.num { (num(l.stats.processed)) }
                            td.num { (num(l.stats.failed)) }
                            td.num { @match l.latency { Some(d) => (span(d.as_millis() as u64)), None => span.muted { "–" } } }
                            td { @if l.paused { span.badge.paused { "paused" } } }
                        }
                    }
                    @if lines.is_empty() && p.q.is_empty() {
                        tr { td colspan="9" .muted { "No queues yet: a queue appears with its first job, or when a worker creates it." } }
                    } @else if lines.is_empty() {
                        tr { td colspan="9" .muted { "No queue's name contains " code { (p.q) } "." } }
                    }
                }
            }
            @if pages > 1 {
                p.pager {
                    "Queues " (num(((at - 1) * size + 1) as u64)) "–" (num(((at - 1) * size + lines.len()) as u64)) " of " (num(o.matched as u64)) ". "
                    @if at > 1 { a href=(link(sort.as_str(), desc, at - 1)) rel="prev" { "← Previous" } " " }
                    @if at < pages { a href=(link(sort.as_str(), desc, at + 1)) rel="next" { "Next →" } }
                }
            }
        }
        @if !ctx.read_only {
            details {
                summary { "Create a queue" }
                form.inline method="post" action=(ctx.link("/queues")) {
                    (csrf(&ctx))
                    input type="text" name="name" required placeholder="Name" aria-label="The queue's name" size="24";
                    " " label { "visibility " input type="text" name="vt" value="30s" size="6" aria-label="Visibility timeout"; }
                    " " label { "delay " input type="text" name="delay" value="0s" size="6" aria-label="Delay of new jobs"; }
                    " " label { "max size " input type="text" name="maxsize" value="65536" size="7" aria-label="Largest body in bytes, or -1"; }
                    " " button type="submit" { "Create" }
                }
            }
        }
    };
    // the week changes by the hour, and its read costs about half as much
    // again as the hour's (169 fields a queue): refreshed once a minute
    let every = if week && !ctx.app.refresh.is_zero() {
        ctx.app.refresh.max(WEEK_REFRESH)
    } else {
        ctx.app.refresh
    };
    Ok(render_every(&ctx, "Queues", Nav::Queues, body, every))
}
