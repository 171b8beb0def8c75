//! Redis faults: killed and restarted (append-only, fsync always), connections
//! killed, unreachable at worker start, down or stalled during an enqueue or a
//! worker's stop, out of memory.

mod common;
#[path = "common/logs.rs"]
mod logs;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use common::{Recorder, RedisServer, Running, start, wait_for, wait_until};
use redjob::client::ClientConfig;
use redjob::ops::{Admin, History, QueueSettings};
use redjob::queue::{QueueOptions, Queues};
use redjob::{Client, Error, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "mark", queue = "rel")]
struct Mark {
    key: u64,
    #[serde(default)]
    pad: String,
}

impl Job for Mark {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

fn mark(key: u64) -> Mark {
    Mark {
        key,
        pad: String::new(),
    }
}

/// A client that gives up on a dead Redis after a second.
async fn client(url: &str) -> Client {
    let mut cfg = ClientConfig::from_url(url);
    cfg.redis.connection_timeout = Duration::from_secs(1);
    cfg.redis.response_timeout = Duration::from_secs(1);
    Client::from_config(cfg).await.unwrap()
}

/// A worker on the `rel` queue (lease 2 s, poll 1 s), running in a task.
fn serve(client: &Client, rec: &Recorder) -> Running {
    start(
        Worker::builder(client.backend())
            .queue("rel")
            .handle_signals(false)
            .lease(Duration::from_secs(2))
            .poll_interval(Duration::from_secs(1))
            .data(rec.clone())
            .build()
            .unwrap(),
    )
}

/// Asserts that the `rel` queue empties: nothing left visible or invisible.
async fn assert_drained(client: &Client) {
    assert!(
        wait_for(Duration::from_secs(10), || async {
            client.queues().attributes("rel").await.unwrap().msgs == 0
        })
        .await
    );
}

/// What a producer saw.
struct Produced {
    /// Keys whose enqueue was acknowledged.
    acked: Vec<u64>,
    /// Enqueues that failed.
    failed: u64,
    /// The longest enqueue call.
    slowest: Duration,
}

/// Enqueues `n` jobs one by one, pausing after failures.
fn produce(client: Client, n: u64) -> tokio::task::JoinHandle<Produced> {
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut failed = 0;
        let mut slowest = Duration::ZERO;
        for key in 0..n {
            let started = Instant::now();
            let r = client.enqueue(&mark(key)).await;
            slowest = slowest.max(started.elapsed());
            match r {
                Ok(_) => acked.push(key),
                Err(e) => {
                    failed += 1;
                    assert!(
                        matches!(e, Error::Redis(_)),
                        "a clear connection error, got {e:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        Produced {
            acked,
            failed,
            slowest,
        }
    })
}

/// Waits until every acknowledged key ran; returns the ones that did not.
async fn missing(rec: &Recorder, acked: &[u64]) -> Vec<u64> {
    let all_ran = || {
        let ran: HashSet<u64> = rec.runs().iter().map(|r| r.key).collect();
        acked.iter().all(|k| ran.contains(k))
    };
    wait_until(Duration::from_secs(40), all_ran).await;
    let ran: HashSet<u64> = rec.runs().iter().map(|r| r.key).collect();
    acked.iter().copied().filter(|k| !ran.contains(k)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_loses_no_acknowledged_enqueue() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let client = client(&server.url()).await;
    let rec = Recorder::default();
    let running = serve(&client, &rec);
    let producer = produce(client.clone(), 3000);
    assert!(wait_until(Duration::from_secs(20), || rec.len() >= 500).await);
    server.kill();
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.restart();
    let p = producer.await.unwrap();
    println!(
        "redis SIGKILL + restart: {} enqueues acknowledged, {} refused while down, slowest call {:?}",
        p.acked.len(),
        p.failed,
        p.slowest
    );
    assert!(
        p.failed > 0 || p.slowest >= Duration::from_millis(500),
        "the producer saw the outage"
    );
    assert_eq!(missing(&rec, &p.acked).await, Vec::<u64>::new());
    running.stop().await;
    // nothing left behind: every job ran and was acked after the restart
    assert_drained(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_reconnect_by_themselves() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let rec = Recorder::default();
    let running = serve(&client, &rec);
    let producer = produce(client.clone(), 3000);
    let mut kills = 0;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let mut con = server.raw().await;
        for kind in ["pubsub", "normal"] {
            // the killing connection is a normal one too: its own reply may be lost
            let r: redis::RedisResult<u64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg(kind)
                .query_async(&mut con)
                .await;
            kills += r.unwrap_or(1);
        }
    }
    let p = producer.await.unwrap();
    println!(
        "CLIENT KILL x3: {kills} connections killed, {} enqueues acknowledged, {} failed",
        p.acked.len(),
        p.failed
    );
    assert!(kills >= 3);
    assert_eq!(missing(&rec, &p.acked).await, Vec::<u64>::new());
    running.stop().await;
}

/// A TCP proxy on a free loopback port to the port in `to`, read at each new
/// connection (as a DNS name or a managed Redis's primary endpoint that
/// follows the master).
async fn proxy(to: Arc<AtomicU16>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let target = to.load(Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    port
}

/// `REPLICAOF host port` (`Some(port)`) or `REPLICAOF NO ONE` on `server`.
async fn replicaof(server: &RedisServer, master: Option<u16>) {
    let mut cmd = redis::cmd("REPLICAOF");
    match master {
        Some(p) => cmd.arg("127.0.0.1").arg(p),
        None => cmd.arg("NO").arg("ONE"),
    };
    let _: () = cmd.query_async(&mut server.raw().await).await.unwrap();
}

/// How many jobs the `rel` queue holds on `server`.
async fn held(server: &RedisServer) -> u64 {
    redis::cmd("ZCARD")
        .arg("rsmq:rel")
        .query_async(&mut server.raw().await)
        .await
        .unwrap_or(0)
}

/// A master and its replica behind one address (a TCP proxy, as a managed
/// Redis's primary endpoint is); the replica is promoted, the old master
/// demoted, and the address now leads to the new master. An enqueue that
/// meets `READONLY` on the open connection to the old master fails, and the
/// next one goes out on a new connection, to the new master. The old code
/// opened a new connection only after an I/O error: every enqueue failed
/// with `READONLY` on the old one, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueues_reach_the_new_master_after_a_failover_behind_one_address() {
    let a = RedisServer::start();
    let b = RedisServer::start_with(&["--replicaof", "127.0.0.1", &a.port.to_string()]);
    let to = Arc::new(AtomicU16::new(a.port));
    let port = proxy(to.clone()).await;
    let client = client(&format!("redis://127.0.0.1:{port}")).await;
    client.enqueue(&mark(1)).await.unwrap();
    assert!(wait_for(Duration::from_secs(10), || async { held(&b).await == 1 }).await);
    // the failover: b promoted, a demoted, the address follows b
    replicaof(&b, None).await;
    replicaof(&a, Some(b.port)).await;
    to.store(b.port, Ordering::SeqCst);
    let t = Instant::now();
    let mut errors = Vec::new();
    let mut stored = false;
    while t.elapsed() < Duration::from_secs(15) {
        match client.enqueue(&mark(2)).await {
            Ok(_) => {
                stored = true;
                break;
            }
            Err(e) => errors.push(e.to_string()),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    errors.dedup();
    assert!(
        stored,
        "no enqueue reached the new master in 15 s; errors: {errors:?}"
    );
    assert_eq!(held(&b).await, 2);
}

/// A caller waiting for a result costs Redis nothing while the job waits
/// (its subscriber is pinged every five minutes, not replaced and re-read every
/// 15 s as before: this window held one such renewal), and a killed
/// subscriber is replaced, so the finish still wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_result_waiter_costs_nothing_and_survives_a_killed_connection() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let id = client.enqueue(&mark(7)).await.unwrap();
    let waiter = {
        let c = client.clone();
        tokio::spawn(async move { c.wait_result::<Mark>(&id, Duration::from_secs(120)).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut con = server.raw().await;
    common::reset_stats(&mut con).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let calls = common::command_calls(&mut con).await;
    let spent: u64 = calls
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "config|resetstat"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(spent, 0, "a quiet waiter sent {calls:?}");
    // its subscriber killed: watched again, so the finish still wakes it
    common::kill_subscribers(&mut con).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rec = Recorder::default();
    let running = serve(&client, &rec);
    let got = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("woken by the finish, not its timeout")
        .unwrap();
    assert!(got.unwrap().is_some());
    running.stop().await;
}

/// A wait whose read after a finish notice times out (Redis paused a moment)
/// goes on waiting: "Redis out of reach is tried again until the time is
/// up" (`Client::wait_result`'s docs). A notice is published by hand (the job
/// has not run) with `CLIENT PAUSE` right behind it, so the waiter's read of
/// the job meets the pause and times out (1 s here, the pause 2.5 s). The
/// old code returned that error at once; the wait now watches again and
/// returns the result once a worker runs the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_wait_whose_read_times_out_waits_on() {
    let server = RedisServer::start();
    let client = client(&server.url()).await;
    let id = client.enqueue(&mark(8)).await.unwrap();
    let waiter = {
        let c = client.clone();
        tokio::spawn(async move { c.wait_result::<Mark>(&id, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let con = server.raw().await;
    // one write: the notice goes out before the pause holds the waiter's read
    let mut notice = redis::pipe();
    notice
        .cmd("PUBLISH")
        .arg("rsmq:@done:rel")
        .arg(id.to_string())
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(2500)
        .arg("ALL");
    let _: (i64, ()) = notice.query_async(&mut con.clone()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiter.is_finished(),
        "the wait ended on a read that timed out: {:?}",
        waiter.await.unwrap()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rec = Recorder::default();
    let running = serve(&client, &rec);
    let got = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("woken by the finish, not its timeout")
        .unwrap();
    assert!(got.unwrap().is_some(), "the job's result");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_started_before_redis_waits_and_then_serves() {
    let port = RedisServer::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let lazy = Client::from_config_lazy(ClientConfig::from_url(&url)).unwrap();
    let rec = Recorder::default();
    let running = serve(&lazy, &rec);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!running.is_finished(), "the worker waits for Redis");
    let _server = RedisServer::start_on(port, &[]);
    let client = client(&url).await;
    client.enqueue(&mark(1)).await.unwrap();
    let started = Instant::now();
    assert!(
        wait_until(Duration::from_secs(15), || rec.len() == 1).await,
        "served once Redis came up"
    );
    println!("served {:?} after the enqueue", started.elapsed());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_while_redis_is_down_fails_promptly() {
    let mut server = RedisServer::start();
    let client = client(&server.url()).await;
    client.enqueue(&mark(1)).await.unwrap();
    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(5), client.enqueue(&mark(2)))
            .await
            .expect("no hang past the configured timeouts");
        let took = started.elapsed();
        match r {
            Err(Error::Redis(e)) => println!("enqueue while down: {e} after {took:?}"),
            other => panic!("expected a Redis error, got {other:?}"),
        }
        assert!(took < Duration::from_millis(2500), "{took:?}");
    }
}

/// A lone enqueue to a Redis that stalls gives up at the response timeout
/// with a clear error, and the client's next enqueue reads its own reply,
/// not the stalled call's: on the connection's lane (packed by hand, right
/// after another call) and on the multiplexer (which takes the first call
/// after 500 ms without one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_enqueue_to_a_stalled_redis_fails_at_the_response_timeout() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let mut cfg = ClientConfig::from_url(server.url());
    cfg.redis.response_timeout = Duration::from_millis(300);
    let client = Client::from_config(cfg).await.unwrap();
    let mut raw = server.raw().await;
    for (round, idle) in [(0, 0), (1, 600)] {
        // the queue made, the send's function loaded, the lane open
        client.enqueue(&mark(10 * round + 1)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(idle)).await;
        // (over by the clock, below)
        let stalled = Instant::now();
        common::stall(&server.url(), 1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            client.enqueue(&mark(10 * round + 2)),
        )
        .await
        .expect("no hang past the response timeout");
        let took = started.elapsed();
        assert!(matches!(r, Err(Error::Redis(_))), "round {round}: {r:?}");
        assert!(took < Duration::from_millis(800), "round {round}: {took:?}");
        tokio::time::sleep_until(stalled + Duration::from_millis(1300)).await;
        // two calls back to back: the first through the multiplexer (idle
        // for a second), the second through the lane
        for key in [10 * round + 3, 10 * round + 4] {
            let id = client.enqueue(&mark(key)).await.unwrap();
            let body: String = redis::cmd("HGET")
                .arg("rsmq:rel:Q")
                .arg(id.to_string())
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(body.contains(&format!(r#""key":{key},"#)), "{id}: {body}");
        }
    }
}

/// A Redis of 3 MB that evicts nothing, its queue `rel` keeping a history
/// without arguments: the history keeps the arguments of the last 1,000
/// finished jobs (2 MB of these) otherwise, and draining would not free the
/// memory.
async fn out_of_memory_redis() -> (RedisServer, Client) {
    let server =
        RedisServer::start_with(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"]);
    let client = client(&server.url()).await;
    client
        .queues()
        .create_queue("rel", QueueOptions::default())
        .await
        .unwrap();
    client
        .set_settings("rel", &QueueSettings::history(lean()))
        .await
        .unwrap();
    (server, client)
}

/// The history `out_of_memory_redis` keeps: no arguments.
fn lean() -> History {
    History {
        args_max_age: Some(Duration::ZERO),
        ..History::default()
    }
}

/// Enqueues jobs padded with `pad` until Redis refuses one: how many it
/// took, and the refusal.
async fn fill(client: &Client, pad: &str) -> (u64, Error) {
    let mut accepted = 0u64;
    loop {
        let job = Mark {
            key: accepted,
            pad: pad.to_string(),
        };
        match client.enqueue(&job).await {
            Ok(_) => accepted += 1,
            Err(e) => return (accepted, e),
        }
        assert!(accepted < 20_000, "maxmemory never reached");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_refuses_enqueues_whole_and_workers_drain() {
    let (_server, client) = out_of_memory_redis().await;
    let pad = "x".repeat(2000);
    let (accepted, refused) = fill(&client, &pad).await;
    println!("out of memory after {accepted} jobs: {refused}");
    assert!(matches!(refused, Error::OutOfMemory(_)), "{refused:?}");
    assert!(refused.to_string().contains("out of memory"));
    // a batch is all or nothing
    let before = client.queues().attributes("rel").await.unwrap().msgs;
    let batch: Vec<Mark> = (0..500)
        .map(|i| Mark {
            key: 1_000_000 + i,
            pad: pad.clone(),
        })
        .collect();
    assert!(matches!(
        client.enqueue_batch(&batch).await,
        Err(Error::OutOfMemory(_))
    ));
    assert_eq!(
        client.queues().attributes("rel").await.unwrap().msgs,
        before
    );
    assert_eq!(before, accepted);
    // the worker drains what is there
    let rec = Recorder::default();
    let running = serve(&client, &rec);
    assert!(
        wait_until(Duration::from_secs(30), || rec.len() as u64 >= accepted).await,
        "ran {} of {accepted}",
        rec.len()
    );
    assert_drained(&client).await;
    // and memory is free again
    client.enqueue(&mark(7)).await.unwrap();
    running.stop().await;
    let keys: HashSet<u64> = rec.runs().iter().map(|r| r.key).collect();
    assert_eq!(keys.len() as u64, accepted);
}

/// A worker whose builder has settings to store (a history, here) started
/// while Redis is out of memory drains the queue all the same: the store of
/// its settings, refused by Redis before, failed the dispatcher's read of
/// them, and the dispatcher released every job it fetched until that read
/// passed, over and over: nothing ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_settings_to_store_started_out_of_memory_drains_the_queue() {
    let (_server, client) = out_of_memory_redis().await;
    let (accepted, refused) = fill(&client, &"x".repeat(4000)).await;
    assert!(matches!(refused, Error::OutOfMemory(_)), "{refused:?}");
    assert!(accepted >= 100, "out of memory after {accepted} jobs");
    let rec = Recorder::default();
    let running = start(
        Worker::builder(client.backend())
            .queue("rel")
            .history(lean())
            .handle_signals(false)
            .lease(Duration::from_secs(2))
            .poll_interval(Duration::from_secs(1))
            .data(rec.clone())
            .build()
            .unwrap(),
    );
    assert!(
        wait_until(Duration::from_secs(20), || rec.len() as u64 >= accepted).await,
        "ran {} of {accepted} jobs",
        rec.len()
    );
    assert_drained(&client).await;
    running.stop().await;
}

/// Jobs of a batch settle while Redis is out of memory, as other jobs do:
/// the settle's mark of the queue as holding batch finishes (`marks.lua`)
/// made a write Redis refuses over maxmemory first, and the settle waited
/// for it, with every job of its call, for as long as memory stayed full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_of_a_batch_settle_out_of_memory() {
    let (_server, client) = out_of_memory_redis().await;
    let members: Vec<Mark> = (0..50).map(|key| mark(100_000 + key)).collect();
    client.batch().jobs(&members).enqueue().await.unwrap();
    let (accepted, refused) = fill(&client, &"x".repeat(4000)).await;
    assert!(matches!(refused, Error::OutOfMemory(_)), "{refused:?}");
    assert!(accepted >= 100, "out of memory after {accepted} jobs");
    let rec = Recorder::default();
    let running = serve(&client, &rec);
    assert!(
        wait_until(Duration::from_secs(20), || rec.len() as u64
            >= accepted + 50)
        .await,
        "ran {} of {} jobs",
        rec.len(),
        accepted + 50
    );
    let left = || async { client.queues().attributes("rel").await.unwrap().msgs };
    assert!(
        wait_for(Duration::from_secs(10), || async { left().await == 0 }).await,
        "{} jobs left in the queue",
        left().await
    );
    running.stop().await;
}

/// Sleeps `ms`, recording its start.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "nap", queue = "rel")]
struct Nap {
    ms: u64,
}

impl Job for Nap {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 1);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// A stop while Redis is stopped (SIGSTOP: its connections open, no reply)
/// and a finished job waits to be settled: the worker tries to settle it for
/// a bounded time, not a number of tries that each wait out the response
/// timeout (20 of them took 28 s at a 1 s timeout, 112 s at the default 5 s),
/// and says it could not,
/// and leaves it leased for its lease to run out (unless a settle written to
/// the stalled Redis runs once it resumes).
#[tokio::test]
async fn a_stop_while_redis_stalls_ends_within_a_bound_and_keeps_the_job() {
    let lines = logs::Lines::default();
    // this test's runtime has one thread: the worker's tasks log through it too
    let _log = tracing::subscriber::set_default(lines.subscriber());
    let server = RedisServer::start();
    // a 3 s response timeout: the drain's fourth settle is under way at its
    // 10 s end
    let mut cfg = ClientConfig::from_url(server.url());
    cfg.redis.connection_timeout = Duration::from_secs(1);
    cfg.redis.response_timeout = Duration::from_secs(3);
    let client = Client::from_config(cfg).await.unwrap();
    let rec = Recorder::default();
    client.enqueue(&Nap { ms: 500 }).await.unwrap();
    let w = Worker::builder(client.backend())
        .queue("rel")
        .handle_signals(false)
        .grace_period(Duration::from_secs(1))
        .data(rec.clone())
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    signal(server.pid(), "STOP");
    // the job ends while Redis does not answer
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = Instant::now();
    stop.cancel();
    let r = tokio::time::timeout(Duration::from_secs(60), h).await;
    let took = t.elapsed();
    signal(server.pid(), "CONT");
    assert!(r.expect("the worker stopped").unwrap().is_ok());
    // the drain's 10 s, the registry's leave (2 s) and a fetch under way
    assert!(took < Duration::from_secs(18), "the stop took {took:?}");
    // and it says so (a settle cut at the drain's end had hidden it)
    let said = lines.text();
    assert!(said.contains("could not settle jobs at shutdown"), "{said}");
    // not lost: still queued for its lease to run out, or acked by a settle
    // the stalled Redis ran once it resumed (a script it had, or a
    // `NOSCRIPT`: this server never ran the settle's)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left: u64 = redis::cmd("ZCARD")
        .arg("rsmq:rel")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    let processed = client.stats("rel").await.unwrap().processed;
    assert_eq!((left + processed, rec.len()), (1, 1), "{left} {processed}");
}

/// Connecting to a Redis that stalls (SIGSTOP: it accepts the connection and
/// never answers) fails within the connection timeout, with a password in the
/// URL too (its AUTH, unanswered, was tried four times: 21 s at the default
/// 5 s), as a timeout naming the server.
#[tokio::test]
async fn connecting_to_a_stalled_redis_fails_within_the_connection_timeout() {
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    signal(server.pid(), "STOP");
    for url in [
        server.url().replace("redis://", "redis://:pw@"),
        server.url(),
    ] {
        let mut cfg = ClientConfig::from_url(&url);
        cfg.redis.connection_timeout = Duration::from_secs(1);
        cfg.redis.response_timeout = Duration::from_secs(1);
        let t = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(30), Client::from_config(cfg))
            .await
            .expect("an answer");
        let took = t.elapsed();
        signal(server.pid(), "CONT");
        signal(server.pid(), "STOP");
        match r {
            Err(e) => assert!(e.to_string().contains("127.0.0.1"), "{e}"),
            Ok(c) => {
                // (no AUTH to answer: the first call meets the stall)
                let e = Queues::list_queues(c.queues()).await.unwrap_err();
                assert!(matches!(&e, Error::Redis(r) if r.is_timeout()), "{e}");
            }
        }
        assert!(took < Duration::from_millis(2500), "{url}: {took:?}");
    }
    signal(server.pid(), "CONT");
}

/// `INFO memory`'s `used_memory`.
async fn used_memory(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let s: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(raw)
        .await
        .unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Sends `n` jobs of 1.5 KB (2.2 MB a thousand in Redis) to a server with
/// room for about `room` of them; checks the send is `PartlySent` by an
/// out-of-memory Redis, that exactly the jobs it lists as stored are queued,
/// from the first on, and that each (a sample of every `step`-th) is the job
/// given at its place. Returns how many were stored.
async fn refused_part_way_for_memory(n: u64, room: u64, step: usize) -> usize {
    refused_part_way(n, room, step, false).await
}

/// [`refused_part_way_for_memory`], by a client that waits for `replicas`
/// (1, to a server with none) when `wait`: the send then says that only 0 of 1
/// replicas confirmed the jobs it stored.
async fn refused_part_way(n: u64, room: u64, step: usize, wait: bool) -> usize {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    // Redis answers here: the reply to a round trip of 16,000 jobs (24 MB)
    // is waited for, not given up on after a second (under load it came
    // later, and the send failed as `timed out`, not `PartlySent`)
    let mut cfg = ClientConfig::from_url(server.url());
    cfg.redis.response_timeout = Duration::from_secs(30);
    if wait {
        cfg.redis.wait_for_replicas = Some(redjob::connection::WaitForReplicas {
            replicas: 1,
            timeout: Duration::from_millis(20),
        });
    }
    let client = Client::from_config(cfg).await.unwrap();
    client
        .queues()
        .create_queue("rel", QueueOptions::default())
        .await
        .unwrap();
    let mut raw = server.raw().await;
    let pad = "x".repeat(1500);
    let batch: Vec<Mark> = (0..n)
        .map(|key| Mark {
            key,
            pad: pad.clone(),
        })
        .collect();
    let room = used_memory(&mut raw).await + room * 2_200;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(room)
        .query_async(&mut raw)
        .await
        .unwrap();
    let e = client.enqueue_batch(&batch).await.unwrap_err();
    let Error::PartlySent {
        stored,
        of,
        error,
        not_replicated,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*of as u64, n);
    assert!(matches!(**error, Error::OutOfMemory(_)), "{error:?}");
    assert!(
        e.to_string()
            .contains(&format!("{} of {n} jobs were stored", stored.len())),
        "{e}"
    );
    assert!(!e.to_string().contains("noeviction"), "{e}");
    // whether the stored jobs are on replicas too, as the client asked
    let unconfirmed = "only 0 of 1 replicas confirmed";
    assert_eq!(e.to_string().contains(unconfirmed), wait, "{e}");
    let short = matches!(
        not_replicated.as_deref(),
        Some(Error::NotReplicated {
            replicas: 0,
            wanted: 1
        })
    );
    assert_eq!(short, wait, "{not_replicated:?}");
    // exactly those are in the queue, the first ones given
    let held = client.queues().attributes("rel").await.unwrap().msgs;
    assert_eq!(held, stored.len() as u64);
    let places: Vec<usize> = stored.iter().map(|(at, _)| *at).collect();
    assert_eq!(
        places,
        (0..stored.len()).collect::<Vec<_>>(),
        "in order, from the first"
    );
    // each stored id is the job given at its place
    for (at, id) in stored.iter().step_by(step).chain(stored.last()) {
        let job = redjob::inspect::Inspect::job(client.queues(), "rel", id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{id}"));
        let body = String::from_utf8_lossy(&job.body).into_owned();
        assert!(body.contains(&format!(r#""key":{at},"#)), "{at}: {body}");
    }
    stored.len()
}

/// A batch of several calls (3,000 jobs: three) that Redis refuses part way
/// for memory says which jobs it stored, by their places among those given,
/// so that the caller sends only the rest again (it said "nothing written" of
/// a send that stored 1,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_part_way_for_memory_says_which_jobs_it_stored() {
    // room for about one call's 1,000 jobs
    let stored = refused_part_way_for_memory(3000, 1000, 1).await;
    assert!(stored > 0 && stored < 3000, "{stored}");
}

/// A send of two round trips (20,000 jobs: 16,000, then 4,000) that Redis
/// refuses for memory in the second says which jobs it stored across both:
/// the first round trip's all, and the second's that went through, each by its
/// place among those given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_of_two_round_trips_refused_in_the_second_says_which_jobs_it_stored() {
    let stored = refused_part_way_for_memory(20_000, 17_500, 997).await;
    assert!(
        stored > 16_000 && stored < 20_000,
        "the second round trip stored some: {stored}"
    );
}

/// A send of two round trips (20,000 jobs) that Redis refuses for memory in
/// the first says which jobs it stored out of the whole send's 20,000 (the
/// first version said "of 16,000", the first round trip's: a caller sending
/// again what it did not list would have dropped the last 4,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_of_two_round_trips_refused_in_the_first_says_which_of_all_it_stored() {
    let stored = refused_part_way_for_memory(20_000, 8_000, 997).await;
    assert!(
        stored > 0 && stored < 16_000,
        "the first round trip stored some: {stored}"
    );
}

/// A send of two round trips by a client that waits for a replica, whose
/// first round trip is stored on the master alone (no replica confirmed it)
/// and whose second Redis refuses for memory part way, says both: which jobs
/// it stored, and that no replica confirmed them (it said `PartlySent` alone,
/// and the caller never learnt that the first 16,000 could be lost in a
/// failover). So does a send of one round trip refused part way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_refused_part_way_says_its_stored_jobs_were_not_replicated() {
    let stored = refused_part_way(20_000, 17_500, 997, true).await;
    assert!(stored > 16_000 && stored < 20_000, "{stored}");
    let stored = refused_part_way(3000, 1000, 1, true).await;
    assert!(stored > 0 && stored < 3000, "{stored}");
}

/// Counts the runs under way and the most seen at once.
#[derive(Default, Clone)]
struct AtOnce {
    now: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    most: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    done: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "limited_once", queue = "limited")]
struct Limited {
    ms: u64,
}

impl Job for Limited {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        use std::sync::atomic::Ordering::SeqCst;
        let a = ctx.data::<AtOnce>()?;
        let n = a.now.fetch_add(1, SeqCst) + 1;
        a.most.fetch_max(n, SeqCst);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        a.now.fetch_sub(1, SeqCst);
        a.done.fetch_add(1, SeqCst);
        Ok(())
    }
}

/// The builder's global concurrency holds across a Redis that restarts
/// empty (no persistence, or a failover to an empty replica) while
/// producers send again at once, their sends creating the queue again
/// without it: a worker whose notification connection broke reads (and
/// stores) its queues' settings again before it leases. It went on leasing
/// under no global limit (its 8 slots: 6 runs at once) until its recheck, two
/// minutes later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_restarts_empty_the_builders_global_concurrency_still_holds() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let a = AtOnce::default();
    let w = Worker::builder(client.backend())
        .register::<Limited>()
        .concurrency(8)
        .queue_global_concurrency("limited", 1)
        .handle_signals(false)
        .data(a.clone())
        .build()
        .unwrap();
    let running = common::start_serving(w).await;
    for _ in 0..3 {
        client.enqueue(&Limited { ms: 200 }).await.unwrap();
    }
    assert!(wait_until(Duration::from_secs(10), || a.done.load(SeqCst) == 3).await);
    assert_eq!(a.most.load(SeqCst), 1, "one at a time before the restart");
    // Redis loses everything; the producer sends again as soon as it can
    server.restart();
    let t = Instant::now();
    let mut sent = 0;
    while sent < 6 {
        match client.enqueue(&Limited { ms: 300 }).await {
            Ok(_) => sent += 1,
            Err(e) => {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "enqueue after the restart: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(
        wait_until(Duration::from_secs(30), || a.done.load(SeqCst) == 9).await,
        "ran {} of 9",
        a.done.load(SeqCst)
    );
    let stored = client.settings("limited").await;
    running.stop().await;
    assert_eq!(
        a.most.load(SeqCst),
        1,
        "runs at once under a global concurrency of 1; stored settings after the restart: {stored:?}"
    );
}

/// A TCP proxy on a free loopback port to `port`, whose open connections
/// are all cut at once when `cut` is notified (a network blip, a proxy's or
/// a load balancer's idle timeout); connections made after are proxied as
/// before.
async fn cutting_proxy(port: u16, cut: Arc<tokio::sync::Notify>) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxied = listener.local_addr().unwrap().port();
    let (cuts, _) = tokio::sync::broadcast::channel::<()>(4);
    let notify = cuts.clone();
    tokio::spawn(async move {
        loop {
            cut.notified().await;
            let _ = notify.send(());
        }
    });
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let mut cut = cuts.subscribe();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                {
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.recv() => {}
                    }
                }
            });
        }
    });
    proxied
}

/// Redis stalls (SIGSTOP: it accepts connections and answers nothing) and
/// the client's connections to it are cut meanwhile (a network blip): a lone
/// enqueue then fails within the connection and response timeouts, as
/// RELIABILITY.md promises ("Enqueues fail promptly … connection and
/// response timeouts"), with a password in the URL too. Connecting was
/// bounded so (`connecting_to_a_stalled_redis_fails_within_the_connection_timeout`),
/// but the managed connection's own reconnection is not: its unanswered
/// `AUTH` is tried four times, each waiting out the connection timeout (with
/// backoff in between), and the call waits for all of them: 4.7 s at 1 s
/// timeouts, about 21 s at the default 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_enqueue_after_a_cut_to_a_stalled_redis_with_a_password_fails_within_the_timeouts() {
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    let cut = Arc::new(tokio::sync::Notify::new());
    let port = cutting_proxy(server.port, cut.clone()).await;
    let client = client(&format!("redis://:pw@127.0.0.1:{port}")).await;
    // the queue made, the send's function loaded, the lane open
    for key in 1..=3 {
        client.enqueue(&mark(key)).await.unwrap();
    }
    signal(server.pid(), "STOP");
    cut.notify_one();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(30), client.enqueue(&mark(4)))
        .await
        .expect("an answer");
    let took = started.elapsed();
    signal(server.pid(), "CONT");
    println!("enqueue after the cut: {r:?} after {took:?}");
    assert!(matches!(r, Err(Error::Redis(_))), "{r:?}");
    // 1 s to connect, 1 s for the reply, and slack
    assert!(took < Duration::from_millis(2500), "{took:?}");
    // the reconnection went on: a later call finds a connection
    let mut again = None;
    for _ in 0..20 {
        match client.enqueue(&mark(5)).await {
            Ok(id) => {
                again = Some(id);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    assert!(again.is_some(), "an enqueue after Redis answers again");
}
