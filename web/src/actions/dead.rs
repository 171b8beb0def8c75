//! A queue's dead letters: requeue or delete the selected, or every one that
//! matches.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::Response;
use redjob::JobId;
use redjob::inspect::{Inspect, JobState};
use redjob::ops::{Admin, Spread};

use super::{at_most_a_page, back, checked, named, upto};
use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::num;
use crate::layout::seg;
use crate::params::{DeadFilter, parse_id};

pub(crate) async fn dead(
    ctx: Ctx,
    headers: HeaderMap,
    Path((queue, action)): Path<(String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    let c = &ctx.client;
    let requeue = match action.as_str() {
        "requeue" => true,
        "delete" => false,
        other => {
            return Err(WebError::NotFound(format!(
                "no dead-letter action {other:?}"
            )));
        }
    };
    let rate = match f.get("rate").map(str::trim).filter(|r| !r.is_empty()) {
        None => None,
        Some(r) => Some(r.parse::<u32>().ok().filter(|r| *r > 0).ok_or_else(|| {
            WebError::BadRequest(format!("rate {r:?}: a number of jobs a second, at least 1"))
        })?),
    };
    // ids selected that are no dead letters of this queue, said in the note
    let mut not_dead = Vec::new();
    // letters requeue_dead left dead (a queued job holds their unique key)
    let mut stayed = 0;
    let n = if f.get("all") == Some("1") {
        // in the page's order (newest first unless it listed the oldest
        // first): at a rate, the first requeued is due first
        let filter = DeadFilter {
            job_type: f.get("type").unwrap_or("").into(),
            error: f.get("error").unwrap_or("").into(),
            order: f.get("order").unwrap_or("").into(),
            ..DeadFilter::default()
        };
        let mut q = filter.query();
        // the confirmation's count: the action takes the letters it counted,
        // none that died since
        if let Some(upto) = upto(&f)? {
            q = q.died_by(upto);
        }
        match requeue {
            true => c.requeue_dead_matching(&queue, &q, rate).await?,
            false => c.delete_dead_matching(&queue, &q).await?,
        }
    } else {
        let mut ids = f
            .all("id")
            .map(parse_id)
            .collect::<Result<Vec<JobId>, _>>()?;
        // each id once, in the order first given: a letter selected twice is
        // one letter, requeued or deleted once (counted twice, the one
        // requeue looked like a letter that stayed dead)
        let mut seen = std::collections::HashSet::new();
        ids.retain(|id| seen.insert(*id));
        let ids = at_most_a_page(ids)?;
        if ids.is_empty() {
            return Err(WebError::BadRequest("no dead letter selected".into()));
        }
        // which are dead letters of this queue (as `redjob dead requeue`
        // tells them apart): the others, of another queue or not dead, are
        // left alone and named
        let jobs = futures::future::try_join_all(ids.iter().map(|id| c.job(&queue, id))).await?;
        let mut found = Vec::with_capacity(ids.len());
        for (id, job) in ids.iter().zip(jobs) {
            match job {
                Some(j) if j.state == JobState::Dead => found.push(*id),
                _ => not_dead.push(*id),
            }
        }
        match (requeue, found.is_empty()) {
            (_, true) => 0,
            (true, false) => {
                let spread = rate.map_or(Spread::NOW, Spread::per_second);
                let n = c.requeue_dead(&queue, &found, spread).await?;
                stayed = found.len() as u64 - n.min(found.len() as u64);
                n
            }
            (false, false) => c.delete_dead(&queue, &found).await?,
        }
    };
    let verb = if requeue { "Requeued" } else { "Deleted" };
    let mut note = format!("{verb} {} dead letters", num(n));
    if stayed > 0 {
        note += &format!(
            "; {} stayed dead: a queued job holds their unique key (or their id is queued already)",
            num(stayed)
        );
    }
    if !not_dead.is_empty() {
        let what = match not_dead.len() {
            1 => "1 id selected is not a dead letter".to_string(),
            n => format!("{} ids selected are not dead letters", num(n as u64)),
        };
        note += &format!("; {what} of {queue:?} (not found): {}", named(&not_dead));
    }
    note.push('.');
    Ok(back(&ctx, &format!("/queues/{}/dead", seg(&queue)), &note))
}
