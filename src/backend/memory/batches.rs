//! Batches in memory: counted inside the settle that finishes their jobs,
//! under the one lock, so a callback is enqueued exactly once with no marks.

use std::collections::{BTreeMap, HashSet};

use super::MemoryBackend;
use super::state::{MemQueue, State, ms_score};
use crate::contract::batches::{
    BatchId, BatchRef, BatchSpec, BatchStatus, Callback, CallbackKind, Finish, callback_body,
};
use crate::contract::queues::QueueOptions;
use crate::{Error, JobId, Result};

/// How long a completed batch is kept (as on Redis: 7 days).
const KEEP_MS: u64 = 7 * 24 * 3600 * 1000;

/// One batch.
#[derive(Debug, Default)]
pub(super) struct MemBatch {
    status: BatchStatus,
    counted: HashSet<u64>,
    callbacks: Vec<Callback>,
    /// Its first 1,000 dead jobs: queue, id.
    dead: Vec<(String, JobId)>,
}

/// Every batch, by id.
pub(super) type Batches = BTreeMap<BatchId, MemBatch>;

impl State {
    /// Counts finishes of `queue`'s jobs in their batches and enqueues the
    /// callbacks that fall due; returns the queues sent to.
    pub(super) fn count_batches(
        &mut self,
        queue: &str,
        finishes: &[(BatchRef, Finish, JobId)],
        now_us: u64,
    ) -> Vec<String> {
        let mut sent = Vec::new();
        let now = now_us / 1000;
        let mut touched = Vec::new();
        let mut deaths = Vec::new();
        for (r, how, id) in finishes {
            let Some(b) = self.live_batch(&r.batch, now) else {
                continue;
            };
            if !b.counted.insert(r.index) {
                continue;
            }
            match how {
                Finish::Succeeded => b.status.succeeded += 1,
                Finish::Dead => {
                    b.status.dead += 1;
                    if b.dead.len() < 1000 {
                        b.dead.push((queue.to_string(), *id));
                    }
                    if b.status.dead == 1 {
                        deaths.push((r.batch, b.callback(CallbackKind::Death)));
                    }
                }
            }
            touched.push(r.batch);
        }
        for (id, cb) in deaths {
            sent.extend(self.enqueue_callbacks(&id, cb, now_us));
        }
        for id in touched {
            sent.extend(self.complete_batch(&id, now_us));
        }
        sent
    }

    /// A batch not past its retention.
    fn live_batch(&mut self, id: &BatchId, now: u64) -> Option<&mut MemBatch> {
        let expired = self
            .batches
            .get(id)
            .and_then(|b| b.status.completed_ms)
            .is_some_and(|at| now >= at.saturating_add(KEEP_MS));
        if expired {
            self.batches.remove(id);
        }
        self.batches.get_mut(id)
    }

    /// Completes batch `id` when it is sealed and every job finished.
    fn complete_batch(&mut self, id: &BatchId, now_us: u64) -> Vec<String> {
        let Some(b) = self.batches.get_mut(id) else {
            return Vec::new();
        };
        let s = &b.status;
        if s.completed_ms.is_some() || !s.sealed || s.finished() < s.total {
            return Vec::new();
        }
        b.status.completed_ms = Some(now_us / 1000);
        let mut due = b.callback(CallbackKind::Complete);
        if b.status.dead == 0 && b.status.cancelled == 0 {
            due.extend(b.callback(CallbackKind::Success));
        }
        self.enqueue_callbacks(id, due, now_us)
    }

    fn enqueue_callbacks(&mut self, id: &BatchId, due: Vec<Callback>, now_us: u64) -> Vec<String> {
        let Some(status) = self.batches.get(id).map(|b| b.status.clone()) else {
            return Vec::new();
        };
        let mut sent = Vec::new();
        for cb in due {
            let now = now_us / 1000;
            let q = self.queues.entry(cb.queue.clone()).or_insert_with(|| {
                let o = QueueOptions::default();
                MemQueue::new(o.vt, o.delay, o.maxsize, now / 1000)
            });
            let body = callback_body(&cb.body, &status);
            if q.check_size(body.len()).is_err() {
                tracing::error!(batch = %id, queue = %cb.queue, "a batch callback that cannot be sent is dropped: its body exceeds the queue's maxsize");
                continue;
            }
            let ids = self.ids.next(now_us, 1);
            q.insert(ids[0], body, ms_score(now + q.delay * 1000), 0);
            q.totalsent += 1;
            sent.push(cb.queue);
        }
        sent
    }
}

impl MemBatch {
    fn callback(&self, kind: CallbackKind) -> Vec<Callback> {
        self.callbacks
            .iter()
            .filter(|c| c.kind == kind)
            .cloned()
            .collect()
    }
}

impl MemoryBackend {
    pub(super) fn open_batch(&self, spec: &BatchSpec) -> Result<()> {
        for cb in &spec.callbacks {
            crate::contract::queues::validate::queue_name(&cb.queue)?;
        }
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        if st.batches.contains_key(&spec.id) {
            return Err(Error::InvalidValue {
                what: "batch id",
                reason: format!("batch {} exists already", spec.id),
            });
        }
        st.batches.insert(
            spec.id,
            MemBatch {
                status: BatchStatus {
                    id: spec.id.to_string(),
                    created_ms: now,
                    description: spec.description.clone(),
                    ..BatchStatus::default()
                },
                callbacks: spec.callbacks.clone(),
                ..MemBatch::default()
            },
        );
        Ok(())
    }

    pub(super) fn seal_batch(&self, id: &BatchId, total: u64) -> Result<()> {
        let now_us = self.clock.now_us();
        let sent = {
            let mut st = self.lock_mut();
            let Some(b) = st.live_batch(id, now_us / 1000) else {
                return Err(Error::InvalidValue {
                    what: "batch id",
                    reason: format!("no batch {id}"),
                });
            };
            b.status.total = total;
            b.status.sealed = true;
            st.complete_batch(id, now_us)
        };
        for q in sent {
            self.notify(&q);
        }
        Ok(())
    }

    pub(super) fn status_of_batch(&self, id: &BatchId) -> Option<BatchStatus> {
        let now = self.clock.now_ms();
        let mut st = self.lock();
        st.live_batch(id, now).map(|b| b.status.clone())
    }

    pub(super) fn list_batches(
        &self,
        before_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<BatchStatus>> {
        let limit = crate::contract::batches::check_limit(limit)?;
        let now = self.clock.now_ms();
        let mut st = self.lock();
        let expired: Vec<BatchId> = st
            .batches
            .iter()
            .filter(|(_, b)| {
                b.status
                    .completed_ms
                    .is_some_and(|at| now >= at.saturating_add(KEEP_MS))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            st.batches.remove(&id);
        }
        let mut all: Vec<&MemBatch> = st
            .batches
            .values()
            .filter(|b| before_ms.is_none_or(|ms| b.status.created_ms < ms))
            .collect();
        all.sort_by(|a, b| {
            b.status
                .created_ms
                .cmp(&a.status.created_ms)
                .then(b.status.id.cmp(&a.status.id))
        });
        Ok(all
            .into_iter()
            .take(limit)
            .map(|b| b.status.clone())
            .collect())
    }

    pub(super) fn dead_of_batch(&self, id: &BatchId, limit: usize) -> Vec<(String, JobId)> {
        let st = self.lock();
        st.batches
            .get(id)
            .map(|b| b.dead.iter().take(limit).cloned().collect())
            .unwrap_or_default()
    }
}
