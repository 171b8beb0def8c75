//! A newcomer's tests for the first-week features, written from docs/testing.md
//! (and the other chapters where testing.md says nothing).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redjob::backend::Backend;
use redjob::backend::memory::MemoryBackend;
use redjob::client::EnqueueOptions;
use redjob::inspect::Inspect;
use redjob::ops::Schedule;
use redjob::queue::SendOutcome;
use redjob::testing::TestKit;
use redjob::topic::{Event, Start};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

// ---------- retries ----------

static FLAKY_ATTEMPTS: AtomicU32 = AtomicU32::new(0);
static FLAKY_SUCCEEDED: AtomicU32 = AtomicU32::new(0);

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "fwt_flaky",
    queue = "fwt_flaky",
    max_attempts = 3,
    backoff = "1s"
)]
struct Flaky;

impl Job for Flaky {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        FLAKY_ATTEMPTS.fetch_add(1, Ordering::SeqCst);
        if ctx.attempt() == 1 {
            return Err(JobError::retry("first attempt fails"));
        }
        FLAKY_SUCCEEDED.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn retried_job_succeeds_on_second_attempt() -> redjob::Result<()> {
    let kit = TestKit::new();
    kit.client().enqueue(&Flaky).await?;
    kit.run_until_idle().await?; // attempt 1 fails; the retry waits its backoff
    assert_eq!(FLAKY_ATTEMPTS.load(Ordering::SeqCst), 1);
    assert_eq!(FLAKY_SUCCEEDED.load(Ordering::SeqCst), 0);
    // backoff "1s" doubled per attempt, full jitter: due within 2 s at most
    kit.advance(Duration::from_secs(2)).await?;
    assert_eq!(FLAKY_ATTEMPTS.load(Ordering::SeqCst), 2);
    assert_eq!(FLAKY_SUCCEEDED.load(Ordering::SeqCst), 1);
    assert!(kit.dead_letters("fwt_flaky").await?.is_empty());
    let stats = kit.client().stats("fwt_flaky").await?;
    assert_eq!((stats.processed, stats.retried, stats.dead), (1, 1, 0));
    Ok(())
}

// ---------- unique ----------

static SYNC_RUNS: AtomicU32 = AtomicU32::new(0);

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "fwt_sync_account", queue = "fwt_sync", unique)]
struct SyncAccount {
    account: u64,
}

impl Job for SyncAccount {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        SYNC_RUNS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn unique_job_is_enqueued_once() -> redjob::Result<()> {
    let kit = TestKit::new();
    let client = kit.client();
    let later = EnqueueOptions::new().delay(Duration::from_secs(60));
    let first = client
        .enqueue_outcome(&SyncAccount { account: 7 }, later.clone())
        .await?;
    let again = client
        .enqueue_outcome(&SyncAccount { account: 7 }, later.clone())
        .await?;
    let other = client
        .enqueue_outcome(&SyncAccount { account: 8 }, later.clone())
        .await?;
    assert_eq!(first.outcome, SendOutcome::Added);
    assert_eq!(
        (again.id, again.outcome),
        (first.id, SendOutcome::Duplicate)
    );
    assert_eq!(other.outcome, SendOutcome::Added);
    assert_ne!(other.id, first.id);

    let queued = kit.enqueued::<SyncAccount>();
    assert_eq!(queued.len(), 2);
    kit.assert_enqueued(&SyncAccount { account: 7 });

    assert_eq!(kit.advance(Duration::from_secs(60)).await?.processed, 2);
    assert_eq!(SYNC_RUNS.load(Ordering::SeqCst), 2);

    // the key is freed when the job succeeds: the next enqueue adds a new job
    let after = client
        .enqueue_outcome(&SyncAccount { account: 7 }, later)
        .await?;
    assert_eq!(after.outcome, SendOutcome::Added);
    assert_ne!(after.id, first.id);
    Ok(())
}

// ---------- priority ----------

static REPORT_ORDER: Mutex<Vec<u32>> = Mutex::new(Vec::new());

#[derive(Serialize, Deserialize, Job)]
#[job(name = "fwt_report", queue = "fwt_reports", priority = -5)]
struct Report {
    month: u32,
}

impl Job for Report {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        REPORT_ORDER.lock().unwrap().push(self.month);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn higher_priority_is_taken_first() -> redjob::Result<()> {
    // as the jobs chapter shows: what a worker would take first
    let kit = TestKit::new();
    let client = kit.client();
    client.enqueue(&Report { month: 10 }).await?; // at -5, the type's priority
    let plain = client
        .enqueue_with(&Report { month: 11 }, EnqueueOptions::new().priority(0))
        .await?;
    let urgent = client
        .enqueue_with(&Report { month: 12 }, EnqueueOptions::new().priority(8))
        .await?;
    let peeked = client.peek("fwt_reports", 3).await?;
    let order: Vec<u32> = peeked
        .iter()
        .map(|j| j.decode::<Report>().map(|r| r.month))
        .collect::<Result<_, _>>()?;
    assert_eq!(order, [12, 11, 10]);
    assert_eq!(peeked[0].id, urgent);
    assert_eq!(peeked[1].id, plain);

    let next = client
        .backend()
        .fetch("fwt_reports", 1, Duration::from_secs(30))
        .await?;
    assert_eq!(next.jobs[0].id, urgent);
    Ok(())
}

// ---------- periodic (cron) ----------
// testing.md says nothing about schedules under the test kit; this runs a real
// worker on the memory backend under tokio's paused clock, which the memory
// backend's clock follows.

static TICKS: AtomicU32 = AtomicU32::new(0);

#[derive(Serialize, Deserialize, Job)]
#[job(name = "fwt_heartbeat", queue = "fwt_maintenance")]
struct Heartbeat;

impl Job for Heartbeat {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        TICKS.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn cron_schedule_ticks() -> redjob::Result<()> {
    let backend = MemoryBackend::new();
    let worker = Worker::builder(backend.clone())
        .register::<Heartbeat>()
        .periodic(Schedule::cron("*/10 * * * * *")?, Heartbeat) // every 10 s
        .handle_signals(false)
        .build()?;
    let stop = worker.shutdown_token();
    let ready = worker.ready();
    let run = tokio::spawn(worker.run());
    ready.wait().await?;
    // paused clock: these 35 simulated seconds take no real time
    tokio::time::sleep(Duration::from_secs(35)).await;
    stop.cancel();
    run.await.expect("worker task")?;
    let ticks = TICKS.load(Ordering::SeqCst);
    assert!((3..=4).contains(&ticks), "ticks: {ticks}");
    Ok(())
}

// ---------- topic with two subscribers ----------
// testing.md says nothing about topics under the test kit; this follows the
// topics chapter: a worker on the memory backend, polled until both
// subscribers have no lag and nothing pending.

#[derive(Serialize, Deserialize, Event, Debug, Clone, PartialEq)]
#[event(name = "fwt_signed_up", topic = "fwt_signups")]
struct SignedUp {
    user: u64,
}

#[tokio::test(start_paused = true)]
async fn every_subscriber_gets_every_event() -> redjob::Result<()> {
    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    client
        .subscribe("fwt_signups", "mail", Start::Beginning)
        .await?;
    client
        .subscribe("fwt_signups", "analytics", Start::Beginning)
        .await?;
    client
        .publish_all(&[
            SignedUp { user: 1 },
            SignedUp { user: 2 },
            SignedUp { user: 3 },
        ])
        .await?;

    let mail = Arc::new(Mutex::new(Vec::new()));
    let analytics = Arc::new(Mutex::new(Vec::new()));
    let (m, a) = (mail.clone(), analytics.clone());
    let worker = Worker::builder(backend)
        .subscribe("mail", move |e: SignedUp, _ctx| {
            let m = m.clone();
            async move {
                m.lock().unwrap().push(e.user);
                Ok::<(), JobError>(())
            }
        })
        .subscribe("analytics", move |e: SignedUp, _ctx| {
            let a = a.clone();
            async move {
                a.lock().unwrap().push(e.user);
                Ok::<(), JobError>(())
            }
        })
        .handle_signals(false)
        .build()?;
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    loop {
        let t = client.topic("fwt_signups").await?.unwrap();
        if t.subscribers.len() == 2 && t.subscribers.iter().all(|s| s.lag == 0 && s.pending == 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.cancel();
    run.await.expect("worker task")?;

    let mut mail = mail.lock().unwrap().clone();
    let mut analytics = analytics.lock().unwrap().clone();
    mail.sort();
    analytics.sort();
    assert_eq!(mail, [1, 2, 3]);
    assert_eq!(analytics, [1, 2, 3]);
    Ok(())
}
