//! Dead letters of one queue: killing a message, failing a flow's parent, trimming.

use super::MemQueue;
use crate::JobId;
use crate::contract::attempts;
use crate::contract::leases::Retention;
use crate::contract::stats::DeadLetter;

impl MemQueue {
    /// Moves a message to the dead letters at `now` (ms), with the record of
    /// its last attempt.
    pub fn kill(&mut self, id: &JobId, error: String, attempts: u32, now: u64, record: &str) {
        let keyed = self.keyed_of(id);
        let unique = self.unique_of.get(id).and_then(|key| {
            let (holder, expires) = self.unique.get(key)?;
            (holder == id).then(|| (key.clone(), *expires))
        });
        let Some(m) = self.remove(id) else { return };
        let log = attempts::append(m.log.as_deref(), record);
        let letter = DeadLetter {
            id: *id,
            body: m.body,
            error,
            attempts,
            died_at_ms: now,
        };
        self.dead.insert((now, *id));
        self.dead_msgs
            .insert(*id, (letter, m.priority, Some(log), keyed, unique));
    }

    /// A flow's parent whose child failed, never sent: dead-lettered with
    /// `why` as its error (`cancel`: entered in the history as cancelled
    /// instead) at `now` (ms), as flow_fail.lua does.
    pub fn fail_parent(&mut self, id: JobId, body: &[u8], cancel: bool, why: &str, now: u64) {
        use crate::contract::history::Finish;
        self.parents.remove(&id);
        if !cancel && !self.dead_msgs.contains_key(&id) {
            let letter = DeadLetter {
                id,
                body: body.to_vec(),
                error: why.to_string(),
                attempts: 0,
                died_at_ms: now,
            };
            self.dead.insert((now, id));
            self.dead_msgs.insert(id, (letter, 0, None, None, None));
        }
        let how = if cancel {
            Finish::Cancelled
        } else {
            Finish::Dead
        };
        self.enter_failed(id, body, how, &format!("flow: {why}"), now);
    }

    /// Drops the oldest dead letters beyond `retention` at `now` (ms), at most
    /// `budget`, as complete.lua does.
    pub fn trim_dead(&mut self, now: u64, retention: Retention, budget: usize) {
        let (keep, max_age) = retention.limits();
        for _ in 0..budget {
            let Some(&(died, old)) = self.dead.first() else {
                break;
            };
            let too_old = max_age > 0 && died < now.saturating_sub(max_age);
            let too_many = keep > 0 && self.dead.len() as u64 > keep;
            if !(too_old || too_many) {
                break;
            }
            self.drop_dead(&old);
        }
    }

    /// Deletes a dead letter; whether it was there.
    pub fn drop_dead(&mut self, id: &JobId) -> bool {
        match self.dead_msgs.remove(id) {
            Some((d, ..)) => self.dead.remove(&(d.died_at_ms, *id)),
            None => false,
        }
    }
}
