//! Run with: `cargo run --example first_week`
//! (nothing installed: jobs live in memory; with `REDIS_URL=redis://...` they live in Redis)
//!
//! A newcomer's first week with redjob, one feature a day:
//! - a job that fails its first attempt and succeeds on the retry,
//! - a unique job enqueued twice (one job runs),
//! - a job type with a priority, overridden per enqueue,
//! - a cron schedule ticking every second,
//! - a topic with two subscribers.
//!
//! Prints what happens and exits by itself within a few seconds.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use redjob::backend::memory::MemoryBackend;
use redjob::client::EnqueueOptions;
use redjob::ops::Schedule;
use redjob::topic::{Event, Start, Subscription};
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// What handlers report back to `main` (shared through the worker's data).
struct Report(mpsc::UnboundedSender<String>);

fn report(ctx: &JobContext, line: String) -> Result<(), JobError> {
    println!("  {line}");
    let _ = ctx.data::<Report>()?.0.send(line);
    Ok(())
}

// Monday: retries. Fails its first attempt, succeeds on a later one.
#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "fw_charge_card",
    queue = "fw_payments",
    max_attempts = 3,
    backoff = "100ms"
)]
struct ChargeCard {
    order: u64,
}

impl Job for ChargeCard {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            println!(
                "  charge order {}: attempt {} fails (gateway timed out), will retry",
                self.order,
                ctx.attempt()
            );
            return Err(JobError::retry(std::io::Error::other("gateway timed out")));
        }
        report(
            ctx,
            format!(
                "charge order {}: charged on attempt {}",
                self.order,
                ctx.attempt()
            ),
        )
    }
}

// Tuesday: a unique job. At most one per account while queued.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "fw_sync_account", queue = "fw_sync", unique)]
struct SyncAccount {
    account: u64,
}

impl Job for SyncAccount {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        report(
            ctx,
            format!("sync account {} (job {})", self.account, ctx.id()),
        )
    }
}

// Wednesday: priorities. Reports are low priority unless an enqueue says otherwise.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "fw_render_report", queue = "fw_reports", priority = -5)]
struct RenderReport {
    name: String,
}

impl Job for RenderReport {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        report(ctx, format!("render report {:?}", self.name))
    }
}

// Thursday: a cron schedule.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "fw_heartbeat", queue = "fw_maintenance")]
struct Heartbeat;

impl Job for Heartbeat {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        report(ctx, format!("heartbeat tick (job {})", ctx.id()))
    }
}

// Friday: a topic with two subscribers.
#[derive(Serialize, Deserialize, Event, Debug, Clone)]
#[event(name = "fw_user_signed_up", topic = "fw_signups")]
struct UserSignedUp {
    user: u64,
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
    let start = Instant::now();

    // Everything is enqueued before the worker starts, so the priority order
    // shows: the worker's first fetch takes the highest priority first.
    println!("enqueueing:");
    client.enqueue(&ChargeCard { order: 42 }).await?;

    let in_a_moment = EnqueueOptions::new().delay(Duration::from_millis(300));
    let first = client
        .enqueue_outcome(&SyncAccount { account: 7 }, in_a_moment.clone())
        .await?;
    let again = client
        .enqueue_outcome(&SyncAccount { account: 7 }, in_a_moment)
        .await?;
    println!(
        "  sync account 7: first {:?} ({}), again {:?} ({}): same job: {}",
        first.outcome,
        first.id,
        again.outcome,
        again.id,
        first.id == again.id
    );

    client
        .enqueue(&RenderReport {
            name: "monthly (type priority -5)".into(),
        })
        .await?;
    client
        .enqueue_with(
            &RenderReport {
                name: "for the CEO (priority 8)".into(),
            },
            EnqueueOptions::new().priority(8),
        )
        .await?;

    // Subscribers exist before the events are published, and start at the beginning.
    client
        .subscribe("fw_signups", "fw_welcome_mail", Start::Beginning)
        .await?;
    client
        .subscribe("fw_signups", "fw_analytics", Start::Beginning)
        .await?;
    client
        .publish_all(&[UserSignedUp { user: 1 }, UserSignedUp { user: 2 }])
        .await?;
    println!("  published 2 signups");

    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let welcome_tx = tx.clone();
    let analytics_tx = tx.clone();
    let worker = Worker::builder(client.backend())
        .register::<ChargeCard>()
        .register::<SyncAccount>()
        .register::<RenderReport>()
        .register::<Heartbeat>()
        // one report at a time, so the order they run in is the order they were taken
        .queue_concurrency("fw_reports", 1)
        .periodic(Schedule::cron("* * * * * *")?, Heartbeat) // every second
        .subscribe("fw_welcome_mail", move |e: UserSignedUp, _ctx| {
            let tx = welcome_tx.clone();
            async move {
                let line = format!("welcome mail to user {}", e.user);
                println!("  {line}");
                let _ = tx.send(line);
                Ok::<(), JobError>(())
            }
        })
        .subscribe(
            Subscription::new("fw_analytics").start(Start::Beginning),
            move |e: UserSignedUp, _ctx| {
                let tx = analytics_tx.clone();
                async move {
                    let line = format!("analytics: count signup of user {}", e.user);
                    println!("  {line}");
                    let _ = tx.send(line);
                    Ok::<(), JobError>(())
                }
            },
        )
        .data(Report(tx))
        .handle_signals(false)
        .build()?;
    let shutdown = worker.shutdown_token();
    let ready = worker.ready();
    let running = tokio::spawn(worker.run());
    ready.wait().await?;
    println!("worker serving after {:?}; what happens:", start.elapsed());

    // Wait for: 1 charge, 1 sync, 2 reports, 2 heartbeats, 2 + 2 events.
    let mut seen: Vec<String> = Vec::new();
    let mut heartbeats = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(6);
    let wanted: HashSet<&str> = [
        "charge order 42",
        "sync account 7",
        "render report \"monthly",
        "render report \"for the CEO",
        "welcome mail to user 1",
        "welcome mail to user 2",
        "analytics: count signup of user 1",
        "analytics: count signup of user 2",
    ]
    .into_iter()
    .collect();
    loop {
        let done = heartbeats >= 2 && wanted.iter().all(|w| seen.iter().any(|s| s.starts_with(w)));
        if done {
            break;
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(line)) => {
                if line.starts_with("heartbeat") {
                    heartbeats += 1;
                }
                seen.push(line);
            }
            Ok(None) => break,
            Err(_) => {
                println!("gave up waiting after {:?}", start.elapsed());
                break;
            }
        }
    }
    shutdown.cancel();
    let stopped = running.await.expect("worker task")?;
    println!("worker {stopped} after {:?}", start.elapsed());

    let reports: Vec<&String> = seen
        .iter()
        .filter(|s| s.starts_with("render report"))
        .collect();
    println!("reports ran in this order: {reports:?}");
    let syncs = seen
        .iter()
        .filter(|s| s.starts_with("sync account"))
        .count();
    println!("sync jobs run: {syncs} (enqueued twice, unique)");
    let s = client.stats("fw_payments").await?;
    println!(
        "payments queue: processed {}, retried {}, failed {}, dead {}",
        s.processed, s.retried, s.failed, s.dead
    );
    Ok(())
}
