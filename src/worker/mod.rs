//! The worker: serves queues, runs jobs on a bounded pool, keeps their leases,
//! retries with backoff, dead-letters, and shuts down without losing a job.
//!
//! ```no_run
//! use redjob::{Client, Job, JobContext, JobError, Worker};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Job)]
//! #[job(queue = "emails")]
//! struct Welcome { user: u64 }
//!
//! struct Mailer;
//!
//! impl Job for Welcome {
//!     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
//!         let _mailer = ctx.data::<Mailer>()?;
//!         Ok(())
//!     }
//! }
//!
//! # async fn _demo() -> redjob::Result<()> {
//! let client = Client::connect("redis://127.0.0.1:6379").await?;
//! let worker = Worker::builder(client.backend())
//!     .register::<Welcome>()
//!     .concurrency(64)
//!     .data(Mailer)
//!     .build()?;
//! // until ctrl-c, SIGTERM or an operator's stop (`redjob workers stop`)
//! let stopped = worker.run_until_stopped().await?;
//! println!("worker {stopped}");
//! # Ok(()) }
//! ```

mod builder;
mod cancelled;
mod control;
mod dispatch;
mod execute;
mod hooks;
mod launch;
mod leases;
mod limit;
mod listener;
mod metrics;
mod observe;
mod per_queue;
mod periodic;
mod ready;
mod recount;
mod registry;
mod retry;
mod settings;
mod settle;
mod shutdown;
mod slots;
mod start;
mod subscriber;
mod ticks;
mod turns;
mod unique_start;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;

pub use builder::WorkerBuilder;
pub use control::Stopped;
pub use hooks::{CancelReason, Hooks, JobRun, UNDECODABLE};
pub(crate) use metrics::{EVENTS_FINISHED, FINISHED as JOBS_FINISHED, Sink};
pub use periodic::Periodic;
pub(crate) use periodic::{Ticker, tick_skipped};
pub use ready::Ready;
pub use retry::RetryPolicy;
/// The token that shuts a worker down ([`WorkerBuilder::shutdown`],
/// [`Worker::shutdown_token`]), re-exported from `tokio-util`.
pub use tokio_util::sync::CancellationToken;

use crate::Result;
use crate::backend::any::AnyBackend;
use crate::contract::backend::Backend;
use crate::contract::settings::QueueSettings;
use crate::job::data::Data;
use ready::Readiness;

pub use crate::contract::queues::MAX_DELAY;
pub use crate::topic::Subscription;

/// Settings shared by a worker's tasks.
pub(crate) struct Shared {
    /// Jobs leased by this worker: running or prefetched.
    pub slots: Semaphore,
    /// Jobs running.
    pub running: Semaphore,
    /// Told when a job took the last running slot: hand-off registrations are
    /// withdrawn (see [`withdraw_when_full`]).
    pub filled: Notify,
    pub fetch_max: u32,
    /// Jobs running at once (`running`'s permits), and the most leased
    /// beyond them (`slots` has both).
    pub concurrency: usize,
    pub prefetch: usize,
    /// Jobs leased and spawned that have not yet taken a running slot (or
    /// gone back without one): see `execute::RunSlot`.
    pub unstarted: std::sync::atomic::AtomicUsize,
    /// Told when a job gives its slot back.
    pub slot_freed: Notify,
    /// The queues waiting for a share of the slots, in turn.
    pub turns: turns::Turns,
    pub lease: Duration,
    pub poll_interval: Duration,
    pub job_timeout: Option<Duration>,
    pub retry: RetryPolicy,
    pub data: Data,
    /// How long after it was sent a job of an unknown type is put back for a
    /// worker that knows it, before it is dead-lettered.
    pub unknown_jobs_retry_for: Duration,
    /// The longest a handler's throttle holds its job and queue.
    pub max_throttle: Duration,
    pub readiness: Readiness,
    /// How many dead letters each queue keeps.
    pub retention: crate::contract::leases::Retention,
    /// The history setting, for queues that store none.
    pub history: crate::contract::history::History,
    /// The hooks.
    pub observer: observe::Observer,
    /// How a job reaches its batch (its results, its additions).
    pub batches: Option<crate::job::BatchAccess>,
    /// Which batches were cancelled, as last read.
    pub cancelled_batches: cancelled::CancelledBatches,
    /// Metrics through the `metrics` facade.
    pub metrics: bool,
    /// How often queue sizes and subscriber lags are sampled into gauges (with
    /// metrics on and an interval set).
    pub sample_every: Option<Duration>,
    /// The controls an operator set on this worker (quiet, stop).
    pub controls: Arc<control::Controls>,
    /// Where its metrics go: the global recorder, or the test kit's own.
    pub sink: metrics::Sink,
    /// How a run of a job unique until its run starts frees its key.
    pub unique_start: Arc<dyn unique_start::UniqueStart>,
}

impl Shared {
    /// Gives `n` of the worker's slots back, and tells a dispatcher waiting
    /// for one ([`Shared::slot_freed`]).
    pub fn give_slots(&self, n: usize) {
        if n > 0 {
            self.slots.add_permits(n);
            self.slot_freed.notify_waiters();
        }
    }

    /// Running slots free for jobs leased now: the free running permits less
    /// the jobs leased before that have yet to take one (prefetched, or
    /// spawned and not yet polled).
    pub fn running_free(&self) -> usize {
        running_free(&self.running, &self.unstarted)
    }
}

/// [`Shared::running_free`] of its `running` and `unstarted`.
pub(crate) fn running_free(
    running: &Semaphore,
    unstarted: &std::sync::atomic::AtomicUsize,
) -> usize {
    let unstarted = unstarted.load(std::sync::atomic::Ordering::Acquire);
    running.available_permits().saturating_sub(unstarted)
}

/// Serves queues until shut down. Build one with [`Worker::builder`].
pub struct Worker<B: Backend = AnyBackend> {
    backend: B,
    id: String,
    queues: Vec<(String, QueueSettings)>,
    periodic: Vec<Periodic>,
    subscriptions: Vec<Arc<crate::topic::subscription::Spec>>,
    starter: Option<subscriber::Starter<B>>,
    concurrency: usize,
    shared: Arc<Shared>,
    grace: Duration,
    signals: bool,
    shutdown: CancellationToken,
    /// The builder's settings, stored with each queue where none is.
    settings: QueueSettings,
    /// The throttles in a row a job may have uncounted.
    throttle_limit: u32,
}

impl<B: Backend> std::fmt::Debug for Worker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("queues", &self.queues)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Worker<B> {
    /// Starts configuring a worker on `backend` (for Redis, [`Client::backend`](crate::Client::backend)).
    pub fn builder(backend: B) -> WorkerBuilder<B> {
        WorkerBuilder::new(backend)
    }

    /// Cancel this token to shut the worker down gracefully (as ctrl-c does).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// A handle that tells when this worker serves (see [`Ready`]); take it
    /// before [`run`](Self::run).
    pub fn ready(&self) -> Ready {
        self.shared.readiness.handle()
    }

    /// This worker's id in the live-worker registry
    /// ([`Admin::workers`](crate::ops::Admin::workers)): a random UUID, new
    /// for every worker built.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The queues served, in order.
    pub fn queues(&self) -> impl Iterator<Item = &str> {
        self.queues.iter().map(|(q, _)| q.as_str())
    }

    /// Job types linked into the program whose queue (their `#[job(queue = ...)]`)
    /// this worker does not serve, as `(job name, queue)`, sorted: their jobs wait
    /// for another worker. [`run`](Self::run) logs them at start.
    ///
    /// ```
    /// use redjob::{Job, JobContext, JobError, Worker};
    /// use redjob::backend::memory::MemoryBackend;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "report", queue = "reports")]
    /// struct Report;
    /// impl Job for Report {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// let worker = Worker::builder(MemoryBackend::new()).queue("emails").build()?;
    /// assert!(worker.unserved_jobs().contains(&("report", "reports")));
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn unserved_jobs(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<_> = crate::job::registered()
            .filter(|r| !self.queues.iter().any(|(q, _)| q == r.queue))
            .map(|r| (r.name, r.queue))
            .collect();
        out.sort_unstable();
        out
    }

    /// Runs until the shutdown token is cancelled (or ctrl-c / SIGTERM arrives, unless
    /// turned off with [`WorkerBuilder::handle_signals`], or an operator stops it
    /// through the backend, see [`Admin::stop_worker`](crate::ops::Admin::stop_worker)),
    /// then stops fetching, lets running jobs finish within the grace period, cancels
    /// the rest and makes them visible again at once, and settles everything. It
    /// never exits the process; [`run_until_stopped`](Self::run_until_stopped)
    /// also says why it stopped.
    ///
    /// While an operator has it quiet ([`Admin::quiet_worker`](crate::ops::Admin::quiet_worker))
    /// it takes no work and finishes what it runs, until resumed.
    ///
    /// ```
    /// use redjob::Worker;
    /// use redjob::backend::memory::MemoryBackend;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("mail")
    ///     .handle_signals(false)
    ///     .build()?;
    /// worker.shutdown_token().cancel(); // as the app does at its own shutdown
    /// worker.run().await?;
    /// # Ok(()) }
    /// ```
    pub async fn run(self) -> Result<()> {
        self.run_until_stopped().await.map(|_| ())
    }

    /// As [`run`](Self::run), and returns why it stopped: an application that
    /// should end with the worker decides so from the [`Stopped`] (an operator's
    /// stop leaves the process running; ctrl-c or SIGTERM ends it too).
    pub async fn run_until_stopped(mut self) -> Result<Stopped> {
        self.log_served();
        // however run ends (returns, crashes, or is dropped), waiters learn of it
        let _stopped = StopsReadiness(self.shared.clone());
        let mut infra = JoinSet::new();
        if self.signals {
            infra.spawn(on_signal(
                self.shutdown.clone(),
                self.shared.controls.clone(),
            ));
        }
        // the stored data's layout first: a later release's is left alone
        if !self.layout_checked().await? {
            return Ok(self.shared.controls.reason());
        }
        let running = self.launch(infra).await;
        running
            .until_stopped(
                &self.backend,
                &self.shutdown,
                &self.shared.controls,
                &self.shared.readiness,
                self.grace,
            )
            .await
    }

    /// Logs the job types each queue serves, and those linked in whose queue
    /// this worker does not serve.
    fn log_served(&self) {
        for (q, _) in &self.queues {
            let jobs: Vec<&str> = crate::job::registered()
                .filter(|r| r.queue == q)
                .map(|r| r.name)
                .collect();
            tracing::info!(queue = %q, jobs = ?jobs, "serving queue");
        }
        let unserved = self.unserved_jobs();
        if !unserved.is_empty() {
            let list: Vec<String> = unserved
                .iter()
                .map(|(n, q)| format!("{n} (queue {q})"))
                .collect();
            tracing::info!(jobs = ?list, "job types linked into this program whose queue this worker does not serve: their jobs wait for a worker that serves it");
        }
    }
}

impl<B: Backend> Worker<B> {
    /// Waits until the backend says its data is in a layout this release
    /// reads, retrying while it cannot be reached: false when shut down
    /// meanwhile, [`Error::LayoutUnsupported`](crate::Error::LayoutUnsupported)
    /// for a later layout.
    async fn layout_checked(&self) -> Result<bool> {
        let mut wait = Duration::from_millis(100);
        let mut warned = false;
        loop {
            // a shutdown before the check ends it, whichever is ready first
            let r = tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => return Ok(false),
                r = self.backend.check_layout() => r,
            };
            match r {
                Ok(_) => return Ok(!self.shutdown.is_cancelled()),
                Err(e @ crate::Error::LayoutUnsupported { .. }) => {
                    tracing::error!(error = %e, "not starting");
                    return Err(e);
                }
                Err(e) => {
                    if !warned {
                        warned = true;
                        tracing::warn!(error = %e, "cannot read the namespace's layout version; retrying before taking any work");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = self.shutdown.cancelled() => return Ok(false),
                    }
                    wait = (wait * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

/// Marks the worker stopped for [`Ready`] waiters when dropped.
struct StopsReadiness(Arc<Shared>);

impl Drop for StopsReadiness {
    fn drop(&mut self) {
        self.0.readiness.stopped();
    }
}

/// Shuts the worker down on ctrl-c or SIGTERM; a signal during the shutdown
/// (a second ctrl-c, or one after the app's token or an operator's stop)
/// ends its grace period at once.
async fn on_signal(shutdown: CancellationToken, controls: Arc<control::Controls>) {
    let mut signals = Signals::new();
    let name = tokio::select! {
        name = signals.next() => name,
        _ = shutdown.cancelled() => "",
        _ = controls.stop.cancelled() => "",
    };
    if !name.is_empty() {
        tracing::info!("{name} received");
        controls.stopping(control::Stopped::Signal { name });
        shutdown.cancel();
    }
    let name = signals.next().await;
    tracing::warn!("{name} received during the shutdown: the grace period ends now");
    controls.hurry.cancel();
}

/// The stop signals, listened to from their creation on (none is missed
/// between two waits).
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.int) => "ctrl-c",
                _ = recv(&mut self.term) => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "ctrl-c"
        }
    }
}

/// The worker's run, instantiated here for the backends redjob ships, in
/// debug builds only: there rustc shares the generic code a dependency
/// instantiated with the crates that depend on it, so a program or test that
/// runs a worker links these copies instead of compiling its own (most of a
/// small test binary's build time). Release builds share none, and this is not
/// compiled into them. Never called.
#[cfg(debug_assertions)]
#[doc(hidden)]
pub fn __instantiated_runs(
    any: Option<Worker<AnyBackend>>,
    memory: Option<Worker<crate::backend::memory::MemoryBackend>>,
) -> Vec<futures::future::BoxFuture<'static, Result<Stopped>>> {
    let any = any.map(|w| Box::pin(w.run_until_stopped()) as _);
    let memory = memory.map(|w| Box::pin(w.run_until_stopped()) as _);
    any.into_iter().chain(memory).collect()
}
