//! A test kit for your own handlers and schedules: no Redis, no real sleeps.
//!
//! With tokio's paused clock (`#[tokio::test(start_paused = true)]` or
//! `tokio::time::pause()`, which need tokio's `test-util` feature in your
//! dev-dependencies: without it tokio reports "no method named `start_paused`"),
//! handlers' own sleeps take no real time either.
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

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::backend::memory::{Clock, MemoryBackend};
use crate::client::Client;
use crate::contract::backend::Backend;
use crate::contract::stats::{DeadLetter, QueueStats};
use crate::job::Job;
use crate::job::data::Data;
use crate::worker::{RetryPolicy, Worker};
use crate::{JobId, Result};

/// Handlers and schedules under test, on a memory backend with a controllable clock.
#[derive(Clone, Debug)]
pub struct TestKit {
    backend: MemoryBackend,
    data: Data,
    retry: RetryPolicy,
    wait_limit: Duration,
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
            wait_limit: Duration::from_secs(10),
        }
    }

    /// How long [`run_until_idle`](Self::run_until_idle) and
    /// [`advance`](Self::advance) wait, in real time, for the jobs to be done
    /// before they fail with [`Error::NotIdle`](crate::Error::NotIdle). Defaults
    /// to 10 s. Simulated time (a paused tokio clock, [`Clock::advance`]) does not
    /// count.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::testing::TestKit;
    ///
    /// let kit = TestKit::new().wait_limit(Duration::from_secs(60));
    /// # let _ = kit;
    /// ```
    pub fn wait_limit(mut self, limit: Duration) -> Self {
        self.wait_limit = limit;
        self
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
                if let Ok(job) = crate::job::decode_as::<J>(&body) {
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

    /// Runs workers on every queue until no job is due or running, then stops them.
    /// Jobs scheduled for later (delays, retries) stay for [`advance`](Self::advance).
    /// A queue that appears meanwhile (a handler enqueues into a new queue) is
    /// served too.
    ///
    /// Waits at most [`wait_limit`](Self::wait_limit) of real time (10 s), then
    /// fails with [`Error::NotIdle`](crate::Error::NotIdle) naming the jobs still due
    /// or running. Fails with [`Error::DuplicateJobName`](crate::Error::DuplicateJobName),
    /// as the worker's `build` does, when two job types share a job name.
    pub async fn run_until_idle(&self) -> Result<RunReport> {
        crate::job::check_unique_names()?;
        let before = self.totals().await?;
        let driven = self.drive().await;
        let after = self.totals().await?;
        driven?;
        let mut r = RunReport::default();
        for (queue, a) in &after {
            let b = before.get(queue).copied().unwrap_or_default();
            r.processed += a.processed.saturating_sub(b.processed);
            r.retried += a.retried.saturating_sub(b.retried);
            r.dead += a.dead.saturating_sub(b.dead);
        }
        Ok(r)
    }

    /// Moves the clock forward by `d` (then to the next whole millisecond, see
    /// [`Clock::advance`]), then runs what became due until idle: a job enqueued
    /// with `enqueue_in(job, d)` runs in `advance(d)`.
    pub async fn advance(&self, d: Duration) -> Result<RunReport> {
        self.clock().advance(d);
        self.run_until_idle().await
    }

    /// Starts a worker for each queue not served yet, and waits for the backend's
    /// next change, until it is idle.
    async fn drive(&self) -> Result<()> {
        let limit = RealTimeLimit::start(self.wait_limit);
        let mut expired = limit.expired;
        let mut changes = self.backend.changes();
        let mut served = HashSet::new();
        let mut workers = JoinSet::new();
        let stop = CancellationToken::new();
        let outcome = loop {
            changes.borrow_and_update();
            if self.backend.is_idle() {
                break Ok(());
            }
            let new: Vec<String> = self
                .backend
                .queue_names()
                .into_iter()
                .filter(|q| !served.contains(q))
                .collect();
            if !new.is_empty() {
                served.extend(new.iter().cloned());
                let worker = Worker::builder(self.backend.clone())
                    .queues(new)
                    .handle_signals(false)
                    .retry(self.retry)
                    .grace_period(Duration::ZERO)
                    .data_map(self.data.clone())
                    .shutdown(stop.child_token())
                    .build()?;
                workers.spawn(async move { worker.run().await.map(drop) });
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = &mut expired => break Err(self.not_idle()),
                Some(ended) = workers.join_next() => break Err(ended_early(ended)),
            }
        };
        stop.cancel();
        let mut first_err = outcome.err();
        while let Some(ended) = workers.join_next().await {
            if let Err(e) = flatten(ended) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn not_idle(&self) -> crate::Error {
        let mut pending = Vec::new();
        for p in self.backend.pending() {
            let list = |m: &std::collections::BTreeMap<String, usize>| {
                m.iter()
                    .map(|(name, n)| format!("{n} {name}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut parts = Vec::new();
            if !p.running.is_empty() {
                parts.push(format!("running: {}", list(&p.running)));
            }
            if !p.due.is_empty() {
                parts.push(format!("due: {}", list(&p.due)));
            }
            pending.push(format!("queue {:?} {}", p.queue, parts.join("; ")));
        }
        crate::Error::NotIdle {
            waited: self.wait_limit,
            pending,
        }
    }

    async fn totals(&self) -> Result<HashMap<String, QueueStats>> {
        let mut all = HashMap::new();
        for q in self.backend.queue_names() {
            all.insert(q.clone(), self.backend.stats(&q).await?);
        }
        Ok(all)
    }
}

fn flatten(ended: std::result::Result<Result<()>, tokio::task::JoinError>) -> Result<()> {
    ended.map_err(|e| crate::Error::Crashed {
        task: "test kit worker",
        reason: e.to_string(),
    })?
}

/// A worker of the kit that stopped before it was told to.
fn ended_early(ended: std::result::Result<Result<()>, tokio::task::JoinError>) -> crate::Error {
    match flatten(ended) {
        Err(e) => e,
        Ok(()) => crate::Error::Crashed {
            task: "test kit worker",
            reason: "stopped before the kit was idle".into(),
        },
    }
}

/// Fires after a span of real time, whatever tokio's clock does: a thread of its
/// own sleeps (a tokio timer would follow a paused clock, and a blocking task
/// would keep a paused clock from advancing). Dropping it ends the thread.
struct RealTimeLimit {
    expired: oneshot::Receiver<()>,
    _stop: std::sync::mpsc::Sender<()>,
}

impl RealTimeLimit {
    fn start(limit: Duration) -> Self {
        let (fire, expired) = oneshot::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
                let _ = fire.send(());
            }
        });
        RealTimeLimit {
            expired,
            _stop: stop,
        }
    }
}
