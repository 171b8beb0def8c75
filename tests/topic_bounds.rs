//! Topic commands do work bounded by what they were asked for, never by the
//! topic's size: on a 10,000-event and a 1,000,000-event topic, a rewind to a
//! time, a subscribe at an id and a topic's info while Redis does not know a
//! subscriber's lag run the same commands inside Redis the same number of times
//! (`INFO commandstats`), and none of them reaches the slow log at 10 ms. A
//! lag Redis does not know is counted up to a cap and then reported as "more
//! than" the cap. A publish with an age limit trims a backlog of a million
//! expired events a bounded part at a time; deleting that topic never holds
//! Redis for 10 ms. A topic that refuses publishes when full counts only the
//! events its age limit keeps, and every topic listed (even beside a stream
//! another program named oddly) can be read.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::RedisServer;
use redis::Value;
use redis::aio::MultiplexedConnection;
use redjob::backend::memory::MemoryBackend;
use redjob::client::ClientConfig;
use redjob::topic::{Event, EventId, EventOptions, Start, Topics};
use redjob::{Client, Error};
use serde::{Deserialize, Serialize};

/// Appends `n` events to `topic`'s stream in script calls of `chunk` events
/// (each call well inside the client's response timeout on a slow machine);
/// returns the id of the last event of each call.
async fn fill(con: &mut MultiplexedConnection, topic: &str, n: u64, chunk: u64) -> Vec<EventId> {
    let script = redis::Script::new(
        r#"local id
        for i = 1, tonumber(ARGV[1]) do
          id = redis.call("XADD", KEYS[1], "*", "type", "tick", "data", '{"n":' .. i .. '}')
        end
        return id"#,
    );
    let mut lasts = Vec::new();
    let mut left = n;
    while left > 0 {
        let c = left.min(chunk);
        let id: String = script
            .key(stream(topic))
            .arg(c)
            .invoke_async(con)
            .await
            .unwrap();
        lasts.push(id.parse().unwrap());
        left -= c;
    }
    lasts
}

fn stream(topic: &str) -> String {
    format!("rsmq:t:{{{topic}}}")
}

/// Commands run since `before`, by name, without the test's own bookkeeping
/// and the pinger's PINGs.
async fn calls_since(
    con: &mut MultiplexedConnection,
    before: &HashMap<String, u64>,
) -> Vec<(String, u64)> {
    let after = common::command_calls(con).await;
    let mut out: Vec<(String, u64)> = after
        .into_iter()
        .filter(|(k, _)| !["info", "ping", "slowlog", "config"].contains(&k.as_str()))
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0);
            (k, d)
        })
        .filter(|(_, d)| *d > 0)
        .collect();
    out.sort();
    out
}

/// A group's `lag` as XINFO GROUPS reports it: `None` when Redis does not know it.
async fn redis_lag(con: &mut MultiplexedConnection, topic: &str, group: &str) -> Option<i64> {
    let groups: Vec<HashMap<String, Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream(topic))
        .query_async(con)
        .await
        .unwrap();
    let g = groups
        .iter()
        .find(|g| g.get("name") == Some(&Value::BulkString(group.as_bytes().to_vec())))
        .expect("the group exists");
    match g.get("lag") {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    }
}

/// Each measured operation's commands inside Redis, by operation.
type Work = Vec<(&'static str, Vec<(String, u64)>)>;

/// On `topic`, filled by [`fill`] (`lasts`): a rewind to a time in its
/// middle, a subscribe at an id in its middle, and its info while Redis does
/// not know a subscriber's lag (moved by another client's XGROUP SETID without
/// ENTRIESREAD).
async fn measure(server: &RedisServer, client: &Client, topic: &str, lasts: &[EventId]) -> Work {
    let mut con = server.raw().await;
    let mid = lasts[lasts.len() / 2];
    client
        .subscribe(topic, "rewound", Start::End)
        .await
        .unwrap();
    client.subscribe(topic, "moved", Start::End).await.unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("SETID")
        .arg(stream(topic))
        .arg("moved")
        .arg(mid.to_string())
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        redis_lag(&mut con, topic, "moved").await,
        None,
        "Redis does not know the lag after a SETID without ENTRIESREAD"
    );
    let mut work = Work::new();

    let before = common::command_calls(&mut con).await;
    client
        .rewind(topic, "rewound", Start::Time(mid.time()))
        .await
        .unwrap();
    work.push(("rewind to a time", calls_since(&mut con, &before).await));

    let before = common::command_calls(&mut con).await;
    assert!(client.subscribe(topic, "at", Start::At(mid)).await.unwrap());
    work.push(("subscribe at an id", calls_since(&mut con, &before).await));

    let before = common::command_calls(&mut con).await;
    let info = client.topic(topic).await.unwrap().unwrap();
    work.push(("topic info", calls_since(&mut con, &before).await));
    assert_eq!(info.subscribers.len(), 3);

    // the subscriber at the id reads from it
    let got: Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("at")
        .arg("c")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg(stream(topic))
        .arg(">")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(
        format!("{got:?}").contains(&mid.to_string()),
        "read {got:?}, not {mid}"
    );
    work
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewinds_subscribes_and_topic_info_do_the_same_work_on_10k_and_1m_events() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    // scripts loaded and the server's version read before anything is counted
    let warm = fill(&mut con, "warm", 300, 100).await;
    measure(&server, &client, "warm", &warm).await;

    let lasts = fill(&mut con, "small", 10_000, 500).await;
    let small = measure(&server, &client, "small", &lasts).await;

    let started = Instant::now();
    let lasts = fill(&mut con, "big", 1_000_000, 10_000).await;
    let built = started.elapsed();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(10_000)
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicU64::new(0));
    let pinger = {
        let (stop, worst) = (stop.clone(), worst.clone());
        let mut ping = server.raw().await;
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                // a PING held past the client's response timeout counts as
                // that long (its connection is then dropped and reconnected)
                let _ = redis::cmd("PING").query_async::<String>(&mut ping).await;
                worst.fetch_max(t.elapsed().as_micros() as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let big = measure(&server, &client, "big", &lasts).await;
    stop.store(true, Ordering::Relaxed);
    pinger.await.unwrap();
    let slow: Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async(&mut con)
        .await
        .unwrap();
    println!(
        "1M-event topic built in {built:.1?}; a concurrent PING's worst wait during \
         the operations on it: {:.2} ms",
        worst.load(Ordering::Relaxed) as f64 / 1000.0
    );
    for ((op, s), (_, b)) in small.iter().zip(&big) {
        println!("{op}: 10k events {s:?}; 1M events {b:?}");
    }
    for ((op, s), (_, b)) in small.iter().zip(&big) {
        assert_eq!(s, b, "{op}: commands on 10k events, then on 1M events");
    }
    assert!(
        matches!(&slow, Value::Array(v) if v.is_empty()),
        "the slow log (10 ms) recorded: {slow:?}"
    );
}

#[derive(Serialize, Deserialize, Event)]
#[event(name = "reading", topic = "aged", max_age = "1s")]
struct Reading {
    n: u64,
}

async fn slow_log(con: &mut MultiplexedConnection) -> Value {
    redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async(con)
        .await
        .unwrap()
}

async fn xlen(con: &mut MultiplexedConnection, topic: &str) -> u64 {
    redis::cmd("XLEN")
        .arg(stream(topic))
        .query_async(con)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_trims_a_million_expired_events_in_bounded_steps_and_a_delete_unlinks() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    // the script loaded before anything is measured
    client.publish(&Reading { n: 0 }).await.unwrap();
    fill(&mut con, "aged", 1_000_000, 10_000).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for (k, v) in [("slowlog-log-slower-than", 10_000)] {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(k)
            .arg(v)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .unwrap();
    client.publish(&Reading { n: 1 }).await.unwrap();
    let left = xlen(&mut con, "aged").await;
    let slow = slow_log(&mut con).await;
    println!("after one publish, {left} of 1,000,001 events are left; slow log: {slow:?}");
    assert!(
        left > 1_000_001 - 20_000,
        "one publish trimmed {} expired events",
        1_000_001 - left
    );
    assert!(
        matches!(&slow, Value::Array(v) if v.is_empty()),
        "the slow log (10 ms) recorded: {slow:?}"
    );
    // each publish trims a bounded part more, until none of the filled events
    // is left, only (some of) the publishes
    let mut publishes = 1;
    while xlen(&mut con, "aged").await > publishes {
        client.publish(&Reading { n: publishes }).await.unwrap();
        publishes += 1;
        assert!(publishes < 500, "the backlog shrinks with every publish");
    }
    println!("{publishes} publishes trimmed the backlog");

    // a deleted topic of a million events is freed in the background
    fill(&mut con, "gone", 1_000_000, 10_000).await;
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .unwrap();
    client
        .subscribe("gone", "s", Start::Beginning)
        .await
        .unwrap();
    assert!(client.delete_topic("gone").await.unwrap());
    let slow = slow_log(&mut con).await;
    assert!(
        matches!(&slow, Value::Array(v) if v.is_empty()),
        "the slow log (10 ms) recorded: {slow:?}"
    );
}

/// Each subscriber's lag and whether it is exact, by name.
async fn lags(client: &Client, topic: &str) -> Vec<(String, u64, bool, String)> {
    let info = client.topic(topic).await.unwrap().unwrap();
    info.subscribers
        .iter()
        .map(|s| (s.name.clone(), s.lag, s.lag_exact, s.lag_text()))
        .collect()
}

#[tokio::test]
async fn a_lag_redis_does_not_know_is_counted_up_to_100_and_then_shown_as_more() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.extend(fill(&mut con, "t", 1, 1).await);
        ids.extend(fill(&mut con, "t", 99, 99).await);
    }
    // ids[1] is event 100, ids[3] event 200, ids[5] event 300 (the last)
    client
        .subscribe("t", "deep", Start::At(ids[1]))
        .await
        .unwrap();
    client
        .subscribe("t", "near", Start::At(ids[4]))
        .await
        .unwrap();
    client
        .subscribe("t", "all", Start::Beginning)
        .await
        .unwrap();
    // (within the minute a start may be ahead: one further is refused)
    let later = std::time::SystemTime::now() + Duration::from_secs(50);
    client
        .subscribe("t", "future", Start::Time(later))
        .await
        .unwrap();
    let more = |n: &str| (n.to_string(), 100, false, "more than 100".to_string());
    let exact = |n: &str, lag: u64| (n.to_string(), lag, true, lag.to_string());
    assert_eq!(
        lags(&client, "t").await,
        [
            exact("all", 300),
            more("deep"),
            exact("future", 0),
            exact("near", 100)
        ]
    );
    assert_eq!(redis_lag(&mut con, "t", "deep").await, None);
    assert_eq!(redis_lag(&mut con, "t", "near").await, Some(100));

    // another client deletes an event ahead of them all: Redis knows no lag
    let _: i64 = redis::cmd("XDEL")
        .arg(stream("t"))
        .arg(ids[5].to_string())
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(redis_lag(&mut con, "t", "all").await, None);
    // published before the future subscriber's time: never read by it
    fill(&mut con, "t", 1, 1).await;
    assert_eq!(
        lags(&client, "t").await,
        [
            more("all"),
            more("deep"),
            exact("future", 0),
            exact("near", 100)
        ]
    );

    // read up to the end, a subscriber's lag is Redis's again
    let _: Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("deep")
        .arg("c")
        .arg("COUNT")
        .arg(1000)
        .arg("STREAMS")
        .arg(stream("t"))
        .arg(">")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(redis_lag(&mut con, "t", "deep").await, Some(0));
    assert_eq!(lags(&client, "t").await[1], exact("deep", 0));
}

/// The producer rule of docs/scale-out.md (`ACL SETUSER redjob-producer …`) covers the
/// commands a publish with an age limit runs (XTRIM, no XRANGE).
#[tokio::test]
async fn a_producer_on_the_documented_rule_publishes_with_an_age_limit() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/scale-out.md"))
        .expect("docs/scale-out.md");
    let rule: Vec<&str> = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER redjob-producer "))
        .expect("the producer rule of docs/scale-out.md")
        .split_whitespace()
        .skip(2)
        .collect();
    let server = RedisServer::start();
    let mut con = server.raw().await;
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&rule)
        .query_async(&mut con)
        .await
        .unwrap();
    let mut config = ClientConfig::from_url(format!(
        "redis://redjob-producer:producer-secret@127.0.0.1:{}",
        server.port
    ));
    config.namespace = "app".into();
    let producer = Client::from_config(config).await.unwrap();
    for n in 0..3 {
        producer.publish(&Reading { n }).await.unwrap();
    }
    let len: u64 = redis::cmd("XLEN")
        .arg("app:t:{aged}")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(len, 3);
}

/// A gauge reading kept one second, at most two at a time, refused beyond.
#[derive(Serialize, Deserialize, Event)]
#[event(
    name = "gauge",
    topic = "gauges",
    max_len = 2,
    max_age = "1s",
    when_full = "refuse"
)]
struct Gauge {
    n: u64,
}

/// A topic whose type keeps events one second and refuses a publish over two
/// events: once the two it holds are over a second old they are past their
/// `max_age`, so the next publish trims them and goes through. The old code
/// checked the length before it trimmed by age and refused it as full; since
/// only a publish that goes through trimmed, the topic stayed full of expired
/// events forever.
async fn expired_events_do_not_fill_a_refusing_topic(client: &Client, wait: impl AsyncFnOnce()) {
    client
        .publish_all(&[Gauge { n: 1 }, Gauge { n: 2 }])
        .await
        .unwrap();
    assert!(
        matches!(
            client.publish(&Gauge { n: 3 }).await,
            Err(Error::TopicFull { .. })
        ),
        "two fresh events fill it"
    );
    // both are past max_age now
    wait().await;
    let again = client.publish(&Gauge { n: 4 }).await;
    assert!(
        again.is_ok(),
        "a publish to a topic whose every event is past max_age is refused as full: {again:?}"
    );
    let t = client.topic("gauges").await.unwrap().unwrap();
    assert_eq!(t.length, 1, "the expired events are trimmed: {t:?}");
}

#[tokio::test]
async fn expired_events_do_not_fill_a_refusing_topic_on_memory() {
    let m = MemoryBackend::new();
    let client = Client::memory(m.clone());
    expired_events_do_not_fill_a_refusing_topic(&client, async || {
        m.clock().advance(Duration::from_millis(1500))
    })
    .await;
}

#[tokio::test]
async fn expired_events_do_not_fill_a_refusing_topic_on_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    expired_events_do_not_fill_a_refusing_topic(&client, async || {
        tokio::time::sleep(Duration::from_millis(1500)).await
    })
    .await;
}

/// A program that publishes to `rsmq:t:{orders.v2}` (the entry format: topic
/// `T` is the stream `ns:t:{T}`) makes a stream whose name is no topic name:
/// `client.topics()` leaves it out, and every name it lists can be read. The
/// old code listed "orders.v2", which `client.topic` then refused
/// (`InvalidValue`), so `redjob topic list` and the dashboard's topic list,
/// which read every listed topic, failed whole.
#[tokio::test]
async fn every_topic_listed_can_be_read() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let mut con = server.raw().await;
    let _: String = redis::cmd("XADD")
        .arg("rsmq:t:{orders.v2}")
        .arg("*")
        .arg("type")
        .arg("order_placed")
        .arg("data")
        .arg("{}")
        .query_async(&mut con)
        .await
        .unwrap();
    let names = client.topics().await.unwrap();
    assert!(names.contains(&"orders".to_string()), "{names:?}");
    for name in &names {
        let info = client.topic(name).await;
        assert!(
            info.is_ok(),
            "topics() lists {name:?}, which topic() refuses: {info:?}"
        );
    }
}

/// The topic names, by `client.topics()`.
async fn listed(client: &Client) -> Vec<String> {
    client.topics().await.unwrap()
}

/// Listing the topics (`client.topics()`, behind `redjob topic list` and the
/// dashboard's topic list) reads the namespace's index of topic names, not
/// every key: beside 20,000 other keys it sends no `SCAN`. The old listing
/// walked the whole keyspace with `SCAN … COUNT 1000` on every call (21
/// calls here, one per 1,000 keys whatever how few topics). A topic made
/// by an older release (a stream and its group, no index entry) is still
/// listed: the first listing in a namespace whose index is not marked
/// complete walks the keys once and fills it; deleting a topic takes it off
/// the index, publishing to it again puts it back, and a stream gone
/// without a delete of redjob's is not listed.
#[tokio::test]
async fn listing_topics_reads_an_index_not_every_key() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    for chunk in 0..4 {
        let mut mset = redis::cmd("MSET");
        for i in 0..5_000 {
            mset.arg(format!("rsmq:filler:{chunk}:{i}")).arg("x");
        }
        let _: () = mset.query_async(&mut con).await.unwrap();
    }
    // a topic an older release made: its stream and a subscriber, no index
    let _: String = redis::cmd("XADD")
        .arg("rsmq:t:{old}")
        .arg("*")
        .arg("type")
        .arg("tick")
        .arg("data")
        .arg("{}")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("rsmq:t:{old}")
        .arg("s")
        .arg("0")
        .query_async(&mut con)
        .await
        .unwrap();
    let b = client.backend();
    client.subscribe("a", "s", Start::Beginning).await.unwrap();
    b.publish("b", &[("tick", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    b.publish(
        "c",
        &[("tick", "{}"), ("tick", "{}")],
        &EventOptions::DEFAULT,
    )
    .await
    .unwrap();
    // the first listing fills the index with what the older release made
    assert_eq!(listed(&client).await, ["a", "b", "c", "old"]);
    common::reset_stats(&mut con).await;
    assert_eq!(listed(&client).await, ["a", "b", "c", "old"]);
    let calls = common::command_calls(&mut con).await;
    assert_eq!(
        calls.get("scan").copied().unwrap_or(0),
        0,
        "a listing walked the keyspace: {calls:?}"
    );
    assert!(client.delete_topic("b").await.unwrap());
    assert!(client.delete_topic("old").await.unwrap());
    assert_eq!(listed(&client).await, ["a", "c"]);
    b.publish("b", &[("tick", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    assert_eq!(listed(&client).await, ["a", "b", "c"]);
    // a stream gone without redjob's delete (a DEL) is not listed
    let _: i64 = redis::cmd("DEL")
        .arg("rsmq:t:{c}")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(listed(&client).await, ["a", "b"]);
    let calls = common::command_calls(&mut con).await;
    assert_eq!(calls.get("scan").copied().unwrap_or(0), 0, "{calls:?}");
}

/// A client's publishes add their topic to the index of topic names once,
/// not with every event (a `SADD` an event was a command more for Redis per
/// publish); its own delete makes the next publish add it again, and a
/// topic made anew by another client's publish after the delete is listed.
#[tokio::test]
async fn publishes_add_their_topic_to_the_index_once_not_with_every_event() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let other = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    let b = client.backend();
    common::reset_stats(&mut con).await;
    for _ in 0..100 {
        b.publish("t", &[("tick", "{}")], &EventOptions::DEFAULT)
            .await
            .unwrap();
    }
    b.publish(
        "t",
        &[("tick", "{}"), ("tick", "{}")],
        &EventOptions::DEFAULT,
    )
    .await
    .unwrap();
    let calls = common::command_calls(&mut con).await;
    assert_eq!(
        calls.get("sadd").copied().unwrap_or(0),
        1,
        "101 publishes of one topic: {calls:?}"
    );
    assert_eq!(listed(&client).await, ["t"]);
    assert!(client.delete_topic("t").await.unwrap());
    assert!(listed(&client).await.is_empty());
    b.publish("t", &[("tick", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    assert_eq!(listed(&client).await, ["t"], "made anew by its deleter");
    assert!(client.delete_topic("t").await.unwrap());
    other
        .backend()
        .publish("t", &[("tick", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    assert_eq!(listed(&other).await, ["t"], "made anew by another client");
}

/// A read of many topics (the topic list's page, `redjob topic list`) reads
/// the subscribers of at most 100 topics' worth a script call: each costs an
/// `XRANGE` of up to 101 events, and one call read 50 topics whatever how
/// many subscribers each had (here 10 topics of 30 subscribers each, all
/// 300 in one call). The topics are read as before, each subscriber once.
#[tokio::test]
async fn a_read_of_many_topics_reads_at_most_100_subscribers_a_call() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let topics: Vec<String> = (0..10).map(|i| format!("wide{i}")).collect();
    for topic in &topics {
        for s in 0..30 {
            client
                .subscribe(topic, &format!("s{s:02}"), Start::Beginning)
                .await
                .unwrap();
        }
        client
            .backend()
            .publish(topic, &[("x", "{}")], &EventOptions::DEFAULT)
            .await
            .unwrap();
    }
    // once for the script to load
    client.topic_infos(&topics).await.unwrap();
    let mut con = server.raw().await;
    let before = common::command_calls(&mut con).await;
    let infos = client.topic_infos(&topics).await.unwrap();
    let calls: HashMap<String, u64> = calls_since(&mut con, &before).await.into_iter().collect();
    for info in &infos {
        let info = info.as_ref().expect("the topic exists");
        assert_eq!(info.subscribers.len(), 30);
        assert!(info.subscribers.iter().all(|s| s.lag == 1 && s.lag_exact));
    }
    assert_eq!(
        calls.get("xrange"),
        Some(&300),
        "each subscriber once: {calls:?}"
    );
    // 3 topics (90 subscribers) a call, then the last one
    assert_eq!(calls.get("evalsha"), Some(&4), "{calls:?}");
}
