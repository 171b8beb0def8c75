//! Worker controls from the dashboard, across two worker processes on one
//! Redis: a user who may act quiets a worker (the page says who did; the other
//! worker takes every new job), resumes it and stops it (its `Worker::run`
//! returns who stopped it); a read-only user sees no buttons and may not post;
//! an id that is no live worker is a 404.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;
#[path = "../../tests/common/worker_proc.rs"]
mod worker_proc;

use axum::http::StatusCode;
use common::RedisServer;
use redjob::ops::Admin;
use worker_proc::{run_naps, stop_all, two_workers, until};

/// A worker process (see `worker_proc::serve`).
#[test]
#[ignore = "a worker process for the controls' tests, not a test on its own"]
fn control_worker_process() {
    worker_proc::serve();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_quieted_resumed_and_stopped_from_the_dashboard() {
    let server = RedisServer::start();
    let url = server.url();
    let (client, mut procs, a, b) = two_workers(&url).await;
    let app = http::users_app(&client);
    let (cookie, token) = http::session_as(&app, "alice").await;
    let act = |user: &'static str, action: &str, id: &str| {
        let (cookie, token) = (cookie.clone(), token.clone());
        let req = axum::http::Request::post(format!("/jobs/workers/{action}"))
            .header("x-user", user)
            .header("cookie", cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(format!("csrf={token}&id={id}")))
            .unwrap();
        let app = app.clone();
        async move { http::send(&app, req).await }
    };

    let page = http::get_as(&app, "/jobs/workers", "alice", &cookie).await;
    assert_eq!(
        page.body.matches(">Quiet</button>").count(),
        2,
        "{}",
        page.body
    );
    assert_eq!(page.body.matches(">Stop this worker</button>").count(), 2);

    // quiet a: the page says who did, and b takes every new job
    let r = act("alice", "quiet", &a).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.body);
    assert_eq!(r.location, "/jobs/workers");
    until("a says it is quiet", async || {
        client
            .workers()
            .await
            .unwrap()
            .iter()
            .any(|w| w.id == a && w.quiet)
    })
    .await;
    let page = http::get_as(&app, "/jobs/workers", "alice", &cookie).await;
    assert!(
        page.body.contains("quiet by dashboard alice"),
        "{}",
        page.body
    );
    assert_eq!(page.body.matches(">Resume</button>").count(), 1);
    let by = run_naps(&client, 6).await;
    assert!(by.iter().all(|w| *w == b), "only b runs jobs: {by:?}");

    // resume a, quiet b: a runs them
    assert_eq!(
        act("alice", "resume", &a).await.status,
        StatusCode::SEE_OTHER
    );
    assert_eq!(
        act("alice", "quiet", &b).await.status,
        StatusCode::SEE_OTHER
    );
    until("a resumed, b quiet", async || {
        let w = client.workers().await.unwrap();
        w.iter().any(|w| w.id == a && !w.quiet) && w.iter().any(|w| w.id == b && w.quiet)
    })
    .await;
    let by = run_naps(&client, 4).await;
    assert!(by.iter().all(|w| *w == a), "only a runs jobs: {by:?}");

    // a read-only user has no buttons and may not act; no such worker: 404
    let (bob_cookie, _) = http::session_as(&app, "bob").await;
    let page = http::get_as(&app, "/jobs/workers", "bob", &bob_cookie).await;
    assert!(
        page.body.contains("quiet by dashboard alice"),
        "{}",
        page.body
    );
    for button in [
        ">Quiet</button>",
        ">Resume</button>",
        ">Stop this worker</button>",
    ] {
        assert!(!page.body.contains(button), "{}", page.body);
    }
    assert_eq!(act("bob", "stop", &a).await.status, StatusCode::FORBIDDEN);
    assert_eq!(
        act("alice", "stop", "no-such-worker").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        act("alice", "drain", &a).await.status,
        StatusCode::NOT_FOUND
    );

    // stop a
    assert_eq!(act("alice", "stop", &a).await.status, StatusCode::SEE_OTHER);
    let stopped = procs[0].line("stopped ").await;
    assert!(
        stopped.starts_with("Requested { by: \"dashboard alice\", at_ms: "),
        "{stopped}"
    );
    procs[0].line("still here").await;
    until("a left", async || {
        client.workers().await.unwrap().iter().all(|w| w.id != a)
    })
    .await;
    stop_all(&mut procs);
}
