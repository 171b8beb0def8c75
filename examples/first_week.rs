//! Run with: `cargo run --example first_week`
//! (nothing installed: jobs live in memory; with `REDIS_URL=redis://...` they live in Redis)
//!
//! A newcomer's first week with redjob, one feature a day, all served by one
//! embedded worker:
//!
//! - Monday: a job with retries that fails its first attempt and succeeds on the retry.
//! - Tuesday: a unique job enqueued twice; only one job is queued and runs.
//! - Wednesday: a job type with a low priority, overridden per enqueue.
//! - Thursday: a cron schedule that ticks every second.
//! - Friday: a topic with two subscribers, each handling every event.
//!
//! It prints what happens and exits by itself after a few seconds.

use std::time::{Duration, Instant, SystemTime};

use redjob::backend::memory::MemoryBackend;
use redjob::client::EnqueueOptions;
use redjob::ops::Schedule;
use redjob::topic::{Event, EventContext, Subscription};
use redjob::worker::Periodic;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// What the handlers tell `main` (shared with them through the worker's data).
struct Report(mpsc::UnboundedSender<String>);

impl Report {
    fn say(&self, what: String) {
        let _ = self.0.send(what);
    }
}

// ---- Monday: retries ----------------------------------------------------------

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "first_week_charge",
    queue = "first_week_billing",
    max_attempts = 3,
    backoff = "100ms"
)]
struct Charge {
    cents: u64,
}

impl Job for Charge {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let report = ctx.data::<Report>()?;
        if ctx.attempt() == 1 {
            report.say(format!(
                "mon: charge {} attempt 1 failed (the bank is down)",
                self.cents
            ));
            return Err(JobError::retry("the bank is down"));
        }
        report.say(format!(
            "mon: charge {} succeeded on attempt {}",
            self.cents,
            ctx.attempt()
        ));
        Ok(())
    }
}

// ---- Tuesday: unique jobs -------------------------------------------------------

#[derive(Serialize, Deserialize, Job)]
#[job(name = "first_week_sync", queue = "first_week_sync", unique)]
struct SyncAccount {
    account: u64,
}

impl Job for SyncAccount {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Report>()?.say(format!(
            "tue: synced account {} (job {})",
            self.account,
            ctx.id()
        ));
        Ok(())
    }
}

// ---- Wednesday: priorities ------------------------------------------------------

#[derive(Serialize, Deserialize, Job)]
#[job(name = "first_week_report", queue = "first_week_reports", priority = -5)]
struct MonthlyReport {
    month: u32,
}

impl Job for MonthlyReport {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Report>()?
            .say(format!("wed: report for month {}", self.month));
        Ok(())
    }
}

// ---- Thursday: a cron schedule -------------------------------------------------

#[derive(Serialize, Deserialize, Job)]
#[job(name = "first_week_tick", queue = "first_week_ticks")]
struct Tick;

impl Job for Tick {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Report>()?
            .say(format!("thu: tick (job {})", ctx.id()));
        Ok(())
    }
}

// ---- Friday: a topic with two subscribers ----------------------------------------

#[derive(Serialize, Deserialize, Event)]
#[event(name = "first_week_order_placed", topic = "first_week_orders")]
struct OrderPlaced {
    order: u64,
}

/// Waits (at most 5 s) for a message that `wanted` accepts, printing every
/// message that arrives on the way. Returns false on a timeout.
async fn wait_for(
    rx: &mut mpsc::UnboundedReceiver<String>,
    start: Instant,
    mut wanted: impl FnMut(&str) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(msg)) => {
                // ticks arrive every second all week long; show them on Thursday only
                let is_tick = msg.starts_with("thu:");
                let hit = wanted(&msg);
                if !is_tick || hit {
                    println!("  [{:>5} ms] {msg}", start.elapsed().as_millis());
                }
                if hit {
                    return true;
                }
            }
            Ok(None) | Err(_) => return false,
        }
    }
}

#[tokio::main]
async fn main() -> redjob::Result<()> {
    let client = match std::env::var("REDIS_URL") {
        Ok(url) => {
            println!("using Redis at {url}");
            Client::connect(&url).await?
        }
        Err(_) => {
            println!("REDIS_URL not set: using the in-memory backend (nothing persisted)");
            Client::memory(MemoryBackend::new())
        }
    };

    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = Worker::builder(client.backend())
        .register::<Charge>()
        .register::<SyncAccount>()
        .register::<MonthlyReport>()
        .register::<Tick>()
        // one report at a time, so that the order priorities give is the order they run in
        .queue_concurrency("first_week_reports", 1)
        // Thursday's schedule: six cron fields, seconds first, so every second
        .periodic_job(
            Periodic::new(Schedule::cron("* * * * * *")?, Tick).name("first_week_every_second"),
        )
        // Friday's two subscribers; both exist once the worker is ready
        .subscribe(
            "first_week_billing",
            |e: OrderPlaced, ctx: EventContext| async move {
                ctx.data::<Report>()?.say(format!(
                    "fri: billing handled order {} (event {})",
                    e.order,
                    ctx.id()
                ));
                Ok::<(), JobError>(())
            },
        )
        .subscribe(
            Subscription::new("first_week_audit"),
            |e: OrderPlaced, ctx: EventContext| async move {
                ctx.data::<Report>()?
                    .say(format!("fri: audit logged order {}", e.order));
                Ok::<(), JobError>(())
            },
        )
        .data(Report(tx))
        .build()?;
    let shutdown = worker.shutdown_token();
    let ready = worker.ready();
    let running = tokio::spawn(worker.run_until_stopped());
    ready.wait().await?;
    let start = Instant::now();
    let mut ok = true;

    println!("Monday: a job that fails once, then succeeds on its retry");
    client.enqueue(&Charge { cents: 500 }).await?;
    ok &= wait_for(&mut rx, start, |m| {
        m.starts_with("mon:") && m.contains("succeeded")
    })
    .await;

    println!(
        "Tuesday: a unique job enqueued twice (due in 300 ms, so both enqueues find it waiting)"
    );
    let later = EnqueueOptions::new().delay(Duration::from_millis(300));
    let first = client
        .enqueue_outcome(&SyncAccount { account: 7 }, later.clone())
        .await?;
    let second = client
        .enqueue_outcome(&SyncAccount { account: 7 }, later)
        .await?;
    println!("  first enqueue:  {:?} {}", first.outcome, first.id);
    println!("  second enqueue: {:?} {}", second.outcome, second.id);
    ok &= wait_for(&mut rx, start, |m| m.starts_with("tue:")).await;
    // nothing else arrives for it
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok(msg) = rx.try_recv() {
        if msg.starts_with("tue:") {
            println!("  UNEXPECTED second run: {msg}");
            ok = false;
        }
    }

    println!("Wednesday: reports at priority -5, one overridden to 8 (all due together)");
    let due = SystemTime::now() + Duration::from_millis(300);
    for month in 1..=3 {
        client
            .enqueue_with(&MonthlyReport { month }, EnqueueOptions::new().at(due))
            .await?;
    }
    client
        .enqueue_with(
            &MonthlyReport { month: 12 },
            EnqueueOptions::new().at(due).priority(8),
        )
        .await?;
    println!("  enqueued months 1, 2, 3 at -5, then month 12 at 8: month 12 runs first");
    for _ in 0..4 {
        ok &= wait_for(&mut rx, start, |m| m.starts_with("wed:")).await;
    }

    println!("Thursday: a cron schedule, `* * * * * *` (every second); waiting for two ticks");
    for _ in 0..2 {
        ok &= wait_for(&mut rx, start, |m| m.starts_with("thu:")).await;
    }

    println!("Friday: one event published, two subscribers handle it");
    client.publish(&OrderPlaced { order: 42 }).await?;
    for _ in 0..2 {
        ok &= wait_for(&mut rx, start, |m| m.starts_with("fri:")).await;
    }

    shutdown.cancel();
    let stopped = running.await.expect("worker task")?;
    println!("worker {stopped}");
    if ok {
        println!("a good week: everything ran as planned");
    } else {
        println!("something did not happen in time (see above)");
        std::process::exit(1);
    }
    Ok(())
}
