//! Phase 15: a queue's rate limit across the fleet: a backlog drained by three
//! workers (each on its own connection) under a limit of 1,000 starts per
//! second. Reports the rate achieved after the first window's burst, and the
//! most starts in any 1 s window: by Redis's clock as the limit counts them
//! (each lease's start, read from the queue's starts set `ns:q:starts`, polled
//! every 100 ms while members stay a second), and by the handlers' clocks (a
//! handler starts a little after Redis leases its job, and a burst of starts
//! queues for the two cores unevenly).

use std::sync::Arc;
use std::time::Duration;

use redjob::client::EnqueueOptions;
use redjob::ops::{Admin, QueueSettings, RateLimit};
use redjob::queue::{QueueOptions, Queues};
use redjob::{Client, Worker};

use crate::jobs::{Tally, Timed};
use crate::phases::{Figures, Settings};
use crate::redis::Server;

const QUEUE: &str = "bench_rate";
const LIMIT: u32 = 1000;
const JOBS: usize = 6000;

/// The most of `sorted` (ms) in any window `[t, t + len)`.
fn most_in(sorted: &[f64], len: f64) -> usize {
    let (mut most, mut j) = (0, 0);
    for i in 0..sorted.len() {
        while j < sorted.len() && sorted[j] < sorted[i] + len {
            j += 1;
        }
        most = most.max(j - i);
    }
    most
}

pub async fn limits(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    client
        .queues()
        .create_queue(QUEUE, QueueOptions::default())
        .await
        .expect("create");
    client
        .set_settings(
            QUEUE,
            &QueueSettings::rate_limit(RateLimit::per_second(LIMIT)),
        )
        .await
        .expect("settings");
    // t 0: the handler records its start's Unix µs
    let jobs: Vec<Timed> = (0..JOBS as u64).map(|i| Timed { i, t: 0 }).collect();
    for chunk in jobs.chunks(1000) {
        client
            .enqueue_batch_with(chunk, EnqueueOptions::new().queue(QUEUE))
            .await
            .expect("bulk enqueue");
    }
    let tally = Arc::new(Tally::new(JOBS));
    // every lease's start as the limit counts it
    let polling = tokio_util::sync::CancellationToken::new();
    let poller = {
        let mut con = server.con().await;
        let stop = polling.clone();
        tokio::spawn(async move {
            let mut seen: std::collections::HashMap<String, f64> = Default::default();
            loop {
                let got: Vec<(String, f64)> = redis::cmd("ZRANGE")
                    .arg(format!("rsmq:{QUEUE}:starts"))
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(&mut con)
                    .await
                    .unwrap_or_default();
                seen.extend(got);
                if stop.is_cancelled() {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut stops = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let c = Client::connect(&server.url).await.expect("connect");
        let w = Worker::builder(c.backend())
            .queue(QUEUE)
            .concurrency(s.concurrency)
            .handle_signals(false)
            .data(tally.clone())
            .build()
            .expect("worker settings");
        stops.push(w.shutdown_token());
        tasks.push(tokio::spawn(w.run()));
    }
    let done = tokio::time::timeout(Duration::from_secs(60), tally.all_done.notified()).await;
    for s in &stops {
        s.cancel();
    }
    for t in tasks {
        let _ = t.await;
    }
    polling.cancel();
    let mut leased: Vec<f64> = poller.await.unwrap_or_default().into_values().collect();
    leased.sort_by(f64::total_cmp);
    if done.is_err() {
        eprintln!("limits: the backlog did not drain in 60 s");
        return;
    }
    f.check(&tally);
    let starts = tally.lags_ms();
    if let Ok(path) = std::env::var("BENCH_STARTS") {
        let text: Vec<String> = starts.iter().map(|s| format!("{s:.3}")).collect();
        let _ = std::fs::write(path, text.join("\n"));
    }
    let (first, last) = (starts[0], starts[starts.len() - 1]);
    // the first window lets LIMIT start at once: the rate is the rest's
    f.rate_limited_per_s = Some((JOBS - LIMIT as usize) as f64 / ((last - first) / 1000.0));
    f.rate_limited_handler_max_1s = Some(most_in(&starts, 1000.0) as f64);
    if leased.len() == JOBS {
        f.rate_limited_max_1s = Some(most_in(&leased, 1000.0) as f64);
    } else {
        eprintln!("limits: read {} of {JOBS} starts from Redis", leased.len());
    }
}
