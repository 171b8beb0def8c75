//! A master managed by Redis Sentinel: redjob finds it through the Sentinels,
//! and when the master is SIGKILLed mid-run, the Sentinels promote its replica
//! and producers and a worker carry on by themselves. What the failover lost is
//! counted and printed (see RELIABILITY.md); enqueues that waited for the
//! replica lose nothing.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::failover::{Recorded, produce};
use common::sentinel::SentinelSet;
use common::{Recorder, start_serving, wait_until};
use redjob::client::ClientConfig;
use redjob::connection::WaitForReplicas;
use redjob::{Client, Worker};

async fn sentinels() -> SentinelSet {
    tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_url_reaches_the_master_and_names_what_is_wrong() {
    let set = sentinels().await;
    let client = Client::connect(&set.url()).await.unwrap();
    let recorder = Recorder::default();
    let worker = Worker::builder(client.backend())
        .data(recorder.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    client.enqueue(&Recorded { n: 7 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || recorder.len() == 1).await);
    running.stop().await;
    // the queue lives on the master, and the replica has it too
    for node in [&set.master, &set.replica] {
        let mut con = node.raw().await;
        let c = &mut con;
        assert!(
            common::wait_for(Duration::from_secs(5), || async {
                let queues: Vec<String> = redis::cmd("SMEMBERS")
                    .arg("rsmq:QUEUES")
                    .query_async(&mut c.clone())
                    .await
                    .unwrap();
                queues == ["default"]
            })
            .await,
            "no queue on port {}",
            node.port
        );
    }

    // a master name the Sentinels do not know
    let wrong = set.url().replace("/jobs", "/nosuch");
    let e = Client::connect(&wrong).await.unwrap_err().to_string();
    assert!(e.contains("not found in sentinel"), "{e}");
    assert!(e.contains("/nosuch"), "{e}");
    // no Sentinel answers: an error within the connection timeout, no hang
    let mut nobody = ClientConfig::from_url(format!(
        "redis+sentinel://127.0.0.1:{}/jobs",
        common::RedisServer::free_port()
    ));
    nobody.redis.connection_timeout = Duration::from_secs(1);
    let started = std::time::Instant::now();
    let e = Client::from_config(nobody).await.unwrap_err().to_string();
    assert!(
        e.starts_with("cannot connect to Redis at redis+sentinel://"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // a URL without a master name
    let e = Client::connect("redis+sentinel://127.0.0.1:26379")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("name the master"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_moves_producers_and_workers_to_the_new_master() {
    let set = sentinels().await;
    let client = Client::connect(&set.url()).await.unwrap();
    let recorder = Recorder::default();
    let worker = Worker::builder(client.backend())
        .data(recorder.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    client.enqueue(&Recorded { n: 1 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(10), || recorder.len() == 1).await);

    // the Sentinels hand the master role to the replica; the old master lives
    // on as a replica (its clients are disconnected, a write to it is READONLY)
    let sentinel = set.sentinels[0].port;
    let said = common::cluster::cli(
        sentinel,
        &["sentinel", "failover", common::sentinel::MASTER],
    );
    assert_eq!(said.as_deref().map(str::trim), Some("OK"));
    assert!(
        common::wait_for(Duration::from_secs(30), || async {
            set.master_port() == Some(set.replica.port)
        })
        .await,
        "no switchover within 30 s"
    );
    // the producer finds the new master by itself (calls may fail meanwhile)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut failed = 0;
    while client.enqueue(&Recorded { n: 2 }).await.is_err() {
        failed += 1;
        assert!(
            tokio::time::Instant::now() < deadline,
            "no enqueue after the switchover"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        wait_until(Duration::from_secs(20), || recorder
            .counts()
            .contains_key(&2))
        .await,
        "the worker did not run the job enqueued on the new master"
    );
    running.stop().await;
    // it is on the new master (the old one only replicates it)
    let mut new = set.replica.raw().await;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query_async(&mut new).await.unwrap();
    assert_eq!(
        role.first(),
        Some(&redis::Value::BulkString(b"master".to_vec()))
    );
    let stats = client.stats("default").await.unwrap();
    assert_eq!(stats.processed, 2);
    println!("switchover: {failed} enqueue(s) failed before the new master took it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_and_producers_and_workers_carry_on() {
    let mut set = sentinels().await;
    let url = set.url();
    let client = Client::connect(&url).await.unwrap();
    let mut durable = ClientConfig::from_url(&url);
    durable.redis.wait_for_replicas = Some(WaitForReplicas {
        replicas: 1,
        timeout: Duration::from_secs(1),
    });
    let durable = Client::from_config(durable).await.unwrap();
    let queues: Vec<String> = (0..4).map(|i| format!("q{i}")).collect();

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
    let plain = produce(client.clone(), 0, 4, stop.clone());
    let waiting = produce(durable, 1_000_000, 4, stop.clone());
    assert!(wait_until(Duration::from_secs(10), || recorder.len() > 100).await);

    // SIGKILL the master: no shutdown, no last replication
    let old = set.master.port;
    assert_eq!(set.master_port(), Some(old));
    let killed_at = tokio::time::Instant::now();
    let before = recorder.len();
    set.master.kill();
    // the Sentinels agree it is down and promote the replica
    let promoted = {
        let deadline = killed_at + Duration::from_secs(30);
        loop {
            if set.master_port() == Some(set.replica.port) {
                break true;
            }
            if tokio::time::Instant::now() > deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert!(
        promoted,
        "the Sentinels did not promote the replica within 30 s"
    );
    let failover = killed_at.elapsed();

    // producers and worker carry on by themselves on the promoted replica
    let after = recorder.len();
    tokio::time::sleep(Duration::from_secs(3)).await;
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
        "sentinel failover: replica promoted {failover:?} after the SIGKILL; runs {before} before, {after} at promotion, {} after; \
         plain enqueues: {} acked, {} failed during the failover, {lost_plain} acked ones lost; \
         enqueues waiting for 1 replica: {} acked, {} failed ({} NotReplicated), {lost_waiting} lost; jobs run twice: {twice}",
        recorder.len(),
        plain.acked.len(),
        plain.failed,
        waiting.acked.len(),
        waiting.failed,
        waiting.not_replicated,
    );
    assert_eq!(
        lost_waiting, 0,
        "an enqueue that waited for the replica was lost"
    );
    // a lost plain enqueue is one the master acknowledged in its last moment,
    // before it replicated it: a handful at most
    assert!(lost_plain <= 20, "{lost_plain} acknowledged jobs lost");
    assert!(waiting.acked.len() > 100 && plain.acked.len() > 100);
    // a producer that met the dead master enqueued to the new one, and the
    // worker ran that job (a call found unsent on a closed socket goes again
    // on the new master's connection, so the producer may meet no failure)
    if let Some(recovered) = plain.recovered {
        assert!(counts.contains_key(&recovered), "job {recovered} never ran");
    }
}

async fn client_id(con: &mut redjob::connection::Connection) -> i64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query_async(con)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_call_takes_the_masters_lane_and_a_demoted_master_is_dropped() {
    let set = sentinels().await;
    let mut con = redjob::connection::RedisConfig::from_url(set.url())
        .connect()
        .await
        .unwrap();
    // the first call opens the lane in the background; a later idle one takes it
    let multiplexer = client_id(&mut con).await;
    let mut lane = multiplexer;
    for _ in 0..200 {
        lane = client_id(&mut con).await;
        if lane != multiplexer {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_ne!(lane, multiplexer, "no idle call took a lane");
    assert_eq!(client_id(&mut con).await, lane);
    // both sockets are the master's
    let mut master = set.master.raw().await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut master)
        .await
        .unwrap();
    for socket in [multiplexer, lane] {
        assert!(list.contains(&format!("id={socket} ")), "{socket}: {list}");
    }

    // the master turns replica with the sockets open (as when a lane connects
    // again just after Sentinel has demoted it and closed its clients)
    let free = common::RedisServer::free_port();
    let () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(free)
        .query_async(&mut master)
        .await
        .unwrap();
    let write = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query_async::<()>(&mut con)
        .await;
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query_async(&mut master)
        .await
        .unwrap();
    let refused = write.unwrap_err();
    assert!(
        refused.to_string().contains("read only replica"),
        "{refused}"
    );
    // the READONLY reply, which came through the lane, made the connection
    // ask the Sentinels again: a new connection answers
    let now = client_id(&mut con).await;
    assert!(
        now != lane && now != multiplexer,
        "still on the demoted master's sockets: {now}"
    );
}

/// A master that stalls (SIGSTOP) past the Sentinels' failover and then wakes
/// still takes itself for the master until the Sentinels demote it, seconds
/// later, and throws away what it took meanwhile. A call it answers after the
/// Sentinels replaced it must not be acknowledged, and calls made after the
/// replacement go to the new master: every acknowledged enqueue survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_replaced_while_it_stalled_acknowledges_nothing_when_it_wakes() {
    let set = sentinels().await;
    let mut config = ClientConfig::from_url(set.url());
    // long enough that the call in flight outlives the stall
    config.redis.response_timeout = Duration::from_secs(30);
    let client = Client::from_config(config).await.unwrap();
    let mut acked = vec![client.enqueue(&Recorded { n: 0 }).await.unwrap()];

    let old = set.master.port;
    let signal = |sig: &str| {
        let done = std::process::Command::new("kill")
            .args([sig, &set.master.pid().to_string()])
            .status()
            .unwrap();
        assert!(done.success());
    };
    signal("-STOP");
    // a call in flight to the stalled master
    let in_flight = tokio::spawn({
        let client = client.clone();
        async move { client.enqueue(&Recorded { n: 1 }).await }
    });
    // every Sentinel names the new master, and the stall goes on a little
    // (the audit that found this saw a replica promoted at 2.3 s into a 5 s
    // stall)
    let promoted = || {
        set.sentinels.iter().all(|s| {
            common::cluster::cli(
                s.port,
                &[
                    "sentinel",
                    "get-master-addr-by-name",
                    common::sentinel::MASTER,
                ],
            )
            .and_then(|a| a.lines().nth(1)?.trim().parse::<u16>().ok())
                == Some(set.replica.port)
        })
    };
    assert!(
        common::wait_for(Duration::from_secs(30), || async { promoted() }).await,
        "the Sentinels did not promote the replica within 30 s"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // the stalled master wakes, still a master in its own eyes until the
    // Sentinels demote it, and answers what it was sent
    signal("-CONT");
    let mut refused = 0;
    match in_flight.await.unwrap() {
        Ok(id) => acked.push(id),
        Err(_) => refused += 1,
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut n = 2;
    while tokio::time::Instant::now() < until {
        match client.enqueue(&Recorded { n }).await {
            Ok(id) => acked.push(id),
            Err(_) => refused += 1,
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // the Sentinels demote the old master, which then copies the new one
    let demoted = common::wait_for(Duration::from_secs(40), || async {
        common::cluster::cli(old, &["role"]).is_some_and(|r| r.starts_with("slave"))
            && common::cluster::cli(old, &["info", "replication"])
                .is_some_and(|i| i.contains("master_link_status:up"))
    })
    .await;
    assert!(demoted, "the old master was not demoted within 40 s");
    let mut lost = Vec::new();
    for id in &acked {
        // the demotion broke the connections to the old master: the first
        // calls may fail while the client finds the new one
        let mut tries = 0;
        let located = loop {
            match client.locate(id).await {
                Ok(located) => break located,
                Err(e) if tries < 50 => {
                    tries += 1;
                    println!("locate: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("no answer from the new master: {e}"),
            }
        };
        if located.is_none() {
            lost.push(id.to_string());
        }
    }
    println!(
        "stalled master: {} enqueues acknowledged, {refused} refused, {} lost",
        acked.len(),
        lost.len()
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged by the replaced master and lost, among them {:?}",
        lost.len(),
        &lost[..lost.len().min(3)]
    );
    assert!(
        acked.len() > 10,
        "the producer did not carry on: {}",
        acked.len()
    );
}

/// Connections on all the Sentinels whose `CLIENT LIST` line has `what`.
fn on_sentinels(set: &SentinelSet, what: &str) -> usize {
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

/// A client follows each Sentinel's announcements with one subscription; a
/// worker's topic readers (a connection of their own each) follow none, and a
/// client kept past the runtime that started its watcher gets one again in the
/// next runtime it is used in (the watcher ended with its runtime).
#[test]
fn one_watcher_per_client_and_one_again_in_a_later_runtime() {
    let set = SentinelSet::start();
    let subscribed = || on_sentinels(&set, " sub=1 ");
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    let first = runtime();
    let client = first.block_on(async {
        let client = Client::connect(&set.url()).await.unwrap();
        client
            .subscribe("feed", "reader", redjob::topic::Start::Beginning)
            .await
            .unwrap();
        let worker = Worker::builder(client.backend())
            .handle_signals(false)
            .subscribe("reader", |_: FeedEvent, _| async { Ok(()) })
            .build()
            .unwrap();
        let running = start_serving(worker).await;
        client.publish(&FeedEvent { n: 1 }).await.unwrap();
        assert!(
            common::wait_for(Duration::from_secs(10), || async {
                client
                    .topic("feed")
                    .await
                    .is_ok_and(|t| t.is_some_and(|t| t.subscribers[0].lag == 0))
            })
            .await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(subscribed(), 3, "one subscription to each Sentinel");
        running.stop().await;
        client
    });
    drop(first);
    // the watcher went with its runtime
    let gone = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        subscribed() == 0
    });
    assert!(
        gone,
        "{} subscriptions after the runtime ended",
        subscribed()
    );
    let second = runtime();
    second.block_on(async {
        // the first call meets the connection the first runtime drove: it
        // may fail, and the next one looks the master up again
        for n in 0..20 {
            if client.enqueue(&Recorded { n }).await.is_ok() && subscribed() == 3 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "no watcher in the second runtime: {} subscriptions",
            subscribed()
        );
    });
}

/// An event of the topic `feed`.
#[derive(serde::Serialize, serde::Deserialize, redjob::topic::Event)]
#[event(name = "feed_event", topic = "feed")]
struct FeedEvent {
    n: u64,
}
