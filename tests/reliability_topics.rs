//! A subscriber's worker process SIGKILLed mid-batch: a second process claims
//! what the first held once its lease is over. Every event is handled at least
//! once, every event handled twice was started in the killed process, and the
//! subscriber ends with nothing pending and no lag.
//!
//! An ordered subscriber's owner SIGKILLed: the next process takes it over once
//! its lease is over, and the events run in topic order, one at a time, a few
//! that the killed one had started running again first.
//!
//! The worker processes are this test binary again, running the ignored test
//! `topic_worker_process` with the Redis URL and a log file in its environment.

mod common;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::RedisServer;
use redjob::topic::{Event, Start, Subscription};
use redjob::{Client, Worker};
use serde::{Deserialize, Serialize};

const EVENTS: u64 = 3000;

#[derive(Serialize, Deserialize, Event)]
#[event(name = "chaos_event", topic = "chaos")]
struct ChaosEvent {
    key: u64,
}

/// The worker process: logs `S key pid` before and `E key pid` after each run.
#[test]
#[ignore = "a worker process for a_killed_subscriber_process_loses_no_event, not a test on its own"]
fn topic_worker_process() {
    let (Ok(url), Ok(path)) = (
        std::env::var("REDJOB_TOPIC_REDIS"),
        std::env::var("REDJOB_TOPIC_LOG"),
    ) else {
        eprintln!("run by a_killed_subscriber_process_loses_no_event");
        return;
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let file = std::sync::Arc::new(file);
    let ordered = std::env::var("REDJOB_TOPIC_ORDERED").is_ok();
    let sub = if ordered {
        Subscription::new("o").ordered()
    } else {
        Subscription::new("s")
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = Client::connect(&url).await.unwrap();
        Worker::builder(client.backend())
            .concurrency(8)
            .lease(Duration::from_secs(2))
            .grace_period(Duration::from_secs(5))
            .subscribe(sub, move |e: ChaosEvent, _ctx| {
                let file = file.clone();
                async move {
                    let pid = std::process::id();
                    // one short write to an O_APPEND file: whole or not at all
                    let _ = (&*file).write_all(format!("S {} {pid}\n", e.key).as_bytes());
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    let _ = (&*file).write_all(format!("E {} {pid}\n", e.key).as_bytes());
                    Ok(())
                }
            })
            .build()
            .unwrap()
            .run()
            .await
            .unwrap();
    });
}

fn spawn(url: &str, log: &std::path::Path) -> std::process::Child {
    spawn_with(url, log, false)
}

fn spawn_with(url: &str, log: &std::path::Path, ordered: bool) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    if ordered {
        cmd.env("REDJOB_TOPIC_ORDERED", "1");
    }
    cmd.args([
        "--ignored",
        "--exact",
        "topic_worker_process",
        "--nocapture",
    ])
    .env("REDJOB_TOPIC_REDIS", url)
    .env("REDJOB_TOPIC_LOG", log)
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap()
}

/// Waits (up to a minute) until the subscriber of "chaos" has nothing pending
/// and no lag, then stops worker `b` with SIGTERM; it must exit cleanly.
fn drain_then_stop(rt: &tokio::runtime::Runtime, client: &Client, mut b: std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = rt.block_on(client.topic("chaos")).unwrap().unwrap();
        let s = &t.subscribers[0];
        if s.pending == 0 && s.lag == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "not drained: {t:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Command::new("kill")
        .args(["-TERM", &b.id().to_string()])
        .status()
        .unwrap();
    assert!(b.wait().unwrap().success());
}

/// (starts, ends) per key in a log; a line cut short by the kill is skipped.
fn read(path: &std::path::Path) -> (Vec<u64>, Vec<u64>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let (mut s, mut e) = (Vec::new(), Vec::new());
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() != 3 {
            continue;
        }
        let Ok(key) = f[1].parse() else { continue };
        match f[0] {
            "S" => s.push(key),
            "E" => e.push(key),
            _ => {}
        }
    }
    (s, e)
}

#[test]
fn a_killed_subscriber_process_loses_no_event() {
    let server = RedisServer::start();
    let url = server.url();
    let dir = std::env::temp_dir().join(format!("redjob-topic-kill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&url)).unwrap();
    rt.block_on(async {
        client
            .subscribe("chaos", "s", Start::Beginning)
            .await
            .unwrap();
        let events: Vec<ChaosEvent> = (0..EVENTS).map(|key| ChaosEvent { key }).collect();
        for chunk in events.chunks(500) {
            client.publish_all(chunk).await.unwrap();
        }
    });

    // A takes batches and runs them; killed mid-way with events in flight
    let mut a = spawn(&url, &log_a);
    let deadline = Instant::now() + Duration::from_secs(30);
    while read(&log_a).0.len() < 600 {
        assert!(
            Instant::now() < deadline,
            "worker A did not start 600 events"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    a.kill().unwrap();
    a.wait().unwrap();
    let (a_starts, a_ends) = read(&log_a);
    assert!((a_starts.len() as u64) < EVENTS, "killed after it finished");

    // B handles the rest, and claims A's held events after the lease
    let b = spawn(&url, &log_b);
    drain_then_stop(&rt, &client, b);
    let (b_starts, b_ends) = read(&log_b);

    let mut ends: HashMap<u64, usize> = HashMap::new();
    for k in a_ends.iter().chain(&b_ends) {
        *ends.entry(*k).or_default() += 1;
    }
    let mut starts: HashMap<u64, usize> = HashMap::new();
    for k in a_starts.iter().chain(&b_starts) {
        *starts.entry(*k).or_default() += 1;
    }
    let missing: Vec<u64> = (0..EVENTS).filter(|k| !ends.contains_key(k)).collect();
    assert!(missing.is_empty(), "never handled: {missing:?}");
    let in_a: HashSet<u64> = a_starts.iter().copied().collect();
    let twice: Vec<u64> = starts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| *k)
        .collect();
    let unexplained: Vec<&u64> = twice.iter().filter(|k| !in_a.contains(k)).collect();
    assert!(
        unexplained.is_empty(),
        "run twice but never in the killed process: {unexplained:?}"
    );
    // a duplicate is an event A had started and not acknowledged when it died:
    // at most its concurrency running plus the acknowledgements in flight
    assert!(twice.len() <= 8 + 256, "{} duplicates", twice.len());
    assert!(starts.values().all(|n| *n <= 2), "an event ran three times");
    eprintln!(
        "A started {} and was killed; B started {}; {} ran twice",
        a_starts.len(),
        b_starts.len(),
        twice.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_owner_of_an_ordered_subscriber_is_taken_over_in_order() {
    const N: u64 = 400;
    let server = RedisServer::start();
    let url = server.url();
    let dir = std::env::temp_dir().join(format!("redjob-topic-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = rt.block_on(Client::connect(&url)).unwrap();
    rt.block_on(async {
        client
            .subscribe("chaos", "o", Start::Beginning)
            .await
            .unwrap();
        let events: Vec<ChaosEvent> = (0..N).map(|key| ChaosEvent { key }).collect();
        client.publish_all(&events).await.unwrap();
    });
    // A owns the subscriber; B stands by, and takes over once A is killed
    let mut a = spawn_with(&url, &log_a, true);
    let deadline = Instant::now() + Duration::from_secs(30);
    while read(&log_a).0.len() < 50 {
        assert!(Instant::now() < deadline, "A did not start 50 events");
        std::thread::sleep(Duration::from_millis(5));
    }
    let b = spawn_with(&url, &log_b, true);
    std::thread::sleep(Duration::from_millis(300));
    a.kill().unwrap();
    a.wait().unwrap();
    let (a_starts, _) = read(&log_a);
    assert!((a_starts.len() as u64) < N, "killed after it finished");
    drain_then_stop(&rt, &client, b);
    let (b_starts, b_ends) = read(&log_b);
    // A ran 0, 1, 2, ... one at a time; B went on from one A had started (A
    // finished it, or not, without its acknowledgement landing), or from the
    // next one (A's last acknowledgement landed before the kill): no gap
    let consecutive = |s: &[u64]| s.windows(2).all(|w| w[1] == w[0] + 1);
    assert!(consecutive(&a_starts), "A out of order: {a_starts:?}");
    assert_eq!(a_starts.first(), Some(&0));
    assert!(consecutive(&b_starts), "B out of order: {b_starts:?}");
    let (first_b, last_a) = (b_starts[0], *a_starts.last().unwrap());
    assert!(
        first_b <= last_a + 1 && last_a + 1 - first_b < 8,
        "B started at {first_b}, A's last was {last_a}"
    );
    assert_eq!(b_ends.last(), Some(&(N - 1)));
    eprintln!(
        "A started {}, B went on from {first_b} ({} ran twice)",
        a_starts.len(),
        last_a + 1 - first_b
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A handler that blocks its thread past the grace period and the abort wait
/// does not keep the worker's `run` from returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_blocking_its_thread_does_not_hang_shutdown() {
    let backend = redjob::backend::memory::MemoryBackend::new();
    let client = Client::memory(backend.clone());
    client
        .subscribe("chaos", "s", Start::Beginning)
        .await
        .unwrap();
    client.publish(&ChaosEvent { key: 1 }).await.unwrap();
    let started = std::sync::Arc::new(tokio::sync::Notify::new());
    let s2 = started.clone();
    let worker = Worker::builder(backend)
        .handle_signals(false)
        .grace_period(Duration::from_millis(100))
        .subscribe("s", move |_: ChaosEvent, _ctx| {
            s2.notify_one();
            async {
                std::thread::sleep(Duration::from_secs(12));
                Ok(())
            }
        })
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    tokio::time::timeout(Duration::from_secs(10), started.notified())
        .await
        .unwrap();
    let t = Instant::now();
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("run returns after the grace period and the abort wait, not after the handler")
        .unwrap()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
}

/// A worker on a backend on real time refuses, as it builds, a subscriber
/// whose start is over a minute ahead (it would skip every event until then,
/// and the backend refuses to make it: the worker warned every few seconds,
/// for as long as the start was ahead).
#[tokio::test]
async fn a_worker_refuses_a_subscriber_starting_a_year_ahead() {
    let client = Client::from_config_lazy(redjob::client::ClientConfig::from_url(
        "redis://127.0.0.1:1",
    ))
    .unwrap();
    let year = Duration::from_secs(365 * 86_400);
    let later = std::time::SystemTime::now() + year;
    let built = Worker::builder(client.backend())
        .subscribe(
            Subscription::new("late").start(Start::Time(later)),
            |_: ChaosEvent, _| async { Ok(()) },
        )
        .handle_signals(false)
        .build();
    match built {
        Err(redjob::Error::InvalidValue { what, .. }) => assert_eq!(what, "subscriber start"),
        other => panic!("{:?}", other.map(|_| "built")),
    }
    // "now" by a clock a little ahead is taken
    let soon = std::time::SystemTime::now() + Duration::from_secs(5);
    Worker::builder(client.backend())
        .subscribe(
            Subscription::new("soon").start(Start::Time(soon)),
            |_: ChaosEvent, _| async { Ok(()) },
        )
        .handle_signals(false)
        .build()
        .unwrap();
}
