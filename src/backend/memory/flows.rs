//! Flows in memory: a parent that waits for its children's batch before it is
//! sent, and a flow that waits for a job already sent (counted at once when
//! that job finished already, as a settle would count it).

use std::collections::HashSet;

use super::MemoryBackend;
use crate::contract::batches::{BatchId, BatchRef, Finish};
use crate::{Error, JobId, Result};

impl MemoryBackend {
    pub(super) fn flow_wait(
        &self,
        queue: &str,
        id: JobId,
        batch: BatchId,
        body: &[u8],
    ) -> Result<()> {
        let mut st = self.lock_mut();
        let q = st
            .queues
            .get_mut(queue)
            .ok_or_else(|| Error::QueueNotFound { name: queue.into() })?;
        q.parents.insert(id, (batch, body.to_vec()));
        Ok(())
    }

    pub(super) fn flow_after(&self, queue: &str, id: JobId, r: BatchRef) -> Result<()> {
        crate::contract::queues::validate::queue_name(queue)?;
        let now_us = self.clock.now_us();
        let now = now_us / 1000;
        let sent = {
            let mut st = self.lock_mut();
            let q = st
                .queues
                .get_mut(queue)
                .ok_or_else(|| Error::QueueNotFound { name: queue.into() })?;
            if q.msgs.contains_key(&id) || q.parents.contains_key(&id) {
                let full = q.deps.get(&id).map(|w| w.len() as u64)
                    >= Some(crate::contract::batches::MAX_WAITERS);
                if full {
                    // flows cancelled, or gone, wait no more: their places go
                    let ids: Vec<BatchId> = q.deps[&id].iter().map(|w| w.batch).collect();
                    let stale: HashSet<BatchId> = ids
                        .into_iter()
                        .filter(|b| {
                            st.live_batch(b, now)
                                .is_none_or(|b| b.status.cancelled_at_ms.is_some())
                        })
                        .collect();
                    let q = st.queues.get_mut(queue).expect("held under the lock");
                    q.deps
                        .entry(id)
                        .or_default()
                        .retain(|w| !stale.contains(&w.batch));
                }
                let q = st.queues.get_mut(queue).expect("held under the lock");
                let waiting = q.deps.entry(id).or_default();
                if waiting.len() as u64 >= crate::contract::batches::MAX_WAITERS {
                    return Err(crate::contract::batches::too_many_waiters(queue, &id));
                }
                waiting.push(r);
                return Ok(());
            }
            // finished already: counted at once, as a settle would
            let (how, result) = if q.dead_msgs.contains_key(&id) {
                (Finish::Dead, None)
            } else {
                let h = crate::contract::settings::QueueSettings::decode(&q.settings, &[])
                    .history
                    .unwrap_or_default();
                let done = q
                    .history
                    .get(&id, now, h)
                    .and_then(|j| Some((j.finished?.how, j.result)))
                    .ok_or_else(|| crate::contract::batches::no_job(queue, &id))?;
                match done.0 {
                    crate::contract::history::Finish::Succeeded => (Finish::Succeeded, done.1),
                    crate::contract::history::Finish::Dead => (Finish::Dead, None),
                    _ => (Finish::Cancelled, None),
                }
            };
            st.count_batches(vec![(queue.to_string(), r, how, id, result)], now_us)
        };
        for q in sent {
            self.notify(&q);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::memory::MemoryBackend;
    use crate::contract::backend::Backend;
    use crate::contract::batches::{BatchId, BatchRef, BatchSpec, Callback, CallbackKind, Finish};
    use crate::contract::queues::{QueueOptions, Queues};
    use crate::inspect::{Cancelled, Inspect};

    /// A parent a caller cancelled while it waited is kept among its
    /// queue's cancelled parents only until its flow fired the callback
    /// that parent waited on (as Redis ages its marks then): they grew by
    /// one with every parent so cancelled, for ever.
    #[tokio::test]
    async fn a_cancelled_parent_is_forgotten_once_its_flow_completes() {
        let m = MemoryBackend::new();
        m.create_queue("p", QueueOptions::default()).await.unwrap();
        let batch: BatchId = format!("{:0>32}", 1).parse().unwrap();
        let parent: crate::JobId = format!("{:0>32}", 2).parse().unwrap();
        let child: crate::JobId = format!("{:0>32}", 3).parse().unwrap();
        let callback = |kind| Callback {
            kind,
            queue: "p".into(),
            body: br#"{"type":"x","args":null}"#.to_vec(),
            id: Some(parent),
            cancel: false,
            priority: 0,
        };
        m.batch_open(&BatchSpec {
            id: batch,
            callbacks: vec![
                callback(CallbackKind::Parent),
                callback(CallbackKind::Failed),
            ],
            description: None,
            members: 1,
        })
        .await
        .unwrap();
        m.flow_wait("p", parent, batch, b"{}").unwrap();
        m.batch_seal(&batch, 1).await.unwrap();
        let by = "test";
        assert_eq!(
            m.cancel_by("p", &parent, by).await.unwrap(),
            Cancelled::Removed
        );
        assert!(m.lock().queues["p"].cancelled_parents.contains(&parent));
        // its one child succeeds: the flow completes, its parent not sent
        let r = BatchRef { batch, index: 0 };
        let now = m.clock().now_us();
        let finish = ("c".to_string(), r, Finish::Succeeded, child, None);
        m.lock_mut().count_batches(vec![finish], now);
        let st = m.lock();
        assert!(st.queues["p"].msgs.is_empty(), "never sent");
        assert!(
            st.queues["p"].cancelled_parents.is_empty(),
            "forgotten once its flow fired"
        );
    }
}
