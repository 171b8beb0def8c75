//! Jobs added to a batch while it runs, and cancelling a batch, in memory:
//! one step under the lock.

use std::collections::HashMap;

use super::MemoryBackend;
use super::state::{MemQueue, ms_score};
use crate::contract::batches::{
    BatchId, BatchRef, CANCELLED, CallbackKind, closed, no_batch, with_batch,
};
use crate::contract::queues::{QueueOptions, SendMessage, validate};
use crate::{Error, Result};

impl MemoryBackend {
    pub(super) fn add_to_batch(&self, id: &BatchId, jobs: &[(String, SendMessage)]) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        validate::added_jobs(jobs)?;
        let now_us = self.clock.now_us();
        let now = now_us / 1000;
        let (refused, sent) = {
            let mut guard = self.lock_mut();
            let st = &mut *guard;
            let b = st.live_batch(id, now).ok_or_else(|| no_batch(id))?;
            if b.status.completed_ms.is_some() {
                return Err(closed(id, "it completed"));
            }
            if b.status.cancelled_at_ms.is_some() {
                return Err(closed(id, "it was cancelled"));
            }
            let start = b.next;
            b.next += jobs.len() as u64;
            b.status.total += jobs.len() as u64;
            // each body naming its place, as sent
            let bodies: Vec<Vec<u8>> = jobs
                .iter()
                .enumerate()
                .map(|(i, (_, m))| {
                    let index = start + i as u64;
                    with_batch(&m.body, &BatchRef { batch: *id, index })
                })
                .collect();
            // grouped as on Redis: a queue and priority whose largest job
            // is over the queue's maxsize are refused together
            let mut largest: HashMap<(&str, i8), usize> = HashMap::new();
            for ((queue, msg), body) in jobs.iter().zip(&bodies) {
                let l = largest.entry((queue, msg.priority)).or_default();
                *l = (*l).max(body.len());
            }
            let mut refused = None;
            let mut sent = Vec::new();
            let mut left = 0u64;
            for (i, (queue, msg)) in jobs.iter().enumerate() {
                let q = st.queues.entry(queue.clone()).or_insert_with(|| {
                    let o = QueueOptions::default();
                    MemQueue::new(o.vt, o.delay, o.maxsize, now / 1000)
                });
                if q.check_size(largest[&(queue.as_str(), msg.priority)])
                    .is_err()
                {
                    left += 1;
                    refused.get_or_insert(Error::InvalidValue {
                        what: "job added to a batch",
                        reason: format!("its body exceeds queue {queue:?}'s maxsize"),
                    });
                    continue;
                }
                let job = st.ids.next(now_us, 1)[0];
                let Some(q) = st.queues.get_mut(queue) else {
                    continue;
                };
                q.insert(
                    job,
                    bodies[i].clone(),
                    ms_score(now + q.delay * 1000),
                    msg.priority,
                );
                q.totalsent += 1;
                sent.push(queue.clone());
            }
            if left > 0 {
                if let Some(b) = st.batches.get_mut(id) {
                    b.status.total -= left;
                }
                let (s, more) = st.complete_batch(id, now_us);
                sent.extend(s);
                sent.extend(st.count_batches(more, now_us));
            }
            (refused, sent)
        };
        for q in sent {
            self.notify(&q);
        }
        refused.map_or(Ok(()), Err)
    }

    pub(super) fn cancel_batch(&self, id: &BatchId) -> bool {
        let now_us = self.clock.now_us();
        let now = now_us / 1000;
        let sent = {
            let mut st = self.lock_mut();
            let Some(b) = st.live_batch(id, now) else {
                return false;
            };
            if b.status.completed_ms.is_some() || b.status.cancelled_at_ms.is_some() {
                return false;
            }
            b.status.cancelled_at_ms = Some(now);
            st.batch_ends.insert((now, *id));
            // listed for workers, as cancel_list.lua does
            let score = st.cancel_list.last().map_or(now, |(s, _)| now.max(s + 1));
            st.cancel_list
                .retain(|(s, _)| now.saturating_sub(*s) <= WEEK_MS);
            st.cancel_list.push((score, *id));
            let Some(b) = st.batches.get_mut(id) else {
                return false;
            };
            // its first failure unless a job failed first: a flow's parent
            // is failed (cancelled) at once
            let due = if b.status.first_failure.is_none() {
                b.status.first_failure = Some(CANCELLED.into());
                b.callback(CallbackKind::Failed)
            } else {
                Vec::new()
            };
            let (mut sent, more) = st.enqueue_callbacks(id, due, now_us);
            sent.extend(st.count_batches(more, now_us));
            sent
        };
        for q in sent {
            self.notify(&q);
        }
        true
    }

    pub(super) fn cancelled_batches(&self, after: u64) -> Vec<(BatchId, u64)> {
        let st = self.lock();
        st.cancel_list
            .iter()
            .filter(|(s, _)| *s > after)
            .take(1000)
            .map(|(s, id)| (*id, *s))
            .collect()
    }
}

/// How long a cancelled batch stays listed for workers.
const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;
