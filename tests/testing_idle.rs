//! The test kit's `run_until_idle` and `advance`: new queues are served, a delay
//! of `d` runs after `advance(d)`, simulated time costs no real time, and a run
//! that cannot get idle fails with what is pending instead of hanging.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redjob::client::EnqueueOptions;
use redjob::testing::TestKit;
use redjob::{Client, Error, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Default)]
struct Runs(AtomicU32);

fn count(ctx: &JobContext) -> Result<(), JobError> {
    ctx.data::<Arc<Runs>>()?.0.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "idle_signed_up", queue = "signups")]
struct SignedUp {
    user: u64,
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "idle_welcome", queue = "emails")]
struct Welcome {
    user: u64,
}

impl Job for SignedUp {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        count(ctx)?;
        let client = ctx.data::<Client>()?;
        client.enqueue(&Welcome { user: self.user }).await?;
        // the same type again, into a queue named only at enqueue
        let opts = EnqueueOptions::new().queue("integrations");
        client
            .enqueue_with(&Welcome { user: self.user }, opts)
            .await?;
        Ok(())
    }
}

impl Job for Welcome {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        count(ctx)
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "idle_nap", queue = "naps", timeout = "2d")]
struct Nap {
    secs: u64,
}

impl Job for Nap {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_secs(self.secs)).await;
        count(ctx)
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "idle_stuck", queue = "stuck")]
struct Stuck;

impl Job for Stuck {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Job)]
#[job(name = "idle_forever", queue = "chain")]
struct Forever;

impl Job for Forever {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Client>()?.enqueue(&Forever).await?;
        Ok(())
    }
}

fn kit() -> (TestKit, Arc<Runs>) {
    let runs = Arc::new(Runs::default());
    let kit = TestKit::new();
    let client = kit.client();
    (kit.data(client).data(runs.clone()), runs)
}

/// Runs `f` to its end, or panics after `limit` of real time (whatever tokio's
/// clock does), so that a hang fails the test instead of stalling the suite.
async fn within_real<F: Future>(limit: Duration, f: F) -> F::Output {
    let (fire, expired) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        let _ = fire.send(());
    });
    tokio::select! {
        out = f => out,
        _ = expired => panic!("still running after {limit:?} of real time"),
    }
}

#[tokio::test]
async fn jobs_enqueued_into_queues_that_did_not_exist_are_run_too() {
    let (kit, runs) = kit();
    kit.client().enqueue(&SignedUp { user: 1 }).await.unwrap();
    let report = within_real(Duration::from_secs(30), kit.run_until_idle())
        .await
        .unwrap();
    assert_eq!(report.processed, 3, "{report:?}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 3);
    assert!(kit.enqueued::<Welcome>().is_empty());
}

#[tokio::test(start_paused = true)]
async fn advance_by_the_delay_runs_jobs_enqueued_with_it_under_paused_time() {
    let (kit, runs) = kit();
    for i in 0..50 {
        let d = Duration::from_secs(10) + Duration::from_micros(i * 37);
        kit.client()
            .enqueue_in(&Welcome { user: i }, d)
            .await
            .unwrap();
        let report = kit.advance(d).await.unwrap();
        assert_eq!(report.processed, 1, "job {i}: {report:?}");
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 50);
}

#[tokio::test]
async fn advance_by_the_delay_runs_jobs_enqueued_with_it_in_real_time() {
    let (kit, runs) = kit();
    for i in 0..20 {
        kit.client()
            .enqueue_in(&Welcome { user: i }, Duration::from_secs(3600))
            .await
            .unwrap();
        let report = kit.advance(Duration::from_secs(3600)).await.unwrap();
        assert_eq!(report.processed, 1, "job {i}: {report:?}");
    }
    assert_eq!(runs.0.load(Ordering::SeqCst), 20);
}

#[tokio::test(start_paused = true)]
async fn a_handler_sleeping_a_simulated_day_takes_no_real_day() {
    let (kit, runs) = kit();
    let start = tokio::time::Instant::now();
    kit.client().enqueue(&Nap { secs: 86_400 }).await.unwrap();
    // polling every simulated millisecond took about 25 µs of real time each: a
    // simulated day cost over half an hour
    let report = within_real(Duration::from_secs(60), kit.run_until_idle())
        .await
        .unwrap();
    assert_eq!(report.processed, 1);
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    assert!(start.elapsed() >= Duration::from_secs(86_400));
}

#[tokio::test]
async fn a_handler_that_never_returns_fails_the_run_naming_it() {
    let (kit, _) = kit();
    let kit = kit.wait_limit(Duration::from_millis(300));
    kit.client().enqueue(&Stuck).await.unwrap();
    kit.client().enqueue(&Welcome { user: 1 }).await.unwrap();
    let err = within_real(Duration::from_secs(30), kit.run_until_idle())
        .await
        .unwrap_err();
    let Error::NotIdle { pending, waited } = &err else {
        panic!("expected NotIdle, got {err:?}");
    };
    assert_eq!(*waited, Duration::from_millis(300));
    assert_eq!(pending, &["queue \"stuck\" running: 1 idle_stuck"], "{err}");
    assert!(err.to_string().contains("idle_stuck"), "{err}");
}

#[tokio::test]
async fn jobs_that_keep_enqueueing_jobs_fail_the_run_instead_of_spinning() {
    let (kit, _) = kit();
    let kit = kit.wait_limit(Duration::from_millis(300));
    kit.client().enqueue(&Forever).await.unwrap();
    let err = within_real(Duration::from_secs(30), kit.run_until_idle())
        .await
        .unwrap_err();
    let Error::NotIdle { pending, .. } = &err else {
        panic!("expected NotIdle, got {err:?}");
    };
    assert_eq!(pending.len(), 1, "{err}");
    assert!(pending[0].starts_with("queue \"chain\""), "{err}");
    assert!(pending[0].contains("idle_forever"), "{err}");
}

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "idle_keyed",
    queue = "keyed",
    concurrency_key = "account",
    per_key = 1
)]
struct KeyedStep {
    account: u64,
    holds: bool,
}

impl Job for KeyedStep {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        count(ctx)?;
        if self.holds {
            ctx.data::<Arc<tokio::sync::Notify>>()?.notify_one();
            ctx.cancellation().cancelled().await;
            return Err(JobError::retry("stopped"));
        }
        Ok(())
    }
}

/// A keyed job waiting behind a running job of its key that is cancelled
/// takes the place when the cancelled run's lease ends, as a worker running
/// all along would run it: the kit's idle check and its stops counted only
/// jobs in the queue's sorted set, not the key's place freed by time.
#[tokio::test(start_paused = true)]
async fn a_keyed_job_behind_a_cancelled_running_one_runs_when_its_lease_ends() {
    use redjob::inspect::Inspect;
    let started = Arc::new(tokio::sync::Notify::new());
    let (kit, runs) = kit();
    let kit = kit.data(started.clone());
    let client = kit.client();
    let holder = KeyedStep {
        account: 1,
        holds: true,
    };
    let a = client.enqueue(&holder).await.unwrap();
    let next = KeyedStep {
        account: 1,
        holds: false,
    };
    client.enqueue(&next).await.unwrap();
    let run = tokio::spawn({
        let kit = kit.clone();
        async move { kit.run_until_idle().await }
    });
    started.notified().await;
    kit.backend().cancel("keyed", &a).await.unwrap();
    let first = within_real(Duration::from_secs(30), run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.processed, 0, "{first:?}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
    // the cancelled run's lease (the kit's 30 s) holds the key's place
    let report = within_real(
        Duration::from_secs(30),
        kit.advance(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(report.processed, 1, "{report:?}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 2);
}

/// Under tokio's paused clock a handler that never returns is ended by its
/// own timeout (the paused clock jumps to it), not by the kit's wait_limit:
/// the run is idle, the job waits for its retry (docs/testing.md said such a
/// run fails after wait_limit).
#[tokio::test(start_paused = true)]
async fn under_the_paused_clock_a_handler_that_never_returns_times_out() {
    let (kit, _) = kit();
    let kit = kit.wait_limit(Duration::from_secs(2));
    kit.client().enqueue(&Stuck).await.unwrap();
    let before = kit.clock().now_ms();
    let report = within_real(Duration::from_secs(30), kit.run_until_idle())
        .await
        .unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    // the job type's default timeout, 30 minutes
    assert!(kit.clock().now_ms() - before >= 30 * 60 * 1000);
    let waiting = kit.scheduled::<Stuck>();
    assert_eq!(waiting.len(), 1);
    use redjob::inspect::Inspect;
    let job = kit.backend().job("stuck", &waiting[0].id).await.unwrap();
    let error = job.and_then(|j| j.last_error).unwrap_or_default();
    assert!(error.ends_with("timed out after 1800s"), "{error}");
}

/// Puts its own job off for a minute on its first attempt (an RSMQ-style
/// change of visibility, as a handler that must wait for something does),
/// then succeeds.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "idle_postponed", queue = "postponed")]
struct Postponed;

impl Job for Postponed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            let backend = ctx.data::<redjob::backend::memory::MemoryBackend>()?;
            redjob::queue::Queues::change_visibility(
                backend,
                ctx.queue(),
                &ctx.id(),
                Duration::from_secs(60),
            )
            .await?;
            return Ok(());
        }
        count(ctx)
    }
}

/// A running job made invisible for a minute (its lease gone: its ack no
/// longer matches, as on Redis) is a job due later, not a running one:
/// `run_until_idle` leaves it for `advance`, which runs it a minute on. The
/// old code kept the memory backend's "leased" mark on it after the change
/// of visibility, so the kit took it for a job still running:
/// `run_until_idle` failed with `NotIdle` ("running: 1 idle_postponed")
/// after its wait limit.
#[tokio::test]
async fn a_job_whose_visibility_changed_while_it_ran_waits_for_advance() {
    let (kit, runs) = kit();
    let backend = kit.backend().clone();
    let kit = kit.data(backend).wait_limit(Duration::from_secs(3));
    kit.client().enqueue(&Postponed).await.unwrap();
    let report = within_real(Duration::from_secs(30), kit.run_until_idle())
        .await
        .expect("nothing runs: the job is due in a minute");
    assert_eq!(report.processed, 0, "{report:?}");
    assert_eq!(kit.scheduled::<Postponed>().len(), 1);
    let report = within_real(
        Duration::from_secs(30),
        kit.advance(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    assert_eq!(report.processed, 1, "{report:?}");
    assert_eq!(runs.0.load(Ordering::SeqCst), 1);
}
