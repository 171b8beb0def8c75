//! Every worker behaviour: processing, delays, retries and backoff, dead letters,
//! panics, timeouts, garbage bodies, limits, shared data, leases, fencing, crashes
//! and shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redjob::backend::{Backend, DeadLetterEntry, Reschedule, Settle};
use redjob::queue::{Queues, SendMessage};
use redjob::{Client, Job, JobContext, JobError, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{Recorder, wait_for, wait_until};

/// Records its run; `fail_until` attempts fail first.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "rec", queue = "work", max_attempts = 5)]
struct Rec {
    key: u64,
    #[serde(default)]
    fail_until: u32,
}

impl Job for Rec {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        if ctx.attempt() <= self.fail_until {
            return Err(JobError::retry_after("not yet", Duration::from_millis(100)));
        }
        Ok(())
    }
}

/// Always fails with the job's backoff.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "flaky", queue = "work", max_attempts = 4, backoff = "100ms")]
struct Flaky {
    key: u64,
}

impl Job for Flaky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Err(JobError::retry(std::io::Error::other("upstream down")))
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "doomed", queue = "work")]
struct Doomed {
    key: u64,
}

impl Job for Doomed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Err(JobError::fatal("no such account"))
    }
}

/// Panics or hangs on its first attempt, succeeds after.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "unruly", queue = "work", timeout = "300ms", backoff = "50ms")]
struct Unruly {
    key: u64,
    panic: bool,
}

impl Job for Unruly {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        if ctx.attempt() == 1 {
            if self.panic {
                panic!("boom {}", self.key);
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Ok(())
    }
}

/// Tracks how many run at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "gauge", queue = "narrow")]
struct Gauge;

#[derive(Default)]
struct Concurrent {
    now: AtomicUsize,
    max: AtomicUsize,
    done: AtomicUsize,
}

impl Job for Gauge {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let c = ctx.data::<Arc<Concurrent>>()?;
        let n = c.now.fetch_add(1, Ordering::SeqCst) + 1;
        c.max.fetch_max(n, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.now.fetch_sub(1, Ordering::SeqCst);
        c.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

struct Running {
    shutdown: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<redjob::Result<()>>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

fn start(worker: Worker) -> Running {
    let shutdown = worker.shutdown_token();
    Running {
        shutdown,
        handle: tokio::spawn(worker.run()),
    }
}

fn worker(client: &Client, rec: &Recorder) -> redjob::worker::WorkerBuilder {
    Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .data(rec.clone())
        .retry(RetryPolicy::default().jitter(false))
}

/// Hangs on its first attempt when `hang_first`, or for `ms` on every attempt.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "sleepy", queue = "work")]
struct Sleepy {
    key: u64,
    ms: u64,
    hang_first: bool,
}

impl Job for Sleepy {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        if self.hang_first && ctx.attempt() == 1 {
            std::future::pending::<()>().await;
        }
        if !ctx.data::<Fast>().is_ok_and(|f| f.0) {
            tokio::time::sleep(Duration::from_millis(self.ms)).await;
        }
        Ok(())
    }
}

/// When present and true, Sleepy does not sleep.
struct Fast(bool);

/// A worker with a 1 s lease, for the lease and crash tests.
fn builder(client: &Client, rec: &Recorder) -> redjob::worker::WorkerBuilder {
    worker(client, rec).lease(Duration::from_secs(1))
}

/// Asserts the "work" queue's counters (processed, failed, retried, dead) and that
/// it holds no message any more.
async fn assert_drained(client: &Client, counts: (u64, u64, u64, u64)) {
    let s = client.stats("work").await.unwrap();
    assert_eq!((s.processed, s.failed, s.retried, s.dead), counts);
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
}

pub async fn processes_every_job_once_and_counts(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let jobs: Vec<Rec> = (0..300).map(|key| Rec { key, fail_until: 0 }).collect();
    client.enqueue_batch(&jobs).await.unwrap();
    let w = start(worker(&client, &rec).concurrency(8).build().unwrap());
    assert!(wait_until(Duration::from_secs(20), || rec.len() >= 300).await);
    // jobs enqueued while the worker idles are picked up too
    client
        .enqueue(&Rec {
            key: 300,
            fail_until: 0,
        })
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || rec.len() >= 301).await);
    w.stop().await;
    let counts = rec.counts();
    assert_eq!(counts.len(), 301);
    assert!(counts.values().all(|n| *n == 1));
    assert!(rec.runs().iter().all(|r| r.attempt == 1));
    assert_drained(&client, (301, 0, 0, 0)).await;
}

pub async fn delayed_jobs_start_on_time_never_early(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).build().unwrap());
    // a job may not start before (time just before its enqueue) + delay
    let mut earliest = Vec::new();
    for (key, ms) in [(0u64, 300u64), (1, 700), (2, 1200)] {
        let before = tokio::time::Instant::now();
        let job = Rec { key, fail_until: 0 };
        client
            .enqueue_in(&job, Duration::from_millis(ms))
            .await
            .unwrap();
        earliest.push((key, before + Duration::from_millis(ms)));
    }
    let before = tokio::time::Instant::now();
    let at = env.now().await + Duration::from_millis(900);
    client
        .enqueue_at(
            &Rec {
                key: 3,
                fail_until: 0,
            },
            at,
        )
        .await
        .unwrap();
    earliest.push((3, before + Duration::from_millis(900)));
    assert!(wait_until(Duration::from_secs(10), || rec.len() >= 4).await);
    w.stop().await;
    for r in rec.runs() {
        let due = earliest.iter().find(|(k, _)| *k == r.key).unwrap().1;
        assert!(r.at >= due, "job {} started {:?} early", r.key, due - r.at);
        // well inside the 5 s poll: the dispatcher slept until the due score
        let late = r.at - due;
        assert!(
            late < Duration::from_secs(1),
            "job {} started {late:?} late",
            r.key
        );
    }
}

pub async fn retry_after_then_success_counts_attempts(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).build().unwrap());
    client
        .enqueue(&Rec {
            key: 7,
            fail_until: 2,
        })
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || rec.len() >= 3).await);
    let backend = client.clone();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            backend.stats("work").await.unwrap().processed == 1
        })
        .await
    );
    w.stop().await;
    let runs = rec.runs();
    assert_eq!(
        runs.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    for pair in runs.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(
            gap >= Duration::from_millis(100),
            "retry_after respected: {gap:?}"
        );
    }
    assert_drained(&client, (1, 2, 2, 0)).await;
}

pub async fn backoff_schedule_then_dead_letter_with_error(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).build().unwrap());
    let id = client.enqueue(&Flaky { key: 1 }).await.unwrap();
    let backend = client.clone();
    assert!(wait_until(Duration::from_secs(10), || rec.len() >= 4).await);
    assert!(
        wait_for(Duration::from_secs(5), || async {
            !backend.dead_letters("work", 10).await.unwrap().is_empty()
        })
        .await
    );
    let dead = backend.dead_letters("work", 10).await.unwrap();
    w.stop().await;
    let runs = rec.runs();
    assert_eq!(runs.len(), 4, "max_attempts = 4");
    // backoff 100 ms doubled per attempt, no jitter: 100, 200, 400 ms
    for (i, pair) in runs.windows(2).enumerate() {
        let gap = pair[1].at.duration_since(pair[0].at);
        let want = Duration::from_millis(100 << i);
        assert!(
            gap >= want && gap < want + Duration::from_millis(400),
            "gap {i}: {gap:?}, want {want:?}"
        );
    }
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, id);
    assert_eq!(dead[0].attempts, 4);
    assert!(dead[0].error.contains("upstream down"), "{}", dead[0].error);
    assert!(dead[0].error.contains("4 of 4"), "{}", dead[0].error);
    assert!(String::from_utf8_lossy(&dead[0].body).contains("\"flaky\""));
    assert_drained(&client, (0, 4, 3, 1)).await;
}

pub async fn fatal_goes_straight_to_dead_letter(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).build().unwrap());
    client.enqueue(&Doomed { key: 1 }).await.unwrap();
    let backend = client.clone();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            !backend.dead_letters("work", 10).await.unwrap().is_empty()
        })
        .await
    );
    let dead = backend.dead_letters("work", 10).await.unwrap();
    w.stop().await;
    assert_eq!(rec.len(), 1);
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 1);
    assert!(
        dead[0].error.starts_with("fatal: no such account"),
        "{}",
        dead[0].error
    );
}

pub async fn panics_and_timeouts_are_retried_and_the_worker_keeps_serving(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).build().unwrap());
    client
        .enqueue(&Unruly {
            key: 1,
            panic: true,
        })
        .await
        .unwrap();
    client
        .enqueue(&Unruly {
            key: 2,
            panic: false,
        })
        .await
        .unwrap();
    client
        .enqueue_batch(
            &(10..20)
                .map(|key| Rec { key, fail_until: 0 })
                .collect::<Vec<_>>(),
        )
        .await
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || rec.len() >= 14).await);
    w.stop().await;
    let runs = rec.runs();
    for key in [1, 2] {
        let attempts: Vec<u32> = runs
            .iter()
            .filter(|r| r.key == key)
            .map(|r| r.attempt)
            .collect();
        assert_eq!(attempts, [1, 2], "key {key}");
    }
    let stats = client.stats("work").await.unwrap();
    assert_eq!((stats.processed, stats.retried), (12, 2));
}

pub async fn per_queue_concurrency_is_respected(env: &Env) {
    let client = env.client.clone();
    let c = Arc::new(Concurrent::default());
    let jobs: Vec<Gauge> = (0..40).map(|_| Gauge).collect();
    client.enqueue_batch(&jobs).await.unwrap();
    let w = Worker::builder(client.backend())
        .queue_concurrency("narrow", 3)
        .concurrency(32)
        .handle_signals(false)
        .data(c.clone())
        .build()
        .unwrap();
    let w = start(w);
    assert!(
        wait_until(Duration::from_secs(10), || c.done.load(Ordering::SeqCst)
            == 40)
        .await
    );
    w.stop().await;
    assert!(
        c.max.load(Ordering::SeqCst) <= 3,
        "max {}",
        c.max.load(Ordering::SeqCst)
    );
    assert!(c.max.load(Ordering::SeqCst) >= 2, "ran concurrently");
}

pub async fn missing_data_is_a_clear_retryable_error(env: &Env) {
    let client = env.client.clone();
    let w = Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start(w);
    client
        .enqueue(&Rec {
            key: 1,
            fail_until: 0,
        })
        .await
        .unwrap();
    let backend = client.clone();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            backend.stats("work").await.unwrap().retried >= 1
        })
        .await
    );
    w.stop().await;
}

pub async fn invalid_settings_are_rejected_at_build(env: &Env) {
    let client = env.client.clone();
    let b = || Worker::builder(client.backend()).handle_signals(false);
    assert!(b().concurrency(0).build().is_err());
    assert!(b().lease(Duration::from_millis(10)).build().is_err());
    assert!(b().queue("bad name").build().is_err());
    assert!(b().queue_concurrency("q", 0).build().is_err());
    assert!(b().poll_interval(Duration::ZERO).build().is_err());
    let w = b().register::<Rec>().register::<Gauge>().build().unwrap();
    assert_eq!(w.queues().collect::<Vec<_>>(), ["work", "narrow"]);
}

pub async fn crashed_worker_job_runs_again_exactly_once_more(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    client
        .enqueue(&Sleepy {
            key: 1,
            ms: 0,
            hang_first: true,
        })
        .await
        .unwrap();
    let a = tokio::spawn(builder(&client, &rec).build().unwrap().run());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    a.abort(); // killed: no shutdown, nothing settled
    let _ = a.await;
    let b = builder(&client, &rec).build().unwrap();
    let stop = b.shutdown_token();
    let b = tokio::spawn(b.run());
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() == 2).await,
        "re-run after the lease"
    );
    // three more lease periods: no third run
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.cancel();
    b.await.unwrap().unwrap();
    let runs = rec.runs();
    assert_eq!(runs.len(), 2);
    assert_eq!((runs[0].attempt, runs[1].attempt), (1, 2));
    let gap = runs[1].at.duration_since(runs[0].at);
    assert!(
        gap >= Duration::from_millis(900),
        "not before the lease ran out: {gap:?}"
    );
    assert_eq!(client.stats("work").await.unwrap().processed, 1);
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
}

pub async fn job_running_three_leases_is_never_delivered_twice(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let workers: Vec<_> = (0..2)
        .map(|_| builder(&client, &rec).build().unwrap())
        .collect();
    let stops: Vec<_> = workers.iter().map(|w| w.shutdown_token()).collect();
    let handles: Vec<_> = workers.into_iter().map(|w| tokio::spawn(w.run())).collect();
    client
        .enqueue(&Sleepy {
            key: 1,
            ms: 3500,
            hang_first: false,
        })
        .await
        .unwrap();
    let backend = client.backend();
    assert!(
        wait_for(Duration::from_secs(10), || async {
            backend.stats("work").await.unwrap().processed == 1
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for s in stops {
        s.cancel();
    }
    for h in handles {
        h.await.unwrap().unwrap();
    }
    assert_eq!(rec.len(), 1, "one delivery while its worker lived");
}

pub async fn stale_delivery_cannot_touch_the_newer_one(env: &Env) {
    let client = env.client.clone();
    let backend = client.backend();
    client
        .enqueue(&Sleepy {
            key: 1,
            ms: 0,
            hang_first: false,
        })
        .await
        .unwrap();
    let lease = Duration::from_millis(200);
    let first = backend
        .fetch("work", 10, lease)
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert_eq!(first.token.attempt(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = backend
        .fetch("work", 10, Duration::from_secs(30))
        .await
        .unwrap()
        .jobs
        .remove(0);
    assert_eq!((second.id, second.token.attempt()), (first.id, 2));

    let stale = |s: Settle| s;
    let acked = backend
        .settle(
            "work",
            &stale(Settle {
                acks: vec![(first.id, first.token)],
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    assert_eq!(acked.acked, 0);
    let retry = Reschedule {
        id: first.id,
        token: first.token,
        delay: Duration::ZERO,
        deliveries: 1,
        release: false,
    };
    let r = backend
        .settle(
            "work",
            &Settle {
                reschedules: vec![retry],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(r.rescheduled, 0);
    let dead = DeadLetterEntry {
        id: first.id,
        token: first.token,
        error: "stale".into(),
    };
    let d = backend
        .settle(
            "work",
            &Settle {
                dead: vec![dead],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(d.dead, 0);
    assert_eq!(
        backend
            .extend("work", &[(first.id, first.token)], lease)
            .await
            .unwrap(),
        [None]
    );
    assert!(backend.dead_letters("work", 10).await.unwrap().is_empty());
    // the newer delivery is untouched: still hidden, and its own token works
    assert!(
        backend
            .fetch("work", 10, lease)
            .await
            .unwrap()
            .jobs
            .is_empty()
    );
    let renewed = backend
        .extend(
            "work",
            &[(second.id, second.token)],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let t = renewed[0].expect("held");
    assert_eq!(t.attempt(), 2);
    assert!(t.lease_until_ms() >= second.token.lease_until_ms());
    let done = backend
        .settle(
            "work",
            &Settle {
                acks: vec![(second.id, t)],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(done.acked, 1);
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
}

pub async fn shutdown_with_100_in_flight_loses_none_and_hides_none(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let jobs: Vec<Sleepy> = (0..100)
        .map(|key| Sleepy {
            key,
            ms: 60_000,
            hang_first: false,
        })
        .collect();
    client.enqueue_batch(&jobs).await.unwrap();
    let w = builder(&client, &rec)
        .lease(Duration::from_secs(30))
        .concurrency(100)
        .grace_period(Duration::from_millis(300))
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 100).await);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(10), h)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // all 100 are back and visible now, not after their 30 s lease
    let visible = env.visible_now("work").await;
    assert_eq!(visible, 100);
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 100);
    let stats = client.stats("work").await.unwrap();
    assert_eq!(
        (stats.processed, stats.retried, stats.failed),
        (0, 0, 0),
        "a release is no failure"
    );

    // the next worker runs them all, and the interrupted attempt was not counted
    let again = Recorder::default();
    let w = builder(&client, &again).data(Fast(true)).build().unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(10), || again.len() == 100).await);
    let backend = client.backend();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            backend.stats("work").await.unwrap().processed == 100
        })
        .await
    );
    stop.cancel();
    h.await.unwrap().unwrap();
    assert!(again.runs().iter().all(|r| r.attempt == 1));
    assert_eq!(again.counts().len(), 100);
}

pub async fn shutdown_lets_running_jobs_finish_within_grace(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let jobs: Vec<Sleepy> = (0..50)
        .map(|key| Sleepy {
            key,
            ms: 300,
            hang_first: false,
        })
        .collect();
    client.enqueue_batch(&jobs).await.unwrap();
    let w = builder(&client, &rec)
        .concurrency(50)
        .grace_period(Duration::from_secs(10))
        .build()
        .unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 50).await);
    stop.cancel();
    h.await.unwrap().unwrap();
    assert_eq!(
        client.stats("work").await.unwrap().processed,
        50,
        "acks flushed before exit"
    );
    assert_eq!(client.queues().attributes("work").await.unwrap().msgs, 0);
}

pub async fn garbage_bodies_are_dead_lettered_with_reasons_and_good_jobs_run(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let rsmq = client.queues();
    client
        .enqueue(&Sleepy {
            key: 0,
            ms: 0,
            hang_first: false,
        })
        .await
        .unwrap();
    let bad: Vec<(&[u8], &str)> = vec![
        (b"not json", "cannot decode job"),
        (br#"{"hello":"world"}"#, "cannot decode job"),
        (
            br#"{"type":"no_such_job","args":{}}"#,
            "unknown job type \"no_such_job\"",
        ),
        (
            br#"{"type":"sleepy","args":{"key":"one"}}"#,
            "cannot decode job",
        ),
        (b"", "cannot decode job"),
        (b"\xff\xfe\xfd", "cannot decode job"),
    ];
    let mut batch = Vec::new();
    for (i, (body, _)) in bad.iter().enumerate() {
        batch.push(SendMessage::new(*body));
        let good = redjob::job::encode(&Sleepy {
            key: i as u64 + 1,
            ms: 0,
            hang_first: false,
        })
        .unwrap();
        batch.push(SendMessage::new(good));
    }
    let ids = rsmq.send_batch("work", &batch).await.unwrap();
    let w = builder(&client, &rec).build().unwrap();
    let stop = w.shutdown_token();
    let h = tokio::spawn(w.run());
    assert!(wait_until(Duration::from_secs(10), || rec.len() == 7).await);
    let backend = client.backend();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            backend.dead_letters("work", 100).await.unwrap().len() == 6
        })
        .await
    );
    stop.cancel();
    h.await.unwrap().unwrap();
    let dead = backend.dead_letters("work", 100).await.unwrap();
    for (i, (body, reason)) in bad.iter().enumerate() {
        let d = dead
            .iter()
            .find(|d| d.id == ids[2 * i])
            .unwrap_or_else(|| panic!("bad body {i} not dead-lettered"));
        assert_eq!(d.body, *body, "body kept as it was");
        assert!(d.error.contains(reason), "{i}: {}", d.error);
    }
    let stats = backend.stats("work").await.unwrap();
    assert_eq!((stats.processed, stats.dead), (7, 6));
    assert_eq!(rsmq.attributes("work").await.unwrap().msgs, 0);
}
