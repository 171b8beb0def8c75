//! Limits across the fleet: a queue's global concurrency and rate limit,
//! stored with the queue and held by the backend for every worker, whichever
//! path leases a job (a fetch, a prefetch, a send's hand-off).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::backend::{Backend, Settle};
use redjob::ops::{Admin, Concurrency, QueueSettings, RateLimit};
use redjob::queue::{QueueOptions, Queues};
use redjob::{Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::Env;
use crate::common::{start_serving, wait_for};

const QUEUE: &str = "limits";

/// Runs for its `ms`, recording its start and how many run at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "limits_sampled", queue = "limits")]
struct Sampled {
    ms: u64,
}

/// What the handlers saw.
#[derive(Default)]
struct Samples {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    starts: Mutex<Vec<Instant>>,
}

impl Samples {
    fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn starts(&self) -> Vec<Instant> {
        let mut s = self.starts.lock().unwrap().clone();
        s.sort();
        s
    }
}

impl Job for Sampled {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        use std::sync::atomic::Ordering::SeqCst;
        let s = ctx.data::<Arc<Samples>>()?;
        s.starts.lock().unwrap().push(Instant::now());
        let n = s.now.fetch_add(1, SeqCst) + 1;
        s.most.fetch_max(n, SeqCst);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        s.now.fetch_sub(1, SeqCst);
        Ok(())
    }
}

/// A worker of [`Sampled`] running up to `concurrency` at once.
fn worker(env: &Env, concurrency: usize, samples: &Arc<Samples>) -> Worker {
    Worker::builder(env.client.backend())
        .register::<Sampled>()
        .concurrency(concurrency)
        .lease(Duration::from_secs(3))
        .data(samples.clone())
        .handle_signals(false)
        .build()
        .unwrap()
}

async fn create_with(env: &Env, settings: QueueSettings) {
    env.client
        .backend()
        .create_queue(QUEUE, QueueOptions::default())
        .await
        .unwrap();
    env.client.set_settings(QUEUE, &settings).await.unwrap();
}

async fn enqueue(env: &Env, n: usize, ms: u64) {
    let jobs: Vec<Sampled> = (0..n).map(|_| Sampled { ms }).collect();
    env.client.enqueue_batch(&jobs).await.unwrap();
}

/// Waits (`limit` at most) until `n` jobs were processed.
async fn processed(env: &Env, n: u64, limit: Duration) -> bool {
    wait_for(limit, || async {
        env.client.stats(QUEUE).await.unwrap().processed >= n
    })
    .await
}

/// The most starts in any window `[s, s + len)` that begins at a start.
fn most_in_window(starts: &[Instant], len: Duration) -> usize {
    let mut most = 0;
    let mut j = 0;
    for i in 0..starts.len() {
        while j < starts.len() && starts[j] < starts[i] + len {
            j += 1;
        }
        most = most.max(j - i);
    }
    most
}

pub async fn a_global_concurrency_holds_across_workers(env: &Env) {
    create_with(env, QueueSettings::concurrency(Concurrency::global(4))).await;
    // a backlog 10x the limit, before any worker looks
    enqueue(env, 40, 100).await;
    let samples = Arc::new(Samples::default());
    let mut running = Vec::new();
    for _ in 0..3 {
        running.push(start_serving(worker(env, 10, &samples)).await);
    }
    assert!(processed(env, 40, Duration::from_secs(30)).await, "all ran");
    for w in running {
        w.stop().await;
    }
    assert_eq!(
        samples.most(),
        4,
        "the limit was reached and never exceeded"
    );
}

pub async fn a_rate_limit_holds_in_every_sliding_window(env: &Env) {
    let period = Duration::from_secs(1);
    create_with(env, QueueSettings::rate_limit(RateLimit::new(5, period))).await;
    enqueue(env, 50, 50).await;
    let samples = Arc::new(Samples::default());
    let mut running = Vec::new();
    for _ in 0..3 {
        running.push(start_serving(worker(env, 10, &samples)).await);
    }
    assert!(processed(env, 50, Duration::from_secs(30)).await, "all ran");
    for w in running {
        w.stop().await;
    }
    let starts = samples.starts();
    assert_eq!(starts.len(), 50);
    // the backend counts starts by its clock when it leases; a handler starts
    // a few ms later on Redis (none on the memory backend's paused clock)
    let slack = if env.is_redis() {
        Duration::from_millis(100)
    } else {
        Duration::ZERO
    };
    assert_eq!(
        most_in_window(&starts, period - slack),
        5,
        "the limit was reached and never exceeded in any window"
    );
    // ten windows' worth took at least nine periods
    let took = starts[49] - starts[0];
    assert!(took >= period * 9 - slack, "{took:?}");
}

pub async fn a_hand_off_never_bypasses_a_global_concurrency(env: &Env) {
    create_with(env, QueueSettings::default()).await;
    let samples = Arc::new(Samples::default());
    // one worker runs a long job, then a second one waits for the queue (on
    // Redis it registers for a hand-off)
    let first = start_serving(worker(env, 1, &samples)).await;
    enqueue(env, 1, 1500).await;
    assert!(
        wait_for(Duration::from_secs(5), || async {
            samples.starts.lock().unwrap().len() == 1
        })
        .await
    );
    let second = start_serving(worker(env, 1, &samples)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // an operator limits the queue to one at a time while both are so
    env.client
        .set_settings(QUEUE, &QueueSettings::concurrency(Concurrency::global(1)))
        .await
        .unwrap();
    enqueue(env, 1, 100).await;
    assert!(processed(env, 2, Duration::from_secs(10)).await, "both ran");
    first.stop().await;
    second.stop().await;
    assert_eq!(samples.most(), 1, "the second job waited for the first");
}

pub async fn a_place_held_by_a_dead_worker_frees_when_its_lease_ends(env: &Env) {
    create_with(env, QueueSettings::concurrency(Concurrency::global(1))).await;
    enqueue(env, 3, 50).await;
    // a worker that took a job and died: its lease runs for 2 s
    let lease = Duration::from_secs(2);
    let taken = Instant::now();
    let held = env.client.backend().fetch(QUEUE, 1, lease).await.unwrap();
    assert_eq!(held.jobs.len(), 1);
    let samples = Arc::new(Samples::default());
    let w = start_serving(worker(env, 10, &samples)).await;
    // the two others run once the lease ends, then the dead one's job again
    assert!(processed(env, 3, Duration::from_secs(15)).await, "all ran");
    w.stop().await;
    let starts = samples.starts();
    assert_eq!(starts.len(), 3);
    let first = starts[0] - taken;
    // Redis counts a lease until the second it ends in has passed
    let late = Duration::from_millis(1000 + 500);
    assert!(
        first >= lease - Duration::from_millis(50) && first <= lease + late,
        "the first start came {first:?} after the lease began"
    );
    assert_eq!(samples.most(), 1, "one at a time");
}

pub async fn a_workers_limits_hold_from_the_first_job_of_a_queue_created_later(env: &Env) {
    let samples = Arc::new(Samples::default());
    // the queue does not exist yet: the builder's limit is stored with it
    // before the first job is leased
    let w = Worker::builder(env.client.backend())
        .register::<Sampled>()
        .queue_global_concurrency(QUEUE, 2)
        .concurrency(10)
        .lease(Duration::from_secs(3))
        .data(samples.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start_serving(w).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    enqueue(env, 20, 100).await;
    assert!(processed(env, 20, Duration::from_secs(30)).await, "all ran");
    w.stop().await;
    assert_eq!(samples.most(), 2, "the limit held from the first job");
    let stored = env.client.settings(QUEUE).await.unwrap();
    assert_eq!(stored.concurrency, Some(Concurrency::global(2)));
}

/// A queue deleted while workers serve it loses its stored settings; sent to
/// again, it is created again, and the workers' builder limits are stored
/// with it before they lease its first job (they went two minutes without,
/// till their recheck).
pub async fn a_workers_limits_hold_for_a_queue_deleted_and_created_again(env: &Env) {
    let samples = Arc::new(Samples::default());
    let limited = || {
        Worker::builder(env.client.backend())
            .register::<Sampled>()
            .queue_global_concurrency(QUEUE, 2)
            .concurrency(10)
            .lease(Duration::from_secs(3))
            .data(samples.clone())
            .handle_signals(false)
            .build()
            .unwrap()
    };
    let (a, b) = (
        start_serving(limited()).await,
        start_serving(limited()).await,
    );
    enqueue(env, 10, 100).await;
    assert!(processed(env, 10, Duration::from_secs(30)).await, "all ran");
    assert_eq!(samples.most(), 2, "the limit held before the delete");
    env.client.backend().delete_queue(QUEUE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    samples.most.store(0, std::sync::atomic::Ordering::SeqCst);
    enqueue(env, 20, 100).await;
    assert!(processed(env, 20, Duration::from_secs(30)).await, "all ran");
    a.stop().await;
    b.stop().await;
    assert_eq!(
        samples.most(),
        2,
        "the limit held after the queue came back"
    );
    let stored = env.client.settings(QUEUE).await.unwrap();
    assert_eq!(stored.concurrency, Some(Concurrency::global(2)));
}

pub async fn lifting_a_limit_wakes_the_workers_it_held(env: &Env) {
    create_with(env, QueueSettings::rate_limit(RateLimit::per_hour(2))).await;
    enqueue(env, 4, 10).await;
    let samples = Arc::new(Samples::default());
    // beats every second: a change is heard within one
    let w = start_serving(worker(env, 10, &samples)).await;
    assert!(processed(env, 2, Duration::from_secs(10)).await, "two ran");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        env.client.stats(QUEUE).await.unwrap().processed,
        2,
        "the rest wait for the hour"
    );
    // the worker sleeps until the hour is up, unless the change wakes it
    env.client
        .set_settings(QUEUE, &QueueSettings::rate_limit(RateLimit::NONE))
        .await
        .unwrap();
    assert!(
        processed(env, 4, Duration::from_secs(8)).await,
        "the rest ran once the limit was lifted"
    );
    w.stop().await;
}

pub async fn the_usage_of_limits_is_read_as_a_fetch_counts_it(env: &Env) {
    let mut both = QueueSettings::concurrency(Concurrency::global(2));
    both.rate_limit = Some(RateLimit::per_hour(3));
    create_with(env, both).await;
    let q = env.client.backend();
    let usage = env.client.limit_usage(QUEUE).await.unwrap();
    assert_eq!(
        (
            usage.in_flight,
            usage.started_in_window,
            usage.held_until_ms
        ),
        (0, 0, None)
    );
    assert_eq!(usage.rate_limit, RateLimit::per_hour(3));
    enqueue(env, 5, 10).await;
    let first = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert_eq!(first.jobs.len(), 2, "the global concurrency's 2");
    assert!(first.held.concurrency && !first.held.rate);
    assert_eq!(first.held.jobs, 3, "the due jobs it held back");
    let usage = env.client.limit_usage(QUEUE).await.unwrap();
    assert_eq!((usage.in_flight, usage.started_in_window), (2, 2));
    let held = usage.held_until_ms.expect("held back");
    // a place frees when the first lease's second has passed
    let now = env
        .now()
        .await
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        held > now + 29_000 && held <= now + 32_000,
        "{held} vs {now}"
    );
    let none = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert!(none.jobs.is_empty() && none.held.concurrency);
    assert_eq!(none.held.jobs, 3);
    // settled: the rate is then the full one (3 an hour, 2 started)
    let settle = Settle {
        acks: first.jobs.iter().map(|d| (d.id, d.token)).collect(),
        ..Settle::default()
    };
    q.settle(QUEUE, &settle).await.unwrap();
    let next = q.fetch(QUEUE, 5, Duration::from_secs(30)).await.unwrap();
    assert_eq!(next.jobs.len(), 1, "the rate's third");
    assert!(next.held.rate && !next.held.concurrency);
    assert_eq!(next.held.jobs, 2);
    let usage = env.client.limit_usage(QUEUE).await.unwrap();
    assert_eq!((usage.in_flight, usage.started_in_window), (1, 3));
    let until = usage.held_until_ms.expect("held back by the rate");
    assert!(
        until > now + 3_500_000,
        "an hour after the first start: {until}"
    );
    assert!(matches!(
        env.client.limit_usage("nope").await,
        Err(redjob::Error::QueueNotFound { .. })
    ));
}

pub async fn cancelling_a_running_job_wakes_a_worker_its_place_held(env: &Env) {
    freeing_a_place_wakes_a_held_worker(env, false).await;
}

pub async fn deleting_a_running_job_wakes_a_worker_its_place_held(env: &Env) {
    freeing_a_place_wakes_a_held_worker(env, true).await;
}

/// A running job cancelled (or deleted, as an RSMQ client's
/// `deleteMessage` does) while another waits for its place.
async fn freeing_a_place_wakes_a_held_worker(env: &Env, delete: bool) {
    use redjob::inspect::Inspect;
    create_with(env, QueueSettings::concurrency(Concurrency::global(1))).await;
    let samples = Arc::new(Samples::default());
    // leases of 30 s: a worker held back sleeps until the first one's end
    let w = Worker::builder(env.client.backend())
        .register::<Sampled>()
        .concurrency(4)
        .grace_period(Duration::from_secs(1))
        .data(samples.clone())
        .handle_signals(false)
        .build()
        .unwrap();
    let w = start_serving(w).await;
    let long = env.client.enqueue(&Sampled { ms: 20_000 }).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            samples.starts.lock().unwrap().len() == 1
        })
        .await
    );
    env.client.enqueue(&Sampled { ms: 10 }).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(samples.starts().len(), 1, "held back by the running one");
    // an operator cancels the running job: its place frees at once
    let cancelled = Instant::now();
    if delete {
        assert!(env.client.backend().delete(QUEUE, &long).await.unwrap());
    } else {
        env.client.cancel(QUEUE, &long).await.unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(10), || async {
            samples.starts.lock().unwrap().len() == 2
        })
        .await
    );
    let waited = samples.starts()[1] - cancelled;
    w.stop().await;
    assert!(
        waited < Duration::from_secs(3),
        "the next job started {waited:?} after the cancel"
    );
}
