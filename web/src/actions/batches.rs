//! A batch's action: cancel it.

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::HeaderMap;
use axum::response::Response;

use super::{back, checked};
use crate::Ctx;
use crate::error::{WebError, WebResult};

/// Cancels a batch: it takes no more jobs, and workers cancel its jobs as
/// they fetch them.
pub(crate) async fn batch_cancel(
    ctx: Ctx,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> WebResult<Response> {
    checked(&ctx, &headers, &body)?;
    let id: redjob::ops::BatchId = id
        .parse()
        .map_err(|_| WebError::NotFound(format!("{id:?} is not a batch id")))?;
    if !ctx.client.cancel_batch(&id).await? {
        return Err(WebError::NotFound(format!(
            "batch {id} was not cancelled: unknown, completed, or cancelled already"
        )));
    }
    Ok(back(
        &ctx,
        &format!("/batches/{id}"),
        &format!("Batch {id} cancelled: workers cancel its jobs as they fetch them."),
    ))
}
