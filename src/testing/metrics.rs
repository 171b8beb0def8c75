//! The kit's own metrics recorder: what its workers emit through the `metrics`
//! facade, kept for the test to read (no global recorder needed).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};

/// One series' storage.
#[derive(Clone)]
enum Series {
    Counter(Arc<AtomicU64>),
    Gauge(Arc<AtomicU64>),
    Histogram(Arc<Samples>),
}

/// A histogram's samples, all kept.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(value);
    }
}

/// Every series the kit's workers registered, by key.
#[derive(Default)]
pub(crate) struct Recorder {
    series: Mutex<HashMap<Key, Series>>,
}

impl Recorder {
    fn get_or(&self, key: &Key, make: impl FnOnce() -> Series) -> Series {
        let mut all = self.series.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(key.clone()).or_insert_with(make).clone()
    }

    /// The series named `name` whose labels include every one of `labels`.
    fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(String, Series)> {
        let all = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<(String, Series)> = all
            .iter()
            .filter(|(k, _)| {
                k.name() == name
                    && labels
                        .iter()
                        .all(|(n, v)| k.labels().any(|l| l.key() == *n && l.value() == *v))
            })
            .map(|(k, s)| (format!("{k}"), s.clone()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The sum of the counters `name` whose labels include `labels`.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .iter()
            .map(|(_, s)| match s {
                Series::Counter(c) => c.load(Ordering::Acquire),
                _ => 0,
            })
            .sum()
    }

    /// The value of the first gauge `name` whose labels include `labels`.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.matching(name, labels)
            .iter()
            .find_map(|(_, s)| match s {
                Series::Gauge(g) => Some(f64::from_bits(g.load(Ordering::Acquire))),
                _ => None,
            })
    }

    /// The samples of the histograms `name` whose labels include `labels`.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(name, labels)
            .iter()
            .flat_map(|(_, s)| match s {
                Series::Histogram(h) => h.0.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// How many series it holds.
    pub fn len(&self) -> usize {
        self.series.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        match self.get_or(key, || Series::Counter(Arc::default())) {
            Series::Counter(c) => Counter::from_arc(c),
            _ => Counter::noop(),
        }
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        match self.get_or(key, || Series::Gauge(Arc::default())) {
            Series::Gauge(g) => Gauge::from_arc(g),
            _ => Gauge::noop(),
        }
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        match self.get_or(key, || Series::Histogram(Arc::default())) {
            Series::Histogram(h) => Histogram::from_arc(h),
            _ => Histogram::noop(),
        }
    }
}

impl super::TestKit {
    /// The sum of the counter `name` over its series whose labels include
    /// every one of `labels`, as the kit's workers emitted it through the
    /// `metrics` facade (to the kit's own recorder: no global one is needed,
    /// and none sees them). The names are in the
    /// [operating chapter](crate::guide::operating#metrics-and-hooks).
    ///
    /// ```
    /// use redjob::testing::TestKit;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "kit-counted", queue = "counted")]
    /// struct Counted;
    /// impl Job for Counted {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new();
    /// kit.client().enqueue(&Counted).await?;
    /// kit.client().enqueue(&Counted).await?;
    /// kit.run_until_idle().await?;
    /// let done = [("job", "kit-counted"), ("outcome", "succeeded")];
    /// assert_eq!(kit.counter("redjob_jobs_finished_total", &done), 2);
    /// assert_eq!(kit.histogram("redjob_job_run_seconds", &[("queue", "counted")]).len(), 2);
    /// assert_eq!(kit.gauge("redjob_queue_paused", &[("queue", "counted")]), Some(0.0));
    /// # Ok(()) }
    /// ```
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.recorder.counter(name, labels)
    }

    /// The value of the gauge `name` (its first series, in the order of
    /// their names and labels, whose labels include `labels`), as the kit's
    /// workers last set it; `None` when none did. The queue-size and
    /// subscriber gauges a worker samples every `metrics_interval` are not
    /// sampled in the kit.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.recorder.gauge(name, labels)
    }

    /// Every value recorded into the histogram `name` (its series whose labels
    /// include `labels`), e.g. handler run times in seconds.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.recorder.histogram(name, labels)
    }
}
