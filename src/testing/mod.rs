//! A test kit for everything a worker runs: your jobs' handlers, periodic
//! schedules and topic subscribers, with hooks and metrics to look at. No
//! Redis, no real sleeps.
//!
//! With tokio's paused clock (`#[tokio::test(start_paused = true)]` or
//! `tokio::time::pause()`, which need tokio's `test-util` feature in your
//! dev-dependencies: without it tokio reports "no method named `start_paused`"),
//! handlers' own sleeps take no real time either.
//!
//! [`TestKit`] runs on a [`MemoryBackend`] whose [`Clock`] you move forward. Enqueue
//! with [`TestKit::client`], look at what was enqueued with typed access, run the
//! worker until nothing is due, advance the clock and run what became due.
//! [`advance`](TestKit::advance) goes through the time as a worker running all
//! along would: every job, retry, event retry and periodic tick in between
//! runs at its own time, in order. [`downtime`](TestKit::downtime) moves the
//! clock as if no worker ran (then a schedule's [`Missed`](crate::ops::Missed)
//! policy applies).
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::Result;
use crate::backend::memory::{Clock, MemoryBackend};
use crate::client::Client;
use crate::contract::backend::Backend;
use crate::contract::stats::DeadLetter;
use crate::contract::time::UnixMs;
use crate::job::data::Data;
use crate::worker::{EVENTS_FINISHED, Hooks, JOBS_FINISHED, RetryPolicy, Sink};

mod drive;
mod enqueued;
mod metrics;
mod periodic;
mod topics;

pub use enqueued::Enqueued;

/// Handlers, schedules and subscribers under test, on a memory backend with a
/// controllable clock. Clones share the backend and the recorded metrics.
#[derive(Clone)]
pub struct TestKit {
    backend: MemoryBackend,
    data: Data,
    retry: RetryPolicy,
    wait_limit: Duration,
    hooks: Vec<Arc<dyn Hooks>>,
    subscribers: Vec<topics::KitSubscriber>,
    tickers: Vec<Arc<periodic::KitTicker>>,
    /// Why a periodic job or a subscriber given to the kit cannot run: what,
    /// and why.
    invalid: Option<(&'static str, String)>,
    recorder: Arc<metrics::Recorder>,
    sink: Sink,
}

/// What one [`TestKit::run_until_idle`] (or [`advance`](TestKit::advance))
/// did.
///
/// ```
/// use redjob::testing::RunReport;
///
/// let report = RunReport::default();
/// assert_eq!(
///     format!("{report:?}"),
///     "RunReport { processed: 0, retried: 0, dead: 0, throttled: 0, ticks: 0, events: 0, events_retried: 0, events_dead: 0 }"
/// );
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// Jobs that succeeded.
    pub processed: u64,
    /// Failed runs scheduled again.
    pub retried: u64,
    /// Jobs moved to the dead-letter queue.
    pub dead: u64,
    /// Runs a handler's rate limit
    /// ([`JobError::rate_limited`](crate::JobError::rate_limited), or
    /// `rate_limited_key`) sent back to wait: no failed attempt, the job
    /// runs again when the limit lets it.
    pub throttled: u64,
    /// Periodic jobs enqueued by their schedules' ticks.
    pub ticks: u64,
    /// Events the kit's subscribers handled.
    pub events: u64,
    /// Failed event runs scheduled again.
    pub events_retried: u64,
    /// Events given up (the subscriber's dead letters).
    pub events_dead: u64,
}

impl std::ops::AddAssign for RunReport {
    fn add_assign(&mut self, o: RunReport) {
        self.processed += o.processed;
        self.retried += o.retried;
        self.dead += o.dead;
        self.throttled += o.throttled;
        self.ticks += o.ticks;
        self.events += o.events;
        self.events_retried += o.events_retried;
        self.events_dead += o.events_dead;
    }
}

impl std::fmt::Debug for TestKit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queues: BTreeMap<String, usize> = self
            .backend
            .queue_names()
            .into_iter()
            .map(|q| {
                let n = self.backend.jobs_waiting(&q).len();
                (q, n)
            })
            .collect();
        let subscribers: Vec<String> = self
            .subscribers
            .iter()
            .map(|s| format!("{}/{}", s.topic, s.name))
            .collect();
        let periodic: Vec<String> = self.tickers.iter().map(|t| t.describe()).collect();
        f.debug_struct("TestKit")
            .field("now", &UnixMs(self.clock().now_ms()))
            .field("jobs_waiting", &queues)
            .field("subscribers", &subscribers)
            .field("periodic", &periodic)
            .field("hooks", &self.hooks.len())
            .field("metric_series", &self.recorder.len())
            .field("wait_limit", &self.wait_limit)
            .finish()
    }
}

impl Default for TestKit {
    fn default() -> Self {
        Self::new()
    }
}

impl TestKit {
    /// An empty kit whose clock starts at the current time.
    pub fn new() -> Self {
        Self::with_backend(MemoryBackend::new())
    }

    /// An empty kit whose clock starts at `t`: for schedules that tick at
    /// times of day, and for tests that must not depend on when they run.
    /// From `t` the clock runs on with tokio's clock, as [`new`](Self::new)'s
    /// does: in real time, or not at all under a paused tokio clock
    /// (`#[tokio::test(start_paused = true)]`) until the test advances it.
    /// The backend's clock counts from 1970 (Unix time, as Redis's `TIME`):
    /// a `t` before that starts it at 1970. A job's id holds its send time in
    /// ten base-36 digits, as RSMQ's ids do, which end in 2085: a kit started
    /// after that makes ids whose send time reads wrong.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use redjob::testing::TestKit;
    ///
    /// let monday_9am = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_579_600);
    /// let kit = TestKit::starting_at(monday_9am);
    /// // the clock has run on for as long as this line took to reach
    /// let now = kit.clock().now_ms();
    /// assert!((1_764_579_600_000..1_764_579_660_000).contains(&now), "{now}");
    /// ```
    pub fn starting_at(t: SystemTime) -> Self {
        Self::with_backend(MemoryBackend::with_clock(Clock::starting_at(t)))
    }

    fn with_backend(backend: MemoryBackend) -> Self {
        let recorder = Arc::new(metrics::Recorder::default());
        TestKit {
            backend,
            data: Data::default(),
            retry: RetryPolicy::default(),
            wait_limit: Duration::from_secs(10),
            hooks: Vec::new(),
            subscribers: Vec::new(),
            tickers: Vec::new(),
            invalid: None,
            sink: Sink::to(recorder.clone()),
            recorder,
        }
    }

    /// How long [`run_until_idle`](Self::run_until_idle) waits, in real time,
    /// for the jobs and events to be done, and how long one
    /// [`advance`](Self::advance) or [`downtime`](Self::downtime) may take in
    /// all, before they fail with [`Error::NotIdle`](crate::Error::NotIdle).
    /// Defaults to 10 s. Simulated time (a paused tokio clock,
    /// [`Clock::advance`]) does not count.
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

    /// Adds lifecycle hooks to the kit's workers, as
    /// [`WorkerBuilder::hooks`](crate::worker::WorkerBuilder::hooks) does. Keep
    /// an [`Arc`] of them to look at what they saw.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use redjob::testing::TestKit;
    /// use redjob::worker::{Hooks, JobRun};
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "kit-hooked", max_attempts = 1)]
    /// struct Hooked;
    /// impl Job for Hooked {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
    ///         Err(JobError::retry("the mail server said no"))
    ///     }
    /// }
    ///
    /// #[derive(Default)]
    /// struct Dead(Mutex<Vec<String>>);
    /// impl Hooks for Dead {
    ///     fn dead_lettered(&self, run: &JobRun<'_>, _: Duration, error: &str) {
    ///         self.0.lock().unwrap().push(format!("{}: {error}", run.job));
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let dead = Arc::new(Dead::default());
    /// let kit = TestKit::new().hooks(dead.clone());
    /// kit.client().enqueue(&Hooked).await?;
    /// kit.run_until_idle().await?;
    /// assert_eq!(*dead.0.lock().unwrap(), ["kit-hooked: failed 1 of 1 attempts: the mail server said no"]);
    /// # Ok(()) }
    /// ```
    pub fn hooks(mut self, hooks: impl Hooks) -> Self {
        self.hooks.push(Arc::new(hooks));
        self
    }

    /// A client that enqueues into the kit.
    pub fn client(&self) -> Client {
        Client::memory(self.backend.clone())
    }

    /// A client in inline mode: each enqueue runs its job at once (with the kit's
    /// data), once, and returns its failure as an error. Nothing is stored.
    ///
    /// What it does as a worker does: the job goes through its stored form
    /// (a job that does not survive encoding fails), its context has an id
    /// and enqueue time from the kit's clock, and the job type's `timeout`
    /// applies: a run past it fails with `timed out after …`, the text a
    /// worker records, and its [`cancellation`](crate::JobContext::cancellation)
    /// token is cancelled.
    ///
    /// What it does not do, as Sidekiq's inline mode does not: delays
    /// (`enqueue_in`, `enqueue_at` and a queue's delay run the job at once),
    /// uniqueness (each enqueue of a unique job runs it), concurrency keys
    /// and the queues' limits, priorities, retries (a failed run is the
    /// enqueue's error), hooks and metrics. A handler's panic is the
    /// caller's. Batches and flows are refused. Use [`client`](Self::client)
    /// and [`run_until_idle`](Self::run_until_idle) to test those.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::testing::TestKit;
    /// use redjob::{Error, Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "kit-inline-slow", timeout = "1s")]
    /// struct Slow;
    /// impl Job for Slow {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
    ///         tokio::time::sleep(Duration::from_secs(5)).await;
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// let err = kit.inline_client().enqueue(&Slow).await.unwrap_err();
    /// assert!(matches!(err, Error::JobFailed { error, .. } if error == "timed out after 1s"));
    /// // a delay does not hold it: it runs (and times out) at once
    /// let err = kit.inline_client().enqueue_in(&Slow, Duration::from_secs(60)).await;
    /// assert!(err.is_err());
    /// assert!(kit.enqueued::<Slow>().is_empty(), "nothing stored");
    /// # Ok(()) }
    /// ```
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

    /// Dead letters of `queue`, the oldest first, at most
    /// [`MAX_PAGE`](crate::inspect::MAX_PAGE).
    pub async fn dead_letters(&self, queue: &str) -> Result<Vec<DeadLetter>> {
        self.backend.dead_letters(queue, usize::MAX).await
    }

    /// Runs what is due now until nothing is due or running: the periodic
    /// ticks due by the clock (oldest first), then every job and every event
    /// of a kit subscriber, on workers started for every queue (a queue that
    /// appears meanwhile, because a handler enqueues into it, is served too)
    /// and stopped at the end. Jobs and retries scheduled for later stay for
    /// [`advance`](Self::advance); so do jobs of a paused queue.
    ///
    /// Waits at most [`wait_limit`](Self::wait_limit) of real time (10 s), then
    /// fails with [`Error::NotIdle`](crate::Error::NotIdle) naming the jobs and
    /// events still due or running. Under tokio's paused clock a handler that
    /// never returns is ended before that by its job's `timeout` (the paused
    /// clock jumps to it), as a worker ends it: that attempt fails and the
    /// job waits for its retry. Fails with
    /// [`Error::DuplicateJobName`](crate::Error::DuplicateJobName), as the
    /// worker's `build` does, when two job types share a job name, and with
    /// [`Error::InvalidValue`](crate::Error::InvalidValue) for a periodic job
    /// the worker would refuse.
    pub async fn run_until_idle(&self) -> Result<RunReport> {
        crate::job::check_unique_names()?;
        self.check_setup()?;
        let before = self.totals().await?;
        let events_before = self.event_outcomes();
        let throttled_before = self.throttled_runs();
        let ticks = periodic::tick_due(&self.backend, &self.tickers).await?;
        let driven = self.drive().await;
        let after = self.totals().await?;
        driven?;
        let mut r = RunReport {
            ticks,
            ..RunReport::default()
        };
        for (queue, a) in &after {
            let b = before.get(queue).copied().unwrap_or_default();
            r.processed += a.processed.saturating_sub(b.processed);
            r.retried += a.retried.saturating_sub(b.retried);
            r.dead += a.dead.saturating_sub(b.dead);
        }
        let events_after = self.event_outcomes();
        r.throttled = self.throttled_runs() - throttled_before;
        r.events = events_after[0] - events_before[0];
        r.events_retried = events_after[1] - events_before[1];
        r.events_dead = events_after[2] - events_before[2];
        Ok(r)
    }

    /// Refuses what a worker's `build` would refuse of the periodic jobs.
    fn check_setup(&self) -> Result<()> {
        match &self.invalid {
            Some((what, reason)) => Err(crate::Error::InvalidValue {
                what,
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The runs of jobs a handler's rate limit sent back so far.
    fn throttled_runs(&self) -> u64 {
        self.recorder
            .counter(JOBS_FINISHED, &[("outcome", "throttled")])
    }

    /// The kit's subscribers' event runs so far: succeeded, retried, dead.
    fn event_outcomes(&self) -> [u64; 3] {
        ["succeeded", "retried", "dead"]
            .map(|o| self.recorder.counter(EVENTS_FINISHED, &[("outcome", o)]))
    }
}
