//! What a worker reports and keeps of its runs: hooks, metrics, dead
//! letters and the job history.

use std::sync::Arc;
use std::time::Duration;

use super::WorkerBuilder;
use crate::contract::backend::Backend;
use crate::contract::leases::Retention;

impl<B: Backend> WorkerBuilder<B> {
    /// Adds lifecycle hooks: `hooks` hears of every run of a job (see
    /// [`Hooks`](crate::worker::Hooks)). Call again to add more; they are called in
    /// the order added. Defaults to none.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::Worker;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::worker::{Hooks, JobRun};
    ///
    /// struct SlowJobs;
    /// impl Hooks for SlowJobs {
    ///     fn succeeded(&self, run: &JobRun<'_>, took: Duration) {
    ///         if took > Duration::from_secs(10) {
    ///             tracing::warn!(job = run.job, ?took, "slow job");
    ///         }
    ///     }
    /// }
    ///
    /// let worker = Worker::builder(MemoryBackend::new()).hooks(SlowJobs).build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn hooks(mut self, hooks: impl crate::worker::Hooks) -> Self {
        self.hooks.push(Arc::new(hooks));
        self
    }

    /// Whether the worker records metrics through the
    /// [`metrics`](https://docs.rs/metrics) facade, for whatever recorder the
    /// app installs (e.g. a Prometheus exporter; install it before the worker
    /// runs). Defaults to on; without a recorder they cost nothing measurable.
    ///
    /// | Metric | Kind | Labels |
    /// |---|---|---|
    /// | `redjob_jobs_started_total` | counter | `queue`, `job` |
    /// | `redjob_jobs_finished_total` | counter | `queue`, `job`, `outcome` (`succeeded`, `retried`, `dead`, `cancelled`, `throttled`) |
    /// | `redjob_job_run_seconds` | histogram | `queue`, `job` |
    /// | `redjob_job_wait_seconds` (from due to start) | histogram | `queue`, `job` |
    /// | `redjob_queue_jobs` (sampled when [`metrics_interval`](Self::metrics_interval) is set) | gauge | `queue`, `state` (`ready`, `scheduled`, `in_flight`, `dead`, `blocked`: held back by concurrency keys) |
    /// | `redjob_queue_paused` (1 while paused) | gauge | `queue` |
    /// | `redjob_jobs_held_total` (jobs a fetch asked for that a limit across the fleet held back) | counter | `queue`, `limit` (`concurrency`, `rate`, `throttle`) |
    /// | `redjob_events_started_total` | counter | `topic`, `subscriber`, `event` |
    /// | `redjob_events_finished_total` | counter | `topic`, `subscriber`, `event`, `outcome` (`succeeded`, `retried`, `dead`, `cancelled`) |
    /// | `redjob_events_skipped_total` | counter | `topic`, `subscriber`: events of a type it has no handler for |
    /// | `redjob_event_run_seconds` | histogram | `topic`, `subscriber`, `event` |
    /// | `redjob_subscriber_events` (sampled, as `redjob_queue_jobs`) | gauge | `topic`, `subscriber`, `state` (`lag`, `pending`, `dead`) |
    ///
    /// `job` is the job type's name: [`UNDECODABLE`](crate::worker::UNDECODABLE) for
    /// a body that is not a job envelope, `(unknown)` for a name no linked job
    /// type has (so foreign or garbage bodies cannot multiply the series).
    pub fn metrics(mut self, on: bool) -> Self {
        self.metrics = on;
        self
    }

    /// Samples the sampled gauges every `every`: the size of each queue the
    /// worker serves (`redjob_queue_jobs`) and each subscriber's lag
    /// (`redjob_subscriber_events`). Between 1 s and
    /// [`MAX_DELAY`](crate::contract::queues::MAX_DELAY). Defaults to no sampling: each sample
    /// costs Redis one script call per queue (about 6 commands), which for a
    /// worker on 100 idle queues at 15 s would be 40 commands a second, more
    /// than all else it does while idle. Set it where an exporter reads the
    /// gauges; 15 s suits a Prometheus scrape.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::Worker;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("emails")
    ///     .metrics_interval(Duration::from_secs(15))
    ///     .build()?;
    /// # drop(worker);
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn metrics_interval(mut self, every: Duration) -> Self {
        self.metrics_interval = Some(every);
        self
    }

    /// How many dead letters each queue keeps: each time a worker
    /// dead-letters jobs, the oldest beyond `max_count` and those older than
    /// `max_age` are deleted (at most 1,000 more than it adds per call, so a
    /// lowered limit is reached over the following dead letters).
    ///
    /// The value is a queue's setting, stored with the queue
    /// ([`QueueSettings`](crate::ops::QueueSettings)): this one is stored for
    /// each of the worker's queues that has none stored yet, and the stored
    /// one is in force for every worker, whatever its builder says (an
    /// operator changes it with `redjob queue settings`, the dashboard or
    /// [`Admin::set_settings`](crate::ops::Admin::set_settings)). Without a
    /// stored value or this call, [`Retention::default`]: 10,000 letters and
    /// 30 days.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::ops::Retention;
    /// use redjob::Worker;
    ///
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("emails")
    ///     .dead_letter_retention(Retention {
    ///         max_count: Some(100_000),
    ///         max_age: Some(Duration::from_secs(180 * 24 * 3600)),
    ///     })
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn dead_letter_retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// How many finished jobs each queue keeps in its history, for how long,
    /// and their arguments for how long ([`History`](crate::ops::History)):
    /// stored with each queue that stores none yet, as
    /// [`dead_letter_retention`](Self::dead_letter_retention) is; an
    /// operator's change stays in force. Defaults to [`History::default`](crate::ops::History::default):
    /// the last 1,000 for a day, arguments for an hour.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::ops::History;
    /// use redjob::Worker;
    ///
    /// // payloads with personal data: keep no arguments
    /// let private = History { args_max_age: Some(Duration::ZERO), ..History::default() };
    /// let worker = Worker::builder(MemoryBackend::new())
    ///     .queue("emails")
    ///     .history(private)
    ///     .build()?;
    /// # let _ = worker;
    /// # Ok::<(), redjob::Error>(())
    /// ```
    pub fn history(mut self, history: crate::contract::history::History) -> Self {
        self.history = Some(history);
        self
    }
}
