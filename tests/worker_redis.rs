//! The worker's Redis-only figures: idle cost in commands, and realtime wake-ups.

mod common;

use std::time::Duration;

use common::{Recorder, RedisServer, command_calls, wait_until};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

/// Records its run.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "ping", queue = "work")]
struct Ping {
    key: u64,
}

impl Job for Ping {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

#[tokio::test]
async fn idle_worker_on_10_queues_sends_few_commands() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let queues: Vec<String> = (0..10).map(|i| format!("idle{i}")).collect();
    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queues(queues.clone())
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut con = server.raw().await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut con)
        .await
        .unwrap();
    // longer than the 5 s poll, so every queue is polled at least once
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let calls = command_calls(&mut con).await;
    let total: u64 = calls
        .iter()
        .filter(|(n, _)| !n.starts_with("config"))
        .map(|(_, n)| n)
        .sum();
    let per_s = total as f64 / window.as_secs_f64();
    println!("idle worker, 10 queues: {per_s:.1} commands/s ({calls:?})");
    assert!(per_s <= 20.0, "{per_s} commands/s");
    assert!(
        calls.get("evalsha").copied().unwrap_or(0) >= 10,
        "every queue was polled"
    );
    // and a new job wakes it at once (realtime notification), well before the next poll
    let sent = std::time::Instant::now();
    client
        .enqueue_with(
            &Ping { key: 1 },
            redjob::client::EnqueueOptions::new().queue("idle3"),
        )
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(4), || rec.len() == 1).await);
    println!("woken after {:?}", sent.elapsed());
    stop.cancel();
    h.await.unwrap().unwrap();
}
