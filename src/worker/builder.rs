//! Configuring a worker.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::RetryPolicy;
use super::subscriber::Starter;
use crate::contract::backend::Backend;
use crate::contract::leases::Retention;
use crate::contract::settings::{Concurrency, QueueSettings};
use crate::contract::topics::Topics;
use crate::job::Job;
use crate::job::JobError;
use crate::job::data::Data;
use crate::topic::subscription::{Handler, Spec, Subscription, Typed};
use crate::topic::{Event, EventContext};

/// The default prefetch per running slot (see [`WorkerBuilder::prefetch`]).
const DEFAULT_PREFETCH_PER_SLOT: usize = 7;

mod build;
mod keeping;
mod limits;

/// Configures a [`Worker`](super::Worker); every setter says its default. Invalid values are
/// rejected by [`build`](WorkerBuilder::build).
///
/// ```no_run
/// use std::time::Duration;
/// use redjob::{Client, RetryPolicy, Worker};
///
/// # async fn _demo() -> redjob::Result<()> {
/// let client = Client::connect("redis://127.0.0.1:6379").await?;
/// let _worker = Worker::builder(client.backend())
///     .queues(["emails", "images"])
///     .queue_concurrency("images", 2)
///     .concurrency(16)
///     .lease(Duration::from_secs(60))
///     .grace_period(Duration::from_secs(10))
///     .retry(RetryPolicy::exponential(Duration::from_secs(600))?)
///     .build()?;
/// # Ok(()) }
/// ```
#[must_use]
pub struct WorkerBuilder<B = crate::backend::any::AnyBackend> {
    backend: B,
    /// Each queue served, with the builder's values for its own settings
    /// (concurrency, rate limit).
    queues: Vec<(String, QueueSettings)>,
    concurrency: usize,
    prefetch: Option<usize>,
    lease: Duration,
    grace: Duration,
    poll_interval: Duration,
    job_timeout: Option<Duration>,
    retry: RetryPolicy,
    data: Data,
    signals: bool,
    shutdown: Option<CancellationToken>,
    unknown_jobs_retry_for: Duration,
    max_throttle: Duration,
    throttle_limit: u32,
    retention: Option<Retention>,
    history: Option<crate::contract::history::History>,
    periodic: Vec<super::Periodic>,
    hooks: Vec<Arc<dyn super::Hooks>>,
    metrics: bool,
    metrics_interval: Option<Duration>,
    subscriptions: Vec<Spec>,
    starter: Option<Starter<B>>,
    /// A handler registered twice for one event type and subscriber.
    twice: Option<String>,
    sink: super::Sink,
}

impl<B: Backend> WorkerBuilder<B> {
    pub(crate) fn new(backend: B) -> Self {
        WorkerBuilder {
            backend,
            queues: Vec::new(),
            concurrency: 32,
            prefetch: None,
            lease: Duration::from_secs(30),
            grace: Duration::from_secs(25),
            poll_interval: Duration::from_secs(60),
            job_timeout: None,
            retry: RetryPolicy::default(),
            data: Data::default(),
            signals: true,
            shutdown: None,
            unknown_jobs_retry_for: Duration::from_secs(3600),
            max_throttle: Duration::from_secs(300),
            throttle_limit: crate::contract::leases::DEFAULT_THROTTLES,
            retention: None,
            history: None,
            periodic: Vec::new(),
            hooks: Vec::new(),
            metrics: true,
            metrics_interval: None,
            subscriptions: Vec::new(),
            starter: None,
            twice: None,
            sink: super::Sink::default(),
        }
    }

    /// Sends the worker's metrics to `sink` (the test kit's own recorder)
    /// rather than the global one.
    pub(crate) fn sink(mut self, sink: super::Sink) -> Self {
        self.sink = sink;
        self
    }

    /// Handles events of type `E` as the subscriber `subscription` (a name, or a
    /// [`Subscription`] with settings) of `E`'s topic. Register several event
    /// types of one topic under one subscriber to handle them all in it; events
    /// of types it has no handler for are skipped (acknowledged). A worker
    /// given subscribers and no queues serves no queues.
    ///
    /// The handler gets the decoded event and its [`EventContext`]; `Err`
    /// retries it like a job's (see [`JobError`]). It runs on the worker's pool,
    /// with its timeout, shutdown and backoff. See the [`topic`](crate::topic)
    /// module for an example.
    pub fn subscribe<E, F, Fut>(mut self, subscription: impl Into<Subscription>, handler: F) -> Self
    where
        B: Topics,
        E: Event,
        F: Fn(E, EventContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), JobError>> + Send + 'static,
    {
        let sub = subscription.into();
        self.starter = Some(super::subscriber::starter::<B>);
        let h: Arc<dyn Handler> = Arc::new(Typed(handler, PhantomData::<fn() -> E>));
        let topic = E::OPTIONS.topic;
        match self
            .subscriptions
            .iter_mut()
            .find(|s| s.topic == topic && s.sub.name == sub.name)
        {
            Some(s) => {
                if s.handlers.insert(E::NAME, h).is_some() {
                    self.twice = Some(format!(
                        "event {:?} has two handlers in subscriber {:?} of topic {topic:?}",
                        E::NAME,
                        sub.name
                    ));
                }
            }
            None => self.subscriptions.push(Spec {
                topic: topic.to_string(),
                sub,
                handlers: [(E::NAME, h)].into_iter().collect(),
            }),
        }
        self
    }

    /// Serves `queue`: every job on it runs, whatever its type, as long as the
    /// type is linked into the program.
    ///
    /// When no queue is named (by `queue`, [`queues`](Self::queues),
    /// [`register`](Self::register) or [`queue_concurrency`](Self::queue_concurrency)),
    /// the worker serves the queue of every job type linked into the program
    /// (every `#[derive(Job)]` type), or `default` when there is none.
    ///
    /// ```
    /// use redjob::Worker;
    /// use redjob::backend::memory::MemoryBackend;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("emails")
    ///     .queue("urgent") // e.g. for jobs enqueued with `EnqueueOptions::queue("urgent")`
    ///     .build()?;
    /// assert_eq!(worker.queues().collect::<Vec<_>>(), ["emails", "urgent"]);
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        let q = queue.into();
        if !self.queues.iter().any(|(n, _)| *n == q) {
            self.queues.push((q, QueueSettings::default()));
        }
        self
    }

    /// Serves each of `queues` (see [`queue`](Self::queue)).
    pub fn queues<I: IntoIterator<Item = S>, S: Into<String>>(self, queues: I) -> Self {
        queues.into_iter().fold(self, |b, q| b.queue(q))
    }

    /// Serves `J`'s queue (its `#[job(queue = ...)]`, `default` if unset): the
    /// same as `.queue(J::OPTIONS.queue)`.
    ///
    /// It is not a registration of the type: every job type linked into the
    /// program is known to every worker, and runs when its job arrives on any
    /// served queue. `register` only names a queue to serve. A job enqueued to
    /// another queue (with [`EnqueueOptions::queue`](crate::client::EnqueueOptions::queue))
    /// runs only where that queue is served.
    ///
    /// ```
    /// use redjob::{Job, JobContext, JobError, Worker};
    /// use redjob::backend::memory::MemoryBackend;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(queue = "emails")]
    /// struct SendEmail { to: String }
    /// impl Job for SendEmail {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// let worker = Worker::builder(MemoryBackend::new()).register::<SendEmail>().build()?;
    /// assert_eq!(worker.queues().collect::<Vec<_>>(), ["emails"]);
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn register<J: Job>(self) -> Self {
        self.queue(J::OPTIONS.queue)
    }

    /// At most `limit` jobs of `queue` at once in each worker (within its
    /// global concurrency); serves the queue too. Defaults to no per-queue
    /// limit.
    ///
    /// The limit is a setting of the queue's, stored with it where none is
    /// ([`Concurrency`](crate::ops::Concurrency)): the first value stored is
    /// in force for every worker of the queue, also those that set none, and
    /// an operator's change goes over it (followed by every worker at once). A worker whose backend stores no settings keeps its own.
    pub fn queue_concurrency(mut self, queue: impl Into<String>, limit: usize) -> Self {
        let q = queue.into();
        self = self.queue(q.clone());
        self.queue_values(q, |s| {
            let c = s.concurrency.unwrap_or_default();
            let n = u32::try_from(limit).unwrap_or(u32::MAX);
            s.concurrency = Some(Concurrency {
                per_worker: Some(n),
                ..c
            });
        })
    }

    /// Jobs running at once, over all queues. Defaults to 32; 1 to
    /// [`MAX_CONCURRENCY`](crate::ops::MAX_CONCURRENCY) (1,000,000), else
    /// [`build`](Self::build) fails with
    /// [`Error::InvalidValue`](crate::Error::InvalidValue).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// Jobs leased ahead of a free slot, so that the next job starts the moment a
    /// slot frees instead of after a fetch's round trip, and fetches come in fuller
    /// batches (a fetch's and a settle's fixed cost, in the worker and in Redis,
    /// is then paid once for many jobs). Prefetched jobs are leased (their lease
    /// renewed) and wait in this worker; on shutdown they are released at once,
    /// unstarted. Only queues whose jobs have run under 50 ms on average are
    /// prefetched, so a long job never waits here while another worker is idle;
    /// and no more than the handlers run in 10 ms at the queue's average run
    /// time (but at least the concurrency): jobs of 1 ms or less are prefetched
    /// in full, jobs of 10 ms or more up to the concurrency. Defaults to 7 ×
    /// the concurrency (224 for the default 32: a fetch leases up to 256 quick
    /// jobs), at most [`MAX_CONCURRENCY`](crate::ops::MAX_CONCURRENCY)
    /// (1,000,000); a larger value fails [`build`](Self::build) with
    /// [`Error::InvalidValue`](crate::Error::InvalidValue).
    ///
    /// ```
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::Worker;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("thumbnails")
    ///     .concurrency(64)
    ///     .prefetch(0) // never lease more than can start
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = Some(n);
        self
    }

    /// How long a fetched job stays invisible to other workers; renewed every third of
    /// it while the job runs, so a job may run longer. A crashed worker's jobs run
    /// again after it. At least 1 s. Defaults to 30 s. A long job needs no
    /// long lease (it is renewed); a lease of minutes also costs Redis more:
    /// the queue counts its leases by the second they end, and each renewal,
    /// and each fetch of a queue with a global concurrency limit, reads one
    /// field for each such second (about 1 ms at an hour's leases).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// On shutdown, how long running jobs may finish before they are cancelled and
    /// released. Defaults to 25 s.
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How often the worker polls all its queues when no wake-up arrives. Sends
    /// by redjob (and by RSMQ clients with `realtime`) wake an idle worker at once
    /// and delayed jobs start on time without polling; the poll catches sends by
    /// RSMQ clients without `realtime`, retries and lost leases of other workers
    /// (the queues with something due before the next poll fetch). On Redis one
    /// poll is one round trip and one command per queue (a few for a queue with
    /// priorities), so 100 idle queues cost under 2 commands a second. Defaults
    /// to 60 s.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll_interval = every;
        self
    }

    /// Time limit for every job run, instead of each job type's `timeout`.
    /// Defaults to each job's own.
    pub fn job_timeout(mut self, limit: Duration) -> Self {
        self.job_timeout = Some(limit);
        self
    }

    /// How long after it was sent a job whose type this worker does not know is
    /// put back for another worker (waiting a tenth of its age, 1 s to 5 min,
    /// between tries, its delivery not counted) before it is dead-lettered with
    /// the reason. In a rolling deploy an old worker fetches the new types' jobs;
    /// a worker of the new version runs them meanwhile. `Duration::ZERO`
    /// dead-letters them at once; so is a job whose id says it was sent
    /// further ahead than the window (a clock that stepped back). The send's
    /// time is the one the job's id carries: a periodic job's is its tick's,
    /// so a tick enqueued late (a catch-up after a downtime) has that much
    /// less of the window. Defaults to 1 hour.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::Worker;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("emails")
    ///     .unknown_jobs_retry_for(Duration::from_secs(15 * 60))
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn unknown_jobs_retry_for(mut self, window: Duration) -> Self {
        self.unknown_jobs_retry_for = window;
        self
    }

    /// Enqueues `job` at every tick of `schedule`, once per tick however many
    /// worker processes have it (see [`Periodic`](super::Periodic)), named
    /// after its job type: schedule a type twice with
    /// [`periodic_job`](Self::periodic_job) and a name each. Defaults to none.
    ///
    /// ```
    /// use redjob::{Job, JobContext, JobError, Worker};
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::ops::Schedule;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// struct PurgeSessions;
    /// impl Job for PurgeSessions {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .periodic(Schedule::cron("*/5 * * * *")?, PurgeSessions) // every 5 minutes
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn periodic<J: Job>(self, schedule: crate::contract::admin::Schedule, job: J) -> Self {
        self.periodic_job(super::Periodic::new(schedule, job))
    }

    /// Adds a periodic job with its options (name, queue, missed ticks). Two
    /// periodic jobs of one queue may not share a name: [`build`](Self::build)
    /// refuses them.
    pub fn periodic_job(mut self, periodic: super::Periodic) -> Self {
        self.periodic.push(periodic);
        self
    }

    /// Backoff between attempts. Defaults to [`RetryPolicy::default`] (1 h cap, jitter).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// A shared value handlers get with [`JobContext::data`](crate::JobContext::data)
    /// (a database pool, an HTTP client, config). Defaults to none.
    ///
    /// Values are kept by their exact type, one per type (a second value of a
    /// type replaces the first). A value given as `Arc<T>` is found both by
    /// `ctx.data::<T>()` and by `ctx.data::<Arc<T>>()`; one given as `T` only by
    /// `ctx.data::<T>()`. The worker keeps each value behind an `Arc` already,
    /// so `.data(pool)` shares the pool without one. A handler that asks for a
    /// type not given gets an error naming the types given (`no value of type
    /// Cache was given to the worker (it holds: Arc<Pool>, u64)`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::AtomicU64;
    /// use redjob::Worker;
    /// use redjob::backend::memory::MemoryBackend;
    ///
    /// let sent = Arc::new(AtomicU64::new(0)); // the app reads it too
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .data(String::from("jobs@example.com")) // ctx.data::<String>()
    ///     .data(sent.clone()) // ctx.data::<AtomicU64>() or ctx.data::<Arc<AtomicU64>>()
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data = self.data.with(value);
        self
    }

    pub(crate) fn data_map(mut self, data: Data) -> Self {
        self.data = data;
        self
    }

    /// Shuts down when `token` is cancelled. Defaults to a token of the worker's own
    /// ([`Worker::shutdown_token`](super::Worker::shutdown_token)).
    pub fn shutdown(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// Shut down gracefully on ctrl-c and SIGTERM. Defaults to `true`.
    ///
    /// A second ctrl-c or SIGTERM during the shutdown ends the
    /// [grace period](Self::grace_period) at once: the running jobs are
    /// cancelled and released, as when it runs out.
    ///
    /// The worker then installs tokio's signal handling, which stays for the whole
    /// process: ctrl-c no longer ends the process by itself. An app with its own
    /// shutdown passes `false` and cancels the worker's token
    /// ([`shutdown`](Self::shutdown)) itself; see the [getting started chapter](crate::guide::getting_started).
    pub fn handle_signals(mut self, on: bool) -> Self {
        self.signals = on;
        self
    }
}
