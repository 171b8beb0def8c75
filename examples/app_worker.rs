//! Run with: `cargo run --example app_worker` (a Redis at `REDIS_URL`), then press ctrl-c
//!
//! A worker embedded in an application binary beside another long-running task (a
//! ticker standing in for an HTTP server). The app owns shutdown: the worker's own
//! ctrl-c/SIGTERM handling (on by default) is turned off, and one cancellation
//! token of the app's shuts both down; the worker finishes its running jobs and
//! releases none too early. The app starts producing once the worker serves.
//! A periodic job cleans up every 10 seconds (once per tick, however many
//! copies of the app run); `redjob workers` and `redjob periodic` list them.

use std::time::Duration;

use redjob::ops::Schedule;
use redjob::worker::CancellationToken;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "resize_image", queue = "images")]
struct ResizeImage {
    id: u64,
}

/// Application state the handlers share (a pool, a client, config...).
struct AppState {
    name: &'static str,
}

impl Job for ResizeImage {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let app = ctx.data::<AppState>()?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        println!(
            "[{}] resized image {} (job {})",
            app.name,
            self.id,
            ctx.id()
        );
        Ok(())
    }
}

/// A periodic job: runs at every tick of its schedule.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "cleanup_uploads", queue = "maintenance")]
struct CleanupUploads;

impl Job for CleanupUploads {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        println!("cleaned up uploads (tick of job {})", ctx.id());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> redjob::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let shutdown = CancellationToken::new();

    let worker = Worker::builder(client.backend())
        .register::<ResizeImage>()
        .register::<CleanupUploads>()
        .periodic(Schedule::cron("*/10 * * * * *")?, CleanupUploads)
        .concurrency(8)
        .data(AppState { name: "app_worker" })
        .shutdown(shutdown.clone())
        // by default the worker would handle ctrl-c and SIGTERM itself; the app
        // owns them (below) and cancels `shutdown`
        .handle_signals(false)
        .build()?;
    let ready = worker.ready();
    let worker = tokio::spawn(worker.run_until_stopped());
    ready.wait().await?; // serving: jobs enqueued from now on start at once

    // the application's own long-running task: enqueues a job every second
    let app = {
        let shutdown = shutdown.clone();
        let client = client.clone();
        tokio::spawn(async move {
            let mut id = 0;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        id += 1;
                        match client.enqueue(&ResizeImage { id }).await {
                            Ok(job) => println!("app: enqueued image {id} as {job}"),
                            Err(e) => eprintln!("app: enqueue failed: {e}"),
                        }
                    }
                    _ = shutdown.cancelled() => break,
                }
            }
        })
    };

    println!("running; press ctrl-c to stop (or `redjob workers stop <id>`)");
    let mut worker = worker;
    let stopped = tokio::select! {
        _ = tokio::signal::ctrl_c() => {
            println!("ctrl-c: shutting down");
            shutdown.cancel();
            worker.await.expect("worker task")?
        }
        // an operator stopped the worker through Redis: this app decides what
        // follows (an app that serves HTTP too would go on serving)
        ended = &mut worker => ended.expect("worker task")?,
    };
    println!("worker {stopped}");
    shutdown.cancel();
    app.await.expect("app task");
    println!("stopped cleanly");
    Ok(())
}
