//! Runs the kit's workers until nothing is left to do now.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{RunReport, TestKit};
use crate::Result;
use crate::backend::memory::MemoryBackend;
use crate::contract::backend::Backend;
use crate::contract::stats::QueueStats;
use crate::contract::time::UnixMs;
use crate::worker::{Worker, WorkerBuilder};

/// The lease of the kit's workers (the default): a subscriber claims an event
/// waiting for its retry once it was idle this long.
pub(super) const LEASE: Duration = Duration::from_secs(30);

type Ended = std::result::Result<Result<()>, tokio::task::JoinError>;

impl TestKit {
    /// A worker's builder with the kit's settings.
    fn builder(&self, stop: &CancellationToken) -> WorkerBuilder<MemoryBackend> {
        let mut b = Worker::builder(self.backend.clone())
            .handle_signals(false)
            .retry(self.retry)
            .lease(LEASE)
            .grace_period(Duration::ZERO)
            .data_map(self.data.clone())
            .shutdown(stop.child_token())
            .sink(self.sink.clone());
        for h in &self.hooks {
            b = b.hooks(h.clone());
        }
        b
    }

    /// Whether nothing is due or running: no job, and no event for a kit
    /// subscriber.
    pub(super) fn idle(&self) -> bool {
        self.backend.is_idle()
            && self.subscribers.iter().all(|s| {
                !self
                    .backend
                    .subscriber_work(s.topic, &s.name, LEASE.as_millis() as u64)
                    .now
            })
    }

    /// When the next job, event retry or tick comes due after now, Unix ms.
    pub(super) fn next_due_ms(&self) -> Option<u64> {
        let lease = LEASE.as_millis() as u64;
        let events = self.subscribers.iter().filter_map(|s| {
            self.backend
                .subscriber_work(s.topic, &s.name, lease)
                .next_ms
        });
        let ticks = self.tickers.iter().filter_map(|t| t.next_ms());
        self.backend
            .next_due_ms()
            .into_iter()
            .chain(events)
            .chain(ticks)
            .min()
    }

    /// Starts a worker for each queue not served yet (and one for the
    /// subscribers), and waits for the backend's next change, until it is idle.
    pub(super) async fn drive(&self) -> Result<()> {
        let limit = RealTimeLimit::start(self.wait_limit);
        let mut expired = limit.expired;
        let mut changes = self.backend.changes();
        let mut served = HashSet::new();
        let mut workers = JoinSet::new();
        let stop = CancellationToken::new();
        if !self.subscribers.is_empty() {
            let mut b = self.builder(&stop).queues(Vec::<String>::new());
            for s in &self.subscribers {
                b = (s.register)(b);
            }
            let worker = b.build()?;
            workers.spawn(async move { worker.run().await.map(drop) });
        }
        let outcome = loop {
            changes.borrow_and_update();
            // idle, and no change while it looked (a handler that enqueued a
            // job and settled its event between the two looks of `idle`)
            if self.idle() && !changes.has_changed().unwrap_or(false) {
                break Ok(());
            }
            let new: Vec<String> = self
                .backend
                .queue_names()
                .into_iter()
                .filter(|q| !served.contains(q))
                .collect();
            if !new.is_empty() {
                served.extend(new.iter().cloned());
                match self.builder(&stop).queues(new).build() {
                    Ok(worker) => workers.spawn(async move { worker.run().await.map(drop) }),
                    Err(e) => break Err(e),
                };
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = &mut expired => break Err(self.not_idle()),
                Some(ended) = workers.join_next() => break Err(ended_early(ended)),
            }
        };
        stop.cancel();
        // a subscriber's read waiting for events returns at once (it would
        // hold the worker's stop up to its block of a second); a read that
        // started after the nudge touched the topic, so nudge again then
        self.clock().nudge();
        let mut first_err = outcome.err();
        loop {
            tokio::select! {
                ended = workers.join_next() => match ended {
                    Some(ended) => {
                        if let Err(e) = flatten(ended) {
                            first_err.get_or_insert(e);
                        }
                    }
                    None => break,
                },
                _ = changes.changed() => self.clock().nudge(),
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn not_idle(&self) -> crate::Error {
        let mut pending = Vec::new();
        for p in self.backend.pending() {
            let list = |m: &std::collections::BTreeMap<String, usize>| {
                m.iter()
                    .map(|(name, n)| format!("{n} {name}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut parts = Vec::new();
            if !p.running.is_empty() {
                parts.push(format!("running: {}", list(&p.running)));
            }
            if !p.due.is_empty() {
                parts.push(format!("due: {}", list(&p.due)));
            }
            pending.push(format!("queue {:?} {}", p.queue, parts.join("; ")));
        }
        for s in &self.subscribers {
            if let Some(info) = self.subscriber(s.topic, &s.name)
                && (info.lag > 0 || info.pending > 0)
            {
                pending.push(format!(
                    "subscriber {:?} of topic {:?}: {} not read, {} read and not settled",
                    s.name, s.topic, info.lag, info.pending
                ));
            }
        }
        crate::Error::NotIdle {
            waited: self.wait_limit,
            pending,
        }
    }

    pub(super) async fn totals(&self) -> Result<HashMap<String, QueueStats>> {
        let mut all = HashMap::new();
        for q in self.backend.queue_names() {
            all.insert(q.clone(), self.backend.stats(&q).await?);
        }
        Ok(all)
    }
}

fn flatten(ended: Ended) -> Result<()> {
    ended.map_err(|e| crate::Error::Crashed {
        task: "test kit worker",
        reason: e.to_string(),
    })?
}

/// A worker of the kit that stopped before it was told to.
fn ended_early(ended: Ended) -> crate::Error {
    match flatten(ended) {
        Err(e) => e,
        Ok(()) => crate::Error::Crashed {
            task: "test kit worker",
            reason: "stopped before the kit was idle".into(),
        },
    }
}

/// Fires after a span of real time, whatever tokio's clock does: a thread of its
/// own sleeps (a tokio timer would follow a paused clock, and a blocking task
/// would keep a paused clock from advancing). Dropping it ends the thread.
struct RealTimeLimit {
    expired: oneshot::Receiver<()>,
    _stop: std::sync::mpsc::Sender<()>,
}

impl RealTimeLimit {
    fn start(limit: Duration) -> Self {
        let (fire, expired) = oneshot::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(limit) {
                let _ = fire.send(());
            }
        });
        RealTimeLimit {
            expired,
            _stop: stop,
        }
    }
}

impl super::TestKit {
    /// Moves the clock forward by `d` (to the next whole millisecond, see
    /// [`Clock::advance`](crate::backend::memory::Clock::advance)) as a worker running all along would go through it:
    /// it stops at each time a job, a retry, an event's retry or a periodic
    /// tick comes due, runs what is due then until idle, and goes on. A job
    /// enqueued with `enqueue_in(job, d)` runs in `advance(d)`; an
    /// every-minute schedule ticks 60 times in `advance(1h)`, each tick's job
    /// run before the next tick. Returns what all the runs did together.
    ///
    /// A handler that keeps enqueueing work due within `d` keeps it going, as
    /// it would keep a worker busy; the whole `advance` may take
    /// [`wait_limit`](Self::wait_limit) of real time, then fails with
    /// [`Error::NotIdle`](crate::Error::NotIdle) saying how far it got, through
    /// how many stops, and how many were periodic ticks. Each stop costs real
    /// time (about a millisecond): a week of an every-minute schedule is
    /// 10,080 stops, more than the default 10 s allow. Give such a test a
    /// longer `wait_limit`, or use [`downtime`](Self::downtime) for a span in
    /// which no tick need run.
    ///
    /// The clock also moves while handlers run: in real time, or, under
    /// tokio's paused clock, by their sleeps and timeouts. What comes due
    /// meanwhile runs as soon as they are done (a tick that came due while a
    /// handler slept an hour is enqueued then, as a worker's would be if the
    /// ticks of one schedule ran one at a time), and the clock can end past
    /// `d`.
    pub async fn advance(&self, d: Duration) -> Result<RunReport> {
        let clock = self.clock();
        let start = clock.now_us();
        let began = std::time::Instant::now();
        let end_us = start.saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let end_us = end_us.div_ceil(1000).saturating_mul(1000);
        let mut report = self.run_until_idle().await?;
        let mut steps = 1u64;
        loop {
            let now_us = clock.now_us();
            let Some(next) = self.next_due_ms().map(|ms| ms.saturating_mul(1000)) else {
                break;
            };
            if next >= end_us {
                break;
            }
            if began.elapsed() >= self.wait_limit {
                return Err(self.advance_too_long(steps, &report, now_us, end_us));
            }
            // something already due (the clock moved while handlers ran)
            // runs now; otherwise the clock goes to it
            if next > now_us {
                clock.advance_exact(Duration::from_micros(next - now_us));
            }
            let run = self.run_until_idle().await?;
            steps += 1;
            if next <= now_us
                && run == RunReport::default()
                && self.next_due_ms() == Some(next / 1000)
            {
                // nothing could run of what is due (cannot happen unless a
                // backend call failed quietly): do not spin
                break;
            }
            report += run;
        }
        let now_us = clock.now_us();
        clock.advance_exact(Duration::from_micros(end_us.saturating_sub(now_us)));
        report += self.run_until_idle().await?;
        Ok(report)
    }

    /// Why an `advance` that went through `steps` stops (doing `done`) to
    /// `now_us` of `end_us` gave up at its wait limit: a schedule's ticks
    /// that are merely many, or jobs that kept coming due.
    fn advance_too_long(
        &self,
        steps: u64,
        done: &RunReport,
        now_us: u64,
        end_us: u64,
    ) -> crate::Error {
        let how_far = format!(
            "advance went through {steps} stops in its wait_limit of {:?} of real time, to {} of {}",
            self.wait_limit,
            UnixMs(now_us / 1000),
            UnixMs(end_us / 1000)
        );
        let why = if done.ticks.saturating_mul(2) >= steps {
            format!(
                "{} of them periodic ticks: for a span with that many, give the kit a longer `wait_limit`, or move the clock with `downtime` (no worker runs, a schedule's `Missed` policy applies)",
                done.ticks
            )
        } else {
            format!(
                "{} jobs run, {} retried: a handler that keeps enqueueing work due soon keeps it going; if the work is merely long, give the kit a longer `wait_limit`",
                done.processed, done.retried
            )
        };
        crate::Error::NotIdle {
            waited: self.wait_limit,
            pending: vec![format!("{how_far}; {why}")],
        }
    }
}
