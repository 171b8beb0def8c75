//! What one settle call carries: the finished deliveries held, up to a count
//! and a size, with what each sends (an ack, a retry, a dead letter, a
//! result, a throttle).

use super::{MAX_BATCH, MAX_BYTES, Outcome, Settler};
use crate::JobId;
use crate::contract::attempts::{AttemptOutcome, Ran};
use crate::contract::backend::Backend;
use crate::contract::leases::{DeadLetterEntry, Reschedule, Settle, Throttle, Token};
use crate::worker::leases::Table;

/// One settle call's worth of finished deliveries (see [`Settler::batch`]).
pub(super) struct Batch {
    /// The call.
    pub settle: Settle,
    /// What it sends: each delivery's job, token and run.
    pub sent: Vec<(JobId, Token, u64)>,
    /// Its queue throttles' numbers in the worker's hold of the queue, with
    /// their jobs: the hold of each ends once its settle landed (empty, not
    /// allocated, without throttles).
    pub holds: Vec<(JobId, u64)>,
    /// Deliveries whose token is uncertain stayed for later.
    pub deferred: bool,
}

impl<B: Backend> Settler<B> {
    /// Up to `MAX_BATCH` finished deliveries as one settle call, and what was
    /// sent (taken out of the table's `done` set until the call's result is known).
    /// Deliveries whose token is uncertain stay for later.
    pub(super) fn batch(&self) -> Batch {
        let mut t = self.leases.lock();
        let Table { held, done, .. } = &mut *t;
        // the results a call carries are bounded too (a result may be
        // MAX_RESULT bytes): at least one entry, then no more than MAX_BYTES
        // (one look-up of each in `held` here; a busy worker settles dozens
        // of jobs a call)
        let mut bytes = 0usize;
        let mut take: Vec<JobId> = Vec::with_capacity(done.len().min(MAX_BATCH));
        for id in done.iter() {
            let h = held.get(id);
            if h.is_some_and(|h| !h.renewable()) {
                continue;
            }
            if take.len() == MAX_BATCH {
                break;
            }
            let first = bytes == 0;
            bytes += h.map_or(0, |h| match &h.outcome {
                Some(Outcome::Ack { result: Some(r) }) => r.len().max(1),
                _ => 1,
            });
            if !first && bytes > MAX_BYTES {
                break;
            }
            take.push(*id);
        }
        let deferred = take.len() < MAX_BATCH && take.len() < done.len();
        // all of them taken (as most of the time): cleared at once, not one
        // by one below
        let all = take.len() == done.len();
        if all {
            done.clear();
        }
        let mut s = Settle {
            retention: self.keeping.retention,
            history: self.keeping.history,
            by: Some(self.keeping.by.clone()),
            throttle_limit: self.keeping.throttle_limit,
            ..Settle::default()
        };
        // most batches are acks, each with its run: room made once
        s.acks.reserve(take.len());
        s.ran.reserve(take.len());
        let mut sent = Vec::with_capacity(take.len());
        let mut holds = Vec::new();
        // acks' bodies (the runs kept those of up to MAX_SENT_BODY bytes) go
        // with them while the history keeps bodies; the backend reads them
        // again otherwise
        let bodies = self
            .keeping
            .bodies
            .load(std::sync::atomic::Ordering::Relaxed);
        for id in take {
            if !all {
                done.remove(&id);
            }
            let Some(h) = held.get_mut(&id) else { continue };
            let Some(outcome) = &h.outcome else { continue };
            let token = h.token;
            sent.push((id, token, h.run));
            // a release carries its run only when its handler ran (recorded
            // as released); one that never started is no attempt
            let unstarted = matches!(outcome, Outcome::Release { .. })
                && !matches!(h.ran, Some((_, _, AttemptOutcome::Released)));
            if let Some((started_ms, ended_ms, outcome)) = h.ran.filter(|_| !unstarted) {
                s.ran.push(Ran {
                    id,
                    started_ms,
                    ended_ms,
                    outcome,
                    job_type: h.job.map(std::borrow::Cow::Borrowed),
                });
            }
            if let Some(r) = h.batch
                && matches!(outcome, Outcome::Ack { .. } | Outcome::Dead { .. })
            {
                s.batched.push((id, r));
            }
            match outcome {
                Outcome::Ack { result } => {
                    s.acks.push((id, token));
                    // taken: a call that fails is sent again without it
                    if let Some(b) = h.body.take().filter(|_| bodies) {
                        s.ack_bodies.push((id, b));
                    }
                    if let Some(r) = result {
                        s.results.push((id, r.clone()));
                    }
                }
                Outcome::Retry { delay, error } => s.reschedules.push(Reschedule {
                    id,
                    token,
                    delay: *delay,
                    deliveries: token.attempt(),
                    release: false,
                    error: Some(error.clone()),
                }),
                Outcome::Release { delay } => s.reschedules.push(Reschedule {
                    id,
                    token,
                    delay: *delay,
                    // every delivery merged into the run goes back with it
                    deliveries: token.attempt().saturating_sub(h.deliveries),
                    release: true,
                    error: None,
                }),
                Outcome::Throttle {
                    delay,
                    error,
                    key,
                    hold,
                } => {
                    holds.extend(hold.map(|n| (id, n)));
                    s.throttles.push(Throttle {
                        id,
                        token,
                        // every delivery merged into the run goes back with
                        // it, as for a release
                        deliveries: token.attempt().saturating_sub(h.deliveries),
                        delay: *delay,
                        error: error.clone(),
                        key: *key,
                    });
                }
                Outcome::Dead { error } => s.dead.push(DeadLetterEntry {
                    id,
                    token,
                    error: error.clone(),
                }),
            }
        }
        Batch {
            settle: s,
            sent,
            holds,
            deferred,
        }
    }
}
