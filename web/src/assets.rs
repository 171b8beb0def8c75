//! The stylesheet and the script, compiled into the binary (the dashboard
//! needs no network but the app's own).

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};

use crate::error::WebError;

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/app.js");

pub(crate) async fn serve(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        "app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        _ => return WebError::NotFound(format!("no asset {file:?}")).into_response(),
    };
    (
        [
            (CONTENT_TYPE, kind),
            (CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}
