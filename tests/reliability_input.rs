//! Bad input: 10,000 good jobs mixed with 1,000 bad messages written with raw
//! Redis commands. Every good job runs, every bad message ends in the dead-letter
//! queue with its reason, nothing panics and the worker's memory stays bounded.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Recorder, RedisServer, start, wait_for, wait_until};
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "good", queue = "mixed")]
struct Good {
    key: u64,
}

impl Job for Good {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

/// The bad kinds, each with the text its dead letter's reason must contain.
fn bad_body(kind: usize, i: usize) -> (Vec<u8>, &'static str) {
    match kind {
        0 => (format!("not json {i}").into_bytes(), "cannot run this body"),
        1 => (b"[1, 2, 3]".to_vec(), "cannot run this body"),
        2 => (
            format!(r#"{{"type":"no_such_job_{i}","args":{{}}}}"#).into_bytes(),
            "unknown job type",
        ),
        3 => (
            br#"{"type":"good","args":{"key":"not a number"}}"#.to_vec(),
            "cannot run this body",
        ),
        4 => (Vec::new(), "cannot run this body"),
        5 => (vec![0xff, 0xfe, b'{', 0x80, 0x00], "cannot run this body"),
        _ => {
            // a well-formed job, but over the queue's maxsize (64 KiB)
            let pad = "x".repeat(70_000);
            (
                format!(r#"{{"type":"good","args":{{"key":{i},"pad":"{pad}"}}}}"#).into_bytes(),
                "over the queue's maxsize",
            )
        }
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_among_good_jobs_is_dead_lettered_with_reasons() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let good: Vec<Good> = (0..10_000).map(|key| Good { key }).collect();
    client.enqueue_batch(&good[..5_000]).await.unwrap();
    // 1,000 bad messages, raw: ZADD to the queue's set, HSET into its hash
    let mut con = server.raw().await;
    let mut want: HashMap<String, &'static str> = HashMap::new();
    for i in 0..1_000 {
        let id = format!("{:010}{:022}", 1_000_000 + i, i);
        let (body, reason) = bad_body(i % 7, i);
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg("rsmq:mixed")
            .arg(0)
            .arg(&id)
            .cmd("HSET")
            .arg("rsmq:mixed:Q")
            .arg(&id)
            .arg(body)
            .query_async(&mut con)
            .await
            .unwrap();
        want.insert(id, reason);
    }
    client.enqueue_batch(&good[5_000..]).await.unwrap();

    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queue("mixed")
        .handle_signals(false)
        .data(rec.clone())
        .unknown_jobs_retry_for(Duration::ZERO)
        .build()
        .unwrap();
    let rss_before = rss_kib();
    let running = start(w);
    assert!(
        wait_until(Duration::from_secs(60), || rec.len() >= 10_000).await,
        "ran {}",
        rec.len()
    );
    let backend = client.clone();
    assert!(
        wait_for(Duration::from_secs(20), || async {
            backend.dead_letters("mixed", 5_000).await.unwrap().len() >= 1_000
        })
        .await
    );
    let rss_after = rss_kib();
    running.stop().await;

    // every good job ran exactly once
    let counts = rec.counts();
    assert_eq!(counts.len(), 10_000);
    assert!(counts.values().all(|n| *n == 1));
    // every bad message is a dead letter with its reason
    let dead = client.dead_letters("mixed", 5_000).await.unwrap();
    assert_eq!(dead.len(), 1_000);
    for d in &dead {
        let reason = want
            .get(d.id.as_str())
            .unwrap_or_else(|| panic!("unexpected dead letter {}", d.id));
        assert!(d.error.contains(reason), "{}: {}", d.id, d.error);
    }
    let stats = client.stats("mixed").await.unwrap();
    assert_eq!((stats.processed, stats.dead), (10_000, 1_000));
    // the run-time histogram counts the good jobs' runs alone: a body naming
    // "good" that does not decode into it was no run of it
    let times = redjob::backend::Backend::run_times(&client.backend(), "mixed")
        .await
        .unwrap();
    let counted: Vec<(&str, u64)> = times
        .iter()
        .map(|t| (t.job_type.as_str(), t.count()))
        .collect();
    assert_eq!(counted, [("good", 10_000)]);
    assert_eq!(client.queues().attributes("mixed").await.unwrap().msgs, 0);
    let grew = rss_after.saturating_sub(rss_before);
    println!("bad input: 10000 good ran, 1000 bad dead-lettered; worker RSS grew {grew} KiB");
    assert!(grew < 64 * 1024, "worker memory grew {grew} KiB");
}

/// `v` in base 36, `width` digits.
fn b36(mut v: u64, width: usize) -> String {
    const D: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = vec![b'0'; width];
    for c in s.iter_mut().rev() {
        *c = D[(v % 36) as usize];
        v /= 36;
    }
    String::from_utf8(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_job_whose_id_says_it_was_sent_beyond_the_window_ahead_is_dead_lettered() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client.enqueue(&Good { key: 1 }).await.unwrap();
    let mut con = server.raw().await;
    let (secs, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    let now_us = secs * 1_000_000 + us;
    // sent "3 hours from now" (a clock stepped back, or another client's id),
    // and an hour ago
    let ahead = format!(
        "{}{}",
        b36(now_us + 3 * 3600 * 1_000_000, 10),
        "a".repeat(22)
    );
    let before = format!(
        "{}{}",
        b36(now_us - 3600 * 1_000_000 + 60_000_000, 10),
        "b".repeat(22)
    );
    for id in [&ahead, &before] {
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg("rsmq:mixed")
            .arg(0)
            .arg(id)
            .cmd("HSET")
            .arg("rsmq:mixed:Q")
            .arg(id)
            .arg(r#"{"type":"nobody_knows","args":{}}"#)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queue("mixed")
        .handle_signals(false)
        .data(rec.clone())
        .unknown_jobs_retry_for(Duration::from_secs(3600))
        .build()
        .unwrap();
    let running = start(w);
    let backend = client.clone();
    let dead = wait_for(Duration::from_secs(10), || async {
        !backend.dead_letters("mixed", 10).await.unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    assert!(
        dead,
        "the job sent \"ahead\" is dead-lettered, not put back for hours"
    );
    let letters = client.dead_letters("mixed", 10).await.unwrap();
    assert_eq!(
        letters.len(),
        1,
        "the one sent an hour ago is put back: {letters:?}"
    );
    assert_eq!(letters[0].id.as_str(), ahead);
    assert!(
        letters[0]
            .error
            .contains("further ahead than unknown_jobs_retry_for"),
        "{}",
        letters[0].error
    );
    assert_eq!(rec.len(), 1, "the good job ran");
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "ns_ping", topic = "pings")]
struct Ping {
    n: u64,
}

/// A namespace holding a character Redis's `SCAN MATCH` reads as a pattern
/// (`[`, `]`, `\`) is accepted (only whitespace, control characters and
/// braces are refused), and its topics are published and read; listing
/// them must find them too, as it does in the default namespace and on the
/// memory backend. The listing scans `ns:t:{*}` with the namespace put in
/// the pattern as it is: `app[1]` then matches `app1:…`, never its own keys,
/// and `app\x` escapes the `x`.
#[tokio::test]
async fn a_namespace_with_pattern_characters_lists_its_topics() {
    let server = RedisServer::start();
    for ns in ["rsmq", "app[1]", "a\\b"] {
        let mut cfg = redjob::client::ClientConfig::from_url(server.url());
        cfg.namespace = ns.into();
        let client = Client::from_config(cfg).await.unwrap();
        client.publish(&Ping { n: 1 }).await.unwrap();
        assert!(
            client.topic("pings").await.unwrap().is_some(),
            "{ns}: the topic is there"
        );
        assert_eq!(
            client.topics().await.unwrap(),
            ["pings"],
            "namespace {ns:?}: the topic is listed"
        );
    }
}

/// A subscription's concurrency past what a worker can count is refused when
/// the worker is built, as a queue's is (`queue_concurrency(q, usize::MAX)`
/// fails `build()`), not accepted and left to panic once the subscriber
/// starts: its limit is a semaphore of that many permits, which tokio caps
/// at `usize::MAX >> 3`.
#[tokio::test]
async fn a_subscription_concurrency_too_large_is_refused_at_build() {
    let mem = redjob::backend::memory::MemoryBackend::new();
    let built = Worker::builder(mem.clone())
        .handle_signals(false)
        .subscribe(
            redjob::topic::Subscription::new("counter").concurrency(usize::MAX),
            |_: Ping, _| async { Ok(()) },
        )
        .build();
    let Ok(worker) = built else {
        return;
    };
    // built: it runs (or the test says how it fails)
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel();
    let ran = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker stops");
    panic!("usize::MAX accepted by build(); the worker's run then gave {ran:?}");
}

/// A worker concurrency too large is refused at `build()`, and the error
/// says why: the value is too large. It said "must be at least 1" of
/// `usize::MAX`, the same reason as for 0.
#[test]
fn a_worker_concurrency_too_large_is_refused_for_being_too_large() {
    let refusal = |n: usize| {
        let built = Worker::builder(redjob::backend::memory::MemoryBackend::new())
            .queue("mixed")
            .handle_signals(false)
            .concurrency(n)
            .build();
        match built {
            Ok(_) => panic!("concurrency {n} accepted"),
            Err(e) => e.to_string(),
        }
    };
    let text = refusal(usize::MAX);
    assert!(!text.contains("at least 1"), "{text}");
    assert!(text.contains("at most 1000000"), "{text}");
    let zero = refusal(0);
    assert!(zero.contains("at least 1"), "{zero}");
}

#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "ns_tick", topic = "ticks")]
struct Tick {
    n: u64,
}

/// `publish_all` is documented as one round trip, all or (a full topic
/// refusing) none. A batch too large for its reply to come within the
/// response timeout (400,000 small events, 300 ms) must not fail while
/// every event of it is stored: a caller told it failed sends it again, and
/// each event is then published twice. `publish_all` sent one script call of
/// any size, which held Redis for seconds and timed out with all of it
/// stored. A publish of over 16,000 events (or 64 MiB) is now refused
/// before anything is sent, with `InvalidValue`, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_too_large_for_the_response_timeout_is_not_stored_while_it_fails() {
    let server = RedisServer::start();
    let mut cfg = redjob::client::ClientConfig::from_url(server.url());
    cfg.redis.response_timeout = Duration::from_millis(300);
    let client = Client::from_config(cfg).await.unwrap();
    // the publish script loaded (the big call meets no NOSCRIPT), the topic made
    client
        .publish_all(&[Tick { n: 0 }, Tick { n: 1 }])
        .await
        .unwrap();
    let events: Vec<Tick> = (0..400_000).map(|n| Tick { n }).collect();
    let r = client.publish_all(&events).await;
    // whatever ran of the call has run once Redis answers a later command
    let mut stored = None;
    for _ in 0..40 {
        let read = async {
            let mut con = redis::Client::open(server.url())?
                .get_multiplexed_async_connection()
                .await?;
            redis::cmd("XLEN")
                .arg("rsmq:t:{ticks}")
                .query_async::<u64>(&mut con)
                .await
        };
        match read.await {
            Ok(n) => {
                stored = Some(n);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    let stored = stored.expect("Redis answers again") - 2;
    assert_eq!(
        stored, 0,
        "publish_all gave {r:?} with {stored} of its events stored"
    );
    assert!(
        matches!(
            &r,
            Err(redjob::Error::InvalidValue {
                what: "publish",
                ..
            })
        ),
        "refused up front: {r:?}"
    );
    // one past the bound (`topic::MAX_PUBLISH`) is refused, on the memory
    // backend too
    let over: Vec<Tick> = (0..16_001).map(|n| Tick { n }).collect();
    let memory = Client::memory(redjob::backend::memory::MemoryBackend::new());
    for c in [&client, &memory] {
        let r = c.publish_all(&over).await;
        assert!(
            matches!(r, Err(redjob::Error::InvalidValue { .. })),
            "{r:?}"
        );
    }
    assert!(
        memory.topic("ticks").await.unwrap().is_none(),
        "none stored"
    );
}

/// A publish of as many events as one call takes (16,000) is stored whole,
/// in order, within a response timeout of 2 s (the default is 5 s; it took
/// about 0.35 s on a 2-core machine, debug build), on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_at_the_bound_is_stored_whole() {
    let server = RedisServer::start();
    let mut cfg = redjob::client::ClientConfig::from_url(server.url());
    cfg.redis.response_timeout = Duration::from_secs(2);
    let client = Client::from_config(cfg).await.unwrap();
    let events: Vec<Tick> = (0..16_000).map(|n| Tick { n }).collect();
    let ids = client.publish_all(&events).await.unwrap();
    assert_eq!(ids.len(), events.len());
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(
        client.topic("ticks").await.unwrap().unwrap().length,
        events.len() as u64
    );
    let memory = Client::memory(redjob::backend::memory::MemoryBackend::new());
    assert_eq!(
        memory.publish_all(&events).await.unwrap().len(),
        events.len()
    );
}
