//! Looks into the memory backend at once, for the test kit: when the next job
//! or event retry is due, and what a subscriber has left to do.

use crate::JobId;
use crate::backend::memory::MemoryBackend;
use crate::backend::memory::state::MemQueue;
use crate::contract::topics::{DeadEvent, EventId};

/// What a subscriber has left to do (see [`MemoryBackend::subscriber_work`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work {
    /// Events not read yet, read and not settled, or whose retry is due.
    pub now: bool,
    /// When the next retry that is not due yet comes due, Unix ms.
    pub next_ms: Option<u64>,
}

impl MemoryBackend {
    /// When the next job not due now comes due, Unix ms, over every queue not
    /// paused (a leased job: when its lease ends; a delayed job: the whole ms
    /// its exact due falls in; a throttled queue's, or one whose stored rate
    /// limit holds it back: not before the throttle ends or the limit lets a
    /// job start; a keyed job waiting for its key: when a place of the key
    /// frees by time).
    pub(crate) fn next_due_ms(&self) -> Option<u64> {
        let now = self.clock.now_ms();
        let st = self.lock();
        st.queues
            .values()
            .filter(|q| !q.paused)
            .filter_map(|q| {
                let held = q.throttled_until.max(q.rate_held_until(now).unwrap_or(0));
                let due = q.next_due_ms().map(|due| due.max(held));
                due.into_iter().chain(q.key_frees_ms()).min()
            })
            .min()
    }

    /// Every job waiting in `queue` (due or not, leased or not, or waiting
    /// for its concurrency key's place) with when it is due (Unix ms; a
    /// leased one: its lease end) and its place in the order the backend's
    /// messages entered their queues (a send's, a tick's, a requeue's: see
    /// `Msg::seq`), in due order: what [`messages`](Self::messages) gives
    /// and the keyed jobs blocked apart.
    pub(crate) fn jobs_waiting(&self, queue: &str) -> Vec<(JobId, Vec<u8>, u64, u64)> {
        let st = self.lock();
        let Some(q) = st.queues.get(queue) else {
            return Vec::new();
        };
        let mut all: Vec<_> = q.all().chain(q.keyed.values().flatten()).collect();
        all.sort_unstable();
        all.into_iter()
            .filter_map(|(score, id)| {
                let m = q.msgs.get(id)?;
                Some((*id, m.body.clone(), score / 1000, m.seq))
            })
            .collect()
    }

    /// The events of `topic` still in it, oldest first: id, type and data.
    pub(crate) fn events_of(&self, topic: &str) -> Vec<(EventId, String, String)> {
        let all = self.topics();
        all.get(topic).map_or_else(Vec::new, |t| {
            t.entries
                .iter()
                .map(|(id, e)| (*id, e.ty.clone(), e.data.clone()))
                .collect()
        })
    }

    /// The dead letters of a subscriber, oldest first.
    pub(crate) fn dead_events_of(&self, topic: &str, subscriber: &str) -> Vec<DeadEvent> {
        let all = self.topics();
        all.get(topic)
            .and_then(|t| t.groups.get(subscriber))
            .map_or_else(Vec::new, |g| g.dead.iter().cloned().collect())
    }

    /// What the subscriber has left to do, for a worker that claims events idle
    /// for `lease_ms`: a retry is set idle so that it is claimed when it is due.
    pub(crate) fn subscriber_work(&self, topic: &str, subscriber: &str, lease_ms: u64) -> Work {
        let now = self.clock().now_ms();
        let all = self.topics();
        let Some(t) = all.get(topic) else {
            return Work::default();
        };
        let Some(g) = t.groups.get(subscriber) else {
            return Work::default();
        };
        let mut work = Work {
            now: t.after(g.offset).next().is_some(),
            next_ms: None,
        };
        for p in g.pending.values() {
            // a delivery with no record yet is read or running
            let settled = p.runs.last().is_some_and(|a| a.number >= p.deliveries);
            let due = p.delivered_ms.saturating_add(lease_ms);
            if !settled || due <= now {
                work.now = true;
            } else {
                work.next_ms = Some(work.next_ms.map_or(due, |n: u64| n.min(due)));
            }
        }
        work
    }
}

impl MemQueue {
    /// Whether the queue's jobs are held back at `now` (Unix ms) though due:
    /// a handler's throttle, or the rate limit stored with it, whose window
    /// is full (see [`rate_held_until`](MemQueue::rate_held_until)).
    pub(super) fn held_back(&self, now: u64) -> bool {
        self.throttled_until > now || self.rate_held_until(now).is_some()
    }

    /// When the first place of a key with jobs waiting for it frees by time
    /// (a cancelled or deleted running job's lease end, the end of a
    /// handler's throttle of the key), Unix ms: the next fetch then gives the
    /// place to the key's first waiting job (see
    /// [`expire_ghosts`](MemQueue::expire_ghosts)).
    pub(super) fn key_frees_ms(&self) -> Option<u64> {
        self.key_events
            .iter()
            .find(|(_, k)| self.keyed.contains_key(k))
            .map(|(at, _)| *at)
    }

    /// When a place of `key` frees by time, if one will.
    pub(super) fn key_frees_at(&self, key: &str) -> Option<u64> {
        let e = self.keys.get(key)?;
        let until = (e.until_ms != 0).then_some(e.until_ms);
        e.ghosts
            .iter()
            .map(|(_, end)| end.saturating_add(1))
            .chain(until)
            .min()
    }
}
