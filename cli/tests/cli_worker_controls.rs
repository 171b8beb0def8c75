//! Worker controls from the CLI, across two worker processes on one Redis:
//! `redjob workers quiet` (by a unique beginning of the id), the STATE column
//! saying who, `resume`, `stop` (the worker's `run` returns who stopped it);
//! ids that name no worker, or two, are refused.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;
#[path = "../../tests/common/worker_proc.rs"]
mod worker_proc;

use common::RedisServer;
use redjob::ops::Admin;
use run::cli;
use worker_proc::{run_naps, stop_all, two_workers, until};

/// A worker process (see `worker_proc::serve`).
#[test]
#[ignore = "a worker process for the controls' tests, not a test on its own"]
fn control_worker_process() {
    worker_proc::serve();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_are_quieted_resumed_and_stopped_from_the_cli() {
    let server = RedisServer::start();
    let url = server.url();
    let (client, mut procs, a, b) = two_workers(&url).await;

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
    stop_all(&mut procs);
}
