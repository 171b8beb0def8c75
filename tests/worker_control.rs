//! Worker controls across processes: two worker processes on one Redis; one
//! is quieted (the other takes every new job while the quiet one finishes what
//! it runs), resumed (it takes jobs again), then the other is stopped (its
//! `Worker::run` returns who stopped it, after its runs finish, and its
//! process goes on). Every control acts through Redis only.
//!
//! The worker processes are this test binary again, running the ignored test
//! `control_worker_process` with the Redis URL in its environment; each prints
//! its worker id, and what `run` returned.

mod common;
#[path = "common/worker_proc.rs"]
mod worker_proc;

use std::time::Duration;

use common::RedisServer;
use redjob::JobId;
use redjob::backend::Backend;
use redjob::inspect::JobState;
use redjob::ops::Admin;
use tokio::time::Instant;
use worker_proc::{Nap, last_run, ran_by, run_naps, stop_all, two_workers, until};

/// A worker process (see `worker_proc::serve`).
#[test]
#[ignore = "a worker process for the controls' tests, not a test on its own"]
fn control_worker_process() {
    worker_proc::serve();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_follow_quiet_resume_and_stop() {
    let server = RedisServer::start();
    let url = server.url();
    let (client, mut procs, a, b) = two_workers(&url).await;

    // long jobs, some on a (each runs two at a time)
    let long: Vec<JobId> = client
        .enqueue_batch(&(0..4).map(|_| Nap { ms: 2000 }).collect::<Vec<_>>())
        .await
        .unwrap();
    until("a runs a long job", async || {
        let w = client.workers().await.unwrap();
        w.iter().any(|w| w.id == a && !w.running.is_empty())
    })
    .await;

    // quiet a, from the library, acting as someone
    let alice = client.clone().acting_as("ops alice");
    assert!(alice.quiet_worker(&a).await.unwrap());
    until("a says it is quiet", async || {
        client
            .workers()
            .await
            .unwrap()
            .iter()
            .any(|w| w.id == a && w.quiet)
    })
    .await;
    let quiet_at = client.backend().now_ms().await.unwrap();
    let listed = client.workers().await.unwrap();
    let wa = listed.iter().find(|w| w.id == a).unwrap();
    let c = wa.control.as_ref().unwrap();
    assert_eq!(c.by, "ops alice");
    let running: Vec<String> = wa.running.iter().map(|r| r.id.clone()).collect();
    assert!(!running.is_empty(), "a runs a job as it turns quiet");
    // new jobs all go to b; a finishes what it runs, and starts nothing more
    let short: Vec<JobId> = client
        .enqueue_batch(&(0..6).map(|_| Nap { ms: 20 }).collect::<Vec<_>>())
        .await
        .unwrap();
    let mut runs = Vec::new();
    for id in long.iter().chain(&short) {
        let start = Instant::now();
        loop {
            if let Some(run) = last_run(&client, *id).await {
                runs.push((id.to_string(), run));
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "job {id} ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (id, (by, started)) in &runs {
        if running.contains(id) {
            assert_eq!(by, &a, "the quiet worker finished its run of {id}");
        }
        if by == &a {
            assert!(
                *started < quiet_at,
                "{id} started on the quiet worker at {started}, quiet at {quiet_at}"
            );
        }
    }
    let by_short: Vec<&String> = runs[4..].iter().map(|(_, (by, _))| by).collect();
    assert!(
        by_short.iter().all(|w| **w == b),
        "the quiet worker took no new job: {by_short:?} (a is {a})"
    );

    // resumed, and b quiet: new jobs go to a
    assert!(alice.resume_worker(&a).await.unwrap());
    assert!(alice.quiet_worker(&b).await.unwrap());
    until("a resumed and b quiet", async || {
        let w = client.workers().await.unwrap();
        w.iter()
            .any(|w| w.id == a && !w.quiet && w.control.is_none())
            && w.iter().any(|w| w.id == b && w.quiet)
    })
    .await;
    let by = run_naps(&client, 4).await;
    assert!(
        by.iter().all(|w| *w == a),
        "the resumed worker runs the new jobs: {by:?}"
    );

    // stop a while it runs a job (b is still quiet): it finishes it, run
    // returns who stopped it, the process goes on
    let last = client.enqueue(&Nap { ms: 1500 }).await.unwrap();
    until("a runs the last job", async || {
        client
            .workers()
            .await
            .unwrap()
            .iter()
            .any(|w| w.id == a && w.running.iter().any(|r| r.id == last.to_string()))
    })
    .await;
    let bob = client.clone().acting_as("ops bob");
    assert!(bob.stop_worker(&a).await.unwrap());
    let stopped = procs[0].line("stopped ").await;
    assert!(
        stopped.starts_with("Requested { by: \"ops bob\""),
        "{stopped}"
    );
    procs[0].line("still here").await;
    assert_eq!(
        ran_by(&client, last).await,
        Some(a.clone()),
        "its run finished"
    );
    let live = client.workers().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].id, b, "the stopped worker left");
    assert!(!bob.resume_worker(&a).await.unwrap(), "gone with it");

    stop_all(&mut procs);
    let term = procs[1].line("stopped ").await;
    assert_eq!(term, "Signal { name: \"SIGTERM\" }");
}

fn kill(p: &worker_proc::Proc, signal: &str) {
    let ok = std::process::Command::new("kill")
        .args([signal, &p.child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {signal}");
}

/// A worker process running a 2-minute nap (its grace period is 25 s): the
/// client, the process, and the nap's id.
async fn napping(url: &str) -> (redjob::Client, worker_proc::Proc, JobId) {
    let client = redjob::Client::connect(url).await.unwrap();
    redjob::queue::Queues::create_queue(client.queues(), "c_naps", Default::default())
        .await
        .unwrap();
    let p = worker_proc::Proc::spawn(url);
    p.line("id ").await;
    let id = client.enqueue(&Nap { ms: 120_000 }).await.unwrap();
    // leased is not yet running: a shutdown releases a job it leased but
    // had not started (the test failed so under load, now and then)
    p.line("nap started 120000").await;
    assert_eq!(
        state(&client, id).await,
        JobState::InFlight,
        "the long nap runs"
    );
    (client, p, id)
}

async fn state(client: &redjob::Client, id: JobId) -> JobState {
    redjob::inspect::Inspect::job(client.queues(), "c_naps", &id)
        .await
        .unwrap()
        .unwrap()
        .state
}

/// Signals `p` with ctrl-c while its shutdown waits for its nap: the grace
/// period ends at once, the nap is released, and `run` returns `stopped`.
async fn a_signal_ends_the_grace(
    client: &redjob::Client,
    mut p: worker_proc::Proc,
    id: JobId,
    stopped: &str,
) {
    tokio::time::sleep(Duration::from_millis(700)).await;
    let exited = p.child.try_wait().unwrap();
    let nap = state(client, id).await;
    assert!(
        exited.is_none() && nap == JobState::InFlight,
        "the shutdown waits for the running job: the worker exited {exited:?}, the nap is {nap:?}; {}",
        p.said()
    );
    let t = Instant::now();
    kill(&p, "-INT");
    let said = p.line("stopped ").await;
    let took = t.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the worker stopped {took:?} after the signal (grace 25 s)"
    );
    assert!(said.starts_with(stopped), "{said}");
    assert_eq!(
        state(client, id).await,
        JobState::Ready,
        "the cancelled nap is released, ready to run again"
    );
    p.child.wait().unwrap();
}

/// A SIGTERM starts the shutdown, which waits for the running job (its grace
/// period is 25 s); a ctrl-c during it ends the grace period at once: the job
/// is cancelled and released, ready for another worker, and `run` returns
/// why it stopped (the first signal). The old code waited the whole grace
/// period whatever came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_during_the_shutdown_ends_the_grace_period_at_once() {
    let server = RedisServer::start();
    let (client, p, id) = napping(&server.url()).await;
    kill(&p, "-TERM");
    a_signal_ends_the_grace(&client, p, id, "Signal { name: \"SIGTERM\" }").await;
}

/// After an operator's stop, the first ctrl-c ends the grace period (it is
/// the shutdown's second word); the first version of the fix took it for a
/// first signal, which only starts a shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_after_an_operators_stop_ends_the_grace_period_at_once() {
    let server = RedisServer::start();
    let (client, p, id) = napping(&server.url()).await;
    let worker = p.line("id ").await;
    assert!(client.stop_worker(&worker).await.unwrap());
    a_signal_ends_the_grace(&client, p, id, "Requested").await;
}
