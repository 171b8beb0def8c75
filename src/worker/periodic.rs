//! Periodic jobs: every worker process ticks every schedule it was given, and
//! the backend enqueues each tick once however many try (see
//! [`Backend::tick`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::contract::admin::{BeatSchedule, Missed, Schedule, Tick, Ticked};
use crate::contract::backend::Backend;
use crate::contract::keyed::Keyed;
use crate::contract::queues::SendMessage;
use crate::job::Job;
use crate::{Error, Result};

/// A periodic job: a job value enqueued at every tick of a [`Schedule`].
/// Given to [`WorkerBuilder::periodic_job`](super::WorkerBuilder::periodic_job);
/// [`WorkerBuilder::periodic`](super::WorkerBuilder::periodic) is the short
/// form.
///
/// Every worker process with the same periodic job ticks it; each tick is
/// enqueued once (its id made from the tick and the name, guarded by the
/// schedule's last tick in the backend, on the backend's clock). The job goes
/// to its type's queue at its type's priority, due at the tick; it runs as any
/// job, with retries and dead letters.
///
/// ```
/// use redjob::{Job, JobContext, JobError, Worker};
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::ops::{Missed, Schedule};
/// use redjob::worker::Periodic;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(queue = "reports")]
/// struct DailyReport { region: String }
/// impl Job for DailyReport {
///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// }
///
/// let eu = DailyReport { region: "eu".into() };
/// let us = DailyReport { region: "us".into() };
/// let worker = Worker::builder(MemoryBackend::new())
///     .periodic(Schedule::cron("0 6 * * *")?, eu) // named "DailyReport"
///     .periodic_job(
///         Periodic::new(Schedule::cron("0 6 * * *")?.in_zone(chrono_tz::America::New_York), us)
///             .name("daily-report-us")
///             .missed(Missed::RunLast),
///     )
///     .build()?;
/// # let _ = worker;
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Debug)]
pub struct Periodic {
    pub(crate) name: String,
    pub(crate) queue: String,
    pub(crate) job: &'static str,
    pub(crate) schedule: Schedule,
    pub(crate) missed: Missed,
    pub(crate) priority: i8,
    /// The job's envelope, or why it could not be encoded.
    pub(crate) body: std::result::Result<Vec<u8>, String>,
    /// The job's concurrency key (its type's, from its arguments), or why it
    /// could not be read.
    pub(crate) keyed: std::result::Result<Option<Keyed>, String>,
}

impl Periodic {
    /// `job` at every tick of `schedule`, named after its job type.
    pub fn new<J: Job>(schedule: Schedule, job: J) -> Periodic {
        Periodic {
            name: J::NAME.to_string(),
            queue: J::OPTIONS.queue.to_string(),
            job: J::NAME,
            schedule,
            missed: Missed::Skip,
            priority: J::OPTIONS.priority,
            // stored once, sent at every tick: no one span's trace
            body: crate::job::encode_untraced(&job).map_err(|e| e.to_string()),
            keyed: job
                .concurrency_key()
                .map(|k| {
                    k.map(|key| Keyed {
                        key,
                        per_key: J::OPTIONS.per_key,
                    })
                })
                .map_err(|e| e.to_string()),
        }
    }

    /// The schedule's name, unique within its queue: the ticks already
    /// enqueued are recorded under it, so a renamed schedule starts afresh.
    /// Defaults to the job type's name. 1 to 200 bytes, no control
    /// character, not ending in `:paused` or `:next` (the worker's build
    /// refuses it).
    pub fn name(mut self, name: impl Into<String>) -> Periodic {
        self.name = name.into();
        self
    }

    /// The queue its jobs go to. Defaults to the job type's queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Periodic {
        self.queue = queue.into();
        self
    }

    /// What to do about ticks missed while no worker ran. Defaults to
    /// [`Missed::Skip`].
    pub fn missed(mut self, missed: Missed) -> Periodic {
        self.missed = missed;
        self
    }

    /// Checks it before a worker starts.
    pub(crate) fn check(&self) -> Result<()> {
        crate::contract::queues::validate::queue_name(&self.queue)?;
        crate::contract::admin::schedule_name(&self.name)?;
        match &self.keyed {
            Err(e) => {
                return Err(Error::InvalidValue {
                    what: "periodic job",
                    reason: format!("{}: cannot read its concurrency key: {e}", self.name),
                });
            }
            Ok(Some(k)) => k.check()?,
            Ok(None) => {}
        }
        if let Err(e) = &self.body {
            return Err(Error::InvalidValue {
                what: "periodic job",
                reason: format!("{}: cannot encode the job: {e}", self.name),
            });
        }
        Ok(())
    }
}

/// A periodic job as a worker ticks it.
pub(crate) struct Ticker {
    pub p: Periodic,
    pub msg: SendMessage,
    /// The next tick, Unix ms (0: none, or not known yet).
    pub next_ms: AtomicU64,
    /// A tick of it was recorded in the backend (by this worker or another),
    /// with the tick after: the heartbeat no longer carries its next tick.
    pub ticked: std::sync::atomic::AtomicBool,
}

impl Ticker {
    pub fn new(p: Periodic) -> Ticker {
        let body = p.body.clone().unwrap_or_default();
        let mut msg = SendMessage::new(body).priority(p.priority);
        if let Ok(Some(k)) = &p.keyed {
            msg = msg.keyed(k.clone());
        }
        Ticker {
            p,
            msg,
            next_ms: AtomicU64::new(0),
            ticked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// What the worker registry lists about it, with its next tick (see
    /// [`Ticker::served`] for it without).
    pub fn listed(&self) -> BeatSchedule {
        let next = self.next_ms.load(Ordering::Relaxed);
        BeatSchedule {
            next_ms: (next > 0).then_some(next),
            ..self.served()
        }
    }

    /// Its name, queue, job, schedule and next tick, as a beat names it
    /// beside what the worker serves (see [`Ticker::served`]).
    pub fn next_only(&self) -> BeatSchedule {
        let next = self.next_ms.load(Ordering::Relaxed);
        BeatSchedule {
            name: self.p.name.clone(),
            queue: self.p.queue.clone(),
            // (a reader of an earlier release needs these two)
            job: self.p.job.to_string(),
            schedule: self.p.schedule.to_string(),
            next_ms: (next > 0).then_some(next),
            body: None,
            priority: 0,
            key: None,
        }
    }

    /// Whether its beat entry is due: until a tick of it was recorded.
    pub fn unticked(&self) -> bool {
        !self.ticked.load(Ordering::Relaxed)
    }

    /// What the worker serves of it: all the registry lists but the next tick.
    pub fn served(&self) -> BeatSchedule {
        BeatSchedule {
            name: self.p.name.clone(),
            queue: self.p.queue.clone(),
            job: self.p.job.to_string(),
            schedule: self.p.schedule.to_string(),
            next_ms: None,
            body: self
                .p
                .body
                .as_ref()
                .ok()
                .and_then(|b| String::from_utf8(b.clone()).ok()),
            priority: self.p.priority,
            key: self.msg.keyed.clone(),
        }
    }
}

/// Backoff after a failed call: 100 ms doubling up to 2 s.
/// Whether tick `at` of schedule `name` failed for good (its job over its
/// queue's maxsize, or a value the queue refuses): then it is logged, and the
/// schedule ticks on without it (the test kit's ticks too).
pub(crate) fn tick_skipped(e: &Error, name: &str, at: u64) -> bool {
    let skipped = matches!(
        e,
        Error::MessageTooLarge { .. } | Error::InvalidValue { .. }
    );
    if skipped {
        tracing::error!(periodic = %name, tick = at, error = %e, "cannot enqueue the periodic job; tick skipped");
    }
    skipped
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64 << failures.min(5)).min(Duration::from_secs(2))
}

/// Sleeps `d`; false when `stop` came first.
async fn sleep(d: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stop.cancelled() => false,
    }
}

/// Ticks `t` until `stop`.
pub(crate) async fn run<B: Backend>(
    backend: B,
    ticks: super::ticks::Ticks,
    t: Arc<Ticker>,
    stop: CancellationToken,
) {
    let name = t.p.name.as_str();
    tracing::info!(periodic = name, queue = %t.p.queue, schedule = %t.p.schedule, "ticking periodic job");
    let Some(mut now) = resync(&backend, &ticks, &t, &stop).await else {
        return;
    };
    loop {
        let Some(at) = t.p.schedule.next_after(now) else {
            tracing::info!(periodic = name, "schedule never ticks again");
            t.next_ms.store(0, Ordering::Relaxed);
            return;
        };
        t.next_ms.store(at, Ordering::Relaxed);
        if !sleep(Duration::from_millis(at.saturating_sub(now)), &stop).await {
            return;
        }
        // a tick not enqueued before the next is due is missed
        let window =
            t.p.schedule
                .next_after(at)
                .map_or(Duration::MAX, |n| Duration::from_millis(n - at));
        match enqueue(&ticks, &t, at, false, window, &stop).await {
            Some(Some(call)) => now = resume_from(&t.p.schedule, at, call),
            Some(None) => match resync(&backend, &ticks, &t, &stop).await {
                Some(n) => now = n,
                None => return,
            },
            None => return,
        }
    }
}

/// The backend's clock (retrying until it answers); with [`Missed::RunLast`],
/// enqueues the last tick before it if it was missed. `None` on `stop`.
async fn resync<B: Backend>(
    backend: &B,
    ticks: &super::ticks::Ticks,
    t: &Arc<Ticker>,
    stop: &CancellationToken,
) -> Option<u64> {
    let mut failures = 0;
    let now = loop {
        match backend.now_ms().await {
            Ok(now) => break now,
            Err(e) => {
                tracing::warn!(periodic = %t.p.name, error = %e, "cannot read the backend's clock; retrying");
                failures += 1;
                if !sleep(backoff(failures), stop).await {
                    return None;
                }
            }
        }
    };
    let last = t.p.schedule.last_before(now.saturating_add(1));
    if let (Missed::RunLast, Some(last)) = (t.p.missed, last) {
        return match enqueue(ticks, t, last, true, Duration::MAX, stop).await? {
            Some(call) => Some(resume_from(&t.p.schedule, now, call)),
            None => Some(now),
        };
    }
    Some(now)
}

/// The backend's clock (Unix ms) when a tick's call that succeeded started
/// (its answer's clock less the call's time) and when it answered.
type Call = (u64, u64);

/// Where a schedule goes on from after the call `call` that dealt with what
/// was due at `after` (Unix ms): a value whose next tick is the one to
/// enqueue next. A tick that came due while the call ran is still in its
/// window when the answer comes (the last of them; those before it are
/// missed): it is enqueued at once, late. Ticks that came due before the
/// call started (a clock moved on while the worker slept) are skipped, as
/// always; else the next tick after the answer.
fn resume_from(schedule: &Schedule, after: u64, (start, end): Call) -> u64 {
    let from = start.max(after);
    match schedule.last_before(end.saturating_add(1)) {
        Some(m) if m > from => m - 1,
        _ => end.max(after),
    }
}

/// Enqueues tick `at` (retrying failures for up to `window`). Returns the
/// backend's clock when the call that succeeded started and when it
/// answered, `Some(None)` when the tick was given up, `None` on `stop`.
async fn enqueue(
    ticks: &super::ticks::Ticks,
    t: &Arc<Ticker>,
    at: u64,
    catch_up: bool,
    window: Duration,
    stop: &CancellationToken,
) -> Option<Option<Call>> {
    let tick = Tick {
        name: &t.p.name,
        at_ms: at,
        catch_up,
        next_ms: t.p.schedule.next_after(at),
    };
    let started = tokio::time::Instant::now();
    let mut failures = 0;
    loop {
        let asked = tokio::time::Instant::now();
        let r = ticks.tick(t, &tick).await;
        // the backend's clock when this call started: its answer's less the call's time
        let call = |now_ms: u64| {
            let took = u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX);
            Some(Some((now_ms.saturating_sub(took), now_ms)))
        };
        if matches!(
            r,
            Ok(Ticked::Enqueued { .. } | Ticked::Done { .. } | Ticked::Paused { .. })
        ) && !catch_up
        {
            // the tick, and the one after, are recorded
            t.ticked.store(true, Ordering::Relaxed);
        }
        match r {
            Ok(Ticked::Enqueued { now_ms }) => {
                tracing::debug!(periodic = %t.p.name, tick = at, catch_up, "enqueued");
                return call(now_ms);
            }
            Ok(Ticked::Done { now_ms }) => return call(now_ms),
            Ok(Ticked::Paused { now_ms }) => {
                tracing::debug!(periodic = %t.p.name, tick = at, "paused: tick skipped");
                return call(now_ms);
            }
            Ok(Ticked::Early(wait)) => {
                if !sleep(wait, stop).await {
                    return None;
                }
            }
            Err(e) if tick_skipped(&e, &t.p.name, at) => return Some(None),
            Err(e) => {
                failures += 1;
                if started.elapsed() >= window {
                    tracing::warn!(periodic = %t.p.name, tick = at, error = %e, "tick missed: the backend failed until the next was due");
                    return Some(None);
                }
                tracing::warn!(periodic = %t.p.name, tick = at, error = %e, "enqueueing the tick failed; retrying");
                if !sleep(backoff(failures), stop).await {
                    return None;
                }
            }
        }
    }
}
