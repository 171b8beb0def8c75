//! Phase 11: a backlog over 12 queues processed by one worker, on one Redis and
//! on a Redis Cluster of 3 masters (all on this machine, so it shows what the
//! Cluster client costs, not what more machines give). Phase 12: enqueue one by
//! one to a Redis with a replica, plain and waiting for the replica
//! (`wait_for_replicas`).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redjob::client::ClientConfig;
use redjob::connection::WaitForReplicas;
use redjob::{Client, Worker};

use crate::jobs::{Noop, Tally};
use crate::phases::{Figures, Settings, drain};
use crate::redis::Server;

const QUEUES: usize = 12;

/// Phase 11: `n` jobs over 12 queues, drained by one worker serving them all.
pub async fn spread(s: &Settings, f: &mut Figures) {
    let single = Server::start_with(&[]);
    f.spread_single = Some(process_spread(&single.url, s).await);
    drop(single);
    let masters: Vec<Server> = (0..3)
        .map(|_| Server::start_with(&["--cluster-enabled", "yes"]))
        .collect();
    let url = join(&masters);
    f.spread_cluster = Some(process_spread(&url, s).await);
}

/// Joins the servers into a Cluster of masters only; returns its URL.
fn join(masters: &[Server]) -> String {
    let addrs: Vec<String> = masters
        .iter()
        .map(|m| m.url.trim_start_matches("redis://").to_string())
        .collect();
    let out = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .expect("redis-cli on PATH (it comes with redis-server)");
    assert!(out.status.success(), "redis-cli --cluster create failed");
    // every node sees every slot served
    let started = Instant::now();
    while !addrs.iter().all(|a| {
        let port = a.rsplit(':').next().unwrap_or_default();
        Command::new("redis-cli")
            .args(["-p", port, "cluster", "info"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
    }) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "cluster not ok in 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    format!("redis+cluster://{}", addrs.join(","))
}

/// Enqueues `n` jobs round robin over the queues in batches of 1000, then
/// drains them with one worker; returns jobs/s of the drain.
async fn process_spread(url: &str, s: &Settings) -> f64 {
    let client = Client::connect(url).await.expect("connect");
    let queues: Vec<String> = (0..QUEUES).map(|q| format!("spread{q}")).collect();
    let per_queue = (s.n / QUEUES).max(1);
    let n = per_queue * QUEUES;
    for (q, queue) in queues.iter().enumerate() {
        let jobs: Vec<Noop> = (0..per_queue)
            .map(|i| Noop {
                i: (q * per_queue + i) as u64,
            })
            .collect();
        for chunk in jobs.chunks(1000) {
            client
                .enqueue_batch_with(chunk, redjob::client::EnqueueOptions::new().queue(queue))
                .await
                .expect("bulk enqueue");
        }
    }
    let tally = Arc::new(Tally::new(n));
    let w = Worker::builder(client.backend())
        .queues(&queues)
        .concurrency(s.concurrency)
        .handle_signals(false)
        .data(tally.clone())
        .build()
        .expect("worker settings");
    let (secs, _) = drain(w, &tally, Instant::now()).await;
    n as f64 / secs
}

/// Phase 12: `n` jobs enqueued one by one to a master with one replica, plain
/// and then each waiting for the replica.
pub async fn durability(s: &Settings, f: &mut Figures) {
    let master = Server::start_with(&["--repl-diskless-sync-delay", "0"]);
    let port = master
        .url
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let _replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut con = master.con().await;
    let started = Instant::now();
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut con)
            .await
            .expect("INFO");
        if info.contains("state=online") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "replica not online in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let plain = Client::connect(&master.url).await.expect("connect");
    let mut config = ClientConfig::from_url(&master.url);
    config.redis.wait_for_replicas = Some(WaitForReplicas {
        replicas: 1,
        timeout: Duration::from_secs(1),
    });
    let waiting = Client::from_config(config).await.expect("connect");
    for (client, out) in [
        (&plain, &mut f.enqueue_replicated_plain),
        (&waiting, &mut f.enqueue_replicated_waiting),
    ] {
        client
            .enqueue(&Noop { i: u64::MAX })
            .await
            .expect("warm up");
        let t = Instant::now();
        for i in 0..s.n {
            client
                .enqueue(&Noop { i: i as u64 })
                .await
                .expect("enqueue");
        }
        *out = Some(s.n as f64 / t.elapsed().as_secs_f64());
    }
}
