//! The settler's renewals: every held lease whose token is known renewed in one
//! call, a renewal whose reply was lost resolved by reading the scores, and
//! runs given up once their lease ran out here without a renewal.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{CLASSIFY_WAIT, Outcome, Settler};
use crate::JobId;
use crate::contract::backend::Backend;
use crate::contract::leases::Token;
use crate::job::cancel::RunCancel;
use crate::worker::hooks::CancelReason;
use crate::worker::leases::{Leases, Table, Uncertain};

/// A running job whose lease a renewal found gone: its id, the token held,
/// its run's cancel, and what tells a run that ends meanwhile why.
type LostRun = (
    JobId,
    Token,
    Arc<RunCancel>,
    tokio::sync::watch::Sender<Option<CancelReason>>,
);

/// What renewals need of a settler, apart from it, so that they run while
/// its settle call is under way (see [`Settler::flush_renewing`]).
#[derive(Clone)]
pub(super) struct Renewer<B> {
    pub backend: B,
    pub queue: Arc<str>,
    pub lease: Duration,
    pub leases: Arc<Leases>,
}

impl<B: Backend> Settler<B> {
    /// What its renewals need.
    pub(super) fn renewer(&self) -> Renewer<B> {
        Renewer {
            backend: self.backend.clone(),
            queue: self.queue.clone(),
            lease: self.lease,
            leases: self.leases.clone(),
        }
    }
}

impl<B: Backend> Renewer<B> {
    /// Reads the current score of jobs whose renewal reply was lost and adopts
    /// the token that renewal wrote.
    ///
    /// The renewal may have run any time before the read: a Redis that stalled
    /// past the response timeout runs it when it resumes. It set a lease
    /// ending a lease after it ran, so by the read's reply: the held token's
    /// end plus the time since that token's lease was measured from (the
    /// backend's clock runs as the worker's; a second of slack). A later
    /// score of the same delivery is adopted up to that bound. A read that
    /// finds the held lease unchanged leaves the renewal late (it may run
    /// after the read: `Held::late`). False when the read failed: those
    /// leases stay unknown.
    pub(super) async fn resolve_uncertain(&self) -> bool {
        let asked: Vec<(JobId, Token, Uncertain)> = self
            .leases
            .lock()
            .held
            .iter()
            .filter_map(|(id, h)| h.uncertain.map(|u| (*id, h.token, u)))
            .collect();
        if asked.is_empty() {
            return true;
        }
        let held: Vec<(JobId, Token)> = asked.iter().map(|(id, t, _)| (*id, *t)).collect();
        let Ok(scores) = self.backend.scores(&self.queue, &held).await else {
            return false; // still unreachable: try again before the next call
        };
        let read = Instant::now();
        let mut t = self.leases.lock();
        for ((id, old, u), now) in asked.iter().zip(scores) {
            let Some(h) = t.held.get_mut(id).filter(|h| h.token == *old) else {
                continue;
            };
            h.uncertain = None;
            // the old lease still there: the renewal may run yet, after
            // this read (see `Held::late`)
            h.late = (now == Some(*old)).then_some(*u);
            if let Some(now) = now.filter(|now| adoptable(*old, u, read, *now)) {
                tracing::debug!(queue = %self.queue, job.id = %id, "a renewal whose reply was lost had landed; adopted its lease");
                h.token = now;
                // it ran after it was sent
                h.deadline = h.deadline.max(u.sent + self.lease);
            }
        }
        true
    }

    /// After a settle that the fence refused in part: of `sent` (each
    /// delivery's job, the token settled and its run), the finished ones whose
    /// renewal's reply was lost and had not landed when their score was read
    /// (`Held::late`) may have been refused for the lease that renewal wrote
    /// since. Reads their scores once and adopts such a lease, within the
    /// bound [`resolve_uncertain`](Self::resolve_uncertain) allows; the
    /// caller settles those again. Only acks, retries and dead letters: one
    /// that landed leaves no lease of the same delivery, where a release or a
    /// throttle that landed gives its delivery back, and another worker's
    /// fetch of it may lease it again at the same count (it is not adopted:
    /// one refused runs again after its lease, as it would have soon). `gone`
    /// are those the reply said gone. Returns the jobs it adopted (no call
    /// when none may have been).
    pub(super) async fn adopt_late(
        &self,
        sent: &[(JobId, Token, u64)],
        gone: &[JobId],
    ) -> Vec<JobId> {
        let asked: Vec<(JobId, Token, Uncertain)> = {
            let t = self.leases.lock();
            sent.iter()
                .filter(|(id, _, _)| !gone.contains(id))
                .filter_map(|(id, token, run)| {
                    let h = t.held.get(id)?;
                    let settled = matches!(
                        h.outcome,
                        Some(Outcome::Ack { .. } | Outcome::Retry { .. } | Outcome::Dead { .. })
                    );
                    let u = h
                        .late
                        .filter(|_| h.run == *run && h.token == *token && !h.lost && settled)?;
                    Some((*id, *token, u))
                })
                .collect()
        };
        if asked.is_empty() {
            return Vec::new();
        }
        let held: Vec<(JobId, Token)> = asked.iter().map(|(id, t, _)| (*id, *t)).collect();
        let Ok(scores) = self.backend.scores(&self.queue, &held).await else {
            return Vec::new(); // unreadable: dropped as a lost lease's, as before
        };
        let read = Instant::now();
        let mut adopted = Vec::new();
        let mut t = self.leases.lock();
        for ((id, old, u), now) in asked.iter().zip(scores) {
            let Some(h) = t.held.get_mut(id).filter(|h| h.token == *old) else {
                continue;
            };
            h.late = None;
            if let Some(now) = now.filter(|now| adoptable(*old, u, read, *now)) {
                tracing::info!(queue = %self.queue, job.id = %id, "a settle was refused for the lease a renewal whose reply was lost wrote after the score was read; settling again with that lease");
                h.token = now;
                h.deadline = h.deadline.max(u.sent + self.lease);
                adopted.push(*id);
            }
        }
        adopted
    }

    /// Says why running jobs lost their lease, then cancels their runs: one read
    /// of their scores (waited for `CLASSIFY_WAIT` at most) tells a deleted job
    /// from one delivered again. A run that ended during the read learns why
    /// through its entry's sender (see [`Lost::why`](crate::worker::leases::Lost::why)).
    /// A run whose job a fetch of this worker delivered again during the read
    /// (merged into it: no longer lost) holds that lease, and goes on.
    async fn report_lost(&self, lost: Vec<LostRun>) {
        let pairs: Vec<(JobId, Token)> = lost.iter().map(|l| (l.0, l.1)).collect();
        let scores = tokio::time::timeout(CLASSIFY_WAIT, self.backend.scores(&self.queue, &pairs))
            .await
            .unwrap_or_else(|_| Err(crate::Error::Protocol("no reply in time".into())));
        for (k, (id, held, cancel, told)) in lost.into_iter().enumerate() {
            let mut why = CancelReason::LeaseLost;
            match scores.as_ref().map(|s| s.get(k).copied().flatten()) {
                Ok(None) => {
                    tracing::warn!(queue = %self.queue, job.id = %id, "job cancelled or deleted while it ran: cancelling the run; it will not run again");
                    why = CancelReason::Deleted;
                }
                Ok(Some(now))
                    if now.attempt() != held.attempt()
                        || !crate::contract::leases::is_lease(now.score()) =>
                {
                    tracing::warn!(queue = %self.queue, job.id = %id, "lease lost: the job was delivered again after this lease ran out, or made visible again; cancelling this run")
                }
                Ok(Some(_)) => {
                    tracing::warn!(queue = %self.queue, job.id = %id, "lease lost: this delivery's lease was renewed later than this worker allows for (a renewal whose reply was lost, run late); cancelling this run")
                }
                Err(_) => {
                    tracing::warn!(queue = %self.queue, job.id = %id, "lease lost (the job was deleted, or delivered again after its lease ran out); cancelling the run")
                }
            }
            let merged = {
                let mut t = self.leases.lock();
                t.classifying.remove(&id);
                match t
                    .held
                    .get_mut(&id)
                    .filter(|h| Arc::ptr_eq(&h.cancel, &cancel))
                {
                    Some(h) if h.lost => {
                        h.reason = Some(why);
                        false
                    }
                    // delivered here again during the read (see `Admit::Merged`):
                    // the run holds that delivery's lease now
                    Some(_) => true,
                    None => false,
                }
            };
            // a run that ended during the read waits for this
            told.send_replace(Some(why));
            if merged {
                tracing::info!(queue = %self.queue, job.id = %id, "delivered here again while its lost lease was read: the run goes on under the new lease");
            } else {
                cancel.cancel();
            }
        }
    }

    /// Renews every held lease whose token is known in one call (only those of
    /// running jobs when `running_only`: while a settle of finished ones is
    /// under way); false when the call failed, when leases whose renewal's
    /// reply was lost could not be read, or when it found gone a lease that
    /// such a renewal, not landed at the read, may have replaced since (see
    /// `Held::late`: its score is read again). Those are renewed once read:
    /// the settler tries again soon, not a third of the lease later, which
    /// may be after they ran out.
    pub(super) async fn heartbeat(&self, running_only: bool) -> bool {
        let resolved = self.resolve_uncertain().await;
        let leases: Vec<(JobId, Token, Instant)> = self
            .leases
            .lock()
            .held
            .iter()
            .filter(|(_, h)| h.renewable() && !(running_only && h.outcome.is_some()))
            .map(|(id, h)| (*id, h.token, h.deadline))
            .collect();
        if leases.is_empty() {
            return resolved;
        }
        let pairs: Vec<(JobId, Token)> = leases.iter().map(|(id, t, _)| (*id, *t)).collect();
        let sent_at = Instant::now();
        let result = self.backend.extend(&self.queue, &pairs, self.lease).await;
        let mut lost = Vec::new();
        let mut retry = false;
        let renewed = {
            let mut t = self.leases.lock();
            match result {
                Ok(tokens) => {
                    for ((id, old, _), new) in leases.iter().zip(tokens) {
                        // changed during the call (a merged re-delivery): not ours to touch
                        let Some(h) = t.held.get_mut(id).filter(|h| h.token == *old) else {
                            continue;
                        };
                        match new {
                            Some(new) => {
                                h.token = new;
                                h.deadline = sent_at + self.lease;
                                h.late = None;
                            }
                            // a lost renewal that had not landed when the
                            // score was read may have since: the score is
                            // read again (its lease adopted within the
                            // bound), and renewed then
                            None if h.late.is_some() && !h.lost => {
                                h.uncertain = h.late.take();
                                retry = true;
                            }
                            None => {
                                if h.running {
                                    // why is read next (report_lost): a run
                                    // ending meanwhile waits for it
                                    let cancel = h.cancel.clone();
                                    let (told, classifying) = tokio::sync::watch::channel(None);
                                    t.classifying.insert(*id, classifying);
                                    lost.push((*id, *old, cancel, told));
                                }
                                // cancelled once report_lost knows why
                                Leases::give_up(&mut t, id, CancelReason::LeaseLost, false);
                            }
                        }
                    }
                    !retry
                }
                Err(e) => {
                    // the renewal may still have run: remember the lease it could have set
                    tracing::warn!(queue = %self.queue, error = %e, "renewing leases failed");
                    for (id, old, deadline) in &leases {
                        let Some(h) = t.held.get_mut(id).filter(|h| h.token == *old) else {
                            continue;
                        };
                        let origin = deadline.checked_sub(self.lease).unwrap_or(*deadline);
                        h.uncertain = Some(Uncertain {
                            origin,
                            sent: sent_at,
                        });
                    }
                    false
                }
            }
        };
        if !lost.is_empty() {
            self.report_lost(lost).await;
        }
        renewed && resolved
    }
}

/// Whether `now`, the score of a job held with `old` read at `read`, is a
/// lease that a renewal sent as `u` says, whose reply was lost, could have
/// written: a lease (not a due time: a visibility change, or a later delivery
/// given back, keeps the count) of the same delivery, ending later than `old`
/// but no later than `old`'s end plus the time from when `old`'s lease was
/// measured to the read (a second of slack: the backend's clock runs as the
/// worker's).
fn adoptable(old: Token, u: &Uncertain, read: Instant, now: Token) -> bool {
    let since = read.saturating_duration_since(u.origin) + Duration::from_secs(1);
    let until = old
        .lease_until_ms()
        .saturating_add(u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
    crate::contract::leases::is_lease(now.score())
        && now.attempt() == old.attempt()
        && now.lease_until_ms() > old.lease_until_ms()
        && now.lease_until_ms() <= until
}

/// Gives up runs whose lease ran out without a renewal, forever: another worker
/// may run them now. Their token is cancelled and nothing is settled for them.
/// Finished ones keep trying to settle for one more lease (the fence decides).
/// Wakes the queue's dispatcher (`wake`) when it gave a run up: the job is
/// due again there, and a dispatcher that never fetched it (a job handed to
/// this worker) has no timer for it, so it would wait for the worker's poll.
pub(super) async fn watchdog(
    leases: Arc<Leases>,
    queue: Arc<str>,
    lease: Duration,
    wake: Arc<tokio::sync::Notify>,
) {
    loop {
        let now = Instant::now();
        let mut nearest = now + lease / 3;
        let mut gave_up = false;
        {
            let mut t = leases.lock();
            let Table { held, done, .. } = &mut *t;
            held.retain(|id, h| {
                if h.lost {
                    return true; // cancelled already; forgotten when the run ends
                }
                if h.running && h.deadline <= now {
                    tracing::warn!(queue = %queue, job.id = %id, "lease ran out without a renewal (backend unreachable?); cancelling the run");
                    // kept until the run ends, so a re-delivery here never runs beside it
                    h.cancel.cancel();
                    h.lost = true;
                    h.reason = Some(CancelReason::LeaseLost);
                    gave_up = true;
                    return true;
                }
                if h.outcome.is_some() && h.deadline + lease <= now {
                    tracing::error!(queue = %queue, job.id = %id, "could not settle the job before its lease ran out; it runs again");
                    done.remove(id);
                    return false;
                }
                if h.running {
                    nearest = nearest.min(h.deadline);
                }
                true
            });
        }
        if gave_up {
            wake.notify_one();
        }
        tokio::time::sleep_until(nearest).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::adoptable;
    use crate::contract::leases::Token;
    use crate::worker::leases::Uncertain;

    #[test]
    fn only_a_later_lease_of_the_same_delivery_within_the_bound_is_adoptable() {
        // the held lease (6 s) was set 4 s before the read, ending at 10 s
        let read = Instant::now() + Duration::from_secs(10);
        let u = Uncertain {
            origin: read - Duration::from_secs(4),
            sent: read - Duration::from_secs(2),
        };
        let old = Token::new(10_000, 1);
        // the late renewal's lease: ending no later than 10 + 4 + 1 s
        assert!(adoptable(old, &u, read, Token::new(13_000, 1)));
        assert!(adoptable(old, &u, read, Token::new(15_000, 1)));
        assert!(
            !adoptable(old, &u, read, Token::new(15_001, 1)),
            "past the bound"
        );
        assert!(!adoptable(old, &u, read, old), "not later");
        // delivered again to another worker: the lease is really lost
        assert!(!adoptable(old, &u, read, Token::new(13_000, 2)));
        // due again (a retry, a visibility change), not leased
        let due = Token::from_raw(13_000_000 + 1, 0);
        assert!(!adoptable(old, &u, read, due));
    }
}
