//! Phase 16: concurrency keys beside plain jobs, on one server in one sitting:
//! a bulk enqueue of `n` jobs and their processing by one worker, plain
//! (`bench`), then keyed over 1,000 keys of one at a time (`bench_keyed`:
//! each key's first job in the queue, its others waiting apart and promoted
//! by the settles).

use std::sync::Arc;
use std::time::Instant;

use redjob::Client;
use redjob::client::EnqueueOptions;
use redjob::queue::Queues;

use crate::jobs::{KeyedNoop, Noop, Tally};
use crate::phases::{Figures, Settings, drain, worker};
use crate::redis::Server;

const KEYS: u32 = 1000;

pub async fn keyed(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    let n = s.n;
    // warm up: the queues exist and the scripts are loaded
    client.enqueue(&Noop { i: u64::MAX }).await.unwrap();
    client.queues().pop("bench").await.unwrap();
    client
        .enqueue(&KeyedNoop {
            i: u64::MAX,
            k: KEYS,
        })
        .await
        .unwrap();
    client.pop_due::<KeyedNoop>(10).await.unwrap();

    let plain: Vec<Noop> = (0..n as u64).map(|i| Noop { i }).collect();
    let t = Instant::now();
    for chunk in plain.chunks(1000) {
        client.enqueue_batch(chunk).await.expect("bulk enqueue");
    }
    f.plain_bulk = Some(n as f64 / t.elapsed().as_secs_f64());
    let tally = Arc::new(Tally::new(n));
    let t = Instant::now();
    let (secs, _) = drain(worker(&client, "bench", &tally, s.concurrency), &tally, t).await;
    f.plain_process = Some(n as f64 / secs);
    f.check(&tally);

    let keyed: Vec<KeyedNoop> = (0..n as u64)
        .map(|i| KeyedNoop {
            i,
            k: (i % u64::from(KEYS)) as u32,
        })
        .collect();
    let t = Instant::now();
    for chunk in keyed.chunks(1000) {
        client
            .enqueue_batch_with(chunk, EnqueueOptions::new())
            .await
            .expect("keyed bulk enqueue");
    }
    f.keyed_bulk = Some(n as f64 / t.elapsed().as_secs_f64());
    let tally = Arc::new(Tally::new(n));
    let t = Instant::now();
    let (secs, _) = drain(
        worker(&client, "bench_keyed", &tally, s.concurrency),
        &tally,
        t,
    )
    .await;
    f.keyed_process = Some(n as f64 / secs);
    f.check(&tally);
}
