//! The first week (`examples/first_week.rs`), tested with the test kit: retries,
//! unique jobs, priorities, a cron schedule and a topic with two subscribers,
//! all on the kit's in-memory backend under tokio's paused clock.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use redjob::client::EnqueueOptions;
use redjob::inspect::Inspect;
use redjob::ops::Schedule;
use redjob::queue::SendOutcome;
use redjob::testing::TestKit;
use redjob::topic::{Event, EventContext};
use redjob::worker::Periodic;
use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

/// How many times each test's handlers ran (given to the kit with `.data`).
#[derive(Default)]
struct Runs(AtomicU32);

impl Runs {
    fn bump(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

// ---- Monday: retries ----------------------------------------------------------

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(
    name = "tfw_charge",
    queue = "tfw_billing",
    max_attempts = 3,
    backoff = "100ms"
)]
struct Charge {
    cents: u64,
}

impl Job for Charge {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Runs>()?.bump();
        if ctx.attempt() == 1 {
            return Err(JobError::retry("the bank is down"));
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn monday_a_failed_first_attempt_succeeds_on_its_retry() -> redjob::Result<()> {
    let runs = Arc::new(Runs::default());
    // no jitter: the retry is due exactly its backoff later (with full
    // jitter a draw below 1 ms made it due at once, about once in a hundred)
    let kit = TestKit::new()
        .retry(redjob::RetryPolicy::default().jitter(false))
        .data(runs.clone());
    kit.client().enqueue(&Charge { cents: 500 }).await?;
    kit.assert_enqueued(&Charge { cents: 500 });

    let first = kit.run_until_idle().await?;
    assert_eq!((first.processed, first.retried, first.dead), (0, 1, 0));
    assert_eq!(runs.get(), 1);
    // the retry waits its backoff (100 ms): still there, not due yet
    assert_eq!(kit.enqueued::<Charge>(), [Charge { cents: 500 }]);
    let again = kit.run_until_idle().await?;
    assert_eq!((again.processed, again.retried), (0, 0));
    assert_eq!(runs.get(), 1);

    let retry = kit.advance(Duration::from_millis(100)).await?;
    assert_eq!((retry.processed, retry.retried, retry.dead), (1, 0, 0));
    assert_eq!(runs.get(), 2);
    assert!(kit.dead_letters("tfw_billing").await?.is_empty());
    assert!(kit.scheduled::<Charge>().is_empty());
    Ok(())
}

// ---- Tuesday: unique jobs -------------------------------------------------------

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "tfw_sync", queue = "tfw_sync", unique)]
struct SyncAccount {
    account: u64,
}

impl Job for SyncAccount {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Runs>()?.bump();
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn tuesday_a_unique_job_enqueued_twice_runs_once() -> redjob::Result<()> {
    let runs = Arc::new(Runs::default());
    let kit = TestKit::new().data(runs.clone());
    let client = kit.client();
    let first = client
        .enqueue_outcome(&SyncAccount { account: 7 }, EnqueueOptions::new())
        .await?;
    let second = client
        .enqueue_outcome(&SyncAccount { account: 7 }, EnqueueOptions::new())
        .await?;
    assert_eq!(first.outcome, SendOutcome::Added);
    assert_eq!(
        (second.id, second.outcome),
        (first.id, SendOutcome::Duplicate)
    );
    // another account is another key
    let other = client
        .enqueue_outcome(&SyncAccount { account: 8 }, EnqueueOptions::new())
        .await?;
    assert_eq!(other.outcome, SendOutcome::Added);
    assert_eq!(
        kit.enqueued::<SyncAccount>(),
        [SyncAccount { account: 7 }, SyncAccount { account: 8 }]
    );

    let run = kit.run_until_idle().await?;
    assert_eq!(run.processed, 2);
    assert_eq!(runs.get(), 2);

    // once the job has run, its key is free again
    let again = client
        .enqueue_outcome(&SyncAccount { account: 7 }, EnqueueOptions::new())
        .await?;
    assert_eq!(again.outcome, SendOutcome::Added);
    Ok(())
}

// ---- Wednesday: priorities ------------------------------------------------------

#[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
#[job(name = "tfw_report", queue = "tfw_reports", priority = -5)]
struct MonthlyReport {
    month: u32,
}

impl Job for MonthlyReport {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Runs>()?.bump();
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn wednesday_a_priority_given_per_enqueue_runs_first() -> redjob::Result<()> {
    let runs = Arc::new(Runs::default());
    let kit = TestKit::new().data(runs.clone());
    let client = kit.client();
    for month in 1..=3 {
        client.enqueue(&MonthlyReport { month }).await?;
    }
    let urgent = client
        .enqueue_with(
            &MonthlyReport { month: 12 },
            EnqueueOptions::new().priority(8),
        )
        .await?;
    let low = client
        .enqueue_with(
            &MonthlyReport { month: 0 },
            EnqueueOptions::new().priority(-10),
        )
        .await?;

    // the order a fetch takes them: 8 first, then the type's -5 oldest first, then -10
    let next = client.peek("tfw_reports", 10).await?;
    let months = next
        .iter()
        .map(|j| j.decode::<MonthlyReport>().map(|r| r.month))
        .collect::<Result<Vec<_>, _>>()?;
    assert_eq!(months, [12, 1, 2, 3, 0]);
    assert_eq!(next[0].id, urgent);
    assert_eq!(next[4].id, low);

    let run = kit.run_until_idle().await?;
    assert_eq!(run.processed, 5);
    assert_eq!(runs.get(), 5);
    Ok(())
}

// ---- Thursday: a cron schedule -------------------------------------------------

#[derive(Serialize, Deserialize, Job)]
#[job(name = "tfw_tick", queue = "tfw_ticks")]
struct Tick;

impl Job for Tick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Runs>()?.bump();
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn thursday_a_cron_schedule_ticks_under_the_kits_clock() -> redjob::Result<()> {
    let runs = Arc::new(Runs::default());
    // 2023-11-14 22:15:30 UTC: between two ticks of an every-5-minutes schedule
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_130);
    let kit = TestKit::starting_at(start)
        .data(runs.clone())
        .periodic_job(Periodic::new(Schedule::cron("*/5 * * * *")?, Tick).name("tfw_every_5_min"));

    // nothing is due yet
    let idle = kit.run_until_idle().await?;
    assert_eq!((idle.ticks, idle.processed), (0, 0));

    // 22:20 is the first tick; an hour holds twelve (22:20 ... 23:15)
    let hour = kit.advance(Duration::from_secs(3600)).await?;
    assert_eq!((hour.ticks, hour.processed), (12, 12));
    assert_eq!(runs.get(), 12);
    assert!(kit.dead_letters("tfw_ticks").await?.is_empty());
    Ok(())
}

// ---- Friday: a topic with two subscribers ----------------------------------------

#[derive(Serialize, Deserialize, Event, Debug, PartialEq)]
#[event(name = "tfw_order_placed", topic = "tfw_orders")]
struct OrderPlaced {
    order: u64,
}

/// Who handled which order.
#[derive(Default)]
struct Handled(Mutex<Vec<(&'static str, u64)>>);

async fn billing(e: OrderPlaced, ctx: EventContext) -> Result<(), JobError> {
    ctx.data::<Handled>()?
        .0
        .lock()
        .unwrap()
        .push(("billing", e.order));
    Ok(())
}

async fn audit(e: OrderPlaced, ctx: EventContext) -> Result<(), JobError> {
    ctx.data::<Handled>()?
        .0
        .lock()
        .unwrap()
        .push(("audit", e.order));
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn friday_every_subscriber_handles_every_event() -> redjob::Result<()> {
    let handled = Arc::new(Handled::default());
    let kit = TestKit::new()
        .data(handled.clone())
        .subscribe("billing", billing)
        .subscribe("audit", audit);
    kit.publish(&OrderPlaced { order: 1 }).await?;
    kit.publish(&OrderPlaced { order: 2 }).await?;
    assert_eq!(
        kit.published::<OrderPlaced>(),
        [OrderPlaced { order: 1 }, OrderPlaced { order: 2 }]
    );
    assert_eq!(kit.subscriber("tfw_orders", "billing").unwrap().lag, 2);
    assert_eq!(kit.subscriber("tfw_orders", "audit").unwrap().lag, 2);

    let run = kit.run_until_idle().await?;
    assert_eq!((run.events, run.events_retried, run.events_dead), (4, 0, 0));

    let mut seen = handled.0.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [("audit", 1), ("audit", 2), ("billing", 1), ("billing", 2)]
    );
    for name in ["billing", "audit"] {
        let s = kit.subscriber("tfw_orders", name).unwrap();
        assert_eq!((s.lag, s.pending, s.dead), (0, 0, 0));
    }
    Ok(())
}
