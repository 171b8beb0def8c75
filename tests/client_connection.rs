//! A managed connection's lanes: the sockets besides its multiplexer's that a
//! call takes when it finds one free, read and written by the calling task
//! itself; the second opens once two calls were under way at once.

mod common;

use std::time::Duration;

use common::{RedisServer, wait_for};
use redis::Value;
use redis::aio::ConnectionLike;
use redjob::connection::{Connection, RedisConfig};

async fn client_id(con: &mut Connection) -> i64 {
    redis::cmd("CLIENT")
        .arg("ID")
        .query_async(con)
        .await
        .unwrap()
}

async fn set<C: ConnectionLike + Send>(con: &mut C, key: &str, value: &str) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(con)
        .await
        .unwrap();
}

/// Asserts that `con` answers an `ECHO` of `i` with `i`.
async fn echoes(con: &mut Connection, i: u32) {
    let echo: String = redis::cmd("ECHO").arg(i).query_async(con).await.unwrap();
    assert_eq!(echo, i.to_string());
}

/// The `CLIENT LIST` line of the socket `id`, as `con` sees the server.
async fn client_line(con: &mut redis::aio::MultiplexedConnection, id: i64) -> String {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(con)
        .await
        .unwrap();
    let line = list.lines().find(|l| l.starts_with(&format!("id={id} ")));
    line.unwrap_or_else(|| panic!("no socket {id}: {list}"))
        .to_string()
}

/// A connection with a short response timeout, and the ids of its two sockets:
/// the multiplexer's (which the first call takes, the lane being opened in the
/// background then) and the lane's (which an idle call takes once it is open).
async fn connected(url: &str) -> (Connection, i64, i64) {
    let mut con = RedisConfig {
        response_timeout: Duration::from_secs(2),
        ..RedisConfig::from_url(url)
    }
    .connect()
    .await
    .unwrap();
    let multiplexer = client_id(&mut con).await;
    let lane = new_lane(&mut con, &[multiplexer]).await;
    (con, multiplexer, lane)
}

/// The id of the socket an idle call takes once it is none of `old`: the
/// lane, opened in the background (within 2 s).
async fn new_lane(con: &mut Connection, old: &[i64]) -> i64 {
    for _ in 0..200 {
        let id = client_id(con).await;
        if !old.contains(&id) {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no call took a new lane (old sockets {old:?})");
}

#[tokio::test]
async fn an_idle_call_takes_the_lane_and_concurrent_ones_the_multiplexer() {
    let server = RedisServer::start();
    let (con, multiplexer, lane) = connected(&server.url()).await;
    // one at a time: the lane, every time
    let mut c = con.clone();
    for _ in 0..20 {
        assert_eq!(client_id(&mut c).await, lane);
    }
    // many at once: two may have a lane each, the others pipeline on the
    // multiplexer
    let calls = (0..50).map(|_| {
        let mut c = con.clone();
        async move { client_id(&mut c).await }
    });
    let ids = futures::future::join_all(calls).await;
    let on_multiplexer = ids.iter().filter(|&&id| id == multiplexer).count();
    let mut lanes: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|&id| id != multiplexer)
        .collect();
    lanes.sort_unstable();
    lanes.dedup();
    assert!(lanes.len() <= 2, "{ids:?}");
    assert!(on_multiplexer >= 48, "{ids:?}");
    // a transaction always goes through the multiplexer
    let (id,): (i64,) = redis::pipe()
        .atomic()
        .cmd("CLIENT")
        .arg("ID")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(id, multiplexer);
    // a plain pipeline takes the lane, with its replies in order
    let (a, id, b): (String, i64, String) = redis::pipe()
        .cmd("ECHO")
        .arg("a")
        .cmd("CLIENT")
        .arg("ID")
        .cmd("ECHO")
        .arg("b")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((a.as_str(), id, b.as_str()), ("a", lane, "b"));
}

/// The sockets `raw` sees connected to the server, its own among them.
async fn sockets(raw: &mut redis::aio::MultiplexedConnection) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(raw)
        .await
        .unwrap();
    list.lines().count()
}

#[tokio::test]
async fn a_call_beside_one_under_way_takes_the_second_lane() {
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let before = sockets(&mut raw).await;
    let (con, multiplexer, lane) = connected(&server.url()).await;
    // calls one at a time open no second lane: the multiplexer's socket and
    // the first lane's
    let mut c = con.clone();
    for _ in 0..20 {
        assert_eq!(client_id(&mut c).await, lane);
    }
    assert_eq!(sockets(&mut raw).await, before + 2);
    // a call that holds the first lane for a second
    let mut held = con.clone();
    let blocked = tokio::spawn(async move {
        let (id,): (i64,) = redis::pipe()
            .cmd("BLPOP")
            .arg("nothing")
            .arg(1)
            .ignore()
            .cmd("CLIENT")
            .arg("ID")
            .query_async(&mut held)
            .await
            .unwrap();
        id
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // beside it, a call goes to the multiplexer while the second lane opens
    // in the background, then takes it
    let second = new_lane(&mut c, &[multiplexer, lane]).await;
    assert_eq!(client_id(&mut c).await, second);
    assert_eq!(blocked.await.unwrap(), lane);
    // the first lane free again, a call at a time takes it, not the second
    // (or the multiplexer, unused for half a second)
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(client_id(&mut c).await);
    }
    assert!(
        ids.iter().all(|id| [lane, multiplexer].contains(id)),
        "{ids:?}"
    );
    assert!(ids[1..].iter().all(|id| *id == lane), "{ids:?}");
    assert_eq!(sockets(&mut raw).await, before + 3);
}

#[tokio::test]
async fn replies_and_errors_through_the_lane_are_the_multiplexers() {
    let server = RedisServer::start();
    let (mut con, _, lane) = connected(&server.url()).await;
    let mut plain = server.raw().await;
    set(&mut plain, "s", "text").await;
    let mut pipe = redis::pipe();
    pipe.cmd("INCR")
        .arg("n")
        .cmd("INCR")
        .arg("s")
        .cmd("GET")
        .arg("s")
        .cmd("HGETALL")
        .arg("none");
    let mut reset = redis::pipe();
    reset.cmd("DEL").arg("n");
    let ((),) = reset.query_async(&mut plain).await.unwrap();
    let through_lane = con.req_packed_commands(&pipe, 0, 4).await.unwrap();
    let ((),) = reset.query_async(&mut plain).await.unwrap();
    let through_multiplexer = plain.req_packed_commands(&pipe, 0, 4).await.unwrap();
    assert_eq!(through_lane, through_multiplexer);
    assert!(
        matches!(through_lane[1], Value::ServerError(_)),
        "{through_lane:?}"
    );
    // the same pipeline with the socket's id at its end: it ran on the lane
    pipe.cmd("CLIENT").arg("ID");
    let ((),) = reset.query_async(&mut plain).await.unwrap();
    let mut replies = con.req_packed_commands(&pipe, 0, 5).await.unwrap();
    assert_eq!(replies.pop(), Some(Value::Int(lane)));
    assert_eq!(replies, through_multiplexer);
    // a single command's server error is the same error
    let lane_err = redis::cmd("INCR")
        .arg("s")
        .query_async::<i64>(&mut con)
        .await
        .unwrap_err();
    let plain_err = redis::cmd("INCR")
        .arg("s")
        .query_async::<i64>(&mut plain)
        .await
        .unwrap_err();
    assert_eq!(lane_err.to_string(), plain_err.to_string());
    // and the lane, which answered it, is still the one an idle call takes
    assert_eq!(client_id(&mut con).await, lane);
}

#[tokio::test]
async fn a_call_given_up_half_way_leaves_no_reply_for_the_next() {
    let server = RedisServer::start();
    let (mut con, multiplexer, lane) = connected(&server.url()).await;
    // the reply to this comes after 300 ms, when its caller is gone
    let blpop = redis::cmd("BLPOP").arg("nothing").arg(0.3).to_owned();
    let given_up = tokio::time::timeout(
        Duration::from_millis(50),
        blpop.query_async::<Value>(&mut con),
    )
    .await;
    assert!(given_up.is_err());
    // a lane put back with the BLPOP's reply owed would answer this with it
    // (Redis runs the ECHO once the BLPOP has answered)
    for i in 0..20 {
        echoes(&mut con, i).await;
    }
    // and a new lane took the old one's place
    new_lane(&mut con, &[lane, multiplexer]).await;
}

#[tokio::test]
async fn a_lane_the_server_closed_while_idle_costs_no_call() {
    let server = RedisServer::start();
    let (mut con, multiplexer, lane) = connected(&server.url()).await;
    let mut admin = server.raw().await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(lane)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    // wait until the server has closed the socket
    let gone = wait_for(Duration::from_secs(2), || {
        let mut admin = admin.clone();
        async move {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut admin)
                .await
                .unwrap();
            !list.contains(&format!("id={lane} "))
        }
    })
    .await;
    assert!(gone);
    tokio::time::sleep(Duration::from_millis(20)).await;
    // the call finds the lane closed and goes through the multiplexer
    assert_eq!(client_id(&mut con).await, multiplexer);
    // and the lane is opened again
    new_lane(&mut con, &[lane, multiplexer]).await;
}

#[tokio::test]
async fn the_lane_authenticates_and_selects_the_urls_database() {
    let server = RedisServer::start();
    let mut admin = server.raw().await;
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "app", "on", ">secret", "~*", "+@all"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "off"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://app:secret@127.0.0.1:{}/3", server.port);
    let (mut con, _, lane) = connected(&url).await;
    set(&mut con, "where", "db3").await;
    assert_eq!(client_id(&mut con).await, lane);
    let mut check = redis::Client::open(format!("redis://app:secret@127.0.0.1:{}/3", server.port))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let got: Option<String> = redis::cmd("GET")
        .arg("where")
        .query_async(&mut check)
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some("db3"));
    let line = client_line(&mut check, lane).await;
    assert!(
        line.contains(" db=3 ") && line.contains(" user=app "),
        "{line}"
    );
}

#[tokio::test]
async fn a_watch_and_the_transaction_after_it_share_their_socket() {
    let server = RedisServer::start();
    let (mut con, multiplexer, lane) = connected(&server.url()).await;
    let mut other = server.raw().await;
    // WATCH leaves state on its socket: it goes where the transaction will
    let () = redis::cmd("WATCH")
        .arg("k")
        .query_async(&mut con)
        .await
        .unwrap();
    set(&mut other, "k", "theirs").await;
    // a call in between takes the lane
    assert_eq!(client_id(&mut con).await, lane);
    let done: Option<((),)> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("k")
        .arg("ours")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        done, None,
        "the transaction ran though its WATCH saw a change"
    );
    let got: String = redis::cmd("GET")
        .arg("k")
        .query_async(&mut other)
        .await
        .unwrap();
    assert_eq!(got, "theirs");
    // a client setting goes to the multiplexer's socket too
    let () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("named")
        .query_async(&mut con)
        .await
        .unwrap();
    let line = client_line(&mut other, multiplexer).await;
    assert!(line.contains(" name=named "), "{line}");
}

#[tokio::test]
async fn a_server_at_its_client_limit_is_not_asked_for_a_lane_at_each_call() {
    let server = RedisServer::start();
    let mut admin = server.raw().await;
    let mut con = RedisConfig::from_url(server.url()).connect().await.unwrap();
    // the admin's and the multiplexer's sockets: a lane would be the third
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(2)
        .query_async(&mut admin)
        .await
        .unwrap();
    let rejected = |info: String| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("rejected_connections:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let info = || redis::cmd("INFO").arg("stats").to_owned();
    let before = rejected(info().query_async(&mut admin).await.unwrap());
    // 100 calls over about a second: every one answered by the multiplexer
    for i in 0..100 {
        echoes(&mut con, i).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = rejected(info().query_async(&mut admin).await.unwrap());
    // attempts 100 ms apart, doubling: a handful, not one a call
    assert!(
        (1..=6).contains(&(after - before)),
        "{} lanes refused",
        after - before
    );
}

/// Waits until the server has closed the idle socket `id` (its `timeout`).
async fn closed_by_server(server: &RedisServer, id: i64) {
    let raw = server.raw().await;
    let gone = wait_for(Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut raw)
                .await
                .unwrap();
            !list.lines().any(|l| l.starts_with(&format!("id={id} ")))
        }
    })
    .await;
    assert!(gone, "the server kept the idle socket {id}");
}

#[tokio::test]
async fn a_multiplexer_left_idle_by_one_call_at_a_time_survives_the_servers_timeout() {
    // Redis closes a client idle for more than 1 s; calls one at a time take
    // the lane, which must not leave the multiplexer idle that long
    let server = RedisServer::start_with(&["--timeout", "1"]);
    let (mut con, multiplexer, lane) = connected(&server.url()).await;
    let until = std::time::Instant::now() + Duration::from_secs(3);
    let (mut i, mut on_lane) = (0, 0);
    while std::time::Instant::now() < until {
        if client_id(&mut con).await == lane {
            on_lane += 1;
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        on_lane * 10 >= i * 8,
        "{on_lane} of {i} calls took the lane"
    );
    // the multiplexer's first socket is still open (client_line finds it)
    let mut raw = server.raw().await;
    let line = client_line(&mut raw, multiplexer).await;
    let age: u64 = line
        .split_whitespace()
        .find_map(|f| f.strip_prefix("age="))
        .and_then(|a| a.parse().ok())
        .unwrap();
    assert!(age >= 3, "{line}");
    // two calls at once: one of them goes to the multiplexer
    for round in 0..3 {
        let (mut a, mut b) = (con.clone(), con.clone());
        let (mut one, mut two) = (redis::cmd("ECHO"), redis::cmd("ECHO"));
        one.arg(round);
        two.arg(round + 100);
        let (x, y) = tokio::join!(
            one.query_async::<String>(&mut a),
            two.query_async::<String>(&mut b),
        );
        assert_eq!(x.unwrap(), round.to_string(), "round {round}");
        assert_eq!(y.unwrap(), (round + 100).to_string(), "round {round}");
    }
}

#[tokio::test]
async fn the_first_call_after_the_server_closed_an_idle_client_goes_through() {
    let server = RedisServer::start_with(&["--timeout", "1"]);
    let (mut con, multiplexer, lane) = connected(&server.url()).await;
    closed_by_server(&server, multiplexer).await;
    closed_by_server(&server, lane).await;
    echoes(&mut con, 7).await;
    set(&mut con, "after-idle", "1").await;
}

#[tokio::test]
async fn a_call_after_a_pause_checks_the_multiplexer_the_lane_outlived() {
    // the server closed only the multiplexer's socket (idle a little longer
    // than the lane's when the client paused): after a pause of 15 s, a call
    // checks it before it could fail there
    let server = RedisServer::start();
    let (mut con, multiplexer, lane) = connected(&server.url()).await;
    let mut raw = server.raw().await;
    let () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(multiplexer)
        .query_async(&mut raw)
        .await
        .map(|_: i64| ())
        .unwrap();
    tokio::time::sleep(Duration::from_millis(15_500)).await;
    // the lane's socket is still open (client_line finds it)
    client_line(&mut raw, lane).await;
    echoes(&mut con, 1).await;
    echoes(&mut con, 2).await;
}

/// The connection's sockets go silent (a flow a NAT or load balancer
/// dropped without a reset: nothing answers, nothing breaks), while a new
/// connection to the same address works: after the calls that meet the
/// silence time out, the next ones go out on new sockets. The old code
/// kept the multiplexed socket, which the `redis` crate replaces only after
/// an I/O error: every call that went there (every call of a RESP3
/// connection, and of a RESP2 one each call that found it unused for half a
/// second) timed out, for as long as the operating system kept the socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_after_the_sockets_went_silent_go_out_on_new_ones() {
    let server = RedisServer::start();
    let proxy = common::FreezingProxy::start(server.port);
    let port = proxy.port;
    for url in [
        format!("redis://127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}?protocol=resp3"),
    ] {
        let con = RedisConfig {
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_millis(500),
            ..RedisConfig::from_url(&url)
        }
        .connect()
        .await
        .unwrap();
        // the multiplexer and both lanes in use
        for _ in 0..5 {
            let calls = (0..8).map(|i| {
                let mut c = con.clone();
                async move { echoes(&mut c, i).await }
            });
            futures::future::join_all(calls).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        proxy.freeze();
        let frozen = std::time::Instant::now();
        let mut calls = Vec::new();
        while frozen.elapsed() < Duration::from_secs(6) {
            let mut c = con.clone();
            let started = frozen.elapsed();
            let reply = redis::cmd("ECHO")
                .arg("after")
                .query_async::<String>(&mut c)
                .await
                .map_err(|e| e.to_string());
            calls.push((started, reply));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // the calls of the first 2 s may meet the silence; none after
        let late: Vec<_> = calls
            .iter()
            .filter(|(at, reply)| *at > Duration::from_secs(2) && reply.is_err())
            .collect();
        assert!(
            late.is_empty(),
            "{url}: {} of {} calls after 2 s failed: {late:?}",
            late.len(),
            calls
                .iter()
                .filter(|(at, _)| *at > Duration::from_secs(2))
                .count()
        );
    }
}
