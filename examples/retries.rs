//! Run with: `cargo run --example retries` (a Redis at `REDIS_URL`, default redis://127.0.0.1:6379)
//!
//! Backoff and dead letters: one job fails twice and then succeeds, one keeps
//! failing until its attempts run out, one fails fatally. Prints the dead-letter
//! queue and the queue's counters at the end.

use std::time::Duration;

use redjob::{Client, Job, JobContext, JobError, RetryPolicy, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "charge_card",
    queue = "retries_demo",
    max_attempts = 3,
    backoff = "200ms"
)]
struct ChargeCard {
    order: u64,
    /// How many attempts fail before one succeeds.
    failures: u32,
    fatal: bool,
}

impl Job for ChargeCard {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        println!("order {}: attempt {}", self.order, ctx.attempt());
        if self.fatal {
            return Err(JobError::fatal("card reported stolen"));
        }
        if ctx.attempt() <= self.failures {
            return Err(JobError::retry(std::io::Error::other(
                "payment gateway timed out",
            )));
        }
        println!("order {}: charged", self.order);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> redjob::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let worker = Worker::builder(client.backend())
        .register::<ChargeCard>()
        .retry(RetryPolicy::exponential(Duration::from_secs(5))?.jitter(false))
        .build()?;
    let shutdown = worker.shutdown_token();
    let running = tokio::spawn(worker.run());

    client
        .enqueue(&ChargeCard {
            order: 1,
            failures: 2,
            fatal: false,
        })
        .await?;
    client
        .enqueue(&ChargeCard {
            order: 2,
            failures: 99,
            fatal: false,
        })
        .await?;
    client
        .enqueue(&ChargeCard {
            order: 3,
            failures: 0,
            fatal: true,
        })
        .await?;

    // attempts 1, 2, 3 with 200 ms then 400 ms between them
    tokio::time::sleep(Duration::from_secs(2)).await;
    shutdown.cancel();
    running.await.expect("worker task")?;

    for d in client.dead_letters("retries_demo", 10).await? {
        println!(
            "dead letter {} after {} attempts: {}",
            d.id, d.attempts, d.error
        );
    }
    let s = client.stats("retries_demo").await?;
    println!(
        "processed {}, retried {}, failed {}, dead {}",
        s.processed, s.retried, s.failed, s.dead
    );
    Ok(())
}
