//! Every queue with its jobs by state, counters, pause state and how long its
//! next job has waited; totals on top.

use std::time::Duration;

use axum::response::Response;
use futures::stream::{self, StreamExt};
use maud::html;
use redjob::backend::{Backend, MinuteStats, QueueStats};
use redjob::inspect::{Inspect, StateCounts};
use redjob::ops::Admin;
use redjob::queue::Queues;
use redjob::{Client, Error};

use crate::Ctx;
use crate::chart;
use crate::error::WebResult;
use crate::fmt::{num, span};
use crate::layout::{Nav, render, seg};

/// Queues read at once (each read is a few round trips).
const AT_ONCE: usize = 32;

/// One queue's line.
pub(crate) struct Line {
    pub name: String,
    pub counts: StateCounts,
    pub stats: QueueStats,
    /// The last hour, minute by minute.
    pub minutes: Vec<MinuteStats>,
    pub paused: bool,
    /// How long the oldest ready job has waited, when one is ready.
    pub latency: Option<Duration>,
}

/// The line of `name`; `None` when it was deleted meanwhile.
pub(crate) async fn line(client: &Client, name: String) -> redjob::Result<Option<Line>> {
    let read = async {
        let counts = client.counts(&name).await?;
        let stats = client.stats(&name).await?;
        let minutes = client.minutes(&name).await?;
        let paused = client.is_paused(&name).await?;
        let latency = if counts.ready > 0 {
            client.latency(&name).await?
        } else {
            None
        };
        Ok(Line {
            name: name.clone(),
            counts,
            stats,
            minutes,
            paused,
            latency,
        })
    };
    match read.await {
        Ok(l) => Ok(Some(l)),
        Err(Error::QueueNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

pub(crate) async fn page(ctx: Ctx) -> WebResult<Response> {
    let client = &ctx.app.client;
    // entries of the set of names no queue can have are skipped, and named below
    let listing = client.queues().queue_listing().await?;
    let skipped = listing.skipped;
    let mut names = listing.names;
    names.sort();
    let read: Vec<redjob::Result<Option<Line>>> = stream::iter(names)
        .map(|name| line(client, name))
        .buffered(AT_ONCE)
        .collect()
        .await;
    let mut lines = Vec::with_capacity(read.len());
    for l in read {
        lines.extend(l?);
    }
    let mut total = (StateCounts::default(), QueueStats::default());
    for l in &lines {
        total.0.ready += l.counts.ready;
        total.0.scheduled += l.counts.scheduled;
        total.0.in_flight += l.counts.in_flight;
        total.0.dead += l.counts.dead;
        total.1.processed += l.stats.processed;
        total.1.failed += l.stats.failed;
    }
    let cards = [
        ("ready", total.0.ready),
        ("scheduled", total.0.scheduled),
        ("in flight", total.0.in_flight),
        ("dead", total.0.dead),
        ("processed", total.1.processed),
        ("failed", total.1.failed),
    ];
    // after the reads: a minute that turned meanwhile drops no queue's newest
    let now = client.backend().now_ms().await?;
    let hour =
        redjob::backend::last_hour(now, lines.iter().flat_map(|l| l.minutes.iter().copied()));
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
