//! Creating a queue from the dashboard's overview: a user who may act gets
//! the form and a queue with the options given; the name taken, a bad name
//! or size is a 400; a read-only user gets neither form nor action.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use axum::http::StatusCode;
use common::RedisServer;
use redjob::Client;
use redjob::queue::Queues;

#[tokio::test]
async fn a_queue_is_created_from_the_overview_by_a_user_who_may_act() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let app = http::users_app(&client);
    let (cookie, token) = http::session_as(&app, "alice").await;
    let page = http::get_as(&app, "/jobs", "alice", &cookie).await;
    assert!(page.body.contains("Create a queue"), "{}", page.body);
    let create_with = |name: &str, vt: &str, maxsize: &str| {
        axum::http::Request::post("/jobs/queues")
            .header("x-user", "alice")
            .header("cookie", cookie.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(format!(
                "csrf={token}&name={name}&vt={vt}&delay=0s&maxsize={maxsize}"
            )))
            .unwrap()
    };
    let create = |name: &str, maxsize: &str| create_with(name, "1m", maxsize);
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
    // part of a second, which RSMQ's seconds cannot keep: a 400, not cut
    let r = http::send(&app, create_with("parts", "1500ms", "65536")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body.contains("whole seconds"), "{}", r.body);
    // a read-only user has no form and may not post it
    let (bob_cookie, bob_token) = http::session_as(&app, "bob").await;
    let page = http::get_as(&app, "/jobs", "bob", &bob_cookie).await;
    assert!(!page.body.contains("Create a queue"), "{}", page.body);
    let r = http::post_as(&app, "/jobs/queues", "bob", &bob_cookie, &bob_token).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
}
