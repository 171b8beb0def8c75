//! Phase 19: small backlogs. A worker keeps running while `ROUNDS` bulk sends
//! of `BACKLOG` jobs each arrive one after another, each round processed
//! before the next is sent, so the queue never holds more than a few hundred
//! jobs: Redis keeps its hash (under 512 fields of short values) a listpack,
//! searched field by field, and each fetch and settle carries fewer jobs than
//! phase 1's. Jobs a second and Redis CPU per job (the sends included), to
//! set beside phase 1's 20k backlog.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redjob::Client;
use redjob::queue::Queues;

use crate::jobs::{Noop, Tally};
use crate::phases::{Figures, worker};
use crate::redis::{Server, cpu_us};

const BACKLOG: usize = 300;
const ROUNDS: usize = 100;

pub async fn small(c: usize, f: &mut Figures) {
    let server = Server::start();
    let mut con = server.con().await;
    let client = Client::connect(&server.url).await.expect("connect");
    // warm up: the queue exists and the scripts are loaded
    client.enqueue(&Noop { i: u64::MAX }).await.unwrap();
    client.queues().pop("bench").await.unwrap();
    let n = BACKLOG * ROUNDS;
    let tally = Arc::new(Tally::new(n));
    let w = worker(&client, "bench", &tally, c);
    let stop = w.shutdown_token();
    let run = tokio::spawn(w.run());
    let cpu0 = cpu_us(&mut con).await;
    let t = Instant::now();
    for r in 0..ROUNDS {
        let jobs: Vec<Noop> = (r * BACKLOG..(r + 1) * BACKLOG)
            .map(|i| Noop { i: i as u64 })
            .collect();
        client.enqueue_batch(&jobs).await.expect("bulk enqueue");
        let started = Instant::now();
        while tally.done() < (r + 1) * BACKLOG {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "a round ran within a minute"
            );
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_us(&mut con).await - cpu0;
    stop.cancel();
    run.await.expect("worker task").expect("worker");
    f.check(&tally);
    f.small_process = Some(n as f64 / secs);
    f.small_redis_cpu_us = Some(cpu / n as f64);
}
