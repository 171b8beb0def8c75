//! One task per queue owns the running deliveries' tokens: it extends their leases
//! (one batched call per tick) and settles finished ones (one batched call per
//! flush). Being the only owner, it never acks with a token a heartbeat has replaced.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::JobId;
use crate::backend::{Backend, DeadLetterEntry, Reschedule, Settle, Token};

/// What happened to a delivery.
pub(crate) enum Event {
    /// The dispatcher leased it and is starting it.
    Started {
        id: JobId,
        token: Token,
        cancel: CancellationToken,
    },
    /// Its run ended.
    Finished { id: JobId, outcome: Outcome },
    /// Shutdown: release whatever still runs, flush, exit.
    Drain,
}

/// How a run ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    Ack,
    Retry {
        delay: Duration,
    },
    Dead {
        error: String,
    },
    /// Interrupted by shutdown: visible again at once, the attempt not counted.
    Release,
}

/// Most entries per settle call.
const MAX_BATCH: usize = 4096;

pub(crate) struct Settler<B> {
    pub backend: B,
    pub queue: Arc<str>,
    pub lease: Duration,
    /// Wakes the queue's dispatcher (after a retry is scheduled).
    pub wake: Arc<Notify>,
    running: HashMap<JobId, (Token, CancellationToken)>,
    pending: Settle,
    pending_len: usize,
}

impl<B: Backend> Settler<B> {
    pub fn new(backend: B, queue: Arc<str>, lease: Duration, wake: Arc<Notify>) -> Self {
        Settler {
            backend,
            queue,
            lease,
            wake,
            running: HashMap::new(),
            pending: Settle::default(),
            pending_len: 0,
        }
    }

    pub async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Event>) {
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.tick().await;
        let mut draining = false;
        while !draining {
            tokio::select! {
                ev = rx.recv() => {
                    let Some(ev) = ev else { break };
                    draining |= self.handle(ev);
                    // take what else is ready; yield once so that jobs finishing right
                    // now join this batch rather than the next call
                    for round in 0..2 {
                        while self.pending_len < MAX_BATCH {
                            match rx.try_recv() {
                                Ok(ev) => draining |= self.handle(ev),
                                Err(_) => break,
                            }
                        }
                        if round == 0 && !draining && self.pending_len < MAX_BATCH {
                            tokio::task::yield_now().await;
                        }
                    }
                    self.flush().await;
                }
                _ = tick.tick() => self.heartbeat().await,
            }
        }
        self.release_all();
        // bounded: a Redis that stays away leaves the leases to expire instead
        for _ in 0..20 {
            if self.pending_len == 0 {
                break;
            }
            self.flush().await;
            if self.pending_len > 0 {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        if self.pending_len > 0 {
            tracing::error!(queue = %self.queue, unsettled = self.pending_len, "could not settle jobs at shutdown; they run again after their lease");
        }
    }

    /// Returns true on `Drain`.
    fn handle(&mut self, ev: Event) -> bool {
        match ev {
            Event::Started { id, token, cancel } => {
                self.running.insert(id, (token, cancel));
            }
            Event::Finished { id, outcome } => {
                let Some((token, _)) = self.running.remove(&id) else {
                    tracing::debug!(job.id = %id, "finished after its lease was lost; not settled");
                    return false;
                };
                self.push(id, token, outcome);
            }
            Event::Drain => return true,
        }
        false
    }

    fn push(&mut self, id: JobId, token: Token, outcome: Outcome) {
        self.pending_len += 1;
        let p = &mut self.pending;
        match outcome {
            Outcome::Ack => p.acks.push((id, token)),
            Outcome::Retry { delay } => p.reschedules.push(Reschedule {
                id,
                token,
                delay,
                deliveries: token.attempt(),
                release: false,
            }),
            Outcome::Release => p.reschedules.push(Reschedule {
                id,
                token,
                delay: Duration::ZERO,
                deliveries: token.attempt().saturating_sub(1),
                release: true,
            }),
            Outcome::Dead { error } => p.dead.push(DeadLetterEntry { id, token, error }),
        }
    }

    fn release_all(&mut self) {
        for (id, (token, cancel)) in std::mem::take(&mut self.running) {
            cancel.cancel();
            self.push(id, token, Outcome::Release);
        }
    }

    async fn flush(&mut self) {
        if self.pending_len == 0 {
            return;
        }
        match self.backend.settle(&self.queue, &self.pending).await {
            Ok(done) => {
                let sent = self.pending_len as u64;
                if done.acked + done.rescheduled + done.dead < sent {
                    tracing::warn!(queue = %self.queue, sent, ?done, "some deliveries had lost their lease; the newer delivery was left alone");
                }
                if !self.pending.reschedules.is_empty() {
                    self.wake.notify_one();
                }
                self.pending = Settle::default();
                self.pending_len = 0;
            }
            Err(e) => {
                // kept for the next flush; the leases cover the jobs meanwhile
                tracing::warn!(queue = %self.queue, error = %e, pending = self.pending_len, "settling finished jobs failed; will retry");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    async fn heartbeat(&mut self) {
        if self.running.is_empty() {
            return;
        }
        let leases: Vec<(JobId, Token)> =
            self.running.iter().map(|(id, (t, _))| (*id, *t)).collect();
        match self.backend.extend(&self.queue, &leases, self.lease).await {
            Ok(tokens) => {
                for ((id, _), new) in leases.iter().zip(tokens) {
                    match new {
                        Some(t) => {
                            if let Some(entry) = self.running.get_mut(id) {
                                entry.0 = t;
                            }
                        }
                        None => {
                            if let Some((_, cancel)) = self.running.remove(id) {
                                tracing::warn!(queue = %self.queue, job.id = %id, "lease lost (another worker may run the job); cancelling");
                                cancel.cancel();
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(queue = %self.queue, error = %e, "extending leases failed"),
        }
    }
}
