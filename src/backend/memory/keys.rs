//! Concurrency keys in memory, as `concurrency_keys` in lib.lua keeps them:
//! a keyed job holds one of its key's places (in the queue's sorted set, as
//! any job) or waits in `keyed`, apart, until one frees.

use super::state::{MemQueue, Msg};
use crate::JobId;
use crate::contract::admin::{KeyPage, KeyUsage};
use crate::contract::inspect::{self, Cursor, JobState, Page};
use crate::contract::keyed::Keyed;
use crate::contract::leases::{is_lease, score_count};

/// A concurrency key's places and its holders.
#[derive(Debug, Default)]
pub(super) struct KeyEntry {
    pub per: u32,
    pub holders: Vec<JobId>,
    /// Running jobs deleted or cancelled, and when their leases end (ms):
    /// their handlers are told at once and stop, so they keep their
    /// places until then.
    pub ghosts: Vec<(JobId, u64)>,
    /// A handler throttled the key until then (Unix ms; 0: never): none of
    /// its jobs takes a place before.
    pub until_ms: u64,
}

impl KeyEntry {
    /// The places taken.
    fn taken(&self) -> usize {
        self.holders.len() + self.ghosts.len()
    }
}

impl MemQueue {
    /// A page of the blocked jobs after `after`, by key (its bytes), then
    /// score and id, as blocked.lua reads the keyed set.
    pub fn blocked_page(&self, after: Option<&Cursor>, n: usize, now: u64) -> Page {
        let from = after.and_then(|c| Some((c.key.clone()?, c.score, c.id)));
        let mut keys: Vec<&String> = self
            .keyed
            .keys()
            .filter(|k| from.as_ref().is_none_or(|(key, ..)| *k >= key))
            .collect();
        keys.sort_unstable();
        let mut jobs = Vec::new();
        let mut last = None;
        'keys: for key in keys {
            for &(score, id) in &self.keyed[key] {
                if from
                    .as_ref()
                    .is_some_and(|(k, s, i)| k == key && (score, id) <= (*s, *i))
                {
                    continue;
                }
                if jobs.len() == n {
                    break 'keys;
                }
                let m = &self.msgs[&id];
                let mut job =
                    inspect::queued(id, 0, score, m.rc, now, m.body.clone(), m.error.clone());
                job.state = JobState::Blocked;
                job.key = self.keyed_of(&id);
                last = Some(Cursor::blocked(key, score, id));
                jobs.push(job);
            }
        }
        let next = last.filter(|_| n > 0 && jobs.len() == n);
        Page { jobs, next }
    }

    /// Job `id`'s concurrency key with the key's places, if it has one.
    pub fn keyed_of(&self, id: &JobId) -> Option<Keyed> {
        let key = self.msgs.get(id)?.key.as_ref()?;
        Some(Keyed {
            key: key.clone(),
            per_key: self.keys.get(key).map_or(1, |e| e.per),
        })
    }

    /// Sends a keyed message (priority 0): it takes a free place of `key`,
    /// or the place of a holder that does not run and is due after it (which
    /// waits again), or waits. `per` becomes the key's places.
    pub fn send_keyed(&mut self, id: JobId, body: Vec<u8>, score: u64, key: &str, per: u32) {
        let e = self.keys.entry(key.to_string()).or_default();
        let more = per > e.per && e.per > 0;
        e.per = per;
        self.insert(id, body, score, 0);
        if let Some(m) = self.msgs.get_mut(&id) {
            m.key = Some(key.to_string());
        }
        self.enter_key(id, score, key, per, more);
    }

    /// The keyed job `id`, waiting for its key's place, made due at `now`
    /// (ms) with its deliveries counted as before, as run_now.lua does: it
    /// enters its key again as a send does, first among the key's waiting
    /// jobs due later. Whether it was due later (`false`: due already, or
    /// not waiting, left as it is).
    pub fn run_now_waiting(&mut self, id: JobId, now: u64) -> bool {
        self.now = self.now.max(now);
        let Some(m) = self.msgs.get_mut(&id).filter(|m| m.waiting) else {
            return false;
        };
        let Some(key) = m.key.clone() else {
            return false;
        };
        if inspect::state_of(m.score, now) != JobState::Scheduled {
            return false;
        }
        let old = m.score;
        // the thousandths carry the delivery count, as in Redis
        let score = super::state::ms_score(now) + u64::from(score_count(old));
        m.score = score;
        Self::unmark_exact(&mut self.exact, m, id);
        m.waiting = false;
        if let Some(w) = self.keyed.get_mut(&key) {
            w.remove(&(old, id));
            if w.is_empty() {
                self.keyed.remove(&key);
            }
        }
        self.index.insert((score, id));
        let per = self.keys.get(&key).map_or(1, |e| e.per);
        self.enter_key(id, score, &key, per, false);
        true
    }

    /// Message `id`, in the sorted set at `score`, enters `key` of `per`
    /// places (`more`: added now, which the key's waiting jobs take first):
    /// it takes a free place, or the place of a holder that does not run
    /// and is due after it (which waits again), or waits (as `K.place` in
    /// lib.lua).
    fn enter_key(&mut self, id: JobId, score: u64, key: &str, per: u32, more: bool) {
        let e = self.keys.entry(key.to_string()).or_default();
        let throttled = e.until_ms > self.now;
        // places added, or freed by a throttle's end: the key's waiting
        // jobs, due before this one, take them
        let ended = e.until_ms != 0 && !throttled;
        if ended {
            e.until_ms = 0;
            self.held_keys -= 1;
        }
        if more || ended {
            self.fill(key);
        }
        let msgs = &self.msgs;
        let e = self.keys.entry(key.to_string()).or_default();
        e.per = per;
        let full = e.taken() >= per as usize;
        // the latest due of the holders that do not run (not leased, nor
        // received by an RSMQ client), when due after this one
        let late = e
            .holders
            .iter()
            .filter_map(|h| msgs.get(h).map(|m| (m.score, *h, m.rc)))
            .filter(|(s, _, rc)| *s > score && !is_lease(*s) && *rc == 0)
            .map(|(s, h, _)| (s, h))
            .max();
        // under a handler's throttle of the key, the job waits and displaces
        // no holder
        if !throttled
            && full
            && let Some((_, late)) = late
        {
            self.demote(late);
        }
        let e = self.keys.get_mut(key).expect("entry");
        if !throttled && e.taken() < per as usize {
            e.holders.push(id);
        } else {
            self.park(id);
        }
    }

    /// Moves a keyed message out of the sorted set into its key's waiting
    /// jobs.
    fn park(&mut self, id: JobId) {
        let Some(m) = self.msgs.get_mut(&id) else {
            return;
        };
        let Some(key) = m.key.clone() else { return };
        m.waiting = true;
        let score = m.score;
        self.index.remove(&(score, id));
        self.keyed.entry(key).or_default().insert((score, id));
    }

    /// A keyed job whose lease ran out (at `score`) while a handler throttles
    /// its key waits for the throttle's end, due at its lease end with its
    /// deliveries and the lost one's record `lost`, rather than run again (as
    /// fetch.lua); whether it did.
    pub fn hold_back_lost(&mut self, id: JobId, score: u64, lost: &str) -> bool {
        let Some(key) = self.msgs.get(&id).and_then(|m| m.key.clone()) else {
            return false;
        };
        if self.keys.get(&key).is_none_or(|e| e.until_ms <= self.now) {
            return false;
        }
        let due = score / 1000 * 1000 + u64::from(crate::contract::leases::score_count(score));
        self.rescore(id, due);
        if let Some(m) = self.msgs.get_mut(&id) {
            m.lease = false;
            m.log = Some(crate::contract::attempts::append(m.log.as_deref(), lost));
        }
        self.demote(id);
        true
    }

    /// A holder goes back to wait in its key's queue.
    fn demote(&mut self, id: JobId) {
        let Some(m) = self.msgs.get_mut(&id) else {
            return;
        };
        let Some(key) = m.key.clone() else { return };
        self.park(id);
        if let Some(e) = self.keys.get_mut(&key) {
            e.holders.retain(|h| *h != id);
        }
    }

    /// Promotes `key`'s first waiting jobs while it has places; how many.
    fn fill(&mut self, key: &str) -> usize {
        let mut n = 0;
        while let Some(e) = self.keys.get(key)
            && e.until_ms <= self.now
            && e.taken() < e.per as usize
            && let Some(w) = self.keyed.get_mut(key)
            && let Some((score, id)) = w.pop_first()
        {
            if w.is_empty() {
                self.keyed.remove(key);
            }
            if let Some(m) = self.msgs.get_mut(&id) {
                m.waiting = false;
                self.index.insert((score, id));
                self.keys.get_mut(key).expect("entry").holders.push(id);
                self.promoted = true;
                n += 1;
            }
        }
        if self.keys.get(key).is_some_and(|e| e.taken() == 0)
            && !self.keyed.contains_key(key)
            && let Some(e) = self.keys.remove(key)
            && e.until_ms != 0
        {
            self.held_keys -= 1;
        }
        n
    }

    /// A keyed message left the queue: its place goes to the key's next job.
    pub(super) fn key_left(&mut self, id: &JobId, key: &str, score: u64, waited: bool) {
        if waited {
            if let Some(w) = self.keyed.get_mut(key) {
                w.remove(&(score, *id));
                if w.is_empty() {
                    self.keyed.remove(key);
                }
            }
        } else if let Some(e) = self.keys.get_mut(key) {
            e.holders.retain(|h| h != id);
        }
        self.fill(key);
    }

    /// Takes a message out of the queue at `now` (ms) as a delete, cancel or
    /// purge does: a running keyed job keeps its key's place until its lease
    /// ends (see [`expire_ghosts`](Self::expire_ghosts)), as on Redis.
    pub fn remove_at(&mut self, id: &JobId, now: u64) -> Option<Msg> {
        self.now = self.now.max(now);
        let ghost = self.msgs.get(id).and_then(|m| {
            let key = m.key.as_ref()?;
            let end = m.score / 1000;
            (!m.waiting && m.lease && is_lease(m.score) && end >= now).then(|| (key.clone(), end))
        });
        if let Some((key, end)) = ghost {
            self.key_events.insert((end.saturating_add(1), key.clone()));
            self.keys.entry(key).or_default().ghosts.push((*id, end));
            self.ghosts += 1;
        }
        self.remove(id)
    }

    /// Frees the places of deleted running jobs whose leases ended by `now`
    /// (ms), and of keys whose throttles ended, for their keys' next jobs;
    /// how many keys it looked at: only those whose places free by then
    /// (`key_events`), not every key.
    pub fn expire_ghosts(&mut self, now: u64) -> usize {
        self.now = self.now.max(now);
        let mut looked = 0;
        while let Some(first) = self.key_events.first()
            && first.0 <= now
        {
            let (_, key) = self.key_events.pop_first().expect("the first");
            looked += 1;
            let Some(e) = self.keys.get_mut(&key) else {
                continue;
            };
            let before = e.ghosts.len();
            e.ghosts.retain(|(_, end)| *end >= now);
            let mut ended = e.ghosts.len() < before;
            self.ghosts -= before - e.ghosts.len();
            // a key's throttle ended: its waiting jobs take the free places
            if e.until_ms != 0 && e.until_ms <= now {
                e.until_ms = 0;
                self.held_keys -= 1;
                ended = true;
            }
            if ended {
                self.fill(&key);
            }
        }
        looked
    }

    /// A holder that went back to wait for a retry (or a release) gives its
    /// place to its key's first waiting job when that one is due before it;
    /// how many were promoted.
    pub fn key_yield(&mut self, id: JobId) -> usize {
        let Some(Msg {
            key: Some(key),
            score,
            waiting: false,
            ..
        }) = self.msgs.get(&id)
        else {
            return 0;
        };
        let (key, score) = (key.clone(), *score);
        // under a throttle of its key, a holder that goes back waits
        if self.keys.get(&key).is_some_and(|e| e.until_ms > self.now) {
            self.demote(id);
            return 0;
        }
        let first = self.keyed.get(&key).and_then(|w| w.first()).copied();
        if first.is_none_or(|(s, _)| s >= score) {
            return 0;
        }
        self.demote(id);
        self.fill(&key)
    }

    /// A handler throttled `id`'s concurrency key until `until` (ms): none of
    /// its jobs takes a place before, and its holders that do not run (but
    /// those in `spare`, the settle's throttled ones) wait again. False when
    /// `id` has no key (its queue is held then).
    pub fn key_throttle(
        &mut self,
        id: JobId,
        until: u64,
        spare: &std::collections::HashSet<JobId>,
    ) -> bool {
        let Some(key) = self.msgs.get(&id).and_then(|m| m.key.clone()) else {
            return false;
        };
        let Some(e) = self.keys.get_mut(&key) else {
            return false;
        };
        if e.until_ms == 0 {
            self.held_keys += 1;
        }
        e.until_ms = e.until_ms.max(until);
        self.key_events.insert((e.until_ms, key.clone()));
        let others: Vec<JobId> = e
            .holders
            .iter()
            .filter(|h| !spare.contains(h))
            .filter(|h| self.msgs.get(h).is_some_and(|m| !is_lease(m.score)))
            .copied()
            .collect();
        for h in others {
            self.demote(h);
        }
        true
    }

    /// What `key` holds at `now` (ms).
    pub fn key_usage(&self, key: &str, now: u64) -> KeyUsage {
        let mut u = KeyUsage {
            key: key.to_string(),
            blocked: self.keyed.get(key).map_or(0, |w| w.len() as u64),
            ..KeyUsage::default()
        };
        if let Some(e) = self.keys.get(key) {
            u.per_key = e.per;
            u.throttled_until_ms = (e.until_ms > now).then_some(e.until_ms);
            u.running = e.ghosts.iter().filter(|(_, end)| *end >= now).count() as u64;
            for h in &e.holders {
                match self.msgs.get(h) {
                    Some(m) if is_lease(m.score) && m.score / 1000 >= now => u.running += 1,
                    Some(_) => u.holding += 1,
                    None => {}
                }
            }
        }
        u
    }

    /// Up to `n` keys after `after`, in key order.
    pub fn key_page(&self, after: Option<&str>, n: usize, now: u64) -> KeyPage {
        let mut all: Vec<&String> = self
            .keys
            .keys()
            .filter(|k| after.is_none_or(|a| k.as_str() > a))
            .collect();
        all.sort_unstable();
        let more = all.len() > n;
        all.truncate(n);
        KeyPage {
            next: more.then(|| all.last().map(|k| k.to_string())).flatten(),
            keys: all.into_iter().map(|k| self.key_usage(k, now)).collect(),
        }
    }

    /// When the first of the keys' places frees by time (a deleted running
    /// job's lease end, a throttle's end), if any: a waiting worker wakes then.
    pub fn next_key_event_ms(&self) -> Option<u64> {
        // an entry whose key moved on since (its throttle lengthened, its
        // entry gone) only wakes a worker early, once
        self.key_events.first().map(|(at, _)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::MemQueue;
    use crate::JobId;
    use crate::contract::leases::LEASE_MARK;

    /// A running keyed job removed (its place kept until its lease ends) and
    /// a key throttled, among `many` keys each with a job waiting to run:
    /// freeing their places looks at those two keys, not at every key.
    #[test]
    fn places_freed_by_time_are_found_without_looking_at_every_key() {
        let now = 1_000_000;
        let mut q = MemQueue::new(30_000, 0, -1, now / 1000);
        let id = |n: u32| JobId::make(u64::from(n), &[b'a' + (n % 26) as u8; 22]);
        let many = 1000;
        for n in 0..many {
            q.send_keyed(
                id(n),
                b"{}".to_vec(),
                (now + 60_000) * 1000,
                &format!("k{n}"),
                1,
            );
        }
        let (run, next) = (id(many), id(many + 1));
        q.send_keyed(run, b"{}".to_vec(), now * 1000, "busy", 1);
        q.send_keyed(next, b"{}".to_vec(), now * 1000, "busy", 1);
        assert!(q.msgs[&next].waiting, "its key's one place is taken");
        // `run` leased until `end`, then cancelled: a ghost until then
        let end = now + 30_000;
        q.rescore(run, end * 1000 + LEASE_MARK + 1);
        q.msgs.get_mut(&run).unwrap().lease = true;
        q.remove_at(&run, now);
        assert_eq!(q.ghosts, 1);
        // a handler throttled key k7 for a minute
        let spare = Default::default();
        assert!(q.key_throttle(id(7), now + 60_000, &spare));
        assert_eq!(q.next_key_event_ms(), Some(end + 1));
        let looked = q.expire_ghosts(now + 1);
        assert!(looked <= 2, "looked at {looked} keys of {many}");
        assert!(q.msgs[&next].waiting, "the ghost's lease runs on");
        let looked = q.expire_ghosts(end + 1);
        assert!(looked <= 2, "looked at {looked} keys of {many}");
        assert!(!q.msgs[&next].waiting, "the ghost's place went to the next");
        assert_eq!((q.ghosts, q.next_key_event_ms()), (0, Some(now + 60_000)));
        let looked = q.expire_ghosts(now + 60_000);
        assert!(looked <= 2, "looked at {looked} keys of {many}");
        assert_eq!((q.held_keys, q.next_key_event_ms()), (0, None));
    }
}
