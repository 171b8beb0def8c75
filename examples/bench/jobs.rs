//! The bench's jobs and what their handlers record.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use redjob::{Job, JobContext, JobError};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// The throughput job: payload `{"i": n}`, a handler that records that it ran.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench", queue = "bench")]
pub struct Noop {
    pub i: u64,
}

/// [`Noop`], unique by a key derived from its arguments (`#[job(unique)]`): for
/// the unique enqueue figure.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_unique", queue = "bench_enqueue", unique)]
pub struct UniqueNoop {
    pub i: u64,
}

/// [`Noop`] with a concurrency key (`#[job(concurrency_key = "k")]`, one at
/// a time per key): for the keyed figures.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_keyed", queue = "bench_keyed", concurrency_key = "k")]
pub struct KeyedNoop {
    pub i: u64,
    pub k: u32,
}

/// A batch's callback: tells the tally it ran.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_batch_done", queue = "bench")]
pub struct BatchDone;

/// A job that carries a time (Unix µs): its enqueue time or its due time. The
/// handler records its start minus that.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_timed", queue = "bench_timed")]
pub struct Timed {
    pub i: u64,
    pub t: u64,
}

/// Runs per job index, how many ran, and the recorded lags.
pub struct Tally {
    runs: Vec<AtomicU32>,
    done: AtomicUsize,
    target: usize,
    pub all_done: Notify,
    /// A batch's callback ran.
    pub callback: Notify,
    lags_us: Mutex<Vec<i64>>,
}

impl Tally {
    pub fn new(n: usize) -> Tally {
        Tally {
            runs: (0..n).map(|_| AtomicU32::new(0)).collect(),
            done: AtomicUsize::new(0),
            target: n,
            all_done: Notify::new(),
            callback: Notify::new(),
            lags_us: Mutex::new(Vec::with_capacity(n)),
        }
    }

    pub fn ran(&self, i: u64) {
        if let Some(c) = self.runs.get(i as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if self.done.fetch_add(1, Ordering::AcqRel) + 1 == self.target {
            self.all_done.notify_one();
        }
    }

    /// How many runs were recorded so far.
    pub fn done(&self) -> usize {
        self.done.load(Ordering::Acquire)
    }

    /// (duplicate executions, jobs that never ran).
    pub fn check(&self) -> (u64, u64) {
        let mut dup = 0;
        let mut missing = 0;
        for c in &self.runs {
            match c.load(Ordering::Relaxed) {
                0 => missing += 1,
                n => dup += u64::from(n - 1),
            }
        }
        (dup, missing)
    }

    pub fn lags_ms(&self) -> Vec<f64> {
        let mut v: Vec<f64> = self
            .lags_us
            .lock()
            .unwrap()
            .iter()
            .map(|us| *us as f64 / 1000.0)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    }
}

pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros() as u64
}

impl Job for UniqueNoop {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

impl Job for Noop {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<std::sync::Arc<Tally>>()?.ran(self.i);
        Ok(())
    }
}

impl Job for BatchDone {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<std::sync::Arc<Tally>>()?.callback.notify_one();
        Ok(())
    }
}

impl Job for KeyedNoop {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<std::sync::Arc<Tally>>()?.ran(self.i);
        Ok(())
    }
}

impl Job for Timed {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let lag = now_us() as i64 - self.t as i64;
        let tally = ctx.data::<std::sync::Arc<Tally>>()?;
        tally.lags_us.lock().unwrap().push(lag);
        tally.ran(self.i);
        Ok(())
    }
}

/// The `q` quantile of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[k]
}

/// [`Noop`] with a 1 KB payload: for the history's bytes per entry.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_kb", queue = "bench_kb")]
pub struct Kilobyte {
    pub i: u64,
    pub pad: String,
}

impl Job for Kilobyte {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        ctx.data::<std::sync::Arc<Tally>>()?.ran(self.i);
        Ok(())
    }
}

/// When the last child (of a flow, or of a chain built by hand) finished,
/// Unix µs: the next parent's start is timed from it.
pub static CHILD_END_US: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A flow's child: records its end.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_flow_child", queue = "bench")]
pub struct FlowChild;

impl Job for FlowChild {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        CHILD_END_US.store(now_us(), Ordering::SeqCst);
        Ok(())
    }
}

/// A parent: records its start minus its child's end, and that it ran.
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_flow_parent", queue = "bench")]
pub struct FlowParent {
    pub i: u64,
}

impl Job for FlowParent {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let lag = now_us() as i64 - CHILD_END_US.load(Ordering::SeqCst) as i64;
        let tally = ctx.data::<std::sync::Arc<Tally>>()?;
        tally.lags_us.lock().unwrap().push(lag);
        tally.ran(self.i);
        Ok(())
    }
}

/// A chain built by hand: a job that records its end, then enqueues its
/// parent as its last step (what a flow spares).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_hand_child", queue = "bench")]
pub struct HandChild {
    pub i: u64,
}

impl Job for HandChild {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let client = ctx.data::<redjob::Client>()?;
        // its work is done: the parent's wait starts
        CHILD_END_US.store(now_us(), Ordering::SeqCst);
        client
            .enqueue(&FlowParent { i: self.i })
            .await
            .map_err(JobError::retry)?;
        Ok(())
    }
}

/// A `Timed` job that then runs 20 ms (phase 20's idle fleet: its workers
/// are busy a while after each start).
#[derive(Serialize, Deserialize, Job)]
#[job(name = "bench_napping", queue = "bench_fleet")]
pub struct Napping {
    pub i: u64,
    pub t: u64,
}

impl Job for Napping {
    async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
        let lag = now_us() as i64 - self.t as i64;
        let tally = ctx.data::<std::sync::Arc<Tally>>()?;
        tally.lags_us.lock().unwrap().push(lag);
        tally.ran(self.i);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        Ok(())
    }
}
