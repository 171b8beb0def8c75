//! The workers' sweep of batch marks on Redis (`ns:{@workers}:bmarks`): a
//! mark whose sweep fails every time (a batch's key of the wrong type)
//! keeps no other mark from its sweep, and is put off rather than tried
//! again by every sweep.

mod common;

use std::time::Duration;

use common::RedisServer;
use redjob::Client;
use redjob::backend::{Backend, BatchSpec};
use redjob::ops::BatchId;

/// The default namespace's sweep marks on a single Redis.
const MARKS: &str = "rsmq:{@workers}:bmarks";

/// An open batch whose enqueuer never sealed it, its sweep mark due now.
async fn unsealed(c: &Client, raw: &mut redis::aio::MultiplexedConnection, n: u8) -> BatchId {
    let id: BatchId = format!("{n:0>32}").parse().unwrap();
    c.backend()
        .batch_open(&BatchSpec {
            id,
            callbacks: Vec::new(),
            description: None,
            members: 1,
        })
        .await
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg(MARKS)
        .arg("XX")
        .arg(1000 + u64::from(n))
        .arg(format!("b{id}"))
        .query_async(raw)
        .await
        .unwrap();
    id
}

/// A batch mark whose sweep fails (its batch's hash is a string: batch.lua
/// meets WRONGTYPE), due before every other mark, does not keep a sweep
/// from the marks after it: an unsealed batch due after it is cancelled.
/// The sweep returned at the first failing mark, so the broken mark, due
/// first in every sweep, kept every later mark from being swept for ever.
/// The broken mark is put off a minute rather than tried by every sweep.
#[tokio::test]
async fn a_mark_whose_sweep_fails_keeps_no_other_mark_from_its_sweep() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let s = RedisServer::start();
        let mut raw = s.raw().await;
        let c = Client::connect(&s.url()).await.unwrap();
        let broken = "b00000000000000000000000000000009";
        let _: () = redis::cmd("SET")
            .arg("rsmq:@batch:00000000000000000000000000000009")
            .arg("not a hash")
            .query_async(&mut raw)
            .await
            .unwrap();
        let _: i64 = redis::cmd("ZADD")
            .arg(MARKS)
            .arg(1)
            .arg(broken)
            .query_async(&mut raw)
            .await
            .unwrap();
        let left = unsealed(&c, &mut raw, 1).await;
        let swept = c.backend().batch_sweep().await;
        assert!(swept.is_err(), "the broken mark's failure is reported");
        let s1 = c.batch_status(&left).await.unwrap().unwrap();
        assert!(
            s1.cancelled_at_ms.is_some(),
            "the mark after the broken one is swept: {s1:?}"
        );
        // put off a minute: the next sweeps do not try it again
        let now = c.backend().now_ms().await.unwrap();
        let at: f64 = redis::cmd("ZSCORE")
            .arg(MARKS)
            .arg(broken)
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(
            at as u64 > now + 50_000,
            "put off a minute: {at} (now {now})"
        );
        c.backend().batch_sweep().await.unwrap();
    })
    .await
    .unwrap();
}
