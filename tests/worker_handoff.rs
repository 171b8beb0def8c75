//! Hand-offs (Redis): a send leases a job due at once to a worker waiting for its
//! queue and publishes it on the worker's channel, one hop instead of a wake-up
//! and a fetch; fenced like a fetched job, never to a worker that is not there.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Recorder, RedisServer, start_serving, wait_until};
use futures::StreamExt;
use redjob::backend::{Backend, Handed};
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues, SendMessage};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

const LEASE: Duration = Duration::from_secs(30);

/// Records its run.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "handed", queue = "hq")]
struct HandedJob {
    key: u64,
}

impl Job for HandedJob {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

async fn hget(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    field: &str,
) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async(con)
        .await
        .unwrap()
}

async fn zscore(con: &mut redis::aio::MultiplexedConnection, key: &str, id: &str) -> Option<f64> {
    redis::cmd("ZSCORE")
        .arg(key)
        .arg(id)
        .query_async(con)
        .await
        .unwrap()
}

/// A backend on `server` with the queue "q", and a plain connection.
async fn with_queue(
    server: &RedisServer,
) -> (
    redjob::backend::any::AnyBackend,
    redis::aio::MultiplexedConnection,
) {
    let client = Client::connect(&server.url()).await.unwrap();
    let b = client.backend();
    b.create_queue("q", QueueOptions::default()).await.unwrap();
    (b, server.raw().await)
}

/// A worker of `queue` that records its runs in `rec`.
fn recorded_worker(client: &Client, queue: &str, rec: &Recorder) -> Worker {
    Worker::builder(client.backend())
        .queue(queue)
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap()
}

/// A worker of `queue` with `concurrency` running slots that records its
/// runs in `rec`.
fn worker_with_slots(client: &Client, queue: &str, concurrency: usize, rec: &Recorder) -> Worker {
    Worker::builder(client.backend())
        .queue(queue)
        .concurrency(concurrency)
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap()
}

/// The hand-off registration on `queue` and the count of jobs it is good
/// for (`redjob:handoff`, `redjob:handoffs`).
async fn registration(
    con: &redis::aio::MultiplexedConnection,
    queue: &str,
) -> (Option<String>, Option<String>) {
    redis::cmd("HMGET")
        .arg(format!("rsmq:{queue}:Q"))
        .arg("redjob:handoff")
        .arg("redjob:handoffs")
        .query_async(&mut con.clone())
        .await
        .unwrap()
}

/// A client on `server` with `queues` created.
async fn client_with(server: &RedisServer, queues: &[&str]) -> Client {
    let client = Client::connect(&server.url()).await.unwrap();
    for q in queues {
        client
            .queues()
            .create_queue(q, QueueOptions::default())
            .await
            .unwrap();
    }
    client
}

/// Listens as worker `worker` on `queues` in a task; the jobs handed to it
/// land in the returned list.
fn listen_as(
    backend: redjob::backend::any::AnyBackend,
    queues: &[&str],
    worker: &str,
) -> (Arc<Mutex<Vec<Handed>>>, tokio::task::JoinHandle<()>) {
    listening(backend, queues, worker, false)
}

/// `listen_as`, connecting again (after 50 ms) whenever the connection ends
/// when `again`, as a worker's listener does.
fn listening(
    backend: redjob::backend::any::AnyBackend,
    queues: &[&str],
    worker: &str,
    again: bool,
) -> (Arc<Mutex<Vec<Handed>>>, tokio::task::JoinHandle<()>) {
    let got: Arc<Mutex<Vec<Handed>>> = Arc::default();
    let queues: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
    let worker = worker.to_string();
    let sink = got.clone();
    let task = tokio::spawn(async move {
        let handed = move |h: Handed| sink.lock().unwrap().push(h);
        loop {
            let _ = backend
                .listen_handoff(
                    &queues,
                    &worker,
                    &|_| {},
                    &handed,
                    &|| {},
                    &tokio_util::sync::CancellationToken::new(),
                )
                .await;
            if !again {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    (got, task)
}

/// Has Redis close a subscriber whose output passes 1 KB: a hand-off of more
/// is published, then the worker's connection is closed with it unread.
async fn close_subscribers_past_1kb(con: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("pubsub 1024 0 0")
        .query_async(con)
        .await
        .unwrap();
}

/// Fetches in the slow log (a fetch's script call passes 8 keys, or 28 with
/// the priorities', where a withdrawal of the registration passes 1): all
/// of them, or only those that register for a hand-off (passing a
/// registration, "v3 ...").
async fn fetches(con: &mut redis::aio::MultiplexedConnection, registering: bool) -> usize {
    common::slow_script_calls(con)
        .await
        .iter()
        .filter(|args| {
            matches!(args.get(2).map(Vec::as_slice), Some(b"8" | b"28"))
                && (!registering || args.iter().any(|a| a.starts_with(b"v3 ")))
        })
        .count()
}

/// Waits until the channel of `worker` has a subscriber.
async fn subscribed(server: &RedisServer, worker: &str) {
    let mut con = server.raw().await;
    let channel = format!("rsmq:@handoff:{worker}");
    let ok = common::wait_for(Duration::from_secs(5), || {
        let mut con = con.clone();
        let channel = channel.clone();
        async move {
            let r: (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut con)
                .await
                .unwrap();
            r.1 == 1
        }
    })
    .await;
    assert!(ok, "listener subscribed");
    let _ = &mut con;
}

/// A registration in an earlier redjob's form ("<lease ms> <channel> <queue>")
/// is a worker that would read a lease scored at its end as its 500th delivery:
/// a send hands it nothing (it is woken to fetch instead), and the job stays
/// due, undelivered.
#[tokio::test]
async fn a_worker_of_an_earlier_redjob_is_handed_nothing() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    let (got, _task) = listen_as(b.clone(), &["q"], "w1");
    subscribed(&server, "w1").await;
    let _: () = redis::cmd("HSET")
        .arg("rsmq:q:Q")
        .arg("redjob:handoff")
        .arg("30000 rsmq:@handoff:w1 q")
        .arg("redjob:waiting")
        .arg("1")
        .query_async(&mut con)
        .await
        .unwrap();
    let id = Queues::send(&b, "q", SendMessage::new("x")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(got.lock().unwrap().is_empty(), "nothing handed");
    let score = zscore(&mut con, "rsmq:q", id.as_str()).await.unwrap();
    assert_eq!(score.fract(), 0.0, "not leased: {score}");
    let f = b.fetch("q", 4, LEASE).await.unwrap();
    assert_eq!((f.jobs[0].id, f.jobs[0].token.attempt()), (id, 1));
}

#[tokio::test]
async fn a_send_leases_its_job_to_the_waiting_worker_under_a_fence() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    let (got, task) = listen_as(b.clone(), &["q"], "w1");
    subscribed(&server, "w1").await;
    let f = b.fetch_waiting("q", 4, LEASE, "w1", 1).await.unwrap();
    assert!(f.jobs.is_empty());
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", "redjob:handoff")
            .await
            .as_deref(),
        Some("v3 30000 rsmq:@handoff:w1 q"),
        "the idle fetch registered the worker"
    );
    let id = Queues::send(&b, "q", SendMessage::new("body with spaces").priority(0))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || got.lock().unwrap().len() == 1).await);
    let h = got.lock().unwrap()[0].clone();
    assert_eq!(h.queue, "q");
    assert_eq!(h.delivery.id, id);
    assert_eq!(h.delivery.body, b"body with spaces");
    assert_eq!(h.delivery.token.attempt(), 1);
    let score = zscore(&mut con, "rsmq:q", id.as_str()).await.unwrap();
    assert_eq!(
        format!("{score:.3}"),
        h.delivery.token.to_string(),
        "the job is leased under the handed token"
    );
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", "redjob:handoff")
            .await
            .as_deref(),
        Some(""),
        "a registration is good for one job"
    );
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", "totalrecv").await.as_deref(),
        Some("1")
    );
    // leased: no fetch gets it, and the next send is not handed (no registration)
    let again = b.fetch("q", 4, LEASE).await.unwrap();
    assert!(again.jobs.is_empty());
    let second = Queues::send(&b, "q", SendMessage::new("second"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(got.lock().unwrap().len(), 1);
    let fetched = b.fetch("q", 4, LEASE).await.unwrap();
    assert_eq!(
        fetched.jobs.iter().map(|d| d.id).collect::<Vec<_>>(),
        [second]
    );
    // fenced: the handed token renews; a made-up one does not
    let renewed = b
        .extend("q", &[(id, h.delivery.token)], LEASE)
        .await
        .unwrap();
    assert!(renewed[0].is_some());
    let stale = b
        .extend("q", &[(id, h.delivery.token)], LEASE)
        .await
        .unwrap();
    assert!(stale[0].is_none(), "the old token lost its fence");
    task.abort();
}

/// A registration is good for as many jobs as the worker said it can start
/// at once, less what its fetch leased: each send hands one over and counts
/// it down, the last clears it, and the send after that is due for a fetch.
/// A worker handed a job need not fetch again to take the next.
#[tokio::test]
async fn a_registration_is_good_for_as_many_jobs_as_the_worker_can_start() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    let (got, task) = listen_as(b.clone(), &["q"], "w1");
    subscribed(&server, "w1").await;
    // a job due already: the fetch leases it, and registers for 4 - 1 (sent
    // by another handle: one whose last send found no worker waiting makes
    // the lean call, which wakes rather than hands off)
    let other = Client::connect(&server.url()).await.unwrap().backend();
    let first = Queues::send(&other, "q", SendMessage::new("due"))
        .await
        .unwrap();
    let f = b.fetch_waiting("q", 8, LEASE, "w1", 4).await.unwrap();
    assert_eq!(f.jobs.iter().map(|d| d.id).collect::<Vec<_>>(), [first]);
    let reg = "v3 30000 rsmq:@handoff:w1 q".to_owned();
    assert_eq!(
        registration(&con, "q").await,
        (Some(reg.clone()), Some("3".into()))
    );
    let mut sent = Vec::new();
    for (i, left) in [(1, "2"), (2, "1")] {
        sent.push(
            Queues::send(&b, "q", SendMessage::new(format!("j{i}")))
                .await
                .unwrap(),
        );
        assert_eq!(
            registration(&con, "q").await,
            (Some(reg.clone()), Some(left.into())),
            "kept, counted down, after hand-off {i}"
        );
    }
    sent.push(Queues::send(&b, "q", SendMessage::new("j3")).await.unwrap());
    assert_eq!(
        registration(&con, "q").await.0.as_deref(),
        Some(""),
        "the last job it was good for clears it"
    );
    assert!(wait_until(Duration::from_secs(5), || got.lock().unwrap().len() == 3).await);
    let handed: Vec<_> = got.lock().unwrap().iter().map(|h| h.delivery.id).collect();
    assert_eq!(handed, sent);
    // each leased under its own token, delivery 1
    let handed: Vec<Handed> = got.lock().unwrap().clone();
    for h in &handed {
        let score = zscore(&mut con, "rsmq:q", h.delivery.id.as_str())
            .await
            .unwrap();
        assert_eq!(format!("{score:.3}"), h.delivery.token.to_string());
        assert_eq!(h.delivery.token.attempt(), 1);
    }
    // the fourth is not handed: it waits for a fetch
    let fourth = Queues::send(&b, "q", SendMessage::new("j4")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(got.lock().unwrap().len(), 3);
    let fetched = b.fetch("q", 8, LEASE).await.unwrap();
    assert_eq!(
        fetched.jobs.iter().map(|d| d.id).collect::<Vec<_>>(),
        [fourth]
    );
    // a fetch that leases at least what the worker can start registers for one
    let _ = Queues::send(&b, "q", SendMessage::new("j5")).await.unwrap();
    let _ = Queues::send(&b, "q", SendMessage::new("j6")).await.unwrap();
    let f = b.fetch_waiting("q", 8, LEASE, "w1", 2).await.unwrap();
    assert_eq!(f.jobs.len(), 2);
    assert_eq!(
        registration(&con, "q").await,
        (Some(reg.clone()), Some("1".into()))
    );
    // and one for more than 8 registers for 8 (each hand-off's note is a
    // field of the queue's hash: a few)
    let f = b.fetch_waiting("q", 50, LEASE, "w1", 20).await.unwrap();
    assert!(f.jobs.is_empty());
    assert_eq!(registration(&con, "q").await, (Some(reg), Some("8".into())));
    task.abort();
}

/// Jobs handed under one registration, on their way to the worker at once,
/// and lost together with its connection (Redis closes a subscriber whose
/// output passes 1 KB: the first 40 KB message closes it, the second is
/// dropped): each hand-off is noted in a field of its own, and the listener,
/// connected again, is told of both (to release them unless it holds them),
/// not only of the last.
#[tokio::test]
async fn hand_offs_lost_together_are_each_told_to_the_worker() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    b.create_queue("other", QueueOptions::default())
        .await
        .unwrap();
    // the send function's name, from a send's call in the slow log
    common::log_every_command(&mut con).await;
    Queues::send(&b, "other", SendMessage::new("x"))
        .await
        .unwrap();
    let function = common::slow_fcalls(&mut con)
        .await
        .into_iter()
        .find(|c| c[1].starts_with("redjob_send_"))
        .expect("a send's FCALL")[1]
        .clone();
    let (got, task) = listening(b.clone(), &["q"], "w1", true);
    subscribed(&server, "w1").await;
    b.fetch_waiting("q", 4, LEASE, "w1", 3).await.unwrap();
    close_subscribers_past_1kb(&mut con).await;
    // two lone sends in one transaction: both handed before Redis frees the
    // subscriber it closes
    let body = "x".repeat(40 * 1024);
    let suffixes = ["a".repeat(22), "b".repeat(22)];
    let mut pipe = redis::pipe();
    pipe.atomic();
    for suffix in &suffixes {
        pipe.cmd("FCALL")
            .arg(&function)
            .arg(3)
            .arg("rsmq:q")
            .arg("rsmq:q:Q")
            .arg("rsmq:q:leases")
            .arg("rsmq:rt:q")
            .arg(suffix)
            .arg("")
            .arg(&body);
    }
    let replies: Vec<(i64, String, i64)> = pipe.query_async(&mut con).await.unwrap();
    let ids: Vec<String> = replies
        .iter()
        .zip(&suffixes)
        .map(|((ok, prefix, _), suffix)| {
            assert_eq!(*ok, 1);
            format!("{prefix}{suffix}")
        })
        .collect();
    for id in &ids {
        let score = zscore(&mut con, "rsmq:q", id).await.unwrap();
        assert_eq!((score.fract() * 1000.0).round(), 501.0, "handed: {score}");
    }
    // each noted, in a field of its own
    for n in ["3", "2"] {
        let note = hget(
            &mut con,
            "rsmq:q:Q",
            &format!("redjob:handed rsmq:@handoff:w1 {n}"),
        )
        .await;
        assert!(note.is_some(), "the hand-off that found {n} is noted");
    }
    assert!(
        wait_until(Duration::from_secs(5), || got.lock().unwrap().len() >= 2).await,
        "told of both: {:?}",
        got.lock().unwrap()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let told: Vec<Handed> = got.lock().unwrap().clone();
    assert!(told.iter().all(|h| h.lost), "{told:?}");
    let mut lost: Vec<String> = told.iter().map(|h| h.delivery.id.to_string()).collect();
    lost.sort();
    assert_eq!(lost, ids, "each lost hand-off told once");
    // the notes went with the answers
    for n in [" 3", " 2", ""] {
        let note = hget(
            &mut con,
            "rsmq:q:Q",
            &format!("redjob:handed rsmq:@handoff:w1{n}"),
        )
        .await;
        assert_eq!(note, None);
    }
    task.abort();
}

/// Enters worker `id` in the registry, running out at `ends` (Unix ms), with
/// `beat` as its last beat, and notes a hand-off to it in "q"'s hash unless
/// one is there; the note's field.
async fn in_registry(
    con: &mut redis::aio::MultiplexedConnection,
    id: &str,
    ends: u64,
    beat: &str,
) -> String {
    let note = format!("redjob:handed rsmq:@handoff:{id}");
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg("rsmq:{@workers}")
        .arg(ends)
        .arg(id)
        .ignore()
        .cmd("HSET")
        .arg("rsmq:{@workers}:info")
        .arg(id)
        .arg(beat)
        .ignore()
        .cmd("HSETNX")
        .arg("rsmq:q:Q")
        .arg(&note)
        .arg("x 1 0")
        .ignore()
        .query_async(con)
        .await
        .unwrap();
    note
}

/// The notes of what sends handed a worker that died (it never connects
/// again to read them, nor stops to drop them) go when another worker's beat
/// drops its registry entry: on each queue its last beat named; a live
/// worker's notes and the jobs handed to the dead one (leased until their
/// leases run out) stay. With the old beat the dead worker's fields stayed
/// in the queue's hash for good, up to eight a worker.
#[tokio::test]
async fn a_dead_workers_hand_off_notes_go_when_its_registry_entry_does() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    let (_, task) = listen_as(b.clone(), &["q"], "w1");
    subscribed(&server, "w1").await;
    b.fetch_waiting("q", 4, LEASE, "w1", 3).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = Queues::send(&b, "q", SendMessage::new(format!("j{i}")))
            .await
            .unwrap();
        ids.push(id.to_string());
    }
    let notes = [
        "redjob:handed rsmq:@handoff:w1 3",
        "redjob:handed rsmq:@handoff:w1 2",
        "redjob:handed rsmq:@handoff:w1",
    ];
    for note in notes {
        assert!(hget(&mut con, "rsmq:q:Q", note).await.is_some(), "{note}");
    }
    let mut scores = Vec::new();
    for id in &ids {
        scores.push(zscore(&mut con, "rsmq:q", id).await.expect("leased"));
    }
    // w1 dies: its listener goes without a word, and its registry entry ran
    // out long ago; w2's entry runs for ten more minutes
    task.abort();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    in_registry(
        &mut con,
        "w1",
        1,
        r#"{"id":"w1","queues":["q","../bad name"]}"#,
    )
    .await;
    let live = in_registry(
        &mut con,
        "w2",
        now_ms + 600_000,
        r#"{"id":"w2","queues":["q"]}"#,
    )
    .await;
    // a listing skips w1 and leaves its entry and notes to a worker's beat
    let listed: Vec<String> = b
        .workers()
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.id)
        .collect();
    assert!(!listed.contains(&"w1".to_string()), "{listed:?}");
    assert!(zscore(&mut con, "rsmq:{@workers}", "w1").await.is_some());
    assert!(hget(&mut con, "rsmq:q:Q", notes[0]).await.is_some());
    // a worker of "q" beats (its first beat is a full one)
    let w = start_serving(
        Worker::builder(b.clone())
            .queue("q")
            .handle_signals(false)
            .build()
            .unwrap(),
    )
    .await;
    let swept = common::wait_for(Duration::from_secs(10), || {
        let mut con = con.clone();
        async move {
            let left: Vec<Option<String>> = redis::cmd("HMGET")
                .arg("rsmq:q:Q")
                .arg(&notes[..])
                .query_async(&mut con)
                .await
                .unwrap();
            left.iter().all(Option::is_none)
        }
    })
    .await;
    assert!(swept, "the dead worker's notes are dropped");
    let gone: Option<f64> = zscore(&mut con, "rsmq:{@workers}", "w1").await;
    assert_eq!(gone, None, "its entry went with them");
    assert!(zscore(&mut con, "rsmq:{@workers}", "w2").await.is_some());
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", &live).await.as_deref(),
        Some("x 1 0")
    );
    for (id, score) in ids.iter().zip(&scores) {
        assert_eq!(
            zscore(&mut con, "rsmq:q", id).await,
            Some(*score),
            "{id} stays leased"
        );
    }
    // the worker's leave drops a worker gone since its beat, and its notes
    let w3 = in_registry(
        &mut con,
        "w3",
        1,
        r#"{"id":"w3","queues":["q"],"running":[{"queue":"x","id":"y"}]}"#,
    )
    .await;
    w.stop().await;
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", &w3).await,
        None,
        "dropped by the leave"
    );
    assert_eq!(zscore(&mut con, "rsmq:{@workers}", "w3").await, None);
}

/// A producer whose last send to a queue found no worker waiting sends the
/// next lone job by the lean call (two keys, without the lease counts,
/// BENCHMARKS.md Speed II part 21). A worker that began to wait since is
/// woken by it (on the queue's realtime channel), not handed the job, which
/// stays due for its fetch; the reply says a worker waited, so the
/// producer's next send passes the lease counts again (three keys), and
/// hands off.
#[tokio::test]
async fn a_lean_send_wakes_a_worker_that_began_to_wait_and_the_next_hands_off() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .arg("slowlog-max-len")
        .arg(1000)
        .query_async(&mut con)
        .await
        .unwrap();
    // no worker yet: the first send (with the lease counts, loading the
    // function) finds none waiting, the second is lean
    let one = Queues::send(&b, "q", SendMessage::new("one"))
        .await
        .unwrap();
    assert_eq!(
        common::send_calls(&mut con)
            .await
            .last()
            .map(String::as_str),
        Some("3")
    );
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .unwrap();
    let two = Queues::send(&b, "q", SendMessage::new("two"))
        .await
        .unwrap();
    assert_eq!(common::send_calls(&mut con).await, ["2"]);
    // a worker takes both and waits, registered for a hand-off
    let (got, task) = listen_as(b.clone(), &["q"], "w1");
    subscribed(&server, "w1").await;
    let raw = redis::Client::open(server.url()).unwrap();
    let mut realtime = raw.get_async_pubsub().await.unwrap();
    realtime.subscribe("rsmq:rt:q").await.unwrap();
    let f = b.fetch_waiting("q", 4, LEASE, "w1", 1).await.unwrap();
    assert_eq!(f.jobs.iter().map(|d| d.id).collect::<Vec<_>>(), [one, two]);
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", "redjob:waiting")
            .await
            .as_deref(),
        Some("1")
    );
    // the lean send wakes it
    let three = Queues::send(&b, "q", SendMessage::new("three"))
        .await
        .unwrap();
    let mut woken = realtime.on_message();
    let m = tokio::time::timeout(Duration::from_secs(5), woken.next())
        .await
        .expect("woken on the realtime channel")
        .unwrap();
    assert_eq!(m.get_payload::<u64>().unwrap(), 3, "the queue's length");
    drop(woken);
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", "redjob:waiting")
            .await
            .as_deref(),
        Some("0"),
        "the wake-up is taken"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(got.lock().unwrap().is_empty(), "nothing handed");
    let f = b.fetch_waiting("q", 4, LEASE, "w1", 1).await.unwrap();
    assert_eq!(f.jobs.iter().map(|d| d.id).collect::<Vec<_>>(), [three]);
    // the worker waits again: the call with the lease counts hands it the next
    let four = Queues::send(&b, "q", SendMessage::new("four"))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || got.lock().unwrap().len() == 1).await);
    assert_eq!(got.lock().unwrap()[0].delivery.id, four);
    assert_eq!(common::send_calls(&mut con).await, ["2", "2", "3"]);
    task.abort();
}

/// The lean call is made per queue: a producer whose last send went to a
/// queue without a waiting worker still hands its next job to the worker
/// waiting on another queue.
#[tokio::test]
async fn a_send_to_another_queue_does_not_make_the_next_lean() {
    let server = RedisServer::start();
    let (b, _con) = with_queue(&server).await;
    b.create_queue("r", QueueOptions::default()).await.unwrap();
    let (got, task) = listen_as(b.clone(), &["q"], "w1");
    subscribed(&server, "w1").await;
    for round in 0..2 {
        b.fetch_waiting("q", 4, LEASE, "w1", 1).await.unwrap();
        // twice to "r", whose second send is lean, then one to "q"
        Queues::send(&b, "r", SendMessage::new("r")).await.unwrap();
        Queues::send(&b, "r", SendMessage::new("r")).await.unwrap();
        let id = Queues::send(&b, "q", SendMessage::new("q")).await.unwrap();
        assert!(
            wait_until(Duration::from_secs(5), || got.lock().unwrap().len()
                == round + 1)
            .await,
            "handed in round {round}"
        );
        assert_eq!(got.lock().unwrap()[round].delivery.id, id);
    }
    task.abort();
}

/// A handle keeps several queues as sent to with no worker waiting (a slot
/// each, by their names' hashes): a producer that sends to two queues in
/// turn, no worker waiting on either, makes the lean call to both after its
/// first send to each.
#[tokio::test]
async fn a_producer_sending_to_two_queues_in_turn_keeps_both_lean() {
    use std::hash::{Hash, Hasher};
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    // two names in different slots, as send.rs's `lean_slot` of `queue_id`
    // takes them (if that changes, this finds a pair that may share one, and
    // fails)
    let slot = |q: &str| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        q.hash(&mut h);
        ((h.finish() | 1) >> 1) % 8
    };
    let first = "r0".to_owned();
    let second = (1..50)
        .map(|i| format!("r{i}"))
        .find(|n| slot(n) != slot(&first))
        .unwrap();
    for q in [&first, &second] {
        b.create_queue(q, QueueOptions::default()).await.unwrap();
    }
    // the send's function loaded before the calls are counted
    Queues::send(&b, "q", SendMessage::new("load"))
        .await
        .unwrap();
    let _: () = redis::pipe()
        .cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .arg("slowlog-max-len")
        .arg(1000)
        .cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut con)
        .await
        .unwrap();
    for _ in 0..3 {
        for q in [&first, &second] {
            Queues::send(&b, q, SendMessage::new("x")).await.unwrap();
        }
    }
    assert_eq!(
        common::send_calls(&mut con).await,
        ["3", "3", "2", "2", "2", "2"]
    );
}

#[tokio::test]
async fn no_job_is_handed_to_a_worker_that_does_not_listen() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    // a pattern subscriber (as an RSMQ realtime client may be) does not count
    let raw = redis::Client::open(server.url()).unwrap();
    let mut pattern = raw.get_async_pubsub().await.unwrap();
    pattern.psubscribe("rsmq:*").await.unwrap();
    b.fetch_waiting("q", 4, LEASE, "gone", 1).await.unwrap();
    let id = Queues::send(&b, "q", SendMessage::new("x")).await.unwrap();
    let f = b.fetch("q", 4, LEASE).await.unwrap();
    assert_eq!(
        f.jobs.iter().map(|d| d.id).collect::<Vec<_>>(),
        [id],
        "due as sent, not leased to the missing worker"
    );
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", "redjob:handoff")
            .await
            .as_deref(),
        Some(""),
        "the stale registration was dropped"
    );
    let mut seen = pattern.on_message();
    let first = tokio::time::timeout(Duration::from_millis(200), seen.next()).await;
    if let Ok(Some(m)) = first {
        assert!(
            !m.get_channel_name().contains("@handoff"),
            "nothing published on the hand-off channel: {}",
            m.get_channel_name()
        );
    }
}

#[tokio::test]
async fn delayed_paused_and_batched_sends() {
    let server = RedisServer::start();
    let (b, mut con) = with_queue(&server).await;
    let (got, task) = listen_as(b.clone(), &["q"], "w1");
    subscribed(&server, "w1").await;

    // a delayed job is not handed over; the registration stays for the next
    b.fetch_waiting("q", 4, LEASE, "w1", 1).await.unwrap();
    let later = Queues::send(
        &b,
        "q",
        SendMessage::new("later").delay(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let s = zscore(&mut con, "rsmq:q", later.as_str()).await.unwrap();
    assert!(s < 4e12, "scheduled, not leased: {s}");
    assert!(
        hget(&mut con, "rsmq:q:Q", "redjob:handoff")
            .await
            .is_some_and(|r| r.contains("w1"))
    );

    // a paused queue hands nothing over
    b.pause("q").await.unwrap();
    let held = Queues::send(&b, "q", SendMessage::new("held"))
        .await
        .unwrap();
    let s = zscore(&mut con, "rsmq:q", held.as_str()).await.unwrap();
    assert!(s < 4e12, "due, not leased: {s}");
    b.resume("q").await.unwrap();
    let f = b.fetch("q", 4, LEASE).await.unwrap();
    assert_eq!(f.jobs.iter().map(|d| d.id).collect::<Vec<_>>(), [held]);

    // a batch: its first job is handed over, the rest wait for a fetch
    b.fetch_waiting("q", 4, LEASE, "w1", 1).await.unwrap();
    let ids = b
        .send_batch(
            "q",
            &[
                SendMessage::new("a"),
                SendMessage::new("b"),
                SendMessage::new("c"),
            ],
        )
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || got.lock().unwrap().len() == 1).await);
    assert_eq!(got.lock().unwrap()[0].delivery.id, ids[0]);
    let f = b.fetch("q", 4, LEASE).await.unwrap();
    assert_eq!(f.jobs.iter().map(|d| d.id).collect::<Vec<_>>(), ids[1..]);

    // a fetch that leases all it asks for withdraws the registration
    b.fetch_waiting("q", 4, LEASE, "w1", 1).await.unwrap();
    b.send_batch("q", &[SendMessage::new("d"), SendMessage::new("e")])
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || got.lock().unwrap().len() == 2).await);
    let full = b.fetch_waiting("q", 1, LEASE, "w1", 1).await.unwrap();
    assert_eq!(full.jobs.len(), 1);
    assert_eq!(
        hget(&mut con, "rsmq:q:Q", "redjob:handoff")
            .await
            .as_deref(),
        Some("")
    );
    Queues::send(&b, "q", SendMessage::new("f")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        got.lock().unwrap().len(),
        2,
        "no hand-off after a full fetch"
    );
    task.abort();
}

#[tokio::test]
async fn an_idle_worker_is_handed_each_job_by_its_send() {
    each_job_handed_to_an_idle_worker("").await;
}

/// Over RESP3 the worker reads its hand-offs through the `redis` crate's
/// pub/sub connection rather than its own socket: it gets them all the same.
#[tokio::test]
async fn an_idle_worker_on_resp3_is_handed_each_job_by_its_send() {
    each_job_handed_to_an_idle_worker("?protocol=resp3").await;
}

async fn each_job_handed_to_an_idle_worker(url_query: &str) {
    let server = RedisServer::start();
    // created first: a queue's creation publishes a wake-up of its own
    let client = Client::connect(&format!("{}{url_query}", server.url()))
        .await
        .unwrap();
    client
        .queues()
        .create_queue("hq", QueueOptions::default())
        .await
        .unwrap();
    let raw = redis::Client::open(server.url()).unwrap();
    let mut observer = raw.get_async_pubsub().await.unwrap();
    observer.psubscribe("rsmq:*").await.unwrap();
    let rec = Recorder::default();
    let w = worker_with_slots(&client, "hq", 4, &rec);
    let w = start_serving(w).await;
    // the listener's connection speaks the protocol the URL asks for
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut server.raw().await)
        .await
        .unwrap();
    let listener = clients
        .lines()
        .find(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0"))
        .expect("the worker's listener is subscribed");
    let resp = if url_query.is_empty() {
        "resp=2"
    } else {
        "resp=3"
    };
    assert!(listener.split(' ').any(|f| f == resp), "{listener}");
    const N: u64 = 20;
    let mut con = server.raw().await;
    common::log_every_command(&mut con).await;
    for key in 0..N {
        client.enqueue(&HandedJob { key }).await.unwrap();
        assert!(wait_until(Duration::from_secs(5), || rec.len() as u64 == key + 1).await);
        // (time for the job to end, as for a worker that idles between jobs)
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // its registration is good for as many jobs as it has running slots (4):
    // it registers again once every 4 jobs, not after each
    let fetches = fetches(&mut con, true).await;
    assert!(
        fetches <= N as usize / 4 + 1,
        "{fetches} registering fetches for {N} jobs"
    );
    w.stop().await;
    let counts = rec.counts();
    assert_eq!(counts.len() as u64, N);
    assert!(
        counts.values().all(|n| *n == 1),
        "each ran once: {counts:?}"
    );
    let mut handed = 0;
    let mut woken = 0;
    let mut seen = observer.on_message();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(200), seen.next()).await {
        let ch = m.get_channel_name().to_string();
        if ch.starts_with("rsmq:@handoff:") {
            handed += 1;
        } else if ch == "rsmq:rt:hq" {
            woken += 1;
        }
    }
    assert_eq!(
        (handed, woken),
        (N, 0),
        "every job went straight to the idle worker, none by a wake-up and a fetch"
    );
}

/// Records its start, then runs for three seconds.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "handed_slow", queue = "busy")]
struct SlowJob {
    key: u64,
}

impl Job for SlowJob {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok(())
    }
}

/// A worker of queue "busy" with `slots` running slots, idle and registered
/// for as many hand-offs; with its server, a client, a connection and its
/// record.
async fn idle_busy_worker(
    slots: usize,
) -> (
    RedisServer,
    Client,
    redis::aio::MultiplexedConnection,
    Recorder,
    common::Running,
) {
    let server = RedisServer::start();
    let client = client_with(&server, &["busy"]).await;
    let con = server.raw().await;
    let rec = Recorder::default();
    let w = start_serving(worker_with_slots(&client, "busy", slots, &rec)).await;
    let want = slots.to_string();
    assert!(
        common::wait_for(Duration::from_secs(5), || async {
            registration(&con, "busy").await.1.as_deref() == Some(want.as_str())
        })
        .await,
        "registered for its {slots} slots: {:?}",
        registration(&con, "busy").await
    );
    (server, client, con, rec, w)
}

/// A worker running handed jobs stays registered while it has running slots
/// free: its registration is good for as many jobs as it has slots, and each
/// send counts it down, so every job is handed to it without a fetch between
/// (before, a registration was good for one job, and the worker fetched to
/// register again after each). The last slot's job clears it.
#[tokio::test]
async fn a_worker_running_a_handed_job_stays_registered_for_the_next() {
    let (_server, client, mut con, rec, w) = idle_busy_worker(3).await;
    let reg = registration(&con, "busy").await.0.unwrap();
    assert!(reg.starts_with("v3 "), "{reg}");
    common::log_every_command(&mut con).await;
    let started = std::time::Instant::now();
    for (key, left) in [(1, "2"), (2, "1")] {
        client.enqueue(&SlowJob { key }).await.unwrap();
        assert!(wait_until(Duration::from_secs(2), || rec.len() == key as usize).await);
        assert_eq!(
            registration(&con, "busy").await,
            (Some(reg.clone()), Some(left.to_owned())),
            "still registered while job {key} runs"
        );
    }
    client.enqueue(&SlowJob { key: 3 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(2), || rec.len() == 3).await);
    // all three handed while the first (three seconds) still ran
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(registration(&con, "busy").await.0.as_deref(), Some(""));
    assert_eq!(
        fetches(&mut con, true).await,
        0,
        "no fetch registered it again"
    );
    let attempts: Option<String> = hget(&mut con, "rsmq:busy:Q", "totalrecv").await;
    assert_eq!(attempts.as_deref(), Some("3"), "each delivered once");
    w.stop().await;
}

/// A registration the sends count higher than the worker does (a hand-off
/// of an earlier registration read after the fetch that made this one) is
/// withdrawn all the same when the worker's running slots fill: the next
/// send is not handed to a worker that must release it.
#[tokio::test]
async fn a_full_worker_withdraws_a_registration_the_sends_count_higher() {
    let (_server, client, mut con, rec, w) = idle_busy_worker(2).await;
    // the sends count one more than the worker
    let _: () = redis::cmd("HSET")
        .arg("rsmq:busy:Q")
        .arg("redjob:handoffs")
        .arg("3")
        .query_async(&mut con)
        .await
        .unwrap();
    client.enqueue(&SlowJob { key: 1 }).await.unwrap();
    client.enqueue(&SlowJob { key: 2 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(2), || rec.len() == 2).await);
    // both slots run a job of three seconds: the registration goes
    assert!(
        common::wait_for(Duration::from_secs(1), || async {
            registration(&con, "busy").await.0.as_deref() == Some("")
        })
        .await,
        "withdrawn once the slots filled: {:?}",
        registration(&con, "busy").await
    );
    client.enqueue(&SlowJob { key: 3 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hget(&mut con, "rsmq:busy:Q", "totalrecv").await.as_deref(),
        Some("2"),
        "the third job was not handed to the full worker"
    );
    assert!(wait_until(Duration::from_secs(8), || rec.len() == 3).await);
    w.stop().await;
}

#[tokio::test]
async fn a_job_handed_to_a_worker_with_no_free_slot_goes_to_another_waiting_worker() {
    let server = RedisServer::start();
    let client = client_with(&server, &["busy", "hq"]).await;
    let mut con = server.raw().await;
    let rec = Recorder::default();
    // a, one slot, on busy and hq, registered on hq; b, waiting on hq after
    // it, in line behind it
    let a = Worker::builder(client.backend())
        .queues(["busy", "hq"])
        .concurrency(1)
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap();
    let a = start_serving(a).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reg_a = hget(&mut con, "rsmq:hq:Q", "redjob:handoff").await;
    let b = recorded_worker(&client, "hq", &rec);
    let b_reg = format!(" v3 30000 rsmq:@handoff:{} hq", b.id());
    let b = start_serving(b).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let line = hget(&mut con, "rsmq:hq:Q", "redjob:line").await;
    assert_eq!(
        hget(&mut con, "rsmq:hq:Q", "redjob:handoff").await,
        reg_a,
        "a stays registered"
    );
    assert!(
        reg_a.is_some() && line.as_ref().is_some_and(|l| l.ends_with(&b_reg)),
        "b in line behind a: {reg_a:?}, line {line:?}"
    );
    // a's only slot runs a slow job; then a job for hq is sent (handed to a,
    // or to b once a withdrew)
    client.enqueue(&SlowJob { key: 1 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    let sent = std::time::Instant::now();
    client.enqueue(&HandedJob { key: 2 }).await.unwrap();
    // it must not wait behind the slow job (3 s) while b is idle
    assert!(
        wait_until(Duration::from_secs(2), || rec.len() == 2).await,
        "the job for hq waited for a's slot"
    );
    assert!(sent.elapsed() < Duration::from_secs(2));
    a.stop().await;
    b.stop().await;
    let counts = rec.counts();
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(
        counts.values().all(|n| *n == 1),
        "each ran once: {counts:?}"
    );
}

/// The state of job `id` of queue "hq": None when gone (ran and acked), else
/// whether it is leased and its delivery count (a lease's score carries 500 +
/// its count in the thousandths).
async fn job_state(con: &mut redis::aio::MultiplexedConnection, id: &str) -> Option<(bool, u32)> {
    let score = zscore(con, "rsmq:hq", id).await?;
    let t = (score.fract() * 1000.0).round() as u32;
    Some(if t >= 500 {
        (true, t - 500)
    } else {
        (false, t)
    })
}

#[tokio::test]
async fn a_job_handed_as_the_worker_stops_is_released_uncounted() {
    let server = RedisServer::start();
    let client = client_with(&server, &["hq"]).await;
    let mut con = server.raw().await;
    let rec = Recorder::default();
    // each round: an idle worker registered for a hand-off stops just as a send
    // hands it a job; the job must run, or be back in the queue at once with
    // its delivery not counted, never wait out its lease
    const ROUNDS: u64 = 12;
    let mut released = 0;
    for key in 0..ROUNDS {
        let w = recorded_worker(&client, "hq", &rec);
        let worker = w.id().to_string();
        let w = start_serving(w).await;
        subscribed(&server, &worker).await;
        // registered (not the stale registration of the last round's worker)
        assert!(
            common::wait_for(Duration::from_secs(5), || {
                let mut con = con.clone();
                let worker = worker.clone();
                async move {
                    hget(&mut con, "rsmq:hq:Q", "redjob:handoff")
                        .await
                        .is_some_and(|r| r.contains(&worker))
                }
            })
            .await,
            "the idle worker registered"
        );
        let id = client.enqueue(&HandedJob { key }).await.unwrap();
        w.stop().await;
        match job_state(&mut con, id.as_str()).await {
            None => assert_eq!(rec.counts().get(&key), Some(&1), "job {key} ran once"),
            Some((leased, count)) => {
                assert!(
                    !leased && count == 0,
                    "round {key}: the job waits (leased {leased}, delivery {count}) after its worker stopped"
                );
                // the next round's worker takes it
                released += 1;
            }
        }
    }
    let w = start_serving(recorded_worker(&client, "hq", &rec)).await;
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() as u64 == ROUNDS).await,
        "every job ran ({released} released at a stop)"
    );
    w.stop().await;
    assert!(rec.counts().values().all(|n| *n == 1), "{:?}", rec.counts());
}

/// Records its run; runs once at most (`max_attempts = 1`); a body of 40 KB.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "handed_once", queue = "hq", max_attempts = 1)]
struct OnceJob {
    key: u64,
    pad: String,
}

impl Job for OnceJob {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

/// A worker serving "hq" on `server`, its runs recorded in `rec`, once it
/// listens and its idle dispatcher has registered for a hand-off.
async fn registered_worker(
    server: &RedisServer,
    client: &Client,
    con: &redis::aio::MultiplexedConnection,
    rec: &Recorder,
) -> common::Running {
    let w = recorded_worker(client, "hq", rec);
    let worker = w.id().to_string();
    let w = start_serving(w).await;
    subscribed(server, &worker).await;
    assert!(
        common::wait_for(Duration::from_secs(5), || {
            let mut con = con.clone();
            let worker = worker.clone();
            async move {
                hget(&mut con, "rsmq:hq:Q", "redjob:handoff")
                    .await
                    .is_some_and(|r| r.contains(&worker))
            }
        })
        .await,
        "the idle worker registered"
    );
    w
}

#[tokio::test]
async fn a_hand_off_lost_with_the_connection_runs_at_once_as_attempt_one() {
    let server = RedisServer::start();
    let client = client_with(&server, &["hq"]).await;
    let mut con = server.raw().await;
    // Redis closes a subscriber whose output passes 1 KB: the 40 KB hand-off is
    // published, then the worker's connection is closed with it unread
    close_subscribers_past_1kb(&mut con).await;
    let rec = Recorder::default();
    let w = registered_worker(&server, &client, &con, &rec).await;
    let sent = std::time::Instant::now();
    client
        .enqueue(&OnceJob {
            key: 1,
            pad: "x".repeat(40 * 1024),
        })
        .await
        .unwrap();
    // the lease is 30 s: the job must not wait it out
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() == 1).await,
        "never ran: dead letters {:?}",
        client.backend().dead_letters("hq", 10).await.unwrap()
    );
    let took = sent.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.stop().await;
    let runs = rec.runs();
    assert_eq!(runs.len(), 1, "ran once: {runs:?}");
    assert_eq!(runs[0].attempt, 1, "the lost hand-off was no attempt");
    assert!(
        client
            .backend()
            .dead_letters("hq", 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing dead-lettered"
    );
    println!("a lost hand-off ran {took:?} after its send");
}

/// A send while the worker's listener is away (here: its connection closed,
/// and it waits out its backoff before it subscribes again) reaches no one:
/// no hand-off (nobody listens on the worker's channel) and no wake-up heard.
/// Once subscribed again the worker fetches at once (the listener wakes every
/// dispatcher when it subscribes) rather than at its next poll (60 s).
#[tokio::test]
async fn a_send_while_the_listener_reconnects_runs_once_it_is_back() {
    let server = RedisServer::start();
    let client = client_with(&server, &["hq"]).await;
    let mut con = server.raw().await;
    let rec = Recorder::default();
    let w = registered_worker(&server, &client, &con, &rec).await;
    // the listener's connection closes: it wakes the dispatcher (which fetches
    // nothing) and tries again after its backoff of 100 ms
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(killed, 1, "the worker's listener");
    tokio::time::sleep(Duration::from_millis(40)).await;
    let sent = std::time::Instant::now();
    client.enqueue(&HandedJob { key: 1 }).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() == 1).await,
        "the job sent while the listener was away did not run within 5 s"
    );
    let took = sent.elapsed();
    w.stop().await;
    assert_eq!(rec.runs()[0].attempt, 1);
    println!("a job sent while the listener reconnected ran {took:?} after its send");
}

#[tokio::test]
async fn a_worker_whose_running_slots_fill_withdraws_its_registrations() {
    let server = RedisServer::start();
    let client = client_with(&server, &["busy", "hq"]).await;
    let mut con = server.raw().await;
    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queues(["busy", "hq"])
        .concurrency(1)
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap();
    let worker = w.id().to_string();
    let w = start_serving(w).await;
    let registered = |queue: &'static str| {
        let con = con.clone();
        let worker = worker.clone();
        async move {
            let mut con = con.clone();
            hget(&mut con, &format!("rsmq:{queue}:Q"), "redjob:handoff")
                .await
                .is_some_and(|r| r.contains(&worker))
        }
    };
    assert!(
        common::wait_for(Duration::from_secs(5), || registered("hq")).await,
        "the idle worker registered on hq"
    );
    // its only running slot takes a slow job of the other queue
    client.enqueue(&SlowJob { key: 1 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!registered("hq").await, "still registered on hq while full");
    let before = hget(&mut con, "rsmq:hq:Q", "redjob:leased").await;
    for key in 2..5 {
        client.enqueue(&HandedJob { key }).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        hget(&mut con, "rsmq:hq:Q", "redjob:leased").await,
        before,
        "a job was handed to the full worker (and released)"
    );
    assert!(
        wait_until(Duration::from_secs(8), || rec.len() == 4).await,
        "{:?}",
        rec.runs()
    );
    w.stop().await;
    assert!(rec.counts().values().all(|n| *n == 1), "{:?}", rec.counts());
}

/// A send's pipeline starts with a `TIME` whose reply it drops while workers
/// wait for its queue: the sender's connection is then listed for a reply
/// before the send's `PUBLISH` lists the waiting worker's, and Redis writes the
/// connection it listed last first, so the hand-off goes out before the reply
/// to the send (rather than after a write that wakes the sender, which put it
/// 0.05 ms later at p50 in the peer harness: BENCHMARKS.md, Speed II part 14).
/// A send's reply says whether a worker waited; a send after one that found
/// none has no `TIME`. `MONITOR` shows the commands.
#[tokio::test]
async fn a_send_is_piped_behind_a_time_while_workers_wait() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let server = RedisServer::start();
    let (b, con) = with_queue(&server).await;
    // the send's function loaded by another handle first (a send that finds
    // it missing loads it and is sent again)
    let other = redjob::queue::Rsmq::connect(&server.url()).await.unwrap();
    other.send("q", SendMessage::new("0")).await.unwrap();
    let port = server.url().rsplit(':').next().unwrap().to_string();
    let mut monitor = BufReader::new(
        tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
            .await
            .unwrap(),
    );
    monitor.get_mut().write_all(b"MONITOR\r\n").await.unwrap();
    let mut line = String::new();
    monitor.read_line(&mut line).await.unwrap();
    assert_eq!(line, "+OK\r\n");
    // what came before each send on its connection: a TIME, or not
    let mut next_send = async || {
        let mut last: std::collections::HashMap<String, String> = Default::default();
        loop {
            line.clear();
            monitor.read_line(&mut line).await.unwrap();
            // "+<time> [<db> <client>] "<command>" ...": not its script's
            // commands ("[0 lua]")
            let Some(client) = line.split(['[', ']']).nth(1) else {
                continue;
            };
            if client.ends_with(" lua") {
                continue;
            }
            let command = line.split('"').nth(1).unwrap_or_default().to_uppercase();
            // a plain send's function or script, a unique send's script
            if (command == "FCALL" || command == "EVALSHA") && line.contains("\"rsmq:q:Q\"") {
                return last.get(client).is_some_and(|c| c == "TIME");
            }
            last.insert(client.to_string(), command);
        }
    };
    let send = async |body: &str| {
        Queues::send(&b, "q", SendMessage::new(body)).await.unwrap();
    };
    let waiting = async || {
        let mut con = con.clone();
        let _: () = redis::cmd("HSET")
            .arg("rsmq:q:Q")
            .arg("redjob:waiting")
            .arg("1")
            .query_async(&mut con)
            .await
            .unwrap();
    };
    let within = Duration::from_secs(5);
    // at first, as if a worker waited
    send("1").await;
    let timed = tokio::time::timeout(within, next_send()).await.unwrap();
    assert!(timed, "the first send starts with a TIME");
    // that send found no worker waiting
    send("2").await;
    let timed = tokio::time::timeout(within, next_send()).await.unwrap();
    assert!(!timed, "no TIME once no worker waited");
    // a worker waits to be woken (its fetch found nothing)
    waiting().await;
    send("3").await;
    let timed = tokio::time::timeout(within, next_send()).await.unwrap();
    assert!(!timed, "the send that finds it waiting was sent without");
    send("4").await;
    let timed = tokio::time::timeout(within, next_send()).await.unwrap();
    assert!(timed, "the send after it starts with a TIME");
    // a unique send, whose reply does not say whether a worker waited, goes
    // without (a producer of unique jobs alone would otherwise always send one)
    waiting().await;
    send("5").await;
    let timed = tokio::time::timeout(within, next_send()).await.unwrap();
    assert!(!timed, "sent before the flag is back");
    let unique = SendMessage::new("6").unique(redjob::queue::Unique::new("k"));
    Queues::send(&b, "q", unique).await.unwrap();
    let timed = tokio::time::timeout(within, next_send()).await.unwrap();
    assert!(!timed, "a unique send without a TIME");
    send("7").await;
    let timed = tokio::time::timeout(within, next_send()).await.unwrap();
    assert!(timed, "the plain send after it with one");
}

/// Sleeps 400 ms on queue "hq", recording its start.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "napping", queue = "hq")]
struct NapJob {
    key: u64,
}

impl Job for NapJob {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        tokio::time::sleep(Duration::from_millis(400)).await;
        Ok(())
    }
}

/// Idle workers of one queue wait in line for hand-offs, each registered for
/// its free slots: a burst of sends hands one job to each in turn, and wakes
/// none of them to fetch (a send that found no registration woke every idle
/// worker of the queue, each of which fetched for the one job: audit W2
/// measured 20 fetches a job at 40 idle workers).
#[tokio::test]
async fn idle_workers_of_one_queue_are_handed_a_burst_in_turn_without_fetching() {
    const WORKERS: usize = 12;
    let server = RedisServer::start();
    let client = client_with(&server, &["hq"]).await;
    let mut con = server.raw().await;
    // a record of each worker's runs
    let recs: Vec<Recorder> = (0..WORKERS).map(|_| Recorder::default()).collect();
    let mut running = Vec::new();
    for rec in &recs {
        running.push(start_serving(worker_with_slots(&client, "hq", 1, rec)).await);
    }
    let started = || recs.iter().map(Recorder::len).sum::<usize>();
    // each has fetched, found nothing and registered
    tokio::time::sleep(Duration::from_millis(500)).await;
    common::log_every_command(&mut con).await;
    let sent = std::time::Instant::now();
    for key in 0..WORKERS as u64 {
        client.enqueue(&NapJob { key }).await.unwrap();
    }
    // every job started before the first ended
    assert!(
        wait_until(Duration::from_secs(5), || started() == WORKERS).await,
        "{} started",
        started()
    );
    let fetches = fetches(&mut con, false).await;
    assert!(
        sent.elapsed() < Duration::from_millis(400),
        "the burst took {:?}: jobs ended before it was counted",
        sent.elapsed()
    );
    assert!(
        fetches <= 2,
        "{fetches} fetches for a burst of {WORKERS} jobs to {WORKERS} idle workers"
    );
    let each: Vec<usize> = recs.iter().map(Recorder::len).collect();
    assert!(each.iter().all(|n| *n == 1), "one job a worker: {each:?}");
    for w in running {
        w.stop().await;
    }
}

/// A one-slot worker of "busy" and "hq" and a worker of "hq", started in
/// the order `a_first` says, both idle on hq: the first registered in place,
/// the second in line behind it. Returns them (the one-slot worker first)
/// with the one-slot worker's registration.
async fn one_slot_and_idle(
    client: &Client,
    rec: &Recorder,
    a_first: bool,
) -> (common::Running, common::Running, String) {
    let a = Worker::builder(client.backend())
        .queues(["busy", "hq"])
        .concurrency(1)
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap();
    let a_reg = format!("v3 30000 rsmq:@handoff:{} hq", a.id());
    let b = recorded_worker(client, "hq", rec);
    let (a, b) = if a_first {
        let a = start_serving(a).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        (a, start_serving(b).await)
    } else {
        let b = start_serving(b).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        (start_serving(a).await, b)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    (a, b, a_reg)
}

/// A worker whose running slots fill withdraws its registration wherever it
/// is: in place, where the next in line takes its place, or in line, which
/// it leaves.
#[tokio::test]
async fn a_full_worker_leaves_the_line_or_passes_its_place_on() {
    for a_first in [true, false] {
        let server = RedisServer::start();
        let client = client_with(&server, &["busy", "hq"]).await;
        let con = server.raw().await;
        let rec = Recorder::default();
        let (a, b, a_reg) = one_slot_and_idle(&client, &rec, a_first).await;
        let fields = || async {
            let line: Option<String> = hget(&mut con.clone(), "rsmq:hq:Q", "redjob:line").await;
            let (head, left) = registration(&con, "hq").await;
            (head, left, line)
        };
        let (head, left, line) = fields().await;
        let (head, line) = (head.unwrap(), line.unwrap());
        if a_first {
            assert_eq!(head, a_reg, "a in place");
            assert_eq!(left.as_deref(), Some("1+"), "a's count, a line behind");
            assert!(
                line.starts_with("8 v3 ") && !line.contains('\n'),
                "b in line: {line}"
            );
        } else {
            assert!(
                head.starts_with("v3 ") && head != a_reg,
                "b in place: {head}"
            );
            assert_eq!(left.as_deref(), Some("8+"));
            assert_eq!(line, format!("1 {a_reg}"), "a in line");
        }
        // a's only running slot takes a slow job of the other queue
        client.enqueue(&SlowJob { key: 1 }).await.unwrap();
        assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
        let withdrawn = common::wait_for(Duration::from_secs(3), || async {
            let (head, left, line) = fields().await;
            let head = head.unwrap_or_default();
            let line = line.unwrap_or_default();
            head.starts_with("v3 ")
                && head != a_reg
                && left.as_deref() == Some("8")
                && line.is_empty()
        })
        .await;
        assert!(
            withdrawn,
            "a withdrawn, b in place alone: {:?}",
            fields().await
        );
        // b is handed the next job of hq
        let before = hget(&mut con.clone(), "rsmq:hq:Q", "redjob:leased").await;
        client.enqueue(&HandedJob { key: 2 }).await.unwrap();
        assert!(wait_until(Duration::from_secs(2), || rec.len() == 2).await);
        assert_eq!(
            registration(&con, "hq").await.1.as_deref(),
            Some("7"),
            "handed to b, counted down (leased {before:?})"
        );
        a.stop().await;
        b.stop().await;
    }
}

/// A worker waiting in line that takes the place of one that no longer
/// listens leaves the line: withdrawn once full, it is not promoted from its
/// own stale entry (review: withdrawn, it took the place again, and the next
/// sends handed it jobs it released at once, each waking every idle worker).
#[tokio::test]
async fn a_worker_taking_a_gone_workers_place_leaves_the_line() {
    let server = RedisServer::start();
    let client = client_with(&server, &["hq"]).await;
    let b = client.backend();
    let mut con = server.raw().await;
    let reg = |w: &str| format!("v3 30000 rsmq:@handoff:{w} hq");
    let _: () = redis::cmd("HSET")
        .arg("rsmq:hq:Q")
        .arg("redjob:handoff")
        .arg(reg("gone"))
        .arg("redjob:handoffs")
        .arg("2+")
        .arg("redjob:line")
        .arg(format!("3 {}", reg("c")))
        .query_async(&mut con)
        .await
        .unwrap();
    let (_, task) = listen_as(b.clone(), &["hq"], "c");
    subscribed(&server, "c").await;
    let fetched = b.fetch_waiting("hq", 4, LEASE, "c", 4).await.unwrap();
    assert!(fetched.jobs.is_empty());
    let line = hget(&mut con, "rsmq:hq:Q", "redjob:line").await;
    assert_eq!(
        (registration(&con, "hq").await, line.as_deref()),
        ((Some(reg("c")), Some("4".into())), Some("")),
        "c in place, out of the line"
    );
    b.withdraw_handoffs(&["hq".into()], "c", LEASE)
        .await
        .unwrap();
    assert_eq!(
        registration(&con, "hq").await.0.as_deref(),
        Some(""),
        "withdrawn, not in place again"
    );
    task.abort();
}
