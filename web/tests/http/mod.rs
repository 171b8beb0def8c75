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
