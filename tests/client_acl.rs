//! The least a Redis ACL user needs for redjob: the one the guide documents.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{RedisServer, wait_until};
use redjob::client::ClientConfig;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "acl_task", queue = "acl", max_attempts = 2, backoff = "10ms")]
struct Task {
    fail: bool,
}

impl Job for Task {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Arc<AtomicU32>>()?.fetch_add(1, Ordering::SeqCst);
        if self.fail {
            return Err("failing on purpose".into());
        }
        Ok(())
    }
}

/// The ACL rule in the guide (docs/guide.md, "TLS and ACL"), for namespace `app`.
const RULE: &[&str] = &[
    "~app:*",
    "&app:*",
    "+@read",
    "+@write",
    "+@scripting",
    "+@pubsub",
    "+@connection",
    "+time",
];

#[tokio::test]
async fn a_user_with_the_documented_acl_enqueues_runs_retries_and_dead_letters() {
    let mut args = vec!["--user", "jobs", "on", ">jobspw"];
    args.extend_from_slice(RULE);
    let server = RedisServer::start_with(&args);
    let mut config =
        ClientConfig::from_url(format!("redis://jobs:jobspw@127.0.0.1:{}", server.port));
    config.namespace = "app".into();
    let client = Client::from_config(config).await.unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let worker = Worker::builder(client.backend())
        .queue("acl")
        .data(runs.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    // fetching and subscribing are allowed
    let w = common::start_serving(worker).await;
    client.enqueue(&Task { fail: false }).await.unwrap();
    client
        .enqueue_in(&Task { fail: true }, Duration::from_millis(50))
        .await
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || runs.load(Ordering::SeqCst) == 3).await,
        "runs: {}",
        runs.load(Ordering::SeqCst)
    );
    let c = client.clone();
    assert!(
        common::wait_for(Duration::from_secs(10), || async {
            c.stats("acl").await.unwrap().dead == 1
        })
        .await
    );
    w.stop().await;
    let stats = client.stats("acl").await.unwrap();
    assert_eq!((stats.processed, stats.retried, stats.dead), (1, 1, 1));
    assert_eq!(client.dead_letters("acl", 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_user_without_scripting_gets_a_clear_error_not_a_hang() {
    let server = RedisServer::start_with(&[
        "--user",
        "ro",
        "on",
        ">ropw",
        "~*",
        "&*",
        "+@read",
        "+@connection",
    ]);
    let client = Client::connect(&format!("redis://ro:ropw@127.0.0.1:{}", server.port))
        .await
        .unwrap();
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        client.enqueue(&Task { fail: false }),
    )
    .await
    .expect("bounded")
    .unwrap_err();
    assert!(err.to_string().contains("no permissions"), "{err}");
}
