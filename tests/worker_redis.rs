//! The worker's Redis-only figures: idle cost in commands, realtime wake-ups,
//! and notices lost with the listener's connection.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{
    Recorder, RedisServer, command_calls, reset_stats, start, start_serving, wait_for, wait_until,
};
use redjob::inspect::Inspect;
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

/// Records its run.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "ping", queue = "work")]
struct Ping {
    key: u64,
}

impl Job for Ping {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

/// A worker of queue "work" with `lease` (it beats every third of it), serving;
/// its client, and its id.
async fn idle_worker(server: &RedisServer, lease: Duration) -> (Client, common::Running, String) {
    serving(server, lease, Recorder::default()).await
}

/// [`idle_worker`], its runs recorded by `recorder`.
async fn serving(
    server: &RedisServer,
    lease: Duration,
    recorder: Recorder,
) -> (Client, common::Running, String) {
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("work", Default::default())
        .await
        .unwrap();
    let w = Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .lease(lease)
        .data(recorder)
        .build()
        .unwrap();
    let id = w.id().to_string();
    (client, start_serving(w).await, id)
}

#[tokio::test]
async fn an_idle_workers_beats_are_one_command_each() {
    let server = RedisServer::start();
    // a beat every 500 ms
    let (client, w, _) = idle_worker(&server, Duration::from_millis(1500)).await;
    let admin = client.backend();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            redjob::ops::Admin::workers(&admin).await.unwrap().len() == 1
        })
        .await
    );
    let mut con = server.raw().await;
    reset_stats(&mut con).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls = command_calls(&mut con).await;
    // the first beat wrote the entry; the next ones only move its end on (a
    // ZADD of its own: no script ran, and nothing is read with it)
    assert!(
        calls.get("zadd").copied().unwrap_or(0) >= 4,
        "beats were touches: {calls:?}"
    );
    assert_eq!(
        calls.get("evalsha").copied().unwrap_or(0),
        0,
        "no script ran: {calls:?}"
    );
    assert_eq!(
        calls.get("hget").copied().unwrap_or(0),
        0,
        "a touch reads neither the control nor the settings' version: {calls:?}"
    );
    w.stop().await;
}

/// A control stored while the worker's listener could not hear its notice
/// (here: stored with no notice at all) is read as soon as the listener is
/// connected again, not at the next full beat two minutes on.
#[tokio::test]
async fn a_control_whose_notice_was_lost_is_read_when_the_listener_reconnects() {
    let server = RedisServer::start();
    // a beat every 20 s
    let (client, w, id) = idle_worker(&server, Duration::from_secs(60)).await;
    let admin = client.backend();
    let listed = |quiet: bool| {
        let admin = admin.clone();
        async move {
            redjob::ops::Admin::workers(&admin)
                .await
                .unwrap()
                .first()
                .is_some_and(|w| w.quiet == quiet)
        }
    };
    assert!(wait_for(Duration::from_secs(5), || listed(false)).await);
    // the worker's startup beats are over
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut con = server.raw().await;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let _: () = redis::cmd("HSET")
        .arg("rsmq:{@workers}:control")
        .arg(&id)
        .arg(format!("quiet {now_ms} test"))
        .query_async(&mut con)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        listed(false).await,
        "no notice came, and no beat read it yet"
    );
    assert!(common::kill_subscribers(&mut con).await >= 1);
    assert!(
        wait_for(Duration::from_secs(5), || listed(true)).await,
        "the control was read once the listener was back"
    );
    w.stop().await;
}

/// A queue whose keyed job waits behind a long run (its holder leased
/// elsewhere) stays near idle: a worker with nothing else to do fetches it
/// about once a minute for the keys' sweep (an RSMQ client may have deleted
/// the holder), not every 10 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_job_waiting_behind_a_long_run_costs_a_fetch_a_minute() {
    use redjob::backend::Backend;
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("work", Default::default())
        .await
        .unwrap();
    let keyed = redjob::client::EnqueueOptions::new().concurrency_key("acct");
    let holder = client
        .enqueue_with(&Ping { key: 1 }, keyed.clone())
        .await
        .unwrap();
    client.enqueue_with(&Ping { key: 2 }, keyed).await.unwrap();
    // the holder runs long elsewhere: its lease is 10 minutes
    let got = client
        .backend()
        .fetch("work", 1, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(got.jobs[0].id, holder);
    let w = Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .lease(Duration::from_secs(60))
        .data(Recorder::default())
        .build()
        .unwrap();
    let w = start(w);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut con = server.raw().await;
    reset_stats(&mut con).await;
    let window = Duration::from_secs(25);
    tokio::time::sleep(window).await;
    let calls = command_calls(&mut con).await;
    w.stop().await;
    // a fetch every 10 s would be 2 or 3 in the window
    assert!(
        calls.get("evalsha").copied().unwrap_or(0) <= 1,
        "fetches of a queue whose keyed job waits: {calls:?}"
    );
}

#[tokio::test]
async fn idle_worker_on_10_queues_sends_few_commands() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let queues: Vec<String> = (0..10).map(|i| format!("idle{i}")).collect();
    for q in &queues {
        client
            .queues()
            .create_queue(q, Default::default())
            .await
            .unwrap();
    }
    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queues(queues.clone())
        .handle_signals(false)
        .poll_interval(Duration::from_secs(5))
        // the worker registry beats every lease / 3: not within the window
        .lease(Duration::from_secs(60))
        .data(rec.clone())
        .build()
        .unwrap();
    let w = start(w);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut con = server.raw().await;
    reset_stats(&mut con).await;
    // longer than the 5 s poll, so every queue is polled at least once, and
    // past 15 s, when queue-size gauges were sampled by default (one script
    // call per queue, ~8 commands): they are sampled only when asked for now
    let window = Duration::from_secs(16);
    tokio::time::sleep(window).await;
    let calls = command_calls(&mut con).await;
    let total: u64 = calls
        .iter()
        .filter(|(n, _)| !n.starts_with("config"))
        .map(|(_, n)| n)
        .sum();
    let per_s = total as f64 / window.as_secs_f64();
    println!("idle worker, 10 queues: {per_s:.1} commands/s ({calls:?})");
    assert!(per_s <= 3.0, "{per_s} commands/s");
    assert!(
        calls.get("zrange").copied().unwrap_or(0) >= 10,
        "every queue was polled: {calls:?}"
    );
    assert_eq!(
        calls.get("evalsha").copied().unwrap_or(0),
        0,
        "with nothing due, no queue fetched: {calls:?}"
    );
    // and a new job wakes it at once (realtime notification), well before the next poll
    let sent = std::time::Instant::now();
    client
        .enqueue_with(
            &Ping { key: 1 },
            redjob::client::EnqueueOptions::new().queue("idle3"),
        )
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(4), || rec.len() == 1).await);
    println!("woken after {:?}", sent.elapsed());
    w.stop().await;
}

/// Publishes on the realtime channel so far.
async fn publishes(server: &RedisServer) -> u64 {
    let mut con = server.raw().await;
    command_calls(&mut con)
        .await
        .get("publish")
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn sends_wake_a_waiting_worker_and_publish_only_then() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let rec = Recorder::default();
    // nobody waits: 100 enqueues publish nothing (creating the queue publishes once)
    for key in 0..100 {
        client.enqueue(&Ping { key }).await.unwrap();
    }
    assert_eq!(publishes(&server).await, 1, "only the queue's creation");
    // a worker that would poll only every minute: wake-ups are all it has
    let w = Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .poll_interval(Duration::from_secs(60))
        .data(rec.clone())
        .build()
        .unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 100).await);
    for key in 100..105 {
        client.enqueue(&Ping { key }).await.unwrap();
        let n = key as usize + 1;
        assert!(
            wait_until(Duration::from_secs(2), || rec.len() == n).await,
            "job {key} woke the idle worker"
        );
    }
    // an RSMQ-style send through the queue layer wakes it too
    let body = br#"{"type":"ping","args":{"key":105}}"#;
    client
        .queues()
        .send("work", redjob::queue::SendMessage::new(&body[..]))
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || rec.len() == 106).await);
    let n = publishes(&server).await;
    assert!(
        (7..=12).contains(&n),
        "one publish per wake-up, not per job: {n}"
    );
    w.stop().await;
}

/// A queue an RSMQ client deletes and creates again takes the waiting
/// worker's flag with its old hash, and RSMQ's createQueue publishes
/// nothing: the next send still wakes the idle worker (it slept until its
/// poll, a minute on).
#[tokio::test]
async fn a_send_wakes_a_worker_after_an_rsmq_client_made_its_queue_again() {
    let server = RedisServer::start();
    let rec = Recorder::default();
    let (client, w, _) = serving(&server, Duration::from_secs(30), rec.clone()).await;
    client.enqueue(&Ping { key: 0 }).await.unwrap();
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // RSMQ's deleteQueue, then its createQueue, as the npm client runs them
    let mut con = server.raw().await;
    let _: () = redis::pipe()
        .atomic()
        .del(&["rsmq:work:Q", "rsmq:work"])
        .srem("rsmq:QUEUES", "work")
        .query_async(&mut con)
        .await
        .unwrap();
    let _: () = redis::pipe()
        .atomic()
        .cmd("HSETNX")
        .arg("rsmq:work:Q")
        .arg("vt")
        .arg(30)
        .cmd("HSETNX")
        .arg("rsmq:work:Q")
        .arg("delay")
        .arg(0)
        .cmd("HSETNX")
        .arg("rsmq:work:Q")
        .arg("maxsize")
        .arg(65536)
        .cmd("HSETNX")
        .arg("rsmq:work:Q")
        .arg("created")
        .arg(1_700_000_000)
        .cmd("HSETNX")
        .arg("rsmq:work:Q")
        .arg("modified")
        .arg(1_700_000_000)
        .sadd("rsmq:QUEUES", "work")
        .query_async(&mut con)
        .await
        .unwrap();
    client.enqueue(&Ping { key: 1 }).await.unwrap();
    let woke = wait_until(Duration::from_secs(5), || rec.len() == 2).await;
    w.stop().await;
    assert!(woke, "the send woke the idle worker");
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "busy", queue = "busy")]
struct Busy;

impl Job for Busy {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(3)).await;
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "long", queue = "busy")]
struct Long;

#[derive(Serialize, Deserialize, Job)]
#[job(name = "sleeper", queue = "busy")]
struct Sleeper;

impl Job for Sleeper {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_secs(40)).await;
        Ok(())
    }
}

#[derive(Clone, Default)]
struct SawStop {
    started: Arc<AtomicBool>,
    at: Arc<std::sync::Mutex<Option<tokio::time::Instant>>>,
}

impl Job for Long {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let saw = ctx.data::<SawStop>()?.clone();
        let token = ctx.cancellation().clone();
        let s2 = saw.clone();
        tokio::spawn(async move {
            token.cancelled().await;
            *s2.at.lock().unwrap() = Some(tokio::time::Instant::now());
        });
        saw.started.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(())
    }
}

/// A cancel's notice that comes while the worker's settler waits to batch
/// the settles of a busy queue is kept, not dropped: the cancelled run stops
/// at once (4 of 25 ran on until the next renewal, 9.8 s, before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_a_busy_queue_stops_its_run_at_once() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let saw = SawStop::default();
    let w = start_serving(
        Worker::builder(client.backend())
            .register::<Busy>()
            .register::<Long>()
            .register::<Sleeper>()
            .concurrency(40)
            .lease(Duration::from_secs(30))
            .grace_period(Duration::from_millis(200))
            .data(saw.clone())
            .handle_signals(false)
            .build()
            .unwrap(),
    )
    .await;
    let sl: Vec<Sleeper> = (0..20).map(|_| Sleeper).collect();
    client.enqueue_batch(&sl).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (c2, s2) = (client.clone(), stop.clone());
    let feeder = tokio::spawn(async move {
        while !s2.load(Ordering::SeqCst) {
            let jobs: Vec<Busy> = (0..2).map(|_| Busy).collect();
            let _ = c2.enqueue_batch(&jobs).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut took = Vec::new();
    for _ in 0..25 {
        saw.started.store(false, Ordering::SeqCst);
        *saw.at.lock().unwrap() = None;
        let id = client.enqueue(&Long).await.unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || saw
                .started
                .load(Ordering::SeqCst))
            .await
        );
        tokio::time::sleep(Duration::from_millis(150 + (took.len() as u64 * 7) % 13)).await;
        let at = tokio::time::Instant::now();
        client.cancel("busy", &id).await.unwrap();
        let ok = wait_until(Duration::from_secs(15), || saw.at.lock().unwrap().is_some()).await;
        let t = saw.at.lock().unwrap().map(|s| s - at);
        assert!(ok, "the run was stopped");
        took.push(t);
    }
    stop.store(true, Ordering::SeqCst);
    feeder.await.unwrap();
    w.stop().await;
    let slow: Vec<_> = took
        .iter()
        .filter(|t| t.is_none_or(|t| t > Duration::from_secs(2)))
        .collect();
    assert!(slow.is_empty(), "{took:?}");
}

/// Fields of the queue's hash other than its attributes and redjob's counters.
async fn message_fields(server: &RedisServer) -> Vec<String> {
    let mut con = server.raw().await;
    let keys: Vec<String> = redis::cmd("HKEYS")
        .arg("rsmq:work:Q")
        .query_async(&mut con)
        .await
        .unwrap();
    keys.into_iter()
        .filter(|k| k.len() >= 32 && !k.starts_with("redjob:"))
        .collect()
}

#[tokio::test]
async fn acks_leave_no_fields_behind_after_rsmq_style_receives() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let rec = Recorder::default();
    for key in 0..3 {
        client.enqueue(&Ping { key }).await.unwrap();
    }
    // an RSMQ-style receive writes <id>:rc and <id>:fr; visible again at once
    let got = client
        .queues()
        .receive("work", Some(Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.rc, 1);
    assert!(message_fields(&server).await.len() >= 3 + 2);
    let w = Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .data(rec.clone())
        .build()
        .unwrap();
    let w = start(w);
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 3).await);
    // the job received once before runs as its second delivery
    let runs = rec.runs();
    let again = runs.iter().find(|r| r.id == got.id).unwrap();
    assert_eq!(again.attempt, 2);
    assert!(
        wait_for(Duration::from_secs(5), || async {
            message_fields(&server).await.is_empty()
        })
        .await,
        "left: {:?}",
        message_fields(&server).await
    );
    w.stop().await;
}

/// Writes a message as an RSMQ client does (no wake-up): due at `score`.
async fn raw_send(
    con: &mut redis::aio::MultiplexedConnection,
    queue: &str,
    id: &str,
    score: f64,
    body: &str,
) {
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(format!("rsmq:{queue}"))
        .arg(score)
        .arg(id)
        .cmd("HSET")
        .arg(format!("rsmq:{queue}:Q"))
        .arg(id)
        .arg(body)
        .query_async(con)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_poll_of_all_queues_finds_jobs_no_send_announced() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    let mut con = server.raw().await;
    for q in ["pa", "pb", "pc"] {
        client
            .queues()
            .create_queue(q, Default::default())
            .await
            .unwrap();
    }
    // on "pc", before the worker starts (an upgrade): a lease an earlier redjob
    // wrote (4e12 ms above its end) that runs out in 300 ms, alone
    let before: u64 = redjob::backend::Backend::now_ms(&client.backend())
        .await
        .unwrap();
    let lost = 4_000_000_000_000u64 + before + 300;
    raw_send(
        &mut con,
        "pc",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa4",
        lost as f64 + 0.001,
        r#"{"type":"ping","args":{"key":4}}"#,
    )
    .await;
    let rec = Recorder::default();
    let w = Worker::builder(client.backend())
        .queues(["pa", "pb", "pc"])
        .handle_signals(false)
        .poll_interval(Duration::from_millis(500))
        .data(rec.clone())
        .build()
        .unwrap();
    let w = common::start_serving(w).await;
    let now_ms: u64 = redjob::backend::Backend::now_ms(&client.backend())
        .await
        .unwrap();
    let body = |k: u64| format!(r#"{{"type":"ping","args":{{"key":{k}}}}}"#);
    // due now on "pa", written without a wake-up (an RSMQ client without realtime)
    raw_send(
        &mut con,
        "pa",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1",
        now_ms as f64,
        &body(1),
    )
    .await;
    // on "pb": a lease that runs out in 300 ms (its worker died; scored at its
    // end, its thousandths 500 + its delivery count), and a job scheduled an
    // hour ahead
    raw_send(
        &mut con,
        "pb",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2",
        (now_ms + 3_600_000) as f64,
        &body(2),
    )
    .await;
    raw_send(
        &mut con,
        "pb",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa3",
        (now_ms + 300) as f64 + 0.501,
        &body(3),
    )
    .await;
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() == 3).await,
        "found by the poll: {:?}",
        rec.runs()
    );
    let mut keys: Vec<u64> = rec.runs().iter().map(|r| r.key).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [1, 3, 4],
        "the due job and the lost leases; not the scheduled one"
    );
    for k in [3, 4] {
        assert_eq!(rec.runs().iter().find(|r| r.key == k).unwrap().attempt, 2);
    }
    w.stop().await;
}

/// The server's URL, for a handler that writes to Redis itself.
struct RawUrl(String);

/// Overwrites its own stored body while it runs: what its history entry
/// keeps then tells whether the settle sent the delivered body back or read
/// the stored one.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "rewritten", queue = "bodies")]
struct Rewritten {
    pad: String,
}

impl Job for Rewritten {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let url = &ctx.data::<RawUrl>()?.0;
        let client = redis::Client::open(url.as_str()).map_err(JobError::fatal)?;
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .map_err(JobError::retry)?;
        let () = redis::cmd("HSET")
            .arg("rsmq:bodies:Q")
            .arg(ctx.id().to_string())
            .arg("changed")
            .query_async(&mut con)
            .await
            .map_err(JobError::retry)?;
        Ok(())
    }
}

/// Its body padded as asked.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "padded", queue = "padded")]
struct Padded {
    pad: String,
}

impl Job for Padded {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The same, on a queue whose history keeps no bodies.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bare", queue = "bare")]
struct Bare {
    pad: String,
}

impl Job for Bare {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Waits until job `id` of `queue` is in the history; its kept body.
async fn finished_body(client: &Client, queue: &str, id: &redjob::JobId) -> Vec<u8> {
    use redjob::inspect::{Inspect, JobState};
    let backend = client.backend();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let job = backend.job(queue, id).await.unwrap();
        if let Some(job) = job.filter(|j| j.state == JobState::Finished) {
            return job.body;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{id} not finished within 10 s");
}

#[tokio::test]
async fn an_acks_body_goes_back_with_its_settle_unless_it_is_large() {
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    client
        .queues()
        .create_queue("bodies", Default::default())
        .await
        .unwrap();
    let small = Rewritten { pad: String::new() };
    let large = Rewritten {
        pad: "x".repeat(2000),
    };
    let small_id = client.enqueue(&small).await.unwrap();
    let large_id = client.enqueue(&large).await.unwrap();
    let sent = redjob::inspect::Inspect::job(&client.backend(), "bodies", &small_id).await;
    let sent = sent.unwrap().unwrap().body;
    let w = Worker::builder(client.backend())
        .queue("bodies")
        .handle_signals(false)
        .data(RawUrl(server.url()))
        .build()
        .unwrap();
    let w = start_serving(w).await;
    // the small body went back as delivered; the large one (over 1 KiB) was
    // read where it is stored, as the handler left it
    assert_eq!(finished_body(&client, "bodies", &small_id).await, sent);
    assert_eq!(
        finished_body(&client, "bodies", &large_id).await,
        b"changed"
    );
    w.stop().await;
}

/// Redis's count of bytes it has read from clients.
async fn input_bytes(con: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(con)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_net_input_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_net_input_bytes")
}

/// What Redis read from its clients while 40 jobs made by `job` were
/// enqueued to `queue` and processed.
async fn processed_input<J: Job>(
    client: &Client,
    con: &mut redis::aio::MultiplexedConnection,
    queue: &str,
    job: impl Fn(usize) -> J,
) -> u64 {
    let before = input_bytes(con).await;
    let jobs: Vec<J> = (0..40).map(job).collect();
    for id in client.enqueue_batch(&jobs).await.unwrap() {
        finished_body(client, queue, &id).await;
    }
    input_bytes(con).await - before
}

#[tokio::test]
async fn no_bodies_go_back_to_a_history_that_keeps_none() {
    use redjob::ops::{Admin, History, QueueSettings};
    let server = RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    for q in ["padded", "bare"] {
        client
            .queues()
            .create_queue(q, Default::default())
            .await
            .unwrap();
    }
    // the stored setting (not the worker's) says "bare" keeps no bodies
    let none = History {
        args_max_age: Some(Duration::ZERO),
        ..History::default()
    };
    Admin::set_settings(&client.backend(), "bare", &QueueSettings::history(none))
        .await
        .unwrap();
    let w = Worker::builder(client.backend())
        .queue("padded")
        .queue("bare")
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start_serving(w).await;
    let mut con = server.raw().await;
    // a job each first: the scripts are loaded
    let id = client
        .enqueue(&Padded { pad: String::new() })
        .await
        .unwrap();
    finished_body(&client, "padded", &id).await;
    let id = client.enqueue(&Bare { pad: String::new() }).await.unwrap();
    finished_body(&client, "bare", &id).await;
    // 40 jobs of 900 bytes on each queue: what their enqueue and processing
    // read from the clients
    let bodies = 40 * 900;
    let pad = || "y".repeat(900);
    let kept = processed_input(&client, &mut con, "padded", |_| Padded { pad: pad() }).await;
    let dropped = processed_input(&client, &mut con, "bare", |_| Bare { pad: pad() }).await;
    // the same jobs, but for the bodies going back
    assert!(
        kept > dropped + bodies / 2,
        "bodies sent back for one queue only: {kept} and {dropped} bytes read"
    );
    w.stop().await;
}

#[tokio::test]
async fn a_settle_after_redis_lost_its_scripts_loads_its_script_again() {
    // a settle is packed by hand for the connection's lane: when Redis lost
    // its script (a restart, a failover, SCRIPT FLUSH), it loads it and goes
    // through, as any script call does
    let server = RedisServer::start();
    let mut raw = server.raw().await;
    let recorder = Recorder::default();
    let (client, w, _) = serving(&server, Duration::from_secs(30), recorder.clone()).await;
    let queued = async |raw: &mut redis::aio::MultiplexedConnection| -> u64 {
        redis::cmd("ZCARD")
            .arg("rsmq:work")
            .query_async(raw)
            .await
            .unwrap()
    };
    for key in [1, 2] {
        if key == 2 {
            let () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut raw)
                .await
                .unwrap();
        }
        client.enqueue(&Ping { key }).await.unwrap();
        assert!(wait_until(Duration::from_secs(10), || recorder.len() == key as usize).await);
        // settled: gone from the queue
        assert!(
            wait_for(Duration::from_secs(10), || {
                let mut raw = raw.clone();
                async move { queued(&mut raw).await == 0 }
            })
            .await,
            "job {key} not settled"
        );
    }
    w.stop().await;
}
