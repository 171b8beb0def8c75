//! Leases in flight, the rate window and the per-minute counts of one queue.

use super::MemQueue;
use crate::JobId;
use crate::contract::leases::is_lease;
use crate::contract::settings;
use crate::contract::stats::{HOURS, MINUTES};

impl MemQueue {
    /// The leases in flight at `now` (Unix ms): leased by a fetch and not
    /// settled, moved or run out (the ids that are not are forgotten), and
    /// those whose jobs a receive or a pop took in this second (see
    /// [`taken_leases`](Self::taken_leases)).
    pub fn in_flight(&mut self, now: u64) -> usize {
        let msgs = &self.msgs;
        self.leased.retain(|id| {
            // counted until the second it ends in has passed, as Redis's lease
            // counts are (see lease_counts in lib.lua)
            msgs.get(id)
                .is_some_and(|m| m.lease && is_lease(m.score) && m.score / 1_000_000 >= now / 1000)
        });
        if self.taken_leases.0 < now / 1000 {
            self.taken_leases = (0, 0);
        }
        self.leased.len() + self.taken_leases.1
    }

    /// A receive or a pop at `now` (Unix ms) takes job `id`: a lease it still
    /// carries (one that ran out in this second) keeps its place until the
    /// second has passed (see [`taken_leases`](Self::taken_leases)).
    pub fn lease_taken(&mut self, id: &JobId, now: u64) {
        if self.leased.remove(id)
            && let Some(m) = self.msgs.get(id)
            && m.lease
            && is_lease(m.score)
        {
            let second = m.score / 1_000_000;
            if second < now / 1000 {
                return;
            }
            if self.taken_leases.0 == second {
                self.taken_leases.1 += 1;
            } else {
                self.taken_leases = (second, 1);
            }
        }
    }

    /// When the first place held by a lease in flight frees (Unix ms): when
    /// the second its lease ends in has passed, if any.
    pub fn first_place_frees(&self) -> Option<u64> {
        self.leased
            .iter()
            .filter_map(|id| self.msgs.get(id))
            .map(|m| m.score / 1_000_000)
            .chain((self.taken_leases.1 > 0).then_some(self.taken_leases.0))
            .map(|s| (s + 1) * 1000)
            .min()
    }

    /// The starts in the rate window of `period` ms up to `now` (Unix ms);
    /// those before it are forgotten.
    pub fn starts_within(&mut self, now: u64, period: u64) -> usize {
        while self
            .starts
            .front()
            .is_some_and(|t| t.saturating_add(period) <= now)
        {
            self.starts.pop_front();
        }
        self.starts.len()
    }

    /// Until when the rate limit stored with the queue holds its jobs back
    /// at `now` (Unix ms): when its window is full, the oldest start in it
    /// plus the period (when a fetch may start the next job, as fetch.lua
    /// says); `None` while a job may start. Read only, unlike
    /// [`starts_within`](Self::starts_within).
    pub fn rate_held_until(&self, now: u64) -> Option<u64> {
        if self.starts.is_empty() {
            return None;
        }
        let rate = settings::QueueSettings::decode(&self.settings, &[])
            .in_force()
            .rate_limit;
        if !rate.is_limited() {
            return None;
        }
        let period = rate.period.as_millis() as u64;
        let past = self
            .starts
            .iter()
            .take_while(|t| t.saturating_add(period) <= now)
            .count();
        (self.starts.len() - past >= rate.max as usize)
            .then(|| self.starts[past].saturating_add(period))
    }

    /// Adds a settle call's runs to the minute of `now` (Unix ms).
    pub fn count_minute(&mut self, now: u64, processed: u64, failed: u64) {
        if processed + failed == 0 {
            return;
        }
        let add = |slot: &mut (u64, u64, u64), at: u64| {
            if slot.0 != at {
                *slot = (at, 0, 0);
            }
            slot.1 += processed;
            slot.2 += failed;
        };
        let m = now / 60_000;
        add(&mut self.minutes[(m % MINUTES as u64) as usize], m);
        let h = now / 3_600_000;
        add(&mut self.hours[(h % HOURS as u64) as usize], h);
    }
}
