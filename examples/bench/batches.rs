//! Phase 17: batches beside plain jobs, on one server in one sitting: a bulk
//! enqueue of `n` jobs and their processing by one worker, plain (`bench`),
//! then the same `n` as one batch with an `on_complete` callback, enqueued
//! by one `enqueue()` and timed from the worker's start to the callback's
//! run (its jobs pre-enqueued, as the plain figure's); then the latency from
//! a flow's child's finish to its parent's start, beside a chain built by
//! hand.

use std::sync::Arc;
use std::time::Instant;

use redjob::client::Flow;
use redjob::queue::Queues;
use redjob::{Client, Worker};

use crate::jobs::{BatchDone, FlowChild, FlowParent, HandChild, Noop, Tally, quantile};
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
    flow_latency(&client, s, f).await;
}

/// A child's finish to its parent's start, p50 and p99 (ms): 300 flows of
/// one child, one at a time, beside the same chain built by hand (the child
/// enqueues its parent as its last step).
async fn flow_latency(client: &Client, s: &Settings, f: &mut Figures) {
    const M: usize = 300;
    for hand in [false, true] {
        let tally = Arc::new(Tally::new(M));
        let w = Worker::builder(client.backend())
            .queue("bench")
            .concurrency(s.concurrency)
            .handle_signals(false)
            .data(tally.clone())
            .data(client.clone())
            .build()
            .expect("worker settings");
        let stop = w.shutdown_token();
        let running = tokio::spawn(w.run());
        for i in 0..M as u64 {
            if hand {
                client.enqueue(&HandChild { i }).await.expect("enqueue");
            } else {
                let flow = Flow::new(&FlowParent { i }).child(&FlowChild);
                client.enqueue_flow(flow).await.expect("flow enqueue");
            }
            let t = Instant::now();
            while tally.lags_ms().len() <= i as usize {
                assert!(t.elapsed().as_secs() < 30, "a parent never ran");
                tokio::time::sleep(std::time::Duration::from_micros(500)).await;
            }
        }
        stop.cancel();
        running.await.expect("worker task").expect("worker");
        f.check(&tally);
        let lags = tally.lags_ms();
        let (p50, p99) = (quantile(&lags, 0.5), quantile(&lags, 0.99));
        if hand {
            (f.hand_p50, f.hand_p99) = (Some(p50), Some(p99));
        } else {
            (f.flow_p50, f.flow_p99) = (Some(p50), Some(p99));
        }
    }
}
