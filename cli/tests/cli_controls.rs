//! Controls from the CLI: `queue create`, and a periodic schedule run now,
//! paused and resumed for every worker, the listing saying who paused it.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::time::Duration;

use common::RedisServer;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, Schedule};
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError};
use run::cli;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "cli_tick", queue = "cli_ticks")]
struct CliTick;

impl Job for CliTick {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn queue_create_makes_a_queue_with_its_options_once() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let v = cli(
        &url,
        &[
            "queue",
            "create",
            "reports",
            "--vt",
            "1m",
            "--maxsize",
            "-1",
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(v["created"], true);
    let a = client.queues().attributes("reports").await.unwrap();
    assert_eq!((a.vt, a.delay, a.maxsize), (60, 0, -1));
    cli(&url, &["queue", "create", "reports"])
        .await
        .failed("exists");
    cli(&url, &["queue", "create", "no spaces"])
        .await
        .failed("queue name");
    // now a job can be enqueued to it
    cli(&url, &["enqueue", "reports", r#"{"type":"x","args":{}}"#])
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_run_now_paused_and_resumed_from_the_cli() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let worker = redjob::Worker::builder(client.backend())
        .queue("elsewhere")
        .lease(Duration::from_secs(3))
        .periodic(Schedule::every(Duration::from_secs(3600)).unwrap(), CliTick)
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let task = tokio::spawn(worker.run());
    let mut listed = Value::Null;
    for _ in 0..100 {
        listed = cli(&url, &["periodic", "--json"]).await.json();
        if listed.as_array().is_some_and(|s| !s.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(listed[0]["name"], "cli_tick", "{listed}");
    assert_eq!(listed[0]["paused"], Value::Null);

    let r = cli(&url, &["periodic", "pause", "cli_ticks", "cli_tick"]).await;
    assert_eq!(r.ok().trim(), "paused");
    let r = cli(&url, &["periodic", "pause", "cli_ticks", "cli_tick"]).await;
    assert_eq!(r.ok().trim(), "paused already");
    let v = cli(&url, &["periodic", "--json"]).await.json();
    let by = v[0]["paused"]["by"].as_str().unwrap();
    assert!(by.starts_with("cli"), "{v}");
    let table = cli(&url, &["periodic"]).await;
    assert!(
        table.ok().contains("PAUSED") && table.ok().contains(&format!("by {by}")),
        "{}",
        table.out
    );
    // a run now, paused or not (its queue made by the run, as by a tick)
    let before = match client.counts("cli_ticks").await {
        Ok(c) => c.ready,
        Err(_) => 0,
    };
    let id = cli(&url, &["periodic", "run", "cli_ticks", "cli_tick"]).await;
    let id: redjob::JobId = id.ok().trim().parse().unwrap();
    assert_eq!(client.counts("cli_ticks").await.unwrap().ready, before + 1);
    assert!(client.job("cli_ticks", &id).await.unwrap().is_some());
    let r = cli(&url, &["periodic", "resume", "cli_ticks", "cli_tick"]).await;
    assert_eq!(r.ok().trim(), "resumed");
    let v = cli(&url, &["periodic", "--json"]).await.json();
    assert_eq!(v[0]["paused"], Value::Null);
    // a schedule no live worker ticks cannot be run now
    cli(&url, &["periodic", "run", "cli_ticks", "nope"])
        .await
        .failed("no live worker ticks \"nope\"");

    stop.cancel();
    task.await.unwrap().unwrap();
}

/// A resume of a name nothing is paused under and no live worker ticks (a
/// typo of a paused schedule's name) fails, saying so, and the paused
/// schedule stays paused; a pause of such a name stays allowed, with its
/// warning, for workers to come. The old code printed "not paused" and
/// exited 0.
#[tokio::test]
async fn a_resume_of_a_schedule_nothing_pauses_or_ticks_fails() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let r = cli(&url, &["periodic", "pause", "reports", "nightly-report"]).await;
    assert_eq!(r.ok().trim(), "paused");
    assert!(r.err.contains("no live worker ticks"), "{}", r.err);
    cli(&url, &["periodic", "resume", "reports", "nightly_report"])
        .await
        .failed("\"nightly_report\" of \"reports\" is not paused and no live worker ticks it");
    let still = client.ticks("reports", &["nightly-report"]).await.unwrap();
    assert!(still[0].paused.is_some());
    let r = cli(&url, &["periodic", "resume", "reports", "nightly-report"]).await;
    assert_eq!(r.ok().trim(), "resumed");
}
