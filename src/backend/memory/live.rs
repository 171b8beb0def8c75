//! Periodic ticks and the live-worker registry in memory, mirroring
//! `periodic.lua` and `workers.lua`.

use std::time::Duration;

use super::state::ms_score;
use super::{MemoryBackend, not_found};
use crate::Result;
use crate::contract::admin::{Beat, Paused, Tick, Ticked, Ticks, WorkerInfo};
use crate::contract::inspect::Inspect;
use crate::contract::queues::{SendMessage, validate};

impl MemoryBackend {
    /// periodic.lua: enqueues `msg` as the job of `tick`, once.
    pub(super) fn tick_once(
        &self,
        queue: &str,
        tick: &Tick<'_>,
        msg: &SendMessage,
    ) -> Result<Ticked> {
        validate::queue_name(queue)?;
        validate::priority(msg.priority)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        q.check_size(msg.body.len())?;
        if now < tick.at_ms {
            return Ok(Ticked::Early(Duration::from_millis(tick.at_ms - now)));
        }
        let last = q.periodic.get(tick.name).map(|t| t.0);
        if last.is_some_and(|l| l >= tick.at_ms) || (tick.catch_up && last.is_none()) {
            return Ok(Ticked::Done { now_ms: now });
        }
        q.periodic
            .insert(tick.name.to_string(), (tick.at_ms, tick.next_ms));
        let key = (queue.to_string(), tick.name.to_string());
        if st.paused_schedules.contains_key(&key) {
            return Ok(Ticked::Paused { now_ms: now });
        }
        let Some(q) = st.queues.get_mut(queue) else {
            return Err(not_found(queue));
        };
        q.insert(
            tick.id(queue),
            msg.body.clone(),
            ms_score(now),
            msg.priority,
        );
        q.totalsent += 1;
        drop(st);
        self.notify(queue);
        Ok(Ticked::Enqueued { now_ms: now })
    }

    /// workers.lua's beat (an empty `beat`: leave); drops entries that ran out.
    pub(super) fn beat_now(&self, id: &str, beat: &[u8], ttl: Duration) {
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        if beat.is_empty() {
            st.workers.remove(id);
        } else {
            let until = now.saturating_add(crate::contract::backend::clamped_ms(ttl).max(1));
            st.workers
                .insert(id.to_string(), (until, beat.to_vec(), now));
        }
        st.workers.retain(|_, (until, ..)| *until > now);
    }

    /// Rsmq::touch: moves worker `id`'s entry on to run out `ttl` from now;
    /// false when it has none.
    pub(super) fn touch_now(&self, id: &str, ttl: Duration) -> bool {
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        match st.workers.get_mut(id) {
            Some((until, ..)) => {
                *until = now.saturating_add(crate::contract::backend::clamped_ms(ttl).max(1));
                true
            }
            None => false,
        }
    }

    pub(super) fn live_workers(&self) -> Vec<WorkerInfo> {
        let now = self.clock.now_ms();
        let st = self.lock();
        st.workers
            .values()
            .filter(|(until, ..)| *until > now)
            .filter_map(|(until, beat, at)| Beat::decode(beat, *until, Some(*at), &st.serves))
            .collect()
    }

    /// schedule.lua: pauses (or resumes) schedule `name` of `queue`.
    pub(super) fn pause_schedule_now(&self, queue: &str, name: &str, pause: bool) -> Result<bool> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let by = self.actor().to_string();
        let mut st = self.lock_mut();
        let key = (queue.to_string(), name.to_string());
        Ok(if pause {
            match st.paused_schedules.entry(key) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert((now, by));
                    true
                }
            }
        } else {
            st.paused_schedules.remove(&key).is_some()
        })
    }

    pub(super) fn ticks_now(&self, queue: &str, names: &[&str]) -> Result<Vec<Ticks>> {
        validate::queue_name(queue)?;
        let st = self.lock();
        let q = st.queues.get(queue);
        Ok(names
            .iter()
            .map(|n| {
                let mut t = Ticks::default();
                if let Some((last, next)) = q.and_then(|q| q.periodic.get(*n)) {
                    (t.last_ms, t.next_ms) = (Some(*last), *next);
                }
                let key = (queue.to_string(), n.to_string());
                t.paused = st.paused_schedules.get(&key).map(|(at, by)| Paused {
                    at_ms: *at,
                    by: by.clone(),
                });
                t
            })
            .collect())
    }
}
