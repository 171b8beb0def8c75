//! Queue inspection and deletion do work bounded by what they were asked for:
//! a page of jobs or dead letters after a cursor among 100,000 jobs at one
//! score (a bulk `enqueue_at`) reads its rows, not the ties before the cursor,
//! whether the cursor's row is still there or was deleted meanwhile; and
//! deleting a queue of 200,000 jobs never holds Redis for 10 ms.

mod common;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::RedisServer;
use redis::Value;
use redis::aio::MultiplexedConnection;
use redjob::Client;
use redjob::inspect::{Cursor, Inspect, JobState, Page};
use redjob::ops::{Admin, DeadOrder};
use redjob::queue::{QueueOptions, Queues};

const TIES: u64 = 100_000;

/// Puts `n` members at `score` in the sorted set `zset`, each with a body in
/// the hash `hash`, in script calls of 5,000; ids `<10 digits>` + 22 `a`.
async fn fill(con: &mut MultiplexedConnection, zset: &str, hash: &str, n: u64, score: u64) {
    let script = redis::Script::new(
        r#"for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
          local id = string.format("%010d", i) .. string.rep("a", 22)
          redis.call("ZADD", KEYS[1], ARGV[1], id)
          redis.call("HSET", KEYS[2], id, "{}", id .. ":n", 1)
        end
        return 1"#,
    );
    for from in (0..n).step_by(5_000) {
        let _: i64 = script
            .key(zset)
            .key(hash)
            .arg(score)
            .arg(from)
            .arg((from + 5_000).min(n) - 1)
            .invoke_async(con)
            .await
            .unwrap();
    }
}

fn id(i: u64) -> String {
    format!("{i:010}{}", "a".repeat(22))
}

fn future_ms() -> u64 {
    (SystemTime::now() + Duration::from_secs(3600))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `INFO commandstats`: calls and µs per command.
async fn stats(con: &mut MultiplexedConnection) -> HashMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(f))?
                    .parse::<u64>()
                    .ok()
            };
            Some((name.to_string(), (field("calls=")?, field("usec=")?)))
        })
        .collect()
}

/// What one page call cost inside Redis: the commands its script ran, and the
/// script's µs (the least of three calls, so that a moment the machine took
/// Redis off its core does not count).
async fn page_cost<F, Fut>(con: &mut MultiplexedConnection, mut call: F) -> (Page, u64, u64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Page>,
{
    let (mut page, mut inner, mut best) = (None, 0, u64::MAX);
    for _ in 0..3 {
        let before = stats(con).await;
        page = Some(call().await);
        let after = stats(con).await;
        let delta = |k: &str| {
            let (c, u) = after.get(k).copied().unwrap_or_default();
            let (c0, u0) = before.get(k).copied().unwrap_or_default();
            (c - c0, u - u0)
        };
        inner = after
            .keys()
            .filter(|k| !["evalsha", "info"].contains(&k.as_str()))
            .map(|k| delta(k).0)
            .sum();
        let (calls, usec) = delta("evalsha");
        assert_eq!(calls, 1, "one script call per page");
        best = best.min(usec);
    }
    (page.unwrap(), inner, best)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_after_a_cursor_among_100k_ties_reads_only_its_rows() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    backend
        .create_queue("ties", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    let at = future_ms();
    fill(&mut con, "rsmq:ties", "rsmq:ties:Q", TIES, at).await;
    fill(&mut con, "rsmq:ties:dead", "rsmq:ties:dead:Q", TIES, at).await;
    // two rows near the end of the ties: one stays, one is deleted
    let (kept, gone) = (TIES - 20, TIES - 10);
    for key in ["rsmq:ties", "rsmq:ties:dead"] {
        let _: i64 = redis::cmd("ZREM")
            .arg(key)
            .arg(id(gone))
            .query_async(&mut con)
            .await
            .unwrap();
    }
    // the scripts loaded before anything is measured
    backend
        .list("ties", JobState::Scheduled, None, 5)
        .await
        .unwrap();
    backend
        .dead_page("ties", DeadOrder::OldestFirst, None, 5)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(10_000)
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .unwrap();
    let cursor = |i: u64| -> Cursor { format!("0:{at}.000:{}", id(i)).parse().unwrap() };
    let ids = |p: &Page| -> Vec<String> { p.jobs.iter().map(|j| j.id.to_string()).collect() };
    let mut report = Vec::new();
    for (what, from, first) in [("kept", kept, kept + 1), ("gone", gone, gone + 1)] {
        let c = cursor(from);
        let b = backend.clone();
        let (page, inner, usec) = page_cost(&mut con, || {
            let (b, c) = (b.clone(), c.clone());
            async move {
                b.list("ties", JobState::Scheduled, Some(&c), 5)
                    .await
                    .unwrap()
            }
        })
        .await;
        assert_eq!(ids(&page), (first..first + 5).map(id).collect::<Vec<_>>());
        report.push((format!("jobs after a {what} cursor"), inner, usec));

        for (order, next) in [
            (DeadOrder::OldestFirst, first),
            (DeadOrder::NewestFirst, from - 1),
        ] {
            let b = backend.clone();
            let (page, inner, usec) = page_cost(&mut con, || {
                let (b, c) = (b.clone(), c.clone());
                async move { b.dead_page("ties", order, Some(&c), 5).await.unwrap() }
            })
            .await;
            assert_eq!(ids(&page)[0], id(next), "{order:?} after a {what} cursor");
            report.push((
                format!("dead letters {order:?} after a {what} cursor"),
                inner,
                usec,
            ));
        }
    }
    let slow: Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async(&mut con)
        .await
        .unwrap();
    for (what, inner, usec) in &report {
        println!("{what}: {inner} commands inside the script, {usec} µs in Redis");
    }
    for (what, inner, usec) in &report {
        // a binary search over the ties: about 2 x log2(100,000) commands
        assert!(*inner <= 50, "{what}: {inner} commands");
        // reading the page is microseconds; walking 100,000 ties is milliseconds
        assert!(*usec < 1000, "{what}: {usec} µs");
    }
    assert!(
        matches!(&slow, Value::Array(v) if v.is_empty()),
        "the slow log (10 ms) recorded: {slow:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_queue_of_200k_jobs_does_not_hold_redis() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    backend
        .create_queue("big", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    fill(&mut con, "rsmq:big", "rsmq:big:Q", 200_000, future_ms()).await;
    fill(
        &mut con,
        "rsmq:big:dead",
        "rsmq:big:dead:Q",
        200_000,
        future_ms(),
    )
    .await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(10_000)
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .unwrap();
    backend.delete_queue("big").await.unwrap();
    let slow: Value = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(128)
        .query_async(&mut con)
        .await
        .unwrap();
    let left: i64 = redis::cmd("EXISTS")
        .arg(&["rsmq:big", "rsmq:big:Q", "rsmq:big:dead", "rsmq:big:dead:Q"])
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(left, 0, "the queue's keys are gone");
    assert!(
        matches!(&slow, Value::Array(v) if v.is_empty()),
        "the slow log (10 ms) recorded: {slow:?}"
    );
}

/// Scheduled and leased jobs share the scores after now (a lease is scored at
/// its end, where RSMQ clients see it again): counts stay a few commands, and a
/// page of in-flight jobs behind 5,000 scheduled ones reads a bounded number of
/// rows per call, going on from the last row it read until it has found them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_behind_5000_scheduled_jobs_are_counted_and_listed_in_bounded_pages() {
    use redjob::backend::Backend;
    use redjob::queue::SendMessage;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    backend
        .create_queue("mix", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    // 5,000 scheduled in 10 minutes, before the leases' ends (in an hour)
    let soon = future_ms() - 3_000_000;
    fill(&mut con, "rsmq:mix", "rsmq:mix:Q", 5_000, soon).await;
    let msgs: Vec<SendMessage> = (0..3).map(|_| SendMessage::new("{}")).collect();
    Backend::send(&backend, "mix", &msgs, &QueueOptions::default())
        .await
        .unwrap();
    let leased = backend
        .fetch("mix", 3, Duration::from_secs(3600))
        .await
        .unwrap()
        .jobs;
    assert_eq!(leased.len(), 3);
    let counts = backend.counts("mix").await.unwrap();
    assert_eq!(
        (
            counts.ready,
            counts.scheduled,
            counts.in_flight,
            counts.dead
        ),
        (0, 5_000, 3, 0)
    );
    for d in &leased {
        let job = backend.job("mix", &d.id).await.unwrap().unwrap();
        assert_eq!((job.state, job.attempts), (JobState::InFlight, 1));
    }
    // the scheduled pass over no lease; the in-flight pass over the scheduled
    let first = backend
        .list("mix", JobState::Scheduled, None, 10)
        .await
        .unwrap();
    assert_eq!(first.jobs.len(), 10);
    assert!(first.jobs.iter().all(|j| j.state == JobState::Scheduled));
    let mut found = Vec::new();
    let mut after: Option<Cursor> = None;
    let mut calls = 0;
    loop {
        let c = after.clone();
        let (page, inner, _) = page_cost(&mut con, || {
            let (b, c) = (backend.clone(), c.clone());
            async move {
                b.list("mix", JobState::InFlight, c.as_ref(), 10)
                    .await
                    .unwrap()
            }
        })
        .await;
        calls += 1;
        // a page reads at most 1,010 rows, 100 per ZRANGE
        assert!(inner <= 40, "a page ran {inner} commands");
        assert!(page.jobs.iter().all(|j| j.state == JobState::InFlight));
        found.extend(page.jobs.iter().map(|j| j.id.to_string()));
        match page.next {
            Some(c) => after = Some(c),
            None => break,
        }
        assert!(calls < 20, "the pages never ended");
    }
    let mut want: Vec<_> = leased.iter().map(|d| d.id.to_string()).collect();
    want.sort();
    found.sort();
    assert_eq!(found, want);
    assert!(calls >= 5, "5,000 rows passed over in {calls} pages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_blocked_jobs_deep_in_a_hot_key_reads_only_its_rows() {
    use redjob::backend::Backend;
    use redjob::queue::{Keyed, SendMessage};
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let backend = client.backend();
    backend
        .create_queue("hot", QueueOptions::default())
        .await
        .unwrap();
    let mut con = server.raw().await;
    // 20,000 jobs of one key: one holds its place, the rest wait
    for _ in 0..4 {
        let msgs: Vec<SendMessage> = (0..5_000)
            .map(|_| SendMessage::new("{}").keyed(Keyed::new("hot")))
            .collect();
        Backend::send(&backend, "hot", &msgs, &QueueOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(backend.counts("hot").await.unwrap().blocked, 19_999);
    // the cursor after the 15,000th waiting job, from a page ending there
    let mut deep: Option<Cursor> = None;
    let mut read = 0;
    while read < 15_000 {
        let page = backend
            .list("hot", JobState::Blocked, deep.as_ref(), 1000)
            .await
            .unwrap();
        read += page.jobs.len();
        deep = page.next;
    }
    let mut report = Vec::new();
    for (what, after) in [("first", None), ("deep", deep.clone())] {
        let (page, inner, usec) = page_cost(&mut con, || {
            let (b, c) = (backend.clone(), after.clone());
            async move {
                b.list("hot", JobState::Blocked, c.as_ref(), 10)
                    .await
                    .unwrap()
            }
        })
        .await;
        assert_eq!(page.jobs.len(), 10);
        // HMGET, TIME, ZRANGE BYLEX, HMGET (the keys), HMGET (the jobs)
        assert!(inner <= 5, "a {what} page ran {inner} commands");
        report.push((what, inner, usec));
    }
    println!("blocked pages (commands, µs): {report:?}");
}
