//! What the worker logs when a job's lease is lost: it says what happened.

mod common;
#[path = "common/logs.rs"]
mod logs;

use logs::Lines;

use std::time::Duration;

use redjob::backend::memory::MemoryBackend;
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "logs_hold", queue = "held")]
struct Hold;

impl Job for Hold {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.cancellation().cancelled().await;
        Ok(())
    }
}

#[tokio::test]
async fn a_job_deleted_while_it_runs_is_logged_as_deleted() {
    let lines = Lines::default();
    // this test's runtime has one thread: the worker's tasks log through it too
    let _log = tracing::subscriber::set_default(lines.subscriber());

    let backend = MemoryBackend::new();
    let client = Client::memory(backend.clone());
    let worker = Worker::builder(backend.clone())
        .queue("held")
        .lease(Duration::from_secs(1))
        .handle_signals(false)
        .build()
        .unwrap();
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let id = client.enqueue(&Hold).await.unwrap();
    assert!(
        common::wait_until(Duration::from_secs(10), || !backend
            .messages("held")
            .is_empty()
            && backend.messages("held")[0].2 > backend.clock().now_ms())
        .await
    );
    assert!(client.queues().delete("held", &id).await.unwrap());
    // the next renewal (every third of the lease) finds the job gone
    assert!(
        common::wait_until(Duration::from_secs(10), || lines.text().contains(
            "job cancelled or deleted while it ran: cancelling the run; it will not run again"
        ))
        .await,
        "{}",
        lines.text()
    );
    stop.cancel();
    run.await.unwrap().unwrap();
    let text = lines.text();
    assert!(!text.contains("delivered again"), "{text}");
    assert!(!text.contains("newer delivery"), "{text}");
    assert!(text.contains(&id.to_string()), "{text}");
}
