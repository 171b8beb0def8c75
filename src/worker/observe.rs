//! Tells the hooks and the metrics how each run went.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use super::hooks::{CancelReason, Hooks, JobRun};
use super::metrics::{JobMetrics, QueueMetrics};

/// How a run ended, as told to hooks and metrics.
pub(crate) enum End<'e> {
    Succeeded,
    Retried { error: &'e str, retry_in: Duration },
    Dead { error: &'e str },
    Cancelled(CancelReason),
    Throttled { retry_in: Duration },
}

/// The worker's hooks.
#[derive(Clone, Default)]
pub(crate) struct Observer {
    hooks: Vec<Arc<dyn Hooks>>,
}

impl Observer {
    pub fn new(hooks: Vec<Arc<dyn Hooks>>) -> Self {
        Observer { hooks }
    }

    /// The handler of `run` is about to start.
    pub fn started(&self, qm: &QueueMetrics, run: &JobRun<'_>) -> Option<Arc<JobMetrics>> {
        let m = qm.job(run.job);
        if let Some(m) = &m {
            m.started.increment(1);
            m.wait.record(run.waited.as_secs_f64());
        }
        self.each(|h| h.started(run));
        m
    }

    /// Whether hooks are set (code of the app's, which takes its time).
    pub fn hooked(&self) -> bool {
        !self.hooks.is_empty()
    }

    /// Whether anyone listens: hooks, or metrics.
    pub fn active(&self, qm: &QueueMetrics) -> bool {
        !self.hooks.is_empty() || qm.on()
    }

    /// `run` ended; its handler ran for `took` (`None`: it never ran). `m` is
    /// what [`started`](Self::started) returned, if it was called.
    pub fn ended(
        &self,
        qm: &QueueMetrics,
        m: Option<Arc<JobMetrics>>,
        run: &JobRun<'_>,
        took: Option<Duration>,
        end: End<'_>,
    ) {
        if let Some(m) = m.or_else(|| qm.job(run.job)) {
            match end {
                End::Succeeded => m.succeeded.increment(1),
                End::Retried { .. } => m.retried.increment(1),
                End::Dead { .. } => m.dead.increment(1),
                End::Cancelled(_) => m.cancelled.increment(1),
                End::Throttled { .. } => m.throttled.increment(1),
            }
            if let Some(took) = took {
                m.run.record(took.as_secs_f64());
            }
        }
        let took = took.unwrap_or_default();
        self.each(|h| match end {
            End::Succeeded => h.succeeded(run, took),
            End::Retried { error, retry_in } => h.retried(run, took, error, retry_in),
            End::Dead { error } => h.dead_lettered(run, took, error),
            End::Cancelled(why) => h.cancelled(run, took, why),
            End::Throttled { retry_in } => h.throttled(run, took, retry_in),
        });
    }

    fn each(&self, f: impl Fn(&dyn Hooks)) {
        for h in &self.hooks {
            if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| f(&**h))) {
                let msg = super::execute::panic_message(&*p);
                tracing::error!(panic = msg, "a worker hook panicked; ignored");
            }
        }
    }
}
