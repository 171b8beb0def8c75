//! Topics: every topic with its length and largest lag; one topic with its
//! subscribers' offsets, pending events, lag and dead letters (and a replay from
//! the beginning or a skip to the end); a subscriber's dead letters, to requeue
//! or delete one, the selected, or all (after a confirmation).

use axum::extract::{Path, Query};
use axum::response::Response;
use maud::{Markup, html};
use redjob::backend::Backend;
use redjob::topic::{EventId, RewindPlan, Start, SubscriberInfo, TopicInfo};
use serde::Deserialize;

use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::{num, relative, shorten, when};
use crate::layout::{Nav, csrf, link_button, name, name_link, query, render, seg};

/// A subscriber's lag: its count, or "more than N" when Redis did not know it
/// and inspection counted only up to N (see `SubscriberInfo::lag_exact`).
fn lag(s: &SubscriberInfo) -> Markup {
    html! {
        @if s.lag_exact {
            (num(s.lag))
        } @else {
            span title="Redis does not know this subscriber's lag (it was moved into the topic's middle, or events ahead of it were deleted): counted up to here" {
                "more than " (num(s.lag))
            }
        }
    }
}

/// The subscriber furthest behind; of equal counts, one counted only up to
/// the cap ("more than N") is further.
fn furthest(t: &TopicInfo) -> Option<&SubscriberInfo> {
    t.subscribers.iter().max_by_key(|s| (s.lag, !s.lag_exact))
}

/// The topic list's query string: `page` (from 1).
#[derive(Deserialize, Default)]
pub(crate) struct ListParams {
    page: Option<usize>,
}

pub(crate) async fn list(ctx: Ctx, Query(p): Query<ListParams>) -> WebResult<Response> {
    let client = &ctx.app.client;
    // a page of the topics by name, read together: two round trips however
    // many topics there are (one per topic, three each, until now)
    let names = client.topics().await?;
    let size = ctx.app.page_size.max(1);
    let pages = names.len().div_ceil(size).max(1);
    let at = p.page.unwrap_or(1).clamp(1, pages);
    let first = ((at - 1) * size).min(names.len());
    let shown = &names[first..(first + size).min(names.len())];
    let topics: Vec<(&String, TopicInfo)> = shown
        .iter()
        .zip(client.topic_infos(shown).await?)
        // deleted since it was listed: skipped
        .filter_map(|(name, t)| Some((name, t?)))
        .collect();
    let link = |page: usize| {
        let page = if page > 1 {
            page.to_string()
        } else {
            String::new()
        };
        ctx.link(&format!("/topics{}", query(&[("page", page.as_str())])))
    };
    let body = html! {
        h1 { "Topics" }
        p.muted { "Every subscriber gets every event of a topic, at its own offset. Lag: events a subscriber has not taken yet." }
        div #topics .scroll data-live {
            table {
                thead { tr {
                    th { "Topic" } th.num { "Events" } th.num { "Published" } th.num { "Subscribers" }
                    th.num { "Largest lag" } th.num { "Dead" } th.num { "Bytes" }
                } }
                tbody {
                    @for (topic, t) in &topics {
                        tr {
                            td { (name_link(&ctx.link(&format!("/topics/{}", seg(topic))), topic)) }
                            td.num { (num(t.length)) }
                            td.num { (num(t.published)) }
                            td.num { (t.subscribers.len()) }
                            td.num { @match furthest(t) { Some(s) => (lag(s)), None => "0" } }
                            td.num { (num(t.subscribers.iter().map(|s| s.dead).sum())) }
                            td.num { (num(t.memory)) }
                        }
                    }
                    @if names.is_empty() {
                        tr { td colspan="7" .muted { "No topic yet: publish an event or create a subscriber." } }
                    }
                }
            }
            @if pages > 1 {
                p.pager {
                    "Topics " (num(first as u64 + 1)) "–" (num((first + shown.len()) as u64)) " of " (num(names.len() as u64)) ". "
                    @if at > 1 { a href=(link(at - 1)) rel="prev" { "← Previous" } " " }
                    @if at < pages { a href=(link(at + 1)) rel="next" { "Next →" } }
                }
            }
        }
    };
    Ok(render(&ctx, "Topics", Nav::Topics, body))
}

pub(crate) async fn topic(ctx: Ctx, Path(topic): Path<String>) -> WebResult<Response> {
    let client = &ctx.app.client;
    let t = client
        .topic(&topic)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("no topic {topic:?}")))?;
    let now = client.backend().now_ms().await?;
    let tpath = format!("/topics/{}", seg(&topic));
    let ro = ctx.read_only;
    let at = |id: Option<EventId>| {
        html! {
            @match id {
                Some(id) => { code { (id) } " " span.muted title=(when(id.ms())) { (relative(now, id.ms())) } },
                None => span.muted { "-" },
            }
        }
    };
    let body = html! {
        p.muted { a href=(ctx.link("/topics")) { "← Topics" } }
        h1 { "Topic " (name(&topic)) }
        div #topic data-live {
            dl.facts {
                dt { "Events" } dd { (num(t.length)) " held, " (num(t.published)) " published" }
                dt { "First" } dd { (at(t.first)) }
                dt { "Last" } dd { (at(t.last)) }
                dt { "Bytes" } dd { (num(t.memory)) }
            }
            h2 { "Subscribers" }
            div.scroll {
                table {
                    thead { tr {
                        th { "Subscriber" } th { "Offset" } th.num { "Pending" } th.num { "Lag" }
                        th.num { "Consumers" } th.num { "Dead" } @if !ro { th { "Replay" } }
                    } }
                    tbody {
                        @for s in &t.subscribers {
                            @let spath = format!("{tpath}/{}", seg(&s.name));
                            tr {
                                td { (name(&s.name)) }
                                td { code { (s.offset) } }
                                td.num { (num(s.pending)) }
                                td.num { (lag(s)) }
                                td.num { (s.consumers) }
                                td.num { a href=(ctx.link(&format!("{spath}/dead"))) { (num(s.dead)) } }
                                @if !ro {
                                    td {
                                        // each asks first, saying how many events it touches
                                        (link_button(&ctx, &format!("{spath}/rewind{}", query(&[("to", "beginning")])), "From the beginning…", ""))
                                        " "
                                        (link_button(&ctx, &format!("{spath}/rewind{}", query(&[("to", "end")])), "Skip to the end…", ""))
                                    }
                                }
                            }
                        }
                        @if t.subscribers.is_empty() {
                            tr { td colspan="7" .muted { "No subscriber." } }
                        }
                    }
                }
            }
        }
    };
    Ok(render(&ctx, &format!("Topic {topic}"), Nav::Topics, body))
}

/// The confirmation page's action.
#[derive(Deserialize, Default)]
pub(crate) struct Do {
    #[serde(default, rename = "do")]
    action: String,
}

pub(crate) async fn dead(
    ctx: Ctx,
    Path((topic, sub)): Path<(String, String)>,
) -> WebResult<Response> {
    let client = &ctx.app.client;
    // this subscriber alone: the others' lags are not counted
    let info = client
        .topic_for(&topic, &sub)
        .await?
        .and_then(|t| t.subscribers.into_iter().find(|s| s.name == sub))
        .ok_or_else(|| WebError::NotFound(format!("no subscriber {sub:?} of {topic:?}")))?;
    let dead = client.dead_events(&topic, &sub, ctx.app.page_size).await?;
    let now = client.backend().now_ms().await?;
    let dpath = format!("/topics/{}/{}/dead", seg(&topic), seg(&sub));
    let ro = ctx.read_only;
    let body = html! {
        p.muted { a href=(ctx.link(&format!("/topics/{}", seg(&topic)))) { "← " (name(&topic)) } }
        h1 { "Dead letters of " (name(&sub)) " on " (name(&topic)) " " span.badge.dead { (num(info.dead)) } }
        p.muted { "Newest first. A requeued one goes to the end of the topic again, for this subscriber alone, as a first attempt." }
        div.bar {
            (link_button(&ctx, &format!("{dpath}/confirm{}", query(&[("do", "requeue")])), "Requeue all…", "primary"))
            (link_button(&ctx, &format!("{dpath}/confirm{}", query(&[("do", "delete")])), "Delete all…", "danger"))
        }
        form method="post" action=(ctx.link(&format!("{dpath}/requeue"))) {
            (csrf(&ctx))
            @if !ro {
                div.bar {
                    button.primary type="submit" { "Requeue selected" }
                    button.danger type="submit" formaction=(ctx.link(&format!("{dpath}/delete"))) { "Delete selected" }
                }
            }
            div #dead .scroll data-live {
                table {
                    thead { tr {
                        @if !ro { th { input type="checkbox" data-select-all aria-label="Select all"; } }
                        th { "Event" } th { "Type" } th { "Data" } th.num { "Deliveries" } th { "Died" } th { "Error" }
                    } }
                    tbody {
                        @for d in &dead {
                            tr {
                                @if !ro { td { input type="checkbox" name="id" value=(d.dead_id) aria-label="Select"; } }
                                td { code { (d.id) } }
                                td { (name(&d.event_type)) }
                                td.args { (shorten(&d.data, 100)) }
                                td.num { (d.deliveries) }
                                td title=(when(d.at_ms)) { (relative(now, d.at_ms)) }
                                td.error {
                                    @if d.runs.is_empty() {
                                        span title=(d.error) { (shorten(&d.error, 80)) }
                                    } @else {
                                        details {
                                            summary title=(d.error) { (shorten(&d.error, 80)) " · " (d.runs.len()) " attempts" }
                                            (super::job::attempts(&d.runs))
                                        }
                                    }
                                }
                            }
                        }
                        @if dead.is_empty() {
                            tr { td colspan="7" .muted { "No dead letters." } }
                        }
                    }
                }
            }
        }
    };
    Ok(render(
        &ctx,
        &format!("Dead letters of {sub} on {topic}"),
        Nav::Topics,
        body,
    ))
}

/// Asks before requeueing or deleting all of a subscriber's dead letters.
pub(crate) async fn confirm(
    ctx: Ctx,
    Path((topic, sub)): Path<(String, String)>,
    Query(d): Query<Do>,
) -> WebResult<Response> {
    crate::ctx::writable(&ctx)?;
    let requeue = match d.action.as_str() {
        "requeue" => true,
        "delete" => false,
        other => {
            return Err(WebError::BadRequest(format!(
                "no dead-letter action {other:?}"
            )));
        }
    };
    // counted now; the form carries the newest letter's id, so the action
    // takes the letters counted and none that died since
    let counted = ctx.app.client.count_dead_events(&topic, &sub).await?;
    let total = counted.count;
    let dpath = format!("/topics/{}/{}/dead", seg(&topic), seg(&sub));
    let verb = if requeue { "Requeue" } else { "Delete" };
    let body = html! {
        h1 { (verb) " the dead letters of " (name(&sub)) " on " (name(&topic)) "?" }
        p { (verb) " " @if total == 1 { "the dead letter." } @else { "all " (num(total)) " dead letters." }
            @if requeue { " They go to the end of the topic again, for " (name(&sub)) " alone." }
            " Letters that die from now on are left." }
        form method="post" action=(ctx.link(&format!("{dpath}/{}", d.action))) {
            (csrf(&ctx))
            input type="hidden" name="all" value="1";
            input type="hidden" name="upto" value=(counted.upto.map(|u| u.to_string()).unwrap_or_default());
            div.bar {
                button type="submit" class=(if requeue { "primary" } else { "danger" }) { (verb) }
                a.button href=(ctx.link(&dpath)) { "Cancel" }
            }
        }
    };
    Ok(render(
        &ctx,
        &format!("{verb} dead letters"),
        Nav::Topics,
        body,
    ))
}

/// `?to=beginning|end` of a rewind's confirmation.
#[derive(Deserialize)]
pub(crate) struct To {
    #[serde(default)]
    to: String,
}

/// Asks before a replay from the beginning or a skip to the end, saying how
/// many events it replays or skips; the skip's form carries the topic's last
/// event then, so that it skips those counted and no event published since.
pub(crate) async fn rewind(
    ctx: Ctx,
    Path((topic, sub)): Path<(String, String)>,
    Query(t): Query<To>,
) -> WebResult<Response> {
    crate::ctx::writable(&ctx)?;
    let to = match t.to.as_str() {
        "beginning" => Start::Beginning,
        "end" => Start::End,
        other => {
            return Err(WebError::BadRequest(format!(
                "rewind to {other:?}: beginning or end"
            )));
        }
    };
    let info = ctx
        .app
        .client
        .topic_for(&topic, &sub)
        .await?
        .ok_or_else(|| WebError::NotFound(format!("no topic {topic:?}")))?;
    let plan = RewindPlan::new(&info, &sub, to)
        .ok_or_else(|| WebError::NotFound(format!("no subscriber {sub:?} of {topic:?}")))?;
    let tpath = format!("/topics/{}", seg(&topic));
    let spath = format!("{tpath}/{}", seg(&sub));
    let (title, button) = if plan.skips {
        ("Skip to the end", "Skip them")
    } else {
        ("Replay from the beginning", "Replay them")
    };
    // the heading names the subscriber (cut short when long)
    let mut what = plan.describe("this subscriber");
    if let Some(first) = what.get(..1) {
        what = first.to_uppercase() + &what[1..];
    }
    let body = html! {
        h1 { (title) " for " (name(&sub)) " on " (name(&topic)) "?" }
        p { (what) "." @if !plan.skips { " Each runs again in " (name(&sub)) "'s handlers." } }
        form method="post" action=(ctx.link(&format!("{spath}/rewind"))) {
            (csrf(&ctx))
            input type="hidden" name="to" value=(t.to);
            @if let (true, Some(upto)) = (plan.skips, plan.upto) {
                input type="hidden" name="upto" value=(upto);
            }
            div.bar {
                button type="submit" class="danger" { (button) }
                a.button href=(ctx.link(&tpath)) { "Cancel" }
            }
        }
    };
    Ok(render(&ctx, title, Nav::Topics, body))
}
