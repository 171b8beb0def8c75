//! A job's actions: run it now, cancel it, requeue or delete it as a dead
//! letter, or retry it once finished.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::Response;
use redjob::inspect::{Cancelled, Inspect, JobState};
use redjob::ops::{Admin, Spread};

use super::{back, checked};
use crate::Ctx;
use crate::error::{WebError, WebResult};
use crate::layout::seg;
use crate::params::parse_id;

pub(crate) async fn job(
    ctx: Ctx,
    headers: HeaderMap,
    Path((queue, id, action)): Path<(String, String, String)>,
    body: Bytes,
) -> WebResult<Response> {
    checked(&ctx, &headers, &body)?;
    let c = &ctx.client;
    let id = parse_id(&id)?;
    let qpath = format!("/queues/{}", seg(&queue));
    let jpath = format!("{qpath}/jobs/{id}");
    Ok(match action.as_str() {
        "run-now" => {
            let note = match c.run_now(&queue, &id).await? {
                Some(JobState::Scheduled) => "Due now: the next free worker runs it.",
                Some(JobState::Ready) => "It was due already.",
                Some(JobState::InFlight) => "It is running: left to its lease.",
                Some(JobState::Blocked) => "Due now: it runs once its concurrency key has a place.",
                _ => {
                    return Err(WebError::NotFound(format!(
                        "no job {id} waiting in {queue:?}"
                    )));
                }
            };
            back(&ctx, &jpath, note)
        }
        "cancel" => match c.cancel(&queue, &id).await? {
            Cancelled::Removed => back(&ctx, &qpath, &format!("Job {id} deleted.")),
            Cancelled::Cancelling => back(
                &ctx,
                &qpath,
                &format!("Job {id} deleted: its worker stops it now."),
            ),
            _ => {
                return Err(WebError::NotFound(format!(
                    "no job {id} waiting or running in {queue:?}"
                )));
            }
        },
        "requeue" => match c.requeue_dead(&queue, &[id], Spread::NOW).await? {
            0 if c
                .job(&queue, &id)
                .await?
                .is_some_and(|j| j.state == JobState::Dead) =>
            {
                return Err(WebError::BadRequest(format!(
                    "{id} stays a dead letter: a queued job holds its unique key (or its id is queued already)"
                )));
            }
            0 => {
                return Err(WebError::NotFound(format!(
                    "no dead letter {id} in {queue:?}"
                )));
            }
            _ => back(&ctx, &jpath, "Requeued: back in its queue as a fresh job."),
        },
        "delete" => match c.delete_dead(&queue, &[id]).await? {
            0 => {
                return Err(WebError::NotFound(format!(
                    "no dead letter {id} in {queue:?}"
                )));
            }
            _ => back(
                &ctx,
                &format!("{qpath}/dead"),
                &format!("Dead letter {id} deleted."),
            ),
        },
        "retry" => match c.backend().retry_finished(&queue, &id).await {
            Ok(copy) => back(
                &ctx,
                &format!("{qpath}/jobs/{copy}"),
                &format!("Sent again as {copy}, a copy of {id}."),
            ),
            Err(redjob::Error::InvalidValue { reason, .. }) => {
                return Err(WebError::NotFound(reason));
            }
            Err(e) => return Err(e.into()),
        },
        other => return Err(WebError::NotFound(format!("no job action {other:?}"))),
    })
}
