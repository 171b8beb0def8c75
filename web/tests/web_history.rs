//! The queue's history on the dashboard: the Finished tab lists finished jobs
//! with how they ended, a finished job's page offers to run it again, and the
//! copy's page names the job it copies; the queue page shows run times.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::time::Duration;

use axum::http::StatusCode;
use common::RedisServer;
use http::{get_with, note, post, session};
use redjob::Client;
use redjob::backend::{Backend, Ran, Settle};
use redjob::inspect::AttemptOutcome;
use redjob::inspect::Inspect;
use redjob::queue::{QueueOptions, Queues, SendMessage};

#[tokio::test]
async fn finished_jobs_are_listed_and_run_again_from_their_page() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    q.create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    let id = Queues::send(
        &q,
        "mail",
        SendMessage::new(r#"{"type":"Welcome","args":{"to":7}}"#),
    )
    .await
    .unwrap();
    let d = q
        .fetch("mail", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let ack = Settle {
        acks: vec![(id, d.token)],
        ran: vec![Ran {
            id,
            started_ms: 1_790_000_000_000,
            ended_ms: 1_790_000_000_030,
            outcome: AttemptOutcome::Ok,
            job_type: Some("Welcome".into()),
        }],
        ..Settle::default()
    };
    q.settle("mail", &ack).await.unwrap();
    let cancelled = Queues::send(&q, "mail", SendMessage::new("plain"))
        .await
        .unwrap();
    q.cancel("mail", &cancelled).await.unwrap();

    let app = redjob_web::router(client.clone());
    let (cookie, token) = session(&app, "/queues/mail", true).await;
    let tab = get_with(&app, "/queues/mail?state=finished", &cookie).await;
    assert_eq!(tab.status, StatusCode::OK);
    for want in [
        id.to_string(),
        cancelled.to_string(),
        "succeeded".into(),
        "cancelled".into(),
    ] {
        assert!(tab.body.contains(&want), "{want} in {}", tab.body);
    }
    let page = get_with(&app, &format!("/queues/mail/jobs/{id}"), &cookie).await;
    assert!(page.body.contains("Run again"), "{}", page.body);
    // the queue page's run times: one run of 30 ms
    let queue = get_with(&app, "/queues/mail", &cookie).await;
    let times = queue
        .body
        .split("Run times")
        .nth(1)
        .expect("a run-times table");
    assert!(
        times.contains("Welcome") && times.contains("≤ 50ms"),
        "{times}"
    );
    let ran = post(
        &app,
        &format!("/queues/mail/jobs/{id}/retry"),
        &cookie,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(ran.status, StatusCode::SEE_OTHER);
    assert!(
        note(&ran).contains(&format!("a copy of {id}")),
        "{}",
        note(&ran)
    );
    let ready = q.peek("mail", 10).await.unwrap();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0].retry_of(), Some(id));
    let copy = get_with(&app, &format!("/queues/mail/jobs/{}", ready[0].id), &cookie).await;
    assert!(
        copy.body.contains("A copy of") && copy.body.contains(&id.to_string()),
        "{}",
        copy.body
    );
    // the cancelled job's page says by whom; a waiting job has nothing to run again
    let gone = get_with(&app, &format!("/queues/mail/jobs/{cancelled}"), &cookie).await;
    assert!(
        gone.body.contains("<dt>By</dt><dd>api</dd>"),
        "{}",
        gone.body
    );
    let r = post(
        &app,
        &format!("/queues/mail/jobs/{}/retry", ready[0].id),
        &cookie,
        &[("csrf", &token)],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // a purge from the dashboard: one event on the Finished tab, with who
    let purged = post(&app, "/queues/mail/purge", &cookie, &[("csrf", &token)]).await;
    assert_eq!(purged.status, StatusCode::SEE_OTHER);
    let tab = get_with(&app, "/queues/mail?state=finished", &cookie).await;
    let events = tab
        .body
        .split(r#"<ul id="events">"#)
        .nth(1)
        .expect("events");
    assert!(events.contains("purged 1 jobs by dashboard"), "{events}");
}
