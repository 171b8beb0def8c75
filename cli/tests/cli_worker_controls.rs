//! Worker controls from the CLI, across two worker processes on one Redis:
//! `redjob workers quiet` (by a unique beginning of the id), the STATE column
//! saying who, `resume`, `stop` (the worker's `run` returns who stopped it);
//! ids that name no worker, or two, are refused.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;
#[path = "../../tests/common/worker_proc.rs"]
mod worker_proc;

use std::process::Command;

use common::RedisServer;
use redjob::ops::Admin;
use redjob::queue::Queues;
use redjob::{Client, JobId};
use run::cli;
use worker_proc::{Nap, Proc, ran_by, until};

/// A worker process (see `worker_proc::serve`).
#[test]
#[ignore = "a worker process for the controls' tests, not a test on its own"]
fn control_worker_process() {
    worker_proc::serve();
}

/// Runs `jobs` naps of 20 ms; the workers that ran each.
async fn run_naps(client: &Client, jobs: usize) -> Vec<String> {
    let ids: Vec<JobId> = client
        .enqueue_batch(&(0..jobs).map(|_| Nap { ms: 20 }).collect::<Vec<_>>())
        .await
        .unwrap();
    let mut by = Vec::new();
    for id in ids {
        until("a nap ran", async || ran_by(client, id).await.is_some()).await;
        by.push(ran_by(client, id).await.unwrap());
    }
    by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_quieted_resumed_and_stopped_from_the_cli() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("c_naps", Default::default())
        .await
        .unwrap();
    let mut procs = [Proc::spawn(&url), Proc::spawn(&url)];
    let a = procs[0].line("id ").await;
    let b = procs[1].line("id ").await;
    until("both workers listed", async || {
        client.workers().await.unwrap().len() == 2
    })
    .await;

    // names that are not one live worker
    cli(&url, &["workers", "quiet", "no-such-worker"])
        .await
        .failed("no live worker");
    cli(&url, &["workers", "quiet", ""])
        .await
        .failed("empty worker id");
    let common = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    if common > 0 {
        cli(&url, &["workers", "quiet", &a[..common]])
            .await
            .failed("names 2 workers");
    }
    let usage = cli(&url, &["workers", "quiet"]).await;
    assert_eq!(usage.code, 2, "no worker named: {}", usage.err);

    // quiet a by the beginning of its id
    let out = cli(&url, &["workers", "quiet", &a[..8]]).await;
    assert_eq!(out.ok().trim(), format!("{a}: quiet"));
    until("a says it is quiet", async || {
        client
            .workers()
            .await
            .unwrap()
            .iter()
            .any(|w| w.id == a && w.quiet)
    })
    .await;
    let table = cli(&url, &["workers", "--wide"]).await;
    let row = table
        .ok()
        .lines()
        .find(|l| l.starts_with(&a))
        .unwrap()
        .to_string();
    assert!(row.contains("quiet (by cli"), "{row}");
    let listed = cli(&url, &["workers", "--json"]).await.json();
    let wa = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["id"] == a.as_str())
        .unwrap();
    assert_eq!(wa["control"]["what"], "quiet");
    assert!(wa["control"]["by"].as_str().unwrap().starts_with("cli"));
    assert_eq!(wa["quiet"], true);
    let by = run_naps(&client, 6).await;
    assert!(by.iter().all(|w| *w == b), "only b runs jobs: {by:?}");

    // resume a, quiet b: a runs them
    cli(&url, &["workers", "resume", &a]).await.ok();
    cli(&url, &["workers", "quiet", &b]).await.ok();
    until("a resumed, b quiet", async || {
        let w = client.workers().await.unwrap();
        w.iter().any(|w| w.id == a && !w.quiet) && w.iter().any(|w| w.id == b && w.quiet)
    })
    .await;
    let by = run_naps(&client, 4).await;
    assert!(by.iter().all(|w| *w == a), "only a runs jobs: {by:?}");

    // stop both, every live worker at once
    let v = cli(&url, &["workers", "stop", "--all", "--json"])
        .await
        .json();
    let outcomes: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["stopping", "stopping"], "{v}");
    for p in &procs {
        let stopped = p.line("stopped ").await;
        assert!(stopped.starts_with("Requested { by: \"cli"), "{stopped}");
        p.line("still here").await;
    }
    until("both left", async || {
        client.workers().await.unwrap().is_empty()
    })
    .await;
    cli(&url, &["workers", "resume", "--all"])
        .await
        .failed("no live worker");
    for p in &mut procs {
        let _ = Command::new("kill")
            .args(["-TERM", &p.child.id().to_string()])
            .status();
        p.child.wait().unwrap();
    }
}
