//! Probe: how many connections a worker with subscribers holds on the
//! Sentinels (each topic reader is a Link of its own, each with a watcher).

mod common;

use std::time::Duration;

use common::sentinel::SentinelSet;
use common::start;
use redjob::{Client, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "zz_event", topic = "zz_topic")]
struct ZzEvent {
    n: u64,
}

fn count(set: &SentinelSet, what: &str) -> usize {
    set.sentinels
        .iter()
        .map(|s| {
            common::cluster::cli(s.port, &["client", "list"])
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains(what))
                .count()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_connections_of_a_worker_with_subscribers() {
    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .unwrap();
    let base = count(&set, "id=");
    let client = Client::connect(&set.url()).await.unwrap();
    let subs = 5;
    let mut builder = Worker::builder(client.backend()).handle_signals(false);
    for i in 0..subs {
        let name = format!("zz_sub{i}");
        client
            .subscribe("zz_topic", &name, redjob::topic::Start::Beginning)
            .await
            .unwrap();
        builder = builder.subscribe(
            redjob::topic::Subscription::new(name.clone()),
            |_e: ZzEvent, _| async move { Ok(()) },
        );
    }
    let worker = builder.build().unwrap();
    let w = start(worker);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let all = count(&set, "id=") - base;
    let subscribed = count(&set, " sub=1 ");
    println!(
        "{subs} subscribers: {all} connections on the Sentinels, {subscribed} of them subscribed"
    );
    w.stop().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "worker stopped: {} connections on the Sentinels, {} subscribed",
        count(&set, "id=") - base,
        count(&set, " sub=1 ")
    );
}
