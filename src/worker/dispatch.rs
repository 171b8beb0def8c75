//! One dispatcher per queue: lease as many due jobs as there are free slots in one
//! call, start them, and when nothing is due sleep until the next due score, a
//! wake-up, or the poll interval, whichever comes first. No busy polling.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use super::limit::Limit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Shared;
use super::execute::{Run, RunSlot, execute};
use super::hooks::{JobRun, UNDECODABLE};
use super::leases::Admit;
use super::metrics::QueueMetrics;
use super::observe::End;
use super::settle::{Event, Outcome};
use crate::contract::attempts::AttemptOutcome;
use crate::contract::backend::Backend;
use crate::contract::leases::{Fetched, Handed};

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

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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
/// fails holds it here until the throttle ends.
/// Every job start and fetch asks it: without a throttle that is one atomic
/// load.
#[derive(Default)]
pub(crate) struct Hold {
    state: std::sync::Mutex<Option<(Instant, bool)>>,
    /// A throttle may be held (the state is `Some`).
    any: std::sync::atomic::AtomicBool,
}

impl Hold {
    /// A handler's throttle of `d`: nothing of the queue starts here until it
    /// ends or its settle lands.
    pub fn throttle(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut h = lock(&self.state);
        let until = h.map_or(until, |(old, _)| old.max(until));
        *h = Some((until, false));
        self.any.store(true, Ordering::SeqCst);
    }

    /// The throttles settled so far landed: the backend holds the queue.
    pub fn landed(&self) {
        if let Some((_, landed)) = lock(&self.state).as_mut() {
            *landed = true;
        }
    }

    /// Until when this worker holds the queue itself, if it does.
    pub fn until(&self) -> Option<Instant> {
        if !self.any.load(Ordering::SeqCst) {
            return None;
        }
        let mut h = lock(&self.state);
        match *h {
            Some((until, false)) if until > Instant::now() => Some(until),
            _ => {
                *h = None;
                self.any.store(false, Ordering::SeqCst);
                None
            }
        }
    }
}

/// Jobs that run longer than this on average are not prefetched: a prefetched
/// job would wait that long in this worker while another might be idle.
const PREFETCH_BELOW: Duration = Duration::from_millis(50);

/// How often a dispatcher waiting for a slot of its queue's share looks
/// again, should no notice come.
const SLOT_RECHECK: Duration = Duration::from_millis(50);

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
    fn short_jobs(&self) -> bool {
        self.run_us.load(Ordering::Relaxed) < PREFETCH_BELOW.as_micros() as u64
    }

    /// How many jobs to prefetch for this queue's jobs (when they are short):
    /// as many as the worker's handlers run in [`PREFETCH_WAIT`] at their
    /// average run time, at least the concurrency, at most the prefetch.
    fn prefetch(&self, shared: &Shared) -> usize {
        let avg = self.run_us.load(Ordering::Relaxed).max(1);
        let fit =
            (shared.concurrency as u64).saturating_mul(PREFETCH_WAIT.as_micros() as u64) / avg;
        let floor = shared.concurrency.min(shared.prefetch);
        usize::try_from(fit)
            .unwrap_or(usize::MAX)
            .clamp(floor, shared.prefetch)
    }
}

/// Takes one permit (waiting), then as many more as are free, up to `max`.
/// The permits are forgotten; [`SlotGuard`] or the caller adds them back.
/// With `settle` (the worker's slots), when few are free it first lets jobs
/// just started finish.
async fn take(sem: &Semaphore, max: u32, settle: bool) -> u32 {
    let Ok(first) = sem.acquire().await else {
        return 0;
    };
    first.forget();
    if settle && sem.available_permits() < (max as usize) / 2 {
        // jobs just started may finish at once: let them, and fetch a fuller batch
        Requeue(false).await;
    }
    let mut n = 1;
    while n < max {
        match sem.try_acquire() {
            Ok(p) => {
                p.forget();
                n += 1;
            }
            Err(_) => break,
        }
    }
    n
}

/// Yields once by waking itself: the task goes to the back of its thread's run
/// queue, behind the jobs just spawned there, where another thread may take
/// it. Not `tokio::task::yield_now`, which holds the wake until its thread has
/// nothing else to run: a handler that blocks that thread held the dispatcher
/// (and so every other job of its queue) until it ended.
struct Requeue(bool);

impl std::future::Future for Requeue {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// The most jobs a hand-off registration is good for (the Redis backend's
/// sends count no further, see HANDS_MAX in lib.lua): a worker with more
/// running slots free registers again after that many hand-offs.
const HANDS_MAX: usize = 8;

/// The most a hand-off's lease may have begun before the job arrived (by the
/// last fetch's clocks) for the job to start here; one that came later is put
/// back to be fetched (see [`Dispatcher::take_handed`]).
const HANDOFF_SLACK: Duration = Duration::from_secs(1);

impl<B: Backend> Dispatcher<B> {
    /// Serves the queue until shutdown. Jobs sends hand to this worker come
    /// through [`Dispatcher::take_handed`], called by the worker's listener.
    pub async fn run(self: Arc<Self>) {
        let mut failures = 0u32;
        let mut served = false;
        let mut paused = false;
        let mut slot_freed = false;
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
            // before the prefetch is decided
            let unread = !self.follow.is_read(&self.env.queue)
                && !self.follow.read(&self.backend, &self.env.queue).await;
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
                let free = self.env.shared.running_free() as u32;
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

    /// Starts a job a send handed to this worker when a slot is free; else (or
    /// at shutdown) releases it for any worker; then, when it was the last job
    /// the registration was good for (or released), wakes the dispatcher to
    /// fetch (and register) again. Called by the listener, so the job starts
    /// without a hop through the dispatcher's task. The lease began by the
    /// backend's clock `h.now_us`, which the last fetch's send time here and the
    /// backend's clock during it map to this worker's clock no later than it
    /// truly began (the fetch was sent before Redis read its clock), and no
    /// later than the job's arrival; a job whose lease began more than
    /// [`HANDOFF_SLACK`] before it arrived is released.
    pub fn take_handed(&self, h: Handed) {
        if h.lost {
            self.reclaim(h);
            return;
        }
        // the registration's count, as the send counts it down: while some
        // are left it stays in place, and the dispatcher need not fetch to
        // register again (one call a job less for an idle worker); a count
        // here that differs from the send's (a hand-off of an earlier
        // registration arriving after a fetch made a new one) costs a fetch
        // too many, or a wake-up instead of a hand-off
        let left = self
            .registered
            .fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |n| Some(n.saturating_sub(1)),
            )
            .unwrap_or(0)
            .saturating_sub(1);
        // the dispatcher is woken by the job's run once that has been polled
        // once: woken here, it would take this thread's next turn and push the
        // job to where another thread, woken for it, takes it (on the 2-core
        // bench 20-40 µs of a hand-off's start went to that)
        if !self.start_handed(h, left == 0) {
            self.wake.notify_one();
        }
    }

    /// A job handed to this worker before its listener (re)connected, whose
    /// message may have been lost with the connection: every hand-off that
    /// reached this worker was taken before this note came, so a job not held
    /// here never arrived. It is released, not counted as an attempt, so that it
    /// runs now rather than after its lease (the release is fenced by the
    /// hand-off's token: a job that ran and was settled is left alone).
    fn reclaim(&self, h: Handed) {
        if self.env.leases.lock().held.contains_key(&h.delivery.id) {
            return;
        }
        tracing::info!(queue = %self.env.queue, job.id = %h.delivery.id,
            "a job handed to this worker never reached it (its notification connection closed): released to run now");
        self.release_handed(h);
    }

    /// Whether a run was spawned for it, which wakes the dispatcher when
    /// `wake` (the registration is used up).
    fn start_handed(&self, h: Handed, wake: bool) -> bool {
        let arrived = Instant::now();
        let began = (*lock(&self.clock)).and_then(|(sent_at, now_us)| {
            if h.now_us >= now_us {
                sent_at.checked_add(Duration::from_micros(h.now_us - now_us))
            } else {
                sent_at.checked_sub(Duration::from_micros(now_us - h.now_us))
            }
        });
        // a lease that began well before the job came (a slow notification
        // connection, a stalled worker, or clocks that disagree since the last
        // fetch): the time left of it here is uncertain, and taken as a second
        // before the job came it could outlast the lease in Redis, where the job
        // is then delivered again; put back, it is fetched with a lease of its own
        let slack = HANDOFF_SLACK.min(self.env.shared.lease / 4);
        let began = match began {
            Some(began) if began + slack >= arrived => began.min(arrived),
            _ => {
                tracing::debug!(queue = %self.env.queue, job.id = %h.delivery.id,
                    "a job handed to this worker came late: released to be fetched");
                self.release_handed(h);
                return false;
            }
        };
        // a handed job that cannot start at once (every running slot taken, as
        // by another queue's hand-off, or the worker quiet) is released, which
        // wakes the queue's other waiting workers for it (complete.lua)
        if self.env.per_queue.stop.is_cancelled()
            || self.env.shared.controls.is_quiet()
            || self.env.shared.running.available_permits() == 0
            || !self.try_slot()
        {
            self.release_handed(h);
            return false;
        }
        let mut fetched = Fetched {
            jobs: vec![h.delivery],
            now_us: h.now_us,
            ..Fetched::default()
        };
        self.start(&mut fetched, began, wake.then_some(&self.wake))
    }

    /// Puts a handed job back, unstarted (it holds no slot).
    fn release_handed(&self, h: Handed) {
        self.release_one(h.delivery, Instant::now());
        let _ = self.env.tx.send(Event::Finished);
    }

    /// One free slot of the worker and of this queue, taken without waiting.
    fn try_slot(&self) -> bool {
        let local = match self.env.queue_slots.sem().try_acquire() {
            Ok(p) => p,
            Err(_) => return false,
        };
        // given back through the limit, which may be owed it
        local.forget();
        match self.env.shared.slots.try_acquire() {
            Ok(p) => {
                p.forget();
                true
            }
            Err(_) => {
                self.env.queue_slots.release(1);
                false
            }
        }
    }

    /// Starts the fetched jobs; a job this worker still holds is merged into the
    /// held delivery instead of running twice.
    /// Takes the jobs out of `fetched` (moved into their runs, not copied).
    /// `then_wake` goes to the first run spawned, which notifies it once it
    /// has been polled; returns whether one took it (or none was given).
    fn start(
        &self,
        fetched: &mut Fetched,
        sent_at: Instant,
        mut then_wake: Option<&Arc<Notify>>,
    ) -> bool {
        let deadline = sent_at + self.env.shared.lease;
        let replied = Instant::now();
        for d in std::mem::take(&mut fetched.jobs) {
            let batch = crate::contract::batches::BatchRef::of_body(&d.body);
            // the job type, read from the envelope's head when it can be (the
            // run records it otherwise, once decoded); none for a body over
            // the queue's maxsize, dead-lettered below unrun
            let oversized = fetched.max_body.is_some_and(|m| d.body.len() > m);
            let linked = if oversized {
                None
            } else {
                crate::job::linked(&d.body)
            };
            let job = linked.map(|l| l.name);
            let admitted = self
                .env
                .leases
                .admit(d.id, d.token, deadline, replied, batch, job);
            let (run, cancel) = match admitted {
                Admit::Start { run, cancel } => (run, cancel),
                Admit::Merged { finished } => {
                    tracing::info!(queue = %self.env.queue, job.id = %d.id,
                            "delivered again while still held here (its lease ran out before a renewal, or it was made visible); the held run goes on under the new lease");
                    if finished {
                        let _ = self.env.tx.send(Event::Finished);
                    }
                    self.give_back(1);
                    continue;
                }
            };
            if let Some(max) = fetched.max_body.filter(|m| d.body.len() > *m) {
                // the run's span, as a run that starts has (rare: its cost
                // stays on this path)
                let attempt = d.token.attempt();
                let span = tracing::info_span!("job", job.id = %d.id, job.name = tracing::field::Empty, queue = %self.env.queue, attempt);
                crate::job::trace::continue_in(&span, &d.body);
                let name = crate::contract::envelope::job_name(&d.body);
                if let Some(name) = &name {
                    super::execute::record_name(&span, name);
                }
                let _in = span.enter();
                let error = format!(
                    "body of {} bytes is over the queue's maxsize of {max}",
                    d.body.len()
                );
                tracing::error!(%error, "dead-lettered");
                let observer = &self.env.shared.observer;
                let heard = observer
                    .active(&self.env.per_queue.metrics)
                    .then(|| error.clone());
                let now = fetched.now_us / 1000;
                let ran = (now, now, AttemptOutcome::Error);
                if self
                    .env
                    .leases
                    .finish(d.id, run, Outcome::Dead { error }, ran, None)
                    .is_ok()
                {
                    let _ = self.env.tx.send(Event::Finished);
                    if let Some(error) = heard {
                        let job = name.as_deref().unwrap_or(UNDECODABLE);
                        let waited = Duration::from_millis(d.waited_ms);
                        let r = JobRun::new(d.id, &self.env.queue, job, attempt, waited);
                        let end = End::Dead { error: &error };
                        observer.ended(&self.env.per_queue.metrics, None, &r, None, end);
                    }
                }
                self.give_back(1);
                continue;
            }
            self.tracker.spawn(execute(
                Run {
                    delivery: d,
                    run,
                    cancel,
                    fetched_at_us: fetched.now_us,
                    fetched: replied,
                    batch: batch.map(|b| Box::new(b.batch)),
                    linked,
                    then_wake: super::execute::ThenWake(then_wake.take().cloned()),
                },
                RunSlot::new(self.env.clone()),
            ));
        }
        then_wake.is_none()
    }

    /// Shutdown came during the fetch: release what it leased, unstarted.
    fn release(&self, fetched: Fetched, sent_at: Instant) {
        for d in fetched.jobs {
            self.release_one(d, sent_at);
            self.give_back(1);
        }
        let _ = self.env.tx.send(Event::Finished);
    }

    /// Queues the release of a delivery leased at `sent_at` that never started.
    fn release_one(&self, d: crate::contract::leases::Delivery, sent_at: Instant) {
        let deadline = sent_at + self.env.shared.lease;
        if let Admit::Start { run, .. } =
            self.env
                .leases
                .admit(d.id, d.token, deadline, Instant::now(), None, None)
        {
            let _ = self.env.leases.finish(
                d.id,
                run,
                Outcome::Release {
                    delay: Duration::ZERO,
                },
                (0, 0, AttemptOutcome::Cancelled),
                None,
            );
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

    fn give_back(&self, n: u32) {
        give_back(&self.env.shared, Some(&self.env.queue_slots), n);
    }
}

/// How [`running_slot`] found a running slot that may be free.
#[derive(Debug, PartialEq, Eq)]
enum Freed {
    /// The jobs leased before took their slots, or went back without: look
    /// again.
    Taken,
    /// A running job gave its slot back.
    Ended,
}

/// How often a dispatcher looks again while the free running slots are held
/// for jobs leased before whose tasks have yet to run.
const START_RECHECK: Duration = Duration::from_millis(1);

/// Waits while no running slot is free for a job leased now (see
/// [`Shared::running_free`]); `None` at `stop`. When the free running permits
/// are all held for jobs leased before whose tasks have yet to run, it waits
/// until they take them or go back ([`Freed::Taken`]), looking every
/// [`START_RECHECK`]: never for a permit, which it would get at once, and
/// lease a job beside them that then waits behind them. On a busy machine a
/// task may wait for its first run longer than any one pause. A sleep, not a
/// yield or a notice from the job's task: either parks this task on a thread
/// behind the job, and a handler that blocks its thread held the dispatcher
/// (and so a shutdown's grace period) until it ended. Else it waits for a
/// running job to end ([`Freed::Ended`]).
async fn running_slot(
    running: &Semaphore,
    unstarted: &AtomicUsize,
    stop: &CancellationToken,
) -> Option<Freed> {
    if running.available_permits() > 0 {
        while running.available_permits() > 0 && super::running_free(running, unstarted) == 0 {
            tokio::select! {
                _ = tokio::time::sleep(START_RECHECK) => {}
                _ = stop.cancelled() => return None,
            }
        }
        return Some(Freed::Taken);
    }
    tokio::select! {
        p = running.acquire() => drop(p),
        _ = stop.cancelled() => return None,
    }
    Some(Freed::Ended)
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

/// Free slots of the worker and of `local` (a queue's or a subscriber's limit),
/// at least one (waiting for it), at most `max`.
pub(super) async fn slots(shared: &Shared, local: Option<&Limit>, max: u32) -> u32 {
    match local {
        None => take(&shared.slots, max, true).await,
        Some(q) => {
            // the worker's first, then as many of the limit's as are free
            // (all of them when no limit binds: nothing to give back)
            let g = take(&shared.slots, max, true).await;
            let mut n = 0;
            while n < g {
                match q.sem().try_acquire() {
                    Ok(p) => {
                        p.forget();
                        n += 1;
                    }
                    Err(_) => break,
                }
            }
            if n > 0 {
                if g > n {
                    shared.give_slots((g - n) as usize);
                }
                return n;
            }
            // the limit binds: wait for its places, then the worker's
            shared.give_slots(g as usize);
            let n = take(q.sem(), max, false).await;
            let g = take(&shared.slots, n, true).await;
            q.release((n - g) as usize);
            g
        }
    }
}

/// Returns `n` slots to the worker and to `local`.
pub(super) fn give_back(shared: &Shared, local: Option<&Limit>, n: u32) {
    if n > 0 {
        // the queue's places first: a dispatcher the worker's slots wake
        // sees both free
        if let Some(q) = local {
            q.release(n as usize);
        }
        shared.give_slots(n as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::{Freed, running_slot};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::sync::Semaphore;
    use tokio_util::sync::CancellationToken;

    /// A worker of 2 running slots leased 2 long jobs whose tasks have yet to
    /// run: their slots are not free, so it must not lease a third (which
    /// would wait a whole run here while another worker idles) until one
    /// takes its slot or goes back. The check before this fix slept once for
    /// them, then waited for a free permit, which it got at once.
    #[tokio::test]
    async fn slots_held_for_jobs_yet_to_run_are_waited_for_not_leased() {
        let running = Semaphore::new(2);
        let unstarted = AtomicUsize::new(2);
        let stop = CancellationToken::new();
        let mut wait = Box::pin(running_slot(&running, &unstarted, &stop));
        let early = tokio::time::timeout(Duration::from_millis(100), &mut wait).await;
        assert!(
            early.is_err(),
            "returned {early:?} while both slots were held"
        );
        // one goes back without its slot: a slot is free, look again
        unstarted.fetch_sub(1, Ordering::AcqRel);
        let found = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert_eq!(found.unwrap(), Some(Freed::Taken));
        // the other takes its slot, as does a third job: none free until one ends
        let a = running.try_acquire().unwrap();
        unstarted.fetch_sub(1, Ordering::AcqRel);
        let b = running.try_acquire().unwrap();
        let mut wait = Box::pin(running_slot(&running, &unstarted, &stop));
        let early = tokio::time::timeout(Duration::from_millis(100), &mut wait).await;
        assert!(early.is_err(), "returned {early:?} while both jobs ran");
        drop(a);
        let found = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert_eq!(found.unwrap(), Some(Freed::Ended));
        drop(b);
        // at shutdown it returns none, held or not
        unstarted.store(3, Ordering::Release);
        let wait = running_slot(&running, &unstarted, &stop);
        stop.cancel();
        let found = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert_eq!(found.unwrap(), None);
    }
}
