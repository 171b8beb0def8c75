//! [`Admin`] in memory, mirroring the Redis scripts (`pause.lua`, `dead.lua`,
//! `dead_requeue.lua`, `dead_delete.lua`, `run_now.lua`).

use std::collections::HashSet;
use std::ops::Bound::{Excluded, Unbounded};

use super::state::ms_score;
use super::{MemQueue, MemoryBackend, not_found};
use crate::contract::admin::{
    Admin, BulkCount, DeadOrder, DeadQuery, Overview, OverviewQuery, QueueLine, Spread, event_word,
};
use crate::contract::inspect::{self, Cursor, JobState, Page};
use crate::contract::leases::{LEGACY_LEASED_MS, score_count};
use crate::contract::queues::validate;
use crate::contract::settings::QueueSettings;
use crate::contract::stats::{last_hour, last_week, ring_hour, ring_minute};
use crate::{JobId, Result};

impl MemoryBackend {
    /// Runs `f` on `queue`, changing it ([`crate::Error::QueueNotFound`] for none).
    fn change<T>(&self, queue: &str, f: impl FnOnce(&mut super::MemQueue) -> T) -> Result<T> {
        validate::queue_name(queue)?;
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        Ok(f(q))
    }

    /// Runs `f` on `queue`, which acts on the jobs it counts, and records it
    /// in the queue's history as `what` by this handle's actor (when it took
    /// some, or `always`), under the same lock; returns the count.
    fn acted(
        &self,
        queue: &str,
        what: &str,
        always: bool,
        f: impl FnOnce(&mut super::MemQueue) -> u64,
    ) -> Result<u64> {
        let now = self.clock.now_ms();
        self.change(queue, |q| {
            let n = f(q);
            if always || n > 0 {
                q.add_event(what, n, &self.actor, now);
            }
            n
        })
    }
}

impl MemoryBackend {
    /// Waits until the clock has passed the ms in which the latest of the
    /// letters of `queue` died (of `ids`, or of all), as a requeue on Redis
    /// waits (see dead_requeue.lua): a letter runs again in a later ms than
    /// it died. A clock that stands still is not waited for (only an
    /// `advance` moves it): such a letter is due from the next ms instead
    /// (see [`requeue`]). At most 100 ms, as Redis's clock is waited for.
    async fn after_deaths(&self, queue: &str, ids: Option<&[JobId]>) {
        let latest = {
            let st = self.lock();
            st.queues.get(queue).and_then(|q| match ids {
                Some(ids) => ids
                    .iter()
                    .filter_map(|id| q.dead_msgs.get(id))
                    .map(|d| d.0.died_at_ms)
                    .max(),
                None => q.dead.last().map(|(died, _)| *died),
            })
        };
        let Some(died) = latest else { return };
        for _ in 0..100 {
            if self.clock.now_ms() > died || self.clock.is_frozen() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

impl Admin for MemoryBackend {
    async fn pause(&self, queue: &str) -> Result<()> {
        self.acted(queue, "paused", true, |q| {
            q.paused = true;
            0
        })
        .map(drop)
    }

    async fn resume(&self, queue: &str) -> Result<()> {
        let mut was = false;
        self.acted(queue, "resumed", true, |q| {
            was = std::mem::take(&mut q.paused);
            0
        })?;
        if was {
            self.notify(queue);
        }
        Ok(())
    }

    async fn end_throttle(&self, queue: &str) -> Result<bool> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let was = {
            let mut st = self.lock_mut();
            let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
            std::mem::take(&mut q.throttled_until) > now
        };
        if was {
            self.acted(queue, "unthrottled", true, |_| 0)?;
            self.notify(queue);
        }
        Ok(was)
    }

    async fn overview(&self, query: &OverviewQuery) -> Result<Overview> {
        let now = self.clock.now_ms();
        let st = self.lock();
        let lines = st
            .queues
            .iter()
            .filter(|(name, _)| query.wants(name))
            .map(|(name, q)| {
                let mut l = QueueLine::new(name);
                l.counts = super::inspect::counts_of(q, now);
                l.latency = super::inspect::latency_of(q, now);
                l.paused = q.paused;
                l.stats = q.stats;
                if query.minutes {
                    let ring = q.minutes.into_iter();
                    l.minutes = last_hour(now, ring.map(ring_minute));
                }
                if query.hours {
                    let ring = q.hours.iter().copied();
                    l.hours = last_week(now, ring.map(ring_hour));
                }
                l
            })
            .collect();
        Ok(query.finish(lines, Vec::new(), now))
    }

    async fn add_event(&self, queue: &str, what: &str, count: u64) -> Result<()> {
        // the name first, as on Redis
        validate::queue_name(queue)?;
        event_word(what, count)?;
        self.acted(queue, what, true, |_| count).map(drop)
    }

    async fn settings(&self, queue: &str) -> Result<QueueSettings> {
        validate::queue_name(queue)?;
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        Ok(QueueSettings::decode(&q.settings, &q.settings_by))
    }

    async fn set_settings(&self, queue: &str, s: &QueueSettings) -> Result<QueueSettings> {
        let (set, changed) = self.store_settings(queue, s, true, self.actor.as_ref())?;
        // a change that changes nothing is no operator action
        if changed {
            self.acted(queue, "settings", true, |_| 0)?;
        }
        Ok(set)
    }

    async fn key_usage(&self, queue: &str, key: &str) -> Result<crate::contract::admin::KeyUsage> {
        validate::queue_name(queue)?;
        crate::contract::keyed::Keyed::new(key).check()?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        Ok(q.key_usage(key, now))
    }

    async fn keys(
        &self,
        queue: &str,
        after: Option<&str>,
        n: usize,
    ) -> Result<crate::contract::admin::KeyPage> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        Ok(q.key_page(after, n.clamp(1, crate::contract::inspect::MAX_PAGE), now))
    }

    async fn limit_usage(&self, queue: &str) -> Result<crate::contract::settings::LimitUsage> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        let limits = QueueSettings::decode(&q.settings, &[]).in_force();
        let in_flight = q.in_flight(now);
        let rate = limits.rate_limit;
        let period = rate.period.as_millis() as u64;
        let used = if rate.is_limited() {
            q.starts_within(now, period)
        } else {
            0
        };
        let mut at = None;
        if limits
            .concurrency
            .global
            .is_some_and(|g| in_flight >= g as usize)
        {
            at = q.first_place_frees();
        }
        if rate.is_limited() && used >= rate.max as usize {
            let oldest = q.starts.front().copied().unwrap_or(now);
            at = Some(at.unwrap_or(0).max(oldest.saturating_add(period)));
        }
        Ok(crate::contract::settings::LimitUsage {
            concurrency: limits.concurrency,
            rate_limit: rate,
            in_flight: in_flight as u64,
            started_in_window: used as u64,
            held_until_ms: at,
            throttled_until_ms: (q.throttled_until > now).then_some(q.throttled_until),
        })
    }

    async fn is_paused(&self, queue: &str) -> Result<bool> {
        validate::queue_name(queue)?;
        let st = self.lock();
        Ok(st.queues.get(queue).ok_or_else(|| not_found(queue))?.paused)
    }

    async fn count_purge(&self, queue: &str) -> Result<BulkCount> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let c = super::inspect::counts_of(q, now);
        Ok(BulkCount {
            count: c.ready + c.scheduled + c.in_flight + c.blocked,
            upto_ms: now,
        })
    }

    async fn count_dead(&self, queue: &str, query: &DeadQuery) -> Result<BulkCount> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let upto_ms = query.died_by_ms.map_or(now, |by| by.min(now));
        let query = DeadQuery {
            died_by_ms: Some(upto_ms),
            ..query.clone()
        };
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let count = matching(q, &query).len() as u64;
        Ok(BulkCount { count, upto_ms })
    }

    async fn purge_queue_by(&self, queue: &str, by: &str, upto_ms: Option<u64>) -> Result<u64> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        // a job counts as sent when its id says, as purge.lua reads it
        let upto_us = upto_ms.map_or(u64::MAX, |ms| ms.saturating_mul(1000).saturating_add(999));
        let (n, called) = {
            let mut st = self.lock_mut();
            let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
            let ids: Vec<JobId> = q
                .msgs
                .keys()
                .filter(|id| id.prefix_us().is_none_or(|us| us <= upto_us))
                .copied()
                .collect();
            // their batches, and the flows that wait for them, count them
            // cancelled (as purge.lua enters them)
            let mut finishes = Vec::new();
            for id in &ids {
                if let Some(m) = q.remove_at(id, now) {
                    finishes.extend(super::batches::cancelled(q, queue, *id, &m.body));
                }
            }
            // one event in the history, as purge.lua adds
            q.add_event("purged", ids.len() as u64, by, now);
            let called = st.count_batches(finishes, self.clock.now_us());
            (ids.len() as u64, called)
        };
        if n > 0 {
            self.wake_held(queue);
        }
        for q in called {
            self.notify(&q);
        }
        Ok(n)
    }

    async fn run_now(&self, queue: &str, id: &JobId) -> Result<Option<JobState>> {
        let now = self.clock.now_ms();
        let changed = self.change(queue, |q| {
            let m = q.msgs.get(id)?;
            if m.waiting {
                // waiting for its key's place: due now within the key's wait
                return Some((JobState::Blocked, q.run_now_waiting(*id, now)));
            }
            let mut state = inspect::state_of(m.score, now);
            // hidden by an RSMQ-style receive: its receiver works on it (as in Redis)
            if state == JobState::Scheduled && m.score % 1000 == 0 && m.rc > 0 {
                state = JobState::InFlight;
            }
            if state == JobState::Scheduled {
                // the thousandths carry the delivery count, as in Redis; due
                // in this ms whatever they carry
                let count = u64::from(score_count(m.score));
                q.rescore(*id, ms_score(now) + count);
            }
            Some((state, state == JobState::Scheduled))
        })?;
        let (state, moved) = changed.unzip();
        if moved == Some(true) {
            self.acted(queue, "run_now", true, |_| 1)?;
            self.notify(queue);
        }
        Ok(state)
    }

    async fn dead_page(
        &self,
        queue: &str,
        order: DeadOrder,
        after: Option<&Cursor>,
        n: usize,
    ) -> Result<Page> {
        validate::queue_name(queue)?;
        let n = inspect::page_size(n);
        let st = self.lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        // dead letters are scored by their time of death in whole ms, as in Redis
        let after = after.map(|c| (c.score / 1000, c.id));
        let rows: Vec<&(u64, JobId)> = match order {
            DeadOrder::OldestFirst => q
                .dead
                .range((after.map_or(Unbounded, Excluded), Unbounded))
                .take(n)
                .collect(),
            DeadOrder::NewestFirst => q
                .dead
                .range((Unbounded, after.map_or(Unbounded, Excluded)))
                .rev()
                .take(n)
                .collect(),
        };
        let full = n > 0 && rows.len() >= n;
        let jobs = rows.iter().filter_map(|(_, id)| q.dead_info(id)).collect();
        Ok(inspect::dead_page(jobs, full))
    }

    async fn requeue_dead(&self, queue: &str, ids: &[JobId], spread: Spread) -> Result<u64> {
        self.after_deaths(queue, Some(ids)).await;
        let now = self.clock.now_ms();
        let n = self.acted(queue, "dead_requeued", false, |q| {
            requeue(q, ids, spread, now)
        })?;
        if n > 0 {
            self.notify(queue);
        }
        Ok(n)
    }

    async fn delete_dead(&self, queue: &str, ids: &[JobId]) -> Result<u64> {
        self.acted(queue, "dead_deleted", false, |q| {
            ids.iter().map(|id| u64::from(q.drop_dead(id))).sum()
        })
    }

    // the bulk actions run under one lock: nothing dies while they run

    async fn requeue_dead_matching(
        &self,
        queue: &str,
        query: &DeadQuery,
        per_second: Option<u32>,
    ) -> Result<u64> {
        let spread = per_second.map_or(Spread::NOW, Spread::per_second);
        self.after_deaths(queue, None).await;
        let now = self.clock.now_ms();
        let n = self.acted(queue, "dead_requeued", false, |q| {
            let ids = matching(q, query);
            requeue(q, &ids, spread, now)
        })?;
        if n > 0 {
            self.notify(queue);
        }
        Ok(n)
    }

    async fn delete_dead_matching(&self, queue: &str, query: &DeadQuery) -> Result<u64> {
        self.acted(queue, "dead_deleted", false, |q| {
            let ids = matching(q, query);
            ids.iter().map(|id| u64::from(q.drop_dead(id))).sum()
        })
    }

    async fn purge_dead(&self, queue: &str) -> Result<u64> {
        self.acted(queue, "dead_deleted", false, |q| {
            q.dead_msgs.clear();
            std::mem::take(&mut q.dead).len() as u64
        })
    }

    async fn workers(&self) -> Result<Vec<crate::contract::admin::WorkerInfo>> {
        Ok(self.live_workers())
    }

    async fn ticks(
        &self,
        queue: &str,
        names: &[&str],
    ) -> Result<Vec<crate::contract::admin::Ticks>> {
        self.ticks_now(queue, names)
    }

    async fn pause_schedule(&self, queue: &str, name: &str) -> Result<bool> {
        self.pause_schedule_now(queue, name, true)
    }

    async fn resume_schedule(&self, queue: &str, name: &str) -> Result<bool> {
        self.pause_schedule_now(queue, name, false)
    }

    async fn control_worker(
        &self,
        id: &str,
        control: Option<crate::contract::admin::WorkerControl>,
    ) -> Result<bool> {
        self.control_now(id, control)
    }
}

/// Requeues the dead letters of `q` with these ids at `now` (ms), as
/// dead_requeue.lua does; how many.
fn requeue(q: &mut MemQueue, ids: &[JobId], spread: Spread, now: u64) -> u64 {
    let mut seen = HashSet::new();
    let mut n = 0u64;
    // the places of keys freed by time, before a keyed letter takes one (as
    // a send)
    q.expire_ghosts(now);
    for id in ids {
        if !seen.insert(*id) || q.msgs.contains_key(id) {
            continue;
        }
        let Some((letter, priority, _, keyed, unique)) = q.dead_msgs.get(id).cloned() else {
            continue;
        };
        // its unique key again while its lifetime lasts; a letter whose key
        // another queued job holds stays dead (as dead_requeue.lua)
        let unique = unique.filter(|(_, expires)| *expires == 0 || now < *expires);
        if let Some((key, _)) = &unique
            && q.unique_holder(key, now)
                .is_some_and(|holder| holder != *id)
        {
            continue;
        }
        q.drop_dead(id);
        let s = spread.skip(n);
        // due in a later ms than it died, as on Redis, where a requeue in
        // that ms waits for the next (see dead_requeue.lua): it cannot die
        // and finish again within one ms
        let due = now
            .saturating_add(s.first.as_millis() as u64)
            .max(letter.died_at_ms.saturating_add(1))
            .min(LEGACY_LEASED_MS - 1);
        match keyed {
            // its key again, with the key's places when it has other jobs
            Some(k) => {
                let per = q.keys.get(&k.key).map_or(k.per_key, |e| e.per);
                q.send_keyed(*id, letter.body, ms_score(due), &k.key, per);
            }
            None => q.insert(*id, letter.body, ms_score(due), priority),
        }
        if let Some((key, expires)) = unique {
            q.hold_unique(&key, *id, expires);
        }
        n += 1;
    }
    q.totalsent += n;
    n
}

/// The ids of the dead letters of `q` that match `query`, in its order.
fn matching(q: &MemQueue, query: &DeadQuery) -> Vec<JobId> {
    let pick = |(_, id): &(u64, JobId)| q.dead_info(id).filter(|j| query.matches(j));
    match query.order {
        DeadOrder::OldestFirst => q.dead.iter().filter_map(pick).map(|j| j.id).collect(),
        DeadOrder::NewestFirst => q.dead.iter().rev().filter_map(pick).map(|j| j.id).collect(),
    }
}
