//! One dispatcher per queue: lease as many due jobs as there are free slots in one
//! call, start them, and when nothing is due sleep until the next due score, a
//! wake-up, or the poll interval, whichever comes first. No busy polling.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use super::settings::Found;
use super::slots::{Freed, give_back, running_slot, slots};
use crate::contract::backend::Backend;

pub(crate) struct Dispatcher<B> {
    pub backend: B,
    /// The queue, the worker's and the queue's shared state, the settle
    /// channel, the lease table and the queue's slots: shared with its jobs'
    /// runs, one `Arc` per run.
    pub env: Arc<super::execute::RunEnv>,
    /// The worker's id: sends hand jobs to it (see [`Backend::fetch_waiting`]).
    pub worker: Arc<str>,
    /// The queues' stored settings, read before the first fetch of a queue
    /// created after the worker started.
    pub follow: Arc<super::settings::Follow>,
    pub wake: Arc<Notify>,
    pub tracker: TaskTracker,
    /// The last fetch's send time here and the backend's clock during it.
    pub clock: std::sync::Mutex<Option<(Instant, u64)>>,
    /// How many jobs the hand-off registration the last fetch may have left in
    /// place is still good for, as this worker counts them (0: none; withdrawn
    /// when the worker's running slots fill, see `withdraw_when_full`). While
    /// some are left, a handed job's run does not wake the dispatcher to fetch
    /// and register again.
    pub registered: std::sync::atomic::AtomicU32,
    /// The last fetch may have left a registration in place: set by a fetch
    /// that registered, cleared by the next fetch or a withdrawal, and not by
    /// the hand-offs (a registration the sends count higher than this worker
    /// does is withdrawn too when the worker's running slots fill).
    pub in_place: std::sync::atomic::AtomicBool,
    /// A recovery of batch finishes is going on (beside the fetches).
    pub recovering: Arc<std::sync::atomic::AtomicBool>,
}

pub(super) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Fetch backoff after failures: 100 ms doubling up to this. Short, because a
/// backend that is back should be served at once (wake-ups cut it short too).
const FETCH_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A queue that does not exist (yet) is checked this often (at most; less when
/// the poll interval is shorter): a queue created by an RSMQ client sends no
/// wake-up. Each check of a missing queue costs two Redis commands.
const MISSING_QUEUE_POLL: Duration = Duration::from_secs(5);
/// A paused queue is checked this often (at most): a resume wakes the workers
/// at once through the realtime channel; this catches a wake-up that was lost.
const PAUSED_QUEUE_POLL: Duration = Duration::from_secs(5);

/// How often a dispatcher waiting for a slot of its queue's share looks
/// again, should no notice come.
const SLOT_RECHECK: Duration = Duration::from_millis(50);

/// How often a dispatcher tries again to read its queue's settings while
/// the reads fail (it fetches meanwhile; see `Found::Failed`).
const SETTINGS_RETRY: Duration = Duration::from_secs(1);

/// The most jobs a hand-off registration is good for (the Redis backend's
/// sends count no further, see HANDS_MAX in lib.lua): a worker with more
/// running slots free registers again after that many hand-offs.
const HANDS_MAX: usize = 8;

impl<B: Backend> Dispatcher<B> {
    /// Serves the queue until shutdown. Jobs sends hand to this worker come
    /// through [`Dispatcher::take_handed`], called by the worker's listener.
    pub async fn run(self: Arc<Self>) {
        let mut failures = 0u32;
        let mut served = false;
        let mut paused = false;
        let mut slot_freed = false;
        // when this dispatcher's last read of the queue's settings failed
        let mut read_failed = None;
        // this dispatcher's number, and its place while it waits for a share
        let me = self.env.shared.turns.ticket();
        let mut place = None;
        loop {
            if self.env.shared.controls.is_quiet() {
                // an operator quieted the worker: no fetch until resumed
                let mut quiet = self.env.shared.controls.quiet.subscribe();
                tokio::select! {
                    _ = quiet.wait_for(|q| !*q) => {}
                    _ = self.env.per_queue.stop.cancelled() => return,
                }
            }
            // a queue that did not exist when last looked for: its limits (the
            // builder's stored where none is) are read before any lease, and
            // before the prefetch is decided. A read that failed (a Redis out
            // of memory refused the store, say) leaves the queue served under
            // the values the worker holds, as a worker that could not read
            // them at its start is, until a read passes (tried again at most
            // once a SETTINGS_RETRY here, and at the heartbeat's pace by the
            // settings' follower): releasing what each fetch leased instead
            // ran nothing, fetch after fetch. A queue limited across the
            // fleet (by the values last read, or by the worker's own) is not
            // leased from until a read passes: its limits hold only once
            // stored (a Redis that restarted empty has none)
            let mut unread = false;
            if !self.follow.is_read(&self.env.queue)
                && read_failed.is_none_or(|at: Instant| at.elapsed() >= SETTINGS_RETRY)
            {
                match self.follow.read(&self.backend, &self.env.queue).await {
                    Found::Missing => unread = true,
                    Found::Read => {}
                    Found::Failed => {
                        read_failed = Some(Instant::now());
                        // (by the values last read, or by the worker's own,
                        // which a read stores where none are)
                        if self.env.queue_slots.fleet_limited()
                            || self.follow.own_fleet_limited(&self.env.queue)
                        {
                            tokio::select! {
                                _ = tokio::time::sleep(SETTINGS_RETRY) => {}
                                _ = self.env.per_queue.stop.cancelled() => return,
                            }
                            continue;
                        }
                    }
                }
            }
            let mut n = tokio::select! {
                n = self.slots() => n,
                _ = self.env.per_queue.stop.cancelled() => return,
            };
            // a prefetch that would keep jobs waiting here longer than
            // PREFETCH_WAIT is cut down (to the concurrency at the least):
            // the rest of the worker's slots stay free of this queue's jobs
            let short = self.env.per_queue.short_jobs() && !self.env.queue_slots.fleet_limited();
            let reserve = self
                .env
                .shared
                .prefetch
                .saturating_sub(self.env.per_queue.prefetch(&self.env.shared));
            if short && reserve > 0 {
                let free = n as usize + self.env.shared.slots.available_permits();
                let allowed = free.saturating_sub(reserve);
                let turns = &self.env.shared.turns;
                if allowed == 0 || !turns.may_go(me) {
                    // its share is leased, or other queues wait for theirs:
                    // wait in line for a slot given back, then look again
                    // (first in line, keeping its place until it leases)
                    self.give_back(n);
                    let told = &self.env.shared.slot_freed;
                    loop {
                        let freed = self.env.shared.slot_freed.notified();
                        // a queue whose own limit binds waits out of line:
                        // the others go while its jobs run
                        let own = self.env.queue_slots.sem().available_permits() > 0;
                        if !own {
                            place = None;
                        } else if place.is_none() {
                            place = Some(turns.join(me, told));
                        }
                        if own
                            && self.env.shared.slots.available_permits() > reserve
                            && turns.may_go(me)
                        {
                            turns.going(me, true);
                            break;
                        }
                        turns.going(me, false);
                        tokio::select! {
                            _ = freed => {}
                            // slots given back some other way: looked at again
                            _ = tokio::time::sleep(SLOT_RECHECK) => {}
                            _ = self.env.per_queue.stop.cancelled() => return,
                        }
                    }
                    continue;
                }
                if allowed < n as usize {
                    self.give_back(n - allowed as u32);
                    n = allowed as u32;
                }
            }
            // its turn taken (or none needed): the next in line goes
            place = None;
            if !short {
                // long (or not yet timed) jobs, or a queue limited across the
                // fleet (where a lease counts as a start and holds a place):
                // lease only what can start now: the running slots free, less
                // the jobs leased before that have yet to take theirs
                let free = u32::try_from(self.env.shared.running_free()).unwrap_or(u32::MAX);
                if free == 0 && !slot_freed {
                    self.give_back(n);
                    match running_slot(
                        &self.env.shared.running,
                        &self.env.shared.unstarted,
                        &self.env.per_queue.stop,
                    )
                    .await
                    {
                        None => return,
                        // another queue's dispatcher may take the slot back
                        // before this one looks again: lease one then (it waits
                        // for the slot as a prefetched job), never wait for the
                        // slot again, where two dispatchers could hand it back
                        // and forth for ever
                        Some(Freed::Ended) => slot_freed = true,
                        Some(Freed::Taken) => {}
                    }
                    continue;
                }
                slot_freed = false;
                let free = free.max(1);
                if n > free {
                    self.give_back(n - free);
                    n = free;
                }
            }
            if let Some(until) = self.env.per_queue.hold.until() {
                // a handler's throttle (maybe while this waited for a slot):
                // nothing starts until it ends or its settle lands (which
                // wakes this)
                self.give_back(n);
                tokio::select! {
                    _ = tokio::time::sleep_until(until) => {}
                    _ = self.wake.notified() => {}
                    _ = self.env.per_queue.stop.cancelled() => return,
                }
                continue;
            }
            // a fetch in flight is never dropped: its script may have run, and the
            // jobs it leased would stay leased to nobody; at shutdown they are
            // released instead
            let sent_at = Instant::now();
            // a hand-off goes only to a worker that can start it at once: as
            // many as it has running slots free (less those jobs leased
            // before have yet to take), and slots of its own and of this
            // queue's (those this dispatcher took, and the rest), so that each
            // handed job takes them without waiting (see try_slot); at least
            // one while a running slot is free
            let waiting = self.env.shared.running.available_permits() > 0;
            let hands = self
                .env
                .shared
                .running_free()
                .min(n as usize + self.env.shared.slots.available_permits())
                .min(n as usize + self.env.queue_slots.sem().available_permits())
                .clamp(1, HANDS_MAX);
            let fetched = if waiting {
                self.backend
                    .fetch_waiting(
                        &self.env.queue,
                        n as usize,
                        self.env.shared.lease,
                        &self.worker,
                        hands,
                    )
                    .await
            } else {
                self.backend
                    .fetch(&self.env.queue, n as usize, self.env.shared.lease)
                    .await
            };
            let mut fetched = match fetched {
                Ok(f) => {
                    failures = 0;
                    // (a missing or paused queue's reply reads no clock)
                    if f.now_us > 0 {
                        *lock(&self.clock) = Some((sent_at, f.now_us));
                    }
                    if !served {
                        served = true;
                        self.env.shared.readiness.fetched();
                    }
                    f
                }
                Err(e) => {
                    self.give_back(n);
                    failures += 1;
                    let backoff =
                        Duration::from_millis(100u64 << failures.min(8)).min(FETCH_BACKOFF_MAX);
                    tracing::warn!(queue = %self.env.queue, error = %e, retry_in = ?backoff, "fetching jobs failed");
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => continue,
                        _ = self.wake.notified() => continue,
                        _ = self.env.per_queue.stop.cancelled() => return,
                    }
                }
            };
            let got = (fetched.jobs.len() as u32).min(n);
            self.give_back(n - got);
            // batch finishes a dead worker left uncounted (rare): counted
            // beside the fetches, one recovery at a time
            if fetched.stale_batches
                && !self
                    .recovering
                    .swap(true, std::sync::atomic::Ordering::AcqRel)
            {
                let (backend, queue) = (self.backend.clone(), self.env.queue.clone());
                let recovering = self.recovering.clone();
                tokio::spawn(async move {
                    if let Err(e) = backend.batch_recover(&queue).await {
                        tracing::warn!(queue = %queue, error = %e, "recovering batch counts failed");
                    }
                    recovering.store(false, std::sync::atomic::Ordering::Release);
                });
            }
            // fetch.lua registers a waiting fetch that leased fewer than asked
            // (unless a limit held it back), and clears the registration on a
            // fetch that leased all it asked or was held back
            let ordinary = !fetched.missing && !fetched.paused;
            let held = fetched.held.any();
            if held {
                self.env.per_queue.metrics.held(fetched.held);
            }
            if ordinary && (waiting || held || fetched.jobs.len() >= n as usize) {
                // good for the running slots free less what the fetch leased,
                // at least one (see Backend::fetch_waiting)
                let left = if waiting && !held && fetched.jobs.len() < n as usize {
                    hands.saturating_sub(fetched.jobs.len()).max(1) as u32
                } else {
                    0
                };
                self.registered
                    .store(left, std::sync::atomic::Ordering::Relaxed);
                self.in_place
                    .store(left > 0, std::sync::atomic::Ordering::Relaxed);
                if left > 0
                    && (self.env.shared.running.available_permits() == 0
                        || self.env.shared.controls.is_quiet())
                {
                    // the last running slot was taken (or the worker turned
                    // quiet) while the fetch was on its way: withdrawn now,
                    // which the slot's taker could not do (nothing was in
                    // place yet)
                    self.env.shared.filled.notify_one();
                }
            }
            if fetched.orphans > 0 {
                tracing::warn!(queue = %self.env.queue, orphans = fetched.orphans,
                    "removed ids without a body from the queue (evicted by Redis's maxmemory-policy, or deleted by another client)");
            }
            if self.env.per_queue.stop.is_cancelled() {
                self.release(fetched, sent_at);
                return;
            }
            if unread && !fetched.jobs.is_empty() {
                // the queue was created between the read and the fetch: its
                // jobs go back unstarted until its limits are read
                self.release(fetched, sent_at);
                continue;
            }
            if self.env.shared.controls.is_quiet() {
                // quieted during the fetch: what it leased goes back, and a
                // registration it left is withdrawn
                self.release(fetched, sent_at);
                self.env.shared.filled.notify_one();
                continue;
            }
            self.start(&mut fetched, sent_at, None);
            if fetched.paused != paused {
                paused = fetched.paused;
                self.env.per_queue.metrics.paused(paused);
                let state = if paused { "paused" } else { "resumed" };
                tracing::info!(queue = %self.env.queue, "queue {state}");
            }
            if got < n || fetched.missing || fetched.paused {
                // nothing more is due: sleep until the next due score or a
                // wake-up (a send, or the worker's poll of all its queues)
                let mut wait: Option<Duration> = None;
                let poll = self.env.shared.poll_interval;
                if fetched.missing {
                    wait = Some(poll.min(MISSING_QUEUE_POLL));
                    // created again, it has none of the settings stored
                    self.follow.forget(&self.env.queue);
                }
                if fetched.paused {
                    wait = Some(poll.min(PAUSED_QUEUE_POLL));
                }
                // the backend's clock read during the fetch is no later than now
                let replied = Instant::now();
                let mut precise = false;
                if let Some(due) = fetched.next_due_us {
                    let until_us = due.saturating_sub(fetched.now_us);
                    let until = Duration::from_micros(until_us);
                    precise = wait.is_none_or(|w| until < w) && self.backend.real_time();
                    wait = Some(wait.map_or(until, |w| w.min(until)));
                }
                let timer = async {
                    match wait {
                        // from when the fetch was sent: Redis read its clock
                        // about a one-way trip later, which the next fetch takes
                        // too, so it reaches Redis about when the job is due;
                        // Redis decides what is due, so an early one only
                        // costs a fetch that finds nothing (and learns the rest)
                        Some(w) if precise => sleep_precisely(sent_at + w).await,
                        Some(w) => tokio::time::sleep_until(replied + w).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = timer => {}
                    _ = self.wake.notified() => {}
                    _ = self.env.per_queue.stop.cancelled() => return,
                }
            }
        }
    }

    /// Free slots of the worker and of this queue, at least one (waiting for it).
    async fn slots(&self) -> u32 {
        slots(
            &self.env.shared,
            Some(&self.env.queue_slots),
            self.env.shared.fetch_max,
        )
        .await
    }

    pub(super) fn give_back(&self, n: u32) {
        give_back(&self.env.shared, Some(&self.env.queue_slots), n);
    }
}

/// How long before a precise deadline tokio's timer hands over to a thread's
/// sleep: tokio's timer has millisecond ticks and rounds a sleep up to the next.
const COARSE_TIMER: Duration = Duration::from_micros(1500);

/// Sleeps until `deadline`, late by tens of µs rather than up to a millisecond:
/// tokio's timer until shortly before, then a blocking-pool thread's sleep (for
/// backends on real time only; see [`Backend::real_time`]).
async fn sleep_precisely(deadline: Instant) {
    if let Some(early) = deadline.checked_sub(COARSE_TIMER) {
        tokio::time::sleep_until(early).await;
    }
    if deadline > Instant::now() {
        // the rest measured on the blocking thread: its start can take a while
        let _ = tokio::task::spawn_blocking(move || {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()))
        })
        .await;
    }
}
