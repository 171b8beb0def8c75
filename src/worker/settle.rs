//! One task per queue keeps the held deliveries' leases and settles finished ones.
//!
//! It renews every held lease (running jobs and finished ones whose settle has not
//! landed) in one call every third of the lease, settles finished ones in one
//! batched call, retries a failed settle by itself with backoff, and gives a run
//! up (cancels it, settles nothing) once its lease has run out on the worker's
//! clock without a renewal. A renewal whose reply was lost is resolved by reading
//! the job's score before the next call, so it never costs the delivery.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::hooks::CancelReason;
use super::leases::{Leases, Table, Uncertain};
use crate::JobId;
use crate::contract::attempts::{Ran, RunBy};
use crate::contract::backend::Backend;
use crate::contract::history::History;
use crate::contract::leases::Retention;
use crate::contract::leases::{DeadLetterEntry, Reschedule, Settle, Settled, Throttle, Token};
use crate::job::cancel::RunCancel;

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
    },
}

/// Most entries per settle call.
const MAX_BATCH: usize = 4096;
/// The largest ack body a settle call carries back for its history entry
/// (a larger one is read by the backend, rather than sent twice).
pub(crate) const MAX_SENT_BODY: usize = 1024;

/// Most bytes of results per settle call (beyond its first entry's).
const MAX_BYTES: usize = 8 << 20;
/// A failed settle is retried after this, doubling up to `RETRY_MAX`.
/// How long a settle waits for more of the held deliveries to finish (see
/// [`Settler::gather`]); tokio's timer may add up to a millisecond.
const SETTLE_LINGER: Duration = Duration::from_millis(1);
/// Finished deliveries enough for a settle call without waiting.
const SETTLE_GATHER: usize = 256;
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
        let watchdog = watchdog(self.leases.clone(), self.queue.clone(), self.lease);
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
                        self.flush().await;
                    }
                    if renew && self.leases.lock().held.values().any(|h| h.renewable()) {
                        let wait = if self.heartbeat().await { every } else { every.min(RETRY_BEAT) };
                        next_beat = Instant::now() + wait;
                    }
                }
                _ = tokio::time::sleep_until(wake_at) => {
                    if Instant::now() >= next_beat {
                        // after a failed renewal, try again soon: the leases run on
                        let wait = if self.heartbeat().await { every } else { every.min(RETRY_BEAT) };
                        next_beat = Instant::now() + wait;
                    }
                    if self.retry_at.is_some_and(|t| Instant::now() >= t) {
                        self.flush().await;
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

    /// Reads the current score of jobs whose renewal reply was lost and adopts
    /// the token that renewal wrote.
    ///
    /// The renewal may have run any time before the read: a Redis that stalled
    /// past the response timeout runs it when it resumes. It set a lease
    /// ending a lease after it ran, so by the read's reply: the held token's
    /// end plus the time since that token's lease was measured from (the
    /// backend's clock runs as the worker's; a second of slack). A later
    /// score of the same delivery is adopted up to that bound.
    async fn resolve_uncertain(&mut self) {
        let asked: Vec<(JobId, Token, Uncertain)> = self
            .leases
            .lock()
            .held
            .iter()
            .filter_map(|(id, h)| h.uncertain.map(|u| (*id, h.token, u)))
            .collect();
        if asked.is_empty() {
            return;
        }
        let held: Vec<(JobId, Token)> = asked.iter().map(|(id, t, _)| (*id, *t)).collect();
        let Ok(scores) = self.backend.scores(&self.queue, &held).await else {
            return; // still unreachable: try again before the next call
        };
        let read = Instant::now();
        let mut t = self.leases.lock();
        for ((id, old, u), now) in asked.iter().zip(scores) {
            let Some(h) = t.held.get_mut(id).filter(|h| h.token == *old) else {
                continue;
            };
            h.uncertain = None;
            let since = read.saturating_duration_since(u.origin) + Duration::from_secs(1);
            let until = old
                .lease_until_ms()
                .saturating_add(u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
            // a lease (not a due time: a visibility change, or a later
            // delivery given back, keeps the count) of the same delivery
            if let Some(now) = now.filter(|t| {
                crate::contract::leases::is_lease(t.score())
                    && t.attempt() == old.attempt()
                    && t.lease_until_ms() > old.lease_until_ms()
                    && t.lease_until_ms() <= until
            }) {
                tracing::debug!(queue = %self.queue, job.id = %id, "a renewal whose reply was lost had landed; adopted its lease");
                h.token = now;
                // it ran after it was sent
                h.deadline = h.deadline.max(u.sent + self.lease);
            }
        }
    }

    /// Settles every finished delivery held, in batches.
    async fn flush(&mut self) {
        self.resolve_uncertain().await;
        loop {
            let (batch, sent, deferred) = self.batch();
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
                    self.report_unapplied(&done, sent.len() as u64, after_failure);
                    // a merged re-delivery during the call changed the token: that
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
                    if !batch.throttles.is_empty() {
                        // the backend holds the queue now
                        self.keeping.hold.landed();
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

    /// Says why running jobs lost their lease, then cancels their runs: one read
    /// of their scores (waited for `CLASSIFY_WAIT` at most) tells a deleted job
    /// from one delivered again.
    async fn report_lost(&self, lost: &[(JobId, Token, Arc<RunCancel>)]) {
        let pairs: Vec<(JobId, Token)> = lost.iter().map(|(id, t, _)| (*id, *t)).collect();
        let scores = tokio::time::timeout(CLASSIFY_WAIT, self.backend.scores(&self.queue, &pairs))
            .await
            .unwrap_or_else(|_| Err(crate::Error::Protocol("no reply in time".into())));
        for (k, (id, held, cancel)) in lost.iter().enumerate() {
            match scores.as_ref().map(|s| s.get(k).copied().flatten()) {
                Ok(None) => {
                    tracing::warn!(queue = %self.queue, job.id = %id, "job cancelled or deleted while it ran: cancelling the run; it will not run again");
                    let mut t = self.leases.lock();
                    if let Some(h) = t.held.get_mut(id).filter(|h| h.lost) {
                        h.reason = Some(CancelReason::Deleted);
                    }
                }
                Ok(Some(now))
                    if now.attempt() != held.attempt()
                        || !crate::contract::leases::is_lease(now.score()) =>
                {
                    tracing::warn!(queue = %self.queue, job.id = %id, "lease lost: the job was delivered again after this lease ran out, or made visible again; cancelling this run")
                }
                Ok(Some(_)) => {
                    tracing::warn!(queue = %self.queue, job.id = %id, "lease lost: this delivery's lease was renewed later than this worker allows for (a renewal whose reply was lost, run late); cancelling this run")
                }
                Err(_) => {
                    tracing::warn!(queue = %self.queue, job.id = %id, "lease lost (the job was deleted, or delivered again after its lease ran out); cancelling the run")
                }
            }
            cancel.cancel();
        }
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

    /// Up to `MAX_BATCH` finished deliveries as one settle call, and what was
    /// sent (taken out of the table's `done` set until the call's result is known).
    /// Deliveries whose token is uncertain stay for later (`true` when any did).
    fn batch(&self) -> (Settle, Vec<(JobId, Token, u64)>, bool) {
        let mut t = self.leases.lock();
        let Table { held, done, .. } = &mut *t;
        // the results a call carries are bounded too (a result may be
        // MAX_RESULT bytes): at least one entry, then no more than MAX_BYTES
        // (one look-up of each in `held` here; a busy worker settles dozens
        // of jobs a call)
        let mut bytes = 0usize;
        let mut take: Vec<JobId> = Vec::with_capacity(done.len().min(MAX_BATCH));
        for id in done.iter() {
            let h = held.get(id);
            if h.is_some_and(|h| !h.renewable()) {
                continue;
            }
            if take.len() == MAX_BATCH {
                break;
            }
            let first = bytes == 0;
            bytes += h.map_or(0, |h| match &h.outcome {
                Some(Outcome::Ack { result: Some(r) }) => r.len().max(1),
                _ => 1,
            });
            if !first && bytes > MAX_BYTES {
                break;
            }
            take.push(*id);
        }
        let deferred = take.len() < MAX_BATCH && take.len() < done.len();
        // all of them taken (as most of the time): cleared at once, not one
        // by one below
        let all = take.len() == done.len();
        if all {
            done.clear();
        }
        let mut s = Settle {
            retention: self.keeping.retention,
            history: self.keeping.history,
            by: Some(self.keeping.by.clone()),
            throttle_limit: self.keeping.throttle_limit,
            ..Settle::default()
        };
        // most batches are acks, each with its run: room made once
        s.acks.reserve(take.len());
        s.ran.reserve(take.len());
        let mut sent = Vec::with_capacity(take.len());
        // acks' bodies (the runs kept those of up to MAX_SENT_BODY bytes) go
        // with them while the history keeps bodies; the backend reads them
        // again otherwise
        let bodies = self
            .keeping
            .bodies
            .load(std::sync::atomic::Ordering::Relaxed);
        for id in take {
            if !all {
                done.remove(&id);
            }
            let Some(h) = held.get_mut(&id) else { continue };
            let Some(outcome) = &h.outcome else { continue };
            let token = h.token;
            sent.push((id, token, h.run));
            if let Some((started_ms, ended_ms, outcome)) = h.ran {
                s.ran.push(Ran {
                    id,
                    started_ms,
                    ended_ms,
                    outcome,
                    job_type: h.job.map(std::borrow::Cow::Borrowed),
                });
            }
            if let Some(r) = h.batch
                && matches!(outcome, Outcome::Ack { .. } | Outcome::Dead { .. })
            {
                s.batched.push((id, r));
            }
            match outcome {
                Outcome::Ack { result } => {
                    s.acks.push((id, token));
                    // taken: a call that fails is sent again without it
                    if let Some(b) = h.body.take().filter(|_| bodies) {
                        s.ack_bodies.push((id, b));
                    }
                    if let Some(r) = result {
                        s.results.push((id, r.clone()));
                    }
                }
                Outcome::Retry { delay, error } => s.reschedules.push(Reschedule {
                    id,
                    token,
                    delay: *delay,
                    deliveries: token.attempt(),
                    release: false,
                    error: Some(error.clone()),
                }),
                Outcome::Release { delay } => s.reschedules.push(Reschedule {
                    id,
                    token,
                    delay: *delay,
                    deliveries: token.attempt().saturating_sub(1),
                    release: true,
                    error: None,
                }),
                Outcome::Throttle { delay, error, key } => s.throttles.push(Throttle {
                    id,
                    token,
                    delay: *delay,
                    error: error.clone(),
                    key: *key,
                }),
                Outcome::Dead { error } => s.dead.push(DeadLetterEntry {
                    id,
                    token,
                    error: error.clone(),
                }),
            }
        }
        (s, sent, deferred)
    }

    /// Renews every held lease whose token is known in one call; false when the
    /// call failed.
    async fn heartbeat(&mut self) -> bool {
        self.resolve_uncertain().await;
        let leases: Vec<(JobId, Token, Instant)> = self
            .leases
            .lock()
            .held
            .iter()
            .filter(|(_, h)| h.renewable())
            .map(|(id, h)| (*id, h.token, h.deadline))
            .collect();
        if leases.is_empty() {
            return true;
        }
        let pairs: Vec<(JobId, Token)> = leases.iter().map(|(id, t, _)| (*id, *t)).collect();
        let sent_at = Instant::now();
        let result = self.backend.extend(&self.queue, &pairs, self.lease).await;
        let mut lost = Vec::new();
        let renewed = {
            let mut t = self.leases.lock();
            match result {
                Ok(tokens) => {
                    for ((id, old, _), new) in leases.iter().zip(tokens) {
                        // changed during the call (a merged re-delivery): not ours to touch
                        let Some(h) = t.held.get_mut(id).filter(|h| h.token == *old) else {
                            continue;
                        };
                        match new {
                            Some(new) => {
                                h.token = new;
                                h.deadline = sent_at + self.lease;
                            }
                            None => {
                                if h.running {
                                    lost.push((*id, *old, h.cancel.clone()));
                                }
                                // cancelled once report_lost knows why
                                Leases::give_up(&mut t, id, CancelReason::LeaseLost, false);
                            }
                        }
                    }
                    true
                }
                Err(e) => {
                    // the renewal may still have run: remember the lease it could have set
                    tracing::warn!(queue = %self.queue, error = %e, "renewing leases failed");
                    for (id, old, deadline) in &leases {
                        let Some(h) = t.held.get_mut(id).filter(|h| h.token == *old) else {
                            continue;
                        };
                        let origin = deadline.checked_sub(self.lease).unwrap_or(*deadline);
                        h.uncertain = Some(Uncertain {
                            origin,
                            sent: sent_at,
                        });
                    }
                    false
                }
            }
        };
        if !lost.is_empty() {
            self.report_lost(&lost).await;
        }
        renewed
    }
}

/// Gives up runs whose lease ran out without a renewal, forever: another worker
/// may run them now. Their token is cancelled and nothing is settled for them.
/// Finished ones keep trying to settle for one more lease (the fence decides).
async fn watchdog(leases: Arc<Leases>, queue: Arc<str>, lease: Duration) {
    loop {
        let now = Instant::now();
        let mut nearest = now + lease / 3;
        {
            let mut t = leases.lock();
            let Table { held, done, .. } = &mut *t;
            held.retain(|id, h| {
                if h.lost {
                    return true; // cancelled already; forgotten when the run ends
                }
                if h.running && h.deadline <= now {
                    tracing::warn!(queue = %queue, job.id = %id, "lease ran out without a renewal (backend unreachable?); cancelling the run");
                    // kept until the run ends, so a re-delivery here never runs beside it
                    h.cancel.cancel();
                    h.lost = true;
                    h.reason = Some(CancelReason::LeaseLost);
                    return true;
                }
                if h.outcome.is_some() && h.deadline + lease <= now {
                    tracing::error!(queue = %queue, job.id = %id, "could not settle the job before its lease ran out; it runs again");
                    done.remove(id);
                    return false;
                }
                if h.running {
                    nearest = nearest.min(h.deadline);
                }
                true
            });
        }
        tokio::time::sleep_until(nearest).await;
    }
}
