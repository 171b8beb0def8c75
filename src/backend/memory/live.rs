//! Periodic ticks and the live-worker registry in memory, mirroring
//! `periodic.lua` and `workers.lua`.

use std::time::Duration;

use super::state::ms_score;
use super::{MemoryBackend, not_found};
use crate::Result;
use crate::contract::admin::{
    Beat, BeatReply, Control, Paused, Tick, Ticked, Ticks, WorkerControl, WorkerInfo, schedule_name,
};
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
        schedule_name(tick.name)?;
        validate::priority(msg.priority)?;
        crate::contract::queues::check_keyed(msg)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        if now < tick.at_ms {
            return Ok(Ticked::Early(Duration::from_millis(tick.at_ms - now)));
        }
        q.check_size(msg.body.len())?;
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
        match &msg.keyed {
            Some(k) => {
                q.expire_ghosts(now);
                q.send_keyed(
                    tick.id(queue),
                    msg.body.clone(),
                    ms_score(now),
                    &k.key,
                    k.per_key,
                );
            }
            None => q.insert(
                tick.id(queue),
                msg.body.clone(),
                ms_score(now),
                msg.priority,
            ),
        }
        q.totalsent += 1;
        drop(st);
        self.notify(queue);
        Ok(Ticked::Enqueued { now_ms: now })
    }

    /// workers.lua's beat (an empty `beat`: leave, with its control); drops
    /// entries that ran out, with theirs. The control set on `id`.
    pub(super) fn beat_now(&self, id: &str, beat: &[u8], ttl: Duration) -> BeatReply {
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        if beat.is_empty() {
            st.workers.remove(id);
            st.worker_controls.remove(id);
        } else {
            let until = now.saturating_add(crate::contract::backend::clamped_ms(ttl).max(1));
            st.workers
                .insert(id.to_string(), (until, beat.to_vec(), now));
        }
        st.workers.retain(|_, (until, ..)| *until > now);
        let st = &mut *st;
        st.worker_controls.retain(|w, _| st.workers.contains_key(w));
        BeatReply::new(st.worker_controls.get(id).cloned(), st.settings_version)
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

    /// workers.lua's control: sets (or clears) the control on live worker
    /// `id` and wakes it; false when no live worker has that id.
    pub(super) fn control_now(&self, id: &str, what: Option<WorkerControl>) -> Result<bool> {
        crate::contract::admin::check_worker_id(id)?;
        let now = self.clock.now_ms();
        let by = self.actor().to_string();
        let mut st = self.lock_mut();
        if st.workers.get(id).is_none_or(|(until, ..)| *until <= now) {
            return Ok(false);
        }
        // a stop is final: a later quiet or resume leaves it
        let stopping = st
            .worker_controls
            .get(id)
            .is_some_and(|c| c.what == WorkerControl::Stop);
        match what {
            _ if stopping => {}
            Some(what) => {
                let c = Control {
                    what,
                    at_ms: now,
                    by,
                };
                st.worker_controls.insert(id.to_string(), c);
            }
            None => {
                st.worker_controls.remove(id);
            }
        }
        drop(st);
        self.notify(&crate::contract::admin::control_wake(id));
        Ok(true)
    }

    pub(super) fn live_workers(&self) -> Vec<WorkerInfo> {
        let now = self.clock.now_ms();
        let st = self.lock();
        st.workers
            .iter()
            .filter(|(_, (until, ..))| *until > now)
            .filter_map(|(id, (until, beat, at))| {
                let control = st.worker_controls.get(id).map(Control::stored);
                let control = control.as_deref().map(str::as_bytes);
                Beat::decode(beat, *until, Some(*at), &st.serves, control)
            })
            .collect()
    }

    /// schedule.lua: pauses (or resumes) schedule `name` of `queue`.
    pub(super) fn pause_schedule_now(&self, queue: &str, name: &str, pause: bool) -> Result<bool> {
        validate::queue_name(queue)?;
        crate::contract::admin::schedule_name(name)?;
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
