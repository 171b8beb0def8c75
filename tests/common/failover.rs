//! What the failover tests share: a job that records its number, and a
//! producer that enqueues one job at a time and counts what was acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redjob::client::EnqueueOptions;
use redjob::{Client, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

use super::Recorder;

/// A job that records `n` in the worker's [`Recorder`].
#[derive(Serialize, Deserialize, Job)]
#[job(name = "recorded")]
pub struct Recorded {
    pub n: u64,
}

impl Job for Recorded {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<Recorder>()?.record(ctx, self.n);
        Ok(())
    }
}

/// What one producer saw: the jobs whose enqueue returned Ok, and the failures.
#[derive(Default)]
pub struct Produced {
    pub acked: Vec<u64>,
    pub failed: u64,
    /// Failures that were `NotReplicated` (stored, the wait not met).
    pub not_replicated: u64,
    /// The first job acknowledged after a failure: the producer recovered.
    pub recovered: Option<u64>,
}

/// Enqueues job `base + i` to queue `q<i % queues>` until `stop`, one at a
/// time, each due in 2 s: the queues hold 2 s of jobs when a master dies.
pub fn produce(
    client: Client,
    base: u64,
    queues: u64,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Produced> {
    tokio::spawn(async move {
        let mut out = Produced::default();
        let mut n = base;
        while !stop.load(Ordering::Relaxed) {
            let q = format!("q{}", n % queues);
            match client
                .enqueue_with(
                    &Recorded { n },
                    EnqueueOptions::new().queue(q).delay(Duration::from_secs(2)),
                )
                .await
            {
                Ok(_) => {
                    out.acked.push(n);
                    if out.failed > 0 && out.recovered.is_none() {
                        out.recovered = Some(n);
                    }
                }
                Err(e) => {
                    out.failed += 1;
                    if matches!(e, redjob::Error::NotReplicated { .. }) {
                        out.not_replicated += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            n += 1;
        }
        out
    })
}
