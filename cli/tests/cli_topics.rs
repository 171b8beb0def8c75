//! `redjob topic`: show a topic and its subscribers, rewind one (replay), list
//! its dead letters, as tables and as JSON, and the error paths.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::process::Stdio;
use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::topic::{EventOptions, EventSettle, Received, Start, Topics};
use serde_json::{Value, json};

async fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"))
        .arg("--url")
        .arg(url)
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("the CLI exits within 30 s")
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn json_of(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = cli(url, &all).await;
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[tokio::test]
async fn topic_show_rewind_and_dead_letters() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let b = client.backend();
    client
        .subscribe("orders", "billing", Start::Beginning)
        .await
        .unwrap();
    let opts = EventOptions::DEFAULT;
    let ids = b
        .publish(
            "orders",
            &[
                ("placed", "{\"n\":1}"),
                ("placed", "{\"n\":2}"),
                ("placed", "{\"n\":3}"),
            ],
            &opts,
        )
        .await
        .unwrap();
    // billing takes all three, acknowledges one and gives one up
    let got = b
        .read("orders", "billing", "c1", 10, Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 3);
    let first: Received = got[0].clone();
    let batch = EventSettle {
        acks: vec![ids[1]],
        dead: vec![(first, "card declined".into())],
        ..Default::default()
    };
    b.settle("orders", "billing", "c1", &batch, None)
        .await
        .unwrap();

    let v = json_of(&url, &["topic", "show", "orders"]).await;
    assert_eq!(v["length"], json!(3));
    assert_eq!(v["first"], json!(ids[0].to_string()));
    assert_eq!(v["last"], json!(ids[2].to_string()));
    assert_eq!(
        v["subscribers"],
        json!([{"name": "billing", "offset": ids[2].to_string(), "pending": 1, "lag": 0, "consumers": 1, "dead": 1}])
    );
    let (code, out, _) = cli(&url, &["topic", "show", "orders"]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("SUBSCRIBER") && out.contains("billing") && out.contains("3 events"),
        "{out}"
    );

    let v = json_of(&url, &["topic", "dead", "orders", "billing"]).await;
    assert_eq!(v[0]["id"], json!(ids[0].to_string()));
    assert_eq!(v[0]["error"], json!("card declined"));
    assert_eq!(v[0]["data"], json!("{\"n\":1}"));

    let v = json_of(
        &url,
        &["topic", "rewind", "orders", "billing", "--beginning"],
    )
    .await;
    assert_eq!(v["lag"], json!(3));
    let v = json_of(
        &url,
        &[
            "topic",
            "rewind",
            "orders",
            "billing",
            "--id",
            &ids[1].to_string(),
        ],
    )
    .await;
    assert_eq!(v["lag"], json!(2));
    let v = json_of(&url, &["topic", "rewind", "orders", "billing", "--end"]).await;
    assert_eq!(v["lag"], json!(0));
    let v = json_of(
        &url,
        &["topic", "rewind", "orders", "billing", "--ago", "1h"],
    )
    .await;
    assert_eq!(v["lag"], json!(3));
    let at = ids[2].ms().to_string();
    let v = json_of(
        &url,
        &["topic", "rewind", "orders", "billing", "--at-ms", &at],
    )
    .await;
    assert!(v["lag"].as_u64().unwrap() >= 1);

    let (code, _, err) = cli(&url, &["topic", "show", "nothing"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("topic \"nothing\" not found"), "{err}");
    let (code, _, err) = cli(&url, &["topic", "rewind", "orders", "nobody", "--end"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("no subscriber \"nobody\""), "{err}");
    let (code, _, err) = cli(
        &url,
        &["topic", "rewind", "orders", "billing", "--id", "12"],
    )
    .await;
    assert_eq!(code, 1);
    assert!(err.contains("invalid event id"), "{err}");
    let (code, _, err) = cli(&url, &["topic", "rewind", "orders", "billing"]).await;
    assert_eq!(code, 2, "clap refuses a rewind without a target: {err}");
    let (code, _, err) = cli(&url, &["topic", "show", "bad name"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("invalid topic name"), "{err}");
}
