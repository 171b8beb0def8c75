//! Phase 13: the queue's history of finished jobs on the hot path. The same
//! 20k backlog processed with the history at its defaults (already at its
//! count limit, so every settle also trims) and with it off, alternating on
//! one server, then with it on in a queue that has seen a failure; Redis CPU
//! per job for each; bytes per history entry for the
//! bench payload and a 1 KB one, and what a full history takes at the defaults.

use std::sync::Arc;
use std::time::Instant;

use redjob::Client;
use redjob::ops::{Admin, History, QueueSettings};
use redjob::queue::{QueueOptions, Queues};

use crate::jobs::{Kilobyte, Noop, Tally};
use crate::phases::{Figures, Settings, drain, worker};
use crate::redis::{Server, cpu_us};

/// Processes a backlog of `n` on `queue` with `history` stored; (jobs/s,
/// Redis CPU µs per job, the worker's CPU µs per job where /proc tells it).
async fn process(
    client: &Client,
    con: &mut redis::aio::MultiplexedConnection,
    s: &Settings,
    f: &mut Figures,
    history: History,
) -> (f64, f64, Option<f64>) {
    client
        .set_settings("bench", &QueueSettings::history(history))
        .await
        .expect("settings");
    let jobs: Vec<Noop> = (0..s.n).map(|i| Noop { i: i as u64 }).collect();
    for chunk in jobs.chunks(1000) {
        client.enqueue_batch(chunk).await.expect("bulk enqueue");
    }
    let cpu0 = cpu_us(con).await;
    let tally = Arc::new(Tally::new(s.n));
    let t = Instant::now();
    let (secs, worker_ns) = drain(worker(client, "bench", &tally, s.concurrency), &tally, t).await;
    let cpu = cpu_us(con).await - cpu0;
    f.check(&tally);
    let worker_us = worker_ns.map(|ns| ns as f64 / 1000.0 / s.n as f64);
    (s.n as f64 / secs, cpu / s.n as f64, worker_us)
}

/// The bytes the history's keys of `queue` take, and its entries.
async fn history_bytes(con: &mut redis::aio::MultiplexedConnection, queue: &str) -> (f64, f64) {
    let mut bytes = 0.0;
    for suffix in [":history:ids", ":history:Q"] {
        let b: Option<i64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(format!("rsmq:{queue}{suffix}"))
            .arg("SAMPLES")
            .arg(0)
            .query_async(con)
            .await
            .expect("MEMORY USAGE");
        bytes += b.unwrap_or(0) as f64;
    }
    let n: i64 = redis::cmd("LLEN")
        .arg(format!("rsmq:{queue}:history:ids"))
        .query_async(con)
        .await
        .expect("LLEN");
    (bytes, n as f64)
}

pub async fn history(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let mut con = server.con().await;
    let client = Client::connect(&server.url).await.expect("connect");
    client
        .queues()
        .create_queue("bench", QueueOptions::default())
        .await
        .expect("create");
    // warm up: the scripts loaded, the history at its count limit
    process(&client, &mut con, s, f, History::default()).await;
    for _ in 0..2 {
        let (on, on_cpu, on_worker) = process(&client, &mut con, s, f, History::default()).await;
        f.history_on.push(on);
        f.history_on_cpu_us.push(on_cpu);
        f.history_on_worker_cpu_us.extend(on_worker);
        let (off, off_cpu, off_worker) = process(&client, &mut con, s, f, History::OFF).await;
        f.history_off.push(off);
        f.history_off_cpu_us.push(off_cpu);
        f.history_off_worker_cpu_us.extend(off_worker);
    }
    // a queue that has seen a failure: the flag a retry or a lost lease sets
    // (complete.lua, fetch.lua) stays, and every settle after looks for
    // last errors and attempt records
    let () = redis::cmd("HSET")
        .arg("rsmq:bench:Q")
        .arg("redjob:errors")
        .arg("1")
        .query_async(&mut con)
        .await
        .expect("HSET");
    for _ in 0..2 {
        let (on, on_cpu, _) = process(&client, &mut con, s, f, History::default()).await;
        f.history_errors.push(on);
        f.history_errors_cpu_us.push(on_cpu);
    }
    client
        .set_settings("bench", &QueueSettings::history(History::default()))
        .await
        .expect("settings");
    process(&client, &mut con, s, f, History::default()).await;
    let (bytes, n) = history_bytes(&mut con, "bench").await;
    f.history_bytes_per_entry = Some(bytes / n);
    f.history_full_kb = Some(bytes / 1024.0);
    // 1 KB payloads: 2,000 run, the history keeps its 1,000
    client
        .queues()
        .create_queue("bench_kb", QueueOptions::default())
        .await
        .expect("create");
    let pad = "x".repeat(1000);
    let jobs: Vec<Kilobyte> = (0..2000)
        .map(|i| Kilobyte {
            i,
            pad: pad.clone(),
        })
        .collect();
    client.enqueue_batch(&jobs).await.expect("bulk enqueue");
    let tally = Arc::new(Tally::new(2000));
    drain(
        worker(&client, "bench_kb", &tally, s.concurrency),
        &tally,
        Instant::now(),
    )
    .await;
    let (bytes, n) = history_bytes(&mut con, "bench_kb").await;
    f.history_bytes_per_entry_1kb = Some(bytes / n);
    f.history_full_kb_1kb = Some(bytes / 1024.0);
}
