//! The POSTed actions: each checks the CSRF token (and read-only mode), acts
//! through redjob's operations API, and redirects to the page it came from
//! with a note of what it did.

mod batches;
mod dead;
mod job;
mod live;
mod queue;
mod topics;

pub(crate) use batches::batch_cancel;
pub(crate) use dead::dead;
pub(crate) use job::job;
pub(crate) use live::{periodic, worker};
pub(crate) use queue::{create_queue, purge, queue};
pub(crate) use topics::{rewind, topic_dead};

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};

use crate::Ctx;
use crate::ctx::{NOTE_COOKIE, allowed};
use crate::error::{WebError, WebResult};

/// A form's fields, in order (a name may repeat: the selected ids).
struct Fields(Vec<(String, String)>);

impl Fields {
    /// Whether a field whose name starts with `prefix` was sent.
    fn any(&self, prefix: &str) -> bool {
        self.0.iter().any(|(k, _)| k.starts_with(prefix))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The queue settings' forms whose fields were sent (each form saves
    /// its own; one post saves one).
    fn forms(&self) -> Vec<&'static str> {
        let mut forms = Vec::new();
        if self.get("concurrency").is_some() || self.get("global").is_some() {
            forms.push("concurrency");
        }
        if self.get("rate_limit").is_some() {
            forms.push("rate limit");
        }
        if self.any("history") {
            forms.push("history");
        }
        if self.any("dead_") {
            forms.push("dead-letter");
        }
        if self.get("reset").is_some() {
            forms.push("reset");
        }
        forms
    }

    /// Field `name`, trimmed, unless it is left out, empty, or sent as the
    /// page showed it (its hidden `<name>_was`): a settings form saved with
    /// one field changed changes that part alone, and leaves the others as
    /// stored now, which another operator may have changed since the page
    /// was read.
    fn changed(&self, name: &str) -> Option<&str> {
        let was = self.get(&format!("{name}_was")).map(str::trim);
        self.get(name)
            .map(str::trim)
            .filter(|v| !v.is_empty() && Some(*v) != was)
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The form, once the request may act.
fn checked(ctx: &Ctx, headers: &HeaderMap, body: &Bytes) -> WebResult<Fields> {
    if ctx.read_only {
        return Err(WebError::Forbidden("this dashboard is read-only".into()));
    }
    let fields = Fields(
        serde_urlencoded::from_bytes(body)
            .map_err(|e| WebError::BadRequest(format!("bad form: {e}")))?,
    );
    if !allowed(headers, fields.get("csrf")) {
        return Err(WebError::Forbidden(
            "the form's token does not match this dashboard's cookie, or it came from another site: reload the page and try again".into(),
        ));
    }
    Ok(fields)
}

/// Back to `path` with `note` shown on top (once, through a cookie).
fn back(ctx: &Ctx, path: &str, note: &str) -> Response {
    let mut response = Redirect::to(&ctx.link(path)).into_response();
    let encoded = serde_urlencoded::to_string([("n", note)]).unwrap_or_default();
    ctx.set_cookie(
        &mut response,
        NOTE_COOKIE,
        encoded.strip_prefix("n=").unwrap_or(""),
    );
    response
}
/// The most dead letters one post may name: the most a page shows
/// ([`redjob::inspect::MAX_PAGE`]). A hand-made form naming more is refused
/// whole (each id is looked up or acted on in a request of its own).
pub(crate) const MAX_SELECTED: usize = redjob::inspect::MAX_PAGE;

/// `ids` (each once), refused with a 400 when more than [`MAX_SELECTED`].
fn at_most_a_page<T>(ids: Vec<T>) -> WebResult<Vec<T>> {
    if ids.len() > MAX_SELECTED {
        return Err(WebError::BadRequest(format!(
            "{} dead letters selected: one action takes at most {} (the most a page shows); select fewer, or act on every dead letter that matches",
            crate::fmt::num(ids.len() as u64),
            crate::fmt::num(MAX_SELECTED as u64)
        )));
    }
    Ok(ids)
}

/// The most ids a note names (the rest are counted): a note travels in a
/// cookie, which browsers drop whole past 4,096 bytes.
const NOTE_IDS: usize = 20;

/// `ids` for a note: the first [`NOTE_IDS`] joined with ", ", then how many
/// more there are.
fn named<T: ToString>(ids: &[T]) -> String {
    let mut out: Vec<String> = ids.iter().take(NOTE_IDS).map(ToString::to_string).collect();
    if ids.len() > NOTE_IDS {
        out.push(format!(
            "and {} more",
            crate::fmt::num((ids.len() - NOTE_IDS) as u64)
        ));
    }
    out.join(", ")
}

/// A confirmation's cutoff (its hidden `upto`, Unix ms), when it carries one.
fn upto(f: &Fields) -> WebResult<Option<u64>> {
    match f.get("upto").map(str::trim).filter(|u| !u.is_empty()) {
        None => Ok(None),
        Some(u) => u
            .parse()
            .map(Some)
            .map_err(|_| WebError::BadRequest(format!("upto {u:?}: a time in Unix ms"))),
    }
}
