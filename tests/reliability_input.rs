//! Bad input: 10,000 good jobs mixed with 1,000 bad messages written with raw
//! Redis commands. Every good job runs, every bad message ends in the dead-letter
//! queue with its reason, nothing panics and the worker's memory stays bounded.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Recorder, RedisServer, start, wait_for, wait_until};
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "good", queue = "mixed")]
struct Good {
    key: u64,
}

impl Job for Good {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

/// The bad kinds, each with the text its dead letter's reason must contain.
fn bad_body(kind: usize, i: usize) -> (Vec<u8>, &'static str) {
    match kind {
        0 => (format!("not json {i}").into_bytes(), "cannot run this body"),
        1 => (b"[1, 2, 3]".to_vec(), "cannot run this body"),
        2 => (
            format!(r#"{{"type":"no_such_job_{i}","args":{{}}}}"#).into_bytes(),
            "unknown job type",
        ),
        3 => (
            br#"{"type":"good","args":{"key":"not a number"}}"#.to_vec(),
            "cannot run this body",
        ),
        4 => (Vec::new(), "cannot run this body"),
        5 => (vec![0xff, 0xfe, b'{', 0x80, 0x00], "cannot run this body"),
        _ => {
            // a well-formed job, but over the queue's maxsize (64 KiB)
            let pad = "x".repeat(70_000);
            (
                format!(r#"{{"type":"good","args":{{"key":{i},"pad":"{pad}"}}}}"#).into_bytes(),
                "over the queue's maxsize",
            )
        }
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_among_good_jobs_is_dead_lettered_with_reasons() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let good: Vec<Good> = (0..10_000).map(|key| Good { key }).collect();
    client.enqueue_batch(&good[..5_000]).await.unwrap();
    // 1,000 bad messages, raw: ZADD to the queue's set, HSET into its hash
    let mut con = server.raw().await;
    let mut want: HashMap<String, &'static str> = HashMap::new();
    for i in 0..1_000 {
        let id = format!("{:010}{:022}", 1_000_000 + i, i);
        let (body, reason) = bad_body(i % 7, i);
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg("rsmq:mixed")
            .arg(0)
            .arg(&id)
            .cmd("HSET")
            .arg("rsmq:mixed:Q")
            .arg(&id)
            .arg(body)
            .query_async(&mut con)
            .await
            .unwrap();
        want.insert(id, reason);
    }
    client.enqueue_batch(&good[5_000..]).await.unwrap();

    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queue("mixed")
        .handle_signals(false)
        .data(rec.clone())
        .unknown_jobs_retry_for(Duration::ZERO)
        .build()
        .unwrap();
    let rss_before = rss_kib();
    let running = start(w);
    assert!(
        wait_until(Duration::from_secs(60), || rec.len() >= 10_000).await,
        "ran {}",
        rec.len()
    );
    let backend = client.clone();
    assert!(
        wait_for(Duration::from_secs(20), || async {
            backend.dead_letters("mixed", 5_000).await.unwrap().len() >= 1_000
        })
        .await
    );
    let rss_after = rss_kib();
    running.stop().await;

    // every good job ran exactly once
    let counts = rec.counts();
    assert_eq!(counts.len(), 10_000);
    assert!(counts.values().all(|n| *n == 1));
    // every bad message is a dead letter with its reason
    let dead = client.dead_letters("mixed", 5_000).await.unwrap();
    assert_eq!(dead.len(), 1_000);
    for d in &dead {
        let reason = want
            .get(d.id.as_str())
            .unwrap_or_else(|| panic!("unexpected dead letter {}", d.id));
        assert!(d.error.contains(reason), "{}: {}", d.id, d.error);
    }
    let stats = client.stats("mixed").await.unwrap();
    assert_eq!((stats.processed, stats.dead), (10_000, 1_000));
    // the run-time histogram counts the good jobs' runs alone: a body naming
    // "good" that does not decode into it was no run of it
    let times = redjob::backend::Backend::run_times(&client.backend(), "mixed")
        .await
        .unwrap();
    let counted: Vec<(&str, u64)> = times
        .iter()
        .map(|t| (t.job_type.as_str(), t.count()))
        .collect();
    assert_eq!(counted, [("good", 10_000)]);
    assert_eq!(client.queues().attributes("mixed").await.unwrap().msgs, 0);
    let grew = rss_after.saturating_sub(rss_before);
    println!("bad input: 10000 good ran, 1000 bad dead-lettered; worker RSS grew {grew} KiB");
    assert!(grew < 64 * 1024, "worker memory grew {grew} KiB");
}

/// `v` in base 36, `width` digits.
fn b36(mut v: u64, width: usize) -> String {
    const D: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut s = vec![b'0'; width];
    for c in s.iter_mut().rev() {
        *c = D[(v % 36) as usize];
        v /= 36;
    }
    String::from_utf8(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_job_whose_id_says_it_was_sent_beyond_the_window_ahead_is_dead_lettered() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client.enqueue(&Good { key: 1 }).await.unwrap();
    let mut con = server.raw().await;
    let (secs, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await.unwrap();
    let now_us = secs * 1_000_000 + us;
    // sent "3 hours from now" (a clock stepped back, or another client's id),
    // and an hour ago
    let ahead = format!(
        "{}{}",
        b36(now_us + 3 * 3600 * 1_000_000, 10),
        "a".repeat(22)
    );
    let before = format!(
        "{}{}",
        b36(now_us - 3600 * 1_000_000 + 60_000_000, 10),
        "b".repeat(22)
    );
    for id in [&ahead, &before] {
        let _: () = redis::pipe()
            .cmd("ZADD")
            .arg("rsmq:mixed")
            .arg(0)
            .arg(id)
            .cmd("HSET")
            .arg("rsmq:mixed:Q")
            .arg(id)
            .arg(r#"{"type":"nobody_knows","args":{}}"#)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queue("mixed")
        .handle_signals(false)
        .data(rec.clone())
        .unknown_jobs_retry_for(Duration::from_secs(3600))
        .build()
        .unwrap();
    let running = start(w);
    let backend = client.clone();
    let dead = wait_for(Duration::from_secs(10), || async {
        !backend.dead_letters("mixed", 10).await.unwrap().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await;
    assert!(
        dead,
        "the job sent \"ahead\" is dead-lettered, not put back for hours"
    );
    let letters = client.dead_letters("mixed", 10).await.unwrap();
    assert_eq!(
        letters.len(),
        1,
        "the one sent an hour ago is put back: {letters:?}"
    );
    assert_eq!(letters[0].id.as_str(), ahead);
    assert!(
        letters[0]
            .error
            .contains("further ahead than unknown_jobs_retry_for"),
        "{}",
        letters[0].error
    );
    assert_eq!(rec.len(), 1, "the good job ran");
}
