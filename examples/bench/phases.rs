//! BENCH.md's phases, each on the run's own redis-server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redjob::backend::any::AnyBackend;
use redjob::client::EnqueueOptions;
use redjob::ops::{Admin, QueueSettings};
use redjob::queue::{Queues, SendMessage};
use redjob::{Client, Worker};
use tokio::time::{MissedTickBehavior, interval};

use crate::jobs::{Noop, Tally, Timed, now_us, quantile};
use crate::redis::{Server, cost, cpu_us, reset, used_memory};

/// What one run measured; `None` where its phase did not run.
#[derive(Default, Debug, Clone)]
pub struct Figures {
    pub enqueue_single: Option<f64>,
    pub enqueue_bulk: Option<f64>,
    /// Phase 1's parts of a one-by-one enqueue (µs per call): a `PING` on the
    /// client's kind of connection, a raw RSMQ send of the same body, and the
    /// send script's time inside Redis (`INFO commandstats`).
    pub ping_us: Option<f64>,
    pub raw_send_us: Option<f64>,
    pub send_script_us: Option<f64>,
    /// Phase 1's floor rows (bare.rs): µs per awaited call on a bare socket.
    pub bare_xadd_us: Option<f64>,
    pub bare_layout_us: Option<f64>,
    pub bare_send_us: Option<f64>,
    pub process: Option<f64>,
    pub cmds_per_job: Option<f64>,
    pub calls_per_job: Option<f64>,
    pub bytes_per_job: Option<f64>,
    /// The queue's keys per job (`MEMORY USAGE`), and the same for RSMQ's
    /// layout alone: a raw send of the bare payload.
    pub bytes_per_job_keys: Option<f64>,
    pub bytes_per_job_rsmq: Option<f64>,
    pub worker_cpu_us_per_job: Option<f64>,
    pub redis_cpu_us_per_job: Option<f64>,
    pub latency_p50: Option<f64>,
    pub latency_p99: Option<f64>,
    pub latency_max: Option<f64>,
    pub delayed_p50: Option<f64>,
    pub delayed_p99: Option<f64>,
    pub delayed_max: Option<f64>,
    pub delayed_min: Option<f64>,
    pub duplicates: u64,
    pub missing: u64,
    pub backlog: Vec<(usize, f64)>,
    pub idle_1: Option<f64>,
    pub idle_100: Option<f64>,
    /// Phase 6: 100 idle queues with limits, an open batch and result waiters.
    pub idle_100_features: Option<f64>,
    /// Phase 7: the same 20k backlog processed plain and at mixed priorities.
    pub backlog_plain: Vec<f64>,
    pub backlog_priorities: Vec<f64>,
    pub backlog_metrics_off: Vec<f64>,
    pub backlog_prometheus: Vec<f64>,
    /// Phase 7: `n` jobs enqueued one by one, plain and unique.
    pub enqueue_single_plain: Vec<f64>,
    pub enqueue_single_unique: Vec<f64>,
    /// Phase 8: (call, jobs in the queue, median ms of one call).
    pub inspect: Vec<(String, usize, f64)>,
    /// A job found by id without its queue: (queues, ms per call, calls
    /// the client sent, Redis commands run, scripts' inner ones included).
    pub locate: Vec<(usize, f64, f64, f64)>,
    /// Phase 9: a flood of fatal failures: jobs/s, dead letters kept, Redis
    /// memory with the flood queued and after it was dead-lettered (MB).
    pub flood_jobs_per_s: Option<f64>,
    pub flood_dead_kept: Option<f64>,
    pub flood_mem_queued_mb: Option<f64>,
    pub flood_mem_after_mb: Option<f64>,
    /// Phase 10: topics: publish one by one and in batches of 1000 (events/s),
    /// one subscriber draining a backlog of `n` (events/s), Redis commands per
    /// event (publish one by one + drain) and memory per stored event (bytes).
    pub topic_publish_single: Option<f64>,
    pub topic_publish_bulk: Option<f64>,
    pub topic_drain: Option<f64>,
    pub topic_cmds_per_event: Option<f64>,
    pub topic_bytes_per_event: Option<f64>,
    /// Phase 10: CPU per event drained, the worker's process and Redis's (µs).
    pub topic_worker_cpu_us: Option<f64>,
    pub topic_redis_cpu_us: Option<f64>,
    /// Phase 11: a backlog over 12 queues drained by one worker, on one Redis
    /// and on a 3-master Cluster on this machine (jobs/s).
    pub spread_single: Option<f64>,
    pub spread_cluster: Option<f64>,
    /// Phase 20: each fleet of `fleet::FLEETS` in turn.
    pub fleet: Vec<crate::fleet::Fleet>,
    /// Phase 12: enqueue one by one to a master with a replica, plain and
    /// waiting for the replica (jobs/s).
    pub enqueue_replicated_plain: Option<f64>,
    pub enqueue_replicated_waiting: Option<f64>,
    /// Phase 13: the backlog processed with the history at its defaults and
    /// off (jobs/s), Redis CPU per job for each (µs), bytes per history entry
    /// and a full history (KB) for the bench payload and a 1 KB one.
    pub history_on: Vec<f64>,
    pub history_off: Vec<f64>,
    pub history_on_cpu_us: Vec<f64>,
    /// The same with the history on in a queue that has seen a failure (its
    /// last errors and attempt records may exist): jobs/s, Redis CPU µs a job.
    pub history_errors: Vec<f64>,
    pub history_errors_cpu_us: Vec<f64>,
    /// Phase 18: the floor of fetch + ack (and + the history's writes) as
    /// plain pipelined commands, Redis CPU µs per job.
    pub floor_plain_us: Vec<f64>,
    pub floor_history_us: Vec<f64>,
    /// The same by two minimal scripts.
    pub floor_scripted_us: Vec<f64>,
    pub floor_scripted_history_us: Vec<f64>,
    pub history_off_cpu_us: Vec<f64>,
    /// The worker's CPU µs a job, history on (full) and off.
    pub history_on_worker_cpu_us: Vec<f64>,
    pub history_off_worker_cpu_us: Vec<f64>,
    pub history_bytes_per_entry: Option<f64>,
    pub history_full_kb: Option<f64>,
    pub history_bytes_per_entry_1kb: Option<f64>,
    pub history_full_kb_1kb: Option<f64>,
    /// Phase 14: per render of the overview, at (queues, way: 0 per queue,
    /// 1 the overview with the last hour, 2 with the last week; 3 and 4 as 1
    /// and 2 once every queue's counters hold a week): round trips, commands
    /// inside Redis, Redis CPU ms, wall ms.
    pub overview: Vec<(usize, u8, crate::overview::PerRender)>,
    /// Phase 14: the bytes of one queue's counters hash holding a week.
    pub stats_week_bytes: Option<f64>,
    /// Phase 19: backlogs of 300 sent and processed in rounds: jobs/s and
    /// Redis CPU µs per job (the sends included).
    pub small_process: Option<f64>,
    pub small_redis_cpu_us: Option<f64>,
    /// Phase 15: a backlog under a rate limit of 1,000/s drained by three
    /// workers: the rate after the first window (starts/s), and the most
    /// starts in any 1 s window.
    pub rate_limited_per_s: Option<f64>,
    pub rate_limited_max_1s: Option<f64>,
    pub rate_limited_handler_max_1s: Option<f64>,
    /// Phase 16: bulk enqueue and processing (jobs/s), plain and keyed (1,000
    /// keys, one at a time each), in one sitting.
    pub plain_bulk: Option<f64>,
    pub plain_process: Option<f64>,
    pub keyed_bulk: Option<f64>,
    pub keyed_process: Option<f64>,
    /// Phase 17: bulk enqueue and processing (jobs/s), plain and as one batch
    /// (enqueued by one call; processed until its callback ran), in one
    /// sitting.
    pub batch_plain_bulk: Option<f64>,
    pub batch_plain_process: Option<f64>,
    pub batch_bulk: Option<f64>,
    pub batch_process: Option<f64>,
    /// Phase 17: a flow's child's finish to its parent's start (ms), p50
    /// and p99; the same for a chain built by hand.
    pub flow_p50: Option<f64>,
    pub flow_p99: Option<f64>,
    pub hand_p50: Option<f64>,
    pub hand_p99: Option<f64>,
}

impl Figures {
    /// Adds the tally's duplicate and missing runs.
    pub fn check(&mut self, tally: &Tally) {
        let (dup, missing) = tally.check();
        self.duplicates += dup;
        self.missing += missing;
    }
}

pub struct Settings {
    pub n: usize,
    pub concurrency: usize,
    pub phases: Vec<u8>,
}

pub fn worker(client: &Client, queue: &str, tally: &Arc<Tally>, c: usize) -> Worker<AnyBackend> {
    Worker::builder(client.backend())
        .queue(queue)
        .concurrency(c)
        .handle_signals(false)
        .data(tally.clone())
        .build()
        .expect("worker settings")
}

/// CPU time of this process's threads so far (ns), from /proc.
pub fn cpu_ns() -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let s = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// Runs `worker` until `tally` says every job ran; returns (seconds, CPU ns).
pub async fn drain(
    w: Worker<AnyBackend>,
    tally: &Arc<Tally>,
    started: Instant,
) -> (f64, Option<u64>) {
    let cpu0 = cpu_ns();
    let stop = w.shutdown_token();
    let run = tokio::spawn(w.run());
    tokio::time::timeout(Duration::from_secs(600), tally.all_done.notified())
        .await
        .expect("every job ran within 10 minutes");
    let secs = started.elapsed().as_secs_f64();
    let cpu = cpu0.zip(cpu_ns()).map(|(a, b)| b - a);
    stop.cancel();
    run.await.expect("worker task").expect("worker");
    (secs, cpu)
}

async fn bulk(client: &Client, from: usize, n: usize) {
    let jobs: Vec<Noop> = (from..from + n).map(|i| Noop { i: i as u64 }).collect();
    for chunk in jobs.chunks(1000) {
        client.enqueue_batch(chunk).await.expect("bulk enqueue");
    }
}

/// Where a one-by-one enqueue's time goes: a `PING` on the kind of connection
/// the client uses (the round trip and the client's hop through its connection
/// task), a raw send of the same body through the RSMQ API (no job encoding),
/// each as µs per awaited call over 2000 calls. Leaves the queue as it was.
async fn enqueue_parts(server: &Server, client: &Client, f: &mut Figures) {
    const CALLS: usize = 2000;
    let mut con = redjob::connection::RedisConfig::from_url(server.url.as_str())
        .connect()
        .await
        .expect("connect");
    let t = Instant::now();
    for _ in 0..CALLS {
        let _: String = ::redis::cmd("PING").query_async(&mut con).await.unwrap();
    }
    f.ping_us = Some(t.elapsed().as_secs_f64() * 1e6 / CALLS as f64);
    let body = br#"{"type":"bench","args":{"i":1}}"#;
    let q = client.queues();
    let t = Instant::now();
    for _ in 0..CALLS {
        q.send("bench", SendMessage::new(&body[..]))
            .await
            .expect("send");
    }
    f.raw_send_us = Some(t.elapsed().as_secs_f64() * 1e6 / CALLS as f64);
    for _ in 0..CALLS {
        q.pop("bench").await.expect("pop").expect("a sent message");
    }
    // the same round trip with no client around it (bare.rs), on a queue of
    // its own
    q.create_queue("bare", Default::default())
        .await
        .expect("create");
    let floor = crate::bare::floor(&server.url, "bare", CALLS).await;
    q.delete_queue("bare").await.expect("delete");
    f.bare_xadd_us = floor.xadd;
    f.bare_layout_us = floor.layout;
    f.bare_send_us = floor.send;
}

/// The bytes queue `q`'s sorted set and hash take (`MEMORY USAGE`, every
/// element counted).
async fn key_bytes(con: &mut redis::aio::MultiplexedConnection, q: &str) -> f64 {
    let mut bytes = 0;
    for key in [format!("rsmq:{q}"), format!("rsmq:{q}:Q")] {
        let b: Option<u64> = ::redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(con)
            .await
            .expect("MEMORY USAGE");
        bytes += b.unwrap_or(0);
    }
    bytes as f64
}

/// Phases 1–3: enqueue one by one and in bulk, process the backlog, and what it cost.
pub async fn throughput(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let mut con = server.con().await;
    let client = Client::connect(&server.url).await.expect("connect");
    let n = s.n;
    // warm up: the queue exists and the scripts are loaded
    client.enqueue(&Noop { i: u64::MAX }).await.unwrap();
    client.queues().pop("bench").await.unwrap();

    let mem0 = used_memory(&mut con).await;
    reset(&mut con).await;
    let t = Instant::now();
    for i in 0..n {
        client
            .enqueue(&Noop { i: i as u64 })
            .await
            .expect("enqueue");
    }
    f.enqueue_single = Some(n as f64 / t.elapsed().as_secs_f64());
    let enq = cost(&mut con).await;
    f.send_script_us = Some(enq.script_us);
    f.bytes_per_job = Some((used_memory(&mut con).await - mem0) as f64 / n as f64);
    f.bytes_per_job_keys = Some(key_bytes(&mut con, "bench").await / n as f64);

    // process what phase 1 enqueued
    let tally = Arc::new(Tally::new(n));
    reset(&mut con).await;
    let redis_cpu0 = cpu_us(&mut con).await;
    let t = Instant::now();
    let w = worker(&client, "bench", &tally, s.concurrency);
    let (secs, cpu) = drain(w, &tally, t).await;
    f.redis_cpu_us_per_job = Some((cpu_us(&mut con).await - redis_cpu0) / n as f64);
    let work = cost(&mut con).await;
    f.process = Some(n as f64 / secs);
    f.cmds_per_job = Some((enq.commands + work.commands) as f64 / n as f64);
    f.calls_per_job = Some((enq.calls + work.calls) as f64 / n as f64);
    f.worker_cpu_us_per_job = cpu.map(|ns| ns as f64 / 1000.0 / n as f64);
    f.check(&tally);

    enqueue_parts(&server, &client, f).await;

    // RSMQ's layout alone: the bare payload sent raw, on a queue of its own
    client
        .queues()
        .create_queue("raw", Default::default())
        .await
        .expect("create");
    let bodies: Vec<SendMessage> = (0..n)
        .map(|i| SendMessage::new(format!(r#"{{"i":{i}}}"#).into_bytes()))
        .collect();
    for chunk in bodies.chunks(1000) {
        client
            .queues()
            .send_batch("raw", chunk)
            .await
            .expect("send");
    }
    f.bytes_per_job_rsmq = Some(key_bytes(&mut con, "raw").await / n as f64);

    let t = Instant::now();
    bulk(&client, 0, n).await;
    f.enqueue_bulk = Some(n as f64 / t.elapsed().as_secs_f64());
    let tally = Arc::new(Tally::new(n));
    let (_, _) = drain(
        worker(&client, "bench", &tally, s.concurrency),
        &tally,
        Instant::now(),
    )
    .await;
    f.check(&tally);
}

/// Runs a worker on `bench_timed` while `feed` enqueues `n` timed jobs; returns
/// their lags (start minus the time each carries), sorted.
async fn timed(
    client: &Client,
    s: &Settings,
    f: &mut Figures,
    n: usize,
    feed: impl std::future::Future<Output = ()>,
) -> Vec<f64> {
    let tally = Arc::new(Tally::new(n));
    let w = worker(client, "bench_timed", &tally, s.concurrency);
    let stop = w.shutdown_token();
    let run = tokio::spawn(w.run());
    feed.await;
    tokio::time::timeout(Duration::from_secs(60), tally.all_done.notified())
        .await
        .expect("every timed job ran");
    stop.cancel();
    run.await.unwrap().unwrap();
    f.check(&tally);
    tally.lags_ms()
}

/// Phase 4: enqueue → handler start on an idle worker, 2000 jobs at 400/s.
pub async fn latency(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    let n = 2000;
    client.enqueue(&Timed { i: u64::MAX, t: 0 }).await.unwrap();
    client.queues().pop("bench_timed").await.unwrap();
    let feed = async {
        // an idle worker first
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut tick = interval(Duration::from_micros(2500));
        tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
        for i in 0..n {
            tick.tick().await;
            let job = Timed {
                i: i as u64,
                t: now_us(),
            };
            client.enqueue(&job).await.expect("enqueue");
        }
    };
    let lags = timed(&client, s, f, n, feed).await;
    f.latency_p50 = Some(quantile(&lags, 0.5));
    f.latency_p99 = Some(quantile(&lags, 0.99));
    f.latency_max = lags.last().copied();
}

/// Phase 5: 1000 jobs delayed 1–4 s; start − due.
pub async fn delayed(s: &Settings, f: &mut Figures) {
    let server = Server::start();
    let client = Client::connect(&server.url).await.expect("connect");
    let n = 1000;
    let feed = async {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for i in 0..n {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let delay = Duration::from_millis(1000 + seed % 3001);
            // due no earlier than now + delay: Redis stamps the job after this
            let due = now_us() + delay.as_micros() as u64;
            let job = Timed {
                i: i as u64,
                t: due,
            };
            client.enqueue_in(&job, delay).await.expect("enqueue");
        }
    };
    let lags = timed(&client, s, f, n, feed).await;
    f.delayed_p50 = Some(quantile(&lags, 0.5));
    f.delayed_p99 = Some(quantile(&lags, 0.99));
    f.delayed_max = lags.last().copied();
    f.delayed_min = lags.first().copied();
}

/// Phase 6: processing rate by backlog size, and an idle worker's cost.
pub async fn scale(s: &Settings, f: &mut Figures, backlogs: &[usize]) {
    for &b in backlogs {
        let server = Server::start();
        let client = Client::connect(&server.url).await.expect("connect");
        bulk(&client, 0, b).await;
        let tally = Arc::new(Tally::new(b));
        let t = Instant::now();
        let (secs, _) = drain(worker(&client, "bench", &tally, s.concurrency), &tally, t).await;
        f.backlog.push((b, b as f64 / secs));
        f.check(&tally);
    }
    for (queues, features, slot) in [
        (1usize, false, &mut f.idle_1),
        (100, false, &mut f.idle_100),
        (100, true, &mut f.idle_100_features),
    ] {
        let server = Server::start();
        let mut con = server.con().await;
        let client = Client::connect(&server.url).await.expect("connect");
        let names: Vec<String> = (0..queues).map(|q| format!("idle{q}")).collect();
        for q in &names {
            client
                .queues()
                .create_queue(q, Default::default())
                .await
                .unwrap();
        }
        // limits on two thirds of the queues, an open batch, and callers
        // waiting for results (their jobs in a queue no worker serves)
        let mut waiters = Vec::new();
        if features {
            idle_features(&client, &names, &mut waiters).await;
        }
        let tally = Arc::new(Tally::new(1));
        let w = Worker::builder(client.backend())
            .queues(names)
            .handle_signals(false)
            .data(tally)
            .build()
            .unwrap();
        let stop = w.shutdown_token();
        let run = tokio::spawn(w.run());
        tokio::time::sleep(Duration::from_secs(1)).await;
        reset(&mut con).await;
        // longer than the 60 s fallback poll, so that the queues are polled once
        let window = Duration::from_secs(61);
        tokio::time::sleep(window).await;
        *slot = Some(cost(&mut con).await.commands as f64 / window.as_secs_f64());
        stop.cancel();
        run.await.unwrap().unwrap();
        for w in waiters {
            w.abort();
        }
    }
}

/// Phase 6's idle queues with what else a fleet keeps: a global concurrency
/// on a third of `names`, a rate limit on another third, an open batch, and
/// ten callers waiting for results (`Client::wait_result_in`), the batch's
/// and the awaited jobs in a queue no worker serves.
async fn idle_features(
    client: &Client,
    names: &[String],
    waiters: &mut Vec<tokio::task::JoinHandle<()>>,
) {
    use redjob::ops::{Concurrency, RateLimit};
    for (i, q) in names.iter().enumerate() {
        let settings = match i % 3 {
            0 => QueueSettings::concurrency(Concurrency::global(5)),
            1 => QueueSettings::rate_limit(RateLimit::per_second(100)),
            _ => continue,
        };
        client.set_settings(q, &settings).await.expect("settings");
    }
    client
        .batch()
        .job_in("elsewhere", &Noop { i: 0 })
        .jobs(&[Noop { i: 1 }])
        .enqueue()
        .await
        .expect("batch");
    for i in 0..10 {
        let id = client
            .enqueue_with(&Noop { i }, EnqueueOptions::new().queue("elsewhere"))
            .await
            .expect("enqueue");
        let client = client.clone();
        waiters.push(tokio::spawn(async move {
            let _ = client
                .wait_result_in::<Noop>("elsewhere", &id, Duration::from_secs(3600))
                .await;
        }));
    }
}
