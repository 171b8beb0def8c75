//! Exact dues in memory: a job sent with a delay is due at its send's
//! microsecond plus the delay, as on Redis (`exact_due` in lib.lua), not at
//! the whole millisecond its score is rounded up to.
//!
//! A send keeps such a job's exact due (in [`Msg::exact_us`] and the queue's
//! index [`MemQueue::exact`], as `ns:q:exact` on Redis) while its score is
//! the one the send set: a fetch leases it once its clock has reached that
//! microsecond, after the jobs of its priority due by their scores, and a
//! fetch before then names that microsecond as the next due. Any re-score
//! (a lease, a retry, a change of visibility, a unique send that moves it)
//! drops it: the score alone then says when the job is due.

use super::state::{MAX_ID, MemQueue, Msg, due_score, ms_score};
use crate::JobId;

impl MemQueue {
    /// Marks `id`, just sent with a delay, due exactly at `due_us` (Unix µs)
    /// while its score is its send's (the score `due_us` rounds up to, as
    /// `exact_due` checks on Redis; a due on a whole ms needs no mark).
    pub fn mark_exact(&mut self, id: JobId, due_us: u64) {
        let Some(m) = self.msgs.get_mut(&id) else {
            return;
        };
        if due_us.is_multiple_of(1000) || m.waiting || m.score != ms_score(due_us.div_ceil(1000)) {
            return;
        }
        if let Some(old) = m.exact_us.replace(due_us) {
            self.exact.remove(&(old, id));
        }
        self.exact.insert((due_us, id));
    }

    /// Forgets the exact due of `m` (its score changes), if it had one.
    pub(super) fn unmark_exact(
        exact: &mut std::collections::BTreeSet<(u64, JobId)>,
        m: &mut Msg,
        id: JobId,
    ) {
        if let Some(e) = m.exact_us.take() {
            exact.remove(&(e, id));
        }
    }

    /// The jobs due exactly by `now_us` (Unix µs) though scored at the next
    /// ms, in exact-due order, each with its message.
    pub fn exactly_due(&self, now_us: u64) -> impl Iterator<Item = (JobId, &Msg)> {
        let now = now_us / 1000;
        let next = ms_score(now + 1);
        // none on a whole ms (an empty range, which `range` refuses)
        let from = (now * 1000 + 1).min(now_us + 1);
        self.exact
            .range((from, JobId::MIN)..(now_us + 1, JobId::MIN))
            .filter_map(|(_, id)| Some((*id, self.msgs.get(id)?)))
            .filter(move |(_, m)| !m.waiting && m.score == next)
    }

    /// Up to `n` ids a fetch at `now_us` (Unix µs) leases, highest priority
    /// first; within one, oldest due first by score (a lease that ran out is
    /// due from its end), then those due exactly by `now_us` though scored at
    /// the next ms (as fetch.lua takes them). Each with its score and
    /// priority.
    pub fn leasable(&self, now_us: u64, n: usize) -> Vec<(u64, JobId, i8)> {
        let now = now_us / 1000;
        let mut out = Vec::new();
        for p in crate::contract::queues::priorities() {
            let Some(set) = self.set(p) else { continue };
            if out.len() >= n {
                break;
            }
            let left = n - out.len();
            out.extend(
                set.range(..=(due_score(now), MAX_ID))
                    .take(left)
                    .map(|(s, id)| (*s, *id, p)),
            );
            let left = n - out.len();
            if left > 0 && !self.exact.is_empty() {
                out.extend(
                    self.exactly_due(now_us)
                        .filter(|(_, m)| m.priority == p)
                        .take(left)
                        .map(|(id, m)| (m.score, id, p)),
                );
            }
        }
        out
    }

    /// The next exact due after `now_us` (Unix µs) of a job still at its
    /// send's score: of the first 10 to come, as fetch.lua reads them.
    pub fn next_exact_us(&self, now_us: u64) -> Option<u64> {
        self.exact
            .range((now_us + 1, JobId::MIN)..)
            .take(10)
            .find(|(_, id)| self.msgs.get(id).is_some_and(|m| !m.waiting))
            .map(|(due, _)| *due)
    }

    /// Whether a job is due at `now_us` (Unix µs): by its score, or exactly.
    pub fn any_due(&self, now_us: u64) -> bool {
        self.first_score()
            .is_some_and(|score| score / 1000 <= now_us / 1000)
            || self.exactly_due(now_us).next().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_job_is_leased_at_its_exact_due_until_re_scored() {
        let mut q = MemQueue::new(30, 0, -1, 0);
        let id = JobId::make(1, &[b'a'; 22]);
        // sent at 1000.250 ms with a delay of 300 ms: scored at 1301 ms
        q.insert(id, b"x".to_vec(), ms_score(1301), 0);
        q.mark_exact(id, 1_300_250);
        assert!(q.leasable(1_300_000, 10).is_empty(), "on a whole ms");
        assert!(q.leasable(1_300_249, 10).is_empty());
        assert_eq!(q.next_exact_us(1_300_249), Some(1_300_250));
        assert!(!q.any_due(1_300_249));
        assert_eq!(q.leasable(1_300_250, 10), [(ms_score(1301), id, 0)]);
        assert!(q.any_due(1_300_250));
        // a re-score drops the exact due: due by its score alone
        q.rescore(id, ms_score(1301));
        assert!(q.exact.is_empty() && q.msgs[&id].exact_us.is_none());
        assert!(q.leasable(1_300_999, 10).is_empty());
        assert_eq!(q.next_exact_us(0), None);
        // and so does its removal
        q.mark_exact(id, 1_300_250);
        q.remove(&id);
        assert!(q.exact.is_empty());
    }
}
