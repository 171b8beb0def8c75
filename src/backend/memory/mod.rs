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

mod clock;
mod inspect;
mod live;
mod ops;
mod queues;
mod state;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, watch};

pub use clock::Clock;
use state::{MemQueue, State};

use super::{
    Backend, DeadLetter, Delivery, Fetched, MAX_COUNT, MinuteStats, QueueStats, Settle, Settled,
    Token, score_count,
};
use crate::queue::{QueueOptions, SendMessage, Sent};
use crate::{Error, JobId, Result};

/// Queues and workers' state in memory. Cheap to clone; clones share the state.
#[derive(Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    clock: Clock,
    sent: broadcast::Sender<Arc<str>>,
    /// Bumped after every call that changed the state (see [`MemoryBackend::changes`]).
    changed: Arc<watch::Sender<u64>>,
    /// Topics (see [`crate::topic`]).
    streams: Arc<crate::topic::Streams>,
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
        }
    }

    /// The backend's clock: advance it to make delayed jobs, retries and lease
    /// expiries due without waiting.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub(crate) fn streams(&self) -> &crate::topic::Streams {
        &self.streams
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // a panic while holding the lock cannot leave the maps half-updated in a way
        // that matters more than losing the whole state, so carry on
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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

    /// True when no message of any queue is due now or leased to a worker.
    pub fn is_idle(&self) -> bool {
        let now = self.clock.now_ms();
        let st = self.lock();
        st.queues.values().all(|q| {
            q.first_score().is_none_or(|score| score / 1000 > now)
                && q.msgs.values().all(|m| !m.lease)
        })
    }

    /// What keeps the backend from being idle, queue by queue: jobs due now and
    /// jobs leased, each counted by job name (`?` for a body that is no job).
    pub(crate) fn pending(&self) -> Vec<Pending> {
        let now = self.clock.now_ms();
        let st = self.lock();
        let mut out = Vec::new();
        for (name, q) in &st.queues {
            let mut p = Pending {
                queue: name.clone(),
                ..Pending::default()
            };
            for m in q.msgs.values() {
                let list = if m.lease {
                    &mut p.running
                } else if m.score / 1000 <= now {
                    &mut p.due
                } else {
                    continue;
                };
                let name = crate::job::job_name(&m.body).unwrap_or_else(|| "?".into());
                *list.entry(name).or_default() += 1;
            }
            if !p.due.is_empty() || !p.running.is_empty() {
                out.push(p);
            }
        }
        out
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

impl Backend for MemoryBackend {
    async fn send(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        create: &QueueOptions,
    ) -> Result<Vec<Sent>> {
        super::send_creating(self, queue, msgs, create).await
    }

    async fn now_ms(&self) -> Result<u64> {
        Ok(self.clock.now_ms())
    }

    async fn tick(
        &self,
        queue: &str,
        tick: &crate::ops::Tick<'_>,
        msg: &SendMessage,
        create: &QueueOptions,
    ) -> Result<crate::ops::Ticked> {
        super::creating(self, queue, create, || async {
            self.tick_once(queue, tick, msg)
        })
        .await
    }

    async fn beat(&self, id: &str, beat: &[u8], ttl: Duration) -> Result<()> {
        self.beat_now(id, beat, ttl);
        Ok(())
    }

    async fn touch(&self, id: &str, ttl: Duration, _since: Duration) -> Result<bool> {
        Ok(self.touch_now(id, ttl))
    }

    async fn fetch(&self, queue: &str, max: usize, lease: Duration) -> Result<Fetched> {
        let now_us = self.clock.now_us();
        let now = now_us / 1000;
        let mut st = self.lock_mut();
        let Some(q) = st.queues.get_mut(queue) else {
            return Ok(Fetched {
                now_us,
                missing: true,
                ..Default::default()
            });
        };
        if q.paused {
            return Ok(Fetched {
                now_us,
                paused: true,
                ..Default::default()
            });
        }
        let max = max.max(1);
        let due = q.fetchable(now, max);
        let lease_ms = now.saturating_add(super::clamped_ms(lease));
        let mut jobs = Vec::with_capacity(due.len());
        for (score, id, priority) in &due {
            let m = &q.msgs[id];
            let count = u64::from(score_count(*score))
                .max(m.rc)
                .saturating_add(1)
                .min(u64::from(MAX_COUNT)) as u32;
            // a released job's lease ends after its last one (see fetch.lua)
            let until = m
                .released_lease
                .map_or(lease_ms, |l| lease_ms.max(l.saturating_add(1)));
            let token = Token::new(until, count).at_priority(*priority);
            jobs.push(Delivery {
                id: *id,
                body: m.body.clone(),
                token,
                waited_ms: now.saturating_sub(score / 1000),
            });
            q.rescore(*id, token.score());
            if let Some(m) = q.msgs.get_mut(id) {
                m.lease = true;
                m.released_lease = None;
            }
        }
        q.totalrecv += jobs.len() as u64;
        let next_due_us = (due.len() < max)
            .then(|| q.next_due_ms())
            .flatten()
            .map(|ms| ms.saturating_mul(1000));
        Ok(Fetched {
            jobs,
            now_us,
            next_due_us,
            max_body: usize::try_from(q.maxsize).ok(),
            orphans: 0,
            missing: false,
            paused: false,
        })
    }

    async fn extend(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> Result<Vec<Option<Token>>> {
        let until = self.clock.now_ms().saturating_add(super::clamped_ms(lease));
        let mut st = self.lock_mut();
        let Some(q) = st.queues.get_mut(queue) else {
            return Ok(vec![None; leases.len()]);
        };
        Ok(leases
            .iter()
            .map(|(id, token)| {
                q.holds(id, *token).then(|| {
                    // never earlier than it was, as extend.lua
                    let until = until.max(token.lease_until_ms());
                    let new = Token::new(until, token.attempt()).at_priority(token.priority());
                    q.rescore(*id, new.score());
                    new
                })
            })
            .collect())
    }

    async fn settle(&self, queue: &str, batch: &Settle) -> Result<Settled> {
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let Some(q) = st.queues.get_mut(queue) else {
            return Ok(Settled::default());
        };
        // every fence is checked before anything changes, as the script does
        let gone: Vec<JobId> = batch
            .acks
            .iter()
            .map(|(id, _)| id)
            .chain(batch.reschedules.iter().map(|r| &r.id))
            .chain(batch.dead.iter().map(|d| &d.id))
            .filter(|id| !q.msgs.contains_key(id))
            .copied()
            .collect();
        let acks: Vec<_> = batch
            .acks
            .iter()
            .filter(|(id, t)| q.holds(id, *t))
            .collect();
        let res: Vec<_> = batch
            .reschedules
            .iter()
            .filter(|r| q.holds(&r.id, r.token))
            .collect();
        let dead: Vec<_> = batch
            .dead
            .iter()
            .filter(|d| q.holds(&d.id, d.token))
            .collect();
        for (id, _) in &acks {
            q.remove(id);
        }
        let mut retried = 0;
        for r in &res {
            let count = u64::from(r.deliveries.min(MAX_COUNT));
            let due = now.saturating_add(super::clamped_ms(r.delay));
            q.rescore(r.id, due.saturating_mul(1000).saturating_add(count));
            if let Some(m) = q.msgs.get_mut(&r.id) {
                m.lease = false;
                if r.release {
                    m.released_lease = Some(r.token.lease_until_ms());
                }
                // an empty error keeps the last one, as complete.lua does
                if let Some(e) = r.error.as_ref().filter(|e| !e.is_empty()) {
                    m.error = Some(e.clone());
                }
            }
            retried += u64::from(!r.release);
        }
        for d in &dead {
            q.kill(&d.id, d.error.clone(), d.token.attempt(), now);
        }
        if !dead.is_empty() {
            q.trim_dead(now, batch.retention, dead.len() + 1000);
        }
        let s = &mut q.stats;
        s.processed += acks.len() as u64;
        s.retried += retried;
        s.dead += dead.len() as u64;
        s.failed += retried + dead.len() as u64;
        q.count_minute(now, acks.len() as u64, retried + dead.len() as u64);
        Ok(Settled {
            acked: acks.len() as u64,
            rescheduled: res.len() as u64,
            dead: dead.len() as u64,
            gone,
        })
    }

    async fn sizes(&self, queue: &str) -> Result<crate::inspect::StateCounts> {
        crate::inspect::Inspect::counts(self, queue).await
    }

    async fn stats(&self, queue: &str) -> Result<QueueStats> {
        crate::queue::validate::queue_name(queue)?;
        Ok(self
            .lock()
            .queues
            .get(queue)
            .map(|q| q.stats)
            .unwrap_or_default())
    }

    async fn minutes(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        crate::queue::validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let ring = st.queues.get(queue).map(|q| q.minutes);
        Ok(super::last_hour(
            now,
            ring.into_iter().flatten().map(super::ring_minute),
        ))
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        crate::queue::validate::queue_name(queue)?;
        let st = self.lock();
        Ok(st.queues.get(queue).map_or_else(Vec::new, |q| {
            q.dead
                .iter()
                .take(limit)
                .map(|(_, id)| q.dead_msgs[id].0.clone())
                .collect()
        }))
    }

    async fn scores(&self, queue: &str, held: &[(JobId, Token)]) -> Result<Vec<Option<Token>>> {
        let st = self.lock();
        let q = st.queues.get(queue);
        Ok(held
            .iter()
            .map(|(id, t)| {
                // looked up at the token's priority, as Redis reads that level's set
                let m = q?.msgs.get(id).filter(|m| m.priority == t.priority())?;
                Some(Token::from_raw(m.score, m.priority))
            })
            .collect())
    }

    async fn warnings(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    async fn listen(
        &self,
        queues: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> Result<()> {
        let mut sent = self.sent.subscribe();
        let mut advanced = self.clock.subscribe();
        subscribed();
        loop {
            tokio::select! {
                r = sent.recv() => match r {
                    Ok(q) => {
                        if queues.iter().any(|n| **n == *q) {
                            wake(&q);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => queues.iter().for_each(|q| wake(q)),
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
                r = advanced.changed() => {
                    if r.is_err() {
                        return Ok(());
                    }
                    queues.iter().for_each(|q| wake(q));
                }
            }
        }
    }
}

impl MemQueue {
    fn check_size(&self, maxlen: usize) -> Result<()> {
        if self.maxsize != -1 && maxlen as i64 > self.maxsize {
            return Err(Error::MessageTooLarge {
                size: maxlen,
                max: self.maxsize as usize,
            });
        }
        Ok(())
    }
}
