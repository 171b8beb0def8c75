//! Run with: `cargo run --example prometheus`, then `curl -s localhost:9000/metrics | grep redjob_`
//! (jobs in memory; with `REDIS_URL=redis://...` in Redis). Stops after 60 s or on ctrl-c.
//!
//! A worker's metrics in Prometheus. The worker records through the `metrics`
//! facade; the app picks the exporter (here `metrics-exporter-prometheus`,
//! serving `/metrics` on port 9000) and installs it before the worker runs.
//! A producer enqueues a few jobs a second, some of which fail, so every
//! counter, histogram and gauge has something to show.

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use redjob::backend::memory::MemoryBackend;
use redjob::{Client, Job, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "render_invoice", queue = "invoices", max_attempts = 3)]
struct RenderInvoice {
    id: u64,
}

impl Job for RenderInvoice {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(20 + self.id % 50)).await;
        if self.id.is_multiple_of(10) {
            return Err(JobError::retry_after(
                "the PDF service is busy",
                Duration::from_secs(1),
            ));
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Histograms as Prometheus histograms (aggregatable across workers), with
    // buckets from 1 ms to 1 min; without buckets they render as summaries.
    PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], 9000))
        .set_buckets(&[
            0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0,
        ])?
        .install()?;
    println!("metrics at http://127.0.0.1:9000/metrics");

    let client = match std::env::var("REDIS_URL") {
        Ok(url) => Client::connect(&url).await?,
        Err(_) => Client::memory(MemoryBackend::new()),
    };
    let worker = Worker::builder(client.backend())
        .register::<RenderInvoice>()
        .concurrency(8)
        // queue sizes are sampled only when asked for; every 5 s here
        .metrics_interval(Duration::from_secs(5))
        .build()?;
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());

    let producer = async {
        for id in 1.. {
            client.enqueue(&RenderInvoice { id }).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok::<(), redjob::Error>(())
    };
    tokio::select! {
        r = producer => r?,
        _ = tokio::time::sleep(Duration::from_secs(60)) => {}
        _ = stop.cancelled() => {}
    }
    stop.cancel();
    running.await??;
    Ok(())
}
