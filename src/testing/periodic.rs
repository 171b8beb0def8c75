//! Periodic schedules under the kit's clock: the kit enqueues their ticks as a
//! worker running all along would, through the backend's [`tick`](Backend::tick)
//! (so a paused schedule skips, and each tick is enqueued once).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Result;
use crate::backend::memory::MemoryBackend;
use crate::contract::admin::{Missed, Tick, Ticked};
use crate::contract::backend::Backend;
use crate::contract::queues::QueueOptions;
use crate::job::Job;
use crate::worker::{Periodic, Ticker, tick_skipped};

/// A schedule the kit ticks.
pub(super) struct KitTicker {
    pub t: Ticker,
    /// Ticks up to this time (Unix ms) were dealt with.
    covered: AtomicU64,
}

impl KitTicker {
    /// `p`, ticking after `now_ms`.
    pub fn new(p: Periodic, now_ms: u64) -> KitTicker {
        KitTicker {
            t: Ticker::new(p),
            covered: AtomicU64::new(now_ms),
        }
    }

    /// Its next tick not dealt with yet.
    pub fn next_ms(&self) -> Option<u64> {
        self.t
            .p
            .schedule
            .next_after(self.covered.load(Ordering::Relaxed))
    }

    /// Enqueues tick `at` (a catch-up: only when an earlier one was recorded);
    /// whether it was enqueued. A tick whose job cannot be enqueued (over its
    /// queue's maxsize) is logged and skipped, as a worker skips it.
    async fn tick(&self, backend: &MemoryBackend, at: u64, catch_up: bool) -> Result<bool> {
        let p = &self.t.p;
        let tick = Tick {
            name: &p.name,
            at_ms: at,
            catch_up,
            next_ms: p.schedule.next_after(at),
        };
        match backend
            .tick(&p.queue, &tick, &self.t.msg, &QueueOptions::default())
            .await
        {
            Ok(r) => Ok(matches!(r, Ticked::Enqueued { .. })),
            // as a worker's: the schedule ticks on
            Err(e) if tick_skipped(&e, &p.name, at) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// For its listing in the kit's `Debug`.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}) on {:?}",
            self.t.p.name, self.t.p.schedule, self.t.p.queue
        )
    }
}

/// Enqueues the first tick of each of `tickers` due by the backend's clock
/// and not dealt with yet, oldest first, and goes on from now; how many were
/// enqueued (a paused schedule's are skipped).
pub(super) async fn tick_due(
    backend: &MemoryBackend,
    tickers: &[std::sync::Arc<KitTicker>],
) -> Result<u64> {
    let now = backend.clock().now_ms();
    // a schedule's first tick not dealt with, when due: the clock moved past
    // several only outside `advance` (a handler's sleep under the paused
    // clock, or `clock().advance`), and a worker then enqueues the first one
    // and goes on from now, as here
    let mut due: Vec<(u64, usize)> = tickers
        .iter()
        .enumerate()
        .filter_map(|(i, k)| Some((k.next_ms().filter(|n| *n <= now)?, i)))
        .collect();
    due.sort_unstable();
    let mut n = 0;
    for (at, i) in due {
        if tickers[i].tick(backend, at, false).await? {
            n += 1;
        }
        tickers[i].covered.fetch_max(at, Ordering::Relaxed);
    }
    for k in tickers {
        k.covered.fetch_max(now, Ordering::Relaxed);
    }
    Ok(n)
}

/// After a downtime ending now: each schedule's [`Missed`] policy decides
/// about the ticks it missed, as a worker starting now would. How many were
/// enqueued.
pub(super) async fn after_downtime(
    backend: &MemoryBackend,
    tickers: &[std::sync::Arc<KitTicker>],
) -> Result<u64> {
    let now = backend.clock().now_ms();
    let mut n = 0;
    for k in tickers {
        let last = k.t.p.schedule.last_before(now.saturating_add(1));
        if let (Missed::RunLast, Some(last)) = (k.t.p.missed, last)
            && last > k.covered.load(Ordering::Relaxed)
            && k.tick(backend, last, true).await?
        {
            n += 1;
        }
        k.covered.fetch_max(now, Ordering::Relaxed);
    }
    Ok(n)
}

impl super::TestKit {
    /// Ticks `job` at every tick of `schedule` under the kit's clock, as
    /// [`WorkerBuilder::periodic`](crate::worker::WorkerBuilder::periodic)
    /// does on a worker: [`advance`](Self::advance) enqueues each tick it goes
    /// through at its time and runs it before the next.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::ops::Schedule;
    /// use redjob::testing::TestKit;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "kit-sweep")]
    /// struct Sweep;
    /// impl Job for Sweep {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let kit = TestKit::new().periodic(Schedule::every(Duration::from_secs(60))?, Sweep);
    /// let run = kit.advance(Duration::from_secs(3600)).await?;
    /// assert_eq!((run.ticks, run.processed), (60, 60));
    /// # Ok(()) }
    /// ```
    pub fn periodic<J: Job>(self, schedule: crate::ops::Schedule, job: J) -> Self {
        self.periodic_job(Periodic::new(schedule, job))
    }

    /// Ticks a periodic job with its options (name, queue, missed ticks); two
    /// of one queue may not share a name. What a worker's `build` would
    /// refuse, the kit's next run refuses.
    pub fn periodic_job(mut self, periodic: Periodic) -> Self {
        let twice = self
            .tickers
            .iter()
            .any(|t| t.t.p.queue == periodic.queue && t.t.p.name == periodic.name);
        if let Err(e) = periodic.check() {
            self.invalid.get_or_insert(("periodic", e.to_string()));
        } else if twice {
            self.invalid.get_or_insert((
                "periodic",
                format!(
                    "two periodic jobs of queue {:?} are named {:?}: name each with Periodic::name",
                    periodic.queue, periodic.name
                ),
            ));
        }
        let now = self.clock().now_ms();
        self.tickers.push(Arc::new(KitTicker::new(periodic, now)));
        self
    }

    /// Moves the clock forward by `d` as if no worker ran meanwhile: no job
    /// runs and no periodic tick is enqueued. Then each schedule's
    /// [`Missed`] policy decides about the ticks it
    /// missed, as a worker starting now would: `RunLast` enqueues the last
    /// one (when an earlier tick was recorded), `Skip` none. Nothing runs
    /// until the next [`run_until_idle`](Self::run_until_idle) or
    /// [`advance`](Self::advance). Returns how many ticks it enqueued.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::ops::{Missed, Schedule};
    /// use redjob::testing::TestKit;
    /// use redjob::worker::Periodic;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "kit-hourly")]
    /// struct Hourly;
    /// impl Job for Hourly {
    ///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let hourly = Schedule::every(Duration::from_secs(3600))?;
    /// let kit = TestKit::new().periodic_job(Periodic::new(hourly, Hourly).missed(Missed::RunLast));
    /// assert_eq!(kit.advance(Duration::from_secs(2 * 3600)).await?.ticks, 2);
    /// // down for 5 hours: RunLast enqueues the last tick missed, once
    /// assert_eq!(kit.downtime(Duration::from_secs(5 * 3600)).await?, 1);
    /// assert_eq!(kit.run_until_idle().await?.processed, 1);
    /// # Ok(()) }
    /// ```
    pub async fn downtime(&self, d: Duration) -> Result<u64> {
        self.check_setup()?;
        self.clock().advance(d);
        after_downtime(&self.backend, &self.tickers).await
    }
}
