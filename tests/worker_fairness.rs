//! Queues sharing one worker's slots: none waits while the others have work.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{RedisServer, start_serving};
use redjob::client::EnqueueOptions;
use redjob::queue::{QueueOptions, Queues};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

/// Starts per queue.
#[derive(Default)]
struct Starts(Mutex<HashMap<String, usize>>);

#[derive(Serialize, Deserialize, Job)]
#[job(name = "wf_work", queue = "wf_default")]
struct Work {
    n: u64,
}

impl Job for Work {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        *ctx.data::<Arc<Starts>>()?
            .0
            .lock()
            .unwrap()
            .entry(ctx.queue().to_string())
            .or_default() += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(())
    }
}

/// Eight queues with a backlog each of short jobs (2 ms), one worker running
/// 4 at once: each queue's dispatcher leases only while more slots are free
/// than it leaves to the others, and without turns the one that ran first
/// after a slot came back took it every time (1 to 3 queues got their first
/// fetch's 4 jobs and nothing more for seconds, in 7 of 7 runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_with_backlogs_share_one_worker_and_none_starves() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let queues: Vec<String> = (0..8).map(|i| format!("wf{i}")).collect();
    for q in &queues {
        client
            .queues()
            .create_queue(q, QueueOptions::default())
            .await
            .unwrap();
        let jobs: Vec<Work> = (0..800).map(|n| Work { n }).collect();
        client
            .enqueue_batch_with(&jobs, EnqueueOptions::new().queue(q))
            .await
            .unwrap();
    }
    let starts = Arc::new(Starts::default());
    let worker = Worker::builder(client.backend())
        .queues(queues.iter().cloned())
        .concurrency(4)
        .handle_signals(false)
        .data(starts.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    running.stop().await;
    let per: Vec<usize> = {
        let got = starts.0.lock().unwrap();
        queues
            .iter()
            .map(|q| got.get(q).copied().unwrap_or(0))
            .collect()
    };
    let total: usize = per.iter().sum();
    // a fair share is an eighth of what ran: each queue had at least a
    // quarter of it (none ran out of jobs: 800 each)
    assert!(total >= 400, "the worker ran: {per:?}");
    assert!(
        per.iter().all(|&n| n * 32 >= total && n < 800),
        "every queue had its turns: {per:?}"
    );
}
