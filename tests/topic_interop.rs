//! Topics across languages: a Node.js program using only a plain Redis client
//! (docs/interop/node/topics.js, the `redis` package from npm) and the entry format in
//! docs/topics.md publishes events a redjob subscriber handles, and consumes events
//! redjob published, sharing one subscriber with a redjob worker.
//!
//! Topics across protocols: a client on a RESP3 URL (`?protocol=resp3`) reads
//! the events a RESP2 client does.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{RedisServer, start, wait_for};
use redjob::topic::{Event, Start};
use redjob::{Client, Worker};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[derive(Serialize, Deserialize, Event)]
#[event(name = "order_placed", topic = "orders")]
struct OrderPlaced {
    n: u64,
    note: String,
}

/// Runs the Node program's ops; one result per op.
fn node(server: &RedisServer, ops: Value) -> Vec<Value> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/interop/node");
    assert!(
        std::path::Path::new(dir)
            .join("node_modules/redis")
            .exists(),
        "npm redis missing: run `npm ci --prefix docs/interop/node` (scripts/test does)"
    );
    let mut child = Command::new("node")
        .arg(format!("{dir}/topics.js"))
        .arg(server.port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node must be on PATH");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(ops.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "topics.js failed");
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

type Handled = Arc<Mutex<Vec<(u64, String)>>>;

fn worker(client: &Client, handled: &Handled) -> redjob::Worker {
    let handled = handled.clone();
    Worker::builder(client.backend())
        .handle_signals(false)
        .subscribe("shared", move |e: OrderPlaced, _ctx| {
            let handled = handled.clone();
            async move {
                handled.lock().unwrap().push((e.n, e.note));
                Ok(())
            }
        })
        .build()
        .unwrap()
}

#[tokio::test]
async fn node_publishes_events_a_redjob_subscriber_handles_and_bad_entries_are_dead_lettered() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("orders", "shared", Start::Beginning)
        .await
        .unwrap();
    let mut entries: Vec<Value> = (0..20)
        .map(|n| {
            json!([
                "type",
                "order_placed",
                "data",
                json!({"n": n, "note": "from node ✓"}).to_string()
            ])
        })
        .collect();
    // not events: no type field, and data that is not the type's
    entries.push(json!(["foo", "bar"]));
    entries.push(json!(["type", "order_placed", "data", "[1,2]"]));
    let ids = node(
        &server,
        json!([{"op": "publish", "topic": "orders", "entries": entries}]),
    );
    assert_eq!(ids[0].as_array().unwrap().len(), 22);

    let handled: Handled = Arc::default();
    let running = start(worker(&client, &handled));
    let done = wait_for(Duration::from_secs(15), || async {
        let t = client.topic("orders").await.unwrap().unwrap();
        let s = &t.subscribers[0];
        s.dead == 2 && s.pending == 0 && s.lag == 0
    })
    .await;
    assert!(done, "{:?}", client.topic("orders").await.unwrap());
    running.stop().await;
    let mut got = handled.lock().unwrap().clone();
    got.sort();
    let want: Vec<(u64, String)> = (0..20).map(|n| (n, "from node ✓".to_string())).collect();
    assert_eq!(got, want);
    let dead = client.dead_events("orders", "shared", 10).await.unwrap();
    assert_eq!(dead.len(), 2);
    assert!(dead[0].error.contains("cannot decode event"), "{dead:?}");
    assert_eq!(dead[0].data, "[1,2]");
    assert!(dead[1].error.contains("no `type`"), "{dead:?}");
}

#[tokio::test]
async fn node_consumes_redjob_events_sharing_a_subscriber_with_a_redjob_worker() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .subscribe("orders", "shared", Start::Beginning)
        .await
        .unwrap();
    let events: Vec<OrderPlaced> = (0..100)
        .map(|n| OrderPlaced {
            n,
            note: format!("event {n}"),
        })
        .collect();
    let ids = client.publish_all(&events).await.unwrap();

    // a Node consumer of the same subscriber takes 40, then a redjob worker the rest
    let r = node(
        &server,
        json!([{"op": "consume", "topic": "orders", "group": "shared", "consumer": "node-1", "count": 40}]),
    );
    let by_node = r[0].as_array().unwrap();
    assert_eq!(by_node.len(), 40);
    for (i, e) in by_node.iter().enumerate() {
        assert_eq!(e["id"], json!(ids[i].to_string()));
        assert_eq!(e["type"], json!("order_placed"));
        assert_eq!(e["data"], json!({"n": i, "note": format!("event {i}")}));
    }
    let handled: Handled = Arc::default();
    let running = start(worker(&client, &handled));
    assert!(
        wait_for(Duration::from_secs(15), || async {
            handled.lock().unwrap().len() >= 60
        })
        .await
    );
    // and both go on sharing new events: each one to exactly one of them
    let more: Vec<OrderPlaced> = (100..150)
        .map(|n| OrderPlaced {
            n,
            note: String::new(),
        })
        .collect();
    client.publish_all(&more).await.unwrap();
    let r = node(
        &server,
        json!([{"op": "consume", "topic": "orders", "group": "shared", "consumer": "node-1", "count": 1000}]),
    );
    let done = wait_for(Duration::from_secs(15), || async {
        let t = client.topic("orders").await.unwrap().unwrap();
        t.subscribers[0].pending == 0 && t.subscribers[0].lag == 0
    })
    .await;
    assert!(done);
    running.stop().await;
    let mut all: Vec<u64> = by_node
        .iter()
        .chain(r[0].as_array().unwrap())
        .map(|e| e["data"]["n"].as_u64().unwrap())
        .collect();
    all.extend(handled.lock().unwrap().iter().map(|(n, _)| *n));
    let distinct: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), 150, "each event handled once");
    assert_eq!(distinct, (0..150).collect());
}

/// A subscriber's read, without a wait and with one, on a RESP2 and a RESP3
/// (`?protocol=resp3`) connection: each returns the events published, with
/// their type and data, delivered once. On RESP3 `XREADGROUP` replies with a
/// map (stream -> entries) where RESP2 has an array of pairs; the old code
/// took anything but an array for "no events", so every read on RESP3
/// returned none and left the events in the consumer's pending list, to come
/// back only by a claim after the lease, counted as a second delivery.
#[tokio::test]
async fn a_topic_read_on_a_resp3_connection_returns_the_events() {
    use redjob::topic::Topics;
    let server = RedisServer::start();
    for (i, url) in [server.url(), format!("{}/?protocol=resp3", server.url())]
        .into_iter()
        .enumerate()
    {
        let client = Client::connect(&url).await.unwrap();
        let sub = format!("sub{i}");
        client.subscribe("orders", &sub, Start::End).await.unwrap();
        for n in 1..=2 {
            let note = format!("{n}");
            client.publish(&OrderPlaced { n, note }).await.unwrap();
        }
        let backend = client.backend();
        let now = backend.read("orders", &sub, "c1", 10, Duration::ZERO).await;
        let now = now.unwrap().unwrap_or_default();
        client
            .publish(&OrderPlaced {
                n: 3,
                note: "3".into(),
            })
            .await
            .unwrap();
        let waited = backend.read("orders", &sub, "c1", 10, Duration::from_secs(1));
        let waited = waited.await.unwrap().unwrap_or_default();
        let got: Vec<(Option<String>, Option<String>, u32)> = now
            .iter()
            .chain(&waited)
            .map(|e| (e.event_type.clone(), e.data.clone(), e.deliveries))
            .collect();
        let want: Vec<_> = (1..=3)
            .map(|n| {
                let data = format!(r#"{{"n":{n},"note":"{n}"}}"#);
                (Some("order_placed".to_string()), Some(data), 1)
            })
            .collect();
        assert_eq!(got, want, "on {url}");
    }
}
