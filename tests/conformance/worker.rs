//! Every worker behaviour: processing, delays, retries and backoff, dead letters,
//! panics, timeouts, garbage bodies, limits, shared data, leases, fencing, crashes
//! and shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

use super::Env;
use crate::common::{Recorder, start, wait_for, wait_until};

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

pub(super) fn worker(client: &Client, rec: &Recorder) -> redjob::worker::WorkerBuilder {
    Worker::builder(client.backend())
        .queue("work")
        .handle_signals(false)
        .data(rec.clone())
        .retry(RetryPolicy::default().jitter(false))
}

/// Waits until the "work" queue has a dead letter, then returns them all.
async fn wait_dead(client: &Client) -> Vec<redjob::backend::DeadLetter> {
    assert!(
        wait_for(Duration::from_secs(5), || async {
            !client.dead_letters("work", 10).await.unwrap().is_empty()
        })
        .await
    );
    client.dead_letters("work", 10).await.unwrap()
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
        // a job is leased only once Redis's clock passed its due; the test
        // reads its own monotonic clock, which Redis's wall clock (slewed by
        // NTP) can outrun by some µs over the wait: 1 ms of slack for that
        let slack = Duration::from_millis(1);
        assert!(
            r.at + slack >= due,
            "job {} started {:?} early",
            r.key,
            due - r.at
        );
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
    // counted from the settle's whole ms (a retry is due in its ms), so up to
    // 1 ms less from the run's start
    for pair in runs.windows(2) {
        let gap = pair[1].at.duration_since(pair[0].at);
        assert!(
            gap + Duration::from_millis(1) >= Duration::from_millis(100),
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
    assert!(wait_until(Duration::from_secs(10), || rec.len() >= 4).await);
    let dead = wait_dead(&client).await;
    w.stop().await;
    let runs = rec.runs();
    assert_eq!(runs.len(), 4, "max_attempts = 4");
    // backoff 100 ms doubled per attempt, no jitter: 100, 200, 400 ms, counted
    // from the settle's whole ms (a retry is due in its ms), so up to 1 ms less
    // from the run's start
    for (i, pair) in runs.windows(2).enumerate() {
        let gap = pair[1].at.duration_since(pair[0].at);
        let want = Duration::from_millis(100 << i);
        assert!(
            gap + Duration::from_millis(1) >= want && gap < want + Duration::from_millis(400),
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
    let dead = wait_dead(&client).await;
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

/// Stops a helper task it spawned by cancelling its run's token (tokio-util's
/// way for tasks that share one), waits for it a little, then returns what
/// `outcome` says: 0 succeeds, 1 fails for a retry, 2 fails for good.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "self_cancel",
    queue = "work",
    max_attempts = 2,
    backoff = "100ms"
)]
struct SelfCancel {
    key: u64,
    outcome: u8,
}

impl Job for SelfCancel {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        let token = ctx.cancellation().clone();
        let helper = tokio::spawn(async move { token.cancelled().await });
        ctx.cancellation().cancel();
        let _ = helper.await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        match self.outcome {
            0 => Ok(()),
            1 => Err(JobError::retry("upstream said no")),
            _ => Err(JobError::fatal("no such account")),
        }
    }
}

/// A handler's own cancel of its token is no cancellation by the worker:
/// the run goes on and its outcome stands (the worker dropped the run and
/// released the job, which ran again at once as the same attempt, forever).
pub async fn a_handler_that_cancels_its_own_token_keeps_its_outcome(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).build().unwrap());
    for outcome in 0..3 {
        client
            .enqueue(&SelfCancel {
                key: u64::from(outcome),
                outcome,
            })
            .await
            .unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(10), || async {
            client.dead_letters("work", 10).await.unwrap().len() == 2
        })
        .await,
        "the failing two dead-lettered"
    );
    // (time for a run too many to show)
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.stop().await;
    let attempts = |key| {
        rec.runs()
            .iter()
            .filter(|r| r.key == key)
            .map(|r| r.attempt)
            .collect::<Vec<_>>()
    };
    assert_eq!(attempts(0), [1], "succeeded once");
    assert_eq!(attempts(1), [1, 2], "retried, then dead");
    assert_eq!(attempts(2), [1], "dead at once");
    let stats = client.stats("work").await.unwrap();
    assert_eq!((stats.processed, stats.retried, stats.dead), (1, 1, 2));
}

/// Panics while it is decoded when `v` is 13 (a `deserialize_with` that
/// unwraps meeting a changed schema).
fn panicky<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v == 13 {
        panic!("unlucky field value");
    }
    Ok(v)
}

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "decode_panics",
    queue = "work",
    max_attempts = 2,
    backoff = "100ms"
)]
struct DecodePanics {
    #[serde(deserialize_with = "panicky")]
    v: u32,
}

impl Job for DecodePanics {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Succeeds, then panics as its value is dropped.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "drop_panics", queue = "work", max_attempts = 3)]
struct DropPanics {
    key: u64,
}

impl Job for DropPanics {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.key);
        Ok(())
    }
}

impl Drop for DropPanics {
    fn drop(&mut self) {
        // (the worker's decoded value only: the enqueue's own drops quietly)
        if self.key == 77 && !std::thread::panicking() {
            panic!("drop panics");
        }
    }
}

/// A panic on the worker's path, not the handler's: decoding the job (a
/// body that cannot be decoded: dead-lettered with the reason, at once), or
/// dropping its value once the handler returned (its outcome stands). Both
/// were retried every second, up to 498 deliveries; the second ran a
/// succeeded job again.
pub async fn a_panic_decoding_or_dropping_a_job_is_no_loop(env: &Env) {
    let client = env.client.clone();
    let rec = Recorder::default();
    let w = start(worker(&client, &rec).build().unwrap());
    client.enqueue(&DecodePanics { v: 13 }).await.unwrap();
    // sent as a body, so that only the worker's decoded value is 77
    let body = r#"{"type":"drop_panics","args":{"key":77}}"#;
    env.queues()
        .send("work", redjob::queue::SendMessage::new(body))
        .await
        .unwrap();
    let dead = wait_dead(&client).await;
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() >= 1).await,
        "the dropped job ran"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    w.stop().await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0]
            .error
            .contains("decoding panicked: unlucky field value"),
        "{}",
        dead[0].error
    );
    assert_eq!(dead[0].attempts, 1);
    assert_eq!(rec.len(), 1, "the succeeded job ran once: {:?}", rec.runs());
    let s = client.stats("work").await.unwrap();
    assert_eq!((s.processed, s.retried, s.dead), (1, 0, 1));
}

/// Runs until its run is cancelled (or 60 s), noting when that came.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "until_cancelled", queue = "work")]
struct UntilCancelled;

/// When the run of [`UntilCancelled`] saw its cancellation.
#[derive(Clone, Default)]
struct SawCancel(Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>);

impl Job for UntilCancelled {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 0);
        let saw = ctx.data::<SawCancel>()?.clone();
        let token = ctx.cancellation().clone();
        // a task of its own: the worker drops the handler's future
        tokio::spawn(async move {
            token.cancelled().await;
            saw.0.lock().unwrap().push(tokio::time::Instant::now());
        });
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(())
    }
}

/// An operator's cancel or delete of a running job reaches its worker at
/// once (it renews the queue's leases when told, finds the job gone and
/// stops the run), not at the lease's next renewal, a third of the lease
/// (30 s) later.
pub async fn a_running_job_cancelled_stops_at_once_not_at_the_next_renewal(env: &Env) {
    use redjob::inspect::Inspect;
    let client = env.client.clone();
    let rec = Recorder::default();
    let saw = SawCancel::default();
    let w = start(
        worker(&client, &rec)
            .data(saw.clone())
            .lease(Duration::from_secs(30))
            .build()
            .unwrap(),
    );
    for (n, delete) in [(1, false), (2, true)] {
        let id = client.enqueue(&UntilCancelled).await.unwrap();
        assert!(wait_until(Duration::from_secs(5), || rec.len() == n).await);
        // past the first renewals' phase: the next one is 10 s on
        tokio::time::sleep(Duration::from_millis(200)).await;
        let at = tokio::time::Instant::now();
        if delete {
            assert!(env.queues().delete("work", &id).await.unwrap());
        } else {
            client.cancel("work", &id).await.unwrap();
        }
        assert!(
            wait_until(Duration::from_secs(15), || saw.0.lock().unwrap().len() == n).await,
            "the run was stopped"
        );
        let took = saw.0.lock().unwrap()[n - 1] - at;
        assert!(
            took < Duration::from_secs(2),
            "the run stopped {took:?} after the {}",
            if delete { "delete" } else { "cancel" }
        );
    }
    w.stop().await;
    assert_eq!(rec.len(), 2, "neither ran again");
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

/// A value the worker was not given is a set-up mistake no retry fixes.
pub async fn missing_data_is_dead_lettered_at_once_naming_the_type(env: &Env) {
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
            backend.stats("work").await.unwrap().dead >= 1
        })
        .await
    );
    w.stop().await;
    assert_eq!(client.stats("work").await.unwrap().retried, 0);
    let dead = client.dead_letters("work", 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].error.starts_with("fatal: "), "{}", dead[0].error);
    assert!(dead[0].error.contains("Recorder"), "{}", dead[0].error);
}

pub async fn invalid_settings_are_rejected_at_build(env: &Env) {
    let client = env.client.clone();
    let b = || Worker::builder(client.backend()).handle_signals(false);
    assert!(b().concurrency(0).build().is_err());
    assert!(b().lease(Duration::from_millis(10)).build().is_err());
    assert!(b().queue("bad name").build().is_err());
    assert!(b().queue_concurrency("q", 0).build().is_err());
    // a limit the queue's settings could not store
    let most = redjob::ops::MAX_CONCURRENCY as usize;
    assert!(b().queue_concurrency("q", most + 1).build().is_err());
    assert!(b().queue_concurrency("q", most).build().is_ok());
    assert!(b().poll_interval(Duration::ZERO).build().is_err());
    let w = b().register::<Rec>().register::<Gauge>().build().unwrap();
    assert_eq!(w.queues().collect::<Vec<_>>(), ["work", "narrow"]);
}

/// Once a listener's notifications are in effect it wakes each of its queues
/// (with `listen` and `listen_handoff` alike): a job sent after a starting
/// worker's first fetch and before its subscription took effect was heard by
/// no one, and would otherwise wait for the fallback poll (a minute).
pub async fn a_listener_wakes_each_of_its_queues_once_subscribed(env: &Env) {
    use redjob::backend::Backend;
    let b = env.client.backend();
    let queues = vec!["wake-a".to_string(), "wake-b".to_string()];
    for handoff in [false, true] {
        let subscribed = std::sync::atomic::AtomicBool::new(false);
        let woken = std::sync::Mutex::new(Vec::<String>::new());
        let wake = |q: &str| {
            if subscribed.load(Ordering::SeqCst) {
                woken.lock().unwrap().push(q.to_string());
            }
        };
        let on_subscribed = || subscribed.store(true, Ordering::SeqCst);
        let stop = tokio_util::sync::CancellationToken::new();
        let listening = async {
            if handoff {
                b.listen_handoff(&queues, "w1", &wake, &|_| {}, &on_subscribed, &stop)
                    .await
            } else {
                b.listen(&queues, &wake, &on_subscribed).await
            }
        };
        let all_woken = wait_until(Duration::from_secs(5), || {
            let w = woken.lock().unwrap();
            queues.iter().all(|q| w.contains(q))
        });
        tokio::select! {
            r = listening => panic!("the listener ended: {r:?}"),
            all = all_woken => assert!(all, "handoff {handoff}: woken {:?}", woken.lock().unwrap()),
        }
    }
}
