//! A purge's mark in the queue hash on Redis (`redjob:purging`, see purge.lua
//! and `purge_mark` in lib.lua): it counts the keyed jobs sent up to its
//! cutoff that go back to wait (and dead letters requeued, flows' parents
//! sent, periodic jobs of ticks up to it enqueued) while it runs,
//! lapses should the purge die,
//! and is gone once the purge ends.

mod common;

use std::time::Duration;

use common::{RedisServer, backend_with_queue};
use redjob::backend::Backend;
use redjob::inspect::Inspect;
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
    // nor under a mark that lapsed (a purge that died): the wait deletes it
    set_mark(&mut con, "zzzzzzzzzz 1 7").await;
    demote("c").await;
    assert_eq!(mark(&mut con).await, None, "a lapsed mark is deleted");
    // a purge takes a lapsed mark over, and leaves none
    assert_eq!(backend.purge_queue("q").await.unwrap(), 6);
    assert_eq!(mark(&mut con).await, None);
}

/// How many jobs the queue holds (waiting, scheduled, running, blocked).
async fn size(backend: &redjob::backend::redis::RedisBackend) -> u64 {
    let c = backend.counts("q").await.unwrap();
    c.ready + c.scheduled + c.in_flight + c.blocked
}

/// Sends `n` jobs, a thousand a call, each made by `msg` from its number.
async fn send_many(
    backend: &redjob::backend::redis::RedisBackend,
    n: usize,
    msg: impl Fn(usize) -> SendMessage,
) -> Vec<redjob::JobId> {
    let mut ids = Vec::new();
    for from in (0..n).step_by(1000) {
        let batch: Vec<SendMessage> = (from..(from + 1000).min(n)).map(&msg).collect();
        let sent = backend
            .send("q", &batch, &QueueOptions::default())
            .await
            .unwrap();
        ids.extend(sent.into_iter().map(|s| s.id));
    }
    ids
}

/// The purge scans the keyed set and priority 0 again when keyed jobs it
/// has to take went back to wait during its pass: that rescan must read
/// the whole keyed set. It ended after the rescan's first ZSCAN (purge.lua
/// checked for a pass's end after every ZSCAN, not only when a set was
/// done): with a keyed set of more than one ZSCAN's thousand members, the
/// holders sent back to wait in its unread part were left.
#[tokio::test]
async fn a_purges_rescan_reads_the_whole_keyed_set() {
    let server = RedisServer::start();
    let (backend, _) = backend_with_queue(&server).await;
    const KEYS: usize = 300;
    let key = |n: usize| Keyed::new(format!("acct{}", n % KEYS));
    // plain jobs, for a pass of a few dozen calls
    send_many(&backend, 20_000, |_| SendMessage::new("{}")).await;
    // each key's one place is held by a job due in an hour
    let holders = send_many(&backend, KEYS, |n| {
        SendMessage::new("{}")
            .keyed(key(n))
            .delay(Duration::from_secs(3600))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(3)).await;
    let cutoff = backend.count_purge("q").await.unwrap().upto_ms;
    tokio::time::sleep(Duration::from_millis(3)).await;
    // sent after the cutoff (left): 3,000 waiting jobs in the keyed set
    send_many(&backend, 3000, |n| {
        SendMessage::new("{}")
            .keyed(key(n))
            .delay(Duration::from_secs(7200))
    })
    .await;
    let before = size(&backend).await;
    let call = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.purge_queue_upto("q", cutoff).await })
    };
    while size(&backend).await == before && !call.is_finished() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // while it runs, a job due now comes for each key: it takes its key's
    // place, and the holder, due later, goes back to wait among the 3,000
    send_many(&backend, KEYS, |n| SendMessage::new("{}").keyed(key(n))).await;
    let purged = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the purge ends")
        .unwrap()
        .unwrap();
    let mut left = Vec::new();
    for h in &holders {
        if let Some(j) = backend.job("q", h).await.unwrap() {
            left.push((*h, j.state));
        }
    }
    assert!(
        left.is_empty(),
        "{} of the {KEYS} holders sent before the cutoff are left: {:?}",
        left.len(),
        &left[..left.len().min(3)]
    );
    assert_eq!(purged, 20_000 + KEYS as u64);
}

/// A purge with an earlier cutoff than the mark's (that of another purge,
/// which may have died) leaves the mark as it is: it neither keeps it from
/// lapsing, which kept a dead purge's later cutoff counting moves for as
/// long as another purge ran, nor deletes it when it ends.
#[tokio::test]
async fn a_purge_does_not_keep_a_later_cutoffs_mark_alive() {
    let server = RedisServer::start();
    let (backend, _) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    send_many(&backend, 2, |_| SendMessage::new("{}")).await;
    let until = backend.now_ms().await.unwrap() + 30_000;
    let theirs = format!("zzzzzzzzzz {until} 7");
    set_mark(&mut con, &theirs).await;
    assert_eq!(backend.purge_queue("q").await.unwrap(), 2);
    assert_eq!(
        mark(&mut con).await,
        Some(theirs),
        "the other purge's mark, its lapse time unchanged"
    );
}

/// A purge's rescans are bounded: keyed jobs that keep going back to wait,
/// counted by a mark with a later cutoff (another purge's, here one that
/// never lapses), made a purge scan again and again for as long as they
/// did. It now ends after ten passes.
#[tokio::test]
async fn a_purge_ends_while_keyed_jobs_keep_going_back_to_wait() {
    let server = RedisServer::start();
    let (backend, _) = backend_with_queue(&server).await;
    let mut con = server.raw().await;
    send_many(&backend, 10, |_| SendMessage::new("{}")).await;
    tokio::time::sleep(Duration::from_millis(3)).await;
    let cutoff = backend.count_purge("q").await.unwrap().upto_ms;
    tokio::time::sleep(Duration::from_millis(3)).await;
    // sent after the cutoff (left): a pass takes a few calls
    send_many(&backend, 3000, |_| SendMessage::new("{}")).await;
    set_mark(&mut con, "zzzzzzzzzz 99999999999999 7").await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // each job of the key but its first waits: counted under the mark
    let mover = {
        let (backend, stop) = (backend.clone(), stop.clone());
        tokio::spawn(async move {
            let opts = QueueOptions::default();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let m = SendMessage::new("{}").keyed(Keyed::new("busy"));
                backend.send("q", &[m], &opts).await.unwrap();
            }
        })
    };
    let purged = tokio::time::timeout(
        Duration::from_secs(10),
        backend.purge_queue_upto("q", cutoff),
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    mover.await.unwrap();
    assert_eq!(purged.expect("the purge ends").unwrap(), 10);
}

/// A dead letter requeued while a purge runs was sent before its cutoff:
/// the purge deletes it (docs of `purge_queue_upto`: "a dead letter
/// requeued after the count keeps its id and its old time ... is deleted
/// too"). It went back to its priority's set behind the purge's scan,
/// which had passed that set, and was left.
#[tokio::test]
async fn a_dead_letter_requeued_while_a_purge_runs_is_purged() {
    let server = RedisServer::start();
    let (backend, _) = backend_with_queue(&server).await;
    let opts = QueueOptions::default();
    // x, at priority 10 (scanned before priority 5), dies
    let x = backend
        .send("q", &[SendMessage::new("{}").priority(10)], &opts)
        .await
        .unwrap()[0]
        .id;
    let d = backend
        .fetch("q", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert_eq!(d.id, x);
    let dead = redjob::backend::Settle {
        dead: vec![redjob::backend::DeadLetterEntry {
            id: x,
            token: d.token,
            error: "fatal".into(),
        }],
        ..Default::default()
    };
    backend.settle("q", &dead).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3)).await;
    // plain jobs at priority 5, for a pass of a few dozen calls
    send_many(&backend, 30_000, |_| SendMessage::new("{}").priority(5)).await;
    let before = size(&backend).await;
    let call = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.purge_queue("q").await })
    };
    // once it deletes, its scan is in priority 5, past priority 10
    while size(&backend).await == before && !call.is_finished() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let requeued = backend
        .requeue_dead("q", &[x], redjob::ops::Spread::NOW)
        .await
        .unwrap();
    assert_eq!(requeued, 1);
    assert!(!call.is_finished(), "requeued while the purge runs");
    let purged = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the purge ends")
        .unwrap()
        .unwrap();
    assert_eq!(size(&backend).await, 0, "the requeued letter is left");
    assert_eq!(purged, 30_001);
}

/// A flow's parent, in the purged queue.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "purge_parent", queue = "q")]
struct Parent;

impl redjob::Job for Parent {
    async fn perform(&self, _: &redjob::JobContext) -> Result<(), redjob::JobError> {
        Ok(())
    }
}

/// Its child, in another queue.
#[derive(serde::Serialize, serde::Deserialize, redjob::Job)]
#[job(name = "purge_child", queue = "c")]
struct Child;

impl redjob::Job for Child {
    async fn perform(&self, _: &redjob::JobContext) -> Result<(), redjob::JobError> {
        Ok(())
    }
}

/// A flow's parent sent while a purge runs (its child succeeded) carries
/// the id its flow gave it when it was enqueued, before the cutoff: the
/// purge deletes it, as a dead letter requeued meanwhile. It went to
/// priority 0 behind the purge's scan, which had passed that set, and was
/// left (deleted only when its flow fired before the scan got there).
#[tokio::test]
async fn a_flows_parent_sent_while_a_purge_runs_is_purged() {
    let server = RedisServer::start();
    let (backend, _) = backend_with_queue(&server).await;
    let client = redjob::Client::connect(&server.url()).await.unwrap();
    let parent = client
        .enqueue_flow(redjob::client::Flow::new(&Parent).child(&Child))
        .await
        .unwrap();
    let child = backend
        .fetch("c", 1, Duration::from_secs(60))
        .await
        .unwrap()
        .jobs
        .remove(0);
    let of = redjob::backend::BatchRef::of_body(&child.body).expect("a flow's child");
    let acked = redjob::backend::Settle {
        acks: vec![(child.id, child.token)],
        batched: vec![(child.id, of)],
        ..Default::default()
    };
    let finished = backend.settle("c", &acked).await.unwrap().batched;
    assert!(!finished.is_empty(), "the child's finish, to count");
    tokio::time::sleep(Duration::from_millis(3)).await;
    // plain jobs at priority 5, for a pass of a few dozen calls
    send_many(&backend, 30_000, |_| SendMessage::new("{}").priority(5)).await;
    let before = size(&backend).await;
    let call = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.purge_queue("q").await })
    };
    // once it deletes, its scan is in priority 5, past priority 0
    while size(&backend).await == before && !call.is_finished() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // the child's finish counted: its flow sends the parent
    backend.batch_settled("c", &finished).await.unwrap();
    assert!(!call.is_finished(), "sent while the purge runs");
    let purged = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the purge ends")
        .unwrap()
        .unwrap();
    assert_eq!(
        size(&backend).await,
        0,
        "the flow's parent {parent} is left"
    );
    assert_eq!(purged, 30_001);
}

/// A periodic job enqueued while a purge runs, of a tick before the
/// purge's cutoff, carries its tick's time (see `Admin::purge_queue`): the
/// purge deletes it, as a dead letter requeued meanwhile. It went to
/// priority 10 behind the purge's scan, which had passed that set, and was
/// left (periodic.lua counted a keyed tick's wait in the mark, not a tick
/// that took a place or had no key).
#[tokio::test]
async fn a_periodic_job_of_a_tick_before_a_purge_enqueued_while_it_runs_is_purged() {
    let server = RedisServer::start();
    let (backend, _) = backend_with_queue(&server).await;
    // a tick of now, enqueued late (a worker's clock behind, a slow call)
    let at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    tokio::time::sleep(Duration::from_millis(3)).await;
    // plain jobs at priority 5, for a pass of a few dozen calls
    send_many(&backend, 30_000, |_| SendMessage::new("{}").priority(5)).await;
    let before = size(&backend).await;
    let call = {
        let backend = backend.clone();
        tokio::spawn(async move { backend.purge_queue("q").await })
    };
    // once it deletes, its scan is in priority 5, past priority 10
    while size(&backend).await == before && !call.is_finished() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let tick = redjob::ops::Tick {
        name: "nightly",
        at_ms,
        catch_up: false,
        next_ms: None,
    };
    let msg = SendMessage::new("{}").priority(10);
    let ticked = backend
        .tick("q", &tick, &msg, &QueueOptions::default())
        .await
        .unwrap();
    assert!(
        matches!(ticked, redjob::ops::Ticked::Enqueued { .. }),
        "{ticked:?}"
    );
    assert!(!call.is_finished(), "enqueued while the purge runs");
    let purged = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the purge ends")
        .unwrap()
        .unwrap();
    assert_eq!(size(&backend).await, 0, "the tick's job is left");
    assert_eq!(purged, 30_001);
}
