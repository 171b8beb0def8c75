//! The in-memory backend: the same semantics as Redis, in this process.
//!
//! For tests (with a [`Clock`] they control, so delays, leases and backoff take no
//! real time) and for single-process apps and quickstarts that run with nothing
//! installed. Nothing is persisted: jobs live and die with the process, and other
//! processes cannot see them. Use Redis for anything that must survive a restart.
//!
//! ```
//! use redjob::backend::memory::MemoryBackend;
//! use redjob::Client;
//!
//! let backend = MemoryBackend::new();
//! let client = Client::memory(backend.clone());
//! # let _ = client;
//! ```

mod admin;
mod batch_adds;
mod batches;
mod clock;
mod exact;
mod flows;
mod history;
mod inspect;
mod keys;
mod leases;
mod live;
mod probe;
mod queues;
mod settings;
mod state;
mod streams;
mod topic_claim;
mod topic_info;
mod topics;

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{broadcast, watch};

pub use clock::Clock;
use state::{MemQueue, State};

use crate::{Error, JobId};

/// Queues and workers' state in memory. Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    clock: Clock,
    sent: broadcast::Sender<Arc<str>>,
    /// Bumped after every call that changed the state (see [`MemoryBackend::changes`]).
    changed: Arc<watch::Sender<u64>>,
    /// Topics (see [`crate::topic`]).
    streams: Arc<crate::backend::memory::streams::Streams>,
    /// Who its actions are recorded as (see [`Inspect::actor`](crate::inspect::Inspect::actor)).
    actor: Arc<str>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("clock_ms", &self.clock.now_ms())
            .finish_non_exhaustive()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty backend on a clock that starts now.
    pub fn new() -> Self {
        Self::with_clock(Clock::new())
    }

    /// An empty backend on `clock`.
    pub fn with_clock(clock: Clock) -> Self {
        MemoryBackend {
            state: Arc::default(),
            clock,
            sent: broadcast::channel(1024).0,
            changed: Arc::new(watch::Sender::new(0)),
            streams: Arc::default(),
            actor: "api".into(),
        }
    }

    /// This handle on the same state, recording its actions in the queues'
    /// history as `by` (see [`Inspect::actor`](crate::inspect::Inspect::actor)).
    ///
    /// ```
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::inspect::Inspect;
    ///
    /// let m = MemoryBackend::new().acting_as("cli alice");
    /// assert_eq!(m.actor(), "cli alice");
    /// ```
    pub fn acting_as(mut self, by: &str) -> Self {
        self.actor = crate::contract::history::actor_line(by).into();
        self
    }

    /// The backend's clock: advance it to make delayed jobs, retries and lease
    /// expiries due without waiting.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub(crate) fn streams(&self) -> &crate::backend::memory::streams::Streams {
        &self.streams
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // a panic while holding the lock cannot leave the maps half-updated in a way
        // that matters more than losing the whole state, so carry on
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One id, as a send's: now by its clock, above every id it gave (no
    /// change to the state a watcher need hear of).
    pub(crate) fn next_id(&self) -> crate::JobId {
        let now_us = self.clock.now_us();
        self.lock().ids.next(now_us, 1)[0]
    }

    /// The lock for a call that changes the state: watchers of
    /// [`changes`](Self::changes) are told when it is released.
    fn lock_mut(&self) -> Changing<'_> {
        Changing {
            guard: Some(self.lock()),
            changed: &self.changed,
        }
    }

    /// Tells the receiver after every change to the backend's state (a send, fetch,
    /// settle, delete…), so a test can wait for the next change instead of polling.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Bodies waiting in `queue` (due or not, leased or not) with when each is due
    /// (Unix ms, the score's whole ms; a leased one: its lease end), in score order.
    pub fn messages(&self, queue: &str) -> Vec<(JobId, Vec<u8>, u64)> {
        let st = self.lock();
        st.queues.get(queue).map_or_else(Vec::new, |q| {
            let mut all: Vec<_> = q.all().collect();
            all.sort_unstable();
            all.into_iter()
                .map(|(score, id)| {
                    // the score's whole ms; a leased job's lease end
                    (*id, q.msgs[id].body.clone(), score / 1000)
                })
                .collect()
        })
    }

    /// How many unique-key entries `queue` keeps, counted as Redis counts the
    /// fields of `ns:q:unique`: a key's entry and its holder's back link each. 0
    /// once every unique job has left the queue.
    ///
    /// ```
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::queue::{QueueOptions, Queues, SendMessage, Unique};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("q", QueueOptions::default()).await?;
    /// let id = q.send("q", SendMessage::new("x").unique(Unique::new("k"))).await?;
    /// assert_eq!(q.unique_entries("q"), 2);
    /// q.delete("q", &id).await?;
    /// assert_eq!(q.unique_entries("q"), 0);
    /// # Ok(()) }
    /// ```
    pub fn unique_entries(&self, queue: &str) -> usize {
        let st = self.lock();
        st.queues
            .get(queue)
            .map_or(0, |q| q.unique.len() + q.unique_of.len())
    }

    /// The queues' names.
    pub fn queue_names(&self) -> Vec<String> {
        self.lock().queues.keys().cloned().collect()
    }

    /// True when no message of any queue is leased to a worker, and none is due
    /// now in a queue that is not paused, throttled (by a handler's
    /// [`JobError::rate_limited`](crate::JobError::rate_limited)) or held back
    /// by the rate limit stored with it (its window is full: see
    /// [`RateLimit`](crate::ops::RateLimit)): neither a job in the queue (due
    /// by its score, or a delayed job exactly by its send's µs plus the delay)
    /// nor a keyed job whose key's place freed by time (a cancelled running
    /// job's lease ended, a throttle of the key ended).
    pub fn is_idle(&self) -> bool {
        let now_us = self.clock.now_us();
        let now = now_us / 1000;
        let st = self.lock();
        st.queues.values().all(|q| {
            (q.paused
                || ((q.held_back(now) || !q.any_due(now_us))
                    && q.key_frees_ms().is_none_or(|at| at > now)))
                && q.msgs.values().all(|m| !m.lease)
        })
    }

    /// What keeps the backend from being idle, queue by queue: jobs due now and
    /// jobs leased, each counted by job name (`?` for a body that is no job).
    pub(crate) fn pending(&self) -> Vec<Pending> {
        let now_us = self.clock.now_us();
        let now = now_us / 1000;
        let st = self.lock();
        let mut out = Vec::new();
        for (name, q) in &st.queues {
            let mut p = Pending {
                queue: name.clone(),
                ..Pending::default()
            };
            let held = q.paused || q.held_back(now);
            for m in q.msgs.values() {
                let due = m.score / 1000 <= now || m.exact_us.is_some_and(|us| us <= now_us);
                let list = if m.lease {
                    &mut p.running
                } else if due && !held {
                    &mut p.due
                } else {
                    continue;
                };
                let name =
                    crate::contract::envelope::job_name(&m.body).unwrap_or_else(|| "?".into());
                *list.entry(name).or_default() += 1;
            }
            // the first job waiting for a key whose place freed by time
            for (key, waiting) in &q.keyed {
                let freed = !q.paused && q.key_frees_at(key).is_some_and(|at| at <= now);
                if let Some(m) = waiting
                    .first()
                    .filter(|_| freed)
                    .and_then(|(_, id)| q.msgs.get(id))
                {
                    let name =
                        crate::contract::envelope::job_name(&m.body).unwrap_or_else(|| "?".into());
                    *p.due.entry(name).or_default() += 1;
                }
            }
            if !p.due.is_empty() || !p.running.is_empty() {
                out.push(p);
            }
        }
        out
    }

    /// Tells the watchers of [`changes`](Self::changes) of a change made
    /// without the state's lock (a topic's).
    fn changed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn notify(&self, queue: &str) {
        let _ = self.sent.send(queue.into());
    }
}

/// Jobs of one queue that keep the backend from being idle, counted by job name.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub queue: String,
    pub due: std::collections::BTreeMap<String, usize>,
    pub running: std::collections::BTreeMap<String, usize>,
}

/// The state's lock, held for a change; watchers hear of it once it is released.
struct Changing<'a> {
    guard: Option<MutexGuard<'a, State>>,
    changed: &'a watch::Sender<u64>,
}

impl std::ops::Deref for Changing<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_deref().expect("held until drop")
    }
}

impl std::ops::DerefMut for Changing<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_deref_mut().expect("held until drop")
    }
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

fn not_found(name: &str) -> Error {
    Error::QueueNotFound { name: name.into() }
}

/// Counts `n` entries read by a call, for the tests that bound a call's work
/// by the entries it reads rather than by its time (see
/// [`tally::take`]); nothing outside the tests.
#[inline]
fn read_entries(n: usize) {
    #[cfg(test)]
    tally::READ.with(|r| r.set(r.get() + n));
    #[cfg(not(test))]
    let _ = n;
}

/// The entries read on this thread (see [`read_entries`]).
#[cfg(test)]
mod tally {
    use std::cell::Cell;

    thread_local! {
        pub(super) static READ: Cell<usize> = const { Cell::new(0) };
    }

    /// The entries read on this thread since the last call, and starts again at 0.
    pub(super) fn take() -> usize {
        READ.with(|r| r.replace(0))
    }
}
