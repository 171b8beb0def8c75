//! `Worker::ready`: an app or a test knows when a worker serves.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{RedisServer, wait_until};
use redjob::client::ClientConfig;
use redjob::{Client, Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "ready_ping", queue = "pings")]
struct Ping;

impl Job for Ping {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn after_ready_a_job_is_picked_up_by_its_notification_not_the_poll() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(client.backend())
        .queue("pings")
        .queue("other")
        // the fallback poll cannot be what picks the job up
        .poll_interval(Duration::from_secs(3600))
        .data(runs.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let ready = worker.ready();
    assert!(!ready.is_ready());
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());
    tokio::time::timeout(Duration::from_secs(10), ready.wait())
        .await
        .expect("ready within 10 s")
        .unwrap();
    assert!(ready.is_ready());
    client.enqueue(&Ping).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 1).await);
    stop.cancel();
    running.await.unwrap().unwrap();
    // it stays ready after the worker stopped
    ready.wait().await.unwrap();
}

#[tokio::test]
async fn a_worker_stopped_before_it_could_serve_is_not_ready() {
    // nothing listens on this port: every fetch fails
    let port = RedisServer::free_port();
    let config = ClientConfig::from_url(format!("redis://127.0.0.1:{port}"));
    let client = Client::from_config_lazy(config).unwrap();
    let worker = Worker::builder(client.backend())
        .queue("pings")
        .handle_signals(false)
        .build()
        .unwrap();
    let ready = worker.ready();
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());
    assert!(
        tokio::time::timeout(Duration::from_millis(500), ready.wait())
            .await
            .is_err(),
        "not ready while Redis is unreachable"
    );
    stop.cancel();
    running.await.unwrap().unwrap();
    assert!(matches!(ready.wait().await, Err(Error::ShuttingDown)));
    assert!(!ready.is_ready());
}

#[tokio::test]
async fn a_worker_dropped_without_running_is_not_ready() {
    let worker = Worker::builder(redjob::backend::memory::MemoryBackend::new())
        .queue("pings")
        .handle_signals(false)
        .build()
        .unwrap();
    let ready = worker.ready();
    drop(worker);
    assert!(matches!(ready.wait().await, Err(Error::ShuttingDown)));
}

/// A worker whose shutdown token was cancelled before `run` never serves: it
/// must not report ready (nor take any work). Its layout check raced the
/// token in an unbiased `select!`, and once it won, the worker launched
/// anyway: its first fetches made `Ready::wait` return `Ok` for a worker
/// that was stopping (one run in ten or so here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_shut_down_before_it_ran_is_never_ready() {
    let backend = redjob::backend::memory::MemoryBackend::new();
    let client = Client::memory(backend);
    let runs = Arc::new(AtomicU32::new(0));
    client.enqueue(&Ping).await.unwrap();
    let mut ready_after_shutdown = 0;
    for _ in 0..200 {
        let worker = Worker::builder(client.backend())
            .queue("pings")
            .data(runs.clone())
            .handle_signals(false)
            .build()
            .unwrap();
        let ready = worker.ready();
        worker.shutdown_token().cancel();
        tokio::time::timeout(Duration::from_secs(20), worker.run())
            .await
            .expect("stopped within 20 s")
            .unwrap();
        if ready.wait().await.is_ok() {
            ready_after_shutdown += 1;
        }
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a job ran after the shutdown"
    );
    assert_eq!(
        ready_after_shutdown, 0,
        "of 200 workers shut down before they ran, these reported ready"
    );
}
