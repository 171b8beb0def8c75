//! The sorted sets by priority: which messages are due, and entering, moving
//! and removing messages.

use std::collections::BTreeSet;

use super::{MAX_ID, MemQueue, Msg, due_score, next_seq};
use crate::JobId;

impl MemQueue {
    /// Up to `n` ids at priority 0 due at `now` (Unix ms), oldest first.
    pub fn due(&self, now: u64, n: usize) -> Vec<(u64, JobId)> {
        self.index
            .range(..=(due_score(now), MAX_ID))
            .take(n)
            .copied()
            .collect()
    }

    /// Up to `n` ids of any priority due at `now` (Unix ms), highest priority
    /// first, then oldest first; each with its score and priority.
    pub fn due_all(&self, now: u64, n: usize) -> Vec<(u64, JobId, i8)> {
        self.take(&[(0, due_score(now))], n)
    }

    /// Up to `n` ids a fetch at `now` (Unix ms) leases, highest priority first;
    /// within one, oldest due first (a lease that ran out is due from its end).
    /// Each with its score and priority.
    pub fn fetchable(&self, now: u64, n: usize) -> Vec<(u64, JobId, i8)> {
        self.take(&[(0, due_score(now))], n)
    }

    /// Up to `n` ids within the score `ranges` (inclusive), level by level from
    /// the highest priority, each level's ranges in turn.
    fn take(&self, ranges: &[(u64, u64)], n: usize) -> Vec<(u64, JobId, i8)> {
        let mut out = Vec::new();
        for p in crate::contract::queues::priorities() {
            let Some(set) = self.set(p) else { continue };
            for &(lo, hi) in ranges {
                let left = n - out.len();
                if left == 0 {
                    return out;
                }
                out.extend(
                    set.range((lo, JobId::MIN)..=(hi, MAX_ID))
                        .take(left)
                        .map(|(s, id)| (*s, *id, p)),
                );
            }
        }
        out
    }

    /// When the earliest job of any priority becomes due (a delayed message, a
    /// retry, or a lease that may run out), Unix ms.
    pub fn next_due_ms(&self) -> Option<u64> {
        // a lease is scored at its end
        self.first_score().map(|k| k / 1000)
    }

    /// The sorted sets of every priority.
    pub fn sets(&self) -> impl Iterator<Item = &BTreeSet<(u64, JobId)>> {
        std::iter::once(&self.index).chain(self.levels.values())
    }

    /// Every (score, id) of every priority.
    pub fn all(&self) -> impl Iterator<Item = &(u64, JobId)> {
        self.index.iter().chain(self.levels.values().flatten())
    }

    /// The lowest score of any priority.
    pub fn first_score(&self) -> Option<u64> {
        self.index
            .first()
            .into_iter()
            .chain(self.levels.values().filter_map(|s| s.first()))
            .map(|(s, _)| *s)
            .min()
    }

    pub fn set(&self, p: i8) -> Option<&BTreeSet<(u64, JobId)>> {
        if p == 0 {
            Some(&self.index)
        } else {
            self.levels.get(&p)
        }
    }

    fn set_mut(&mut self, p: i8) -> &mut BTreeSet<(u64, JobId)> {
        if p == 0 {
            &mut self.index
        } else {
            self.levels.entry(p).or_default()
        }
    }

    pub fn rescore(&mut self, id: JobId, score: u64) {
        let Some(m) = self.msgs.get_mut(&id).filter(|m| !m.waiting) else {
            return;
        };
        let (old, p) = (m.score, m.priority);
        m.score = score;
        // due by its new score alone (see exact.rs)
        Self::unmark_exact(&mut self.exact, m, id);
        let set = self.set_mut(p);
        set.remove(&(old, id));
        set.insert((score, id));
    }

    /// Takes a message out of the queue, freeing the unique key it held and
    /// its concurrency key's place (or its wait).
    pub fn remove(&mut self, id: &JobId) -> Option<Msg> {
        let m = self.detach(id)?;
        if let Some(key) = &m.key {
            self.key_left(id, key, m.score, m.waiting);
        }
        self.release_unique(id);
        Some(m)
    }

    fn detach(&mut self, id: &JobId) -> Option<Msg> {
        self.leased.remove(id);
        let m = self.msgs.remove(id)?;
        if let Some(e) = m.exact_us {
            self.exact.remove(&(e, *id));
        }
        if !m.waiting {
            self.set_mut(m.priority).remove(&(m.score, *id));
        }
        Some(m)
    }

    /// Moves a message to another priority level, keeping its score.
    pub fn move_to(&mut self, id: JobId, priority: i8) {
        let Some(m) = self.msgs.get_mut(&id) else {
            return;
        };
        let (old, score) = (m.priority, m.score);
        m.priority = priority;
        self.set_mut(old).remove(&(score, id));
        self.set_mut(priority).insert((score, id));
    }

    /// Enters a message at `score` and `priority`, with the next entry's
    /// sequence (a dead letter requeued enters again, after every job that
    /// waits), replacing one with its id.
    pub fn insert(&mut self, id: JobId, body: Vec<u8>, score: u64, priority: i8) {
        self.detach(&id);
        self.msgs.insert(
            id,
            Msg {
                body,
                score,
                rc: 0,
                fr: None,
                lease: false,
                priority,
                error: None,
                log: None,
                released_lease: None,
                key: None,
                waiting: false,
                exact_us: None,
                seq: next_seq(),
            },
        );
        self.set_mut(priority).insert((score, id));
    }

    /// The fencing check: the message exists at the token's priority with exactly
    /// its score.
    pub fn holds(&self, id: &JobId, token: crate::contract::leases::Token) -> bool {
        self.msgs
            .get(id)
            .is_some_and(|m| m.score == token.score() && m.priority == token.priority())
    }
}
