//! The plain send as a Redis function (`FCALL`): loaded when a call finds it
//! missing, again when Redis loses it, and replaced by the send's script where
//! the server has no functions, or a send mixes in unique messages or needs
//! several calls. A send of several script calls loads only the scripts the
//! handle has not loaded, and sends again only the calls that met NOSCRIPT.

mod common;

use std::collections::HashMap;

use common::{RedisServer, command_calls};
use std::time::Duration;

use redjob::connection::WaitForReplicas;
use redjob::queue::{Keyed, QueueOptions, Rsmq, RsmqConfig, SendMessage, Unique};

/// The libraries `FUNCTION LIST` names.
async fn libraries(con: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let list: Vec<HashMap<String, redis::Value>> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(con)
        .await
        .unwrap();
    list.iter()
        .filter_map(|l| redis::from_redis_value(l.get("library_name")?.clone()).ok())
        .collect()
}

/// A server started with `args`, a raw connection to it, and a handle with
/// queue "q" created.
async fn with_queue(args: &[&str]) -> (RedisServer, redis::aio::MultiplexedConnection, Rsmq) {
    let server = RedisServer::start_with(args);
    let con = server.raw().await;
    let rsmq = Rsmq::connect(&server.url()).await.unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    (server, con, rsmq)
}

/// That the calls since `before` (`EVALSHA`s counted then) were two scripts'
/// (a first call that met NOSCRIPT, sent again) and no function's.
async fn called_scripts_alone(con: &mut redis::aio::MultiplexedConnection, before: Option<u64>) {
    let calls = command_calls(con).await;
    assert_eq!(calls.get("fcall"), None, "{calls:?}");
    assert_eq!(
        calls.get("evalsha").copied(),
        before.map(|n| n + 2),
        "{calls:?}"
    );
}

/// The bodies of the queue's messages, received in their order.
async fn bodies(rsmq: &Rsmq, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = rsmq.pop(queue).await.unwrap() {
        out.push(m.body);
    }
    out
}

#[tokio::test]
async fn a_plain_send_loads_its_function_once_and_again_after_redis_loses_it() {
    let (_server, mut con, rsmq) = with_queue(&[]).await;
    rsmq.send("q", SendMessage::new("a")).await.unwrap();
    rsmq.send_batch("q", &[SendMessage::new("b"), SendMessage::new("c")])
        .await
        .unwrap();
    let libs = libraries(&mut con).await;
    assert_eq!(libs.len(), 1, "{libs:?}");
    assert!(libs[0].starts_with("redjob_send_"), "{libs:?}");
    // the first call found no function: loaded, then called again
    let calls = command_calls(&mut con).await;
    assert_eq!(calls.get("fcall"), Some(&3), "{calls:?}");
    assert_eq!(
        calls.get("function|load"),
        Some(&1),
        "loaded once: {calls:?}"
    );
    assert_eq!(
        calls.get("evalsha"),
        Some(&2),
        "the creation alone: {calls:?}"
    );
    // a flush (as a restart without persistence, or a failover to a server
    // that never had it): the next send loads it again and is sent once
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    rsmq.send("q", SendMessage::new("d")).await.unwrap();
    assert_eq!(libraries(&mut con).await, libs);
    let calls = command_calls(&mut con).await;
    assert_eq!(calls.get("function|load"), Some(&2), "{calls:?}");
    assert_eq!(
        calls.get("fcall"),
        Some(&5),
        "one missing, one sent: {calls:?}"
    );
    assert_eq!(bodies(&rsmq, "q").await, ["a", "b", "c", "d"]);
}

#[tokio::test]
async fn a_server_without_functions_gets_the_send_script() {
    // as a server that refuses FUNCTION LOAD (Redis 6.2 has neither command,
    // which the conformance suite's `on_redis_6_2` covers)
    let (_server, mut con, rsmq) = with_queue(&["--rename-command", "FUNCTION", ""]).await;
    for body in ["a", "b", "c"] {
        rsmq.send("q", SendMessage::new(body)).await.unwrap();
    }
    // the first send's call found no function, whose load the server
    // refused: the creation's script (twice: its first call met NOSCRIPT),
    // then the three sends' by script
    let calls = command_calls(&mut con).await;
    assert_eq!(calls.get("fcall"), Some(&1), "{calls:?}");
    assert_eq!(calls.get("evalsha"), Some(&5), "{calls:?}");
    assert_eq!(bodies(&rsmq, "q").await, ["a", "b", "c"]);
}

#[tokio::test]
async fn a_send_that_mixes_in_unique_messages_calls_scripts_alone() {
    let (_server, mut con, rsmq) = with_queue(&[]).await;
    let before = command_calls(&mut con).await.get("evalsha").copied();
    rsmq.send_batch(
        "q",
        &[
            SendMessage::new("a"),
            SendMessage::new("u").unique(Unique::new("u")),
        ],
    )
    .await
    .unwrap();
    called_scripts_alone(&mut con, before).await;
    // a plain send alone goes through the function (its first call finds
    // none and loads it)
    rsmq.send("q", SendMessage::new("b")).await.unwrap();
    assert_eq!(command_calls(&mut con).await.get("fcall"), Some(&2));
    assert_eq!(bodies(&rsmq, "q").await, ["a", "u", "b"]);
}

#[tokio::test]
async fn a_send_of_several_calls_calls_scripts_alone() {
    let (_server, mut con, rsmq) = with_queue(&[]).await;
    // 1,000 messages a call
    let msgs: Vec<SendMessage> = (0..1500)
        .map(|i| SendMessage::new(format!("{i}")))
        .collect();
    let before = command_calls(&mut con).await.get("evalsha").copied();
    assert_eq!(rsmq.send_batch("q", &msgs).await.unwrap().len(), 1500);
    called_scripts_alone(&mut con, before).await;
    let bodies = bodies(&rsmq, "q").await;
    assert_eq!(bodies.len(), 1500);
    assert_eq!(bodies[1499], "1499");
}

/// The last command the server's client `id` ran (`CLIENT LIST`'s `cmd=`).
async fn last_command(con: &mut redis::aio::MultiplexedConnection, id: i64) -> String {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(con)
        .await
        .unwrap();
    let line = list
        .lines()
        .find(|l| l.starts_with(&format!("id={id} ")))
        .unwrap_or_else(|| panic!("no client {id}: {list}"));
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("cmd="))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_lone_send_is_the_same_on_the_lane_and_on_the_multiplexer() {
    // a lone send is packed by hand when a lane takes it and goes to the
    // multiplexer as a pipeline otherwise: both store the same message
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let mut con = redjob::connection::RedisConfig::from_url(server.url())
        .connect()
        .await
        .unwrap();
    let id = async |con: &mut redjob::connection::Connection| -> i64 {
        redis::cmd("CLIENT")
            .arg("ID")
            .query_async(con)
            .await
            .unwrap()
    };
    // the first call takes the multiplexer's socket while the lane opens
    let multiplexer = id(&mut con).await;
    let mut lane = multiplexer;
    for _ in 0..200 {
        lane = id(&mut con).await;
        if lane != multiplexer {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_ne!(lane, multiplexer, "no lane opened");
    let rsmq = Rsmq::from_connection(con, "rsmq", false).unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    // the handle's first send loads the function
    rsmq.send("q", SendMessage::new("first")).await.unwrap();
    let before = command_calls(&mut raw).await.get("fcall").copied();
    // one call right after another: the lane
    rsmq.send("q", SendMessage::new("on the lane"))
        .await
        .unwrap();
    assert_eq!(last_command(&mut raw, lane).await, "fcall");
    // the multiplexer unused for more than 500 ms: the next call goes there
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = SendMessage::new("on the multiplexer").at_unix_ms(now_ms - 1);
    rsmq.send("q", at).await.unwrap();
    assert_eq!(last_command(&mut raw, multiplexer).await, "fcall");
    // each a single FCALL (no reload, no second attempt)
    let calls = command_calls(&mut raw).await;
    assert_eq!(
        calls.get("fcall").copied(),
        before.map(|n| n + 2),
        "{calls:?}"
    );
    assert_eq!(
        bodies(&rsmq, "q").await,
        ["first", "on the lane", "on the multiplexer"]
    );
}

#[tokio::test]
async fn a_send_of_two_scripts_after_redis_lost_one_stores_each_message_once() {
    // Redis lost its scripts (a restart, a failover, SCRIPT FLUSH), and a
    // send of several calls since loaded the plain send's script again but
    // not the unique send's: a send mixing plain and unique messages finds
    // the first call's script and not the second's. It must not store the
    // plain messages twice when it loads the other and tries again.
    let (_server, mut con, rsmq) = with_queue(&[]).await;
    let mixed = [
        SendMessage::new("plain"),
        SendMessage::new("unique").unique(Unique::new("k")),
    ];
    rsmq.send_batch("q", &mixed).await.unwrap();
    assert_eq!(bodies(&rsmq, "q").await, ["plain", "unique"]);
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    // 1,001 plain messages: two calls of the plain send's script, which
    // both meet NOSCRIPT, and are sent again once it is loaded
    let many: Vec<_> = (0..1001)
        .map(|i| SendMessage::new(format!("m{i}")))
        .collect();
    rsmq.send_batch("q", &many).await.unwrap();
    assert_eq!(bodies(&rsmq, "q").await.len(), 1001);
    rsmq.send_batch("q", &mixed).await.unwrap();
    assert_eq!(bodies(&rsmq, "q").await, ["plain", "unique"]);
}

/// How many `SCRIPT LOAD`s the server has run.
async fn script_loads(con: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(con)
        .await
        .get("script|load")
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_send_of_several_scripts_loads_none_that_redis_has() {
    // a send mixing plain, unique and keyed messages calls three scripts in
    // one pipeline: once Redis has them, it sends the pipeline alone, with
    // no SCRIPT LOAD before it
    let (_server, mut con, rsmq) = with_queue(&[]).await;
    let mixed = [
        SendMessage::new("plain"),
        SendMessage::new("unique").unique(Unique::new("k")),
        SendMessage::new("keyed").keyed(Keyed::new("acct")),
    ];
    let before = script_loads(&mut con).await;
    rsmq.send_batch("q", &mixed).await.unwrap();
    let loads = script_loads(&mut con).await;
    assert!(
        loads - before <= 3,
        "the first send loads each script once: {before} → {loads}"
    );
    assert_eq!(bodies(&rsmq, "q").await, ["plain", "unique", "keyed"]);
    let loads = script_loads(&mut con).await;
    for _ in 0..3 {
        rsmq.send_batch("q", &mixed).await.unwrap();
        assert_eq!(bodies(&rsmq, "q").await, ["plain", "unique", "keyed"]);
    }
    assert_eq!(script_loads(&mut con).await, loads);
}

#[tokio::test]
async fn a_send_of_three_scripts_that_waits_for_replicas_after_redis_lost_them_stores_each_message_once()
 {
    // the calls that met NOSCRIPT are sent again with a WAIT of their own,
    // and the replies are read in the order the messages were given
    let server = RedisServer::start();
    let mut con = server.raw().await;
    let mut cfg = RsmqConfig::from_url(server.url());
    cfg.redis.wait_for_replicas = Some(WaitForReplicas {
        replicas: 0,
        timeout: Duration::from_millis(100),
    });
    let rsmq = Rsmq::with_config(cfg).await.unwrap();
    rsmq.create_queue("q", QueueOptions::default())
        .await
        .unwrap();
    let mixed = [
        SendMessage::new("plain"),
        SendMessage::new("unique").unique(Unique::new("k")),
        SendMessage::new("keyed").keyed(Keyed::new("acct")),
        SendMessage::new("plain 2"),
    ];
    let first = rsmq.send_batch("q", &mixed).await.unwrap();
    assert_eq!(first.len(), 4);
    assert_eq!(
        bodies(&rsmq, "q").await,
        ["plain", "unique", "keyed", "plain 2"]
    );
    let waits = command_calls(&mut con).await.get("wait").copied();
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut con)
        .await
        .unwrap();
    let ids = rsmq.send_batch("q", &mixed).await.unwrap();
    let mut got = Vec::new();
    while let Some(m) = rsmq.pop("q").await.unwrap() {
        got.push((m.id, m.body));
    }
    let bodies: Vec<&str> = got.iter().map(|(_, b)| b.as_str()).collect();
    assert_eq!(bodies, ["plain", "unique", "keyed", "plain 2"]);
    // each id the send returned is its own message's
    let popped: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    let returned: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    assert_eq!(popped, returned);
    let after = command_calls(&mut con).await.get("wait").copied();
    assert!(after > waits, "the send waited: {waits:?} → {after:?}");
}

#[tokio::test]
async fn a_large_send_while_redis_flushes_its_scripts_stores_each_message_once() {
    // SCRIPT FLUSH from another client can land between two calls of one
    // pipeline: the first stored its messages, the second met NOSCRIPT, and
    // only the second may be sent again. A send may still fail (the flushes
    // go on), but no message may be stored twice. A flush about every 60 ms
    // (a send takes about 40): often enough that a send meets one between
    // its calls, seldom enough that the calls sent again usually find their
    // script, as in the old code's failing case (which sent every call again:
    // 8 of 8 runs stored thousands twice).
    let (server, mut con, rsmq) = with_queue(&[]).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let stop = stop.clone();
        let mut con = con.clone();
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 1_000_000 {
                let () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(60)).await;
            }
            n
        })
    };
    let mut ok = 0;
    for round in 0..60 {
        let many: Vec<_> = (0..2500)
            .map(|i| SendMessage::new(format!("{round}:{i}:{:>100}", "")))
            .collect();
        ok += usize::from(rsmq.send_batch("q", &many).await.is_ok());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flushes = flusher.await.unwrap();
    assert!(flushes > 5, "the flushes ran alongside: {flushes}");
    // 150,000 bodies: more than the default response timeout may allow
    let mut patient = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_response_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    let stored: Vec<String> = redis::cmd("HVALS")
        .arg("rsmq:q:Q")
        .query_async(&mut patient)
        .await
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    let twice: Vec<&String> = stored
        .iter()
        .filter(|b| b.contains(':') && !seen.insert(b.as_str()))
        .collect();
    assert!(
        twice.is_empty(),
        "stored twice: {} ({ok} sends went through)",
        twice.len()
    );
    let len: u64 = redis::cmd("ZCARD")
        .arg("rsmq:q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(len as usize, seen.len());
    assert!(ok > 0, "no send went through");
    eprintln!(
        "{flushes} flushes; {ok} of 60 sends went through; {} messages stored once",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_send_while_another_client_lowers_the_maxsize_is_sent_whole_or_not_at_all() {
    // the send's first calls pass the queue's maxsize, another client lowers
    // it below the bodies, and the later calls meet it: the send must not
    // fail after storing part of its messages (the caller would send them
    // all again)
    let (server, mut con, rsmq) = with_queue(&[]).await;
    let other = Rsmq::connect(&server.url()).await.unwrap();
    let body = "x".repeat(2000);
    let msgs: Vec<SendMessage> = (0..2500).map(|_| SendMessage::new(body.clone())).collect();
    // the lowering is spread over the time a send takes here (on a loaded
    // machine a fixed span of 20 ms lowered the maxsize before every send)
    let started = std::time::Instant::now();
    rsmq.send_batch("q", &msgs).await.unwrap();
    let took = started.elapsed();
    let (mut whole, mut refused) = (0, 0);
    for round in 0..80u64 {
        let _ = rsmq.delete_queue("q").await;
        rsmq.create_queue("q", QueueOptions::default())
            .await
            .unwrap();
        let lower = {
            let other = other.clone();
            tokio::spawn(async move {
                // somewhere within the send, or just after it
                tokio::time::sleep(took * (round % 40) as u32 / 32).await;
                let update = redjob::queue::QueueUpdate {
                    maxsize: Some(1024),
                    ..Default::default()
                };
                other.set_attributes("q", update).await.unwrap();
            })
        };
        let sent = rsmq.send_batch("q", &msgs).await;
        lower.await.unwrap();
        let stored: u64 = redis::cmd("ZCARD")
            .arg("rsmq:q")
            .query_async(&mut con)
            .await
            .unwrap();
        match sent {
            Ok(ids) => {
                assert_eq!(ids.len(), 2500);
                assert_eq!(stored, 2500, "round {round}: sent, and {stored} stored");
                whole += 1;
            }
            Err(redjob::Error::MessageTooLarge { .. }) => {
                assert_eq!(stored, 0, "round {round}: refused, and {stored} stored");
                refused += 1;
            }
            Err(e) => panic!("round {round}: {e}"),
        }
    }
    println!("{whole} sends whole, {refused} refused");
    // the change swept across the sends: some went before it, some after
    assert!(whole > 0 && refused > 0, "{whole} whole, {refused} refused");
}

#[tokio::test]
async fn a_send_that_waits_for_replicas_as_long_as_a_duration_holds_goes_through() {
    // a wait's timeout past what Redis's WAIT takes (set on the handle, where
    // no config checks it): waited up to MAX_DELAY, not refused after the
    // send's writes (which the caller would send again)
    let (_server, mut con, rsmq) = with_queue(&[]).await;
    let rsmq = rsmq.wait_for_replicas(Some(WaitForReplicas {
        replicas: 0,
        timeout: Duration::MAX,
    }));
    rsmq.send("q", SendMessage::new("lone")).await.unwrap();
    rsmq.send_batch("q", &[SendMessage::new("a"), SendMessage::new("b")])
        .await
        .unwrap();
    let stored: u64 = redis::cmd("ZCARD")
        .arg("rsmq:q")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(stored, 3);
}
