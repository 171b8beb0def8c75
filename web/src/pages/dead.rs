//! A queue's dead letters: newest or oldest first, filtered by job type and
//! error text, a page at a time; requeue or delete one, the selected, or every
//! one that matches (after a confirmation).

use axum::extract::{Path, Query};
use axum::response::Response;
use maud::html;
use redjob::backend::Backend;
use redjob::inspect::{Cursor, Inspect};
use redjob::ops::Admin;

use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::{job_type, num, preview, relative, shorten, when};
use crate::layout::{Nav, csrf, link_button, name, query, render, seg};
use crate::params::DeadFilter;

pub(crate) async fn page(
    ctx: Ctx,
    Path(queue): Path<String>,
    Query(f): Query<DeadFilter>,
) -> WebResult<Response> {
    let client = &ctx.app.client;
    let after = match f.after.as_str() {
        "" => None,
        c => Some(
            c.parse::<Cursor>()
                .map_err(|e| WebError::BadRequest(e.to_string()))?,
        ),
    };
    let found = client
        .dead_matching(&queue, &f.query(), after.as_ref(), ctx.app.page_size)
        .await?;
    let total = client.counts(&queue).await?.dead;
    let now = client.backend().now_ms().await?;
    let qpath = format!("/queues/{}", seg(&queue));
    let dpath = format!("{qpath}/dead");
    let ro = ctx.read_only;
    let body = html! {
        p.muted { a href=(ctx.link(&qpath)) { "← " (name(&queue)) } }
        h1 { "Dead letters of " (name(&queue)) " " span.badge.dead { (num(total)) } }
        form.bar method="get" action=(ctx.link(&dpath)) {
            input type="text" name="type" value=(f.job_type) placeholder="Job type" aria-label="Job type";
            input type="search" name="error" value=(f.error) placeholder="Error contains" aria-label="Error contains";
            select name="order" aria-label="Order" {
                option value="newest" selected[f.order != "oldest"] { "Newest first" }
                option value="oldest" selected[f.order == "oldest"] { "Oldest first" }
            }
            button type="submit" { "Filter" }
            @if f.filtered() { a href=(ctx.link(&dpath)) { "Clear" } }
        }
        div.bar {
            (link_button(&ctx, &format!("{dpath}/confirm{}", query(&f.pairs(&[("do", "requeue")]))),
                if f.filtered() { "Requeue all matching…" } else { "Requeue all…" }, "primary"))
            (link_button(&ctx, &format!("{dpath}/confirm{}", query(&f.pairs(&[("do", "delete")]))),
                if f.filtered() { "Delete all matching…" } else { "Delete all…" }, "danger"))
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
                        th { "Id" } th { "Type" } th { "Arguments" } th.num { "Attempts" } th { "Died" } th { "Error" }
                    } }
                    tbody {
                        @for j in &found.jobs {
                            tr {
                                @if !ro { td { input type="checkbox" name="id" value=(j.id) aria-label="Select"; } }
                                td { a href=(ctx.link(&format!("{qpath}/jobs/{}", j.id))) { code { (j.id) } } }
                                td { (name(&job_type(j))) }
                                td.args { (preview(j, 100)) }
                                td.num { (j.attempts) }
                                td title=(when(j.due_ms)) { (relative(now, j.due_ms)) }
                                td.error title=(j.last_error.as_deref().unwrap_or("")) {
                                    (shorten(j.last_error.as_deref().unwrap_or(""), 80))
                                }
                            }
                        }
                        @if found.jobs.is_empty() && found.next.is_some() {
                            tr { td colspan="7" .muted { "No match among the next " (num(redjob::ops::MAX_SCAN as u64)) " dead letters: the next page reads on." } }
                        } @else if found.jobs.is_empty() {
                            tr { td colspan="7" .muted { @if f.filtered() { "No dead letter matches." } @else { "No dead letters." } } }
                        }
                    }
                }
            }
        }
        div.pager {
            @if after.is_some() { a href=(ctx.link(&format!("{dpath}{}", query(&f.pairs(&[]))))) { "← First page" } }
            @if let Some(next) = found.next {
                @let next = next.to_string();
                a href=(ctx.link(&format!("{dpath}{}", query(&f.pairs(&[("after", &next)]))))) { "Next page →" }
            }
        }
    };
    Ok(render(
        &ctx,
        &format!("Dead letters of {queue}"),
        Nav::Queues,
        body,
    ))
}

/// Asks before requeueing or deleting every dead letter that matches.
pub(crate) async fn confirm(
    ctx: Ctx,
    Path(queue): Path<String>,
    Query(f): Query<DeadFilter>,
) -> WebResult<Response> {
    crate::ctx::writable(&ctx)?;
    let requeue = match f.action.as_str() {
        "requeue" => true,
        "delete" => false,
        other => {
            return Err(WebError::BadRequest(format!(
                "no dead-letter action {other:?}"
            )));
        }
    };
    // counted now; the form carries the count's cutoff, so the action takes
    // the letters counted and none that died since
    let all = ctx
        .app
        .client
        .count_dead(&queue, &Default::default())
        .await?;
    let matched = if f.filtered() {
        let q = f.query().died_by(all.upto_ms);
        ctx.app.client.count_dead(&queue, &q).await?.count
    } else {
        all.count
    };
    let total = all.count;
    let dpath = format!("/queues/{}/dead", seg(&queue));
    let verb = if requeue { "Requeue" } else { "Delete" };
    let letters = |n: u64| format!("{} dead letter{}", num(n), if n == 1 { "" } else { "s" });
    let which = if f.filtered() {
        let mut parts = Vec::new();
        if !f.job_type.trim().is_empty() {
            parts.push(format!("of type {:?}", f.job_type.trim()));
        }
        if !f.error.is_empty() {
            parts.push(format!("whose error contains {:?}", f.error));
        }
        format!(
            "the {} {} (of {} in all)",
            letters(matched),
            parts.join(" and "),
            num(total)
        )
    } else {
        format!("the {}", letters(total))
    };
    let body = html! {
        h1 { (verb) " dead letters of " (name(&queue)) "?" }
        p { (verb) " " (which) "." @if requeue { " They go back to the queue as fresh jobs, at their priority." }
            " Letters that die from now on are left." }
        form method="post" action=(ctx.link(&format!("{dpath}/{}", f.action))) {
            (csrf(&ctx))
            input type="hidden" name="all" value="1";
            input type="hidden" name="type" value=(f.job_type);
            input type="hidden" name="error" value=(f.error);
            input type="hidden" name="upto" value=(all.upto_ms);
            input type="hidden" name="order" value=(if f.order == "oldest" { "oldest" } else { "newest" });
            @if requeue {
                p { label { "At most " input type="text" name="rate" size="6" inputmode="numeric" placeholder="all at once"; " jobs a second (optional)" } }
                p.muted { "At a rate they become due in the page's order, "
                    (if f.order == "oldest" { "oldest" } else { "newest" }) " first." }
            }
            div.bar {
                button type="submit" class=(if requeue { "primary" } else { "danger" }) { (verb) " " (letters(matched)) }
                a.button href=(ctx.link(&format!("{dpath}{}", query(&f.pairs(&[]))))) { "Cancel" }
            }
        }
    };
    Ok(render(
        &ctx,
        &format!("{verb} dead letters"),
        Nav::Queues,
        body,
    ))
}
