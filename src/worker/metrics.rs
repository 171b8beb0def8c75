//! The worker's metrics, through the `metrics` facade: counters and histograms per
//! queue and job type, and queue-size gauges sampled at a low rate. The handles of
//! a (queue, job type) are registered once, at its first run, so a run costs a
//! map lookup and a few atomic adds (nothing measurable without a recorder).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Unit};
use tokio_util::sync::CancellationToken;

use super::hooks::UNDECODABLE;
use crate::contract::backend::Backend;

/// Where the worker's metrics go: the `metrics` facade's global recorder, or
/// one of its own (the test kit's).
#[derive(Clone, Default)]
pub(crate) struct Sink(Option<Arc<dyn metrics::Recorder + Send + Sync>>);

impl Sink {
    /// A sink that registers every handle with `recorder`.
    pub fn to(recorder: Arc<dyn metrics::Recorder + Send + Sync>) -> Sink {
        Sink(Some(recorder))
    }

    /// Registers handles (or describes metrics) in `f` with this sink's recorder.
    pub fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.0 {
            Some(r) => metrics::with_local_recorder(r.as_ref(), f),
            None => f(),
        }
    }
}

impl Sink {
    /// `fut`, whose every poll records to this sink's own recorder when it
    /// has one (the test kit's: a handler's own metrics reach it too); as it
    /// is, unboxed again, for the global recorder.
    pub fn recording<'a, T: 'a>(
        &self,
        fut: futures::future::BoxFuture<'a, T>,
    ) -> futures::future::BoxFuture<'a, T> {
        match &self.0 {
            Some(r) => Box::pin(Recorded {
                recorder: r.clone(),
                fut,
            }),
            None => fut,
        }
    }
}

/// A future polled with a recorder as the thread's local one.
struct Recorded<'a, T> {
    recorder: Arc<dyn metrics::Recorder + Send + Sync>,
    fut: futures::future::BoxFuture<'a, T>,
}

impl<T> std::future::Future for Recorded<'_, T> {
    type Output = T;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        let this = &mut *self;
        metrics::with_local_recorder(this.recorder.as_ref(), || this.fut.as_mut().poll(cx))
    }
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Sink(own)"
        } else {
            "Sink(global)"
        })
    }
}

/// The `job` label of a job type no linked type has (hooks get its name).
pub(crate) const UNKNOWN: &str = "(unknown)";

/// Runs started, by `queue` and `job`.
pub(crate) const STARTED: &str = "redjob_jobs_started_total";
/// Runs ended, by `queue`, `job` and `outcome` (`succeeded`, `retried`, `dead`,
/// `cancelled`, `throttled`).
pub(crate) const FINISHED: &str = "redjob_jobs_finished_total";
/// Handler run time, seconds, by `queue` and `job`.
pub(crate) const RUN: &str = "redjob_job_run_seconds";
/// Queue wait before a run, seconds, by `queue` and `job`.
pub(crate) const WAIT: &str = "redjob_job_wait_seconds";
/// Jobs of a queue by `state` (`ready`, `scheduled`, `in_flight`, `dead`,
/// `blocked`: held back by their concurrency keys).
pub(crate) const QUEUE_JOBS: &str = "redjob_queue_jobs";
/// 1 while a queue is paused.
pub(crate) const QUEUE_PAUSED: &str = "redjob_queue_paused";
/// Due jobs a limit across the fleet kept a fetch from leasing (up to what it
/// asked for), by `queue` and `limit` (`concurrency`, `rate`, `throttle`).
pub(crate) const HELD: &str = "redjob_jobs_held_total";

/// Event runs started, by `topic`, `subscriber` and `event`.
pub(crate) const EVENTS_STARTED: &str = "redjob_events_started_total";
/// Event runs ended, by `topic`, `subscriber`, `event` and `outcome`
/// (`succeeded`, `retried`, `dead`, `cancelled`).
pub(crate) const EVENTS_FINISHED: &str = "redjob_events_finished_total";
/// Events a subscriber had no handler for, skipped, by `topic` and
/// `subscriber` (not by type: any publisher names the types).
pub(crate) const EVENTS_SKIPPED: &str = "redjob_events_skipped_total";
/// Event handler run time, seconds, by `topic`, `subscriber` and `event`.
pub(crate) const EVENT_RUN: &str = "redjob_event_run_seconds";
/// A subscriber's events by `state`: `lag` (not taken yet), `pending` (taken,
/// not acknowledged), `dead`.
pub(crate) const SUBSCRIBER_EVENTS: &str = "redjob_subscriber_events";

/// Describes the metrics to the installed recorder (once per worker run).
pub(crate) fn describe() {
    metrics::describe_counter!(STARTED, Unit::Count, "Job runs started");
    metrics::describe_counter!(
        FINISHED,
        Unit::Count,
        "Job runs ended, by outcome: succeeded, retried, dead, cancelled, throttled"
    );
    metrics::describe_histogram!(RUN, Unit::Seconds, "Handler run time");
    metrics::describe_histogram!(
        WAIT,
        Unit::Seconds,
        "Time from when a job was due until its run started"
    );
    metrics::describe_gauge!(
        QUEUE_JOBS,
        Unit::Count,
        "Jobs of a queue by state (ready, scheduled, in_flight, dead, blocked: held back by their concurrency keys), sampled by each worker"
    );
    metrics::describe_gauge!(QUEUE_PAUSED, "1 while the queue is paused");
    metrics::describe_counter!(
        HELD,
        Unit::Count,
        "Due jobs a queue's limit across the fleet kept a fetch from leasing (up to what it asked for), by limit: concurrency, rate, throttle"
    );
    metrics::describe_counter!(EVENTS_STARTED, Unit::Count, "Event runs started");
    metrics::describe_counter!(
        EVENTS_FINISHED,
        Unit::Count,
        "Event runs ended, by outcome: succeeded, retried, dead, cancelled"
    );
    metrics::describe_counter!(
        EVENTS_SKIPPED,
        Unit::Count,
        "Events of a type the subscriber has no handler for, skipped"
    );
    metrics::describe_histogram!(EVENT_RUN, Unit::Seconds, "Event handler run time");
    metrics::describe_gauge!(
        SUBSCRIBER_EVENTS,
        Unit::Count,
        "A subscriber's events by state (lag, pending, dead), sampled by each worker"
    );
}

/// The handles of one (topic, subscriber, event type).
pub(crate) struct EventMetrics {
    pub started: Counter,
    pub succeeded: Counter,
    pub retried: Counter,
    pub dead: Counter,
    pub cancelled: Counter,
    pub run: Histogram,
}

impl EventMetrics {
    /// The handles of each of `events` (a subscriber's handled types).
    pub fn for_events<'a>(
        sink: &Sink,
        topic: &str,
        sub: &str,
        events: impl Iterator<Item = &'a str>,
    ) -> HashMap<String, EventMetrics> {
        events
            .map(|e| {
                let labels = || {
                    [
                        ("topic", topic.to_string()),
                        ("subscriber", sub.to_string()),
                        ("event", e.to_string()),
                    ]
                };
                let finished = |outcome: &'static str| {
                    let mut l = labels().to_vec();
                    l.push(("outcome", outcome.to_string()));
                    metrics::counter!(EVENTS_FINISHED, &l)
                };
                let m = sink.with(|| EventMetrics {
                    started: metrics::counter!(EVENTS_STARTED, &labels()),
                    succeeded: finished("succeeded"),
                    retried: finished("retried"),
                    dead: finished("dead"),
                    cancelled: finished("cancelled"),
                    run: metrics::histogram!(EVENT_RUN, &labels()),
                });
                (e.to_string(), m)
            })
            .collect()
    }

    /// The dead count of a subscriber's entries that are not events (no
    /// type or no data), labelled `event="(undecodable)"`
    /// ([`UNDECODABLE`], as jobs are): a bounded label, whatever the entries.
    pub fn undecodable(sink: &Sink, topic: &str, sub: &str) -> Counter {
        let labels = [
            ("topic", topic.to_string()),
            ("subscriber", sub.to_string()),
            ("event", UNDECODABLE.to_string()),
            ("outcome", "dead".to_string()),
        ];
        sink.with(|| metrics::counter!(EVENTS_FINISHED, &labels))
    }
}

/// Samples a subscriber's lag, pending and dead events into gauges every
/// `every` until `stop`, then once more: the worker stops it after its last
/// acknowledgements, so that the gauges keep what it left behind.
pub(crate) async fn sample_subscriber<B: crate::contract::topics::Topics>(
    backend: B,
    sink: Sink,
    topic: Arc<str>,
    sub: Arc<str>,
    every: Duration,
    stop: CancellationToken,
) {
    let gauges = sink.with(|| {
        ["lag", "pending", "dead"].map(|s| {
            metrics::gauge!(SUBSCRIBER_EVENTS, "topic" => topic.to_string(), "subscriber" => sub.to_string(), "state" => s)
        })
    });
    let mut last = false;
    loop {
        match backend.topic_info(&topic).await {
            Ok(info) => {
                let s = info.and_then(|t| t.subscribers.into_iter().find(|s| *s.name == *sub));
                let n = s.map_or([0, 0, 0], |s| [s.lag, s.pending, s.dead]);
                for (g, n) in gauges.iter().zip(n) {
                    g.set(n as f64);
                }
            }
            Err(e) => {
                tracing::debug!(topic = %topic, subscriber = %sub, error = %e, "could not sample the subscriber")
            }
        }
        if last {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => last = true,
        }
    }
}

/// The handles of one (queue, job type).
pub(crate) struct JobMetrics {
    pub started: Counter,
    pub succeeded: Counter,
    pub retried: Counter,
    pub dead: Counter,
    pub cancelled: Counter,
    pub throttled: Counter,
    pub run: Histogram,
    pub wait: Histogram,
}

impl JobMetrics {
    fn new(queue: &str, job: &str) -> Self {
        let q = || queue.to_string();
        let j = || job.to_string();
        let finished = |outcome: &'static str| metrics::counter!(FINISHED, "queue" => q(), "job" => j(), "outcome" => outcome);
        JobMetrics {
            started: metrics::counter!(STARTED, "queue" => q(), "job" => j()),
            succeeded: finished("succeeded"),
            retried: finished("retried"),
            dead: finished("dead"),
            cancelled: finished("cancelled"),
            throttled: finished("throttled"),
            run: metrics::histogram!(RUN, "queue" => q(), "job" => j()),
            wait: metrics::histogram!(WAIT, "queue" => q(), "job" => j()),
        }
    }
}

/// One queue's handles, by job type; empty and unused when metrics are off.
pub(crate) struct QueueMetrics {
    queue: Arc<str>,
    on: bool,
    sink: Sink,
    jobs: RwLock<HashMap<Box<str>, Arc<JobMetrics>>>,
    paused: Option<Gauge>,
    /// Jobs held back by the global concurrency, the rate limit, a throttle.
    held: Option<[Counter; 3]>,
}

impl QueueMetrics {
    pub fn new(queue: Arc<str>, on: bool, sink: Sink) -> Self {
        let paused =
            on.then(|| sink.with(|| metrics::gauge!(QUEUE_PAUSED, "queue" => queue.to_string())));
        if let Some(g) = &paused {
            g.set(0.0);
        }
        let held = on.then(|| {
            sink.with(|| {
                ["concurrency", "rate", "throttle"]
                    .map(|l| metrics::counter!(HELD, "queue" => queue.to_string(), "limit" => l))
            })
        });
        QueueMetrics {
            queue,
            on,
            sink,
            jobs: RwLock::new(HashMap::new()),
            paused,
            held,
        }
    }

    /// A fetch's due jobs not leased because of the limits in `held`.
    pub fn held(&self, held: crate::contract::leases::Held) {
        let n = u64::from(held.jobs);
        if let (Some([c, r, t]), true) = (&self.held, n > 0) {
            if held.concurrency {
                c.increment(n);
            }
            if held.rate {
                r.increment(n);
            }
            if held.throttle {
                t.increment(n);
            }
        }
    }

    /// Whether metrics are on.
    pub fn on(&self) -> bool {
        self.on
    }

    /// The handles of job type `job`, registered at its first run. A name no
    /// linked job type has (from a foreign or garbage body) is labelled
    /// [`UNKNOWN`], so bad input cannot grow the number of series.
    pub fn job(&self, job: &str) -> Option<Arc<JobMetrics>> {
        if !self.on {
            return None;
        }
        if let Some(m) = self.jobs.read().unwrap_or_else(|e| e.into_inner()).get(job) {
            return Some(m.clone());
        }
        let known = job == UNDECODABLE || crate::job::registered().any(|r| r.name == job);
        let label = if known { job } else { UNKNOWN };
        let mut jobs = self.jobs.write().unwrap_or_else(|e| e.into_inner());
        let m = jobs
            .entry(label.into())
            .or_insert_with(|| Arc::new(self.sink.with(|| JobMetrics::new(&self.queue, label))));
        Some(m.clone())
    }

    /// The dispatcher saw the queue paused or resumed.
    pub fn paused(&self, paused: bool) {
        if let Some(g) = &self.paused {
            g.set(if paused { 1.0 } else { 0.0 });
        }
    }
}

/// Samples the sizes of `queues` into gauges every `every` until `stop`, then
/// once more: the worker stops it after its drain (its last settles), so that
/// the gauges keep what it left behind rather than a sample from while it
/// ran. A failed read is logged at debug and skipped: the gauges keep their
/// last value.
pub(crate) async fn sample<B: Backend>(
    backend: B,
    sink: Sink,
    queues: Vec<String>,
    every: Duration,
    stop: CancellationToken,
) {
    let gauges: Vec<[Gauge; 5]> = sink.with(|| {
        queues
            .iter()
            .map(|q| {
                ["ready", "scheduled", "in_flight", "dead", "blocked"]
                    .map(|s| metrics::gauge!(QUEUE_JOBS, "queue" => q.clone(), "state" => s))
            })
            .collect()
    });
    let mut last = false;
    loop {
        for (q, g) in queues.iter().zip(&gauges) {
            match backend.sizes(q).await {
                Ok(c) => {
                    for (g, n) in
                        g.iter()
                            .zip([c.ready, c.scheduled, c.in_flight, c.dead, c.blocked])
                    {
                        g.set(n as f64);
                    }
                }
                Err(crate::Error::QueueNotFound { .. }) => {
                    for g in g {
                        g.set(0.0);
                    }
                }
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "could not sample the queue's size")
                }
            }
        }
        if last {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => last = true,
        }
    }
}
