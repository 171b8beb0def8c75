//! A queue's settings as Redis holds them: one hash field per setting, which a
//! foreign or older writer may have left odd; such a value is ignored the same
//! way by the scripts and by Rust (never a half-applied settle, never an error
//! that keeps the CLI from repairing it), and RSMQ's own attributes are
//! untouched by settings.

mod common;

use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::{Backend, DeadLetterEntry, Settle};
use redjob::inspect::Inspect;
use redjob::ops::{Admin, QueueSettings, Retention};
use redjob::queue::{QueueOptions, Queues, SendMessage};

/// Sends `n` jobs to "q", leases them and dead-letters them in one settle
/// asking for `retention`.
async fn kill(client: &Client, n: usize, retention: Retention) {
    let q = client.backend();
    let msgs: Vec<SendMessage> = (0..n)
        .map(|i| SendMessage::new(format!(r#"{{"type":"A","args":{{"i":{i}}}}}"#)))
        .collect();
    Backend::send(&q, "q", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let got = q.fetch("q", n, Duration::from_secs(60)).await.unwrap();
    assert_eq!(got.jobs.len(), n);
    let settle = Settle {
        dead: got
            .jobs
            .iter()
            .map(|d| DeadLetterEntry {
                id: d.id,
                token: d.token,
                error: "boom".into(),
            })
            .collect(),
        retention,
        ..Settle::default()
    };
    assert_eq!(q.settle("q", &settle).await.unwrap().dead, n as u64);
}

#[tokio::test]
async fn odd_stored_settings_are_ignored_alike_by_scripts_and_rust_and_can_be_repaired() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let raw = redis::Client::open(server.url()).unwrap();
    let mut con = raw.get_multiplexed_async_connection().await.unwrap();
    let keep3 = Retention {
        max_count: Some(3),
        max_age: None,
    };
    for odd in ["2.5 0", "-1 0", "5", "x y", ""] {
        let _: () = redis::cmd("HSET")
            .arg("rsmq:q:Q")
            .arg("redjob:dead_letters")
            .arg(odd)
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(client.settings("q").await.unwrap().is_empty(), "{odd:?}");
        // the settle's own retention applies, the whole settle goes through
        kill(&client, 4, keep3).await;
        assert_eq!(client.counts("q").await.unwrap().dead, 3, "{odd:?}");
    }
    // repaired through the API (as the CLI and the dashboard do)
    let two = Retention {
        max_count: Some(2),
        max_age: None,
    };
    client
        .set_settings("q", &QueueSettings::dead_letters(two))
        .await
        .unwrap();
    let stored: String = redis::cmd("HGET")
        .arg("rsmq:q:Q")
        .arg("redjob:dead_letters")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(stored, "2 0");
    kill(&client, 1, keep3).await;
    assert_eq!(client.counts("q").await.unwrap().dead, 2);
    // RSMQ's attributes are what they were
    let a = client.queues().attributes("q").await.unwrap();
    assert_eq!((a.vt, a.delay, a.maxsize), (30, 0, 65536));
}
