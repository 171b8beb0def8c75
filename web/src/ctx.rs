//! What every handler knows of its request: the dashboard, the path it is
//! mounted under, and the CSRF token.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{FromRequestParts, OriginalUri, Request, State};
use axum::http::HeaderMap;
use axum::http::header::{COOKIE, HOST, ORIGIN};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Dashboard;
use crate::access::{Access, User};
use crate::error::WebError;

/// The CSRF cookie: a random token that every form repeats.
pub(crate) const CSRF_COOKIE: &str = "redjob_csrf";
/// The note an action leaves for the page it redirects to (shown once). A
/// cookie, not a query parameter, so that no link can make the dashboard say
/// something.
pub(crate) const NOTE_COOKIE: &str = "redjob_note";

pub(crate) struct Ctx {
    pub app: Arc<Dashboard>,
    /// The path the dashboard is mounted under, without a trailing slash ("" at
    /// the root): every link starts with it.
    pub base: String,
    /// The request's CSRF token, from its cookie or new.
    pub csrf: String,
    /// The token is new: the response sets the cookie.
    pub new_csrf: bool,
    /// A message from the action that redirected here (its cookie).
    pub note: Option<String>,
    /// Who asks, when the dashboard resolves users (see [`crate::access`]).
    pub user: Option<User>,
    /// Nothing may be done: the dashboard, or this user, is read-only.
    pub read_only: bool,
    /// The client its actions go through, acting as `dashboard <user>` for a
    /// resolved user.
    pub client: redjob::Client,
}

impl Ctx {
    /// Sets cookie `name` to `value` for the dashboard's paths (`HttpOnly`,
    /// `SameSite=Strict`); an empty `value` deletes it.
    pub fn set_cookie(&self, response: &mut Response, name: &str, value: &str) {
        let path = if self.base.is_empty() {
            "/"
        } else {
            &self.base
        };
        let expire = if value.is_empty() { "; Max-Age=0" } else { "" };
        let cookie = format!("{name}={value}; Path={path}{expire}; HttpOnly; SameSite=Strict");
        if let Ok(v) = axum::http::HeaderValue::from_str(&cookie) {
            response
                .headers_mut()
                .append(axum::http::header::SET_COOKIE, v);
        }
    }

    /// A link to `path` (starting with '/') under the dashboard's mount point;
    /// "/" is the mount point itself (axum's `nest` serves "/jobs", not "/jobs/").
    pub fn link(&self, path: &str) -> String {
        match path {
            "/" if !self.base.is_empty() => self.base.clone(),
            _ => format!("{}{path}", self.base),
        }
    }
}

impl FromRequestParts<Arc<Dashboard>> for Ctx {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        app: &Arc<Dashboard>,
    ) -> Result<Self, Self::Rejection> {
        let inner = parts.uri.path().to_string();
        let outer = parts
            .extensions
            .get::<OriginalUri>()
            .map_or_else(|| inner.clone(), |o| o.0.path().to_string());
        let base = mount_point(&outer, &inner);
        let token = cookie(&parts.headers, CSRF_COOKIE).filter(|t| valid_token(t));
        let new_csrf = token.is_none();
        let csrf = token.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        let note = cookie(&parts.headers, NOTE_COOKIE)
            .and_then(|v| serde_urlencoded_pairs(&format!("n={v}")).pop())
            .map(|(_, v)| v)
            .filter(|v| !v.is_empty());
        let user = parts.extensions.get::<User>().cloned();
        let read_only =
            app.read_only || user.as_ref().is_some_and(|u| u.access == Access::ReadOnly);
        let client = match &user {
            Some(u) => app
                .client
                .clone()
                .acting_as(&format!("dashboard {}", u.name)),
            None => app.client.clone(),
        };
        Ok(Ctx {
            app: app.clone(),
            base,
            csrf,
            new_csrf,
            note,
            user,
            read_only,
            client,
        })
    }
}

/// The prefix of `outer` (the path the client asked for) that a nesting router
/// stripped to leave `inner`.
fn mount_point(outer: &str, inner: &str) -> String {
    let base = if inner == "/" {
        outer.trim_end_matches('/')
    } else {
        outer.strip_suffix(inner).unwrap_or("")
    };
    base.trim_end_matches('/').to_string()
}

/// The query string `q` as pairs; an undecodable one as none.
pub(crate) fn serde_urlencoded_pairs(q: &str) -> Vec<(String, String)> {
    serde_urlencoded::from_str(q).unwrap_or_default()
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub(crate) fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

/// A token this dashboard could have made: 32 lowercase hex digits.
fn valid_token(t: &str) -> bool {
    t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether a POST may act: its form repeats the cookie's token, and it comes
/// from this site (an `Origin` header, when sent, names the `Host`).
pub(crate) fn allowed(headers: &HeaderMap, token: Option<&str>) -> bool {
    let Some(cookie) = cookie(headers, CSRF_COOKIE).filter(|t| valid_token(t)) else {
        return false;
    };
    let same_token = token.is_some_and(|t| constant_eq(t.as_bytes(), cookie.as_bytes()));
    // what the browser says of the request's origin (a proxy may rewrite Host,
    // not this); without it, the Origin must name the Host
    if let Some(site) = headers.get("sec-fetch-site") {
        return same_token && site.as_bytes() == b"same-origin";
    }
    let same_site = match (headers.get(ORIGIN), headers.get(HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => {
            let origin = origin.to_str().unwrap_or("");
            let host = host.to_str().unwrap_or("");
            let without_scheme = origin.split_once("://").map_or("", |(_, rest)| rest);
            !host.is_empty() && without_scheme == host
        }
        (Some(_), None) => false,
    };
    same_token && same_site
}

/// Answers only requests whose `Host` names one of the dashboard's allowed
/// hosts (when it has a list): a page on another site that makes its own name
/// resolve to the dashboard's address (DNS rebinding) gets nothing.
pub(crate) async fn guard_host(
    State(app): State<Arc<Dashboard>>,
    req: Request,
    next: Next,
) -> Response {
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(host_name);
    match host {
        Some(h) if app.hosts.contains(&h) => next.run(req).await,
        _ => WebError::Forbidden(format!(
            "this dashboard does not answer to the host {:?} (its allowed hosts: {})",
            host.unwrap_or_default(),
            app.hosts.join(", ")
        ))
        .into_response(),
    }
}

/// The host a `Host` header names, without its port, lowercased.
pub(crate) fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = match host.strip_prefix('[') {
        Some(rest) => rest
            .split(']')
            .next()
            .map_or(host.to_string(), |h| format!("[{h}]")),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name.to_string(),
            _ => host.to_string(),
        },
    };
    name.to_ascii_lowercase()
}

/// Compares in time independent of where the bytes differ.
fn constant_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Refuses the confirmation pages of actions in read-only mode.
pub(crate) fn writable(ctx: &Ctx) -> Result<(), WebError> {
    if ctx.read_only {
        return Err(WebError::Forbidden("this dashboard is read-only".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::*;

    #[test]
    fn the_mount_point_is_what_nesting_stripped() {
        assert_eq!(mount_point("/", "/"), "");
        assert_eq!(mount_point("/jobs", "/"), "/jobs");
        assert_eq!(mount_point("/jobs/", "/"), "/jobs");
        assert_eq!(
            mount_point("/admin/jobs/queues/a", "/queues/a"),
            "/admin/jobs"
        );
        assert_eq!(mount_point("/queues/a", "/queues/a"), "");
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn a_post_needs_the_cookies_token_and_this_sites_origin() {
        let t = "0123456789abcdef0123456789abcdef";
        let c = format!("a=b; {CSRF_COOKIE}={t}");
        assert!(allowed(&headers(&[("cookie", &c)]), Some(t)));
        let same = [
            ("cookie", c.as_str()),
            ("host", "h:1"),
            ("origin", "http://h:1"),
        ];
        assert!(allowed(&headers(&same), Some(t)));
        let other = [
            ("cookie", c.as_str()),
            ("host", "h:1"),
            ("origin", "http://evil"),
        ];
        assert!(!allowed(&headers(&other), Some(t)));
        assert!(!allowed(&headers(&[("cookie", &c)]), None));
        let wrong = "0123456789abcdef0123456789abcdee";
        assert!(!allowed(&headers(&[("cookie", &c)]), Some(wrong)));
        assert!(!allowed(&headers(&[]), Some(t)));
        let short = format!("{CSRF_COOKIE}=abc");
        assert!(!allowed(&headers(&[("cookie", &short)]), Some("abc")));
        // behind a proxy that rewrites Host, the browser's Sec-Fetch-Site decides
        let proxied = [
            ("cookie", c.as_str()),
            ("host", "127.0.0.1:8080"),
            ("origin", "https://dash.example"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert!(allowed(&headers(&proxied), Some(t)));
        let cross = [
            ("cookie", c.as_str()),
            ("host", "h:1"),
            ("origin", "http://h:1"),
            ("sec-fetch-site", "cross-site"),
        ];
        assert!(!allowed(&headers(&cross), Some(t)));
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("LocalHost:8080"), "localhost");
        assert_eq!(host_name("127.0.0.1"), "127.0.0.1");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("dash.example"), "dash.example");
    }
}
