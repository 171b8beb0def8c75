//! A running job's page says when its current attempt started, within a
//! second of that start: not the previous attempt's, not nothing until the
//! worker's next heartbeat.

#[path = "../../tests/common/mod.rs"]
mod common;
mod http;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::RedisServer;
use http::get;
use redjob::inspect::{Inspect, JobState};
use redjob::ops::Admin;
use redjob::{Client, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// Fails its first attempt at once, runs the second until released.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "web_twice", queue = "web_twice")]
struct Twice {
    n: u32,
}

impl Job for Twice {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            return Err(JobError::retry_after("not yet", Duration::from_millis(300)));
        }
        ctx.data::<Arc<Notify>>()?.notified().await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_jobs_page_shows_its_current_attempts_start() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let release = Arc::new(Notify::new());
    let worker = redjob::Worker::builder(client.backend())
        .register::<Twice>()
        .lease(Duration::from_secs(30))
        .data(release.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    let id = client.enqueue(&Twice { n: 1 }).await.unwrap();

    // the second attempt runs: the first's record says when that one ended
    let deadline = Instant::now() + Duration::from_secs(15);
    let first_end = loop {
        assert!(Instant::now() < deadline, "the second attempt starts");
        let job = client.job("web_twice", &id).await.unwrap().unwrap();
        if job.state == JobState::InFlight && job.attempts == 2 {
            let ended = job.runs.first().and_then(|r| r.ended_ms);
            break ended.expect("the first attempt's end");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let at = Instant::now();
    let app = redjob_web::router(client.clone());
    let path = format!("/queues/web_twice/jobs/{id}");
    // within a second, the page names the worker and this attempt's start
    let started = loop {
        let runner = client.workers().await.unwrap().into_iter().find_map(|w| {
            w.running
                .into_iter()
                .find(|r| r.id == id.to_string())
                .map(|r| r.started_at_ms)
        });
        if let Some(s) = runner {
            break s;
        }
        assert!(
            at.elapsed() < Duration::from_secs(1),
            "the worker lists the running job within a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        started >= first_end,
        "the start of the current attempt ({started}), not the first's (ended {first_end})"
    );
    let page = get(&app, &path).await;
    assert!(page.body.contains("<dt>Started</dt>"), "{}", page.body);

    stop.cancel();
    for _ in 0..200 {
        release.notify_waiters();
        if task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_type_no_live_worker_knows_says_what_it_waits_for() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .register::<Twice>()
        .unknown_jobs_retry_for(Duration::from_secs(600))
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.workers().await.unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the worker registers");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    redjob::queue::Queues::create_queue(client.queues(), "web_twice", Default::default())
        .await
        .unwrap();
    let body = r#"{"type":"no_such_job","args":{}}"#;
    let id = redjob::queue::Queues::send(
        client.queues(),
        "web_twice",
        redjob::queue::SendMessage::new(body),
    )
    .await
    .unwrap();
    let app = redjob_web::router(client.clone());
    let page = get(&app, &format!("/queues/web_twice/jobs/{id}")).await;
    assert!(
        page.body.contains("<dt>Waiting</dt>")
            && page
                .body
                .contains(r#"for a worker that knows <code><span class="name" title="no_such_job">no_such_job</span></code> since"#)
            && page.body.contains("dead-lettered at"),
        "{}",
        page.body
    );
    // a type a worker knows waits for nothing
    client.pause("web_twice").await.unwrap();
    let known = client.enqueue(&Twice { n: 2 }).await.unwrap();
    let page = get(&app, &format!("/queues/web_twice/jobs/{known}")).await;
    assert!(!page.body.contains("<dt>Waiting</dt>"), "{}", page.body);
    stop.cancel();
    task.await.unwrap().unwrap();
}
