//! A master whose `timeout` closes idle clients: a call through Sentinel
//! after the master closed the connection's sockets goes through, as a call
//! on one server's connection does (docs/scale-out.md, "TLS, passwords and
//! timeouts").

mod common;

use std::time::Duration;

use common::sentinel::SentinelSet;
use common::wait_for;
use redjob::connection::{Connection, RedisConfig};

async fn client_id(con: &mut Connection) -> i64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query_async(con)
        .await
        .unwrap()
}

/// Whether the master still has a client of id `id`.
async fn open(raw: &redis::aio::MultiplexedConnection, id: i64) -> bool {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut raw.clone())
        .await
        .unwrap();
    list.lines().any(|l| l.starts_with(&format!("id={id} ")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_after_the_master_closed_the_idle_sockets_goes_through() {
    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .unwrap();
    let mut con = RedisConfig::from_url(set.url()).connect().await.unwrap();
    // the multiplexed socket, then the lane an idle call takes
    let multiplexer = client_id(&mut con).await;
    let mut lane = multiplexer;
    for _ in 0..200 {
        lane = client_id(&mut con).await;
        if lane != multiplexer {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_ne!(lane, multiplexer, "no idle call took a lane");
    let raw = set.master.raw().await;
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("timeout")
        .arg(1)
        .query_async(&mut raw.clone())
        .await
        .unwrap();
    for id in [multiplexer, lane] {
        let closed = wait_for(Duration::from_secs(10), || {
            let raw = raw.clone();
            async move { !open(&raw, id).await }
        })
        .await;
        assert!(closed, "the master kept the idle socket {id}");
    }
    // the first call finds the lane closed by the server: it checks the
    // multiplexed socket, finds it closed too, and goes out on a new one;
    // the calls made at once with it go through too
    let echoed = futures::future::join_all((0..8).map(|_| {
        let mut con = con.clone();
        async move {
            redis::cmd("ECHO")
                .arg("after-idle")
                .query_async::<String>(&mut con)
                .await
        }
    }))
    .await;
    assert!(
        echoed.iter().all(|r| r.as_deref() == Ok("after-idle")),
        "{echoed:?}"
    );
}
