//! RSMQ's queue operations in memory, mirroring the Redis scripts.

use std::time::Duration;

use super::state::{MemQueue, ms_score};
use super::{MemoryBackend, not_found};
use crate::contract::history::Finish;
use crate::contract::queues::{
    Message, MessageId, OnDuplicate, QueueAttributes, QueueOptions, QueueUpdate, Queues,
    SendMessage, SendOutcome, Sent, When, validate,
};
use crate::{Error, JobId, Result};

impl Queues for MemoryBackend {
    async fn create_queue(&self, name: &str, opts: QueueOptions) -> Result<()> {
        validate::queue_name(name)?;
        validate::seconds("vt", opts.vt)?;
        validate::seconds("delay", opts.delay)?;
        validate::maxsize(opts.maxsize)?;
        let now_s = self.clock.now_ms() / 1000;
        let mut st = self.lock_mut();
        if st.queues.contains_key(name) {
            return Err(Error::QueueExists { name: name.into() });
        }
        st.queues.insert(
            name.into(),
            MemQueue::new(opts.vt, opts.delay, opts.maxsize, now_s),
        );
        Ok(())
    }

    async fn list_queues(&self) -> Result<Vec<String>> {
        Ok(self.queue_names())
    }

    async fn delete_queue(&self, name: &str) -> Result<()> {
        validate::queue_name(name)?;
        let mut st = self.lock_mut();
        let removed = st.queues.remove(name);
        // its schedules' pauses go with it, as its periodic hash on Redis,
        // even when the queue is gone already (a pause for workers to come)
        st.paused_schedules.retain(|(q, _), _| q != name);
        removed.ok_or_else(|| not_found(name))?;
        // and its settings: every worker reads them again now
        st.settings_version += 1;
        drop(st);
        self.notify(crate::contract::admin::SETTINGS_WAKE);
        Ok(())
    }

    async fn attributes(&self, name: &str) -> Result<QueueAttributes> {
        validate::queue_name(name)?;
        let now_s = self.clock.now_ms() / 1000;
        let st = self.lock();
        let q = st.queues.get(name).ok_or_else(|| not_found(name))?;
        Ok(QueueAttributes {
            vt: q.vt,
            delay: q.delay,
            maxsize: q.maxsize,
            totalrecv: q.totalrecv,
            totalsent: q.totalsent,
            created: q.created,
            modified: q.modified,
            msgs: q.index.len() as u64,
            // RSMQ counts as hidden what is scored from the start of the current second
            hiddenmsgs: q.index.range((now_s * 1_000_000, JobId::MIN)..).count() as u64,
        })
    }

    async fn set_attributes(&self, name: &str, update: QueueUpdate) -> Result<QueueAttributes> {
        validate::queue_name(name)?;
        if update == QueueUpdate::default() {
            return Err(Error::InvalidValue {
                what: "queue update",
                reason: "no attribute supplied".into(),
            });
        }
        update.vt.map(|v| validate::seconds("vt", v)).transpose()?;
        update
            .delay
            .map(|v| validate::seconds("delay", v))
            .transpose()?;
        update.maxsize.map(validate::maxsize).transpose()?;
        let now_s = self.clock.now_ms() / 1000;
        {
            let mut st = self.lock_mut();
            let q = st.queues.get_mut(name).ok_or_else(|| not_found(name))?;
            q.modified = now_s;
            q.vt = update.vt.unwrap_or(q.vt);
            q.delay = update.delay.unwrap_or(q.delay);
            q.maxsize = update.maxsize.unwrap_or(q.maxsize);
        }
        Queues::attributes(self, name).await
    }

    async fn send_outcomes(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<Sent>> {
        validate::queue_name(queue)?;
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        let mut ttls = Vec::with_capacity(msgs.len());
        for m in msgs {
            ttls.push(crate::contract::queues::check_send(m)?);
        }
        let maxlen = msgs.iter().map(|m| m.body.len()).max().unwrap_or(0);
        let now_us = self.clock.now_us();
        let now = now_us / 1000;
        let (sent, changed) = {
            let mut guard = self.lock_mut();
            let st = &mut *guard;
            let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
            q.check_size(maxlen)?;
            q.expire_ghosts(now);
            let ids = st.ids.next(now_us, msgs.len());
            let mut sent = Vec::with_capacity(msgs.len());
            for ((m, id), ttl) in msgs.iter().zip(&ids).zip(ttls) {
                // a delay runs from the send's µs: due exactly then, while
                // its score is rounded up to the next whole ms (see exact.rs)
                let exact = match m.when {
                    When::After(d) if validate::whole_ms(d) > 0 => {
                        Some(now_us.saturating_add(validate::whole_ms(d).saturating_mul(1000)))
                    }
                    _ => None,
                };
                let due = match m.when {
                    When::QueueDelay => now + q.delay * 1000,
                    When::After(_) => exact.map_or(now, |us| us.div_ceil(1000)),
                    When::AtUnixMs(at) => at.max(now),
                };
                // cut below the leased range, as due_score in lib.lua
                let score = ms_score(due.min(crate::contract::queues::LAST_DUE_MS));
                if let Some(k) = &m.keyed {
                    q.send_keyed(*id, m.body.clone(), score, &k.key, k.per_key);
                    sent.push(Sent::added(*id));
                    continue;
                }
                let (Some(u), Some(ttl)) = (&m.unique, ttl) else {
                    q.insert(*id, m.body.clone(), score, m.priority);
                    if let Some(us) = exact {
                        q.mark_exact(*id, us);
                    }
                    sent.push(Sent::added(*id));
                    continue;
                };
                let expires = if ttl > 0 { now + ttl } else { 0 };
                match q.unique_holder(&u.key, now) {
                    None => {
                        q.insert(*id, m.body.clone(), score, m.priority);
                        if let Some(us) = exact {
                            q.mark_exact(*id, us);
                        }
                        q.hold_unique(&u.key, *id, expires);
                        sent.push(Sent::added(*id));
                    }
                    Some(held) => {
                        let fresh = q.msgs[&held].score % 1000 == 0 && q.msgs[&held].rc == 0;
                        let outcome = match u.on_duplicate {
                            OnDuplicate::ReplaceDelay if fresh => SendOutcome::Moved,
                            OnDuplicate::Replace if fresh => {
                                q.move_to(held, m.priority);
                                if let Some(msg) = q.msgs.get_mut(&held) {
                                    msg.body = m.body.clone();
                                }
                                SendOutcome::Replaced
                            }
                            _ => SendOutcome::Duplicate,
                        };
                        if outcome != SendOutcome::Duplicate {
                            q.rescore(held, score);
                            q.hold_unique(&u.key, held, expires);
                        }
                        sent.push(Sent { id: held, outcome });
                    }
                }
            }
            let added = sent.iter().filter(|s| s.outcome.is_added()).count();
            q.totalsent += added as u64;
            let changed = sent.iter().any(|s| s.outcome != SendOutcome::Duplicate);
            (sent, changed)
        };
        if changed {
            self.notify(queue);
        }
        Ok(sent)
    }

    async fn receive_batch(
        &self,
        queue: &str,
        n: usize,
        vt: Option<Duration>,
    ) -> Result<Vec<Message>> {
        validate::queue_name(queue)?;
        let vt = vt.map(|d| validate::duration_ms("vt", d)).transpose()?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        let hidden = (now + vt.unwrap_or(q.vt * 1000)) * 1000;
        let mut out = Vec::new();
        for (_, id) in q.due(now, n.max(1)) {
            q.lease_taken(&id, now);
            // the delivery count in the score's thousandths is kept, as
            // receive.lua keeps it
            let count = q.msgs.get(&id).map_or(0, |m| {
                u64::from(crate::contract::leases::score_count(m.score))
            });
            q.rescore(id, hidden + count);
            let Some(m) = q.msgs.get_mut(&id) else {
                continue;
            };
            m.rc += 1;
            m.lease = false;
            let fr = *m.fr.get_or_insert(now);
            out.push(message(id, &m.body, m.rc, fr));
        }
        q.totalrecv += out.len() as u64;
        Ok(out)
    }

    async fn pop(&self, queue: &str) -> Result<Option<Message>> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        let Some((_, id)) = q.due(now, 1).pop() else {
            return Ok(None);
        };
        q.lease_taken(&id, now);
        let m = q
            .remove(&id)
            .ok_or_else(|| Error::Protocol("indexed message without body".into()))?;
        q.totalrecv += 1;
        let popped = message(id, &m.body, m.rc + 1, m.fr.unwrap_or(now));
        // its batch, and the flows that wait for it, count it succeeded
        let finishes = super::batches::removed(
            q,
            queue,
            id,
            &m.body,
            crate::contract::batches::Finish::Succeeded,
        );
        let called = st.count_batches(finishes, self.clock.now_us());
        drop(st);
        for q in called {
            self.notify(&q);
        }
        Ok(Some(popped))
    }

    async fn pop_due(&self, queue: &str, limit: usize) -> Result<Vec<Message>> {
        validate::queue_name(queue)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        let mut out = Vec::new();
        let mut finishes = Vec::new();
        for (_, id, _) in q.due_all(now, limit) {
            q.lease_taken(&id, now);
            if let Some(m) = q.remove(&id) {
                out.push(message(id, &m.body, m.rc + 1, m.fr.unwrap_or(now)));
                // its batch, and the flows that wait for it, count it succeeded
                finishes.extend(super::batches::removed(
                    q,
                    queue,
                    id,
                    &m.body,
                    crate::contract::batches::Finish::Succeeded,
                ));
            }
        }
        q.totalrecv += out.len() as u64;
        let called = st.count_batches(finishes, self.clock.now_us());
        drop(st);
        for q in called {
            self.notify(&q);
        }
        Ok(out)
    }

    async fn change_visibility(&self, queue: &str, id: &MessageId, vt: Duration) -> Result<bool> {
        validate::queue_name(queue)?;
        let ms = validate::duration_ms("vt", vt)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st.queues.get_mut(queue).ok_or_else(|| not_found(queue))?;
        // a keyed job waiting for its key is in no sorted set, as on Redis
        if q.msgs.get(id).is_none_or(|m| m.waiting) {
            return Ok(false);
        }
        // the delivery count in the score's thousandths is kept, as on Redis
        let count = u64::from(crate::contract::leases::score_count(q.msgs[id].score));
        q.rescore(*id, (now + ms) * 1000 + count);
        // a leased job made visible (or hidden) again is no longer leased:
        // its lease leaves the counts, as visibility.lua takes it off them,
        // and it is a job due then, not a running one
        q.leased.remove(id);
        if let Some(m) = q.msgs.get_mut(id) {
            m.lease = false;
        }
        Ok(true)
    }

    async fn delete(&self, queue: &str, id: &MessageId) -> Result<bool> {
        validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let Some(q) = st.queues.get_mut(queue) else {
            return Ok(false);
        };
        let keyed = q.keyed_of(id);
        let Some(m) = q.remove_at(id, now) else {
            return Ok(false);
        };
        q.enter_removed(*id, &m, Finish::Deleted, &self.actor, now, keyed);
        // its batch, and the flows that wait for it, count it cancelled
        let finishes = super::batches::cancelled(q, queue, *id, &m.body);
        let called = st.count_batches(finishes, self.clock.now_us());
        drop(st);
        self.wake_held(queue);
        for q in called {
            self.notify(&q);
        }
        Ok(true)
    }

    async fn delete_batch(&self, queue: &str, ids: &[MessageId]) -> Result<u64> {
        validate::queue_name(queue)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let Some(q) = st.queues.get_mut(queue) else {
            return Ok(0);
        };
        let mut n = 0u64;
        let mut finishes = Vec::new();
        for id in ids {
            if let Some(m) = q.remove_at(id, now) {
                n += 1;
                finishes.extend(super::batches::cancelled(q, queue, *id, &m.body));
            }
        }
        // one event in the history, as delete.lua adds
        if n > 0 {
            q.add_event("deleted", n, &self.actor, now);
        }
        // their batches, and the flows that wait for them, count them
        let called = if finishes.is_empty() {
            Vec::new()
        } else {
            st.count_batches(finishes, self.clock.now_us())
        };
        drop(st);
        if n > 0 {
            self.wake_held(queue);
        }
        for q in called {
            self.notify(&q);
        }
        Ok(n)
    }
}

fn message(id: JobId, body: &[u8], rc: u64, fr: u64) -> Message {
    Message {
        id,
        body: String::from_utf8_lossy(body).into_owned(),
        rc,
        fr,
        sent: id.sent_ms(),
    }
}
