//! Settings of a client and of one enqueue.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::redis::connection::RedisConfig;
use crate::contract::queues::{Keyed, OnDuplicate, QueueOptions, Unique, UniqueUntil, When};
use crate::job::Job;
use crate::{Error, Result};

/// Settings of a [`Client`](super::Client).
///
/// ```
/// use redjob::client::ClientConfig;
///
/// let cfg = ClientConfig { namespace: "myapp".into(), ..ClientConfig::from_url("redis://127.0.0.1:6379") };
/// assert!(!cfg.realtime);
/// ```
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Where Redis is.
    pub redis: RedisConfig,
    /// Key prefix, RSMQ's `ns`. Defaults to `rsmq`, RSMQ's own default, so RSMQ
    /// clients see the queues without configuration. 1 to 200 bytes, without
    /// whitespace, control characters or braces (connecting refuses others).
    /// Namespaces on one Redis must not be one another followed by `:`
    /// (`app` beside `app:eu`): their keys can meet (`app:eu:dead` is both
    /// `app`'s queue `eu`'s dead letters and `app:eu`'s queue `dead`).
    pub namespace: String,
    /// PUBLISH the queue's length on RSMQ's realtime channel after every enqueue,
    /// as RSMQ's `realtime` option, for RSMQ realtime subscribers. Defaults to
    /// `false`: redjob's idle workers are woken at once either way (an enqueue
    /// publishes when a worker has marked the queue as waited on), at no cost per
    /// enqueue while the workers are busy.
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
            realtime: false,
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
    /// Priority instead of the job's own (see [`MAX_PRIORITY`](crate::queue::MAX_PRIORITY)).
    /// Defaults to the job's `priority` attribute.
    pub priority: Option<i8>,
    /// Unique by this key instead of the one derived from the job's arguments
    /// (see [`Unique`]). Defaults to `None`: unique only when the job's type is
    /// (`#[job(unique)]`), by the derived key ([`job::unique_key`](crate::job::unique_key)).
    pub unique_key: Option<String>,
    /// What a duplicate enqueue does instead of the job type's `unique` policy;
    /// setting it makes the enqueue unique. Defaults to the type's policy.
    pub on_duplicate: Option<OnDuplicate>,
    /// The longest the unique key is held, instead of the type's `unique_for`;
    /// setting it makes the enqueue unique. Defaults to the type's.
    pub unique_for: Option<Duration>,
    /// How long the unique key is held, instead of the type's `unique_until`:
    /// until the job is done, or until its run starts (see [`UniqueUntil`]);
    /// setting it makes the enqueue unique. Defaults to the type's
    /// ([`UniqueUntil::Done`] unless `#[job(unique_until = "start")]`).
    pub unique_until: Option<UniqueUntil>,
    /// Runs at most [`per_key`](Self::per_key) at a time with the jobs of this
    /// concurrency key (see [`Keyed`](crate::queue::Keyed)), instead of the key
    /// the job type derives from its `concurrency_key` field. Defaults to the
    /// type's (none unless `#[job(concurrency_key = "...")]`).
    pub concurrency_key: Option<String>,
    /// How many jobs of the concurrency key may run at once, instead of the
    /// type's `per_key`. Defaults to the type's (1 unless set).
    pub per_key: Option<u32>,
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

    /// Runs before due jobs of lower priority, from -10 to 10 (higher first).
    /// Defaults to the job's `priority` attribute (0 unless set).
    pub fn priority(mut self, priority: i8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Makes the job unique by `key` (1 to 512 bytes) while queued: a second
    /// enqueue with the key follows the [`on_duplicate`](Self::on_duplicate)
    /// policy. Defaults to the type's derived key when the type is unique.
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// What a duplicate enqueue does, and makes this enqueue unique. Defaults to
    /// the type's `unique` policy ([`OnDuplicate::Keep`] when only a key is given).
    pub fn on_duplicate(mut self, policy: OnDuplicate) -> Self {
        self.on_duplicate = Some(policy);
        self
    }

    /// Holds the unique key at most `ttl`, and makes this enqueue unique.
    /// Defaults to the type's `unique_for` (none: until the job leaves its queue).
    pub fn unique_for(mut self, ttl: Duration) -> Self {
        self.unique_for = Some(ttl);
        self
    }

    /// Holds the unique key until the job is done, or only until its run
    /// starts ([`UniqueUntil::Start`]: an enqueue of the key from the job's own
    /// handler, or while it runs or waits for a retry, makes a new job), and
    /// makes this enqueue unique. Defaults to the type's `unique_until`
    /// ([`UniqueUntil::Done`] unless set).
    ///
    /// ```
    /// use redjob::client::EnqueueOptions;
    /// use redjob::queue::UniqueUntil;
    ///
    /// let opts = EnqueueOptions::new().unique_key("refresh:7").unique_until(UniqueUntil::Start);
    /// assert_eq!(opts.unique_until, Some(UniqueUntil::Start));
    /// ```
    pub fn unique_until(mut self, until: UniqueUntil) -> Self {
        self.unique_until = Some(until);
        self
    }

    /// Runs at most [`per_key`](Self::per_key) at a time with the jobs of
    /// `key` (1 to 256 bytes), across the fleet. Defaults to the key the job's
    /// type derives (none unless `#[job(concurrency_key = "...")]`).
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }

    /// How many jobs of the concurrency key may run at once (1 to 1000).
    /// Defaults to the type's `per_key` (1 unless set).
    pub fn per_key(mut self, n: u32) -> Self {
        self.per_key = Some(n);
        self
    }

    /// The concurrency key `job` is enqueued with, if any. A
    /// [`per_key`](Self::per_key) for a job without a key is refused: no
    /// limit would hold.
    pub(crate) fn keyed_of<J: Job>(&self, job: &J) -> Result<Option<Keyed>> {
        let key = match &self.concurrency_key {
            Some(key) => key.clone(),
            None => match job.concurrency_key()? {
                Some(key) => key,
                None if self.per_key.is_some() => {
                    return Err(Error::InvalidValue {
                        what: "per_key",
                        reason: format!(
                            "job type {:?} has no concurrency key for it to limit: give one \
                             with `concurrency_key`, or derive it with \
                             `#[job(concurrency_key = \"...\")]`",
                            J::NAME
                        ),
                    });
                }
                None => return Ok(None),
            },
        };
        Ok(Some(Keyed {
            key,
            per_key: self.per_key.unwrap_or(J::OPTIONS.per_key),
        }))
    }

    /// The uniqueness `job` is enqueued with, if any.
    pub(crate) fn unique_of<J: Job>(&self, job: &J) -> Result<Option<Unique>> {
        let policy = self.on_duplicate.or(J::OPTIONS.unique);
        let ttl = self.unique_for.or(J::OPTIONS.unique_for);
        let key = match &self.unique_key {
            Some(key) => key.clone(),
            None if policy.is_some() || ttl.is_some() || self.unique_until.is_some() => {
                crate::job::unique_key(job)?
            }
            None => return Ok(None),
        };
        Ok(Some(Unique {
            key,
            on_duplicate: policy.unwrap_or_default(),
            ttl,
        }))
    }

    /// Whether a unique enqueue of `J` holds its key only until the job's run
    /// starts: this enqueue's choice, else the type's.
    pub(crate) fn until_start<J: Job>(&self) -> bool {
        self.unique_until.unwrap_or(J::OPTIONS.unique_until) == UniqueUntil::Start
    }

    /// Runs at `at` (millisecond precision: a time within a millisecond is
    /// rounded up to its end, so the job never starts before `at`; a past
    /// time means now). Defaults to the queue's delay.
    pub fn at(mut self, at: SystemTime) -> Self {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        let ms = since.as_millis() + u128::from(!since.subsec_nanos().is_multiple_of(1_000_000));
        let ms = u64::try_from(ms).unwrap_or(u64::MAX);
        self.when = When::AtUnixMs(ms);
        self
    }
}
