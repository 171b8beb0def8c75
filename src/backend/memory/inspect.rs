//! [`Inspect`] in memory, mirroring the Redis scripts (`counts.lua`, `peek.lua`,
//! `job.lua`, `list.lua`, `cancel.lua`).

use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Included};

use super::state::{MemQueue, due_score, last_of_ms, ms_score};
use super::{MemoryBackend, not_found};
use crate::backend::LEASED_FROM_MS;
use crate::inspect::{self, Cancelled, Cursor, Inspect, JobInfo, JobState, Page, StateCounts};
use crate::queue::validate;
use crate::{JobId, Result};

type Set = BTreeSet<(u64, JobId)>;

/// The score ranges (thousandths, inclusive) of a state at `now` ms, in listing order.
fn ranges(state: JobState, now: u64) -> Vec<(u64, u64)> {
    let (l, n) = (ms_score(LEASED_FROM_MS), due_score(now));
    let ln = last_of_ms(LEASED_FROM_MS.saturating_add(now));
    let ranges = match state {
        JobState::Ready => vec![(0, n), (l, ln)],
        JobState::Scheduled => vec![(n + 1, l - 1)],
        JobState::InFlight => vec![(ln.saturating_add(1), u64::MAX)],
        JobState::Dead => vec![(0, u64::MAX)],
    };
    ranges.into_iter().filter(|(lo, hi)| lo <= hi).collect()
}

/// Up to `n` (score, id) of `set` within `lo..=hi`, after `after` when given.
/// A cursor above the range skips it (the range came before it); one below
/// starts it from its beginning (ranges only move up as time passes).
fn span(set: &Set, lo: u64, hi: u64, after: Option<(u64, JobId)>, n: usize) -> Vec<(u64, JobId)> {
    let start = match after {
        Some(c) if c >= (hi, JobId::MAX) => return Vec::new(),
        Some(c) if c >= (lo, JobId::MIN) => Excluded(c),
        _ => Included((lo, JobId::MIN)),
    };
    set.range((start, Included((hi, JobId::MAX))))
        .take(n)
        .copied()
        .collect()
}

impl MemQueue {
    fn info(&self, p: i8, score: u64, id: JobId, now: u64) -> JobInfo {
        let m = &self.msgs[&id];
        inspect::queued(id, p, score, m.rc, now, m.body.clone(), m.error.clone())
    }

    pub(super) fn dead_info(&self, id: &JobId) -> Option<JobInfo> {
        let (d, priority) = self.dead_msgs.get(id)?;
        Some(JobInfo {
            id: *id,
            state: JobState::Dead,
            priority: *priority,
            attempts: d.attempts,
            due_ms: d.died_at_ms,
            body: d.body.clone(),
            last_error: Some(d.error.clone()),
        })
    }
}

impl Inspect for MemoryBackend {
    async fn counts(&self, queue: &str) -> Result<StateCounts> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let count = |state| -> u64 {
            q.sets()
                .flat_map(|set| ranges(state, now).into_iter().map(move |r| (set, r)))
                .map(|(set, (lo, hi))| {
                    set.range((lo, JobId::MIN)..=(hi, JobId::MAX)).count() as u64
                })
                .sum()
        };
        Ok(StateCounts {
            ready: count(JobState::Ready),
            scheduled: count(JobState::Scheduled),
            in_flight: count(JobState::InFlight),
            dead: q.dead.len() as u64,
        })
    }

    async fn latency(&self, queue: &str) -> Result<Option<std::time::Duration>> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        // the first score of each ready range of each level: the oldest there
        let oldest = q
            .sets()
            .flat_map(|set| {
                ranges(JobState::Ready, now)
                    .into_iter()
                    .filter_map(move |(lo, hi)| {
                        set.range((lo, JobId::MIN)..=(hi, JobId::MAX)).next()
                    })
            })
            .map(|&(k, _)| match k / 1000 {
                ms if ms >= LEASED_FROM_MS => ms - LEASED_FROM_MS,
                ms => ms,
            })
            .min();
        Ok(oldest.map(|t| std::time::Duration::from_millis(now.saturating_sub(t))))
    }

    async fn peek(&self, queue: &str, n: usize) -> Result<Vec<JobInfo>> {
        validate::queue_name(queue)?;
        let n = inspect::page_size(n);
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let mut rows = q.fetchable(now, n);
        let left = n - rows.len();
        if let (true, Some(&(lo, hi))) = (left > 0, ranges(JobState::Scheduled, now).first()) {
            let mut later: Vec<(u64, usize, JobId, i8)> = Vec::new();
            for (li, p) in crate::queue::priorities().enumerate() {
                let Some(set) = q.set(p) else { continue };
                later.extend(
                    span(set, lo, hi, None, left)
                        .into_iter()
                        .map(|(s, id)| (s, li, id, p)),
                );
            }
            later.sort_unstable();
            rows.extend(later.into_iter().take(left).map(|(s, _, id, p)| (s, id, p)));
        }
        Ok(rows
            .into_iter()
            .map(|(s, id, p)| q.info(p, s, id, now))
            .collect())
    }

    async fn job(&self, queue: &str, id: &JobId) -> Result<Option<JobInfo>> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        Ok(match q.msgs.get(id) {
            Some(m) => Some(q.info(m.priority, m.score, *id, now)),
            None => q.dead_info(id),
        })
    }

    async fn list(
        &self,
        queue: &str,
        state: JobState,
        after: Option<&Cursor>,
        n: usize,
    ) -> Result<Page> {
        if state == JobState::Dead {
            let order = crate::ops::DeadOrder::OldestFirst;
            return crate::ops::Admin::dead_page(self, queue, order, after, n).await;
        }
        validate::queue_name(queue)?;
        let n = inspect::page_size(n);
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let mut rows: Vec<(i8, u64, JobId)> = Vec::new();
        for p in crate::queue::priorities() {
            if after.is_some_and(|c| p > c.priority) {
                continue;
            }
            let Some(set) = q.set(p) else { continue };
            let cursor = after.filter(|c| c.priority == p).map(|c| (c.score, c.id));
            for (lo, hi) in ranges(state, now) {
                let left = n - rows.len();
                if left == 0 {
                    break;
                }
                rows.extend(
                    span(set, lo, hi, cursor, left)
                        .into_iter()
                        .map(|(s, id)| (p, s, id)),
                );
            }
        }
        let scores: Vec<u64> = rows.iter().map(|r| r.1).collect();
        let jobs = rows
            .into_iter()
            .map(|(p, s, id)| q.info(p, s, id, now))
            .collect();
        let full = n > 0 && scores.len() >= n;
        Ok(inspect::page(jobs, &scores, full))
    }

    async fn cancel(&self, queue: &str, id: &JobId) -> Result<Cancelled> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        Ok(match q.remove(id) {
            None => Cancelled::NotFound,
            Some(m) if inspect::state_of(m.score, now) == JobState::InFlight => {
                Cancelled::Cancelling
            }
            Some(_) => Cancelled::Removed,
        })
    }
}
