//! Access to a mounted dashboard: the app's resolver gives each request a
//! user with full or read-only access (none: 403); a read-only user sees no
//! action and may POST none; a user's actions are recorded under their name
//! and logged with it and what they touched.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use common::RedisServer;
use http::get_with;
use redjob::Client;
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues};

/// What the log printed.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// alone in its binary: tracing caches a callsite's interest process-wide, so
// another test's thread could hide the log from this one's subscriber
#[tokio::test]
async fn each_user_gets_their_access_and_their_actions_carry_their_name() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let app = http::users_app(&client);
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    // no user: refused
    let nobody = get_with(&app, "/jobs/queues/mail", "").await;
    assert_eq!(nobody.status, StatusCode::FORBIDDEN, "{}", nobody.body);
    let eve = http::send(
        &app,
        axum::http::Request::get("/jobs")
            .header("x-user", "eve")
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(eve.status, StatusCode::FORBIDDEN);

    // bob looks: the page, no buttons; his POST is refused
    let (bob_cookie, bob_token) = http::session_as(&app, "bob").await;
    let page = http::get_as(&app, "/jobs/queues/mail", "bob", &bob_cookie).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("read-only") && !page.body.contains(">Pause<"),
        "{}",
        page.body
    );
    let refused = http::post_as(
        &app,
        "/jobs/queues/mail/pause",
        "bob",
        &bob_cookie,
        &bob_token,
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(!client.is_paused("mail").await.unwrap());
    let confirm = http::get_as(&app, "/jobs/queues/mail/purge", "bob", &bob_cookie).await;
    assert_eq!(confirm.status, StatusCode::FORBIDDEN);
    for action in ["run", "pause", "resume"] {
        let r = http::post_as(
            &app,
            &format!("/jobs/periodic/{action}"),
            "bob",
            &bob_cookie,
            &bob_token,
        )
        .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{action}");
    }

    // alice acts, as herself
    let (cookie, token) = http::session_as(&app, "alice").await;
    let page = http::get_as(&app, "/jobs/queues/mail", "alice", &cookie).await;
    assert!(page.body.contains(">Pause<"), "{}", page.body);
    let paused = http::post_as(&app, "/jobs/queues/mail/pause", "alice", &cookie, &token).await;
    assert_eq!(paused.status, StatusCode::SEE_OTHER);
    assert!(client.is_paused("mail").await.unwrap());
    let events = client.history_events("mail").await.unwrap();
    assert_eq!(events[0].what, "paused");
    assert_eq!(events[0].by.as_deref(), Some("dashboard alice"));

    // every action logged, with its user, what it touched and how it ended
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("dashboard action"))
        .collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[0].contains("user=\"bob\"") || lines[0].contains("user=bob"),
        "{text}"
    );
    assert!(
        lines[0].contains("status=403") && lines[0].contains("/queues/mail/pause"),
        "{text}"
    );
    assert!(
        lines[4].contains("alice") && lines[4].contains("status=303"),
        "{text}"
    );
}
