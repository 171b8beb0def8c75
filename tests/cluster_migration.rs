//! A busy queue's slot migrates to another master (`CLUSTER SETSLOT …
//! MIGRATING/IMPORTING`, `MIGRATE` key by key, `SETSLOT … NODE`) while a
//! producer and a worker run: `ASK`, `TRYAGAIN` and `MOVED` are handled, no job
//! is lost.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::cluster::{RedisCluster, cli};
use common::{Recorder, start_serving, wait_until};
use redjob::client::EnqueueOptions;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "mig_task", queue = "busy")]
struct Task {
    n: u64,
}

impl Job for Task {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.n);
        Ok(())
    }
}

fn node_id(port: u16) -> String {
    cli(port, &["cluster", "myid"]).unwrap().trim().to_string()
}

fn ok(port: u16, args: &[&str]) {
    let out = cli(port, args).unwrap_or_default();
    assert!(out.trim() == "OK", "{args:?} on {port}: {out}");
}

/// A slot's migration under way: `SETSLOT … IMPORTING` on the target (a
/// master other than the key's), `SETSLOT … MIGRATING` on the source.
struct Migration {
    slot: String,
    source: u16,
    target: u16,
    target_id: String,
}

/// Starts migrating the slot of `key` to another master.
fn start_migration(cluster: &RedisCluster, key: &str) -> Migration {
    let slot = cli(cluster.ports()[0], &["cluster", "keyslot", key])
        .unwrap()
        .trim()
        .to_string();
    let source = cluster.master_of(key);
    let target = cluster
        .masters()
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| *p != source)
        .unwrap();
    let (source_id, target_id) = (node_id(source), node_id(target));
    ok(
        target,
        &["cluster", "setslot", &slot, "importing", &source_id],
    );
    ok(
        source,
        &["cluster", "setslot", &slot, "migrating", &target_id],
    );
    Migration {
        slot,
        source,
        target,
        target_id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_queue_migrates_to_another_master_without_losing_a_job() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let client = Client::connect(&cluster.url()).await.unwrap();
    let recorder = Recorder::default();
    let worker = Worker::builder(client.backend())
        .register::<Task>()
        .concurrency(8)
        .lease(Duration::from_secs(2))
        .data(recorder.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;

    // a producer: jobs due now and jobs due in 1 s, so the queue always holds some
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut acked, mut failed, mut n) = (Vec::new(), 0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let delay = Duration::from_millis(if n % 2 == 0 { 0 } else { 1000 });
                match client
                    .enqueue_with(&Task { n }, EnqueueOptions::new().delay(delay))
                    .await
                {
                    Ok(_) => acked.push(n),
                    Err(_) => failed += 1,
                }
                n += 1;
            }
            (acked, failed)
        })
    };
    assert!(wait_until(Duration::from_secs(10), || recorder.len() > 200).await);

    let key = "rsmq:{busy}";
    let Migration {
        slot,
        source,
        target,
        target_id,
    } = start_migration(&cluster, key);
    // one key at a time, so that the queue's keys are split over both masters
    // for a while (its scripts meet TRYAGAIN and ASK meanwhile)
    let port = target.to_string();
    let mut moved = 0;
    loop {
        let keys = cli(source, &["cluster", "getkeysinslot", &slot, "1"]).unwrap();
        let Some(k) = keys.lines().next().filter(|k| !k.is_empty()) else {
            break;
        };
        ok(
            source,
            &["migrate", "127.0.0.1", &port, "", "0", "5000", "KEYS", k],
        );
        moved += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(moved < 100, "keys keep coming back to the source");
    }
    for p in cluster.masters().into_iter().map(|(p, _)| p) {
        ok(p, &["cluster", "setslot", &slot, "node", &target_id]);
    }
    assert_eq!(cluster.master_of(key), target);
    // calls that met the queue's keys split over both masters (sent again:
    // such a refusal says the call ran nothing)
    let tryagain: String = cli(source, &["info", "errorstats"])
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("errorstat_TRYAGAIN"))
        .collect();

    // the producer and the worker go on against the new master (MOVED)
    let at_move = recorder.len();
    assert!(
        wait_until(Duration::from_secs(10), || recorder.len() > at_move + 200).await,
        "nothing ran after the slot moved"
    );
    stop.store(true, Ordering::Relaxed);
    let (acked, failed) = producer.await.unwrap();
    let all_ran = wait_until(Duration::from_secs(20), || {
        let counts = recorder.counts();
        acked.iter().all(|n| counts.contains_key(n))
    })
    .await;
    running.stop().await;
    let counts = recorder.counts();
    let lost: Vec<_> = acked.iter().filter(|n| !counts.contains_key(n)).collect();
    let twice = counts.values().filter(|&&c| c > 1).count();
    println!(
        "migration: {moved} keys moved one by one ({tryagain:?} on the source); {} jobs acked, {failed} enqueues failed during it, {} lost, {twice} run twice",
        acked.len(),
        lost.len()
    );
    assert!(all_ran && lost.is_empty(), "lost: {lost:?}");
    assert!(moved >= 2, "the queue's keys moved: {moved}");
    let stats = client.stats("busy").await.unwrap();
    assert_eq!(stats.processed as usize, counts.values().sum::<usize>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_second_call_meets_tryagain_runs_its_first_call_once() {
    // a send of two calls (two priorities) while the queue's slot migrates:
    // the first call finds all its keys on the source and runs; the second
    // finds its level's key moved and meets TRYAGAIN. The first must not
    // run again with the second.
    use redjob::queue::{QueueOptions, Rsmq, SendMessage};
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let rsmq = Rsmq::connect(&cluster.url()).await.unwrap();
    rsmq.create_queue("mq", QueueOptions::default())
        .await
        .unwrap();
    // every key the calls name, made: the levels, the exact dues (a delayed
    // message), the lease counts (a message received)
    rsmq.send("mq", SendMessage::new("held")).await.unwrap();
    rsmq.send(
        "mq",
        SendMessage::new("later").delay(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    rsmq.send("mq", SendMessage::new("high").priority(1))
        .await
        .unwrap();
    let client = Client::connect(&cluster.url()).await.unwrap();
    {
        use redjob::backend::Backend;
        let fetched = client
            .backend()
            .fetch("mq", 1, Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(fetched.jobs.len(), 1);
    }
    let key = "rsmq:{mq}";
    let source = cluster.master_of(key);
    let slot = cli(source, &["cluster", "keyslot", key]).unwrap();
    let keys = cli(source, &["cluster", "getkeysinslot", slot.trim(), "100"]).unwrap();
    assert_eq!(keys.lines().count(), 5, "{keys}");
    let Migration { target, .. } = start_migration(&cluster, key);
    let port = target.to_string();
    ok(
        source,
        &[
            "migrate",
            "127.0.0.1",
            &port,
            "",
            "0",
            "5000",
            "KEYS",
            "rsmq:{mq}:p1",
        ],
    );
    let level0 = || {
        cli(source, &["zcard", key])
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    assert_eq!(level0(), 2);
    let sent = rsmq
        .send_batch(
            "mq",
            &[
                SendMessage::new("low"),
                SendMessage::new("high 2").priority(1),
            ],
        )
        .await;
    // the first call ran once; the send says it did not go through whole
    assert_eq!(level0(), 3, "the send returned {sent:?}");
    assert!(sent.is_err(), "{sent:?}");
}
