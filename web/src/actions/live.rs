//! What the live workers run: the periodic schedules (run now, pause,
//! resume) and the workers (quiet, resume, stop).

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::Response;
use redjob::ops::Admin;

use super::{back, checked};
use crate::Ctx;
use crate::error::{WebError, WebResult};

pub(crate) async fn periodic(
    ctx: Ctx,
    headers: HeaderMap,
    Path(action): Path<String>,
    body: Bytes,
) -> WebResult<Response> {
    let f = checked(&ctx, &headers, &body)?;
    let (queue, name) = (f.get("queue").unwrap_or(""), f.get("name").unwrap_or(""));
    let c = &ctx.client;
    let note = match action.as_str() {
        "run" => {
            let id = c.run_schedule_now(queue, name).await.map_err(|e| match e {
                redjob::Error::InvalidValue { reason, .. } => WebError::NotFound(reason),
                e => e.into(),
            })?;
            format!("Enqueued a run of {name:?} now (job {id}).")
        }
        "pause" => {
            // a name no live worker ticks (a crafted form, a schedule since
            // removed) pauses nothing that runs: say so, as the CLI does
            let live = c.schedules().await?;
            let ticked = live.iter().any(|s| s.queue == queue && s.name == name);
            c.pause_schedule(queue, name).await?;
            if ticked {
                format!("Paused {name:?}: every worker skips its ticks until it is resumed.")
            } else {
                format!(
                    "Paused {name:?}, which no live worker ticks: paused all the same, for workers to come."
                )
            }
        }
        "resume" => {
            if c.resume_schedule(queue, name).await? {
                format!("Resumed {name:?}: its next tick runs.")
            } else {
                format!("{name:?} was not paused: nothing changed.")
            }
        }
        other => return Err(WebError::NotFound(format!("no schedule action {other:?}"))),
    };
    Ok(back(&ctx, "/periodic", &note))
}

/// Quiet, resume or stop a live worker (`id`), through Redis.
pub(crate) async fn worker(
    ctx: Ctx,
    headers: HeaderMap,
    Path(action): Path<String>,
    body: Bytes,
) -> WebResult<Response> {
    use redjob::ops::WorkerControl;
    let f = checked(&ctx, &headers, &body)?;
    let id = f.get("id").unwrap_or("");
    let (control, note) = match action.as_str() {
        "quiet" => (
            Some(WorkerControl::Quiet),
            "Quiet: it takes no more work and finishes what it runs.",
        ),
        "resume" => (None, "Resumed: it takes work again."),
        "stop" => (
            Some(WorkerControl::Stop),
            "Stopping: it finishes what it runs and leaves.",
        ),
        other => return Err(WebError::NotFound(format!("no worker action {other:?}"))),
    };
    if !ctx.client.control_worker(id, control).await? {
        return Err(WebError::NotFound(format!("no live worker {id:?}")));
    }
    let short = id.get(..8).unwrap_or(id);
    Ok(back(&ctx, "/workers", &format!("Worker {short}: {note}")))
}
