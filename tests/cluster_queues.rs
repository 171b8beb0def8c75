//! redjob on a Redis Cluster: each queue one slot, queues spread over the
//! masters, one worker serving 12 queues, topics listed from every master.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::cluster::RedisCluster;
use common::failover::Recorded;
use common::{Recorder, start_serving, wait_until};
use redjob::client::EnqueueOptions;
use redjob::queue::Queues;
use redjob::topic::{Event, Start};
use redjob::{Client, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Event)]
#[event(name = "cl_event", topic = "cl")]
struct Happened;

const JOBS_PER_QUEUE: u64 = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twelve_queues_spread_over_three_masters_and_one_worker_serves_them_all() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let client = Client::connect(&cluster.url()).await.unwrap();
    let queues: Vec<String> = (0..12).map(|i| format!("q{i}")).collect();
    for (i, q) in queues.iter().enumerate() {
        let jobs: Vec<Recorded> = (0..JOBS_PER_QUEUE)
            .map(|n| Recorded {
                n: i as u64 * 1000 + n,
            })
            .collect();
        client
            .enqueue_batch_with(&jobs, EnqueueOptions::new().queue(q))
            .await
            .unwrap();
    }

    // each queue's keys carry its hash tag, so they share its slot
    let mut con = redjob::connection::RedisConfig::from_url(cluster.url())
        .connect()
        .await
        .unwrap();
    let (tagged, plain): (i64, i64) = redis::pipe()
        .exists("rsmq:{q0}:Q")
        .exists("rsmq:{q0}")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!((tagged, plain), (1, 1));
    let untagged: i64 = redis::cmd("EXISTS")
        .arg("rsmq:q0:Q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(untagged, 0, "RSMQ's untagged name is not used on a Cluster");

    // the 12 queues live on all three masters
    let masters: HashSet<u16> = queues
        .iter()
        .map(|q| cluster.master_of(&format!("rsmq:{{{q}}}")))
        .collect();
    assert_eq!(masters.len(), 3, "{masters:?}");

    let mut listed = client.queues().list_queues().await.unwrap();
    listed.sort();
    let mut want = queues.clone();
    want.sort();
    assert_eq!(listed, want);

    let recorder = Recorder::default();
    let worker = Worker::builder(client.backend())
        .queues(&queues)
        .concurrency(16)
        .data(recorder.clone())
        .build()
        .unwrap();
    let running = start_serving(worker).await;
    let total = 12 * JOBS_PER_QUEUE as usize;
    assert!(
        wait_until(Duration::from_secs(30), || recorder.len() >= total).await,
        "{} of {total} ran",
        recorder.len()
    );
    // a job enqueued now wakes the idle worker on any master
    client
        .enqueue_with(&Recorded { n: 99_999 }, EnqueueOptions::new().queue("q7"))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || recorder.len() > total).await);
    running.stop().await;

    let counts = recorder.counts();
    assert_eq!(counts.len(), total + 1);
    assert!(counts.values().all(|&n| n == 1), "a job ran twice");
    for q in &queues {
        let stats = client.stats(q).await.unwrap();
        let want = JOBS_PER_QUEUE + u64::from(q == "q7");
        assert_eq!(stats.processed, want, "{q}");
    }

    // topics on different masters are all listed
    let topics = ["cl", "orders", "audit", "mail", "billing", "x1"];
    for t in topics {
        client.subscribe(t, "s", Start::Beginning).await.unwrap();
    }
    client.publish(&Happened).await.unwrap();
    let mut found = client.topics().await.unwrap();
    found.sort();
    let mut want: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    want.sort();
    assert_eq!(found, want);
    let topic_masters: HashSet<u16> = topics
        .iter()
        .map(|t| cluster.master_of(&format!("rsmq:t:{{{t}}}")))
        .collect();
    assert!(topic_masters.len() >= 2, "{topic_masters:?}");
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_times_out_while_the_master_stalls_is_not_sent_again() {
    // the queue's master stops answering (CLIENT PAUSE, as a fork or a slow
    // script would) past the response timeout: the send fails or succeeds,
    // but runs once, however long the stall
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let mut cfg = redjob::queue::RsmqConfig::from_url(cluster.url());
    cfg.redis.response_timeout = Duration::from_millis(200);
    let rsmq = redjob::queue::Rsmq::with_config(cfg).await.unwrap();
    rsmq.create_queue("q0", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    let master = cluster.master_of("{q0}");
    let paused = common::cluster::cli(master, &["client", "pause", "1500", "all"]);
    assert_eq!(paused.as_deref().map(str::trim), Some("OK"));
    let started = std::time::Instant::now();
    let sent = rsmq
        .send("q0", redjob::queue::SendMessage::new("once"))
        .await;
    let waited = started.elapsed();
    // the pause over, and whatever the client queued run
    tokio::time::sleep(
        Duration::from_millis(1500).saturating_sub(waited) + Duration::from_millis(500),
    )
    .await;
    let mut bodies = Vec::new();
    while let Some(m) = rsmq.pop("q0").await.unwrap() {
        bodies.push(m.body);
    }
    // it did not wait out the stall: the response timeout bounds the call
    assert!(waited < Duration::from_millis(1400), "{waited:?}");
    assert!(
        bodies.len() <= 1,
        "stored {} times (the send returned {:?} after {waited:?})",
        bodies.len(),
        sent.map(|_| ())
    );
    if sent.is_ok() {
        assert_eq!(bodies, ["once"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_listed_while_a_master_restarts() {
    // a master is down for a moment (a restart; too short for a failover):
    // listing the topics waits for it rather than failing at the first
    // refused connection
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let client = Client::connect(&cluster.url()).await.unwrap();
    let topics = ["cl", "orders", "audit", "mail", "billing", "x1"];
    for t in topics {
        client.subscribe(t, "s", Start::Beginning).await.unwrap();
    }
    let master_of = |t: &str| cluster.master_of(&format!("rsmq:t:{{{t}}}"));
    let down = master_of("cl");
    // the restarted master comes back empty (no persistence): the topics of
    // the other masters are the ones listed
    let mut want: Vec<String> = topics
        .iter()
        .filter(|t| master_of(t) != down)
        .map(|t| t.to_string())
        .collect();
    want.sort();
    assert!(!want.is_empty());
    let mut cluster = cluster;
    let node = cluster.nodes.iter().position(|n| n.port == down).unwrap();
    cluster.nodes[node].kill();
    let restart = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(300));
        cluster.nodes[node].restart();
        cluster
    });
    let started = std::time::Instant::now();
    let mut found = client.topics().await.unwrap_or_else(|e| {
        panic!(
            "listing failed after {:?} with the master down: {e}",
            started.elapsed()
        )
    });
    found.sort();
    assert_eq!(found, want);
    drop(restart.await.unwrap());
}

/// Sends SIGSTOP or SIGCONT to a process.
fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// `call`'s reply and how long it took (at most 30 s).
async fn timed<T>(call: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = std::time::Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("an answer");
    (reply, started.elapsed())
}

/// A master of the Cluster stalls (SIGSTOP: it accepts connections and
/// answers nothing), first with the client's connections to it open, then
/// with them cut just before (a network blip). Each call to a queue on it,
/// a write or a read, fails within the connection and response timeouts
/// together (RELIABILITY.md, "Redis going away"). After the cut, a call
/// meets `MOVED` from another node (the client has no connection to the
/// stalled one) and went again, each try waiting for a connection to the
/// stalled node: 12 tries, about 10 s at 1 s timeouts, until the Cluster
/// failed the node over (at 5 s timeouts, about a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_stalled_master_fail_within_the_timeouts() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let mut cfg = redjob::queue::RsmqConfig::from_url(cluster.url());
    cfg.redis.connection_timeout = Duration::from_secs(1);
    cfg.redis.response_timeout = Duration::from_secs(1);
    let con = cfg.redis.connect().await.unwrap();
    let rsmq = redjob::queue::Rsmq::with_config(cfg).await.unwrap();
    rsmq.create_queue("q0", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    let master = cluster.master_of("{q0}");
    let pid = cluster
        .nodes
        .iter()
        .find(|n| n.port == master)
        .unwrap()
        .pid();
    let send = || rsmq.send("q0", redjob::queue::SendMessage::new("m"));
    let read = || {
        let mut c = con.clone();
        async move {
            redis::cmd("HGET")
                .arg("rsmq:{q0}:Q")
                .arg("vt")
                .query_async::<Option<String>>(&mut c)
                .await
        }
    };
    for cut in [false, true] {
        send().await.unwrap();
        read().await.unwrap();
        if cut {
            common::cluster::cli(master, &["client", "kill", "type", "normal"]);
        }
        signal(pid, "STOP");
        let calls = [
            timed(async { send().await.map(|_| ()).map_err(|e| e.to_string()) }).await,
            timed(async { send().await.map(|_| ()).map_err(|e| e.to_string()) }).await,
            timed(async { read().await.map(|_| ()).map_err(|e| e.to_string()) }).await,
        ];
        signal(pid, "CONT");
        println!("cut {cut}: {calls:?}");
        for (reply, took) in &calls {
            assert!(reply.is_err(), "cut {cut}: {calls:?}");
            // 1 s to connect, 1 s for the reply, and slack
            assert!(*took < Duration::from_millis(2500), "cut {cut}: {calls:?}");
        }
        // the node answers again: so do calls
        assert!(common::wait_for(Duration::from_secs(10), || async { send().await.is_ok() }).await);
    }
}

/// How many clients of `port`'s node are normal (not replicas, not
/// subscribers), `redis-cli`'s own that asks included.
fn normal_clients(port: u16) -> usize {
    common::cluster::cli(port, &["client", "list", "type", "normal"])
        .map_or(0, |list| list.lines().count())
}

/// Waits until every master closed the client's idle sockets (only
/// `redis-cli`'s own remains), at most 10 s.
async fn idle_closed(cluster: &RedisCluster) {
    let masters: Vec<u16> = cluster.masters().into_iter().map(|(p, _)| p).collect();
    assert_eq!(masters.len(), 3);
    let closed = common::wait_for(Duration::from_secs(10), || {
        let masters = masters.clone();
        async move { masters.iter().all(|&p| normal_clients(p) == 1) }
    })
    .await;
    assert!(
        closed,
        "the masters kept idle clients: {:?}",
        masters
            .iter()
            .map(|&p| normal_clients(p))
            .collect::<Vec<_>>()
    );
}

/// The nodes of a Cluster close clients idle for a second (`timeout 1`, as
/// many hosted Redis have it): after each pause past it, a send to every
/// queue (one after another, then all at once: those may meet the crate's
/// reconnect, see below), a worker's fetch from every queue and an overview
/// go through, each within the timeouts, and each send stored its job once (docs/scale-out.md, "TLS, passwords and
/// timeouts"). Before the nodes' sockets were checked after a pause, the
/// first call to each master failed with `broken pipe`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_after_the_nodes_closed_the_idle_sockets_go_through() {
    use redjob::backend::Backend;
    use redjob::ops::{Admin, OverviewQuery};
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    for p in cluster.ports() {
        let set = common::cluster::cli(p, &["config", "set", "timeout", "1"]);
        assert_eq!(set.as_deref().map(str::trim), Some("OK"));
    }
    let client = Client::connect(&cluster.url()).await.unwrap();
    let backend = client.backend();
    let queues: Vec<String> = (0..12).map(|i| format!("q{i}")).collect();
    let send_all = |round: u64| {
        let client = client.clone();
        let queues = queues.clone();
        async move {
            let mut out = Vec::new();
            for (i, q) in queues.iter().enumerate() {
                let job = Recorded {
                    n: round * 1000 + i as u64,
                };
                let started = std::time::Instant::now();
                let sent = client
                    .enqueue_with(&job, EnqueueOptions::new().queue(q))
                    .await;
                out.push((
                    q.clone(),
                    sent.map(|_| ()).map_err(|e| e.to_string()),
                    started.elapsed(),
                ));
            }
            out
        }
    };
    let bounded = |what: &str, calls: &[(String, Result<(), String>, Duration)]| {
        for (q, reply, took) in calls {
            assert!(reply.is_ok(), "{what} {q} failed after {took:?}: {calls:?}");
            assert!(
                *took < Duration::from_secs(2),
                "{what} {q} took {took:?}: {calls:?}"
            );
        }
    };
    let first = send_all(0).await;
    bounded("before the pause, the send to", &first);

    // a send to each queue, after the nodes closed the idle sockets
    idle_closed(&cluster).await;
    let sends = send_all(1).await;
    bounded("after the pause, the send to", &sends);

    // a send to each queue, all at once, after another pause: each call
    // checks its socket
    idle_closed(&cluster).await;
    let at_once = futures::future::join_all(queues.iter().enumerate().map(|(i, q)| {
        let client = client.clone();
        async move {
            let started = std::time::Instant::now();
            let sent = client
                .enqueue_with(
                    &Recorded { n: 2000 + i as u64 },
                    EnqueueOptions::new().queue(q),
                )
                .await;
            (
                q.clone(),
                sent.map(|_| ()).map_err(|e| e.to_string()),
                started.elapsed(),
            )
        }
    }))
    .await;
    // all at once, a call can meet the `redis` crate's Cluster connection
    // while it reconnects a node whose socket another call found closed: it
    // fails at once with "No connections found" (ClusterConnectionNotFound),
    // which the crate also gives a call it had written when it cannot
    // rebuild its slot map, so redjob does not send it again. The producer
    // sends it again, as it would any error; the fetches below find each job
    // stored once (a call that failed so and had run would make a fourth)
    let mut again = Vec::new();
    for (q, reply, took) in &at_once {
        assert!(
            *took < Duration::from_secs(2),
            "after the pause, the concurrent send to {q} took {took:?}: {at_once:?}"
        );
        if let Err(e) = reply {
            assert!(
                e.contains("No connections found"),
                "after the pause, the concurrent send to {q} failed after {took:?}: {at_once:?}"
            );
            let i: u64 = q[1..].parse().unwrap();
            let sent = client
                .enqueue_with(&Recorded { n: 2000 + i }, EnqueueOptions::new().queue(q))
                .await;
            again.push((
                q.clone(),
                sent.map(|_| ()).map_err(|e| e.to_string()),
                *took,
            ));
        }
    }
    bounded(
        "sent again after the crate's reconnect, the send to",
        &again,
    );

    // a worker's fetch from each queue, after another pause
    idle_closed(&cluster).await;
    let mut fetches = Vec::new();
    let mut fetched = 0;
    for q in &queues {
        let started = std::time::Instant::now();
        let reply = backend.fetch(q, 10, Duration::from_secs(60)).await;
        if let Ok(f) = &reply {
            fetched += f.jobs.len();
            // each send stored its job once
            assert_eq!(f.jobs.len(), 3, "{q}");
        }
        fetches.push((
            q.clone(),
            reply.map(|_| ()).map_err(|e| e.to_string()),
            started.elapsed(),
        ));
    }
    bounded("after the pause, the fetch from", &fetches);
    assert_eq!(fetched, 36);

    // the overview, after another pause
    idle_closed(&cluster).await;
    let started = std::time::Instant::now();
    let overview = client
        .overview(&OverviewQuery::default())
        .await
        .map(|o| o.lines.len())
        .map_err(|e| e.to_string());
    let took = started.elapsed();
    bounded(
        "after the pause, the overview",
        &[("all".into(), overview.clone().map(|_| ()), took)],
    );
    assert_eq!(overview, Ok(12));
}

/// The client's sockets to the nodes go silent (each node behind a proxy
/// whose open flows stop forwarding, as flows a NAT or a load balancer
/// forgot: nothing answers, nothing breaks), while new connections go
/// through: after the calls that meet the silence time out, the next ones
/// go out on new sockets. The `redis` crate's Cluster connection replaces a
/// node's socket only after an I/O error: every call to the node timed out,
/// for as long as the operating system kept the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_after_the_sockets_to_the_nodes_went_silent_go_out_on_new_ones() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start_behind_proxies)
        .await
        .unwrap();
    let mut cfg = redjob::client::ClientConfig::from_url(cluster.url());
    cfg.redis.connection_timeout = Duration::from_secs(1);
    cfg.redis.response_timeout = Duration::from_millis(500);
    let client = Client::from_config(cfg).await.unwrap();
    let queues: Vec<String> = (0..12).map(|i| format!("q{i}")).collect();
    for (i, q) in queues.iter().enumerate() {
        client
            .enqueue_with(&Recorded { n: i as u64 }, EnqueueOptions::new().queue(q))
            .await
            .unwrap();
    }
    for proxy in &cluster.proxies {
        proxy.freeze();
    }
    let frozen = std::time::Instant::now();
    let mut calls = Vec::new();
    let mut i = 0;
    while frozen.elapsed() < Duration::from_secs(8) {
        let q = &queues[i % queues.len()];
        i += 1;
        let started = frozen.elapsed();
        let sent = client
            .enqueue_with(
                &Recorded { n: 100 + i as u64 },
                EnqueueOptions::new().queue(q),
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        calls.push((started, q.clone(), sent));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // the calls of the first 4 s may meet the silence; none after
    let after = Duration::from_secs(4);
    let late: Vec<_> = calls
        .iter()
        .filter(|(at, _, sent)| *at > after && sent.is_err())
        .collect();
    assert!(
        late.is_empty(),
        "{} of {} calls after 4 s failed: {late:?}",
        late.len(),
        calls.iter().filter(|(at, ..)| *at > after).count()
    );
}

/// Sums `INFO commandstats`' count of `command` over the masters.
fn masters_calls(cluster: &RedisCluster, command: &str) -> u64 {
    cluster
        .masters()
        .into_iter()
        .map(|(p, _)| {
            let stats = common::cluster::cli(p, &["info", "commandstats"]).unwrap_or_default();
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
                .and_then(|rest| rest.split(',').next()?.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// After a pause, calls that find a node's socket unused for the check's
/// time all at once send one `PING` a socket between them: the first checks
/// it, the others wait for its check and go on after it. Each sent its own
/// (12 concurrent sends, up to 12 `PING`s over 3 masters).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_after_a_pause_check_each_socket_once() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let client = Client::connect(&cluster.url()).await.unwrap();
    let queues: Vec<String> = (0..12).map(|i| format!("q{i}")).collect();
    for (i, q) in queues.iter().enumerate() {
        client
            .enqueue_with(&Recorded { n: i as u64 }, EnqueueOptions::new().queue(q))
            .await
            .unwrap();
    }
    // past the check's 0.8 s
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for (p, _) in cluster.masters() {
        common::cluster::cli(p, &["config", "resetstat"]).unwrap();
    }
    let sent = futures::future::join_all(queues.iter().enumerate().map(|(i, q)| {
        let client = client.clone();
        async move {
            client
                .enqueue_with(
                    &Recorded { n: 100 + i as u64 },
                    EnqueueOptions::new().queue(q),
                )
                .await
        }
    }))
    .await;
    assert!(sent.iter().all(|s| s.is_ok()), "{sent:?}");
    let pings = masters_calls(&cluster, "ping");
    assert!(pings <= 3, "{pings} PINGs for 12 calls on 3 sockets");
}

/// A call after a pause whose check (a `PING`) meets a socket gone silent
/// (each node behind a proxy that froze its open flows) was never sent: it
/// goes out on a new socket within what is left of its time, once. The
/// check's timeout failed it as timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_check_meets_a_silent_socket_goes_out_once_on_a_new_one() {
    use redjob::backend::Backend;
    let cluster = tokio::task::spawn_blocking(RedisCluster::start_behind_proxies)
        .await
        .unwrap();
    let mut cfg = redjob::client::ClientConfig::from_url(cluster.url());
    cfg.redis.connection_timeout = Duration::from_secs(1);
    cfg.redis.response_timeout = Duration::from_millis(500);
    let client = Client::from_config(cfg).await.unwrap();
    client
        .enqueue_with(&Recorded { n: 1 }, EnqueueOptions::new().queue("q0"))
        .await
        .unwrap();
    // past the check's 0.8 s, then the open flows go silent
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for proxy in &cluster.proxies {
        proxy.freeze();
    }
    let started = std::time::Instant::now();
    let sent = client
        .enqueue_with(&Recorded { n: 2 }, EnqueueOptions::new().queue("q0"))
        .await;
    let took = started.elapsed();
    assert!(sent.is_ok(), "after {took:?}: {sent:?}");
    assert!(took < Duration::from_millis(1600), "{took:?}");
    let fetched = client
        .backend()
        .fetch("q0", 10, Duration::from_secs(60))
        .await
        .unwrap();
    let mut got: Vec<String> = fetched
        .jobs
        .iter()
        .map(|j| String::from_utf8_lossy(&j.body).into_owned())
        .collect();
    got.sort();
    assert_eq!(got.len(), 2, "sent once: {got:?}");
}
