//! The builder's values for the limits of each queue: stored with the queue
//! where none is, and followed as stored from then on (see
//! [`QueueSettings`](crate::ops::QueueSettings)).

use std::time::Duration;

use super::WorkerBuilder;
use super::build::invalid;
use crate::Result;
use crate::contract::backend::Backend;
use crate::contract::settings::{Concurrency, QueueSettings, RateLimit};

impl<B: Backend> WorkerBuilder<B> {
    /// Changes the builder's values for `queue`'s own settings, and serves it.
    pub(super) fn queue_values(
        mut self,
        queue: String,
        change: impl FnOnce(&mut QueueSettings),
    ) -> Self {
        self = self.queue(queue.clone());
        if let Some(entry) = self.queues.iter_mut().find(|(n, _)| *n == queue) {
            change(&mut entry.1);
        }
        self
    }

    /// At most `limit` jobs of `queue` running at once across every worker
    /// (each job's place held by its lease); serves the queue too. Defaults
    /// to no limit across the fleet.
    ///
    /// Stored with the queue where none is ([`Concurrency::global`]), as
    /// [`queue_concurrency`](Self::queue_concurrency) is: the stored value
    /// is in force for every worker, and an operator changes it on the live
    /// fleet. A job leased ahead of a free slot holds a place too, so a
    /// queue limited so is never prefetched.
    ///
    /// ```
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::Worker;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue_global_concurrency("mail-api", 10)
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn queue_global_concurrency(self, queue: impl Into<String>, limit: u32) -> Self {
        self.queue_values(queue.into(), |s| {
            let c = s.concurrency.unwrap_or_default();
            s.concurrency = Some(Concurrency {
                global: Some(limit),
                ..c
            });
        })
    }

    /// At most `limit.max` jobs of `queue` starting in any window of
    /// `limit.period`, across every worker; serves the queue too. Defaults to
    /// no rate limit.
    ///
    /// Stored with the queue where none is ([`RateLimit`]) and followed as
    /// stored, as [`queue_concurrency`](Self::queue_concurrency) is. A
    /// worker leases a rate-limited queue's jobs only as it can start them.
    ///
    /// ```
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::ops::RateLimit;
    /// use redjob::Worker;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue_rate_limit("mail-api", RateLimit::per_minute(100))
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn queue_rate_limit(self, queue: impl Into<String>, limit: RateLimit) -> Self {
        self.queue_values(queue.into(), |s| s.rate_limit = Some(limit))
    }

    /// The longest a handler's [`JobError::rate_limited`](crate::JobError::rate_limited)
    /// holds its job and its queue: a longer `retry_after` is cut to this,
    /// with a warning. Defaults to 5 minutes; 1 s to
    /// [`MAX_DELAY`](crate::worker::MAX_DELAY).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::Worker;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("mail-api")
    ///     .max_throttle(Duration::from_secs(60))
    ///     .throttle_limit(5)
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn max_throttle(mut self, most: Duration) -> Self {
        self.max_throttle = most;
        self
    }

    /// How many [`JobError::rate_limited`](crate::JobError::rate_limited)
    /// returns in a row a job may have without counting an attempt; the next
    /// counts, so that a job cannot bounce for ever. Defaults to 20; 1 to 24
    /// (a job keeps its last 25 attempt records, where they are counted).
    pub fn throttle_limit(mut self, n: u32) -> Self {
        self.throttle_limit = n;
        self
    }
}

/// Refuses a throttle cap or limit out of bounds.
pub(super) fn check_throttles(most: Duration, limit: u32) -> Result<()> {
    if most < Duration::from_secs(1) || most > crate::contract::queues::MAX_DELAY {
        return Err(invalid(
            "max_throttle",
            "must be between 1 s and 9999999 s".into(),
        ));
    }
    if !(1..=24).contains(&limit) {
        return Err(invalid("throttle_limit", "must be between 1 and 24".into()));
    }
    Ok(())
}

/// Refuses builder values for `queue` that could not be stored.
pub(super) fn check(queue: &str, values: &QueueSettings) -> Result<()> {
    if let Some(reason) = values.concurrency.and_then(|c| c.problem()) {
        return Err(invalid(
            "queue_concurrency",
            format!("queue {queue:?}: {reason}"),
        ));
    }
    if let Some(reason) = values.rate_limit.and_then(|r| r.problem()) {
        return Err(invalid(
            "queue_rate_limit",
            format!("queue {queue:?}: {reason}"),
        ));
    }
    Ok(())
}
