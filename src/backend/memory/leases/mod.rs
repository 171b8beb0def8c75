//! [`Backend`] in memory: sends, fetches and hand-offs, lease renewals, settles,
//! counters, wake-ups and heartbeats, each under one lock; fetches and
//! renewals in `fetch`, settles in `settle`.

mod fetch;
mod settle;

use super::MemoryBackend;
use crate::contract::backend::Backend;
use crate::contract::leases::{Fetched, Settle, Settled, Token};
use crate::contract::queues::{QueueOptions, SendMessage, Sent};
use crate::contract::settings::QueueSettings;
use crate::contract::stats::{DeadLetter, MinuteStats, QueueStats};
use crate::{JobId, Result};
use std::time::Duration;
use tokio::sync::broadcast;

impl Backend for MemoryBackend {
    async fn send(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        create: &QueueOptions,
    ) -> Result<Vec<Sent>> {
        crate::contract::backend::send_creating(self, queue, msgs, create).await
    }

    async fn now_ms(&self) -> Result<u64> {
        Ok(self.clock.now_ms())
    }

    async fn batch_open(&self, spec: &crate::contract::batches::BatchSpec) -> Result<()> {
        self.open_batch(spec)
    }

    async fn batch_seal(&self, id: &crate::contract::batches::BatchId, total: u64) -> Result<()> {
        self.seal_batch(id, total)
    }

    async fn batch_status(
        &self,
        id: &crate::contract::batches::BatchId,
    ) -> Result<Option<crate::contract::batches::BatchStatus>> {
        Ok(self.status_of_batch(id))
    }

    /// Memory counts a settle's batches in the settle itself.
    async fn batch_settled(&self, _queue: &str, _members: &[String]) -> Result<()> {
        Ok(())
    }

    async fn batch_recover(&self, _queue: &str) -> Result<()> {
        Ok(())
    }

    async fn batch_mark(&self, _queue: &str, _until: Duration) -> Result<()> {
        Ok(())
    }

    async fn batches(
        &self,
        before_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<crate::contract::batches::BatchStatus>> {
        self.list_batches(before_ms, limit)
    }

    async fn batch_dead(
        &self,
        id: &crate::contract::batches::BatchId,
        limit: usize,
    ) -> Result<Vec<(String, JobId)>> {
        let limit = crate::contract::batches::check_limit(limit)?;
        Ok(self.dead_of_batch(id, limit))
    }

    async fn flow_wait(
        &self,
        queue: &str,
        id: &JobId,
        batch: &crate::contract::batches::BatchId,
        body: &[u8],
    ) -> Result<()> {
        MemoryBackend::flow_wait(self, queue, *id, *batch, body)
    }

    async fn flow_after(
        &self,
        queue: &str,
        id: &JobId,
        r: &crate::contract::batches::BatchRef,
    ) -> Result<()> {
        MemoryBackend::flow_after(self, queue, *id, *r)
    }

    async fn batch_results(
        &self,
        id: &crate::contract::batches::BatchId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let limit = crate::contract::batches::check_limit(limit)?;
        let now = self.clock.now_ms();
        self.lock_mut().results_of_batch(id, from, limit, now)
    }

    async fn batch_sweep(&self) -> Result<()> {
        // batches past their retention, a bounded number a sweep
        let now = self.clock.now_ms();
        let unsealed = {
            let mut st = self.lock_mut();
            st.drop_expired_batches(now, 1000);
            st.unsealed_batches(now, 1000)
        };
        // its enqueuer stopped before it sealed it: cancelled, as an enqueue
        // that fails part way cancels its own (as on Redis)
        for id in unsealed {
            tracing::warn!(batch = %id, "a batch its enqueuer never sealed is cancelled");
            self.cancel_batch(&id);
        }
        Ok(())
    }

    async fn batch_add(
        &self,
        id: &crate::contract::batches::BatchId,
        jobs: &[(String, crate::contract::queues::SendMessage)],
    ) -> Result<()> {
        self.add_to_batch(id, jobs)
    }

    async fn batch_cancel(&self, id: &crate::contract::batches::BatchId) -> Result<bool> {
        Ok(self.cancel_batch(id))
    }

    async fn cancelled_batches(
        &self,
        after: u64,
    ) -> Result<Vec<(crate::contract::batches::BatchId, u64)>> {
        Ok(self.cancelled_batches(after))
    }

    async fn unique_started(&self, queue: &str, id: &JobId) -> Result<()> {
        if let Some(q) = self.lock().queues.get_mut(queue) {
            q.release_unique(id);
        }
        Ok(())
    }

    async fn cancel_job(&self, queue: &str, id: &JobId, by: &str) -> Result<bool> {
        let c = crate::contract::inspect::Inspect::cancel_by(self, queue, id, by).await?;
        Ok(c != crate::contract::inspect::Cancelled::NotFound)
    }

    async fn watch_finish(
        &self,
        queue: &str,
        _id: &JobId,
        _within: Duration,
    ) -> Result<crate::contract::backend::FinishWatch> {
        use futures::StreamExt;
        crate::contract::queues::validate::queue_name(queue)?;
        if !self.lock().queues.contains_key(queue) {
            return Err(crate::Error::QueueNotFound { name: queue.into() });
        }
        // every change of the state may be the job's finish: the caller
        // reads it again (in memory, a lookup)
        let rx = self.changes();
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        })
        .boxed())
    }

    async fn tick(
        &self,
        queue: &str,
        tick: &crate::contract::admin::Tick<'_>,
        msg: &SendMessage,
        create: &QueueOptions,
    ) -> Result<crate::contract::admin::Ticked> {
        crate::contract::backend::creating(self, queue, create, || async {
            self.tick_once(queue, tick, msg)
        })
        .await
    }

    async fn beat(
        &self,
        id: &str,
        beat: &[u8],
        ttl: Duration,
    ) -> Result<crate::contract::admin::BeatReply> {
        Ok(self.beat_now(id, beat, ttl))
    }

    async fn init_settings(
        &self,
        queue: &str,
        s: &QueueSettings,
        by: &str,
    ) -> Result<QueueSettings> {
        self.store_settings(queue, s, false, by)
            .map(|(stored, _)| stored)
    }

    async fn touch(&self, id: &str, ttl: Duration, _since: Duration) -> Result<bool> {
        Ok(self.touch_now(id, ttl))
    }

    async fn serve(&self, digest: &str, serves: &[u8]) -> Result<()> {
        let mut st = self.lock_mut();
        st.serves.insert(digest.to_string(), serves.to_vec());
        Ok(())
    }

    async fn trim_history(&self, queue: &str) -> Result<()> {
        crate::contract::queues::validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let q = st
            .queues
            .get_mut(queue)
            .ok_or_else(|| super::not_found(queue))?;
        let h = QueueSettings::decode(&q.settings, &[])
            .history
            .unwrap_or_default();
        q.history.trim(now, 1000, h);
        Ok(())
    }

    async fn fetch(&self, queue: &str, max: usize, lease: Duration) -> Result<Fetched> {
        self.fetch_now(queue, max, lease)
    }

    async fn extend(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> Result<Vec<Option<Token>>> {
        // a lease given twice is extended once, both answered alike
        if let Some((once, place)) = crate::contract::leases::once(leases) {
            let got = self.extend_each(queue, &once, lease);
            return Ok(place.iter().map(|&p| got[p]).collect());
        }
        Ok(self.extend_each(queue, leases, lease))
    }

    async fn settle(&self, queue: &str, batch: &Settle) -> Result<Settled> {
        self.settle_now(queue, batch)
    }

    async fn sizes(&self, queue: &str) -> Result<crate::contract::inspect::StateCounts> {
        crate::contract::inspect::Inspect::counts(self, queue).await
    }

    async fn stats(&self, queue: &str) -> Result<QueueStats> {
        crate::contract::queues::validate::queue_name(queue)?;
        Ok(self
            .lock()
            .queues
            .get(queue)
            .map(|q| q.stats)
            .unwrap_or_default())
    }

    async fn run_times(&self, queue: &str) -> Result<Vec<crate::contract::runtimes::RunTimes>> {
        crate::contract::queues::validate::queue_name(queue)?;
        let st = self.lock();
        let Some(q) = st.queues.get(queue) else {
            return Ok(Vec::new());
        };
        Ok(q.run_times
            .iter()
            .map(|(t, counts)| crate::contract::runtimes::RunTimes {
                job_type: t.clone(),
                counts: *counts,
            })
            .collect())
    }

    async fn minutes(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        crate::contract::queues::validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let ring = st.queues.get(queue).map(|q| q.minutes);
        Ok(crate::contract::stats::last_hour(
            now,
            ring.into_iter()
                .flatten()
                .map(crate::contract::stats::ring_minute),
        ))
    }

    async fn hours(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        crate::contract::queues::validate::queue_name(queue)?;
        let now = self.clock.now_ms();
        let st = self.lock();
        let ring = st.queues.get(queue).map(|q| q.hours.clone());
        Ok(crate::contract::stats::last_week(
            now,
            ring.into_iter()
                .flat_map(|r| r.into_iter())
                .map(crate::contract::stats::ring_hour),
        ))
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        crate::contract::queues::validate::queue_name(queue)?;
        let st = self.lock();
        Ok(st.queues.get(queue).map_or_else(Vec::new, |q| {
            q.dead
                .iter()
                .take(limit.min(crate::contract::inspect::MAX_PAGE))
                .map(|(_, id)| q.dead_msgs[id].0.clone())
                .collect()
        }))
    }

    async fn scores(&self, queue: &str, held: &[(JobId, Token)]) -> Result<Vec<Option<Token>>> {
        let st = self.lock();
        let q = st.queues.get(queue);
        Ok(held
            .iter()
            .map(|(id, t)| {
                // looked up at the token's priority, as Redis reads that level's set
                let m = q?.msgs.get(id).filter(|m| m.priority == t.priority())?;
                Some(Token::from_raw(m.score, m.priority))
            })
            .collect())
    }

    async fn warnings(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    async fn listen(
        &self,
        queues: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> Result<()> {
        let mut sent = self.sent.subscribe();
        let mut advanced = self.clock.subscribe();
        subscribed();
        // a send before the subscription took effect was heard by no one (a
        // worker starting as it came, past its first fetch)
        queues.iter().for_each(|q| wake(q));
        loop {
            tokio::select! {
                r = sent.recv() => match r {
                    Ok(q) => {
                        // a queue's send, or a worker's control (each checks
                        // its own)
                        if q.starts_with('@') || queues.iter().any(|n| **n == *q) {
                            wake(&q);
                        }
                    }
                    // news was lost: every queue looks, and the worker reads
                    // its control and the settings again
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        queues.iter().for_each(|q| wake(q));
                        subscribed();
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                },
                r = advanced.changed() => {
                    if r.is_err() {
                        return Ok(());
                    }
                    queues.iter().for_each(|q| wake(q));
                }
            }
        }
    }
}
