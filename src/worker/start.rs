//! A leased job's start: the jobs a fetch leased, or one a send handed to this
//! worker, start here in runs of their own, or go back unstarted (a shutdown, a
//! full worker, a hand-off that came late).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::dispatch::{Dispatcher, lock};
use super::execute::{Run, RunSlot, execute};
use super::hooks::{JobRun, UNDECODABLE};
use super::leases::Admit;
use super::observe::End;
use super::settle::{Event, Outcome};
use crate::contract::attempts::AttemptOutcome;
use crate::contract::backend::Backend;
use crate::contract::leases::{Fetched, Handed};

/// The most a hand-off's lease may have begun before the job arrived (by the
/// last fetch's clocks) for the job to start here; one that came later is put
/// back to be fetched (see [`Dispatcher::take_handed`]).
const HANDOFF_SLACK: Duration = Duration::from_secs(1);

impl<B: Backend> Dispatcher<B> {
    /// Starts a job a send handed to this worker when a slot is free; else (or
    /// at shutdown) releases it for any worker; then, when it was the last job
    /// the registration was good for (or released), wakes the dispatcher to
    /// fetch (and register) again. Called by the listener, so the job starts
    /// without a hop through the dispatcher's task. The lease began by the
    /// backend's clock `h.now_us`, which the last fetch's send time here and the
    /// backend's clock during it map to this worker's clock no later than it
    /// truly began (the fetch was sent before Redis read its clock), and no
    /// later than the job's arrival; a job whose lease began more than
    /// [`HANDOFF_SLACK`] before it arrived is released.
    pub fn take_handed(&self, h: Handed) {
        if h.lost {
            self.reclaim(h);
            return;
        }
        // the registration's count, as the send counts it down: while some
        // are left it stays in place, and the dispatcher need not fetch to
        // register again (one call a job less for an idle worker); a count
        // here that differs from the send's (a hand-off of an earlier
        // registration arriving after a fetch made a new one) costs a fetch
        // too many, or a wake-up instead of a hand-off
        let left = self
            .registered
            .fetch_update(
                std::sync::atomic::Ordering::Relaxed,
                std::sync::atomic::Ordering::Relaxed,
                |n| Some(n.saturating_sub(1)),
            )
            .unwrap_or(0)
            .saturating_sub(1);
        // the dispatcher is woken by the job's run once that has been polled
        // once: woken here, it would take this thread's next turn and push the
        // job to where another thread, woken for it, takes it (on the 2-core
        // bench 20-40 µs of a hand-off's start went to that)
        if !self.start_handed(h, left == 0) {
            self.wake.notify_one();
        }
    }

    /// A job handed to this worker before its listener (re)connected, whose
    /// message may have been lost with the connection: every hand-off that
    /// reached this worker was taken before this note came, so a job not held
    /// here never arrived. It is released, not counted as an attempt, so that it
    /// runs now rather than after its lease (the release is fenced by the
    /// hand-off's token: a job that ran and was settled is left alone).
    fn reclaim(&self, h: Handed) {
        if self.env.leases.lock().held.contains_key(&h.delivery.id) {
            return;
        }
        tracing::info!(queue = %self.env.queue, job.id = %h.delivery.id,
            "a job handed to this worker never reached it (its notification connection closed): released to run now");
        self.release_handed(h);
    }

    /// Whether a run was spawned for it, which wakes the dispatcher when
    /// `wake` (the registration is used up).
    fn start_handed(&self, h: Handed, wake: bool) -> bool {
        let arrived = Instant::now();
        let began = (*lock(&self.clock)).and_then(|(sent_at, now_us)| {
            if h.now_us >= now_us {
                sent_at.checked_add(Duration::from_micros(h.now_us - now_us))
            } else {
                sent_at.checked_sub(Duration::from_micros(now_us - h.now_us))
            }
        });
        // a lease that began well before the job came (a slow notification
        // connection, a stalled worker, or clocks that disagree since the last
        // fetch): the time left of it here is uncertain, and taken as a second
        // before the job came it could outlast the lease in Redis, where the job
        // is then delivered again; put back, it is fetched with a lease of its own
        let slack = HANDOFF_SLACK.min(self.env.shared.lease / 4);
        let began = match began {
            Some(began) if began + slack >= arrived => began.min(arrived),
            _ => {
                tracing::debug!(queue = %self.env.queue, job.id = %h.delivery.id,
                    "a job handed to this worker came late: released to be fetched");
                self.release_handed(h);
                return false;
            }
        };
        // a handed job that cannot start at once (every running slot taken, as
        // by another queue's hand-off, or the worker quiet) is released, which
        // wakes the queue's other waiting workers for it (complete.lua)
        if self.env.per_queue.stop.is_cancelled()
            || self.env.shared.controls.is_quiet()
            || self.env.shared.running.available_permits() == 0
            || !self.try_slot()
        {
            self.release_handed(h);
            return false;
        }
        let mut fetched = Fetched {
            jobs: vec![h.delivery],
            now_us: h.now_us,
            ..Fetched::default()
        };
        self.start(&mut fetched, began, wake.then_some(&self.wake))
    }

    /// Puts a handed job back, unstarted (it holds no slot).
    fn release_handed(&self, h: Handed) {
        self.release_one(h.delivery, Instant::now());
        let _ = self.env.tx.send(Event::Finished);
    }

    /// One free slot of the worker and of this queue, taken without waiting.
    fn try_slot(&self) -> bool {
        let local = match self.env.queue_slots.sem().try_acquire() {
            Ok(p) => p,
            Err(_) => return false,
        };
        // given back through the limit, which may be owed it
        local.forget();
        match self.env.shared.slots.try_acquire() {
            Ok(p) => {
                p.forget();
                true
            }
            Err(_) => {
                self.env.queue_slots.release(1);
                false
            }
        }
    }

    /// Starts the fetched jobs; a job this worker still holds is merged into the
    /// held delivery instead of running twice.
    /// Takes the jobs out of `fetched` (moved into their runs, not copied).
    /// `then_wake` goes to the first run spawned, which notifies it once it
    /// has been polled; returns whether one took it (or none was given).
    pub(super) fn start(
        &self,
        fetched: &mut Fetched,
        sent_at: Instant,
        mut then_wake: Option<&Arc<Notify>>,
    ) -> bool {
        let deadline = sent_at + self.env.shared.lease;
        let replied = Instant::now();
        let leased = !fetched.jobs.is_empty();
        for d in std::mem::take(&mut fetched.jobs) {
            let batch = crate::contract::batches::BatchRef::of_body(&d.body);
            // the job type, read from the envelope's head when it can be (the
            // run records it otherwise, once decoded); none for a body over
            // the queue's maxsize, dead-lettered below unrun
            let oversized = fetched
                .max_body
                .is_some_and(|m| crate::contract::queues::over_maxsize(&d.body, m));
            let linked = if oversized {
                None
            } else {
                crate::job::linked(&d.body)
            };
            let job = linked.map(|l| l.name);
            let admitted = self
                .env
                .leases
                .admit(d.id, d.token, deadline, replied, batch, job);
            let (run, cancel) = match admitted {
                Admit::Start { run, cancel } => (run, cancel),
                Admit::Merged { finished } => {
                    tracing::info!(queue = %self.env.queue, job.id = %d.id,
                            "delivered again while still held here (its lease ran out before a renewal, or it was made visible); the held run goes on under the new lease");
                    if finished {
                        let _ = self.env.tx.send(Event::Finished);
                    }
                    self.give_back(1);
                    continue;
                }
            };
            if let Some(max) = fetched.max_body.filter(|_| oversized) {
                // the run's span, as a run that starts has (rare: its cost
                // stays on this path)
                let attempt = d.token.attempt();
                let span = tracing::info_span!("job", job.id = %d.id, job.name = tracing::field::Empty, queue = %self.env.queue, attempt);
                crate::job::trace::continue_in(&span, &d.body);
                let name = crate::contract::envelope::job_name(&d.body);
                if let Some(name) = &name {
                    super::execute::record_name(&span, name);
                }
                let _in = span.enter();
                let error = format!(
                    "body of {} bytes is over the queue's maxsize of {max}",
                    d.body.len()
                );
                tracing::error!(%error, "dead-lettered");
                let observer = &self.env.shared.observer;
                let heard = observer
                    .active(&self.env.per_queue.metrics)
                    .then(|| error.clone());
                let now = fetched.now_us / 1000;
                let ran = (now, now, AttemptOutcome::Error);
                if self
                    .env
                    .leases
                    .finish(d.id, run, Outcome::Dead { error }, ran, None)
                    .is_ok()
                {
                    let _ = self.env.tx.send(Event::Finished);
                    if let Some(error) = heard {
                        let job = name.as_deref().unwrap_or(UNDECODABLE);
                        let waited = Duration::from_millis(d.waited_ms);
                        let r = JobRun::new(d.id, &self.env.queue, job, attempt, waited);
                        let end = End::Dead { error: &error };
                        observer.ended(&self.env.per_queue.metrics, None, &r, None, end);
                    }
                }
                self.give_back(1);
                continue;
            }
            self.tracker.spawn(execute(
                Run {
                    delivery: d,
                    run,
                    cancel,
                    fetched_at_us: fetched.now_us,
                    fetched: replied,
                    batch: batch.map(|b| Box::new(b.batch)),
                    linked,
                    then_wake: super::execute::ThenWake(then_wake.take().cloned()),
                },
                RunSlot::new(self.env.clone()),
            ));
        }
        if leased {
            // once a fetch: the registry counts the jobs leased and not yet
            // started (prefetched)
            self.env.leases.changed();
        }
        then_wake.is_none()
    }

    /// Shutdown came during the fetch: release what it leased, unstarted.
    pub(super) fn release(&self, fetched: Fetched, sent_at: Instant) {
        for d in fetched.jobs {
            self.release_one(d, sent_at);
            self.give_back(1);
        }
        let _ = self.env.tx.send(Event::Finished);
    }

    /// Queues the release of a delivery leased at `sent_at` that never started.
    fn release_one(&self, d: crate::contract::leases::Delivery, sent_at: Instant) {
        let deadline = sent_at + self.env.shared.lease;
        if let Admit::Start { run, .. } =
            self.env
                .leases
                .admit(d.id, d.token, deadline, Instant::now(), None, None)
        {
            let _ = self.env.leases.finish(
                d.id,
                run,
                Outcome::Release {
                    delay: Duration::ZERO,
                },
                (0, 0, AttemptOutcome::Cancelled),
                None,
            );
        }
    }
}
