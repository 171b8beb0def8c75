//! Requests to the dashboard's router, as a browser sends them, and what they
//! got back (shared by the dashboard's HTTP tests).

#![allow(dead_code)]

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

pub struct Got {
    pub status: StatusCode,
    pub location: String,
    pub cookie: Option<String>,
    pub body: String,
}

pub async fn send(app: &Router, req: Request<Body>) -> Got {
    let res = tokio::time::timeout(Duration::from_secs(20), app.clone().oneshot(req))
        .await
        .expect("answered within 20 s")
        .unwrap();
    let status = res.status();
    let location = res
        .headers()
        .get(header::LOCATION)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let cookie = res
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Got {
        status,
        location,
        cookie,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

pub async fn get(app: &Router, path: &str) -> Got {
    send(app, Request::get(path).body(Body::empty()).unwrap()).await
}

/// A GET with a `Cookie` header.
pub async fn get_with(app: &Router, path: &str, cookie: &str) -> Got {
    let req = Request::get(path).header(header::COOKIE, cookie);
    send(app, req.body(Body::empty()).unwrap()).await
}

/// The note an action left (its cookie), decoded.
pub fn note(got: &Got) -> String {
    let set = got.cookie.as_deref().unwrap_or("");
    let value = set
        .strip_prefix("redjob_note=")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap();
    serde_urlencoded::from_str::<Vec<(String, String)>>(&format!("n={value}")).unwrap()[0]
        .1
        .clone()
}

/// A POST of `form` with the session's cookie (and an Origin of this site).
pub async fn post(app: &Router, path: &str, cookie: &str, form: &[(&str, &str)]) -> Got {
    let req = Request::post(path)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::COOKIE, cookie)
        .header(header::HOST, "dash.local")
        .header(header::ORIGIN, "http://dash.local")
        .body(Body::from(serde_urlencoded::to_string(form).unwrap()))
        .unwrap();
    send(app, req).await
}

/// The session a first view of `path` starts: its cookie header and form
/// token, which the page's forms carry (a read-only page has no form).
pub async fn session(app: &Router, path: &str, forms: bool) -> (String, String) {
    let page = get(app, path).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let set = page.cookie.expect("the first view sets the CSRF cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let pair = set.split(';').next().unwrap().to_string();
    let token = pair.split_once('=').unwrap().1.to_string();
    let field = format!(r#"name="csrf" value="{token}""#);
    assert_eq!(page.body.contains(&field), forms, "{}", page.body);
    assert_eq!(page.body.contains(r#"name="csrf""#), forms);
    (pair, token)
}

/// The dashboard under /jobs, its users told by the `x-user` header a
/// trusted proxy would set: alice acts, bob looks, anyone else is refused.
pub fn users_app(client: &redjob::Client) -> Router {
    let dashboard = redjob_web::Dashboard::new(client.clone()).resolve_user(|req| {
        match req.headers.get("x-user")?.to_str().ok()? {
            "alice" => Some(redjob_web::User::full("alice")),
            "bob" => Some(redjob_web::User::read_only("bob")),
            _ => None,
        }
    });
    Router::new().nest("/jobs", dashboard.router())
}

/// A CSRF cookie and token for `user`, from a page.
pub async fn session_as(app: &Router, user: &str) -> (String, String) {
    let got = get_as(app, "/jobs", user, "").await;
    let set = got.cookie.expect("a CSRF cookie");
    let token = set
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_string())
        .unwrap();
    (format!("redjob_csrf={token}"), token)
}

pub async fn get_as(app: &Router, path: &str, user: &str, cookie: &str) -> Got {
    let mut req = axum::http::Request::get(path).header("x-user", user);
    if !cookie.is_empty() {
        req = req.header("cookie", cookie);
    }
    send(app, req.body(axum::body::Body::empty()).unwrap()).await
}

pub async fn post_as(app: &Router, path: &str, user: &str, cookie: &str, token: &str) -> Got {
    let req = axum::http::Request::post(path)
        .header("x-user", user)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(axum::body::Body::from(format!("csrf={token}")))
        .unwrap();
    send(app, req).await
}
