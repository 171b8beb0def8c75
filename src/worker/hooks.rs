//! In-process lifecycle hooks: the embedding app hears of every run of a job.

use std::time::Duration;

use crate::JobId;

/// The job type name hooks and metrics see for a body that does not decode as
/// a job envelope (it is dead-lettered unrun).
///
/// ```
/// assert_eq!(redjob::worker::UNDECODABLE, "(undecodable)");
/// ```
pub const UNDECODABLE: &str = "(undecodable)";

/// One run of a job, as [`Hooks`] see it.
///
/// ```
/// use std::time::Duration;
/// use redjob::worker::JobRun;
///
/// fn label(run: &JobRun<'_>) -> String {
///     format!("{}/{} (attempt {})", run.queue, run.job, run.attempt)
/// }
/// let id = "0000000000abcdefghijklmnopqrstuv".parse()?;
/// let run = JobRun::new(id, "emails", "welcome", 2, Duration::ZERO);
/// assert_eq!(label(&run), "emails/welcome (attempt 2)");
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct JobRun<'a> {
    /// The job's id.
    pub id: JobId,
    /// The queue it came from.
    pub queue: &'a str,
    /// The job type's name; [`UNDECODABLE`] when the body is not a job envelope.
    pub job: &'a str,
    /// This delivery's number, from 1. In the end hooks, that of the latest
    /// delivery merged into the run (a job this worker fetched again while
    /// it ran: RELIABILITY.md, "One run per job per worker"), which its
    /// retry or dead letter counts.
    pub attempt: u32,
    /// How long the job waited to run: from when it was due (sent, its delay
    /// over, or its retry's backoff over) until its handler started, on the
    /// backend's clock then the worker's.
    pub waited: Duration,
}

/// Why a run was stopped before its outcome was recorded. The job is not lost:
/// it runs again unless it was deleted.
///
/// ```
/// use redjob::worker::CancelReason;
///
/// assert_eq!(CancelReason::Deleted.as_str(), "deleted");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CancelReason {
    /// The job was cancelled or deleted while it ran (an operator's
    /// [`Inspect::cancel`](crate::inspect::Inspect::cancel), a purge, or the
    /// queue deleted). It does not run again.
    Deleted,
    /// The lease was lost: it ran out before a renewal reached the backend (an
    /// unreachable or stalled Redis), and the job may have been delivered to
    /// another worker. It runs again.
    LeaseLost,
    /// The worker shut down and the run was still going after the grace
    /// period. It runs again once its lease ends.
    Shutdown,
}

impl CancelReason {
    /// A short lowercase name: `deleted`, `lease_lost`, `shutdown`.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::Deleted => "deleted",
            CancelReason::LeaseLost => "lease_lost",
            CancelReason::Shutdown => "shutdown",
        }
    }
}

/// Lifecycle hooks for the app that embeds a worker: add them with
/// [`WorkerBuilder::hooks`](super::WorkerBuilder::hooks). Every method has a
/// no-op default; implement the ones you need.
///
/// A run starts with [`started`](Self::started) and ends with exactly one of
/// [`succeeded`](Self::succeeded), [`retried`](Self::retried),
/// [`dead_lettered`](Self::dead_lettered), [`cancelled`](Self::cancelled) or
/// [`throttled`](Self::throttled), each with the handler's run time. An end hook comes alone, with a zero run
/// time, when the handler never ran: a job dead-lettered unrun (a body that
/// does not decode, a job type no worker knew for
/// [`unknown_jobs_retry_for`](super::WorkerBuilder::unknown_jobs_retry_for), a
/// body over the queue's maxsize, more deliveries than `max_attempts`), or the
/// rare panic in the worker before the handler started. A prefetched job
/// released unstarted at shutdown, or put back for a worker that knows its
/// type, gets nothing.
///
/// The end hooks are called when the run ends, just before its outcome is
/// written to the queue (in a batch). If that write cannot land before the
/// lease runs out (Redis away for longer than the lease), the outcome is lost
/// and the job runs again: the hooks then hear of that run too. A job
/// cancelled or deleted while it runs is reported
/// [`cancelled`](Self::cancelled) when the worker learns of it before the
/// handler returns: at once, from the notice the cancel sends (a worker that
/// missed it learns at the lease's next renewal, every third of the lease,
/// and reads why the lease is gone: a handler that returns during that
/// read is reported once it is known), and the run is stopped. A handler
/// that returns before that is reported
/// with its own outcome (`succeeded`, say), though its settle then finds the
/// job gone and the queue's history says cancelled. Hooks run on
/// the job's task (those told after that read, on a task of their own): keep them quick and hand slow work to a channel or a spawned
/// task. A hook that panics is logged and ignored.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use redjob::worker::{Hooks, JobRun};
///
/// #[derive(Default)]
/// struct Failures(AtomicU64);
///
/// impl Hooks for Failures {
///     fn dead_lettered(&self, run: &JobRun<'_>, _took: Duration, error: &str) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///         eprintln!("{} {} is dead: {error}", run.job, run.id);
///     }
/// }
///
/// let hooks = Failures::default();
/// # let run = JobRun::new("0000000000abcdefghijklmnopqrstuv".parse().unwrap(), "q", "job", 1, Duration::ZERO);
/// hooks.dead_lettered(&run, Duration::ZERO, "boom");
/// assert_eq!(hooks.0.load(Ordering::Relaxed), 1);
/// ```
pub trait Hooks: Send + Sync + 'static {
    /// The handler is about to run.
    fn started(&self, run: &JobRun<'_>) {
        let _ = run;
    }

    /// The handler returned `Ok`.
    fn succeeded(&self, run: &JobRun<'_>, took: Duration) {
        let _ = (run, took);
    }

    /// The run failed (an error, a panic, a timeout) and the job runs again
    /// after `retry_in`.
    fn retried(&self, run: &JobRun<'_>, took: Duration, error: &str, retry_in: Duration) {
        let _ = (run, took, error, retry_in);
    }

    /// The job was moved to the dead-letter queue with `error` as the reason.
    fn dead_lettered(&self, run: &JobRun<'_>, took: Duration, error: &str) {
        let _ = (run, took, error);
    }

    /// The run was stopped, or its outcome dropped, for `why`.
    fn cancelled(&self, run: &JobRun<'_>, took: Duration, why: CancelReason) {
        let _ = (run, took, why);
    }

    /// The handler said a dependency throttles it
    /// ([`JobError::rate_limited`](crate::JobError::rate_limited)): the job
    /// and its queue wait `retry_in` (capped at the worker's
    /// [`max_throttle`](crate::worker::WorkerBuilder::max_throttle)).
    fn throttled(&self, run: &JobRun<'_>, took: Duration, retry_in: Duration) {
        let _ = (run, took, retry_in);
    }
}

impl<'a> JobRun<'a> {
    /// A run built by hand (the worker builds them), e.g. to test [`Hooks`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::worker::JobRun;
    ///
    /// let id = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
    /// let run = JobRun::new(id, "emails", "welcome", 2, Duration::from_millis(5));
    /// assert_eq!((run.queue, run.attempt), ("emails", 2));
    /// ```
    pub fn new(id: JobId, queue: &'a str, job: &'a str, attempt: u32, waited: Duration) -> Self {
        JobRun {
            id,
            queue,
            job,
            attempt,
            waited,
        }
    }
}

/// Shared hooks: keep a clone to look at what they saw.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use redjob::testing::TestKit;
/// use redjob::worker::{Hooks, JobRun};
/// use redjob::{Job, JobContext, JobError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "hooks-arc-doc")]
/// struct Noop;
/// impl Job for Noop {
///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// }
///
/// #[derive(Default)]
/// struct Started(AtomicU64);
/// impl Hooks for Started {
///     fn started(&self, _: &JobRun<'_>) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let started = Arc::new(Started::default());
/// let kit = TestKit::new().hooks(started.clone()); // or WorkerBuilder::hooks
/// kit.client().enqueue(&Noop).await?;
/// kit.run_until_idle().await?;
/// assert_eq!(started.0.load(Ordering::Relaxed), 1);
/// # Ok(()) }
/// ```
impl<H: Hooks + ?Sized> Hooks for std::sync::Arc<H> {
    fn started(&self, run: &JobRun<'_>) {
        (**self).started(run)
    }

    fn succeeded(&self, run: &JobRun<'_>, took: Duration) {
        (**self).succeeded(run, took)
    }

    fn retried(&self, run: &JobRun<'_>, took: Duration, error: &str, retry_in: Duration) {
        (**self).retried(run, took, error, retry_in)
    }

    fn dead_lettered(&self, run: &JobRun<'_>, took: Duration, error: &str) {
        (**self).dead_lettered(run, took, error)
    }

    fn cancelled(&self, run: &JobRun<'_>, took: Duration, why: CancelReason) {
        (**self).cancelled(run, took, why)
    }

    fn throttled(&self, run: &JobRun<'_>, took: Duration, retry_in: Duration) {
        (**self).throttled(run, took, retry_in)
    }
}
