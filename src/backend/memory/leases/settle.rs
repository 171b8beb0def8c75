//! [`Backend::settle`] in memory: a settle's acks, retries, throttles and
//! dead letters, their history, counters and batches, under one lock.
//!
//! [`Backend::settle`]: crate::contract::backend::Backend::settle

use crate::backend::memory::MemoryBackend;
use crate::contract::attempts::{self, Attempt, AttemptOutcome, bound_error};
use crate::contract::history::{Entry, Finish, Finished, body_type};
use crate::contract::keyed::Keyed;
use crate::contract::leases::{MAX_COUNT, Settle, Settled, Token};
use crate::contract::settings::QueueSettings;
use crate::{JobId, Result};

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

impl MemoryBackend {
    /// [`Backend::settle`]: a settle's entries that hold their leases, applied.
    ///
    /// [`Backend::settle`]: crate::contract::backend::Backend::settle
    pub(super) fn settle_now(&self, queue: &str, batch: &Settle) -> Result<Settled> {
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
}
