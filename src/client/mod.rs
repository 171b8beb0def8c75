//! Enqueueing jobs.

use std::time::{Duration, SystemTime};

use crate::backend::any::AnyBackend;
use crate::backend::memory::MemoryBackend;
use crate::backend::redis::RedisBackend;
use crate::contract::backend::Backend;
use crate::contract::queues::{QueueOptions, SendMessage, Sent, When, validate};
use crate::contract::stats::{DeadLetter, MinuteStats, QueueStats};
use crate::job::data::Data;
use crate::job::{self, Job};
use crate::{Error, JobId, Result};

mod batch;
mod flow;
mod inline;
mod inspect;
mod options;
mod topics;

pub use batch::BatchBuilder;
pub use flow::Flow;
pub use options::{ClientConfig, EnqueueOptions};

/// Enqueues typed jobs, on Redis or in memory. Cheap to clone; clones share its
/// connections.
///
/// ```no_run
/// use std::time::Duration;
/// use redjob::{Client, Job, JobContext, JobError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "welcome_email", queue = "emails")]
/// struct Welcome { user: u64 }
///
/// impl Job for Welcome {
///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// }
///
/// # async fn _demo() -> redjob::Result<()> {
/// let client = Client::connect("redis://127.0.0.1:6379").await?;
/// let id = client.enqueue(&Welcome { user: 7 }).await?;
/// println!("enqueued {id}");
/// client.enqueue_in(&Welcome { user: 8 }, Duration::from_secs(60)).await?;
/// let ids = client.enqueue_batch(&[Welcome { user: 9 }, Welcome { user: 10 }]).await?;
/// assert_eq!(ids.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    backend: AnyBackend,
    queue_defaults: QueueOptions,
    /// Inline mode (tests): enqueue runs the job at once with these shared values.
    inline: Option<Data>,
}

impl Client {
    /// Connects to Redis with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::from_config(ClientConfig::from_url(url)).await
    }

    /// Connects to Redis with these settings.
    pub async fn from_config(config: ClientConfig) -> Result<Self> {
        let backend =
            RedisBackend::connect(&config.redis, &config.namespace, config.realtime).await?;
        Ok(Client {
            backend: backend.into(),
            queue_defaults: config.queue_defaults,
            inline: None,
        })
    }

    /// A client that connects on first use, for a worker that may start before
    /// Redis: it never fails for an unreachable Redis (only for a bad URL); its
    /// worker logs each failed attempt and retries with backoff until Redis
    /// answers. Must be called within a tokio runtime.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// use redjob::client::ClientConfig;
    /// // nothing listens on port 1: this still succeeds
    /// let client = redjob::Client::from_config_lazy(ClientConfig::from_url("redis://127.0.0.1:1"))?;
    /// # let _ = client;
    /// # Ok(()) }
    /// ```
    pub fn from_config_lazy(config: ClientConfig) -> Result<Self> {
        let backend =
            RedisBackend::connect_lazy(&config.redis, &config.namespace, config.realtime)?;
        Ok(Client {
            backend: backend.into(),
            queue_defaults: config.queue_defaults,
            inline: None,
        })
    }

    /// A client on an in-memory backend: for tests and single-process apps (see
    /// [`MemoryBackend`]).
    pub fn memory(backend: MemoryBackend) -> Self {
        Client {
            backend: backend.into(),
            queue_defaults: QueueOptions::default(),
            inline: None,
        }
    }

    /// Inline mode: each enqueue runs its job at once, in the caller, once
    /// (within its timeout), and returns its failure as [`Error::JobFailed`];
    /// nothing is stored. For tests (see
    /// [`TestKit::inline_client`](crate::testing::TestKit::inline_client)).
    pub(crate) fn inline(mut self, data: Data) -> Self {
        self.inline = Some(data);
        self
    }

    /// This client, recording its actions in the queues' history as `by`:
    /// the source and the actor's name (`cli alice`, `dashboard`; `api`
    /// unless set). Cancels, deletes, purges, dead-letter requeues and
    /// deletes, runs now, retries, pauses, resumes and settings changes name
    /// it ([`Inspect::history_events`](crate::inspect::Inspect::history_events),
    /// [`Finished::by`](crate::inspect::Finished::by)).
    ///
    /// ```
    /// use redjob::Client;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::inspect::Inspect;
    ///
    /// let ops = Client::memory(MemoryBackend::new()).acting_as("cron nightly-cleanup");
    /// assert_eq!(ops.actor(), "cron nightly-cleanup");
    /// ```
    pub fn acting_as(mut self, by: &str) -> Self {
        self.backend = self.backend.acting_as(by);
        self
    }

    /// The backend: pass it to [`Worker::builder`](crate::Worker::builder).
    pub fn backend(&self) -> AnyBackend {
        self.backend.clone()
    }

    /// The queue operations (RSMQ's API) on the same backend.
    pub fn queues(&self) -> &AnyBackend {
        &self.backend
    }

    /// A queue's counters (processed, failed, retried, dead).
    pub async fn stats(&self, queue: &str) -> Result<QueueStats> {
        self.backend.stats(queue).await
    }

    /// Per job type, how long a queue's runs took (see [`Backend::run_times`]).
    ///
    /// ```
    /// # async fn run() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// for t in client.run_times("emails").await? {
    ///     println!("{}: {} runs, p99 {:?}", t.job_type, t.count(), t.quantile(0.99));
    /// }
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn run_times(&self, queue: &str) -> Result<Vec<crate::backend::RunTimes>> {
        self.backend.run_times(queue).await
    }

    /// A queue's processed and failed runs in each minute of the last hour,
    /// oldest first (see [`Backend::minutes`]).
    ///
    /// ```
    /// # async fn run() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// let hour = client.minutes("emails").await?;
    /// assert_eq!(hour.len(), redjob::backend::MINUTES);
    /// let processed: u64 = hour.iter().map(|m| m.processed).sum();
    /// # let _ = processed;
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn minutes(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        self.backend.minutes(queue).await
    }

    /// A queue's processed and failed runs in each hour of the last 7 days,
    /// oldest first (see [`Backend::hours`]).
    ///
    /// ```
    /// # async fn run() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// let week = client.hours("emails").await?;
    /// assert_eq!(week.len(), redjob::backend::HOURS);
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(run()).unwrap();
    /// ```
    pub async fn hours(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        self.backend.hours(queue).await
    }

    /// The oldest `limit` dead letters of a queue, at most
    /// [`MAX_PAGE`](crate::inspect::MAX_PAGE) (one call reads no more; page
    /// through [`Admin::dead_page`](crate::ops::Admin::dead_page) for
    /// the rest).
    pub async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        self.backend.dead_letters(queue, limit).await
    }

    /// Takes every due job of `J`'s queue, up to `limit`, off the queue in one
    /// atomic call (highest priority first, oldest first within one) and returns
    /// them decoded: the consumer side of a delay queue, without a worker. The
    /// jobs are deleted from the queue at once, so nothing retries them: what you
    /// do with them is up to you. Two callers never get the same job.
    ///
    /// A body that is not a `J` (another job type or a foreign message in the
    /// same queue) comes back with its error in [`Popped::job`] and its bytes in
    /// [`Popped::body`], so it is not lost.
    ///
    /// ```
    /// # use redjob::{Client, Job, JobContext, JobError};
    /// # use redjob::backend::memory::MemoryBackend;
    /// # use std::time::Duration;
    /// #[derive(serde::Serialize, serde::Deserialize, Job, Debug, PartialEq)]
    /// #[job(name = "doc_reminder", queue = "reminders")]
    /// struct Reminder { user: u64 }
    /// # impl Job for Reminder {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let backend = MemoryBackend::new();
    /// let client = Client::memory(backend.clone());
    /// client.enqueue(&Reminder { user: 1 }).await?;
    /// client.enqueue_in(&Reminder { user: 2 }, Duration::from_secs(60)).await?;
    /// let due = client.pop_due::<Reminder>(100).await?;
    /// assert_eq!(due.len(), 1);
    /// assert_eq!(due[0].job.as_ref().unwrap(), &Reminder { user: 1 });
    /// backend.clock().advance(Duration::from_secs(60));
    /// assert_eq!(client.pop_due::<Reminder>(100).await?.len(), 1);
    /// # Ok(()) }
    /// ```
    pub async fn pop_due<J: Job>(&self, limit: usize) -> Result<Vec<Popped<J>>> {
        Ok(
            crate::contract::queues::Queues::pop_due(&self.backend, J::OPTIONS.queue, limit)
                .await?
                .into_iter()
                .map(|m| {
                    let body = m.body.into_bytes();
                    Popped {
                        id: m.id,
                        job: job::decode_as::<J>(&body),
                        body,
                    }
                })
                .collect(),
        )
    }

    /// Enqueues a job to run now (after its queue's delay).
    pub async fn enqueue<J: Job>(&self, job: &J) -> Result<JobId> {
        self.enqueue_with(job, EnqueueOptions::new()).await
    }

    /// Enqueues a job to run after `delay` (backend time, millisecond precision).
    ///
    /// `enqueue_in` and [`enqueue_at`](Self::enqueue_at) share one rule: a job may
    /// be due up to [`MAX_AHEAD`](crate::queue::MAX_AHEAD) (50 years) ahead;
    /// further is refused with [`Error::InvalidValue`]. (RSMQ's 9,999,999 s limit
    /// is for a queue's `delay` and `vt` attributes, not a job's due time.)
    ///
    /// ```
    /// # use std::time::{Duration, SystemTime};
    /// # use redjob::{Client, Job, JobContext, JobError};
    /// # use redjob::backend::memory::MemoryBackend;
    /// # #[derive(serde::Serialize, serde::Deserialize, Job)]
    /// # struct Renewal;
    /// # impl Job for Renewal {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let client = Client::memory(MemoryBackend::new());
    /// let year = Duration::from_secs(365 * 86_400);
    /// client.enqueue_in(&Renewal, year).await?;
    /// client.enqueue_at(&Renewal, SystemTime::now() + year).await?;
    /// assert!(client.enqueue_in(&Renewal, 101 * year).await.is_err());
    /// assert!(client.enqueue_at(&Renewal, SystemTime::now() + 101 * year).await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_in<J: Job>(&self, job: &J, delay: Duration) -> Result<JobId> {
        self.enqueue_with(job, EnqueueOptions::new().delay(delay))
            .await
    }

    /// Enqueues a job to run at `at`.
    pub async fn enqueue_at<J: Job>(&self, job: &J, at: SystemTime) -> Result<JobId> {
        self.enqueue_with(job, EnqueueOptions::new().at(at)).await
    }

    /// Enqueues a job with per-call options.
    pub async fn enqueue_with<J: Job>(&self, job: &J, opts: EnqueueOptions) -> Result<JobId> {
        let ids = self
            .enqueue_batch_with(std::slice::from_ref(job), opts)
            .await?;
        ids.into_iter()
            .next()
            .ok_or_else(|| Error::Protocol("enqueue returned no id".into()))
    }

    /// Enqueues jobs in one round trip (one script call per 1000 jobs or 4 MiB,
    /// pipelined; over 16 such calls, one round trip per 16 calls, one after
    /// another, each within the response timeout). Each such
    /// chunk is all or nothing (a missing queue, an oversized body or Redis out
    /// of memory writes none of it), so a batch of up to 1000 jobs and 4 MiB
    /// is; a larger batch refused part way (by an out-of-memory Redis, or a
    /// round trip after the first that timed out) fails with
    /// [`Error::PartlySent`], which holds the ids of the jobs stored (they run:
    /// send only the others again). Returns their ids in order.
    pub async fn enqueue_batch<J: Job>(&self, jobs: &[J]) -> Result<Vec<JobId>> {
        self.enqueue_batch_with(jobs, EnqueueOptions::new()).await
    }

    /// Enqueues jobs with the same options, in one round trip. A queue is created
    /// with the client's `queue_defaults` on first use. A unique job whose key is
    /// held returns the queued job's id.
    pub async fn enqueue_batch_with<J: Job>(
        &self,
        jobs: &[J],
        opts: EnqueueOptions,
    ) -> Result<Vec<JobId>> {
        let sent = self.enqueue_batch_outcomes(jobs, opts).await?;
        Ok(sent.into_iter().map(|s| s.id).collect())
    }

    /// Enqueues a job with per-call options; tells what the enqueue did: added
    /// the job, or found its [unique key](EnqueueOptions::unique_key) held and
    /// kept, moved or replaced the queued job.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::client::EnqueueOptions;
    /// use redjob::queue::SendOutcome;
    /// use redjob::testing::TestKit;
    /// # use redjob::{Job, JobContext, JobError};
    /// # use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "recount_votes", unique = "replace_delay")]
    /// struct Recount { poll: u64 }
    /// # impl Job for Recount {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// let client = kit.client();
    /// let later = EnqueueOptions::new().delay(Duration::from_secs(60));
    /// let first = client.enqueue_outcome(&Recount { poll: 1 }, later.clone()).await?;
    /// let again = client.enqueue_outcome(&Recount { poll: 1 }, later).await?;
    /// assert_eq!((first.outcome, again.outcome), (SendOutcome::Added, SendOutcome::Moved));
    /// assert_eq!(first.id, again.id);
    /// # Ok(()) }
    /// ```
    pub async fn enqueue_outcome<J: Job>(&self, job: &J, opts: EnqueueOptions) -> Result<Sent> {
        let sent = self
            .enqueue_batch_outcomes(std::slice::from_ref(job), opts)
            .await?;
        sent.into_iter()
            .next()
            .ok_or_else(|| Error::Protocol("enqueue returned no id".into()))
    }

    /// [`enqueue_batch_with`](Self::enqueue_batch_with), telling for each job what
    /// the enqueue did (see [`enqueue_outcome`](Self::enqueue_outcome)). Jobs of
    /// one batch with the same unique key meet each other as duplicates, in order.
    pub async fn enqueue_batch_outcomes<J: Job>(
        &self,
        jobs: &[J],
        opts: EnqueueOptions,
    ) -> Result<Vec<Sent>> {
        let queue = opts.queue.as_deref().unwrap_or(J::OPTIONS.queue);
        validate::queue_name(queue)?;
        let priority = opts.priority.unwrap_or(J::OPTIONS.priority);
        validate::priority(priority)?;
        let msgs = jobs
            .iter()
            .map(|j| {
                let unique = opts.unique_of(j)?;
                let mut body = job::encode(j)?;
                // held until its run starts: said in the envelope, which the
                // worker reads as the run starts
                if unique.is_some() && opts.until_start::<J>() {
                    body = crate::contract::envelope::with_unique_until_start(&body);
                }
                Ok(SendMessage {
                    body,
                    when: opts.when,
                    priority,
                    unique,
                    keyed: opts.keyed_of(j)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // each in the order a send checks it (priority, concurrency key, due
        // time, unique key), then the due time against this clock
        for m in &msgs {
            crate::contract::queues::check_send(m)?;
        }
        if let When::AtUnixMs(at) = opts.when {
            validate::due_at(at, self.backend.local_now_ms())?;
        }
        if let Some(data) = &self.inline {
            let ids = inline::run(jobs, queue, data, &self.backend).await?;
            return Ok(ids.into_iter().map(Sent::added).collect());
        }
        self.backend.send(queue, &msgs, &self.queue_defaults).await
    }
}

/// A job taken off its queue by [`Client::pop_due`]. It is no longer stored.
#[derive(Debug)]
#[non_exhaustive]
pub struct Popped<J> {
    /// Its id.
    pub id: JobId,
    /// The job, or why its body is not a `J`.
    pub job: Result<J>,
    /// The body as it was stored (bytes that are not UTF-8 replaced with U+FFFD:
    /// RSMQ bodies are text).
    pub body: Vec<u8>,
}
