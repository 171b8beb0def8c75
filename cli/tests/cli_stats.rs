//! `redjob stats --hours`: processed and failed runs hour by hour over the
//! matching queues, kept for 7 days.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::queue::{QueueOptions, SendMessage};
use run::cli;

/// Sends `ok + dead` jobs to `queue`, then acks `ok` and dead-letters the rest.
async fn settle(client: &Client, queue: &str, ok: usize, dead: usize) {
    let q = client.backend();
    let msgs: Vec<SendMessage> = (0..ok + dead)
        .map(|i| SendMessage::new(format!("{i}")))
        .collect();
    q.send(queue, &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let got = q
        .fetch(queue, ok + dead, Duration::from_secs(60))
        .await
        .unwrap();
    let (a, d) = got.jobs.split_at(ok);
    let batch = Settle {
        acks: a.iter().map(|j| (j.id, j.token)).collect(),
        dead: d
            .iter()
            .map(|j| DeadLetterEntry {
                id: j.id,
                token: j.token,
                error: "no".into(),
            })
            .collect(),
        ..Settle::default()
    };
    q.settle(queue, &batch).await.unwrap();
}

#[tokio::test]
async fn stats_hours_adds_up_the_matching_queues_hour_by_hour() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    settle(&client, "mail", 5, 2).await;
    settle(&client, "mail-bulk", 3, 0).await;
    settle(&client, "sms", 100, 0).await;

    let v = cli(
        &url,
        &["stats", "--hours", "3", "--filter", "mail", "--json"],
    )
    .await
    .json();
    let hours = v["hours"].as_array().unwrap();
    assert_eq!(hours.len(), 3);
    assert_eq!(v["queues"].as_array().unwrap().len(), 2, "{v}");
    let starts: Vec<u64> = hours
        .iter()
        .map(|h| h["start_ms"].as_u64().unwrap())
        .collect();
    assert!(
        starts.windows(2).all(|w| w[1] == w[0] + 3_600_000),
        "{starts:?}"
    );
    // the runs settle in this hour (or, past its turn, the one before)
    let sum = |k: &str| hours.iter().map(|h| h[k].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("processed"), sum("failed")), (8, 2));

    // as a table: 24 hours by default, then the totals
    let out = cli(&url, &["stats", "--hours"]).await;
    let text = out.ok();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("HOUR (UTC)"), "{text}");
    assert_eq!(
        lines.iter().filter(|l| l.contains(":00 ")).count(),
        24,
        "{text}"
    );
    assert!(
        text.contains("3 of 3 queues; 108 processed, 2 failed in 24 hours"),
        "{text}"
    );

    // out of range, or beside --watch: usage errors
    for bad in [
        vec!["stats", "--hours", "0"],
        vec!["stats", "--hours", "170"],
        vec!["stats", "--hours", "3", "--watch"],
    ] {
        assert_eq!(cli(&url, &bad).await.code, 2, "{bad:?}");
    }
}

/// `stats --json`'s `"queues"` is the list of queues with or without
/// `--hours` (with it, it was their count: a script reading the list failed),
/// and `--hours` adds `"hours"` to what `stats --json` prints.
#[tokio::test]
async fn stats_json_lists_the_queues_with_and_without_hours() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    settle(&client, "mail", 2, 1).await;
    settle(&client, "sms", 1, 0).await;
    let plain = cli(&url, &["stats", "--json"]).await.json();
    let hours = cli(&url, &["stats", "--json", "--hours", "2"]).await.json();
    for v in [&plain, &hours] {
        let queues = v["queues"].as_array().unwrap_or_else(|| panic!("{v}"));
        let names: Vec<&str> = queues
            .iter()
            .map(|q| q["queue"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["mail", "sms"], "{v}");
        assert_eq!(queues[0]["processed"], 2, "{v}");
        assert_eq!(v["matched"], 2, "{v}");
        assert_eq!(v["skipped"], 0, "{v}");
    }
    assert_eq!(hours["hours"].as_array().unwrap().len(), 2, "{hours}");
    assert!(plain.get("hours").is_none(), "{plain}");
}
