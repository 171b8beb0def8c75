//! How a worker counts a job's attempts and starts its runs in the worker's
//! own corner cases: a re-delivery merged into the run still going here (on
//! memory and Redis), and the largest concurrency `build()` accepts. Each test
//! asserts what RELIABILITY.md and docs/handlers.md promise.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Recorder, start, wait_for, wait_until};
use redjob::backend::memory::MemoryBackend;
use redjob::queue::Queues;
use redjob::worker::{Hooks, JobRun};
use redjob::{Client, Job, JobContext, JobError, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

/// Waits for the test to open its gate, then fails.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "gated_failure",
    queue = "att",
    max_attempts = 2,
    backoff = "1s"
)]
struct GatedFailure;

/// As [`GatedFailure`], with one attempt more.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "gated_failure_3",
    queue = "att",
    max_attempts = 3,
    backoff = "1s"
)]
struct GatedFailure3;

#[derive(Clone, Default)]
struct Gate(Arc<tokio::sync::Notify>);

async fn gated_failure(ctx: &JobContext) -> Result<(), JobError> {
    ctx.data::<Recorder>()?.record(ctx, 0);
    ctx.data::<Gate>()?.0.notified().await;
    Err(JobError::retry("boom"))
}

impl Job for GatedFailure {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        gated_failure(ctx).await
    }
}

impl Job for GatedFailure3 {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        gated_failure(ctx).await
    }
}

/// What the end hooks heard: (attempt, retry_in) of each retry, (attempt,
/// error) of each dead letter.
type Heard = (Vec<(u32, Duration)>, Vec<(u32, String)>);

/// Records what the end hooks hear.
#[derive(Clone, Default)]
struct Ends(Arc<Mutex<Heard>>);

impl Hooks for Ends {
    fn retried(&self, run: &JobRun<'_>, _: Duration, _: &str, retry_in: Duration) {
        self.0.lock().unwrap().0.push((run.attempt, retry_in));
    }

    fn dead_lettered(&self, run: &JobRun<'_>, _: Duration, error: &str) {
        self.0
            .lock()
            .unwrap()
            .1
            .push((run.attempt, error.to_string()));
    }
}

/// What came of a run merged with a re-delivery, then failed.
struct Merged {
    /// Retries and dead letters it added to the queue's counts.
    settled: (u64, u64),
    dead: Vec<redjob::backend::DeadLetter>,
    ends: Ends,
}

/// Runs `job`, makes it visible again while it runs (this worker fetches it
/// again: a second delivery, merged into the run), then fails the run.
async fn merged_then_failed<J: Job>(client: &Client, job: &J) -> Merged {
    let rec = Recorder::default();
    let gate = Gate::default();
    let ends = Ends::default();
    let before = client.stats("att").await.unwrap();
    let id = client.enqueue(job).await.unwrap();
    let w = start(
        Worker::builder(client.backend())
            .queue("att")
            .handle_signals(false)
            .data(rec.clone())
            .data(gate.clone())
            .hooks(ends.clone())
            .poll_interval(Duration::from_millis(50))
            .retry(RetryPolicy::default().jitter(false))
            .build()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    assert!(
        client
            .queues()
            .change_visibility("att", &id, Duration::ZERO)
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    gate.0.notify_one();
    assert!(
        wait_for(Duration::from_secs(5), || async {
            let s = client.stats("att").await.unwrap();
            s.retried + s.dead > before.retried + before.dead
        })
        .await,
        "the failed run was never settled"
    );
    let stats = client.stats("att").await.unwrap();
    let dead = client.dead_letters("att", 10).await.unwrap();
    w.stop().await;
    assert_eq!(rec.len(), 1, "one run: {:?}", rec.runs());
    let settled = (stats.retried - before.retried, stats.dead - before.dead);
    Merged {
        settled,
        dead,
        ends,
    }
}

/// A job made visible again while it runs here is fetched again by the same
/// worker and merged into the run going on (RELIABILITY.md: "One run per job
/// per worker"). That fetch is a delivery, and "a delivery counts toward
/// `max_attempts` when it is fetched": the job has had 2 deliveries of its 2
/// when the run fails, so it is "dead-lettered with its last error"
/// (docs/handlers.md, Retries and backoff). The worker decided from the
/// run's own delivery (1 of 2) instead: it scheduled a retry after the
/// backoff of attempt 1, whose next fetch was the job's third delivery,
/// dead-lettered unrun as "delivered 3 times, over max_attempts 2" (a
/// reason that is not the last error). With one attempt left after the
/// merge, the retry waits the backoff of the second attempt (2 s, not 1 s).
/// The end hooks hear what is settled.
async fn a_run_merged_with_a_redelivery_that_fails_counts_that_delivery(client: Client) {
    let Merged {
        settled,
        dead,
        ends,
    } = merged_then_failed(&client, &GatedFailure).await;
    assert_eq!(
        settled,
        (0, 1),
        "after 2 deliveries of max_attempts 2 the failed run is dead-lettered, not retried (dead letters: {dead:?})"
    );
    assert!(
        dead[0].error.contains("boom"),
        "dead-lettered with its last error: {:?}",
        dead[0].error
    );
    let (retried, died) = ends.0.lock().unwrap().clone();
    assert_eq!(retried, [], "the hooks heard no retry");
    assert_eq!(died.len(), 1, "the hooks heard the dead letter");
    assert_eq!(died[0].0, 2, "of the second delivery");
    assert!(died[0].1.contains("boom"), "{:?}", died[0].1);

    let Merged { settled, ends, .. } = merged_then_failed(&client, &GatedFailure3).await;
    assert_eq!(settled, (1, 0), "retried, of 3 attempts");
    let (retried, _) = ends.0.lock().unwrap().clone();
    assert_eq!(
        retried,
        [(2, Duration::from_secs(2))],
        "retried after the backoff of the second delivery (1 s doubled)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_merged_with_a_redelivery_that_fails_counts_that_delivery_in_memory() {
    a_run_merged_with_a_redelivery_that_fails_counts_that_delivery(Client::memory(
        MemoryBackend::new(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_merged_with_a_redelivery_that_fails_counts_that_delivery_on_redis() {
    let server = common::RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_run_merged_with_a_redelivery_that_fails_counts_that_delivery(client).await;
}

/// Succeeds at once.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "quick_ok", queue = "att")]
struct QuickOk;

impl Job for QuickOk {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 0);
        Ok(())
    }
}

/// An event, for a subscription's concurrency.
#[derive(Serialize, Deserialize, redjob::topic::Event)]
#[event(name = "att_event", topic = "att_events")]
struct Happened;

/// Absurd counts are refused ("absurd durations and counts are clamped or
/// refused", RELIABILITY.md), and a concurrency `build()` accepts runs jobs.
/// At 2^32, accepted before, the dispatcher read its free running slots as a
/// `u32` (dispatch.rs, `running_free() as u32`): 0, so it waited for a
/// running slot, which `running_slot` found free at once (`Freed::Taken`),
/// and it looped so for ever without fetching. `build()` now refuses a
/// concurrency, prefetch or subscription concurrency over
/// `MAX_CONCURRENCY` (1,000,000, as a queue's own concurrency), and runs
/// jobs at that most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_build_accepts_runs_jobs() {
    let client = Client::memory(MemoryBackend::new());
    let builder = || {
        Worker::builder(client.backend())
            .queue("att")
            .handle_signals(false)
    };
    let refused = |what: &str, built: redjob::Result<Worker<_>>| match built {
        Err(redjob::Error::InvalidValue { what: w, .. }) => assert_eq!(w, what),
        Err(e) => panic!("{what}: refused with {e}"),
        Ok(_) => panic!("{what}: an absurd count was accepted"),
    };
    let most = redjob::ops::MAX_CONCURRENCY as usize;
    refused(
        "concurrency",
        builder().concurrency(1 << 32).prefetch(0).build(),
    );
    refused(
        "concurrency",
        builder().concurrency(most + 1).prefetch(0).build(),
    );
    refused("prefetch", builder().prefetch(most + 1).build());
    refused(
        "subscription concurrency",
        builder()
            .subscribe(
                redjob::topic::Subscription::new("s").concurrency(most + 1),
                |_: Happened, _| async { Ok(()) },
            )
            .build(),
    );
    // the most accepted runs jobs, with its default prefetch and with none
    for prefetch in [None, Some(0)] {
        let rec = Recorder::default();
        client.enqueue(&QuickOk).await.unwrap();
        let mut b = builder().data(rec.clone()).concurrency(most);
        if let Some(n) = prefetch {
            b = b.prefetch(n);
        }
        let w = start(b.build().expect("accepted"));
        let ran = wait_until(Duration::from_secs(3), || rec.len() == 1).await;
        w.stop().await;
        assert!(
            ran,
            "the job never ran under concurrency {most}, prefetch {prefetch:?}"
        );
    }
}

/// Waits for its gate (which never opens here) with one attempt: only a run
/// cut by the shutdown ends it.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "gated_once", queue = "att", max_attempts = 1)]
struct GatedOnce;

impl Job for GatedOnce {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, 0);
        ctx.data::<Gate>()?.0.notified().await;
        Ok(())
    }
}

/// A run merged with a re-delivery (the job made visible again while it
/// runs here, fetched again by this worker) and then cancelled at shutdown
/// past the grace period is released: "made visible again at once, not
/// counted as an attempt" (RELIABILITY.md, Graceful shutdown), and "deliveries
/// that never started a handler are released with the count given back"
/// (the merged one started none). The release gave back one delivery of the
/// two: the job was left at 1 delivery, and with `max_attempts = 1` the next
/// worker dead-lettered it unrun ("delivered 2 times, over max_attempts 1").
async fn a_run_merged_with_a_redelivery_released_at_shutdown_gives_back_both(client: Client) {
    use redjob::inspect::Inspect;
    let rec = Recorder::default();
    let gate = Gate::default();
    let id = client.enqueue(&GatedOnce).await.unwrap();
    let worker = || {
        Worker::builder(client.backend())
            .queue("att")
            .handle_signals(false)
            .data(rec.clone())
            .data(gate.clone())
            .grace_period(Duration::from_millis(100))
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap()
    };
    let w = start(worker());
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    assert!(
        client
            .queues()
            .change_visibility("att", &id, Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(
        wait_for(Duration::from_secs(5), || async {
            let job = client.backend().job("att", &id).await.unwrap().unwrap();
            job.attempts == 2
        })
        .await,
        "the worker never fetched the job again"
    );
    w.stop().await;
    let job = client.backend().job("att", &id).await.unwrap().unwrap();
    assert_eq!(
        job.attempts, 0,
        "a run released at shutdown is no attempt, and neither is the delivery merged into it"
    );
    let w = start(worker());
    assert!(
        wait_until(Duration::from_secs(5), || rec.len() == 2).await,
        "the job never ran again (dead letters: {:?})",
        client.dead_letters("att", 10).await.unwrap()
    );
    assert_eq!(rec.runs()[1].attempt, 1, "it runs again as attempt 1");
    gate.0.notify_waiters();
    w.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_merged_with_a_redelivery_released_at_shutdown_gives_back_both_in_memory() {
    a_run_merged_with_a_redelivery_released_at_shutdown_gives_back_both(Client::memory(
        MemoryBackend::new(),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_merged_with_a_redelivery_released_at_shutdown_gives_back_both_on_redis() {
    let server = common::RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_run_merged_with_a_redelivery_released_at_shutdown_gives_back_both(client).await;
}

/// Throttled by a dependency on its first run, once its gate opens; runs
/// through on the next. One attempt.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "gated_throttle", queue = "att", max_attempts = 1)]
struct GatedThrottle;

impl Job for GatedThrottle {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let rec = ctx.data::<Recorder>()?;
        rec.record(ctx, 0);
        if rec.len() == 1 {
            ctx.data::<Gate>()?.0.notified().await;
            return Err(JobError::rate_limited(Duration::from_millis(300)));
        }
        Ok(())
    }
}

/// A run merged with a re-delivery (the job made visible again while it
/// runs here, fetched again by this worker) whose handler then says a
/// dependency throttles it goes back "without counting the attempt"
/// (`JobError::rate_limited`), as a release does: every delivery the run
/// holds is given back, its own and the merged one, which started no
/// handler. The throttle gave back one of the two: the job was left at 1
/// delivery, and with `max_attempts = 1` its next fetch dead-lettered it
/// unrun ("delivered 2 times, over max_attempts 1").
async fn a_run_merged_with_a_redelivery_throttled_gives_back_both(client: Client) {
    use redjob::inspect::Inspect;
    let rec = Recorder::default();
    let gate = Gate::default();
    let id = client.enqueue(&GatedThrottle).await.unwrap();
    let w = start(
        Worker::builder(client.backend())
            .queue("att")
            .handle_signals(false)
            .data(rec.clone())
            .data(gate.clone())
            .poll_interval(Duration::from_millis(50))
            .build()
            .unwrap(),
    );
    assert!(wait_until(Duration::from_secs(5), || rec.len() == 1).await);
    assert!(
        client
            .queues()
            .change_visibility("att", &id, Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(
        wait_for(Duration::from_secs(5), || async {
            let job = client.backend().job("att", &id).await.unwrap().unwrap();
            job.attempts == 2
        })
        .await,
        "the worker never fetched the job again"
    );
    gate.0.notify_one();
    let ran = wait_until(Duration::from_secs(5), || rec.len() == 2).await;
    let dead = client.dead_letters("att", 10).await.unwrap();
    w.stop().await;
    assert!(ran, "the job never ran again (dead letters: {dead:?})");
    assert_eq!(rec.runs()[1].attempt, 1, "it runs again as attempt 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_merged_with_a_redelivery_throttled_gives_back_both_in_memory() {
    a_run_merged_with_a_redelivery_throttled_gives_back_both(Client::memory(MemoryBackend::new()))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_merged_with_a_redelivery_throttled_gives_back_both_on_redis() {
    let server = common::RedisServer::start();
    let client = Client::connect(&server.url()).await.unwrap();
    a_run_merged_with_a_redelivery_throttled_gives_back_both(client).await;
}
