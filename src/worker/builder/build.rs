//! A worker built from its builder: the values checked, the queues' settings
//! resolved, and the worker's shared state made.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::{DEFAULT_PREFETCH_PER_SLOT, WorkerBuilder, limits};
use crate::contract::backend::Backend;
use crate::contract::batches::{BatchId, BatchStatus};
use crate::contract::queues::{SendMessage, validate};
use crate::contract::settings::QueueSettings;
use crate::worker::{Shared, Worker};
use crate::{Error, JobId, Result};
use futures::future::BoxFuture;

impl<B: Backend> WorkerBuilder<B> {
    /// Checks the settings and builds the worker.
    ///
    /// Fails with [`Error::DuplicateJobName`] when two job types linked into the
    /// program share a job name (the default name is the bare type name, so two
    /// `struct Cleanup` in different modules clash): none of their jobs could run.
    pub fn build(mut self) -> Result<Worker<B>> {
        crate::job::check_unique_names()?;
        if let Some(twice) = self.twice.take() {
            return Err(invalid("subscribe", twice));
        }
        for s in &self.subscriptions {
            crate::contract::topics::check_name("topic name", &s.topic)?;
            crate::contract::topics::check_name("subscriber name", &s.sub.name)?;
            if s.sub.concurrency == Some(0) {
                return Err(invalid(
                    "subscription concurrency",
                    "must be at least 1".into(),
                ));
            }
            if let Some(n) = s.sub.concurrency.filter(|n| *n > MOST) {
                return Err(invalid(
                    "subscription concurrency",
                    format!("{n}: must be at most {MOST}"),
                ));
            }
            // a start over a minute past now would skip every event until
            // then: the backend refuses it (a test clock's is checked by it)
            if self.backend.real_time() {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                let ahead = |o| crate::contract::topics::too_far_ahead(o, None, now);
                if s.sub.start.offset().is_some_and(ahead) {
                    return Err(crate::contract::topics::start_too_late(s.sub.start));
                }
            }
        }
        if self.queues.is_empty() && self.subscriptions.is_empty() {
            let mut qs: Vec<&str> = crate::job::registered().map(|r| r.queue).collect();
            qs.sort_unstable();
            qs.dedup();
            if qs.is_empty() {
                qs.push("default");
            }
            self = self.queues(qs);
        }
        for (q, values) in &self.queues {
            validate::queue_name(q)?;
            limits::check(q, values)?;
        }
        if self.concurrency == 0 {
            return Err(invalid("concurrency", "must be at least 1".into()));
        }
        if self.concurrency > MOST {
            return Err(invalid(
                "concurrency",
                format!("{}: must be at most {MOST}", self.concurrency),
            ));
        }
        if self.lease < Duration::from_secs(1) || self.lease.as_secs() > validate::MAX_SECONDS {
            return Err(invalid("lease", "must be between 1 s and 9999999 s".into()));
        }
        if self.poll_interval.is_zero() {
            return Err(invalid("poll_interval", "must be positive".into()));
        }
        if self
            .retention
            .is_some_and(|r| r.max_count == Some(0) || r.max_age == Some(Duration::ZERO))
        {
            return Err(invalid(
                "dead_letter_retention",
                "limits must be positive (None for no limit)".into(),
            ));
        }
        if self
            .history
            .is_some_and(|h| h.max_count == Some(0) || h.max_age == Some(Duration::ZERO))
        {
            return Err(invalid(
                "history",
                "limits must be positive (None for no limit, History::OFF to keep none)".into(),
            ));
        }
        // their bounds, as an operator's change is checked
        QueueSettings {
            dead_letters: self.retention,
            history: self.history,
            ..QueueSettings::default()
        }
        .check()?;
        if self.metrics_interval.is_some_and(|every| {
            every < Duration::from_secs(1) || every > crate::contract::queues::MAX_DELAY
        }) {
            return Err(invalid(
                "metrics_interval",
                "must be between 1 s and 9999999 s".into(),
            ));
        }
        limits::check_throttles(self.max_throttle, self.throttle_limit)?;
        if self.job_timeout == Some(Duration::ZERO) {
            return Err(invalid("job_timeout", "must be positive".into()));
        }
        let mut names = std::collections::HashSet::new();
        for p in &self.periodic {
            p.check()?;
            if !names.insert((p.queue.as_str(), p.name.as_str())) {
                return Err(invalid(
                    "periodic",
                    format!(
                        "two periodic jobs of queue {:?} are named {:?}: name each with Periodic::name",
                        p.queue, p.name
                    ),
                ));
            }
        }
        let prefetch = self.prefetch.unwrap_or(
            self.concurrency
                .saturating_mul(DEFAULT_PREFETCH_PER_SLOT)
                .min(MOST),
        );
        if prefetch > MOST {
            return Err(invalid(
                "prefetch",
                format!("{prefetch}: must be at most {MOST}"),
            ));
        }
        let shared = Shared {
            slots: Semaphore::new(self.concurrency + prefetch),
            running: Semaphore::new(self.concurrency),
            filled: tokio::sync::Notify::new(),
            fetch_max: (self.concurrency + prefetch).min(1000) as u32,
            concurrency: self.concurrency,
            prefetch,
            unstarted: std::sync::atomic::AtomicUsize::new(0),
            slot_freed: tokio::sync::Notify::new(),
            turns: Default::default(),
            lease: self.lease,
            poll_interval: self.poll_interval,
            job_timeout: self.job_timeout,
            retry: self.retry,
            data: self.data,
            unknown_jobs_retry_for: self.unknown_jobs_retry_for,
            max_throttle: self.max_throttle,
            readiness: crate::worker::ready::Readiness::new(self.queues.len()),
            retention: self.retention.unwrap_or_default(),
            history: self.history.unwrap_or_default(),
            observer: crate::worker::observe::Observer::new(self.hooks),
            batches: Some(batch_access(&self.backend)),
            cancelled_batches: Default::default(),
            metrics: self.metrics,
            sample_every: self.metrics_interval.filter(|_| self.metrics),
            controls: Arc::new(crate::worker::control::Controls::new()),
            sink: self.sink,
            unique_start: Arc::new(crate::worker::unique_start::Through(self.backend.clone())),
        };
        Ok(Worker {
            backend: self.backend,
            id: uuid::Uuid::new_v4().to_string(),
            queues: self.queues,
            periodic: self.periodic,
            subscriptions: self.subscriptions.into_iter().map(Arc::new).collect(),
            starter: self.starter,
            concurrency: self.concurrency,
            shared: Arc::new(shared),
            grace: self.grace,
            signals: self.signals,
            shutdown: self.shutdown.unwrap_or_default(),
            settings: QueueSettings {
                dead_letters: self.retention,
                history: self.history,
                ..QueueSettings::default()
            },
            throttle_limit: self.throttle_limit,
        })
    }
}

/// The most jobs a worker runs at once, or leases ahead, and the most events
/// a subscription runs at once: [`MAX_CONCURRENCY`](crate::ops::MAX_CONCURRENCY),
/// as a queue's own concurrency. The counts the worker keeps of them are
/// `u32`s.
const MOST: usize = crate::contract::settings::MAX_CONCURRENCY as usize;

pub(super) fn invalid(what: &'static str, reason: String) -> Error {
    Error::InvalidValue { what, reason }
}

/// A job's way to its batch, through `backend`.
fn batch_access<B: Backend>(backend: &B) -> crate::job::BatchAccess {
    crate::job::BatchAccess(Arc::new(Through(backend.clone())))
}

/// [`BatchOps`](crate::job::BatchOps) through a backend.
struct Through<B>(B);

impl<B: Backend> crate::job::BatchOps for Through<B> {
    fn status(&self, id: BatchId) -> BoxFuture<'static, Result<Option<BatchStatus>>> {
        let b = self.0.clone();
        Box::pin(async move { b.batch_status(&id).await })
    }

    fn results(&self, id: BatchId, from: u64, limit: usize) -> crate::job::Results {
        let b = self.0.clone();
        Box::pin(async move { b.batch_results(&id, from, limit).await })
    }

    fn add(&self, id: BatchId, jobs: Vec<(String, SendMessage)>) -> BoxFuture<'static, Result<()>> {
        let b = self.0.clone();
        Box::pin(async move { b.batch_add(&id, &jobs).await })
    }

    fn cancelled(&self, after: u64) -> BoxFuture<'static, Result<Vec<(BatchId, u64)>>> {
        let b = self.0.clone();
        Box::pin(async move { b.cancelled_batches(after).await })
    }

    fn cancel_job(&self, queue: String, id: JobId, by: String) -> BoxFuture<'static, Result<bool>> {
        let b = self.0.clone();
        Box::pin(async move { b.cancel_job(&queue, &id, &by).await })
    }
}
