//! One task per queue keeps the held deliveries' leases and settles finished ones.
//!
//! It renews every held lease (running jobs and finished ones whose settle has not
//! landed) in one call every third of the lease (a running job's beside a
//! settle call under way, however long that takes), settles finished ones in one
//! batched call, retries a failed settle by itself with backoff, and gives a run
//! up (cancels it, settles nothing) once its lease has run out on the worker's
//! clock without a renewal. A renewal whose reply was lost is resolved by reading
//! the job's score before the next call, so it never costs the delivery.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::hooks::CancelReason;
use super::leases::Leases;
use crate::JobId;
use crate::contract::attempts::RunBy;
use crate::contract::backend::Backend;
use crate::contract::history::History;
use crate::contract::leases::Retention;
use crate::contract::leases::{Settle, Settled};

mod batch;
mod renew;

use renew::watchdog;

/// What the settler is told.
pub(crate) enum Event {
    /// A run ended (its outcome is in the lease table), or a released delivery
    /// was added: settle soon.
    Finished,
    /// Shutdown: settle what is finished, give up what still runs, exit.
    Drain,
    /// Running jobs of the queue may have been cancelled or deleted: renew
    /// the leases now (a renewal finds those gone and stops their runs).
    Renew,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Succeeded, with its result (JSON) when it returns one.
    Ack {
        result: Option<Vec<u8>>,
    },
    Retry {
        delay: Duration,
        error: String,
    },
    Dead {
        error: String,
    },
    /// Not a failed attempt: visible again after `delay` with the delivery not
    /// counted (interrupted by shutdown, or a job type this worker does not know).
    Release {
        delay: Duration,
    },
    /// A dependency throttles the job: visible again after `delay`, the
    /// delivery not counted (unless throttled too often in a row), and its
    /// queue held until then.
    Throttle {
        delay: Duration,
        error: String,
        /// Only the job's concurrency key is held.
        key: bool,
        /// A queue's throttle: its number in the worker's hold of the queue
        /// (see [`Hold::throttle`](super::per_queue::Hold::throttle)), which
        /// its settle's landing ends.
        hold: Option<u64>,
    },
}

/// Most entries per settle call.
const MAX_BATCH: usize = 4096;
/// The largest ack body a settle call carries back for its history entry
/// (a larger one is read by the backend, rather than sent twice).
pub(crate) const MAX_SENT_BODY: usize = 1024;

/// Most bytes of results per settle call (beyond its first entry's).
const MAX_BYTES: usize = 8 << 20;
/// How long a settle waits for more of the held deliveries to finish (see
/// [`Settler::gather`]); tokio's timer may add up to a millisecond.
const SETTLE_LINGER: Duration = Duration::from_millis(1);
/// Finished deliveries enough for a settle call without waiting.
const SETTLE_GATHER: usize = 256;
/// A failed settle is retried after this, doubling up to `RETRY_MAX`.
const RETRY_MIN: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// A failed renewal is tried again after this (or a third of the lease if shorter).
const RETRY_BEAT: Duration = Duration::from_millis(500);
/// A run whose lease was lost is cancelled once its job's score was read (to
/// tell its hooks whether the job was deleted), or after this at most.
const CLASSIFY_WAIT: Duration = Duration::from_millis(100);

/// What each settle of a queue carries besides its entries: the worker's
/// defaults for the queue's settings (a setting the queue stores is in force
/// over them) and who ran the attempts.
pub(crate) struct Keeping {
    /// How many dead letters the queue keeps.
    pub retention: Retention,
    /// How long the queue keeps finished jobs.
    pub history: History,
    /// This worker, as attempt records name it.
    pub by: RunBy,
    /// The throttles in a row a job may have uncounted.
    pub throttle_limit: u32,
    /// The worker's own hold of the queue after a throttle, which a landed
    /// settle ends (the backend holds the queue from then on).
    pub hold: Arc<super::per_queue::Hold>,
    /// The queue's history keeps bodies (as its settings in force say):
    /// acks' bodies go back with their settle.
    pub bodies: Arc<std::sync::atomic::AtomicBool>,
}

pub(crate) struct Settler<B> {
    pub backend: B,
    pub queue: Arc<str>,
    pub lease: Duration,
    /// Wakes the queue's dispatcher (after a retry is scheduled).
    pub wake: Arc<Notify>,
    pub leases: Arc<Leases>,
    /// What each settle carries besides its entries.
    pub keeping: Keeping,
    /// When the last settle failed: retry at this time.
    retry_at: Option<Instant>,
    retry_wait: Duration,
    /// The batch finishes the settles recorded, counted by a task of their
    /// own beside the settles (started at the first).
    counting: Option<(
        mpsc::UnboundedSender<Vec<String>>,
        tokio::task::JoinHandle<()>,
    )>,
    /// When this settler last marked its queue as holding batch finishes.
    marked: Option<Instant>,
}

/// The longest a shutdown spends settling what finished, and counting the
/// last batch finishes, once the runs are over: a backend that stays away
/// (down, or stalled past the response timeout on every call) leaves the
/// leases to run out instead, so that a stop stays within an orchestrator's
/// kill window.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// Most batch finishes one count carries.
const MAX_COUNT: usize = 8192;

/// Counts batch finishes in their batches as they come, those that came
/// during a count together in the next (see `Backend::batch_settled`).
async fn count_batches<B: Backend>(
    backend: B,
    queue: Arc<str>,
    mut rx: mpsc::UnboundedReceiver<Vec<String>>,
) {
    while let Some(mut members) = rx.recv().await {
        while members.len() < MAX_COUNT
            && let Ok(more) = rx.try_recv()
        {
            members.extend(more);
        }
        for chunk in members.chunks(MAX_COUNT) {
            // a failure leaves them with the queue, for a later fetch to
            // report and a worker to count
            if let Err(e) = backend.batch_settled(&queue, chunk).await {
                tracing::warn!(queue = %queue, error = %e, "batch counts failed; a later fetch recovers them");
            }
        }
    }
}

impl<B: Backend> Settler<B> {
    pub fn new(
        backend: B,
        queue: Arc<str>,
        lease: Duration,
        wake: Arc<Notify>,
        leases: Arc<Leases>,
        keeping: Keeping,
    ) -> Self {
        Settler {
            keeping,
            backend,
            queue,
            lease,
            wake,
            leases,
            retry_at: None,
            retry_wait: RETRY_MIN,
            counting: None,
            marked: None,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>) {
        // the watchdog runs beside the calls, so a backend call that hangs for
        // seconds does not keep a run going past its lease
        let watchdog = watchdog(
            self.leases.clone(),
            self.queue.clone(),
            self.lease,
            self.wake.clone(),
        );
        tokio::select! {
            _ = self.serve(&mut rx) => {}
            _ = watchdog => {}
        }
        let until = Instant::now() + DRAIN_WAIT;
        self.drain(until).await;
        // the finishes the last settles recorded are counted before the
        // worker stops
        if let Some((tx, mut task)) = self.counting.take() {
            drop(tx);
            // a Redis that stopped answering leaves them for a sweep
            if tokio::time::timeout_at(until, &mut task).await.is_err() {
                task.abort();
                tracing::warn!(queue = %self.queue, "batch counts still going at shutdown; a worker's sweep finishes them");
            }
        }
    }

    /// Renews, settles and retries until `Drain` (or every sender is gone).
    async fn serve(&mut self, rx: &mut mpsc::UnboundedReceiver<Event>) {
        let every = self.lease / 3;
        let mut next_beat = Instant::now() + every;
        let renewer = self.renewer();
        loop {
            let wake_at = self.retry_at.map_or(next_beat, |t| t.min(next_beat));
            tokio::select! {
                ev = rx.recv() => {
                    let mut draining = matches!(ev, None | Some(Event::Drain));
                    let mut renew = matches!(ev, Some(Event::Renew));
                    // take what else is ready; yield once so that jobs finishing
                    // right now join this batch rather than the next call (not
                    // for a job that ran alone, see `alone`)
                    for round in 0..2 {
                        while let Ok(ev) = rx.try_recv() {
                            draining |= matches!(ev, Event::Drain);
                            renew |= matches!(ev, Event::Renew);
                        }
                        if round == 0 && !draining && !self.alone() {
                            tokio::task::yield_now().await;
                        }
                    }
                    if !draining && self.retry_at.is_none() {
                        (draining, renew) = {
                            let (d, r) = self.gather(rx).await;
                            (d, renew || r)
                        };
                    }
                    if draining {
                        return;
                    }
                    if self.retry_at.is_none() {
                        self.flush_renewing(&renewer, &mut next_beat).await;
                    }
                    if renew && self.leases.lock().held.values().any(|h| h.renewable()) {
                        let wait = if renewer.heartbeat(false).await { every } else { every.min(RETRY_BEAT) };
                        next_beat = Instant::now() + wait;
                    }
                }
                _ = tokio::time::sleep_until(wake_at) => {
                    if Instant::now() >= next_beat {
                        // after a failed renewal, try again soon: the leases run on
                        let wait = if renewer.heartbeat(false).await { every } else { every.min(RETRY_BEAT) };
                        next_beat = Instant::now() + wait;
                    }
                    if self.retry_at.is_some_and(|t| Instant::now() >= t) {
                        self.flush_renewing(&renewer, &mut next_beat).await;
                    }
                }
            }
        }
    }

    /// [`flush`](Self::flush), with the running jobs' leases renewed when
    /// their beat comes while it is under way: a settle call that takes long
    /// (a slow Redis, a large batch) would otherwise hold their renewals back,
    /// past their lease's end, and the watchdog would give their runs up.
    /// Those being settled (finished ones) are left to the settle: a renewal
    /// would move their token under it, and a settle that came after it
    /// would be turned away by its fence, again each beat while calls take
    /// that long.
    /// The finished ones a beat passed over here (those of the call, and any
    /// that finished since or wait for a retry) are renewed at once after
    /// it: `next_beat` stays where it was for them.
    async fn flush_renewing(&mut self, renewer: &renew::Renewer<B>, next_beat: &mut Instant) {
        let every = self.lease / 3;
        let leases = self.leases.clone();
        let flush = self.flush();
        tokio::pin!(flush);
        let mut beat = *next_beat;
        loop {
            tokio::select! {
                _ = &mut flush => return,
                _ = tokio::time::sleep_until(beat) => {
                    let wait = if renewer.heartbeat(true).await { every } else { every.min(RETRY_BEAT) };
                    beat = Instant::now() + wait;
                    let passed_over = leases
                        .lock()
                        .held
                        .values()
                        .any(|h| h.renewable() && h.outcome.is_some());
                    if !passed_over {
                        *next_beat = beat;
                    }
                }
            }
        }
    }

    /// Whether the queue holds at most one delivery here, with its outcome: a
    /// job that ran alone, as on a quiet queue. Its settle goes at once. A
    /// yield would rarely gather more for it, and it costs a wake-up: tokio's
    /// `yield_now` parks the thread briefly and, leaving that park, wakes
    /// another runtime thread to look for work (about 1.4 context switches a
    /// job). With more held, the yield stays: jobs just fetched run and finish
    /// in it.
    fn alone(&self) -> bool {
        let t = self.leases.lock();
        t.held.len() <= 1 && t.held.values().all(|h| h.outcome.is_some())
    }

    /// While jobs still run, waits up to [`SETTLE_LINGER`] for at least half of
    /// the held deliveries to finish, so that one settle call carries them:
    /// a call's fixed cost (its round trip, the script's reads of the queue's
    /// fields, its counters) is then paid once for many jobs. A queue with
    /// nothing else held here (running or prefetched) settles at once; jobs
    /// prefetched are about to run, so their finishes are waited for too.
    /// Whether it was told to drain, and to renew (see [`Event::Renew`]).
    async fn gather(&mut self, rx: &mut mpsc::UnboundedReceiver<Event>) -> (bool, bool) {
        let until = Instant::now() + SETTLE_LINGER;
        let mut renew = false;
        loop {
            let (done, held) = {
                let t = self.leases.lock();
                (t.done.len(), t.held.len())
            };
            if done >= SETTLE_GATHER || done * 2 >= held {
                return (false, renew);
            }
            tokio::select! {
                ev = rx.recv() => match ev {
                    None | Some(Event::Drain) => return (true, renew),
                    Some(Event::Renew) => renew = true,
                    Some(Event::Finished) => {}
                },
                _ = tokio::time::sleep_until(until) => return (false, renew),
            }
        }
    }

    /// At shutdown: runs still going past the grace period are given up, not
    /// released (another worker could run them while they still run here); they
    /// stay leased until their lease ends. Finished ones are settled, trying
    /// again every 250 ms until `until`.
    async fn drain(&mut self, until: Instant) {
        let still = {
            let mut t = self.leases.lock();
            let ids: Vec<JobId> = t
                .held
                .iter()
                .filter(|(_, h)| h.running && !h.lost)
                .map(|(id, _)| *id)
                .collect();
            for id in &ids {
                // kept until the run ends, which then learns why
                Leases::give_up(&mut t, id, CancelReason::Shutdown, true);
            }
            ids
        };
        if !still.is_empty() {
            tracing::error!(queue = %self.queue, jobs = ?still, lease = ?self.lease,
                "jobs still running after the grace period are left leased; they run again once their lease ends");
        }
        // bounded in time: a backend that stays away leaves the leases to run
        // out instead (a call cut short may have landed: the fence decides)
        while !self.leases.lock().done.is_empty() && Instant::now() < until {
            if tokio::time::timeout_at(until, self.flush()).await.is_err() {
                break;
            }
            if !self.leases.lock().done.is_empty() {
                let next = Instant::now() + Duration::from_millis(250);
                tokio::time::sleep_until(next.min(until)).await;
            }
        }
        // finished and not settled: a flush cut short took some out of
        // `done` while its call went
        let left = {
            let t = self.leases.lock();
            t.held.values().filter(|h| h.outcome.is_some()).count()
        };
        if left > 0 {
            tracing::error!(queue = %self.queue, unsettled = left, "could not settle jobs at shutdown; they run again after their lease");
        }
    }

    /// Settles every finished delivery held, in batches.
    async fn flush(&mut self) {
        let uncertain = self
            .leases
            .lock()
            .held
            .values()
            .any(|h| h.uncertain.is_some());
        if uncertain {
            self.renewer().resolve_uncertain().await;
        }
        loop {
            let batch::Batch {
                settle: batch,
                sent,
                holds,
                deferred,
            } = self.batch();
            if sent.is_empty() {
                // uncertain tokens wait for their score to be read again
                self.retry_at = deferred.then(|| Instant::now() + self.retry_wait);
                if !deferred {
                    self.retry_wait = RETRY_MIN;
                }
                return;
            }
            // a retry, release or throttle makes a job due later: the
            // dispatcher, asleep until the next due time it knew, looks again
            let rescheduled = !batch.reschedules.is_empty() || !batch.throttles.is_empty();
            let after_failure = self.retry_wait > RETRY_MIN;
            // the queue is marked before jobs of batches settle there, so
            // that a sweep finds their finishes should this worker die
            // before its count (again a third of a lease later)
            if !batch.batched.is_empty()
                && self.marked.is_none_or(|t| t.elapsed() >= self.lease / 3)
            {
                match self.backend.batch_mark(&self.queue, self.lease).await {
                    Ok(()) => self.marked = Some(Instant::now()),
                    Err(e) => {
                        // unmarked, a crash after the settle could leave
                        // its finishes uncounted: settled later instead
                        self.leases
                            .lock()
                            .done
                            .extend(sent.iter().map(|(id, _, _)| *id));
                        tracing::warn!(queue = %self.queue, error = %e, retry_in = ?self.retry_wait, "marking the queue's batch finishes failed; the settle will retry");
                        self.retry_at = Some(Instant::now() + self.retry_wait);
                        self.retry_wait = (self.retry_wait * 2).min(RETRY_MAX);
                        return;
                    }
                }
            }
            match self.backend.settle(&self.queue, &batch).await {
                Ok(done) => {
                    self.retry_at = None;
                    self.retry_wait = RETRY_MIN;
                    // refused in part: a lease a late renewal wrote is
                    // adopted, and those settled again (no call otherwise)
                    let applied = done.acked + done.rescheduled + done.dead;
                    let adopted = if applied + (done.gone.len() as u64) < sent.len() as u64 {
                        self.renewer().adopt_late(&sent, &done.gone).await
                    } else {
                        Vec::new()
                    };
                    let refused = sent.len().saturating_sub(adopted.len()) as u64;
                    self.report_unapplied(&done, refused, after_failure);
                    // a merged re-delivery during the call changed the token (or
                    // adopt_late adopted a late renewal's lease): that
                    // one stays for the next flush; a new run of the job (a
                    // release landed, and the job came back to this worker) is
                    // not this settle's to drop, whatever its token
                    let mut again = deferred || sent.len() == MAX_BATCH;
                    {
                        let mut t = self.leases.lock();
                        for (id, token, run) in &sent {
                            match t.held.get(id) {
                                Some(h) if h.run != *run => {}
                                Some(h) if h.token == *token => {
                                    t.held.remove(id);
                                }
                                Some(_) => {
                                    t.done.insert(*id);
                                    again = true;
                                }
                                None => {}
                            }
                        }
                    }
                    if !holds.is_empty() {
                        self.landed(&holds, &done, &batch, &adopted);
                    }
                    // finishes of jobs flows waited for (the worker could
                    // not know it before): the queue is marked now, so that
                    // a sweep finds them should the count not come
                    if !done.batched.is_empty()
                        && batch.batched.is_empty()
                        && self.marked.is_none_or(|t| t.elapsed() >= self.lease / 3)
                    {
                        match self.backend.batch_mark(&self.queue, self.lease).await {
                            Ok(()) => self.marked = Some(Instant::now()),
                            Err(e) => {
                                tracing::warn!(queue = %self.queue, error = %e, "marking the queue's batch finishes failed; a later fetch counts them should this count fail");
                            }
                        }
                    }
                    // the batches count their jobs' finishes, beside the
                    // next settles
                    if !done.batched.is_empty() {
                        let (tx, _) = self.counting.get_or_insert_with(|| {
                            let (tx, rx) = mpsc::unbounded_channel();
                            let task = tokio::spawn(count_batches(
                                self.backend.clone(),
                                self.queue.clone(),
                                rx,
                            ));
                            (tx, task)
                        });
                        let _ = tx.send(done.batched);
                    }
                    if rescheduled {
                        self.wake.notify_one();
                    }
                    if !again {
                        return;
                    }
                }
                Err(e) => {
                    // kept in the table: renewed by the heartbeat, retried with backoff
                    self.leases
                        .lock()
                        .done
                        .extend(sent.iter().map(|(id, _, _)| *id));
                    tracing::warn!(queue = %self.queue, error = %e, pending = sent.len(), retry_in = ?self.retry_wait, "settling finished jobs failed; will retry");
                    self.retry_at = Some(Instant::now() + self.retry_wait);
                    self.retry_wait = (self.retry_wait * 2).min(RETRY_MAX);
                    return;
                }
            }
        }
    }

    /// The queue throttles `holds` (their jobs and numbers in the worker's
    /// hold) were in the settle `batch` that landed with `done`: those that
    /// passed the fence leave the hold (the backend holds the queue for them
    /// now); throttles added since, or settled by another call, stay held.
    /// The reply counts retries, releases and throttles together
    /// (`rescheduled`): when each of those not gone passed, or those that
    /// did not are retries refused for a late renewal's lease (`adopted`,
    /// settled again), every throttle passed, whatever became of the call's
    /// acks and dead letters. A throttle that failed the fence stays held
    /// until it ends, as do all of the call's when some other retry or
    /// release failed it for a job delivered again (the reply does not say
    /// which).
    fn landed(&self, holds: &[(JobId, u64)], done: &Settled, batch: &Settle, adopted: &[JobId]) {
        let asked = batch
            .reschedules
            .iter()
            .map(|r| &r.id)
            .chain(batch.throttles.iter().map(|t| &t.id))
            .filter(|id| !done.gone.contains(id))
            .count() as u64;
        let retries_adopted = batch
            .reschedules
            .iter()
            .filter(|r| !r.release && adopted.contains(&r.id))
            .count() as u64;
        if done.rescheduled + retries_adopted != asked {
            return;
        }
        let numbers: Vec<u64> = holds
            .iter()
            .filter(|(id, _)| !done.gone.contains(id))
            .map(|(_, n)| *n)
            .collect();
        self.keeping.hold.landed(&numbers);
    }

    /// Says why settles did not apply, when some did not.
    fn report_unapplied(&self, done: &Settled, sent: u64, after_failure: bool) {
        let applied = done.acked + done.rescheduled + done.dead;
        let gone = &done.gone;
        let moved = sent.saturating_sub(applied + gone.len() as u64);
        if !gone.is_empty() {
            if after_failure {
                tracing::info!(queue = %self.queue, jobs = ?gone, "finished jobs already gone when their outcome was written: settled by the earlier call whose reply was lost, or deleted while they ran");
            } else {
                tracing::info!(queue = %self.queue, jobs = ?gone, "jobs deleted while they ran: their outcome was not recorded");
            }
        }
        if moved > 0 {
            tracing::warn!(queue = %self.queue, runs = moved, "finished runs whose lease had run out: their jobs were delivered again, so these runs' outcomes were dropped");
        }
    }
}
