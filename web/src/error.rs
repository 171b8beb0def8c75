//! What a page or action answers when it cannot: a page with the status that
//! says why (404 for an unknown queue or job, 400 for bad input, 403 for a
//! refused action, 503 when Redis does not answer).
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
    Forbidden(String),
    Backend(redjob::Error),
}

pub(crate) type WebResult<T = Response> = Result<T, WebError>;

/// What an error response says, for the error-page layer to show.
#[derive(Clone)]
pub(crate) struct Failure(pub String);

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
            e => WebError::Backend(e),
        }
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let (status, text) = match self {
            WebError::NotFound(t) => (StatusCode::NOT_FOUND, t),
            WebError::BadRequest(t) => (StatusCode::BAD_REQUEST, t),
            WebError::Forbidden(t) => (StatusCode::FORBIDDEN, t),
            WebError::Backend(e) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the backend failed: {e}"),
            ),
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
                }
            }
        };
        let mut response = (status, page).into_response();
        response.extensions_mut().insert(Failure(text));
        response
    }
}

/// The heading and text of an error page.
pub(crate) fn message(status: StatusCode, text: &str) -> Markup {
    html! {
        h1 { (status) }
        p.error role="alert" { (text) }
    }
}
