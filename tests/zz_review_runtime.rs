//! Probe: a Sentinel link's announcement watcher is spawned once (OnceLock) on
//! the runtime of the first lookup; when that runtime ends, the link lives on
//! in another runtime without any watcher.

mod common;

use std::time::Duration;

use common::failover::Recorded;
use common::sentinel::SentinelSet;
use redjob::Client;

/// Connections subscribed to a channel, over every Sentinel.
fn subscribed(set: &SentinelSet) -> usize {
    set.sentinels
        .iter()
        .map(|s| {
            common::cluster::cli(s.port, &["client", "list"])
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(" sub=1 "))
                .count()
        })
        .sum()
}

/// All connections on every Sentinel.
fn clients(set: &SentinelSet) -> usize {
    set.sentinels
        .iter()
        .map(|s| {
            common::cluster::cli(s.port, &["client", "list"])
                .unwrap_or_default()
                .lines()
                .count()
        })
        .sum()
}

#[test]
fn the_watcher_is_not_started_again_in_a_second_runtime() {
    let set = SentinelSet::start();
    let base = subscribed(&set);
    let base_clients = clients(&set);
    println!("before: {base} subscribed, {base_clients} clients on the Sentinels");
    let rt1 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client: Client = rt1.block_on(async {
        let client = Client::connect(&set.url()).await.unwrap();
        client.enqueue(&Recorded { n: 1 }).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        client
    });
    let in_rt1 = subscribed(&set) - base;
    println!(
        "runtime 1: {in_rt1} watcher subscriptions, {} clients",
        clients(&set) - base_clients
    );
    drop(rt1);
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "runtime 1 gone: {} watcher subscriptions",
        subscribed(&set) - base
    );
    let rt2 = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt2.block_on(async {
        let mut ok = 0;
        for n in 0..20 {
            match client.enqueue(&Recorded { n }).await {
                Ok(_) => ok += 1,
                Err(e) => println!("runtime 2 enqueue: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        println!("runtime 2: {ok} of 20 enqueued");
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    let in_rt2 = subscribed(&set) - base;
    println!("runtime 2: {in_rt2} watcher subscriptions");
    assert_eq!(
        in_rt1, 3,
        "one watcher subscription per Sentinel in runtime 1"
    );
    assert_eq!(in_rt2, 3, "the link in runtime 2 follows no Sentinel");
}
