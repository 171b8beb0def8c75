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
mod leases;
mod limit;
mod listener;
mod metrics;
mod observe;
mod per_queue;
mod periodic;
mod ready;
mod registry;
mod retry;
mod settings;
mod settle;
mod slots;
mod start;
mod subscriber;
mod ticks;
mod turns;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::task::TaskTracker;

use listener::{Handoff, Wakes, listen, poll, warn_about_backend, withdraw_when_full};

pub use builder::WorkerBuilder;
pub use control::Stopped;
pub use hooks::{CancelReason, Hooks, JobRun, UNDECODABLE};
pub(crate) use metrics::{EVENTS_FINISHED, FINISHED as JOBS_FINISHED, Sink};
pub use periodic::Periodic;
pub(crate) use periodic::Ticker;
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
use dispatch::Dispatcher;
use leases::Leases;
use ready::Readiness;
use settle::{Event, Settler};

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
    /// What this worker serves beyond its queues, for the registry: every job
    /// type linked into the program with its declared options, its topic
    /// subscribers, how long it waits for a worker that knows a type, its
    /// periodic schedules (without their next ticks); `None`
    /// when it cannot be encoded.
    fn serves(&self, tickers: &[Arc<periodic::Ticker>]) -> Option<(String, Vec<u8>)> {
        let mut job_types: Vec<_> = crate::job::registered()
            .map(|r| registry::job_type(r.name, &r.options))
            .collect();
        job_types.sort_by(|a, b| a.name.cmp(&b.name));
        let mut subscribers: Vec<_> = self
            .subscriptions
            .iter()
            .map(|s| crate::contract::admin::ServedSubscriber {
                topic: s.topic.clone(),
                subscriber: s.sub.name.clone(),
            })
            .collect();
        subscribers.sort_by(|a, b| (&a.topic, &a.subscriber).cmp(&(&b.topic, &b.subscriber)));
        let serves = crate::contract::admin::Serves {
            job_types,
            subscribers,
            unknown_ms: Some(crate::contract::backend::clamped_ms(
                self.shared.unknown_jobs_retry_for,
            )),
            schedules: tickers.iter().map(|t| t.served()).collect(),
        };
        serves.encode().ok()
    }

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
        let names: Vec<String> = self.queues.iter().map(|(q, _)| q.clone()).collect();
        for q in &names {
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
        let stop = self.shutdown.child_token();
        let abort = CancellationToken::new();
        // however run ends (returns, crashes, or is dropped), waiters learn of it
        let _stopped = StopsReadiness(self.shared.clone());
        // Dropping this future (a crashed or aborted worker) aborts the tasks below
        // first, then cancels running jobs: nothing is settled and the leases expire,
        // as after a process kill. Locals drop in reverse order.
        let abort_runs = leases::AbortRuns::new(abort.clone());
        let tracker = TaskTracker::new();
        let mut wakes = HashMap::new();
        let mut handoffs = HashMap::new();
        let mut renews = HashMap::new();
        let worker: Arc<str> = self.id.as_str().into();
        let mut dispatchers = JoinSet::new();
        let mut settlers = JoinSet::new();
        let mut settler_txs = Vec::new();
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
        let mut held = Vec::new();
        let mut registering = Vec::new();
        // runs starting and ending: the registry beats soon after
        let changed = Arc::new(leases::Changes::default());
        // each queue's limit per worker (no more than the worker holds),
        // which the settings stored with the queue set: read (and the
        // builder's stored where none is) before any job is taken
        let unlimited = self.shared.slots.available_permits();
        let limits: HashMap<String, (Arc<limit::Limit>, QueueSettings)> = self
            .queues
            .iter()
            .map(|(name, values)| {
                let own = values.concurrency.and_then(|c| c.per_worker);
                let size = own.map_or(unlimited, |n| (n as usize).min(unlimited));
                let l = limit::Limit::new(size);
                l.set_fleet_limited(settings::fleet_limited(values));
                (name.clone(), (Arc::new(l), values.clone()))
            })
            .collect();
        let follow = Arc::new(settings::Follow {
            read: limits
                .keys()
                .map(|q| (q.clone(), std::sync::atomic::AtomicBool::new(false)))
                .collect(),
            limits: limits.clone(),
            unlimited,
            base: self.settings.clone(),
            by: format!("worker {}", self.id),
            told: Default::default(),
            wakes: limits
                .keys()
                .map(|q| (q.clone(), Arc::new(Notify::new())))
                .collect(),
            seen: Default::default(),
            bodies: limits
                .keys()
                .map(|q| {
                    (
                        q.clone(),
                        Arc::new(std::sync::atomic::AtomicBool::new(
                            self.shared.history.keeps_bodies(),
                        )),
                    )
                })
                .collect(),
        });
        follow.first_pass(&self.backend).await;
        for (name, _) in &self.queues {
            let queue: Arc<str> = name.as_str().into();
            let wake = follow.wakes[name].clone();
            wakes.insert(name.clone(), wake.clone());
            let (tx, rx) = mpsc::unbounded_channel();
            let leases = Arc::new(Leases::watched(changed.clone()));
            abort_runs.watch(leases.clone());
            let by = crate::contract::attempts::RunBy {
                worker: self.id.clone(),
                host: crate::contract::admin::host_name(),
            };
            held.push((queue.clone(), leases.clone()));
            let hold = Arc::new(per_queue::Hold::default());
            let settler = Settler::new(
                self.backend.clone(),
                queue.clone(),
                self.shared.lease,
                wake.clone(),
                leases.clone(),
                settle::Keeping {
                    retention: self.shared.retention,
                    history: self.shared.history,
                    by: by.clone(),
                    throttle_limit: self.throttle_limit,
                    hold: hold.clone(),
                    bodies: follow.bodies[name].clone(),
                },
            );
            settlers.spawn(settler.run(rx));
            settler_txs.push(tx.clone());
            renews.insert(name.clone(), tx.clone());
            let qm = metrics::QueueMetrics::new(
                queue.clone(),
                self.shared.metrics,
                self.shared.sink.clone(),
            );
            let per_queue = Arc::new(per_queue::PerQueue::new(
                stop.clone(),
                abort.clone(),
                qm,
                hold,
            ));
            let env = Arc::new(execute::RunEnv {
                queue,
                shared: self.shared.clone(),
                tx,
                per_queue,
                leases,
                queue_slots: limits[name].0.clone(),
            });
            let d = Dispatcher {
                backend: self.backend.clone(),
                env,
                worker: worker.clone(),
                follow: follow.clone(),
                wake,
                tracker: tracker.clone(),
                clock: std::sync::Mutex::new(None),
                registered: std::sync::atomic::AtomicU32::new(0),
                in_place: std::sync::atomic::AtomicBool::new(false),
                recovering: Arc::default(),
            };
            let d = Arc::new(d);
            registering.push(d.clone());
            let to = d.clone();
            let take: Handoff = Arc::new(move |h| to.take_handed(h));
            handoffs.insert(name.clone(), take);
            dispatchers.spawn(d.run());
        }
        let tickers: Vec<Arc<periodic::Ticker>> = std::mem::take(&mut self.periodic)
            .into_iter()
            .map(|p| Arc::new(periodic::Ticker::new(p)))
            .collect();
        // (their ticks due together go in one call a queue)
        let ticks = (!tickers.is_empty()).then(|| ticks::Ticks::start(self.backend.clone()));
        for t in &tickers {
            if let Some(ticks) = &ticks {
                infra.spawn(periodic::run(
                    self.backend.clone(),
                    ticks.clone(),
                    t.clone(),
                    stop.clone(),
                ));
            }
        }
        let serves = self.serves(&tickers);
        let registry = Arc::new(registry::Registry {
            id: self.id.clone(),
            host: crate::contract::admin::host_name(),
            queues: self.queues.iter().map(|(q, _)| q.clone()).collect(),
            concurrency: self.concurrency,
            leases: held,
            tickers,
            every: self.shared.lease / 3,
            started: tokio::time::Instant::now(),
            changed,
            serves,
            controls: self.shared.controls.clone(),
        });
        // apart from the other tasks: its last beat must end before the
        // worker leaves the registry (below)
        // (a set, so that dropping the worker's future aborts it)
        let mut beats = JoinSet::new();
        beats.spawn(registry.clone().run(self.backend.clone(), stop.clone()));
        infra.spawn(settings::init(
            self.backend.clone(),
            follow,
            self.shared.controls.settings.subscribe(),
            self.shared.lease / 3,
            stop.clone(),
        ));
        infra.spawn(withdraw_when_full(
            self.backend.clone(),
            self.shared.clone(),
            registering,
            stop.clone(),
        ));
        let readers = TaskTracker::new();
        let drained = CancellationToken::new();
        let mut subscribers = JoinSet::new();
        if let Some(start) = self.starter {
            for spec in std::mem::take(&mut self.subscriptions) {
                let env = subscriber::Env {
                    shared: self.shared.clone(),
                    consumer: self.id.as_str().into(),
                    stop: stop.clone(),
                    abort: abort.clone(),
                    tracker: tracker.clone(),
                    reading: readers.token(),
                    drained: drained.clone(),
                };
                subscribers.spawn(start(self.backend.clone(), spec, env));
            }
        }
        readers.close();
        infra.spawn(warn_about_backend(self.backend.clone()));
        infra.spawn(sweep_batches(
            self.backend.clone(),
            self.shared.lease,
            stop.clone(),
        ));
        if self.shared.metrics {
            self.shared.sink.with(metrics::describe);
        }
        // its own set and token: it samples once more after the drain
        // (a set, so that dropping the worker's future aborts it)
        let mut sampler = JoinSet::new();
        let sampled = CancellationToken::new();
        if let Some(every) = self.shared.sample_every {
            let queues = self.queues.iter().map(|(q, _)| q.clone()).collect();
            sampler.spawn(metrics::sample(
                self.backend.clone(),
                self.shared.sink.clone(),
                queues,
                every,
                sampled.clone(),
            ));
        }
        infra.spawn(poll(
            self.backend.clone(),
            names.clone(),
            wakes.clone(),
            self.shared.poll_interval,
            stop.clone(),
        ));
        // its own set: at shutdown it hands over the jobs handed before, to be
        // released, and is joined before the runs are counted out
        let mut listener = JoinSet::new();
        listener.spawn(listen(
            self.backend.clone(),
            names,
            Wakes {
                worker,
                wakes,
                handoffs,
                renews,
            },
            self.shared.clone(),
            stop.clone(),
        ));
        // an operator's stop ends the run as the token does
        let controls = self.shared.controls.clone();

        // a task that ends before shutdown crashed: shut down and report it
        // (tasks end by themselves only once `stop`, a child of `shutdown`, is
        // cancelled: checking `shutdown` first tells the two apart, and `stop`
        // once a task ended, as the shutdown can come on another thread
        // between the two looks)
        let shut_down = || {
            // a stop read meanwhile does not take its place
            controls.stopping(Stopped::Shutdown);
            None
        };
        let mut crashed = tokio::select! {
            biased;
            _ = self.shutdown.cancelled() => shut_down(),
            _ = controls.stop.cancelled() => None,
            Some(r) = dispatchers.join_next() => ended("dispatcher", r, &stop).or_else(shut_down),
            Some(r) = settlers.join_next() => ended("settler", r, &stop).or_else(shut_down),
            Some(r) = subscribers.join_next() => ended("subscriber", r, &stop).or_else(shut_down),
        };
        stop.cancel();
        tracing::info!(running = tracker.len(), grace = ?self.grace, "shutting down: no new jobs");
        crashed = crashed.or(joined("dispatcher", dispatchers).await);
        // the jobs handed before the listener stopped start (or are released)
        // before the runs are counted out
        let _ = listener.join_next().await;
        // subscribers' read loops end before the runs are counted out
        readers.wait().await;
        tracker.close();
        if tokio::time::timeout(self.grace, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = tracker.len(),
                "grace period over: cancelling running jobs and releasing them"
            );
            abort_runs.cancel();
            // a run that ignores its token (a handler blocking its thread) is not
            // released: its settler leaves it leased until its lease ends
            let _ = tokio::time::timeout(ABORT_WAIT, tracker.wait()).await;
        }
        drained.cancel();
        for tx in settler_txs {
            let _ = tx.send(Event::Drain);
        }
        crashed = crashed.or(joined("settler", settlers).await);
        crashed = crashed.or(joined("subscriber", subscribers).await);
        // the gauges' last sample, of what the worker left behind
        sampled.cancel();
        let _ = tokio::time::timeout(LEAVE_WAIT, sampler.join_next()).await;
        sampler.abort_all();
        infra.abort_all();
        // a beat under way (one right after a stop control was read, say)
        // ends first: aborted, its command may already be written and run
        // after the leave on another of the connection's lanes, which puts
        // the stopped worker back in the registry until its entry runs out
        let _ = tokio::time::timeout(LEAVE_WAIT, beats.join_next()).await;
        beats.abort_all();
        registry.leave(&self.backend).await;
        match crashed {
            None => {
                let why = controls.reason();
                tracing::info!(reason = %why, "worker stopped");
                Ok(why)
            }
            Some(e) => {
                tracing::error!(error = %e, "worker stopped after a crash");
                Err(e)
            }
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
            let r = tokio::select! {
                r = self.backend.check_layout() => r,
                _ = self.shutdown.cancelled() => return Ok(false),
            };
            match r {
                Ok(_) => return Ok(true),
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

/// How long the listener gets at shutdown to stop taking hand-offs and hand
/// over the jobs handed before (a healthy Redis takes well under a
/// millisecond).
const LISTENER_STOP_WAIT: Duration = Duration::from_millis(1500);

/// How long runs cancelled after the grace period get to stop.
const ABORT_WAIT: Duration = Duration::from_secs(5);

/// How long a stopping worker waits for its registry's beat under way before
/// it leaves the registry.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// Every third of the lease, has the batch finishes counted that a dead
/// worker left with their queues (see `Backend::batch_sweep`).
async fn sweep_batches<B: Backend>(backend: B, lease: Duration, stop: CancellationToken) {
    let every = lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        if let Err(e) = backend.batch_sweep().await {
            tracing::warn!(error = %e, "sweeping batch finishes failed");
        }
    }
}

/// Waits for every task of `set`; a task that panicked is reported as an error.
async fn joined(what: &'static str, mut set: JoinSet<()>) -> Option<crate::Error> {
    let mut first = None;
    while let Some(r) = set.join_next().await {
        if r.is_err() {
            first.get_or_insert(crash(what, r));
        }
    }
    first
}

/// A worker task that ended before the worker's run saw the shutdown: `None`
/// when it ended by itself and the worker's `stop` (a child of the shutdown
/// token) is cancelled now (it ended because of it), else the crash.
fn ended(
    what: &'static str,
    r: Result<(), tokio::task::JoinError>,
    stop: &CancellationToken,
) -> Option<crate::Error> {
    if r.is_ok() && stop.is_cancelled() {
        return None;
    }
    Some(crash(what, r))
}

/// The error for a worker task that ended when it should not have.
fn crash(what: &'static str, r: Result<(), tokio::task::JoinError>) -> crate::Error {
    let reason = match r {
        Ok(()) => "ended before shutdown".to_string(),
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into())
        }
        Err(e) => e.to_string(),
    };
    tracing::error!(task = what, %reason, "a worker task crashed; shutting down");
    crate::Error::Crashed { task: what, reason }
}

/// Marks the worker stopped for [`Ready`] waiters when dropped.
struct StopsReadiness(Arc<Shared>);

impl Drop for StopsReadiness {
    fn drop(&mut self) {
        self.0.readiness.stopped();
    }
}

async fn on_signal(shutdown: CancellationToken, controls: Arc<control::Controls>) {
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    let name = tokio::select! {
        _ = tokio::signal::ctrl_c() => "ctrl-c",
        _ = term => "SIGTERM",
        _ = shutdown.cancelled() => return,
    };
    tracing::info!("{name} received");
    controls.stopping(control::Stopped::Signal { name });
    shutdown.cancel();
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

#[cfg(test)]
mod tests {
    use super::ended;
    use tokio_util::sync::CancellationToken;

    /// A task that ended by itself is a crash until the worker's stop came,
    /// and no crash once it came (the worker's run may look at the task only
    /// after looking at the shutdown, which came between on another thread);
    /// a task that panicked is a crash either way.
    #[tokio::test]
    async fn a_task_that_ended_with_the_shutdown_is_no_crash() {
        let stop = CancellationToken::new();
        let crashed = |e: Option<crate::Error>| match e {
            Some(crate::Error::Crashed { task, reason }) => Some((task, reason)),
            other => panic!("{other:?}"),
        };
        let r = tokio::spawn(async {}).await;
        let (task, reason) = crashed(ended("dispatcher", r, &stop)).unwrap();
        assert_eq!(
            (task, reason.as_str()),
            ("dispatcher", "ended before shutdown")
        );
        stop.cancel();
        let r = tokio::spawn(async {}).await;
        assert!(ended("dispatcher", r, &stop).is_none());
        let r = tokio::spawn(async { panic!("boom") }).await;
        let (task, reason) = crashed(ended("settler", r, &stop)).unwrap();
        assert_eq!((task, reason.as_str()), ("settler", "boom"));
    }
}
