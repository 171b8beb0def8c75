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
