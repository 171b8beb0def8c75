//! A master of a Redis Cluster is SIGKILLed while producers and a worker run:
//! its replica takes over, and both carry on by themselves. What the failover
//! lost is counted and printed (see RELIABILITY.md); enqueues that waited for a
//! replica lose nothing.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::cluster::RedisCluster;
use common::failover::produce;
use common::{Recorder, start_serving, wait_until};
use redjob::client::ClientConfig;
use redjob::connection::WaitForReplicas;
use redjob::{Client, Worker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_fails_over_and_producers_and_workers_carry_on() {
    let mut cluster = tokio::task::spawn_blocking(|| RedisCluster::start_with_node_timeout(1000))
        .await
        .unwrap();
    let url = cluster.url();
    let client = Client::connect(&url).await.unwrap();
    let mut durable = ClientConfig::from_url(&url);
    durable.redis.wait_for_replicas = Some(WaitForReplicas {
        replicas: 1,
        timeout: Duration::from_secs(1),
    });
    let durable = Client::from_config(durable).await.unwrap();
    let queues: Vec<String> = (0..12).map(|i| format!("q{i}")).collect();

    let recorder = Recorder::default();
    let worker = Worker::builder(client.backend())
        .queues(&queues)
        .concurrency(16)
        .lease(Duration::from_secs(2))
        .data(recorder.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;

    let stop = Arc::new(AtomicBool::new(false));
    let plain = produce(client.clone(), 0, 12, stop.clone());
    let waiting = produce(durable, 1_000_000, 12, stop.clone());
    assert!(wait_until(Duration::from_secs(10), || recorder.len() > 100).await);

    // SIGKILL the master of q0's slot: no shutdown, no last replication
    let victim = cluster.master_of("rsmq:{q0}");
    let killed_at = tokio::time::Instant::now();
    let before = recorder.len();
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port == victim)
        .unwrap()
        .kill();
    // its replica is promoted: every slot is served again by a live master
    let promoted = {
        let deadline = killed_at + Duration::from_secs(20);
        loop {
            let masters = cluster.masters();
            let slots: u32 = masters
                .iter()
                .filter(|(port, _)| *port != victim)
                .flat_map(|(_, ranges)| ranges.iter().map(|(a, b)| u32::from(b - a) + 1))
                .sum();
            if slots == 16384 {
                break true;
            }
            if tokio::time::Instant::now() > deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert!(promoted, "no replica took over within 20 s");
    let failover = killed_at.elapsed();
    let new_master = cluster.master_of("rsmq:{q0}");
    assert_ne!(new_master, victim);

    // both carry on by themselves on the promoted replica
    let after = recorder.len();
    assert!(
        wait_until(Duration::from_secs(20), || recorder.runs().iter().any(
            |r| r.key % 12 == 0 && r.key < 1_000_000 && r.at > killed_at + failover
        ))
        .await,
        "no job of q0 ran after the failover"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let plain = plain.await.unwrap();
    let waiting = waiting.await.unwrap();
    let acked: Vec<u64> = plain.acked.iter().chain(&waiting.acked).copied().collect();
    // every acknowledged job that survived runs (leases of the dead master's
    // deliveries run out after 2 s)
    let ran = |n: &u64, counts: &HashMap<u64, usize>| counts.contains_key(n);
    wait_until(Duration::from_secs(20), || {
        let counts = recorder.counts();
        acked.iter().all(|n| ran(n, &counts))
    })
    .await;
    running.stop().await;

    let counts = recorder.counts();
    let lost = |acked: &[u64]| acked.iter().filter(|n| !ran(n, &counts)).count();
    let (lost_plain, lost_waiting) = (lost(&plain.acked), lost(&waiting.acked));
    let twice = counts.values().filter(|&&c| c > 1).count();
    println!(
        "failover: replica promoted {failover:?} after the SIGKILL; runs {before} before, {after} at promotion, {} after; \
         plain enqueues: {} acked, {} failed during the failover, {lost_plain} acked ones lost; \
         enqueues waiting for 1 replica: {} acked, {} failed, {lost_waiting} lost; jobs run twice: {twice}",
        recorder.len(),
        plain.acked.len(),
        plain.failed,
        waiting.acked.len(),
        waiting.failed,
    );
    assert_eq!(
        lost_waiting, 0,
        "an enqueue that waited for a replica was lost"
    );
    // a lost plain enqueue is one the master acknowledged in its last moment,
    // before it replicated it: a handful at most, never a whole queue
    assert!(lost_plain <= 20, "{lost_plain} acknowledged jobs lost");
    assert!(waiting.acked.len() > 100 && plain.acked.len() > 100);
}
