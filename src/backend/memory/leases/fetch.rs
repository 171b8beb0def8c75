//! [`Backend::fetch`] and [`Backend::extend`] in memory: the due jobs leased
//! within the queue's limits, and their leases renewed, each under one lock.
//!
//! [`Backend::fetch`]: crate::contract::backend::Backend::fetch
//! [`Backend::extend`]: crate::contract::backend::Backend::extend

use crate::backend::memory::MemoryBackend;
use crate::contract::attempts::{self, Attempt};
use crate::contract::leases::{Delivery, Fetched, MAX_COUNT, Token, is_lease, score_count};
use crate::contract::settings::QueueSettings;
use crate::{JobId, Result};
use std::time::Duration;

impl MemoryBackend {
    /// [`Backend::fetch`]: the due jobs leased, within the queue's limits.
    ///
    /// [`Backend::fetch`]: crate::contract::backend::Backend::fetch
    pub(super) fn fetch_now(&self, queue: &str, max: usize, lease: Duration) -> Result<Fetched> {
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
        // places that deleted running jobs kept until their leases ended
        q.expire_ghosts(now);
        if q.paused {
            return Ok(Fetched {
                now_us,
                paused: true,
                ..Default::default()
            });
        }
        let asked = max.max(1);
        // the limits across the fleet, as fetch.lua applies them
        let limits = QueueSettings::decode(&q.settings, &[]).in_force();
        let global = limits.concurrency.global.map(|n| n as usize);
        let rate = limits.rate_limit;
        let period = rate.period.as_millis() as u64;
        let inflight = global.map_or(0, |_| q.in_flight(now));
        let used = if rate.is_limited() {
            q.starts_within(now, period)
        } else {
            0
        };
        let mut max = asked;
        // a handler's throttle holds the queue until it ends
        let throttled = q.throttled_until > now;
        if throttled {
            max = 0;
        }
        if let Some(g) = global {
            max = max.min(g.saturating_sub(inflight));
        }
        if rate.is_limited() {
            max = max.min((rate.max as usize).saturating_sub(used));
        }
        // due by their scores, or exactly by now_us (see exact.rs)
        let due = q.leasable(now_us, max);
        let lease_ms = now.saturating_add(crate::contract::backend::clamped_ms(lease));
        let mut jobs = Vec::with_capacity(due.len());
        for (score, id, priority) in &due {
            // a lease that ran out: that attempt was lost (see fetch.lua)
            let lost = is_lease(*score)
                .then(|| Attempt::lease_lost(score_count(*score), Some(score / 1000)).line());
            if let Some(rec) = &lost
                && q.hold_back_lost(*id, *score, rec)
            {
                continue;
            }
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
            q.leased.insert(*id);
            if rate.is_limited() {
                q.starts.push_back(now);
            }
            if let Some(m) = q.msgs.get_mut(id) {
                m.lease = true;
                m.released_lease = None;
                if let Some(rec) = lost {
                    m.log = Some(attempts::append(m.log.as_deref(), &rec));
                }
            }
        }
        q.totalrecv += jobs.len() as u64;
        let leased = jobs.len();
        let global_full = global.is_some_and(|g| inflight + leased >= g);
        let rate_full = rate.is_limited() && used + leased >= rate.max as usize;
        let mut held = crate::contract::leases::Held {
            concurrency: leased < asked && global_full,
            rate: leased < asked && rate_full,
            throttle: leased < asked && throttled,
            jobs: 0,
        };
        if held.any() {
            // the due jobs the limits kept from the fetch, up to what it
            // asked for less what it leased (see fetch.lua)
            held.jobs = q.fetchable(now, asked - leased).len() as u32;
        }
        let next_due_us = if held.any() {
            // when the limit lets the next job start (see fetch.lua)
            let mut at = 0;
            if held.concurrency {
                at = q.first_place_frees().unwrap_or((now / 1000 + 1) * 1000);
                q.held = true;
            }
            if held.rate {
                let oldest = q.starts.front().copied().unwrap_or(now);
                at = at.max(oldest.saturating_add(period));
            }
            if held.throttle {
                at = at.max(q.throttled_until);
            }
            Some(at.saturating_mul(1000))
        } else if leased < asked {
            // the first score's ms or the next exact due (see exact.rs), or
            // when a key's place frees by time
            let ms = |at: Option<u64>| at.map(|ms| ms.saturating_mul(1000));
            ms(q.next_due_ms())
                .into_iter()
                .chain(q.next_exact_us(now_us))
                .chain(ms(q.next_key_event_ms()))
                .min()
        } else {
            None
        };
        Ok(Fetched {
            jobs,
            now_us,
            next_due_us,
            max_body: usize::try_from(q.maxsize).ok(),
            orphans: 0,
            missing: false,
            paused: false,
            held,
            stale_batches: false,
        })
    }

    /// [`Backend::extend`] of leases given once each.
    ///
    /// [`Backend::extend`]: crate::contract::backend::Backend::extend
    pub(super) fn extend_each(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> Vec<Option<Token>> {
        let until = self
            .clock
            .now_ms()
            .saturating_add(crate::contract::backend::clamped_ms(lease));
        let mut st = self.lock_mut();
        let Some(q) = st.queues.get_mut(queue) else {
            return vec![None; leases.len()];
        };
        leases
            .iter()
            .map(|(id, token)| {
                q.holds(id, *token).then(|| {
                    // never earlier than it was, as extend.lua
                    let until = until.max(token.lease_until_ms());
                    let new = Token::new(until, token.attempt()).at_priority(token.priority());
                    q.rescore(*id, new.score());
                    // in flight again (a count may have dropped it once its
                    // lease ran out): it holds its place, as in Redis
                    q.leased.insert(*id);
                    new
                })
            })
            .collect()
    }
}
