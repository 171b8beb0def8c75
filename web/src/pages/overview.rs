//! Every queue with its jobs by state, counters, pause state and how long its
//! next job has waited; totals on top.

use axum::response::Response;
use maud::html;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, OverviewQuery, QueueLine};
use redjob::{Client, Error};

use crate::Ctx;
use crate::chart;
use crate::error::WebResult;
use crate::fmt::{num, span};
use crate::layout::{Nav, render, seg};

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

pub(crate) async fn page(ctx: Ctx) -> WebResult<Response> {
    let client = &ctx.app.client;
    // two round trips however many queues: the set of queues, then one
    // pipelined read of them all
    let o = client
        .overview(&OverviewQuery::default().with_minutes())
        .await?;
    let skipped = o.skipped;
    let lines = o.lines;
    let total = (o.total.counts, o.total.stats);
    let cards = [
        ("ready", total.0.ready),
        ("scheduled", total.0.scheduled),
        ("in flight", total.0.in_flight),
        ("dead", total.0.dead),
        ("processed", total.1.processed),
        ("failed", total.1.failed),
    ];
    let hour = redjob::backend::last_hour(
        o.now_ms,
        lines.iter().flat_map(|l| l.minutes.iter().copied()),
    );
    let body = html! {
        h1 { "Queues" }
        form.inline method="get" action=(ctx.link("/find")) {
            input type="search" name="id" placeholder="Job id" aria-label="Find a job by id in any queue" size="34";
            " " button type="submit" { "Find" }
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
        div #chart data-live { (chart::chart(&hour)) }
        div #queues .scroll data-live {
            table {
                thead { tr {
                    th { "Queue" } th.num { "Ready" } th.num { "Scheduled" } th.num { "In flight" }
                    th.num { "Dead" } th.num { "Processed" } th.num { "Failed" }
                    th.num title="How long the oldest ready job has waited (at any priority)" { "Latency" } th { "" }
                } }
                tbody {
                    @for l in &lines {
                        tr {
                            td { a href=(ctx.link(&format!("/queues/{}", seg(&l.name)))) { (l.name) } }
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
                    @if lines.is_empty() {
                        tr { td colspan="9" .muted { "No queues yet: a queue appears with its first job, or when a worker creates it." } }
                    }
                }
            }
        }
    };
    Ok(render(&ctx, "Queues", Nav::Queues, body))
}
