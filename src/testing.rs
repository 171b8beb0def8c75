//! A test kit for your own handlers and schedules: no Redis, no real sleeps.
//!
//! [`TestKit`] runs on a [`MemoryBackend`] whose [`Clock`] you move forward. Enqueue
//! with [`TestKit::client`], look at what was enqueued with typed access, run the
//! worker until nothing is due, advance the clock and run what became due.
//!
//! A handler that schedules a follow-up an hour later, tested without waiting:
//!
//! ```
//! use std::time::Duration;
//! use redjob::testing::TestKit;
//! use redjob::{Client, Job, JobContext, JobError};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
//! #[job(name = "signup")]
//! struct Signup { user: u64 }
//!
//! #[derive(Serialize, Deserialize, Job, Debug, PartialEq)]
//! #[job(name = "nudge")]
//! struct Nudge { user: u64 }
//!
//! impl Job for Signup {
//!     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
//!         let client = ctx.data::<Client>()?;
//!         client.enqueue_in(&Nudge { user: self.user }, Duration::from_secs(3600)).await?;
//!         Ok(())
//!     }
//! }
//!
//! impl Job for Nudge {
//!     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
//! let kit = TestKit::new();
//! let client = kit.client();
//! let kit = kit.data(client); // handlers reach the client through their context
//! kit.client().enqueue(&Signup { user: 7 }).await?;
//!
//! let run = kit.run_until_idle().await?;
//! assert_eq!(run.processed, 1);
//! assert_eq!(kit.enqueued::<Nudge>(), [Nudge { user: 7 }]); // scheduled, not yet due
//!
//! let run = kit.advance(Duration::from_secs(3599)).await?;
//! assert_eq!(run.processed, 0);
//! let run = kit.advance(Duration::from_secs(1)).await?;
//! assert_eq!(run.processed, 1);
//! assert!(kit.enqueued::<Nudge>().is_empty());
//! # Ok(()) }
//! ```

use std::time::{Duration, SystemTime};

use crate::backend::memory::{Clock, MemoryBackend};
use crate::backend::{Backend, DeadLetter};
use crate::job::Job;
use crate::worker::data::Data;
use crate::worker::{RetryPolicy, Worker};
use crate::{Client, JobId, Result};

/// Handlers and schedules under test, on a memory backend with a controllable clock.
#[derive(Clone, Debug)]
pub struct TestKit {
    backend: MemoryBackend,
    data: Data,
    retry: RetryPolicy,
}

/// What one [`TestKit::run_until_idle`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RunReport {
    /// Jobs that succeeded.
    pub processed: u64,
    /// Failed runs scheduled again.
    pub retried: u64,
    /// Jobs moved to the dead-letter queue.
    pub dead: u64,
}

/// A job waiting in the kit's backend.
#[derive(Debug, Clone, PartialEq)]
pub struct Enqueued<J> {
    /// The job.
    pub job: J,
    /// Its id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// When it is due (or its lease ends).
    pub due: SystemTime,
}

impl Default for TestKit {
    fn default() -> Self {
        Self::new()
    }
}

impl TestKit {
    /// An empty kit whose clock starts at the current time.
    pub fn new() -> Self {
        TestKit {
            backend: MemoryBackend::new(),
            data: Data::default(),
            retry: RetryPolicy::default(),
        }
    }

    /// Shares `value` with handlers ([`JobContext::data`](crate::JobContext::data)),
    /// as `Worker::builder(..).data(value)` does.
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data = self.data.with(value);
        self
    }

    /// Uses this backoff for retries. Defaults to [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// A client that enqueues into the kit.
    pub fn client(&self) -> Client {
        Client::memory(self.backend.clone())
    }

    /// A client in inline mode: each enqueue runs its job at once (with the kit's
    /// data), once, and returns its failure as an error. Nothing is stored.
    pub fn inline_client(&self) -> Client {
        self.client().inline(self.data.clone())
    }

    /// The kit's backend.
    pub fn backend(&self) -> &MemoryBackend {
        &self.backend
    }

    /// The kit's clock.
    pub fn clock(&self) -> &Clock {
        self.backend.clock()
    }

    /// Every waiting job of type `J`, in any queue, oldest first.
    pub fn enqueued<J: Job>(&self) -> Vec<J> {
        self.scheduled::<J>().into_iter().map(|e| e.job).collect()
    }

    /// Every waiting job of type `J` with its id, queue and due time.
    pub fn scheduled<J: Job>(&self) -> Vec<Enqueued<J>> {
        let mut out = Vec::new();
        for queue in self.backend.queue_names() {
            for (id, body, due_ms) in self.backend.messages(&queue) {
                if let Some(job) = decode_as::<J>(&body) {
                    out.push(Enqueued {
                        job,
                        id,
                        queue: queue.clone(),
                        due: SystemTime::UNIX_EPOCH + Duration::from_millis(due_ms),
                    });
                }
            }
        }
        out
    }

    /// Panics unless a job of type `J` with the same arguments is waiting.
    #[track_caller]
    pub fn assert_enqueued<J: Job>(&self, job: &J) {
        let want = serde_json::to_value(job).ok();
        let found = self.enqueued::<J>();
        if !found.iter().any(|j| serde_json::to_value(j).ok() == want) {
            let seen: Vec<_> = found
                .iter()
                .filter_map(|j| serde_json::to_string(j).ok())
                .collect();
            panic!(
                "no {} job with args {} enqueued; found {}: [{}]",
                J::NAME,
                want.map(|v| v.to_string()).unwrap_or_default(),
                seen.len(),
                seen.join(", ")
            );
        }
    }

    /// Dead letters of `queue`.
    pub async fn dead_letters(&self, queue: &str) -> Result<Vec<DeadLetter>> {
        self.backend.dead_letters(queue, usize::MAX).await
    }

    /// Runs a worker on every queue until no job is due or running, then stops it.
    /// Jobs scheduled for later (delays, retries) stay for [`advance`](Self::advance).
    ///
    /// Fails with [`Error::DuplicateJobName`](crate::Error::DuplicateJobName), as
    /// the worker's `build` does, when two job types share a job name.
    pub async fn run_until_idle(&self) -> Result<RunReport> {
        crate::job::check_unique_names()?;
        let queues = self.backend.queue_names();
        let before = self.totals(&queues).await?;
        if !queues.is_empty() && !self.backend.is_idle() {
            let mut b = Worker::builder(self.backend.clone())
                .queues(queues.clone())
                .handle_signals(false)
                .retry(self.retry)
                .grace_period(Duration::ZERO);
            b = b.data_map(self.data.clone());
            let worker = b.build()?;
            let stop = worker.shutdown_token();
            let run = tokio::spawn(worker.run());
            while !self.backend.is_idle() {
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            stop.cancel();
            run.await
                .map_err(|e| crate::Error::Protocol(format!("worker task: {e}")))??;
        }
        let after = self.totals(&queues).await?;
        Ok(RunReport {
            processed: after.processed - before.processed,
            retried: after.retried - before.retried,
            dead: after.dead - before.dead,
        })
    }

    /// Moves the clock forward by `d`, then runs what became due until idle.
    pub async fn advance(&self, d: Duration) -> Result<RunReport> {
        self.clock().advance(d);
        self.run_until_idle().await
    }

    async fn totals(&self, queues: &[String]) -> Result<RunReport> {
        let mut r = RunReport::default();
        for q in queues {
            let s = self.backend.stats(q).await?;
            r.processed += s.processed;
            r.retried += s.retried;
            r.dead += s.dead;
        }
        Ok(r)
    }
}

fn decode_as<J: Job>(body: &[u8]) -> Option<J> {
    #[derive(serde::Deserialize)]
    struct Env<T> {
        #[serde(rename = "type")]
        name: String,
        args: T,
    }
    let env: Env<J> = serde_json::from_slice(body).ok()?;
    (env.name == J::NAME).then_some(env.args)
}
