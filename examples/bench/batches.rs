//! Phase 17: batches beside plain jobs, on one server in one sitting: a bulk
//! enqueue of `n` jobs and their processing by one worker, plain (`bench`),
//! then the same `n` as one batch with an `on_complete` callback, enqueued
//! by one `enqueue()` and timed from the worker's start to the callback's
//! run (its jobs pre-enqueued, as the plain figure's).

use std::sync::Arc;
use std::time::Instant;

use redjob::Client;
use redjob::queue::Queues;

use crate::jobs::{BatchDone, Noop, Tally};
use crate::phases::{Figures, Settings, drain, worker};
use crate::redis::Server;

pub async fn batches(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    let n = s.n;
    // warm up: the queue exists and the scripts are loaded
    client.enqueue(&Noop { i: u64::MAX }).await.unwrap();
    client.queues().pop("bench").await.unwrap();

    let plain: Vec<Noop> = (0..n as u64).map(|i| Noop { i }).collect();
    let t = Instant::now();
    for chunk in plain.chunks(1000) {
        client.enqueue_batch(chunk).await.expect("bulk enqueue");
    }
    f.batch_plain_bulk = Some(n as f64 / t.elapsed().as_secs_f64());
    let tally = Arc::new(Tally::new(n));
    let t = Instant::now();
    let (secs, _) = drain(worker(&client, "bench", &tally, s.concurrency), &tally, t).await;
    f.batch_plain_process = Some(n as f64 / secs);
    f.check(&tally);

    let t = Instant::now();
    let id = client
        .batch()
        .on_complete(&BatchDone)
        .jobs(&plain)
        .enqueue()
        .await
        .expect("batch enqueue");
    f.batch_bulk = Some(n as f64 / t.elapsed().as_secs_f64());
    let tally = Arc::new(Tally::new(n));
    let called = tally.callback.notified();
    let w = worker(&client, "bench", &tally, s.concurrency);
    let stop = w.shutdown_token();
    let t = Instant::now();
    let running = tokio::spawn(w.run());
    called.await;
    let secs = t.elapsed().as_secs_f64();
    stop.cancel();
    running.await.expect("worker task").expect("worker");
    f.batch_process = Some(n as f64 / secs);
    f.check(&tally);
    let status = client
        .batch_status(&id)
        .await
        .unwrap()
        .expect("batch status");
    assert_eq!((status.succeeded, status.total), (n as u64, n as u64));
}
