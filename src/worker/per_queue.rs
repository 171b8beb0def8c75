//! What a queue's dispatcher shares with its jobs' runs: the worker's shutdown
//! signals for the queue, how long its jobs run (which decides its prefetch),
//! and a handler's throttle held until its settle lands.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::dispatch::lock;
use super::metrics::QueueMetrics;

/// Shared by a queue's dispatcher and its jobs: the worker's shutdown signals and
/// how long the queue's jobs run.
pub(crate) struct PerQueue {
    /// Stop fetching; release prefetched jobs.
    pub stop: CancellationToken,
    /// Cancel running jobs (grace period over).
    pub abort: CancellationToken,
    /// Moving average of the queue's handler run times, µs; `u64::MAX` until one
    /// finished.
    pub run_us: AtomicU64,
    /// The queue's metrics handles.
    pub metrics: QueueMetrics,
    /// A handler's throttle held here until its settle lands (see [`Hold`]).
    pub hold: Arc<Hold>,
}

/// A handler's throttle, held by its worker from before its slot frees until
/// its settle lands (the settler says so): from then on the backend holds the
/// queue for every worker, and an operator can end it there. A settle that
/// fails (or whose throttle failed the fence) holds it here until the
/// throttle ends. Each throttle is numbered as it comes and held until its
/// own settle lands: an earlier throttle's landing ends none held after it.
/// Every job start and fetch asks it: without a throttle that is one atomic
/// load.
#[derive(Default)]
pub(crate) struct Hold {
    state: std::sync::Mutex<Throttles>,
    /// A throttle may be held (`held` is not empty).
    any: std::sync::atomic::AtomicBool,
}

/// The throttles a worker holds of its queue.
#[derive(Default)]
struct Throttles {
    /// The number the last throttle was given (the first is 1).
    last: u64,
    /// Each throttle held (its settle has not landed), by number: until when.
    held: Vec<(u64, Instant)>,
}

impl Hold {
    /// A handler's throttle of `d`: nothing of the queue starts here until it
    /// ends or its settle lands. Returns its number, for the settler to say
    /// when it landed (see [`landed`](Self::landed)).
    pub fn throttle(&self, d: Duration) -> u64 {
        let until = Instant::now() + d;
        let mut h = lock(&self.state);
        h.last += 1;
        let number = h.last;
        h.held.push((number, until));
        self.any.store(true, Ordering::SeqCst);
        number
    }

    /// The settles of the throttles numbered `numbers` landed (past the
    /// fence): the backend holds the queue for them. Those held after them
    /// stay held here.
    pub fn landed(&self, numbers: &[u64]) {
        if numbers.is_empty() {
            return;
        }
        let mut h = lock(&self.state);
        h.held.retain(|(n, _)| !numbers.contains(n));
        if h.held.is_empty() {
            self.any.store(false, Ordering::SeqCst);
        }
    }

    /// Until when this worker holds the queue itself, if it does.
    pub fn until(&self) -> Option<Instant> {
        if !self.any.load(Ordering::SeqCst) {
            return None;
        }
        let now = Instant::now();
        let mut h = lock(&self.state);
        // throttles that ended are held no more, landed or not
        h.held.retain(|(_, until)| *until > now);
        let until = h.held.iter().map(|(_, until)| *until).max();
        if until.is_none() {
            self.any.store(false, Ordering::SeqCst);
        }
        until
    }
}

/// Jobs that run longer than this on average are not prefetched: a prefetched
/// job would wait that long in this worker while another might be idle.
const PREFETCH_BELOW: Duration = Duration::from_millis(50);

/// How long a prefetched job may expect to wait for a slot, at the queue's
/// average run time: the prefetch is cut to that (to no less than the
/// concurrency, and no more than the builder's prefetch).
const PREFETCH_WAIT: Duration = Duration::from_millis(10);

impl PerQueue {
    pub fn new(
        stop: CancellationToken,
        abort: CancellationToken,
        metrics: QueueMetrics,
        hold: Arc<Hold>,
    ) -> Self {
        PerQueue {
            stop,
            abort,
            run_us: AtomicU64::new(u64::MAX),
            metrics,
            hold,
        }
    }

    /// Adds a run's duration to the average.
    pub fn ran(&self, took: Duration) {
        let us = took.as_micros().min(u128::from(u64::MAX - 1)) as u64;
        let _ = self
            .run_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                Some(if old == u64::MAX {
                    us
                } else {
                    (old.saturating_mul(7).saturating_add(us)) / 8
                })
            });
    }

    /// Whether the queue's jobs are short enough to prefetch (unknown: no).
    pub fn short_jobs(&self) -> bool {
        self.run_us.load(Ordering::Relaxed) < PREFETCH_BELOW.as_micros() as u64
    }

    /// How many jobs to prefetch for this queue's jobs (when they are short):
    /// as many as the worker's handlers run in [`PREFETCH_WAIT`] at their
    /// average run time, at least the concurrency, at most the prefetch.
    pub fn prefetch(&self, shared: &Shared) -> usize {
        let avg = self.run_us.load(Ordering::Relaxed).max(1);
        let fit =
            (shared.concurrency as u64).saturating_mul(PREFETCH_WAIT.as_micros() as u64) / avg;
        let floor = shared.concurrency.min(shared.prefetch);
        usize::try_from(fit)
            .unwrap_or(usize::MAX)
            .clamp(floor, shared.prefetch)
    }
}
