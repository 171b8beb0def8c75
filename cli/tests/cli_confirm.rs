//! Every bulk action says how many it takes before it asks, and `--dry-run`
//! says what it would do and does nothing: queue purge and delete, dead
//! requeue, delete and purge, and a topic subscriber's dead letters.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, SendMessage};
use redjob::topic::Start;
use run::cli;

/// "mail" with `dead` dead letters of type A and 2 ready jobs.
async fn setup(dead: usize) -> (RedisServer, Client) {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let q = client.backend();
    let opts = QueueOptions::default();
    let body = r#"{"type":"A","args":{}}"#;
    let bodies: Vec<SendMessage> = (0..dead).map(|_| SendMessage::new(body)).collect();
    q.send("mail", &bodies, &opts).await.unwrap();
    let d = q
        .fetch("mail", dead, Duration::from_secs(60))
        .await
        .unwrap();
    let settle = Settle {
        dead: d
            .jobs
            .iter()
            .map(|j| DeadLetterEntry {
                id: j.id,
                token: j.token,
                error: "down".into(),
            })
            .collect(),
        ..Settle::default()
    };
    q.settle("mail", &settle).await.unwrap();
    let two = [SendMessage::new(body), SendMessage::new(body)];
    q.send("mail", &two, &opts).await.unwrap();
    (server, client)
}

#[tokio::test]
async fn queue_bulk_actions_state_their_count_and_dry_runs_change_nothing() {
    let (server, client) = setup(3).await;
    let url = server.url();
    cli(&url, &["queue", "purge", "mail"])
        .await
        .failed("delete 2 jobs of \"mail\": refused without --yes");
    let r = cli(&url, &["queue", "purge", "mail", "--dry-run"]).await;
    assert_eq!(r.ok().trim(), "would delete 2 jobs of \"mail\"");
    let v = cli(&url, &["queue", "purge", "mail", "--dry-run", "--json"])
        .await
        .json();
    assert_eq!(
        (v["dry_run"].as_bool(), v["count"].as_u64()),
        (Some(true), Some(2))
    );
    assert!(v["upto_ms"].as_u64().unwrap() > 0, "{v}");
    cli(&url, &["queue", "delete", "mail"])
        .await
        .failed("delete queue \"mail\" with its 2 jobs and 3 dead letters: refused without --yes");
    let r = cli(&url, &["queue", "delete", "mail", "--dry-run"]).await;
    assert!(
        r.ok()
            .starts_with("would delete queue \"mail\" with its 2 jobs")
    );
    let c = client.counts("mail").await.unwrap();
    assert_eq!((c.ready, c.dead), (2, 3), "a dry run deletes nothing");
}

#[tokio::test]
async fn dead_letter_bulk_actions_state_their_count_and_dry_runs_change_nothing() {
    let (server, client) = setup(3).await;
    let url = server.url();
    for (verb, args) in [
        ("requeue", vec!["dead", "requeue", "mail", "--all"]),
        ("delete", vec!["dead", "delete", "mail", "--all"]),
        ("delete", vec!["dead", "purge", "mail"]),
    ] {
        let what = format!("{verb} 3 dead letters of \"mail\"");
        cli(&url, &args)
            .await
            .failed(&format!("{what}: refused without --yes"));
        let mut dry = args.clone();
        dry.push("--dry-run");
        assert_eq!(cli(&url, &dry).await.ok().trim(), format!("would {what}"));
    }
    // narrowed by a filter, the count is of the matches
    let r = cli(
        &url,
        &[
            "dead",
            "requeue",
            "mail",
            "--all",
            "--type",
            "B",
            "--dry-run",
        ],
    )
    .await;
    assert_eq!(
        r.ok().trim(),
        "would requeue 0 dead letters of \"mail\" of type \"B\""
    );
    // by id: how many of them are dead letters
    let id = client.dead_page("mail", Default::default(), None, 1).await;
    let id = id.unwrap().jobs[0].id.to_string();
    let v = cli(
        &url,
        &["dead", "delete", "mail", &id, "--dry-run", "--json"],
    )
    .await
    .json();
    assert_eq!(v["count"], 1);
    assert_eq!(client.counts("mail").await.unwrap().dead, 3);
    // confirmed, it takes what it counted
    let v = cli(&url, &["dead", "purge", "mail", "--yes", "--json"])
        .await
        .json();
    assert_eq!(v["deleted"], 3);
    assert_eq!(client.counts("mail").await.unwrap().dead, 0);
}

#[tokio::test]
async fn a_subscribers_dead_letters_state_their_count_and_dry_runs_change_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    let b = client.backend();
    client
        .subscribe("orders", "billing", Start::End)
        .await
        .unwrap();
    common::dead_events(&b, "orders", "billing", 2).await;
    for verb in ["requeue", "delete-dead"] {
        let args = ["topic", verb, "orders", "billing", "--all"];
        let what = format!(
            "{} 2 dead letters of subscriber \"billing\" of \"orders\"",
            verb.trim_end_matches("-dead")
        );
        cli(&url, &args)
            .await
            .failed(&format!("{what}: refused without --yes"));
        let mut dry = args.to_vec();
        dry.push("--dry-run");
        assert_eq!(cli(&url, &dry).await.ok().trim(), format!("would {what}"));
    }
    assert_eq!(
        client
            .dead_events("orders", "billing", 10)
            .await
            .unwrap()
            .len(),
        2
    );
}
