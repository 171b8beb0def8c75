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
    pub(super) status: BatchStatus,
    counted: HashSet<u64>,
    callbacks: Vec<Callback>,
    /// Its first 1,000 dead jobs: queue, id.
    dead: Vec<(String, JobId)>,
    /// The results its jobs returned, by index.
    results: BTreeMap<u64, Vec<u8>>,
    /// The index the next job added while it runs takes.
    pub(super) next: u64,
}

/// Every batch, by id.
pub(super) type Batches = BTreeMap<BatchId, MemBatch>;

/// A job's finish to count in its batch: its queue, its place, how, its id
/// and its result.
pub(super) type Counted = (String, BatchRef, Finish, JobId, Option<Vec<u8>>);

impl State {
    /// Counts finishes of jobs in their batches and enqueues the callbacks
    /// that fall due (a flow's failed parent counted in its own flow in
    /// turn); returns the queues sent to.
    pub(super) fn count_batches(&mut self, finishes: Vec<Counted>, now_us: u64) -> Vec<String> {
        let mut sent = Vec::new();
        let now = now_us / 1000;
        let mut work: std::collections::VecDeque<Counted> = finishes.into();
        while let Some((queue, r, how, id, result)) = work.pop_front() {
            let Some(b) = self.live_batch(&r.batch, now) else {
                continue;
            };
            // a job naming an index the batch never gave out (a forged or
            // stray body) is none of its jobs: not counted (as on Redis)
            if r.index >= b.next {
                tracing::warn!(batch = %r.batch, queue, index = r.index, "a finish of a job naming an index its batch never gave out is not counted");
                continue;
            }
            if !b.counted.insert(r.index) {
                continue;
            }
            let mut due = Vec::new();
            match how {
                Finish::Succeeded => {
                    b.status.succeeded += 1;
                    if let Some(v) = result {
                        b.results.insert(r.index, v);
                    }
                }
                Finish::Dead => {
                    b.status.dead += 1;
                    if b.dead.len() < 1000 {
                        b.dead.push((queue.clone(), id));
                    }
                    if b.status.dead == 1 {
                        due.extend(b.callback(CallbackKind::Death));
                    }
                }
                Finish::Cancelled => b.status.cancelled += 1,
            }
            if how != Finish::Succeeded && b.status.first_failure.is_none() {
                let word = if how == Finish::Dead {
                    "dead"
                } else {
                    "cancelled"
                };
                b.status.first_failure = Some(format!("{queue} {id} {word}"));
                due.extend(b.callback(CallbackKind::Failed));
            }
            let (s, more) = self.enqueue_callbacks(&r.batch, due, now_us);
            sent.extend(s);
            work.extend(more);
            let (s, more) = self.complete_batch(&r.batch, now_us);
            sent.extend(s);
            work.extend(more);
        }
        sent
    }

    /// Drops up to `most` batches past their retention at `now` (ms), the
    /// earliest first, as Redis expires a batch's keys.
    pub(super) fn drop_expired_batches(&mut self, now: u64, most: usize) {
        for _ in 0..most {
            match self.batch_ends.first() {
                Some(&(at, id)) if now >= at.saturating_add(KEEP_MS) => {
                    self.batch_ends.pop_first();
                    // looked up as any read does: gone only when expired
                    self.live_batch(&id, now);
                }
                _ => break,
            }
        }
    }

    /// The open batches checked for a seal by now (`most` of them), taken
    /// out: those neither sealed nor cancelled, for the sweep to cancel.
    pub(super) fn unsealed_batches(&mut self, now: u64, most: usize) -> Vec<BatchId> {
        let mut out = Vec::new();
        for _ in 0..most {
            match self.batch_opens.first() {
                Some(&(at, id)) if now >= at => {
                    self.batch_opens.pop_first();
                    // (an entry of an earlier batch of this id, expired and
                    // opened again since, is not this one's)
                    if let Some(b) = self.live_batch(&id, now)
                        && b.status
                            .created_ms
                            .saturating_add(crate::contract::batches::OPEN_MS)
                            == at
                        && !b.status.sealed
                        && b.status.cancelled_at_ms.is_none()
                    {
                        out.push(id);
                    }
                }
                _ => break,
            }
        }
        out
    }

    /// A batch not past its retention.
    pub(super) fn live_batch(&mut self, id: &BatchId, now: u64) -> Option<&mut MemBatch> {
        let expired = self
            .batches
            .get(id)
            .and_then(|b| b.ends_at())
            .is_some_and(|at| now >= at.saturating_add(KEEP_MS));
        if expired {
            self.batches.remove(id);
        }
        self.batches.get_mut(id)
    }

    /// Completes batch `id` when it is sealed and every job finished.
    pub(super) fn complete_batch(
        &mut self,
        id: &BatchId,
        now_us: u64,
    ) -> (Vec<String>, Vec<Counted>) {
        let Some(b) = self.batches.get_mut(id) else {
            return Default::default();
        };
        let s = &b.status;
        if s.completed_ms.is_some() || !s.sealed || s.finished() < s.total {
            return Default::default();
        }
        b.status.completed_ms = Some(now_us / 1000);
        let ends = b.ends_at().unwrap_or(now_us / 1000);
        self.batch_ends.insert((ends, *id));
        let mut due = b.callback(CallbackKind::Complete);
        // a cancelled batch never succeeds, though every job it ran did
        if b.status.dead == 0 && b.status.cancelled == 0 && b.status.cancelled_at_ms.is_none() {
            due.extend(b.callback(CallbackKind::Success));
            due.extend(b.callback(CallbackKind::Parent));
        }
        self.enqueue_callbacks(id, due, now_us)
    }

    /// Sends the callbacks `due` of batch `id`, or fails a flow's parent;
    /// returns the queues sent to and the finishes a failed parent makes.
    pub(super) fn enqueue_callbacks(
        &mut self,
        id: &BatchId,
        due: Vec<Callback>,
        now_us: u64,
    ) -> (Vec<String>, Vec<Counted>) {
        let Some(status) = self.batches.get(id).map(|b| b.status.clone()) else {
            return Default::default();
        };
        let mut sent = Vec::new();
        let mut more = Vec::new();
        for cb in due {
            let now = now_us / 1000;
            // a sealed flow's parent waited in its queue since its flow was
            // enqueued: a queue deleted since is not created again for it,
            // nor is the parent sent, nor dead-lettered (as on Redis; one
            // whose flow's enqueue stopped before its seal may have no queue
            // yet: made, for its record). It went with its queue, as a
            // deleted job does: cancelled in its own flow, which fails
            if matches!(cb.kind, CallbackKind::Parent | CallbackKind::Failed)
                && let Some(parent) = cb.id
                && status.sealed
                && !self.queues.contains_key(&cb.queue)
            {
                more.extend(gone_parent(&cb, parent));
                continue;
            }
            let q = self.queues.entry(cb.queue.clone()).or_insert_with(|| {
                let o = QueueOptions::default();
                MemQueue::new(o.vt, o.delay, o.maxsize, now / 1000)
            });
            // a parent a caller cancelled while it waited: neither sent nor
            // failed (its flow learnt it then); its flow fires one of the two
            // once, so it is forgotten now (Redis ages its marks to go 7
            // days on)
            if matches!(cb.kind, CallbackKind::Parent | CallbackKind::Failed)
                && cb.id.is_some_and(|j| q.cancelled_parents.remove(&j))
            {
                continue;
            }
            // nor one that no longer waits in its queue created again: it
            // went with the queue deleted since (as on Redis)
            if matches!(cb.kind, CallbackKind::Parent | CallbackKind::Failed)
                && let Some(parent) = cb.id
                && status.sealed
                && !q.parents.contains_key(&parent)
            {
                more.extend(gone_parent(&cb, parent));
                continue;
            }
            let body = callback_body(&cb.body, &status);
            let oversized = q.check_size(body.len()).err();
            // a flow's parent that can never be sent is failed instead (as
            // on Redis)
            let why = match (&oversized, cb.kind) {
                (_, CallbackKind::Failed) => {
                    Some(crate::contract::batches::failed_parent_why(&status))
                }
                (Some(_), CallbackKind::Parent) => Some(format!(
                    "it cannot be enqueued: its body exceeds queue {:?}'s maxsize",
                    cb.queue
                )),
                _ => None,
            };
            if let Some(why) = why {
                let Some(parent) = cb.id else { continue };
                // a cancelled flow's parent is cancelled
                let cancel = cb.kind == CallbackKind::Failed
                    && (cb.cancel || status.cancelled_at_ms.is_some());
                // its body carries the status, as a sent parent's does, so
                // that a dead letter requeued reads its children's results
                q.fail_parent(parent, &body, cancel, &why, now);
                let how = if cancel {
                    Finish::Cancelled
                } else {
                    Finish::Dead
                };
                // its own flow, and the flows that wait for it, learn it
                let waiting = q.deps.remove(&parent).unwrap_or_default();
                for r in BatchRef::of_body(&cb.body).into_iter().chain(waiting) {
                    more.push((cb.queue.clone(), r, how, parent, None));
                }
                sent.push(cb.queue);
                continue;
            }
            if oversized.is_some() {
                tracing::error!(batch = %id, queue = %cb.queue, "a batch callback that cannot be sent is dropped: its body exceeds the queue's maxsize");
                continue;
            }
            let job = match cb.id {
                // a flow's parent is sent only while it waits: one gone with
                // its deleted queue never runs (as on Redis), and its own
                // flow learns it
                Some(j) => {
                    if q.parents.remove(&j).is_none() {
                        more.extend(gone_parent(&cb, j));
                        continue;
                    }
                    j
                }
                None => self.ids.next(now_us, 1)[0],
            };
            q.insert(job, body, ms_score(now + q.delay * 1000), cb.priority);
            q.totalsent += 1;
            sent.push(cb.queue);
        }
        (sent, more)
    }

    /// The results batch `id`'s jobs returned, by index: at most `limit`
    /// from index `from`.
    pub(super) fn results_of_batch(
        &mut self,
        id: &BatchId,
        from: u64,
        limit: usize,
        now: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        self.live_batch(id, now)
            .map(|b| {
                b.results
                    .range(from..from.saturating_add(limit as u64))
                    .map(|(i, r)| (*i, r.clone()))
                    .collect()
            })
            .ok_or_else(|| crate::contract::batches::no_batch(id))
    }
}

/// The finish of a flow's parent `id` (its callback `cb`) gone with its
/// deleted queue, in its own flow when it is a child of one: cancelled, as a
/// deleted job is, so that the flow above it fails (as on Redis).
fn gone_parent(cb: &Callback, id: JobId) -> Option<Counted> {
    tracing::warn!(queue = %cb.queue, parent = %id, "a flow's parent went with its deleted queue: never run, counted as cancelled in the flow above it, if any");
    BatchRef::of_body(&cb.body).map(|r| (cb.queue.clone(), r, Finish::Cancelled, id, None))
}

/// The finishes of job `id` of `queue` (its body `body`), just cancelled or
/// deleted: in its batch, and in the flows that wait for it (whose
/// registrations go).
pub(super) fn cancelled(q: &mut MemQueue, queue: &str, id: JobId, body: &[u8]) -> Vec<Counted> {
    removed(q, queue, id, body, Finish::Cancelled)
}

/// The finishes of job `id` of `queue`, just removed, counted `how`: in its
/// batch, and in the flows that wait for it (whose registrations go). A
/// popped job counts as succeeded, as pop.lua enters it.
pub(super) fn removed(
    q: &mut MemQueue,
    queue: &str,
    id: JobId,
    body: &[u8],
    how: Finish,
) -> Vec<Counted> {
    let waiting = q.deps.remove(&id).unwrap_or_default();
    BatchRef::of_body(body)
        .into_iter()
        .chain(waiting)
        .map(|r| (queue.to_string(), r, how, id, None))
        .collect()
}

impl MemBatch {
    /// When its retention starts: it completed, or it was cancelled (one
    /// never sealed never completes, nor may one whose jobs cannot finish).
    fn ends_at(&self) -> Option<u64> {
        let s = &self.status;
        s.completed_ms.or(s.cancelled_at_ms)
    }

    pub(super) fn callback(&self, kind: CallbackKind) -> Vec<Callback> {
        self.callbacks
            .iter()
            .filter(|c| c.kind == kind)
            .cloned()
            .collect()
    }
}

impl MemoryBackend {
    pub(super) fn open_batch(&self, spec: &BatchSpec) -> Result<()> {
        // a callback's queue and priority checked as an enqueue's
        for cb in &spec.callbacks {
            crate::contract::queues::validate::queue_name(&cb.queue)?;
            crate::contract::queues::validate::priority(cb.priority)?;
        }
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        // one past its retention is gone, as its keys are on Redis
        if st.live_batch(&spec.id, now).is_some() {
            return Err(Error::InvalidValue {
                what: "batch id",
                reason: format!("batch {} exists already", spec.id),
            });
        }
        // should its enqueuer never seal it, the workers' sweep cancels it
        st.batch_opens.insert((
            now.saturating_add(crate::contract::batches::OPEN_MS),
            spec.id,
        ));
        st.batches.insert(
            spec.id,
            MemBatch {
                status: BatchStatus {
                    id: spec.id.to_string(),
                    created_ms: now,
                    description: spec.description.clone(),
                    parent: spec
                        .callbacks
                        .iter()
                        .find(|c| c.kind == CallbackKind::Parent)
                        .and_then(|c| Some(format!("{} {}", c.queue, c.id?))),
                    ..BatchStatus::default()
                },
                callbacks: spec.callbacks.clone(),
                next: spec.members,
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
            if !b.status.sealed {
                b.status.total += total;
                b.status.sealed = true;
            }
            let cancelled = b.status.cancelled_at_ms.is_some();
            let (mut sent, more) = st.complete_batch(id, now_us);
            sent.extend(st.count_batches(more, now_us));
            (sent, cancelled)
        };
        let (sent, cancelled) = sent;
        for q in sent {
            self.notify(&q);
        }
        if cancelled {
            return Err(crate::contract::batches::cancelled_open(id));
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
        st.drop_expired_batches(now, usize::MAX);
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
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        st.live_batch(id, now)
            .map(|b| b.dead.iter().take(limit).cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::backend::memory::MemoryBackend;
    use crate::contract::backend::Backend;
    use crate::contract::batches::{BatchId, BatchSpec};

    fn spec(n: u8) -> BatchSpec {
        BatchSpec {
            id: format!("{:0>32}", n).parse().unwrap(),
            callbacks: Vec::new(),
            description: None,
            members: 0,
        }
    }

    /// Batches past their retention are dropped by the workers' sweep, a
    /// bounded number a sweep, as Redis expires them, where they stayed
    /// until someone listed batches or looked one up.
    #[tokio::test]
    async fn a_sweep_drops_batches_past_their_retention() {
        let m = MemoryBackend::new();
        for n in 0..3 {
            m.batch_open(&spec(n)).await.unwrap();
        }
        // two complete (sealed with no job), the third never sealed
        m.batch_seal(&spec(0).id, 0).await.unwrap();
        m.batch_seal(&spec(1).id, 0).await.unwrap();
        m.clock().advance(Duration::from_secs(6 * 24 * 3600));
        m.batch_sweep().await.unwrap();
        assert_eq!(m.lock().batches.len(), 3, "within their retention");
        m.clock().advance(Duration::from_secs(2 * 24 * 3600));
        m.batch_sweep().await.unwrap();
        let left: Vec<BatchId> = m.lock().batches.keys().copied().collect();
        assert_eq!(left, [spec(2).id], "the unsealed one has no retention yet");
    }

    /// A batch past its retention and not swept yet is gone for every read,
    /// as its keys are on Redis: its dead jobs read none, and its id may be
    /// opened again (its dead jobs were still read, and the open refused).
    #[tokio::test]
    async fn a_batch_past_its_retention_is_gone_before_a_sweep_drops_it() {
        let m = MemoryBackend::new();
        let id = spec(5).id;
        m.batch_open(&spec(5)).await.unwrap();
        let job: crate::JobId = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
        m.lock_mut()
            .batches
            .get_mut(&id)
            .unwrap()
            .dead
            .push(("q".into(), job));
        m.batch_seal(&id, 0).await.unwrap();
        assert_eq!(m.batch_dead(&id, 10).await.unwrap(), [("q".into(), job)]);
        m.clock().advance(Duration::from_secs(7 * 24 * 3600 + 1));
        assert_eq!(m.batch_dead(&id, 10).await.unwrap(), []);
        assert_eq!(m.batch_status(&id).await.unwrap(), None);
        m.batch_open(&spec(5)).await.unwrap();
        let s = m.batch_status(&id).await.unwrap().unwrap();
        assert!(!s.sealed && s.completed_ms.is_none(), "{s:?}");
        // the first open's sweep entry, due long since, is not the new one's:
        // the new batch is left open until its own hour is over
        m.batch_sweep().await.unwrap();
        let s = m.batch_status(&id).await.unwrap().unwrap();
        assert!(s.cancelled_at_ms.is_none(), "{s:?}");
        m.clock().advance(Duration::from_secs(3_601));
        m.batch_sweep().await.unwrap();
        let s = m.batch_status(&id).await.unwrap().unwrap();
        assert!(s.cancelled_at_ms.is_some(), "{s:?}");
    }
}
