//! A purge's mark in the queue hash on Redis (`redjob:purging`, see purge.lua
//! and `purge_mark` in lib.lua): it counts the keyed jobs sent up to its
//! cutoff that go back to wait while it runs, lapses should the purge die,
//! and is gone once the purge ends.

mod common;

use std::time::Duration;

use common::{RedisServer, backend_with_queue};
use redjob::backend::Backend;
use redjob::ops::Admin;
use redjob::queue::{Keyed, QueueOptions, SendMessage};

async fn mark(con: &mut redis::aio::MultiplexedConnection) -> Option<String> {
    redis::cmd("HGET")
        .arg("rsmq:q:Q")
        .arg("redjob:purging")
        .query_async(con)
        .await
        .unwrap()
}

async fn set_mark(con: &mut redis::aio::MultiplexedConnection, v: &str) {
    let _: () = redis::cmd("HSET")
        .arg("rsmq:q:Q")
        .arg("redjob:purging")
        .arg(v)
        .query_async(con)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_purges_mark_counts_keyed_jobs_gone_back_to_wait_until_it_lapses() {
    let server = RedisServer::start();
    let (backend, _) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    let opts = QueueOptions::default();
    // a key's holder, due in an hour, goes back to wait for a job due now
    let demote = async |key: &str| {
        let later = SendMessage::new("{}")
            .keyed(Keyed::new(key))
            .delay(Duration::from_secs(3600));
        backend.send("q", &[later], &opts).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let now = SendMessage::new("{}").keyed(Keyed::new(key));
        backend.send("q", &[now], &opts).await.unwrap();
    };
    // a live mark whose cutoff takes the holder: counted once
    set_mark(&mut con, "zzzzzzzzzz 99999999999999 7").await;
    demote("a").await;
    assert_eq!(
        mark(&mut con).await.as_deref(),
        Some("zzzzzzzzzz 99999999999999 8")
    );
    // a holder sent after the cutoff is not counted
    set_mark(&mut con, "0000000000 99999999999999 7").await;
    demote("b").await;
    assert_eq!(
        mark(&mut con).await.as_deref(),
        Some("0000000000 99999999999999 7")
    );
    // nor under a mark that lapsed (a purge that died)
    set_mark(&mut con, "zzzzzzzzzz 1 7").await;
    demote("c").await;
    assert_eq!(mark(&mut con).await.as_deref(), Some("zzzzzzzzzz 1 7"));
    // a purge takes a lapsed mark over, and leaves none
    assert_eq!(backend.purge_queue("q").await.unwrap(), 6);
    assert_eq!(mark(&mut con).await, None);
}
