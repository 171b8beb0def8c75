//! A topic's subscribers: rewind or skip one, and requeue or delete its dead
//! letters.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::Response;
use redjob::topic::{EventId, Start};

use super::{at_most_a_page, back, checked, named};
use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::fmt::num;
use crate::layout::seg;

/// A subscriber replays its topic from the beginning, or skips to the end:
/// up to the event its confirmation counted up to, and nothing when it
/// counted none.
pub(crate) async fn rewind(
    ctx: Ctx,
    headers: HeaderMap,
    Path((topic, sub)): Path<(String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    // a skip stops at the event its confirmation counted up to, when it did
    let upto = match f.get("upto").filter(|u| !u.is_empty()) {
        Some(u) => Some(
            u.parse::<EventId>()
                .map_err(|e| WebError::BadRequest(e.to_string()))?,
        ),
        None => None,
    };
    let c = &ctx.client;
    // whether the backend was asked, and so refused a subscriber gone
    let mut asked = true;
    let what = match (f.get("to"), upto) {
        (Some("beginning"), _) => {
            c.rewind(&topic, &sub, Start::Beginning).await?;
            "replays the topic from its oldest event"
        }
        // up to what was counted, and never back: a subscriber that read
        // past it since stays where it is
        (Some("end"), Some(upto)) => {
            if c.skip_to(&topic, &sub, upto).await? {
                "skipped to the end"
            } else {
                "had read past the end counted, and stays where it is"
            }
        }
        // nothing counted (the topic held no event): nothing to skip, and a
        // skip to the end as it is now would skip events published since
        (Some("end"), None) => {
            asked = false;
            "had no events counted to skip, and stays where it is"
        }
        (other, _) => {
            return Err(WebError::BadRequest(format!(
                "rewind to {other:?}: beginning or end"
            )));
        }
    };
    let s = c
        .topic_for(&topic, &sub)
        .await?
        .and_then(|t| t.subscribers.into_iter().find(|s| s.name == sub));
    if s.is_none() && !asked {
        return Err(redjob::Error::SubscriberNotFound {
            topic,
            subscriber: sub,
        }
        .into());
    }
    let lag = s.map_or(0, |s| s.lag);
    let note = format!("{sub} {what}: {} events to take.", num(lag));
    Ok(back(&ctx, &format!("/topics/{}", seg(&topic)), &note))
}

/// Requeues or deletes a subscriber's dead letters: the selected, or all.
pub(crate) async fn topic_dead(
    ctx: Ctx,
    headers: HeaderMap,
    Path((topic, sub, action)): Path<(String, String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    let requeue = match action.as_str() {
        "requeue" => true,
        "delete" => false,
        other => {
            return Err(WebError::NotFound(format!(
                "no dead-letter action {other:?}"
            )));
        }
    };
    let c = &ctx.client;
    // 404 when the subscriber does not exist (a delete would count 0, and
    // say it did)
    c.count_dead_events(&topic, &sub).await?;
    // ids selected that are no dead letters of the subscriber, said in the note
    let mut not_dead = Vec::new();
    let n = if f.get("all") == Some("1") {
        // the confirmation's count: up to the newest letter it counted
        // (empty when it counted none: none is taken)
        let upto = match f.get("upto") {
            None => None,
            Some("") => Some(None),
            Some(u) => Some(Some(u.parse::<EventId>().map_err(|_| {
                WebError::BadRequest(format!("{u:?} is not a dead letter's id"))
            })?)),
        };
        match (upto, requeue) {
            (None, true) => c.requeue_all_dead_events(&topic, &sub).await?,
            (None, false) => c.purge_dead_events(&topic, &sub).await?,
            (Some(None), _) => 0,
            (Some(Some(u)), true) => c.requeue_dead_events_upto(&topic, &sub, u).await?,
            (Some(Some(u)), false) => c.delete_dead_events_upto(&topic, &sub, u).await?,
        }
    } else {
        let mut ids = f
            .all("id")
            .map(|i| {
                i.parse::<EventId>()
                    .map_err(|_| WebError::BadRequest(format!("{i:?} is not a dead letter's id")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if ids.is_empty() {
            return Err(WebError::BadRequest("no dead letter selected".into()));
        }
        // oldest first, each once, as the library takes a list
        ids.sort_unstable();
        ids.dedup();
        let ids = at_most_a_page(ids)?;
        // one id at a time (as `redjob topic requeue` does): one the action
        // did not take is no dead letter of the subscriber, and is named
        let mut n = 0;
        for id in &ids {
            let one = std::slice::from_ref(id);
            let took = match requeue {
                true => c.requeue_dead_events(&topic, &sub, one).await?,
                false => c.delete_dead_events(&topic, &sub, one).await?,
            };
            if took == 0 {
                not_dead.push(*id);
            }
            n += took;
        }
        n
    };
    let verb = if requeue { "Requeued" } else { "Deleted" };
    let mut note = format!("{verb} {} dead letters", num(n));
    if !not_dead.is_empty() {
        let what = match not_dead.len() {
            1 => "1 id selected is not a dead letter".to_string(),
            n => format!("{} ids selected are not dead letters", num(n as u64)),
        };
        note += &format!(
            "; {what} of subscriber {sub:?} of {topic:?} (not found): {}",
            named(&not_dead)
        );
    }
    note.push('.');
    let path = format!("/topics/{}/{}/dead", seg(&topic), seg(&sub));
    Ok(back(&ctx, &path, &note))
}
