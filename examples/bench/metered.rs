//! The worker's metrics on the hot path: a backlog processed with metrics off,
//! on without a recorder (the default), and on with a Prometheus recorder, each
//! beside the others on the same server. The recorder is installed once for the
//! whole process behind a switch, so the other phases see no recorder.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use redjob::{Client, Worker};

use crate::jobs::{Noop, Tally};
use crate::phases::{Figures, Settings, drain};

/// A Prometheus recorder that records only while on.
struct Switch {
    on: AtomicBool,
    inner: PrometheusRecorder,
}

impl Recorder for Switch {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if self.on.load(Ordering::Relaxed) {
            self.inner.describe_counter(key, unit, description)
        }
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if self.on.load(Ordering::Relaxed) {
            self.inner.describe_gauge(key, unit, description)
        }
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        if self.on.load(Ordering::Relaxed) {
            self.inner.describe_histogram(key, unit, description)
        }
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_counter(key, metadata)
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_gauge(key, metadata)
        } else {
            Gauge::noop()
        }
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_histogram(key, metadata)
        } else {
            Histogram::noop()
        }
    }
}

static SWITCH: OnceLock<(Arc<Switch>, PrometheusHandle)> = OnceLock::new();

/// The process's switchable recorder, installed at the first call.
fn switch() -> &'static (Arc<Switch>, PrometheusHandle) {
    SWITCH.get_or_init(|| {
        let inner = PrometheusBuilder::new()
            .set_buckets(&[0.0001, 0.001, 0.01, 0.1, 1.0])
            .expect("buckets")
            .build_recorder();
        let handle = inner.handle();
        let s = Arc::new(Switch {
            on: AtomicBool::new(false),
            inner,
        });
        metrics::set_global_recorder(ArcRecorder(s.clone())).expect("no other recorder");
        (s, handle)
    })
}

/// `Recorder` for a shared `Switch`.
struct ArcRecorder(Arc<Switch>);

impl Recorder for ArcRecorder {
    fn describe_counter(&self, k: KeyName, u: Option<Unit>, d: SharedString) {
        self.0.describe_counter(k, u, d)
    }
    fn describe_gauge(&self, k: KeyName, u: Option<Unit>, d: SharedString) {
        self.0.describe_gauge(k, u, d)
    }
    fn describe_histogram(&self, k: KeyName, u: Option<Unit>, d: SharedString) {
        self.0.describe_histogram(k, u, d)
    }
    fn register_counter(&self, k: &Key, m: &Metadata<'_>) -> Counter {
        self.0.register_counter(k, m)
    }
    fn register_gauge(&self, k: &Key, m: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(k, m)
    }
    fn register_histogram(&self, k: &Key, m: &Metadata<'_>) -> Histogram {
        self.0.register_histogram(k, m)
    }
}

/// How a backlog is processed (the plain figure is metrics on, no recorder).
#[derive(Clone, Copy, PartialEq)]
pub enum Metered {
    Off,
    Prometheus,
}

/// Processes a bulk-enqueued backlog of `s.n` with metrics as `m`; jobs/s.
pub async fn process(client: &Client, s: &Settings, f: &mut Figures, m: Metered) -> f64 {
    let jobs: Vec<Noop> = (0..s.n).map(|i| Noop { i: i as u64 }).collect();
    for chunk in jobs.chunks(1000) {
        client.enqueue_batch(chunk).await.expect("bulk enqueue");
    }
    let (sw, handle) = switch();
    sw.on.store(m == Metered::Prometheus, Ordering::Relaxed);
    let tally = Arc::new(Tally::new(s.n));
    let w = Worker::builder(client.backend())
        .queue("bench")
        .concurrency(s.concurrency)
        .handle_signals(false)
        .data(tally.clone())
        .metrics(m != Metered::Off)
        .build()
        .expect("worker settings");
    let t = Instant::now();
    let (secs, _) = drain(w, &tally, t).await;
    sw.on.store(false, Ordering::Relaxed);
    f.check(&tally);
    if m == Metered::Prometheus {
        // the recorder did count them: the figure is not of a no-op
        let text = handle.render();
        let counted = text.lines().any(|l| {
            l.starts_with("redjob_jobs_finished_total")
                && l.contains("outcome=\"succeeded\"")
                && l.split(' ').next_back().and_then(|v| v.parse::<f64>().ok()) >= Some(s.n as f64)
        });
        assert!(counted, "the Prometheus recorder missed jobs:\n{text}");
    }
    s.n as f64 / secs
}
