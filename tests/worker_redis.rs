//! The worker's Redis-only figures: idle cost in commands, and realtime wake-ups.

mod common;

use std::time::Duration;

use common::{Recorder, RedisServer, command_calls, start, wait_for, wait_until};
use redjob::queue::Queues;
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
        .poll_interval(Duration::from_secs(5))
        .data(rec.clone())
        .build()
        .unwrap();
    let w = start(w);
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
    w.stop().await;
}

/// Publishes on the realtime channel so far.
async fn publishes(server: &RedisServer) -> u64 {
    let mut con = server.raw().await;
    command_calls(&mut con)
        .await
        .get("publish")
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn sends_wake_a_waiting_worker_and_publish_only_then() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let rec = Recorder::default();
    // nobody waits: 100 enqueues publish nothing (creating the queue publishes once)
    for key in 0..100 {
        client.enqueue(&Ping { key }).await.unwrap();
    }
    assert_eq!(publishes(&server).await, 1, "only the queue's creation");
    // a worker that would poll only every minute: wake-ups are all it has
    let w = Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .poll_interval(Duration::from_secs(60))
        .data(rec.clone())
        .build()
        .unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 100).await);
    for key in 100..105 {
        client.enqueue(&Ping { key }).await.unwrap();
        let n = key as usize + 1;
        assert!(
            wait_until(Duration::from_secs(2), || rec.len() == n).await,
            "job {key} woke the idle worker"
        );
    }
    // an RSMQ-style send through the queue layer wakes it too
    let body = br#"{"type":"ping","args":{"key":105}}"#;
    client
        .queues()
        .send("work", redjob::queue::SendMessage::new(&body[..]))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || rec.len() == 106).await);
    let n = publishes(&server).await;
    assert!(
        (7..=12).contains(&n),
        "one publish per wake-up, not per job: {n}"
    );
    w.stop().await;
}

/// Fields of the queue's hash other than its attributes and redjob's counters.
async fn message_fields(server: &RedisServer) -> Vec<String> {
    let mut con = server.raw().await;
    let keys: Vec<String> = redis::cmd("HKEYS")
        .arg("rsmq:work:Q")
        .query_async(&mut con)
        .await
        .unwrap();
    keys.into_iter()
        .filter(|k| k.len() >= 32 && !k.starts_with("redjob:"))
        .collect()
}

#[tokio::test]
async fn acks_leave_no_fields_behind_after_rsmq_style_receives() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let rec = Recorder::default();
    for key in 0..3 {
        client.enqueue(&Ping { key }).await.unwrap();
    }
    // an RSMQ-style receive writes <id>:rc and <id>:fr; visible again at once
    let got = client
        .queues()
        .receive("work", Some(Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.rc, 1);
    assert!(message_fields(&server).await.len() >= 3 + 2);
    let w = Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 3).await);
    // the job received once before runs as its second delivery
    let runs = rec.runs();
    let again = runs.iter().find(|r| r.id == got.id).unwrap();
    assert_eq!(again.attempt, 2);
    assert!(
        wait_for(Duration::from_secs(5), || async {
            message_fields(&server).await.is_empty()
        })
        .await,
        "left: {:?}",
        message_fields(&server).await
    );
    w.stop().await;
}
