//! Enqueueing jobs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::redis::RedisBackend;
use crate::connection::RedisConfig;
use crate::job::{self, Job};
use crate::queue::{QueueOptions, Rsmq, SendMessage, When, validate};
use crate::{Error, JobId, Result};

/// Settings of a [`Client`].
///
/// ```
/// use redjob::client::ClientConfig;
///
/// let cfg = ClientConfig { namespace: "myapp".into(), ..ClientConfig::from_url("redis://127.0.0.1:6379") };
/// assert!(cfg.realtime);
/// ```
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Where Redis is.
    pub redis: RedisConfig,
    /// Key prefix, RSMQ's `ns`. Defaults to `rsmq`, RSMQ's own default, so RSMQ
    /// clients see the queues without configuration.
    pub namespace: String,
    /// PUBLISH on RSMQ's realtime channel after each enqueue, which wakes idle
    /// workers at once. Defaults to `true`.
    pub realtime: bool,
    /// Attributes of a queue created on first use. Defaults to RSMQ's (vt 30 s,
    /// delay 0, maxsize 65536).
    pub queue_defaults: QueueOptions,
}

impl ClientConfig {
    /// The defaults with this Redis URL.
    pub fn from_url(url: impl Into<String>) -> Self {
        ClientConfig {
            redis: RedisConfig::from_url(url),
            namespace: "rsmq".into(),
            realtime: true,
            queue_defaults: QueueOptions::default(),
        }
    }
}

/// Per-call enqueue options.
///
/// ```
/// use std::time::Duration;
/// use redjob::client::EnqueueOptions;
///
/// let opts = EnqueueOptions::new().queue("urgent").delay(Duration::from_secs(5));
/// assert_eq!(opts.queue.as_deref(), Some("urgent"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// Queue instead of the job's own. Defaults to the job's `queue` attribute.
    pub queue: Option<String>,
    /// When the job becomes due. Defaults to the queue's delay (0 unless changed).
    pub when: When,
}

impl EnqueueOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends to this queue. Defaults to the job's queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Runs after `delay`. Defaults to the queue's delay.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.when = When::After(delay);
        self
    }

    /// Runs at `at` (millisecond precision; a past time means now). Defaults to the queue's delay.
    pub fn at(mut self, at: SystemTime) -> Self {
        let ms = at
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        self.when = When::AtUnixMs(ms);
        self
    }
}

/// Enqueues typed jobs. Cheap to clone; clones share one connection.
///
/// ```no_run
/// use std::time::Duration;
/// use redjob::{Client, Job, JobContext, JobError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = "emails")]
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
    rsmq: Rsmq,
    backend: RedisBackend,
    config: ClientConfig,
}

impl Client {
    /// Connects with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::from_config(ClientConfig::from_url(url)).await
    }

    /// Connects with these settings.
    pub async fn from_config(config: ClientConfig) -> Result<Self> {
        let (redis, con) = config.redis.open().await?;
        let rsmq = Rsmq::from_connection(con.clone(), &config.namespace, config.realtime);
        let backend = RedisBackend::new(con, redis, &config.namespace);
        Ok(Client {
            rsmq,
            backend,
            config,
        })
    }

    /// The queue layer on the same connection and namespace.
    pub fn queues(&self) -> &Rsmq {
        &self.rsmq
    }

    /// The worker backend on the same connection and namespace: pass it to
    /// [`Worker::builder`](crate::Worker::builder); it also reads queue stats and
    /// dead letters.
    pub fn backend(&self) -> RedisBackend {
        self.backend.clone()
    }

    /// Enqueues a job to run now (after its queue's delay).
    pub async fn enqueue<J: Job>(&self, job: &J) -> Result<JobId> {
        self.enqueue_with(job, EnqueueOptions::new()).await
    }

    /// Enqueues a job to run after `delay` (Redis time, millisecond precision).
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

    /// Enqueues jobs in one round trip (one script call per 1000 jobs, pipelined),
    /// all or nothing. Returns their ids in order.
    pub async fn enqueue_batch<J: Job>(&self, jobs: &[J]) -> Result<Vec<JobId>> {
        self.enqueue_batch_with(jobs, EnqueueOptions::new()).await
    }

    /// Enqueues jobs with the same options, in one round trip.
    pub async fn enqueue_batch_with<J: Job>(
        &self,
        jobs: &[J],
        opts: EnqueueOptions,
    ) -> Result<Vec<JobId>> {
        let queue = opts.queue.as_deref().unwrap_or(J::OPTIONS.queue);
        validate::queue_name(queue)?;
        let msgs = jobs
            .iter()
            .map(|j| {
                Ok(SendMessage {
                    body: job::encode(j)?,
                    when: opts.when,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        match self.rsmq.send_batch(queue, &msgs).await {
            Err(Error::QueueNotFound { .. }) => {
                match self
                    .rsmq
                    .create_queue(queue, self.config.queue_defaults)
                    .await
                {
                    Ok(()) | Err(Error::QueueExists { .. }) => {}
                    Err(e) => return Err(e),
                }
                tracing::debug!(queue, "created queue on first use");
                self.rsmq.send_batch(queue, &msgs).await
            }
            r => r,
        }
    }
}
