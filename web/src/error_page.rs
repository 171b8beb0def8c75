//! Error answers in the dashboard's page: a layer around every route puts a
//! 4xx or 5xx answer in the layout (header, navigation, style, links under
//! the mount point), with what [`WebError`](crate::error::WebError) said, or
//! with the plain text of axum's own error answers (an unknown path, a wrong
//! method, a rejected extractor).

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use crate::error::{Failure, KeptForm, WebError, message};
use crate::layout::{Nav, render};
use crate::{Ctx, Dashboard};

/// The longest plain-text error body [`in_layout`] reads to show.
const MAX_TEXT: usize = 4096;

/// A path under the dashboard that no route serves: a 404 like the others.
pub(crate) async fn no_route(uri: axum::http::Uri) -> WebError {
    WebError::NotFound(format!("no page {}", uri.path()))
}

/// Puts every error answer (4xx or 5xx) of the routes it wraps in the
/// dashboard's page: header, navigation and style, links under the mount
/// point, and the status with what went wrong. Other answers pass untouched.
pub(crate) async fn in_layout(
    State(app): State<Arc<Dashboard>>,
    req: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let ctx = match Ctx::from_request_parts(&mut parts, &app).await {
        Ok(ctx) => ctx,
        Err(never) => match never {},
    };
    let nav = Nav::of_path(parts.uri.path());
    let response = next.run(Request::from_parts(parts, body)).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut head, body) = response.into_parts();
    let text = match head.extensions.remove::<Failure>() {
        Some(Failure(text)) => text,
        // axum's own answers are short plain text (or nothing)
        None => match axum::body::to_bytes(body, MAX_TEXT).await {
            Ok(b) if !b.is_empty() => String::from_utf8_lossy(&b).into_owned(),
            _ => status.canonical_reason().unwrap_or("error").to_string(),
        },
    };
    let title = status.as_u16().to_string();
    let kept = head.extensions.remove::<KeptForm>();
    let body = maud::html! {
        (message(status, &text))
        @if let Some(KeptForm(form)) = &kept {
            p.muted { "As sent: correct it and save again." }
            (form)
        }
    };
    let mut page = render(&ctx, &title, nav, body);
    *page.status_mut() = status;
    // what the answer said besides its body (an Allow of a 405, say)
    for (name, value) in &head.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            page.headers_mut().append(name, value.clone());
        }
    }
    page
}
