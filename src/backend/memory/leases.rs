//! [`Backend`] in memory: sends, fetches and hand-offs, lease renewals, settles,
//! counters, wake-ups and heartbeats, each under one lock.

use super::MemoryBackend;
use crate::contract::attempts::{self, Attempt, AttemptOutcome, bound_error};
use crate::contract::backend::Backend;
use crate::contract::history::{Entry, Finish, Finished, body_type};
use crate::contract::keyed::Keyed;
use crate::contract::leases::{
    Delivery, Fetched, MAX_COUNT, Settle, Settled, Token, is_lease, score_count,
};
use crate::contract::queues::{QueueOptions, SendMessage, Sent};
use crate::contract::settings::QueueSettings;
use crate::contract::stats::{DeadLetter, MinuteStats, QueueStats};
use crate::{JobId, Result};
use std::time::Duration;
use tokio::sync::broadcast;

/// A job entered in the history: id, how, deliveries, body, attempt records,
/// concurrency key, result.
type Finishing = (
    JobId,
    Finish,
    (u32, i8),
    Vec<u8>,
    String,
    Option<Keyed>,
    Option<Vec<u8>>,
);

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
        let now = self.clock.now_ms();
        let mut st = self.lock_mut();
        let Some(q) = st.queues.get_mut(queue) else {
            // its queue deleted: every job gone, as settle.lua says
            let gone = batch
                .acks
                .iter()
                .map(|(id, _)| *id)
                .chain(batch.reschedules.iter().map(|r| r.id))
                .chain(batch.dead.iter().map(|d| d.id))
                .chain(batch.throttles.iter().map(|t| t.id))
                .collect();
            return Ok(Settled {
                gone,
                ..Settled::default()
            });
        };
        q.now = q.now.max(now);
        // every fence is checked before anything changes, as the script does
        let gone: Vec<JobId> = batch
            .acks
            .iter()
            .map(|(id, _)| id)
            .chain(batch.reschedules.iter().map(|r| &r.id))
            .chain(batch.dead.iter().map(|d| &d.id))
            .chain(batch.throttles.iter().map(|t| &t.id))
            .filter(|id| !q.msgs.contains_key(id))
            .copied()
            .collect();
        // an id named twice passes once, its first entry (acks, reschedules,
        // throttles, dead letters, in that order, as the script reads them):
        // once settled, a job's token no longer matches
        let mut seen = std::collections::HashSet::new();
        let mut holds = |id: &JobId, t: Token| q.holds(id, t) && seen.insert(*id);
        let acks: Vec<_> = batch.acks.iter().filter(|(id, t)| holds(id, *t)).collect();
        let res: Vec<_> = batch
            .reschedules
            .iter()
            .filter(|r| holds(&r.id, r.token))
            .collect();
        let throttles: Vec<_> = batch
            .throttles
            .iter()
            .filter(|t| holds(&t.id, t.token))
            .collect();
        let dead: Vec<_> = batch
            .dead
            .iter()
            .filter(|d| holds(&d.id, d.token))
            .collect();
        let runs = batch.runs();
        let record = |id: &JobId, token: Token, error: Option<&str>| {
            Attempt::settled(
                token.attempt(),
                runs.get(id).copied(),
                error,
                batch.by.as_ref(),
            )
            .line()
        };
        let stored = QueueSettings::decode(&q.settings, &[]);
        let history = stored.history.unwrap_or(batch.history);
        // entered in the history: id, how, (deliveries, priority), body,
        // attempt records, concurrency key, result
        let mut finished: Vec<Finishing> = Vec::new();
        let results: std::collections::HashMap<&JobId, &[u8]> =
            batch.results.iter().map(|(id, r)| (id, &r[..])).collect();
        for (id, token) in &acks {
            let keyed = q.keyed_of(id);
            if let Some(m) = q.remove(id)
                && history.enabled
            {
                let log = attempts::append(m.log.as_deref(), &record(id, *token, None));
                let result = results.get(id).map(|r| r.to_vec());
                finished.push((
                    *id,
                    Finish::Succeeded,
                    (token.attempt(), m.priority),
                    m.body,
                    log,
                    keyed,
                    result,
                ));
            }
        }
        let mut retried = 0;
        for r in &res {
            let count = u64::from(r.deliveries.min(MAX_COUNT));
            let due = now.saturating_add(crate::contract::backend::clamped_ms(r.delay));
            q.rescore(r.id, due.saturating_mul(1000).saturating_add(count));
            q.leased.remove(&r.id);
            if let Some(m) = q.msgs.get_mut(&r.id) {
                m.lease = false;
                if r.release {
                    m.released_lease = Some(r.token.lease_until_ms());
                }
                // an empty error keeps the last one, as complete.lua does
                if let Some(e) = r.error.as_ref().filter(|e| !e.is_empty()) {
                    m.error = Some(bound_error(e));
                }
                // a release is recorded when its handler ran (its run is
                // known), else it was no attempt (see complete.lua)
                let rec = if r.release {
                    runs.get(&r.id).map(|ran| {
                        Attempt::released(r.token.attempt(), Some(ran), batch.by.as_ref()).line()
                    })
                } else {
                    Some(record(
                        &r.id,
                        r.token,
                        Some(r.error.as_deref().unwrap_or("")),
                    ))
                };
                if let Some(rec) = rec {
                    m.log = Some(attempts::append(m.log.as_deref(), &rec));
                }
            }
            retried += u64::from(!r.release);
        }
        // a throttle goes back as a release, with its record, unless its
        // job's last records are that many throttles in a row: then it counts
        // (see complete.lua); the queue is held until it ends
        let allowed = batch.throttles_allowed() as usize;
        // the settle's throttled jobs keep their keys' places
        let spare: std::collections::HashSet<JobId> = throttles.iter().map(|t| t.id).collect();
        for t in &throttles {
            let due = now.saturating_add(crate::contract::backend::clamped_ms(t.delay));
            let Some(m) = q.msgs.get_mut(&t.id) else {
                continue;
            };
            let error = bound_error(&t.error);
            let in_a_row = m
                .log
                .as_deref()
                .map(|l| {
                    attempts::parse(l.as_bytes())
                        .iter()
                        .rev()
                        .take_while(|a| a.outcome == AttemptOutcome::Throttled)
                        .count()
                })
                .unwrap_or(0);
            let counted = in_a_row >= allowed;
            let rec = Attempt::throttled(
                t.token.attempt(),
                runs.get(&t.id).copied(),
                &error,
                batch.by.as_ref(),
            )
            .line();
            m.log = Some(attempts::append(m.log.as_deref(), &rec));
            m.error = Some(error);
            m.lease = false;
            let attempt = t.token.attempt().min(MAX_COUNT);
            let count = if counted {
                attempt
            } else {
                m.released_lease = Some(t.token.lease_until_ms());
                t.deliveries.min(MAX_COUNT)
            };
            q.rescore(
                t.id,
                due.saturating_mul(1000).saturating_add(u64::from(count)),
            );
            q.leased.remove(&t.id);
            // a key's throttle holds the job's key alone (a job without one:
            // its queue)
            if !(t.key && q.key_throttle(t.id, due, &spare)) {
                q.throttled_until = q.throttled_until.max(due);
            }
            // (a throttle counted as an attempt failed nothing: not retried)
        }
        // a keyed job back for a retry gives its place to its key's first
        // waiting job when that one is due before it (see complete.lua)
        for id in res
            .iter()
            .map(|r| r.id)
            .chain(throttles.iter().filter(|t| !t.key).map(|t| t.id))
        {
            q.key_yield(id);
        }
        for d in &dead {
            let error = bound_error(&d.error);
            let rec = record(&d.id, d.token, Some(&error));
            if history.enabled
                && let Some(m) = q.msgs.get(&d.id)
            {
                let log = attempts::append(m.log.as_deref(), &rec);
                let n = d.token.attempt();
                let keyed = q.keyed_of(&d.id);
                let body = m.body.clone();
                finished.push((d.id, Finish::Dead, (n, m.priority), body, log, keyed, None));
            }
            q.kill(&d.id, error, d.token.attempt(), now, &rec);
        }
        for (id, how, (deliveries, priority), body, log, keyed, result) in &finished {
            let entry = Entry {
                finished: Finished {
                    how: *how,
                    at_ms: now,
                    by: None,
                    job_type: body_type(body),
                },
                deliveries: *deliveries,
                runs: attempts::parse(log.as_bytes()),
                key: keyed.clone(),
                result: result.clone(),
                priority: *priority,
            };
            q.history
                .record(*id, now, &entry, Some(body.clone()), history);
        }
        if !finished.is_empty() {
            q.history.trim(now, finished.len() + 1000, history);
        }
        if !dead.is_empty() {
            // the retention stored with the queue is in force over the worker's
            let retention = stored.dead_letters.unwrap_or(batch.retention);
            q.trim_dead(now, retention, dead.len() + 1000);
        }
        // the run times of the entries that passed the fence
        let counted = acks
            .iter()
            .map(|(id, _)| id)
            .chain(res.iter().filter(|r| !r.release).map(|r| &r.id))
            .chain(throttles.iter().map(|t| &t.id))
            .chain(dead.iter().map(|d| &d.id));
        for id in counted {
            if let Some(r) = runs.get(id)
                && let Some(t) = r.job_type.as_deref()
            {
                let b =
                    crate::contract::runtimes::bucket_of(r.ended_ms.saturating_sub(r.started_ms));
                let counts = q.run_times.entry(t.to_string()).or_default();
                counts[b] += 1;
            }
        }
        // a fetch held back by the global concurrency waits for a place
        let freed = !(acks.is_empty() && res.is_empty() && dead.is_empty() && throttles.is_empty());
        let wake = (freed && std::mem::take(&mut q.held)) | std::mem::take(&mut q.promoted);
        let s = &mut q.stats;
        s.processed += acks.len() as u64;
        s.retried += retried;
        s.dead += dead.len() as u64;
        s.failed += retried + dead.len() as u64;
        q.count_minute(now, acks.len() as u64, retried + dead.len() as u64);
        // the batches of the jobs that finished count them, and enqueue the
        // callbacks that fall due, in this same step
        // the jobs flows wait for (registered by flow_after): their finishes
        let mut waited = Vec::new();
        if !q.deps.is_empty() {
            use crate::contract::batches::Finish as F;
            let results: std::collections::HashMap<_, _> =
                batch.results.iter().map(|(id, r)| (id, r)).collect();
            let finished = acks
                .iter()
                .map(|(id, _)| (*id, F::Succeeded))
                .chain(dead.iter().map(|d| (d.id, F::Dead)));
            for (id, how) in finished {
                for r in q.deps.remove(&id).unwrap_or_default() {
                    let result = (how == F::Succeeded)
                        .then(|| results.get(&id).map(|r| r.to_vec()))
                        .flatten();
                    waited.push((queue.to_string(), r, how, id, result));
                }
            }
        }
        let mut finishes: Vec<_> = if batch.batched.is_empty() {
            Vec::new()
        } else {
            use crate::contract::batches::Finish as F;
            let refs: std::collections::HashMap<_, _> = batch.batched.iter().copied().collect();
            let results: std::collections::HashMap<_, _> =
                batch.results.iter().map(|(id, r)| (id, r)).collect();
            let of = |id: &JobId, how| {
                let result = (how == F::Succeeded)
                    .then(|| results.get(id).map(|r| r.to_vec()))
                    .flatten();
                refs.get(id)
                    .map(|r| (queue.to_string(), *r, how, *id, result))
            };
            acks.iter()
                .filter_map(|(id, _)| of(id, F::Succeeded))
                .chain(dead.iter().filter_map(|d| of(&d.id, F::Dead)))
                .collect()
        };
        finishes.extend(waited);
        let called = if finishes.is_empty() {
            Vec::new()
        } else {
            st.count_batches(finishes, self.clock.now_us())
        };
        drop(st);
        if wake {
            self.notify(queue);
        }
        for q in called {
            self.notify(&q);
        }
        Ok(Settled {
            acked: acks.len() as u64,
            rescheduled: (res.len() + throttles.len()) as u64,
            dead: dead.len() as u64,
            gone,
            batched: Vec::new(),
        })
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

impl MemoryBackend {
    /// [`Backend::extend`] of leases given once each.
    fn extend_each(
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
