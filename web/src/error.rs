//! What a page or action answers when it cannot: a page with the status that
//! says why (404 for an unknown queue or job, 400 for bad input, 403 for a
//! refused action, 501 for what this Redis server's version cannot do, 503
//! when Redis does not answer).
//!
//! A handler's error has no request to render with (no mount point, so no
//! links), so it answers in two steps: [`WebError`] makes a bare page and
//! attaches what it says as a [`Failure`] extension, and the router's layer
//! in `error_page`, which knows the request, puts it in the dashboard's page
//! with its navigation.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

pub(crate) enum WebError {
    NotFound(String),
    BadRequest(String),
    /// A 400 for a form: what was wrong, and the form as sent, kept below it.
    BadForm(String, Markup),
    Forbidden(String),
    /// What this Redis server cannot do (an older version): 501, as asking
    /// again will not help.
    Unsupported(String),
    Backend(redjob::Error),
}

pub(crate) type WebResult<T = Response> = Result<T, WebError>;

/// What an error response says, for the error-page layer to show.
#[derive(Clone)]
pub(crate) struct Failure(pub String);

/// The form an error response keeps (a 400 of a settings form), for the
/// error-page layer to show below what it says.
#[derive(Clone)]
pub(crate) struct KeptForm(pub Markup);

impl From<redjob::Error> for WebError {
    fn from(e: redjob::Error) -> Self {
        match e {
            redjob::Error::QueueNotFound { name } => {
                WebError::NotFound(format!("no queue {name:?}"))
            }
            redjob::Error::SubscriberNotFound { .. } => WebError::NotFound(e.to_string()),
            redjob::Error::QueueExists { .. } => WebError::BadRequest(e.to_string()),
            redjob::Error::InvalidQueueName { .. }
            | redjob::Error::InvalidMessageId { .. }
            | redjob::Error::InvalidValue { .. } => WebError::BadRequest(e.to_string()),
            redjob::Error::ServerTooOld { .. } => WebError::Unsupported(e.to_string()),
            e => WebError::Backend(e),
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let mut kept = None;
        let (status, text) = match self {
            WebError::NotFound(t) => (StatusCode::NOT_FOUND, t),
            WebError::BadRequest(t) => (StatusCode::BAD_REQUEST, t),
            WebError::BadForm(t, form) => {
                kept = Some(form);
                (StatusCode::BAD_REQUEST, t)
            }
            WebError::Forbidden(t) => (StatusCode::FORBIDDEN, t),
            WebError::Unsupported(t) => (StatusCode::NOT_IMPLEMENTED, t),
            WebError::Backend(e) => (StatusCode::SERVICE_UNAVAILABLE, backend_failed(&e)),
        };
        // bare, for an answer outside the layer (the host guard's refusal)
        let page = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (status.as_u16()) " · redjob" }
                }
                body style="font-family: system-ui, sans-serif; margin: 2rem" {
                    (message(status, &text))
                    @if let Some(form) = &kept { (form) }
                }
            }
        };
        let mut response = (status, page).into_response();
        response.extensions_mut().insert(Failure(text));
        if let Some(form) = kept {
            response.extensions_mut().insert(KeptForm(form));
        }
        response
    }
}

/// What a page says of the backend's error: a Redis that did not answer in
/// time, or cannot be reached, is said so with what to expect, and with
/// redis-rs's own words ("timed out", "broken pipe", "Connection refused"),
/// which are logged too (warn); any other error as it is.
fn backend_failed(e: &redjob::Error) -> String {
    let error = match e {
        redjob::Error::Redis(error) | redjob::Error::Connect { error, .. } => error,
        e => return format!("the backend failed: {e}"),
    };
    if error.is_timeout() {
        tracing::warn!(error = %e, "a dashboard page: Redis did not answer in time");
        format!(
            "Redis did not answer in time (the client's response timeout: {e}): it is stalled or too busy. This page answers again once Redis does."
        )
    } else if error.is_io_error() || error.is_connection_dropped() || error.is_connection_refusal()
    {
        format!("Redis cannot be reached ({error}). This page answers again once it can.")
    } else {
        format!("the backend failed: {e}")
    }
}

/// The heading and text of an error page.
pub(crate) fn message(status: StatusCode, text: &str) -> Markup {
    html! {
        h1 { (status) }
        p.error role="alert" { (text) }
    }
}
