//! Phase 10: topics. Publish one by one and in batches of 1000, then one
//! subscriber (a worker at the bench's concurrency) drains a backlog of `n`;
//! Redis commands and memory per event.

use std::sync::Arc;
use std::time::Instant;

use redjob::topic::{Event, Start};
use redjob::{Client, Worker};
use serde::{Deserialize, Serialize};

use crate::jobs::Tally;
use crate::phases::{Figures, Settings};
use crate::redis::{Server, cost, cpu_us, reset, used_memory};

/// The bench's event: payload `{"i": n}`, as the throughput job's.
#[derive(Serialize, Deserialize, Event)]
#[event(name = "bench_event", topic = "bench_topic")]
pub struct Tick {
    pub i: u64,
}

pub async fn topics(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let mut con = server.con().await;
    let client = Client::connect(&server.url).await.expect("connect");
    let n = s.n;
    // warm up: the scripts are loaded, the topic exists
    client.publish(&Tick { i: u64::MAX }).await.unwrap();

    let mem0 = used_memory(&mut con).await;
    reset(&mut con).await;
    let t = Instant::now();
    for i in 0..n {
        client
            .publish(&Tick { i: i as u64 })
            .await
            .expect("publish");
    }
    f.topic_publish_single = Some(n as f64 / t.elapsed().as_secs_f64());
    let published = cost(&mut con).await;
    f.topic_bytes_per_event = Some((used_memory(&mut con).await - mem0) as f64 / n as f64);

    // the subscriber drains only what is published after it
    client
        .subscribe("bench_topic", "drain", Start::End)
        .await
        .expect("subscribe");
    let events: Vec<Tick> = (0..n).map(|i| Tick { i: i as u64 }).collect();
    let t = Instant::now();
    for chunk in events.chunks(1000) {
        client.publish_all(chunk).await.expect("publish_all");
    }
    f.topic_publish_bulk = Some(n as f64 / t.elapsed().as_secs_f64());

    let tally = Arc::new(Tally::new(n));
    reset(&mut con).await;
    let redis_cpu0 = cpu_us(&mut con).await;
    let cpu0 = crate::phases::cpu_ns();
    let t = Instant::now();
    let tl = tally.clone();
    let w = Worker::builder(client.backend())
        .concurrency(s.concurrency)
        .handle_signals(false)
        .subscribe("drain", move |e: Tick, _ctx| {
            tl.ran(e.i);
            async { Ok(()) }
        })
        .build()
        .expect("worker settings");
    let stop = w.shutdown_token();
    let run = tokio::spawn(w.run());
    tokio::time::timeout(
        std::time::Duration::from_secs(600),
        tally.all_done.notified(),
    )
    .await
    .expect("every event handled within 10 minutes");
    f.topic_drain = Some(n as f64 / t.elapsed().as_secs_f64());
    f.topic_worker_cpu_us = cpu0
        .zip(crate::phases::cpu_ns())
        .map(|(a, b)| (b - a) as f64 / 1000.0 / n as f64);
    f.topic_redis_cpu_us = Some((cpu_us(&mut con).await - redis_cpu0) / n as f64);
    stop.cancel();
    run.await.expect("worker task").expect("worker");
    let drained = cost(&mut con).await;
    f.topic_cmds_per_event = Some((published.commands + drained.commands) as f64 / n as f64);
    f.check(&tally);
}
