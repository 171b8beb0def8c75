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

/// Returns at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "cli_quick", queue = "cli_busy")]
struct Quick;

impl Job for Quick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Runs until released.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "cli_gated", queue = "cli_busy")]
struct Gated;

impl Job for Gated {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let gate = ctx.data::<Arc<tokio::sync::Semaphore>>()?;
        gate.acquire().await.map_err(JobError::fatal)?.forget();
        Ok(())
    }
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "cli_gated_event", topic = "cli_events")]
struct GatedEvent;

/// The table's BUSY column is `running/concurrency +prefetched`, a running
/// topic event counted among the running, and a table of the running events
/// follows: a worker of concurrency 2 running one event and one job, with
/// jobs leased waiting for a slot, shows `2/2 +<n>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_busy_counts_running_events_and_prefetched_jobs() {
    use tokio::sync::Semaphore;
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .subscribe("cli_events", "cli_sub", redjob::topic::Start::Beginning)
        .await
        .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let event_gate = gate.clone();
    let worker = redjob::Worker::builder(client.backend())
        .queue("cli_busy")
        .concurrency(2)
        .lease(Duration::from_secs(30))
        .subscribe("cli_sub", move |_: GatedEvent, _| {
            let gate = event_gate.clone();
            async move {
                gate.acquire().await.map_err(JobError::fatal)?.forget();
                Ok(())
            }
        })
        .data(gate.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    // quick runs first: the queue's jobs are short, so it is prefetched
    for _ in 0..3 {
        client.enqueue(&Quick).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while client.stats("cli_busy").await.unwrap().processed < 3 {
        assert!(Instant::now() < deadline, "the quick jobs run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // one at a time, so that the quick jobs cannot take the slot the event
    // is to hold (and be done before they could be seen prefetched)
    let listed = |field: &'static str| {
        let url = url.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                let w = cli(&url, &["workers", "--json"]).await.json();
                if w[0][field].as_array().is_some_and(|a| a.len() == 1) {
                    break;
                }
                assert!(Instant::now() < deadline, "one of {field} listed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    client.publish(&GatedEvent).await.unwrap();
    listed("events").await;
    client.enqueue(&Gated).await.unwrap();
    listed("running").await;
    client
        .enqueue_batch(&[Quick, Quick, Quick, Quick, Quick])
        .await
        .unwrap();
    // the event and the job run, jobs wait for a slot: BUSY as listed then
    let deadline = Instant::now() + Duration::from_secs(15);
    let (table, want) = loop {
        assert!(
            Instant::now() < deadline,
            "one event, one job, prefetched jobs"
        );
        let before = cli(&url, &["workers", "--json"]).await.json();
        let w = &before[0];
        let n = |f: &str| w[f].as_array().map_or(0, |a| a.len());
        let prefetched = w["prefetched"].as_u64().unwrap_or(0);
        if n("running") == 1 && n("events") == 1 && prefetched > 0 {
            let table = cli(&url, &["workers"]).await.ok().to_string();
            let after = cli(&url, &["workers", "--json"]).await.json();
            if after[0]["prefetched"] == w["prefetched"] {
                break (table, format!("2/2 +{prefetched}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.cancel();
    gate.add_permits(100);
    tokio::time::timeout(Duration::from_secs(15), task)
        .await
        .expect("the worker stops")
        .unwrap()
        .unwrap();
    let header = table.lines().next().unwrap_or_default();
    let row = table.lines().nth(1).unwrap_or_default();
    let at = header.find("BUSY").expect("a BUSY column");
    assert_eq!(
        row.get(at..at + want.len()),
        Some(want.as_str()),
        "BUSY of a worker running an event and a job with jobs prefetched:\n{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("SUBSCRIBER") && l.contains("EVENT ID")),
        "a table of the running events:\n{table}"
    );
    assert!(
        table.lines().any(|l| l.contains("cli_events")
            && l.contains("cli_sub")
            && l.contains("cli_gated_event")),
        "the running event listed:\n{table}"
    );
}
