//! Creating a queue from the dashboard's overview: a user who may act gets
//! the form and a queue with the options given; the name taken, a bad name
//! or size is a 400; a read-only user gets neither form nor action.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use axum::Router;
use axum::http::StatusCode;
use common::RedisServer;
use redjob::Client;
use redjob::queue::Queues;
use redjob_web::{Dashboard, User};

/// The dashboard under /jobs, its users told by the `x-user` header a
/// trusted proxy would set: alice acts, bob looks, anyone else is refused.
fn app(client: &Client) -> Router {
    let dashboard = Dashboard::new(client.clone()).resolve_user(|req| {
        match req.headers.get("x-user")?.to_str().ok()? {
            "alice" => Some(User::full("alice")),
            "bob" => Some(User::read_only("bob")),
            _ => None,
        }
    });
    Router::new().nest("/jobs", dashboard.router())
}

#[tokio::test]
async fn a_queue_is_created_from_the_overview_by_a_user_who_may_act() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let app = app(&client);
    let (cookie, token) = session_as(&app, "alice").await;
    let page = get_as(&app, "/jobs", "alice", &cookie).await;
    assert!(page.body.contains("Create a queue"), "{}", page.body);
    let create = |name: &str, maxsize: &str| {
        axum::http::Request::post("/jobs/queues")
            .header("x-user", "alice")
            .header("cookie", cookie.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(format!(
                "csrf={token}&name={name}&vt=1m&delay=0s&maxsize={maxsize}"
            )))
            .unwrap()
    };
    let made = http::send(&app, create("reports", "-1")).await;
    assert_eq!(made.status, StatusCode::SEE_OTHER, "{}", made.body);
    assert_eq!(made.location, "/jobs/queues/reports");
    let a = client.queues().attributes("reports").await.unwrap();
    assert_eq!((a.vt, a.maxsize), (60, -1));
    // again, or a bad name or size: a 400 that says why
    for (name, size) in [("reports", "65536"), ("no%20spaces", "65536"), ("ok", "12")] {
        let r = http::send(&app, create(name, size)).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{name} {size}: {}",
            r.body
        );
    }
    // a read-only user has no form and may not post it
    let (bob_cookie, bob_token) = session_as(&app, "bob").await;
    let page = get_as(&app, "/jobs", "bob", &bob_cookie).await;
    assert!(!page.body.contains("Create a queue"), "{}", page.body);
    let r = post_as(&app, "/jobs/queues", "bob", &bob_cookie, &bob_token).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}

/// A CSRF cookie and token for `user`, from a page.
async fn session_as(app: &Router, user: &str) -> (String, String) {
    let got = get_as(app, "/jobs/queues/mail", user, "").await;
    let set = got.cookie.expect("a CSRF cookie");
    let token = set
        .split(';')
        .next()
        .and_then(|kv| kv.split_once('='))
        .map(|(_, v)| v.to_string())
        .unwrap();
    (format!("redjob_csrf={token}"), token)
}

async fn get_as(app: &Router, path: &str, user: &str, cookie: &str) -> http::Got {
    let mut req = axum::http::Request::get(path).header("x-user", user);
    if !cookie.is_empty() {
        req = req.header("cookie", cookie);
    }
    http::send(app, req.body(axum::body::Body::empty()).unwrap()).await
}

async fn post_as(app: &Router, path: &str, user: &str, cookie: &str, token: &str) -> http::Got {
    let req = axum::http::Request::post(path)
        .header("x-user", user)
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(axum::body::Body::from(format!("csrf={token}")))
        .unwrap();
    http::send(app, req).await
}
