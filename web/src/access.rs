//! Who may look and who may act: a user per request, from the app's resolver
//! ([`Dashboard::resolve_user`](crate::Dashboard::resolve_user)) or the
//! dashboard's own token ([`Dashboard::token`](crate::Dashboard::token)),
//! each with full or read-only access, and every action logged with its user.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;

use crate::Dashboard;
use crate::error::WebError;

/// What a user may do on the dashboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// See everything and act.
    Full,
    /// See everything, act on nothing (as
    /// [`Dashboard::read_only`](crate::Dashboard::read_only), for this user).
    ReadOnly,
}

/// Who a request comes from, and what they may do.
///
/// ```
/// use redjob_web::{Access, User};
///
/// let alice = User::full("alice");
/// assert_eq!(alice.access, Access::Full);
/// assert_eq!(User::read_only("bob").access, Access::ReadOnly);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct User {
    /// The name actions are recorded under (`dashboard <name>` in the
    /// queues' history) and logged with.
    pub name: String,
    /// What they may do.
    pub access: Access,
}

impl User {
    /// `name`, who may act.
    pub fn full(name: impl Into<String>) -> Self {
        User {
            name: name.into(),
            access: Access::Full,
        }
    }

    /// `name`, who may only look.
    pub fn read_only(name: impl Into<String>) -> Self {
        User {
            name: name.into(),
            access: Access::ReadOnly,
        }
    }
}

/// The app's resolver: a request's user, `None` to refuse it.
pub(crate) type Resolver = Arc<dyn Fn(&Parts) -> Option<User> + Send + Sync>;

/// The user a request's `Authorization` header proves with the dashboard's
/// token: Basic (any user name, the token as password; what a browser asks
/// for) or Bearer (the user `token`). `None` without it or with another.
fn by_token(parts: &Parts, token: &str) -> Option<User> {
    let auth = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, value) = auth.split_once(' ')?;
    let (name, given) = match scheme.to_ascii_lowercase().as_str() {
        "basic" => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(value.trim())
                .ok()?;
            let text = String::from_utf8(decoded).ok()?;
            let (name, password) = text.split_once(':')?;
            (name.to_string(), password.to_string())
        }
        "bearer" => ("token".to_string(), value.trim().to_string()),
        _ => return None,
    };
    // in time that depends on the length given alone, not on the token's
    let (g, t) = (given.as_bytes(), token.as_bytes());
    if t.is_empty() {
        return None;
    }
    let mut diff = u8::from(g.len() != t.len());
    for (i, b) in g.iter().enumerate() {
        diff |= b ^ t[i % t.len()];
    }
    // the user name is the requester's own word (any token holder may give
    // any): control characters are dropped before it is recorded
    let name: String = name.chars().filter(|c| !c.is_control()).take(64).collect();
    let name = if name.is_empty() {
        "token".into()
    } else {
        name
    };
    (diff == 0).then(|| User::full(name))
}

/// Resolves each request's user before its handler: with a token, a request
/// that does not give it gets 401 (and a browser asks for it); with a
/// resolver, a request it gives no user gets 403. The user goes with the
/// request (see [`crate::ctx::Ctx`]); an action (any request but a GET or
/// HEAD) is logged with it, the path it touched and how it ended.
pub(crate) async fn resolve(
    State(app): State<Arc<Dashboard>>,
    req: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let mut user = None;
    if let Some(token) = &app.token {
        match by_token(&parts, token) {
            Some(u) => user = Some(u),
            None => {
                let mut r =
                    (StatusCode::UNAUTHORIZED, "the dashboard needs its token").into_response();
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"redjob\", charset=\"UTF-8\""),
                );
                return r;
            }
        }
    }
    if let Some(resolver) = &app.resolver {
        match resolver(&parts) {
            Some(u) => user = Some(u),
            None => {
                return WebError::Forbidden("you have no access to this dashboard".into())
                    .into_response();
            }
        }
    }
    let acting = !matches!(parts.method, Method::GET | Method::HEAD);
    let path = parts.uri.path().to_string();
    let method = parts.method.clone();
    let name = user.as_ref().map(|u| u.name.clone());
    if let Some(u) = user {
        parts.extensions.insert(u);
    }
    let response = next.run(Request::from_parts(parts, body)).await;
    if acting {
        tracing::info!(
            target: "redjob_web::actions",
            user = name.as_deref().unwrap_or("-"),
            method = %method,
            path = %path,
            status = response.status().as_u16(),
            "dashboard action"
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(auth: Option<&str>) -> Parts {
        let mut b = axum::http::Request::builder().uri("/");
        if let Some(a) = auth {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_token_is_taken_by_basic_or_bearer_and_nothing_else() {
        let basic = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert_eq!(
            by_token(&parts(Some(&basic("alice:s3cret"))), "s3cret"),
            Some(User::full("alice"))
        );
        assert_eq!(
            by_token(&parts(Some("Bearer s3cret")), "s3cret"),
            Some(User::full("token"))
        );
        for bad in [
            None,
            Some(basic("alice:wrong").as_str()),
            Some("Bearer s3cre"),
            Some("Basic !!!"),
            Some("Digest s3cret"),
        ] {
            assert_eq!(by_token(&parts(bad), "s3cret"), None, "{bad:?}");
        }
    }
}
