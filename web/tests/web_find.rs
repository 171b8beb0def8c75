//! The search box of the queue list: a job found by id in whichever queue
//! holds it, a clear not-found for an id no queue holds, a bad request for
//! text that is no id.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use axum::Router;
use axum::http::StatusCode;
use common::RedisServer;
use http::get;
use redjob::Client;
use redjob::queue::{QueueOptions, Queues, SendMessage};

#[tokio::test]
async fn the_search_box_finds_a_job_in_any_queue() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.queues();
    for name in ["alpha", "beta", "gamma"] {
        q.create_queue(name, QueueOptions::default()).await.unwrap();
    }
    let id = q.send("gamma", SendMessage::new("hi")).await.unwrap();
    let app = Router::new().nest("/jobs", redjob_web::router(client.clone()));

    let overview = get(&app, "/jobs").await;
    assert!(
        overview.body.contains(r#"action="/jobs/find""#) && overview.body.contains(r#"name="id""#),
        "{}",
        overview.body
    );
    let found = get(&app, &format!("/jobs/find?id={id}")).await;
    assert_eq!(found.status, StatusCode::SEE_OTHER);
    assert_eq!(found.location, format!("/jobs/queues/gamma/jobs/{id}"));
    let page = get(&app, &found.location).await;
    assert_eq!(page.status, StatusCode::OK);

    let nobody = "0000000000abcdefghijklmnopqrstuv";
    let missing = get(&app, &format!("/jobs/find?id={nobody}")).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("in any queue"), "{}", missing.body);
    let bad = get(&app, "/jobs/find?id=not-an-id").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("is not a job id"), "{}", bad.body);
}

#[tokio::test]
async fn the_job_page_shows_each_attempt() {
    use redjob::backend::{Backend, Ran, Reschedule, RunBy, Settle};
    use redjob::inspect::AttemptOutcome;
    use std::time::Duration;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    q.create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let id = Queues::send(&q, "mail", SendMessage::new("hi"))
        .await
        .unwrap();
    let d = q
        .fetch("mail", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let now = d.token.lease_until_ms() - 60_000;
    let settle = Settle {
        reschedules: vec![Reschedule {
            id,
            token: d.token,
            delay: Duration::from_secs(600),
            deliveries: 1,
            release: false,
            error: Some("smtp <refused>".into()),
        }],
        ran: vec![Ran {
            id,
            started_ms: now,
            ended_ms: now + 1500,
            outcome: AttemptOutcome::Timeout,
            job_type: None,
        }],
        by: Some(RunBy {
            worker: "w-77".into(),
            host: "web-3".into(),
        }),
        ..Settle::default()
    };
    assert_eq!(q.settle("mail", &settle).await.unwrap().rescheduled, 1);
    let app = Router::new().nest("/jobs", redjob_web::router(client.clone()));
    let page = get(&app, &format!("/jobs/queues/mail/jobs/{id}")).await;
    assert_eq!(page.status, StatusCode::OK);
    let runs = page
        .body
        .split(r#"<table class="runs">"#)
        .nth(1)
        .expect("an attempts table");
    for want in [
        "timeout",
        "1.5s",
        "<code>w-77</code> on web-3",
        "smtp &lt;refused&gt;",
    ] {
        assert!(runs.contains(want), "{want} in {runs}");
    }
}
