//! Run with: `cargo run --example quickstart` (uses `REDIS_URL`, default redis://127.0.0.1:6379)
//!
//! Defines a job, enqueues it now, later and in a batch, and shows what is queued.

use std::time::Duration;

use redjob::{Client, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(
    name = "send_email",
    queue = "emails",
    max_attempts = 5,
    timeout = "30s"
)]
struct SendEmail {
    to: String,
}

impl Job for SendEmail {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        println!("attempt {}: mailing {}", ctx.attempt(), self.to);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> redjob::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let id = client
        .enqueue(&SendEmail {
            to: "ada@example.com".into(),
        })
        .await?;
    println!("enqueued {id}");
    let later = client
        .enqueue_in(
            &SendEmail {
                to: "bob@example.com".into(),
            },
            Duration::from_secs(60),
        )
        .await?;
    println!("enqueued {later}, due in 60 s");
    let batch: Vec<_> = (0..100)
        .map(|i| SendEmail {
            to: format!("user{i}@example.com"),
        })
        .collect();
    let ids = client.enqueue_batch(&batch).await?;
    println!("enqueued a batch of {} in one round trip", ids.len());
    let attrs = client.queues().attributes("emails").await?;
    println!(
        "queue emails: {} messages, {} not yet visible",
        attrs.msgs, attrs.hiddenmsgs
    );
    Ok(())
}
