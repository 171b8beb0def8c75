//! Running one delivery: decode, handler with timeout and panic capture, outcome.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use super::Shared;
use super::leases::{Leases, Lost};
use super::per_queue::PerQueue;
use super::recount::{Limits, PANIC_DELAY, PANIC_LIMITS, recount};
use super::settle::{Event, Outcome};
use crate::contract::attempts::AttemptOutcome;
use crate::contract::leases::Delivery;
use crate::job::cancel::RunCancel;

mod end;
mod run;

pub(crate) use crate::job::panic_message;
use end::{Ended, Report, tell_end};
pub(crate) use run::record_name;
use run::run;

/// Gives the slot back to the worker and the queue, even if the task is dropped.
pub(crate) struct SlotGuard {
    pub shared: Arc<Shared>,
    pub queue_slots: Option<Arc<super::limit::Limit>>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        // the queue's place first: a dispatcher the worker's slot wakes (see
        // Shared::give_slots) sees both free
        if let Some(q) = &self.queue_slots {
            q.release(1);
        }
        self.shared.give_slots(1);
    }
}

/// What the runs of one queue's jobs share, behind one `Arc` cloned per job:
/// each clone of an `Arc` is an atomic write to a line both of a busy worker's
/// threads touch, and the six cloned per job before were several percent of
/// the worker's CPU on the 2-core bench.
pub(crate) struct RunEnv {
    pub queue: Arc<str>,
    pub shared: Arc<Shared>,
    pub tx: tokio::sync::mpsc::UnboundedSender<Event>,
    pub per_queue: Arc<PerQueue>,
    pub leases: Arc<Leases>,
    pub queue_slots: Arc<super::limit::Limit>,
    /// The worker's runs: the rare run whose end hooks wait is told of in
    /// a task of its own there (see `execute`).
    pub tracker: tokio_util::task::TaskTracker,
}

/// A spawned run's place: its slot of the worker and of the queue, given back
/// even if the task is dropped, and its count in [`Shared::unstarted`] until
/// it takes a running slot or goes back without one.
pub(crate) struct RunSlot {
    pub env: Arc<RunEnv>,
    /// An atomic so that it is cleared through `&self` while the run borrows
    /// `env` (the run's own, never contended).
    unstarted: std::sync::atomic::AtomicBool,
}

impl RunSlot {
    pub fn new(env: Arc<RunEnv>) -> Self {
        env.shared
            .unstarted
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        RunSlot {
            env,
            unstarted: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// It took its running slot, or will not.
    fn started(&self) {
        if self
            .unstarted
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            self.env
                .shared
                .unstarted
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.started();
        // the queue's place first, as SlotGuard gives them back
        self.env.queue_slots.release(1);
        self.env.shared.give_slots(1);
    }
}

/// One delivery to run.
pub(crate) struct Run {
    pub delivery: Delivery,
    /// This worker's number for the run.
    pub run: u64,
    /// Cancelled on timeout, lost lease, or shutdown past the grace period.
    pub cancel: Arc<RunCancel>,
    /// The backend's clock at the fetch, Unix µs.
    pub fetched_at_us: u64,
    /// When the fetch's reply came, on the worker's clock: the lease table's
    /// `since` for it, which its start is counted from.
    pub fetched: Instant,
    /// The batch its envelope names: boxed, as most jobs have none and an id
    /// is 32 bytes (a run's task over 648 bytes takes a slower path through
    /// the allocator: BENCHMARKS.md part 33).
    pub batch: Option<Box<crate::contract::batches::BatchId>>,
    /// The direct decoder of its job type, found from the envelope's head
    /// when it was admitted: its job type is in the lease table already.
    pub linked: Option<&'static crate::job::envelope::Decoder>,
    /// Notified once the run has been polled once (or will not run): its
    /// dispatcher, for a job handed to this worker (see `take_handed`).
    pub then_wake: ThenWake,
}

/// A notify owed once: fired when told, or when dropped (a run's task dropped
/// before its first poll still wakes its dispatcher).
#[derive(Default)]
pub(crate) struct ThenWake(pub Option<Arc<Notify>>);

impl ThenWake {
    fn fire(&mut self) {
        if let Some(n) = self.0.take() {
            n.notify_one();
        }
    }
}

impl Drop for ThenWake {
    fn drop(&mut self) {
        self.fire();
    }
}

/// `fut`, notifying `then` once it has been polled once. A task woken while
/// another runs on a thread of tokio's multi-threaded runtime takes the
/// thread's next turn and wakes no other thread; a second one woken before the
/// first ran pushes the first to where another thread, woken for it, takes it.
struct FirstPoll<F> {
    fut: F,
    then: ThenWake,
}

impl<F: std::future::Future + Unpin> std::future::Future for FirstPoll<F> {
    type Output = F::Output;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let out = std::pin::Pin::new(&mut self.fut).poll(cx);
        self.then.fire();
        out
    }
}

pub(crate) async fn execute(mut r: Run, slot: RunSlot) {
    let RunEnv {
        queue,
        shared,
        tx,
        per_queue,
        leases,
        ..
    } = &*slot.env;
    let mut then_wake = std::mem::take(&mut r.then_wake);
    let d = &r.delivery;
    let attempt = d.token.attempt();
    // a prefetched job waits for a running slot; shutdown, or the worker
    // turning quiet, releases it unstarted (a slot free at once is taken
    // without a wait)
    let running =
        if per_queue.stop.is_cancelled() || r.cancel.is_cancelled() || shared.controls.is_quiet() {
            None
        } else if let Ok(p) = shared.running.try_acquire() {
            Some(p)
        } else {
            then_wake.fire();
            // boxed, as the run below: what a run's task holds across all
            // its states is moved whole several times as it is spawned and
            // ends (1,400 bytes with both inline, 648 with both boxed)
            Box::pin(async {
                let mut quiet = shared.controls.quiet.subscribe();
                tokio::select! {
                    biased;
                    _ = per_queue.stop.cancelled() => None,
                    _ = r.cancel.cancelled() => None,
                    _ = quiet.wait_for(|q| *q) => None,
                    p = shared.running.acquire() => p.ok(),
                }
            })
            .await
        };
    slot.started();
    if running.is_some() && shared.running.available_permits() == 0 {
        // no slot left to start a handed job at once: withdraw the registrations
        shared.filled.notify_one();
    }
    let mut report = Report::default();
    let mut panicked = false;
    // the run's span, for the end hooks too (one span per job execution)
    let mut job_span: Option<tracing::Span> = None;
    // the outcome, and when the run began (once it took a running slot)
    let outcome = match running {
        None => (
            Outcome::Release {
                delay: Duration::ZERO,
            },
            None,
        ),
        // a handler's throttle held here (until its settle lands): a job
        // prefetched, handed or fetched before it goes back unstarted, due
        // when the throttle ends
        Some(_) if let Some(until) = per_queue.hold.until() => (
            Outcome::Release {
                delay: until.saturating_duration_since(tokio::time::Instant::now()),
            },
            None,
        ),
        Some(_permit) => {
            let span = tracing::info_span!("job", job.id = %d.id, job.name = tracing::field::Empty, queue = %queue, attempt);
            crate::job::trace::continue_in(&span, &d.body);
            let started = Instant::now();
            // listed as running from here (a prefetched job waited for this
            // slot): one store to the run's own `RunCancel`
            leases.started(&r.cancel, started.saturating_duration_since(r.fetched));
            // a panic anywhere on the job's path (not only in the handler) still
            // settles the job
            let running = AssertUnwindSafe(run(
                &r,
                queue,
                shared,
                leases,
                per_queue,
                &mut report,
                started,
            ))
            .catch_unwind()
            .instrument(span.clone());
            // kept for the end hooks: here, not in the box, whose size is a
            // step of the allocator's (BENCHMARKS.md part 33)
            job_span = Some(span);
            let outcome = FirstPoll {
                // boxed: see the wait for a slot above
                fut: Box::pin(running),
                then: std::mem::take(&mut then_wake),
            }
            .await
            .unwrap_or_else(|panic| {
                panicked = true;
                // logged in the run's span, as every event of the run
                let _in = job_span.as_ref().map(tracing::Span::enter);
                let error = format!(
                    "worker panicked running the job: {}",
                    panic_message(&*panic)
                );
                // a panic every time must not loop forever: under the job
                // type's attempts and backoff when it is known
                let Limits {
                    max_attempts,
                    backoff,
                } = report.limits.unwrap_or(PANIC_LIMITS);
                let delay = backoff.map_or(PANIC_DELAY, |b| shared.retry.delay(b, attempt));
                if attempt >= max_attempts {
                    tracing::error!(%error, "dead-lettered");
                    return Outcome::Dead { error };
                }
                tracing::error!(%error, "will retry");
                Outcome::Retry { delay, error }
            });
            (outcome, Some(started))
        }
    };
    // not run here
    then_wake.fire();
    // the attempt's record: its times on the backend's clock, reckoned from
    // the fetch's
    let ended = Instant::now();
    let (outcome, began) = outcome;
    if let Some(began) = began {
        per_queue.ran(ended.saturating_duration_since(began));
    }
    let backend_ms = |at: Instant| {
        let since = at.saturating_duration_since(r.fetched).as_millis();
        (r.fetched_at_us / 1000).saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
    };
    let kind = match &outcome {
        _ if panicked => AttemptOutcome::Panic,
        Outcome::Ack { .. } => AttemptOutcome::Ok,
        // its handler ran, cut short: recorded, not counted (one that never
        // started is no attempt: its release carries no run)
        Outcome::Release { .. } if report.started.is_some() => AttemptOutcome::Released,
        Outcome::Release { .. } => AttemptOutcome::Cancelled,
        _ => report.failed.unwrap_or(AttemptOutcome::Error),
    };
    let started = report.started.map_or(ended, |(at, _)| at);
    let ran = (backend_ms(started), backend_ms(ended), kind);
    // a type read from the envelope's head at admission, of a job that never
    // decoded (its body refused, a panic first, or not started): no run of
    // that type to count
    if r.linked.is_some() && !report.decoded {
        leases.named(d.id, r.run, None);
    }
    let observing = shared.observer.active(&per_queue.metrics);
    // what the hooks hear, taken before the outcome moves into the lease table
    let mut heard = observing.then(|| outcome.clone());
    let id = d.id;
    // a succeeded run's body goes with its settle, for its history entry,
    // when small enough to be sent back (a larger one is read again)
    let body = (matches!(outcome, Outcome::Ack { .. })
        && r.delivery.body.len() <= super::settle::MAX_SENT_BODY)
        .then(|| std::mem::take(&mut r.delivery.body));
    // a re-delivery merged into the run counts: a retry is decided again
    // under the count of the token it is settled with
    let limits = report.limits.unwrap_or(PANIC_LIMITS);
    let mut settled_attempt = attempt;
    let mut recounted = None;
    let finished = leases.finish_counted(id, r.run, outcome, ran, body, |outcome, now| {
        settled_attempt = now;
        if now > attempt {
            recounted = recount(outcome, now, limits, &shared.retry, heard.as_mut());
        }
    });
    if let (Some(span), true) = (&job_span, settled_attempt != attempt) {
        // a re-delivery merged into the run (rare): from here the run's span
        // says the attempt it is settled as, which the end hooks hear
        span.record("attempt", settled_attempt);
    }
    if let (Some(dead), Ok(())) = (recounted, &finished) {
        // in the run's span, as every event of the run
        let _in = job_span.as_ref().map(tracing::Span::enter);
        let (max_attempts, attempt) = (limits.max_attempts, settled_attempt);
        if dead {
            tracing::error!(
                attempt,
                max_attempts,
                "a re-delivery merged into the run was the job's last: dead-lettered, not retried"
            );
        } else {
            tracing::warn!(
                attempt,
                "a re-delivery merged into the run: retried after the backoff of that attempt"
            );
        }
    }
    if finished.is_ok() {
        let _ = tx.send(Event::Finished);
    } else {
        tracing::debug!(job.id = %id, "finished after its lease was lost or ran out; not settled");
    }
    let Some(heard) = heard else { return };
    let told = Ended {
        id,
        attempt: settled_attempt,
        heard,
        report,
        at: ended,
        span: job_span,
    };
    match finished.map_err(Lost::known) {
        Ok(()) => tell_end(&slot.env, told, Ok(())),
        Err(Ok(why)) => tell_end(&slot.env, told, Err(why)),
        // its lease found gone as it ended, why still read: told once read
        // (a deleted job is no lost lease), within a tenth of a second, by
        // a task of the worker's runs (not awaited here: a run's future
        // stays small; its slots are given back meanwhile)
        Err(Err(lost)) => {
            let env = slot.env.clone();
            slot.env.tracker.spawn(async move {
                let why = lost.why().await;
                tell_end(&env, told, Err(why));
            });
        }
    }
}

#[cfg(test)]
mod tests {
    /// A run's task over 648 bytes takes a slower path through the
    /// allocator (BENCHMARKS.md part 33): what a run holds across its awaits
    /// stays under it (640 bytes in a debug build and in a release one).
    #[test]
    fn a_runs_future_stays_within_the_allocators_fast_sizes() {
        fn size<A, B, F>(_: fn(A, B) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let n = size(super::execute as fn(_, _) -> _);
        assert!(n <= 648, "a run's future is {n} bytes");
    }
}
