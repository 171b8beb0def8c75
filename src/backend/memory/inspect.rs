//! [`Inspect`] in memory, mirroring the Redis scripts (`counts.lua`, `peek.lua`,
//! `job.lua`, `list.lua`, `cancel.lua`).

use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Included};

use super::state::{MemQueue, due_score};
use super::{MemoryBackend, not_found};
use crate::contract::attempts;
use crate::contract::history::Finish;
use crate::contract::inspect::{
    self, Cancelled, Cursor, Inspect, JobInfo, JobState, Page, StateCounts,
};
use crate::contract::leases::is_lease;
use crate::contract::queues::validate;
use crate::contract::settings::QueueSettings;
use crate::{JobId, Result};

type Set = BTreeSet<(u64, JobId)>;

/// The score range (thousandths, inclusive) of a state at `now` ms, and whether
/// a score in it has that state: scheduled and leased jobs share the scores
/// after now, told apart by their thousandths (as list.lua).
fn range(state: JobState, now: u64) -> ((u64, u64), fn(u64) -> bool) {
    let n = due_score(now);
    let later = (n + 1, u64::MAX);
    match state {
        JobState::Ready => ((0, n), |_| true),
        JobState::Scheduled => (later, |k| !is_lease(k)),
        JobState::InFlight => (later, is_lease),
        // the dead letters and the history are listed apart; blocked jobs
        // are not listed
        _ => ((0, u64::MAX), |_| true),
    }
}

/// Up to `n` (score, id) of `set` within `lo..=hi` that `keep` takes, after
/// `after` when given, reading at most `budget` rows (taken off it), as
/// list.lua does; with the last row read, and whether the budget ran out
/// before the rows did. A cursor above the range skips it (the range came
/// before it); one below starts it from its beginning (ranges only move up
/// as time passes).
fn span(
    set: &Set,
    (lo, hi): (u64, u64),
    keep: fn(u64) -> bool,
    after: Option<(u64, JobId)>,
    n: usize,
    budget: &mut usize,
) -> Spanned {
    let start = match after {
        Some(c) if c >= (hi, JobId::MAX) => return (Vec::new(), None, false),
        Some(c) if c >= (lo, JobId::MIN) => Excluded(c),
        _ => Included((lo, JobId::MIN)),
    };
    let (mut out, mut last) = (Vec::new(), None);
    for &(k, id) in set.range((start, Included((hi, JobId::MAX)))) {
        if out.len() == n {
            break;
        }
        if *budget == 0 {
            return (out, last, true);
        }
        *budget -= 1;
        last = Some((k, id));
        if keep(k) {
            out.push((k, id));
        }
    }
    (out, last, false)
}

/// What [`span`] read: the rows taken, the last row read, and whether the
/// budget ran out before the rows did.
type Spanned = (Vec<(u64, JobId)>, Option<(u64, JobId)>, bool);

/// The rows a page of one state may read beyond its size (see list.lua).
const PASS_OVER: usize = 1000;

impl MemQueue {
    fn info(&self, p: i8, score: u64, id: JobId, now: u64) -> JobInfo {
        let m = &self.msgs[&id];
        inspect::queued(id, p, score, m.rc, now, m.body.clone(), m.error.clone())
    }

    pub(super) fn dead_info(&self, id: &JobId) -> Option<JobInfo> {
        let (d, priority, ..) = self.dead_msgs.get(id)?;
        Some(JobInfo {
            id: *id,
            state: JobState::Dead,
            priority: *priority,
            attempts: d.attempts,
            due_ms: d.died_at_ms,
            body: d.body.clone(),
            last_error: Some(d.error.clone()),
            runs: Vec::new(),
            finished: None,
            key: None,
            result: None,
            waits_for: None,
        })
    }
}

impl Inspect for MemoryBackend {
    fn actor(&self) -> &str {
        &self.actor
    }

    async fn counts(&self, queue: &str) -> Result<StateCounts> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        Ok(counts_of(q, now))
    }

    async fn latency(&self, queue: &str) -> Result<Option<std::time::Duration>> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        Ok(latency_of(q, now))
    }

    async fn peek(&self, queue: &str, n: usize) -> Result<Vec<JobInfo>> {
        validate::queue_name(queue)?;
        let n = inspect::page_size(n);
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let mut rows = q.fetchable(now, n);
        let left = n - rows.len();
        if left > 0 {
            let (r, keep) = range(JobState::Scheduled, now);
            let mut later: Vec<(u64, usize, JobId, i8)> = Vec::new();
            for (li, p) in crate::contract::queues::priorities().enumerate() {
                let Some(set) = q.set(p) else { continue };
                let mut budget = left + PASS_OVER;
                later.extend(
                    span(set, r, keep, None, left, &mut budget)
                        .0
                        .into_iter()
                        .map(|(s, id)| (s, li, id, p)),
                );
            }
            // by due ms (a retry's thousandths count its deliveries), then
            // priority, then as a fetch takes a level's (peek.lua)
            later.sort_unstable_by_key(|&(s, li, id, _)| (s / 1000, li, s, id));
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
            Some(m) => {
                let info = q.info(m.priority, m.score, *id, now);
                Some(JobInfo {
                    runs: attempts::parse(m.log.as_deref().unwrap_or("").as_bytes()),
                    key: q.keyed_of(id),
                    state: if m.waiting {
                        JobState::Blocked
                    } else {
                        info.state
                    },
                    ..info
                })
            }
            None if !q.dead_msgs.contains_key(id) => {
                let h = QueueSettings::decode(&q.settings, &[])
                    .history
                    .unwrap_or_default();
                q.history.get(id, now, h).or_else(|| {
                    q.parents
                        .get(id)
                        .map(|(b, body)| inspect::waiting(*id, *b, body))
                })
            }
            // read when one job is looked up, as on Redis
            None => q.dead_info(id).map(|j| JobInfo {
                key: q.dead_msgs[id].3.clone(),
                runs: q.dead_msgs[id]
                    .2
                    .as_deref()
                    .map_or_else(Vec::new, |l| attempts::parse(l.as_bytes())),
                ..j
            }),
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
            let order = crate::contract::admin::DeadOrder::OldestFirst;
            return crate::contract::admin::Admin::dead_page(self, queue, order, after, n).await;
        }
        validate::queue_name(queue)?;
        let n = inspect::page_size(n);
        let now = self.clock.now_ms();
        if state == JobState::Waiting {
            return Ok(Page::default());
        }
        if state == JobState::Blocked {
            let st = self.lock();
            let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
            return Ok(q.blocked_page(after, n, now));
        }
        if state == JobState::Finished {
            let mut st = self.lock_mut();
            let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
            let h = QueueSettings::decode(&q.settings, &[])
                .history
                .unwrap_or_default();
            // trimmed as history.lua does
            q.history.trim(now, 1000, h);
            return Ok(q.history.page(now, h, after, n));
        }
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let mut rows: Vec<(i8, u64, JobId)> = Vec::new();
        let mut budget = n.saturating_add(PASS_OVER);
        // the last row read, shown or not, and where a page whose budget
        // ran out goes on from
        let (mut last_read, mut resume) = (None, None);
        for p in crate::contract::queues::priorities() {
            if after.is_some_and(|c| p > c.priority) {
                continue;
            }
            let Some(set) = q.set(p) else { continue };
            let cursor = after.filter(|c| c.priority == p).map(|c| (c.score, c.id));
            let (r, keep) = range(state, now);
            let left = n - rows.len();
            if left == 0 {
                break;
            }
            let (got, last, ran_out) = span(set, r, keep, cursor, left, &mut budget);
            rows.extend(got.into_iter().map(|(s, id)| (p, s, id)));
            if let Some((score, id)) = last {
                last_read = Some(Cursor {
                    priority: p,
                    score,
                    id,
                    key: None,
                });
            }
            if ran_out {
                resume = last_read.take();
                break;
            }
        }
        let scores: Vec<u64> = rows.iter().map(|r| r.1).collect();
        let jobs = rows
            .into_iter()
            .map(|(p, s, id)| q.info(p, s, id, now))
            .collect();
        if resume.is_some() {
            return Ok(Page { jobs, next: resume });
        }
        let full = n > 0 && scores.len() >= n;
        Ok(inspect::page(jobs, &scores, full))
    }

    async fn history_events(
        &self,
        queue: &str,
    ) -> Result<Vec<crate::contract::history::HistoryEvent>> {
        validate::queue_name(queue)?;
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        Ok(q.history.events())
    }

    async fn cancel_by(&self, queue: &str, id: &JobId, by: &str) -> Result<Cancelled> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        let keyed = q.keyed_of(id);
        let Some(m) = q.remove_at(id, now) else {
            // a flow's parent waiting for its children (as on Redis)
            let Some((_, body)) = q.parents.remove(id) else {
                return Ok(Cancelled::NotFound);
            };
            q.cancelled_parents.insert(*id);
            q.enter_failed(*id, &body, Finish::Cancelled, by, now);
            let finishes = super::batches::cancelled(q, queue, *id, &body);
            let called = st.count_batches(finishes, self.clock.now_us());
            drop(st);
            self.notify(queue);
            for q in called {
                self.notify(&q);
            }
            return Ok(Cancelled::Removed);
        };
        // entered in the history, as cancel.lua does
        q.enter_removed(*id, &m, Finish::Cancelled, by, now, keyed);
        // a batch's job: counted cancelled in its batch
        // and the flows that wait for it
        let finishes = super::batches::cancelled(q, queue, *id, &m.body);
        let called = if finishes.is_empty() {
            Vec::new()
        } else {
            st.count_batches(finishes, self.clock.now_us())
        };
        drop(st);
        self.wake_held(queue);
        for q in called {
            self.notify(&q);
        }
        Ok(if inspect::state_of(m.score, now) == JobState::InFlight {
            Cancelled::Cancelling
        } else {
            Cancelled::Removed
        })
    }
}

/// `q`'s jobs by state at `now` (ms).
pub(super) fn counts_of(q: &MemQueue, now: u64) -> StateCounts {
    let mut counts = [0u64; 3];
    for (k, _) in q.all() {
        counts[match inspect::state_of(*k, now) {
            JobState::Ready => 0,
            JobState::Scheduled => 1,
            _ => 2,
        }] += 1;
    }
    StateCounts {
        ready: counts[0],
        scheduled: counts[1],
        in_flight: counts[2],
        dead: q.dead.len() as u64,
        blocked: q.keyed.values().map(|w| w.len() as u64).sum(),
    }
}

/// How long `q`'s oldest ready job has waited at `now` (ms), if one is ready.
pub(super) fn latency_of(q: &MemQueue, now: u64) -> Option<std::time::Duration> {
    // the first due score of each level: the oldest there (a lease that ran
    // out is due from its end)
    let oldest = q
        .sets()
        .filter_map(|set| set.first())
        .filter(|(k, _)| *k <= due_score(now))
        .map(|&(k, _)| inspect::due_ms(k, now))
        .min();
    oldest.map(|t| std::time::Duration::from_millis(now.saturating_sub(t)))
}
