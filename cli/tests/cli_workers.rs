//! `redjob workers` is fresh: a worker's entry says which jobs it runs within
//! a second of their start, not at its next heartbeat (a third of its lease).

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::RedisServer;
use redjob::{Client, Job, JobContext, JobError};
use run::cli;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// When each run started, and what ends them.
#[derive(Clone, Default)]
struct Runs {
    started: Arc<Mutex<Vec<Instant>>>,
    release: Arc<Notify>,
}

/// Runs until released.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "cli_long", queue = "cli_long")]
struct Long {
    n: u32,
}

impl Job for Long {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let runs = ctx.data::<Runs>()?;
        runs.started.lock().unwrap().push(Instant::now());
        runs.release.notified().await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_list_two_long_jobs_within_a_second_of_their_start() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let runs = Runs::default();
    // a 30 s lease: a heartbeat every 10 s
    let worker = redjob::Worker::builder(client.backend())
        .register::<Long>()
        .concurrency(8)
        .lease(Duration::from_secs(30))
        .data(runs.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    // its first beat, at its start
    let mut listed = false;
    for _ in 0..100 {
        let v = cli(&url, &["workers", "--json"]).await.json();
        if v.as_array().is_some_and(|w| w.len() == 1) {
            listed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(listed, "the worker registers at its start");

    client.enqueue(&Long { n: 1 }).await.unwrap();
    client.enqueue(&Long { n: 2 }).await.unwrap();
    let mut seen = None;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let v = cli(&url, &["workers", "--json"]).await.json();
        if v[0]["running"].as_array().is_some_and(|r| r.len() == 2) {
            seen = Some(Instant::now());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = seen.expect("both jobs listed");
    let started = *runs.started.lock().unwrap().iter().max().unwrap();
    let trail = seen.saturating_duration_since(started);
    assert!(
        trail < Duration::from_secs(1),
        "listed {trail:?} after the second job started"
    );
    let table = cli(&url, &["workers"]).await;
    assert!(table.ok().contains("2/8"), "{}", table.out);

    stop.cancel();
    for _ in 0..200 {
        runs.release.notify_waiters();
        if task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    task.await.unwrap().unwrap();
}
