//! Run with: `cargo run --example quickstart`
//! (nothing installed: jobs live in memory; with `REDIS_URL=redis://...` they live in Redis)
//!
//! Defines a job, starts an embedded worker, enqueues an immediate and a delayed
//! job, prints them as they run, and exits.

use std::time::{Duration, Instant};

use redjob::backend::memory::MemoryBackend;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "send_email",
    queue = "quickstart",
    max_attempts = 5,
    timeout = "30s"
)]
struct SendEmail {
    to: String,
}

/// Tells `main` that a job ran (shared with handlers through the worker's data).
struct Done(mpsc::UnboundedSender<String>);

impl Job for SendEmail {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        println!(
            "ran job {} (attempt {}): mail to {}",
            ctx.id(),
            ctx.attempt(),
            self.to
        );
        let _ = ctx.data::<Done>()?.0.send(self.to.clone());
        Ok(())
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
        .register::<SendEmail>()
        .data(Done(tx))
        .build()?;
    let shutdown = worker.shutdown_token();
    let running = tokio::spawn(worker.run());

    let start = Instant::now();
    client
        .enqueue(&SendEmail {
            to: "ada@example.com".into(),
        })
        .await?;
    client
        .enqueue_in(
            &SendEmail {
                to: "bob@example.com (1 s later)".into(),
            },
            Duration::from_secs(1),
        )
        .await?;
    for _ in 0..2 {
        if let Some(to) = rx.recv().await {
            println!("  {to} done after {:?}", start.elapsed());
        }
    }
    shutdown.cancel();
    running.await.expect("worker task")?;
    println!("both jobs ran; worker stopped cleanly");
    Ok(())
}
