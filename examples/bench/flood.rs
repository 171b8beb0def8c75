//! Phase 9: a flood of failures. `n` jobs (1M by default) that fail fatally are
//! processed by one worker with the default dead-letter retention (10,000): the
//! dead letters stay at the cap and Redis's memory after is what the cap costs.

use std::time::{Duration, Instant};

use redjob::backend::Backend;
use redjob::ops::Retention;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

use crate::phases::Figures;
use crate::redis::{Server, used_memory};

/// A job that always fails for good: each one is dead-lettered at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_doomed", queue = "bench_flood")]
pub struct Doomed {
    pub i: u64,
}

impl Job for Doomed {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Err(JobError::fatal("upstream rejected the request (a flood)"))
    }
}

pub async fn flood(f: &mut Figures, n: usize, concurrency: usize) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    let mut con = server.con().await;
    let jobs: Vec<Doomed> = (0..n as u64).map(|i| Doomed { i }).collect();
    for chunk in jobs.chunks(10_000) {
        client.enqueue_batch(chunk).await.expect("bulk enqueue");
    }
    drop(jobs);
    let queued = used_memory(&mut con).await;
    let worker = Worker::builder(client.backend())
        .register::<Doomed>()
        .concurrency(concurrency)
        .dead_letter_retention(Retention::default())
        .handle_signals(false)
        .build()
        .expect("worker");
    let stop = worker.shutdown_token();
    let t = Instant::now();
    let task = tokio::spawn(worker.run());
    let backend = client.backend();
    loop {
        let stats = backend.stats("bench_flood").await.expect("stats");
        if stats.dead >= n as u64 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(1800),
            "flood not processed in 30 min"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    stop.cancel();
    task.await.expect("worker task").expect("worker");
    let kept: u64 = redis::cmd("ZCARD")
        .arg("rsmq:bench_flood:dead")
        .query_async(&mut con)
        .await
        .expect("zcard");
    let after = used_memory(&mut con).await;
    f.flood_jobs_per_s = Some(n as f64 / secs);
    f.flood_dead_kept = Some(kept as f64);
    f.flood_mem_queued_mb = Some(queued as f64 / 1e6);
    f.flood_mem_after_mb = Some(after as f64 / 1e6);
}
