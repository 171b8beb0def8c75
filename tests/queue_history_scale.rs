//! The history's upkeep at scale, on Redis: the trim that drops old bodies
//! (once a second, from the settles) does the same work for a history of
//! 4,000 entries as for one of 64,000: the place of its mark in the list is
//! kept, not looked for again.

mod common;

use std::collections::HashMap;

use common::RedisServer;
use redjob::backend::Backend;
use redjob::backend::redis::RedisBackend;
use redjob::ops::{Admin, History, QueueSettings};

const LIST: &str = "rsmq:q:history:ids";
const HASH: &str = "rsmq:q:history:Q";

/// A job id of 32 base-36 characters for entry `j` finished at `ms`.
fn id_of(ms: u64, j: u64) -> String {
    const D: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = vec![b'0'; 32];
    let (mut a, mut b) = (ms * 1000, j);
    for (i, c) in s.iter_mut().rev().enumerate() {
        let v = if i < 22 { &mut b } else { &mut a };
        *c = D[(*v % 36) as usize];
        *v /= 36;
    }
    String::from_utf8(s).unwrap()
}

/// Appends `n` succeeded entries with their bodies, one a ms ending at
/// `end_ms`, oldest first (as complete.lua writes them); their ids.
async fn build(con: &mut redis::aio::MultiplexedConnection, n: u64, end_ms: u64) -> Vec<String> {
    build_groups(con, &vec![1; n as usize], end_ms + 1 - n).await
}

/// A Redis with queue "q" whose history keeps any number of entries, a
/// connection to it, and Redis's time (ms).
/// Queue `q`'s history keeps entries by age alone, however many.
async fn no_count_limit(backend: &RedisBackend) {
    let h = History {
        max_count: None,
        ..History::default()
    };
    Admin::set_settings(backend, "q", &QueueSettings::history(h))
        .await
        .unwrap();
}

async fn unlimited() -> (
    RedisServer,
    RedisBackend,
    redis::aio::MultiplexedConnection,
    u64,
) {
    let server = RedisServer::start();
    let (backend, _rsmq) = common::backend_with_queue(&server).await;
    no_count_limit(&backend).await;
    let mut con = server.raw().await;
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    (server, backend, con, s * 1000 + us / 1000)
}

/// Whether entry `id` still holds its body (its header's byte count).
async fn has_body(con: &mut redis::aio::MultiplexedConnection, id: &str) -> bool {
    let e: String = redis::cmd("HGET")
        .arg(HASH)
        .arg(id)
        .query_async(con)
        .await
        .unwrap();
    let bytes = e.lines().next().unwrap().split(' ').nth(4).unwrap();
    bytes != "0"
}

/// The commands Redis ran for the second of two trims of a history of `n`
/// entries, all past the arguments' age (1 h) and none past the entries'
/// (24 h), with no limit on their count; each trim drops
/// up to 1,000 bodies.
async fn second_trim(n: u64) -> HashMap<String, u64> {
    let (_server, backend, mut con, now) = unlimited().await;
    let ids = build(&mut con, n, now - 2 * 3600 * 1000).await;
    backend.trim_history("q").await.unwrap();
    assert!(!has_body(&mut con, &ids[0]).await);
    assert!(!has_body(&mut con, &ids[990]).await);
    assert!(has_body(&mut con, &ids[1000]).await);
    common::reset_stats(&mut con).await;
    backend.trim_history("q").await.unwrap();
    let mut calls = common::command_calls(&mut con).await;
    calls.retain(|c, _| {
        !matches!(
            c.as_str(),
            "evalsha" | "fcall" | "eval" | "info" | "config" | "config|resetstat"
        )
    });
    assert!(
        !has_body(&mut con, &ids[1990]).await,
        "the second trim drops the next 1,000 bodies"
    );
    assert!(has_body(&mut con, &ids[2000]).await);
    assert!(has_body(&mut con, &ids[n as usize - 1]).await);
    let len: u64 = redis::cmd("LLEN")
        .arg(LIST)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(len, n, "no entry goes");
    calls
}

#[tokio::test]
async fn dropping_old_bodies_costs_the_same_in_a_history_16_times_longer() {
    let small = second_trim(4_000).await;
    let big = second_trim(64_000).await;
    assert!(
        small.values().sum::<u64>() > 0,
        "the trim ran commands: {small:?}"
    );
    assert_eq!(
        small, big,
        "the commands of one trim, 4,000 entries against 64,000"
    );
}

/// Appends entries in groups finished in one ms each, `sizes[k]` of them at
/// `first_ms + k`, oldest first; their ids.
async fn build_groups(
    con: &mut redis::aio::MultiplexedConnection,
    sizes: &[u64],
    first_ms: u64,
) -> Vec<String> {
    let body = r#"{"type":"Mail","args":{"i":1}}"#;
    let mut all: Vec<(String, u64)> = Vec::new();
    for (k, size) in sizes.iter().enumerate() {
        let ms = first_ms + k as u64;
        for _ in 0..*size {
            all.push((id_of(ms, all.len() as u64), ms));
        }
    }
    for chunk in all.chunks(2000) {
        let mut rpush = redis::cmd("RPUSH");
        rpush.arg(LIST);
        let mut hset = redis::cmd("HSET");
        hset.arg(HASH);
        for (id, ms) in chunk {
            rpush.arg(id);
            hset.arg(id)
                .arg(format!("h1 succeeded {ms} 1 {}\n\n\n\n{body}", body.len()));
        }
        let () = redis::pipe()
            .add_command(rpush)
            .ignore()
            .add_command(hset)
            .ignore()
            .query_async(con)
            .await
            .unwrap();
    }
    all.into_iter().map(|(id, _)| id).collect()
}

/// The list's elements and, for each, whether its entry still holds its body.
async fn bodies(con: &mut redis::aio::MultiplexedConnection) -> Vec<(String, bool)> {
    let ids: Vec<String> = redis::cmd("LRANGE")
        .arg(LIST)
        .arg(0)
        .arg(-1)
        .query_async(con)
        .await
        .unwrap();
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(1000) {
        let vals: Vec<String> = redis::cmd("HMGET")
            .arg(HASH)
            .arg(chunk)
            .query_async(con)
            .await
            .unwrap();
        for (id, e) in chunk.iter().zip(vals) {
            let bytes = e
                .lines()
                .next()
                .unwrap()
                .split(' ')
                .nth(4)
                .unwrap()
                .to_string();
            out.push((id.clone(), bytes != "0"));
        }
    }
    out
}

#[tokio::test]
async fn old_bodies_go_oldest_first_through_ms_larger_than_a_read_while_the_head_is_trimmed() {
    let (_server, backend, mut con, now) = unlimited().await;
    let sizes = [3, 1500, 1, 999, 1000, 1001, 2, 2500, 5, 1, 1, 700];
    build_groups(&mut con, &sizes, now - 2 * 3600 * 1000).await;
    let mut total: u64 = sizes.iter().sum();
    let mut last_dropped = 0;
    for round in 0..40 {
        match round {
            // the head trimmed by count, past the mark
            4 => {
                let h = History {
                    max_count: Some(total - 2200),
                    ..History::default()
                };
                Admin::set_settings(&backend, "q", &QueueSettings::history(h))
                    .await
                    .unwrap();
            }
            6 => no_count_limit(&backend).await,
            // a place that is wrong (keys changed by hand) is not trusted
            8 => {
                let () = redis::cmd("HSET")
                    .arg(HASH)
                    .arg("~argsat")
                    .arg(3)
                    .query_async(&mut con)
                    .await
                    .unwrap();
            }
            _ => {}
        }
        backend.trim_history("q").await.unwrap();
        let now = bodies(&mut con).await;
        let dropped = now.iter().take_while(|(_, b)| !b).count();
        assert!(
            now[dropped..].iter().all(|(_, b)| *b),
            "round {round}: the bodies that went are the oldest"
        );
        if round == 6 {
            assert!(
                now.len() as u64 <= total - 2000,
                "the head went: {}",
                now.len()
            );
            total = now.len() as u64;
        } else if round > 6 {
            assert_eq!(now.len() as u64, total, "round {round}: none went since");
        }
        if dropped == now.len() {
            assert!(round > 6, "every body went by round {round}");
            return;
        }
        if round != 4 && round != 5 {
            // (while the head is trimmed by count, fewer may be left)
            assert!(
                dropped > last_dropped || round == 0,
                "round {round}: the trim goes on"
            );
        }
        last_dropped = dropped;
    }
    panic!("the bodies did not all go in 40 trims: {last_dropped} of {total}");
}
