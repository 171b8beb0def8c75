//! The settings stored with each of the worker's queues: its builder values
//! are stored where none is ([`Backend::init_settings`]), so the first
//! worker's values become the queue's, and from then on the stored ones are
//! in force for every worker; two workers with different values do not
//! fight and a deploy does not undo an operator's change. The worker follows
//! them: each queue's concurrency limit takes the stored value before the
//! worker takes any job (within [`FIRST_READ`]), and again whenever its beat
//! hears that settings changed (an operator's
//! [`Admin::set_settings`](crate::ops::Admin::set_settings)), or every
//! [`RECHECK`] in case that word was lost. A queue that does not exist yet
//! is tried again at the heartbeat's pace; one deleted and created again
//! gets the builder's values back before its first job is leased: a delete
//! through redjob tells every worker, and a fetch that finds the queue
//! missing has its dispatcher read them again first (a queue an RSMQ client
//! deleted and created again between two fetches gets them at the recheck).
//! At the recheck's pace it also trims each
//! queue's history ([`Backend::trim_history`]), so a queue that settles
//! nothing more is trimmed too.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::limit::Limit;
use crate::contract::backend::Backend;
use crate::contract::settings::{QueueSettings, RateLimit};
use crate::error::Error;

/// How often a worker stores its settings again where they are stored already
/// (a no-op unless the queue lost them), reads them back, and trims the
/// history.
pub(crate) const RECHECK: Duration = Duration::from_secs(120);

/// How long a starting worker waits for its queues' stored settings before
/// it takes jobs under its builder's values.
pub(crate) const FIRST_READ: Duration = Duration::from_secs(2);

/// What the worker follows of its queues' settings.
pub(crate) struct Follow {
    /// Each queue's limit, with the builder's values for the queue's own
    /// settings (its concurrency and rate limit).
    pub limits: HashMap<String, (Arc<Limit>, QueueSettings)>,
    /// A limit's size when none is set: all the worker holds.
    pub unlimited: usize,
    /// The builder's values for every queue (but the queue's own).
    pub base: QueueSettings,
    /// Who stores the builder's values (`worker <id>`).
    pub by: String,
    /// The queues whose stored settings were read (since they last went
    /// missing): a dispatcher reads them first otherwise.
    pub read: HashMap<String, AtomicBool>,
    /// The queues whose stored values over this worker's were logged.
    pub told: Mutex<HashSet<String>>,
    /// Each queue's dispatcher's wake-up: a change of the queue's limits
    /// wakes a dispatcher that sleeps until a limit lets a job start.
    pub wakes: HashMap<String, Arc<tokio::sync::Notify>>,
    /// The limits across the fleet last read for each queue.
    pub seen: Mutex<HashMap<String, (Option<u32>, RateLimit)>>,
    /// Per queue, whether the history setting in force keeps bodies: its
    /// settler then sends acks' bodies back (see `Settle::ack_bodies`).
    pub bodies: HashMap<String, Arc<AtomicBool>>,
}

impl Follow {
    /// The builder's values for a queue whose own are `own`.
    fn builder(&self, own: &QueueSettings) -> QueueSettings {
        QueueSettings {
            concurrency: own.concurrency,
            rate_limit: own.rate_limit,
            ..self.base.clone()
        }
    }

    /// The size of a queue's limit: the stored concurrency, else the
    /// builder's (a backend that stores no settings), at most all the worker
    /// holds.
    fn size(&self, stored: &QueueSettings, own: &QueueSettings) -> usize {
        let limit = stored
            .concurrency
            .or(own.concurrency)
            .and_then(|c| c.per_worker)
            .map(|n| n as usize);
        limit.map_or(self.unlimited, |n| n.min(self.unlimited))
    }

    /// Stores the builder's values for `queue` where none is and sizes its
    /// limit as the stored ones say; whether they were read, or the queue
    /// found missing.
    ///
    /// A dispatcher calls it before it fetches from a queue not read yet (one
    /// created after the worker started): the builder's limits are stored
    /// before the first job of the queue is leased.
    pub async fn read<B: Backend>(&self, backend: &B, queue: &str) -> Found {
        let (Some((limit, own)), Some(read)) = (self.limits.get(queue), self.read.get(queue))
        else {
            return Found::Missing;
        };
        let settings = self.builder(own);
        match backend.init_settings(queue, &settings, &self.by).await {
            Ok(stored) => {
                let overridden = settings
                    .encode()
                    .iter()
                    .zip(stored.encode())
                    .any(|(mine, theirs)| mine.is_some() && theirs.is_some() && *mine != theirs);
                let first = self
                    .told
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(queue.to_string());
                if overridden && first {
                    tracing::info!(
                        queue = %queue,
                        stored = ?stored,
                        builder = ?settings,
                        "the queue's stored settings are in force over this worker's"
                    );
                }
                let size = self.size(&stored, own);
                if limit.size() != size {
                    tracing::info!(queue = %queue, limit = size, "the queue's concurrency per worker is now in force");
                    limit.resize(size);
                }
                let in_force = if stored.is_empty() {
                    &settings
                } else {
                    &stored
                };
                limit.set_fleet_limited(fleet_limited(in_force));
                // the history in force: the stored one, else the worker's
                // (as complete.lua reads them)
                if let Some(flag) = self.bodies.get(queue) {
                    let h = stored.history.or(settings.history).unwrap_or_default();
                    flag.store(h.keeps_bodies(), Ordering::Relaxed);
                }
                let now = in_force.in_force();
                let fleet = (now.concurrency.global, now.rate_limit);
                let before = self
                    .seen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(queue.to_string(), fleet);
                if before.is_some_and(|b| b != fleet)
                    && let Some(wake) = self.wakes.get(queue)
                {
                    // a dispatcher held back by the old limits fetches again
                    wake.notify_one();
                }
                read.store(true, Ordering::SeqCst);
                Found::Read
            }
            Err(Error::QueueNotFound { .. }) => {
                read.store(false, Ordering::SeqCst);
                Found::Missing
            }
            Err(e) => {
                tracing::warn!(queue = %queue, error = %e, "could not read the queue's settings; will retry");
                Found::Failed
            }
        }
    }

    /// Forgets that `queue`'s settings were read (a fetch found it missing):
    /// its dispatcher reads them before it leases from it again.
    pub fn forget(&self, queue: &str) {
        if let Some(read) = self.read.get(queue) {
            read.store(false, Ordering::SeqCst);
        }
    }

    /// Whether the builder's own values for `queue` limit it across the
    /// fleet (a global concurrency or a rate limit), whatever was stored
    /// over them since.
    pub fn own_fleet_limited(&self, queue: &str) -> bool {
        self.limits
            .get(queue)
            .is_some_and(|(_, own)| fleet_limited(&self.builder(own)))
    }

    /// Whether `queue`'s stored settings were read since it last went missing.
    pub fn is_read(&self, queue: &str) -> bool {
        self.read
            .get(queue)
            .is_none_or(|r| r.load(Ordering::Relaxed))
    }

    /// The first read, before the worker takes jobs: at most [`FIRST_READ`].
    pub async fn first_pass<B: Backend>(&self, backend: &B) {
        let all = async {
            for queue in self.limits.keys() {
                self.read(backend, queue).await;
            }
        };
        if tokio::time::timeout(FIRST_READ, all).await.is_err() {
            tracing::warn!(
                "the queues' settings could not be read in time: the worker starts with its own, and follows the stored ones once read"
            );
        }
    }
}

/// What [`Follow::read`] found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Found {
    /// The stored settings, read (and the builder's stored where none was).
    Read,
    /// The queue does not exist (yet).
    Missing,
    /// The read failed: the queue is served under the values the worker
    /// holds (its builder's, or those it read last) until a read passes,
    /// but for a queue limited across the fleet (by those values or the
    /// builder's), which is not leased from until then.
    Failed,
}

/// Whether `s` limits the queue across the fleet (a global concurrency or a
/// rate limit): its jobs are then leased only as they can start.
pub(crate) fn fleet_limited(s: &QueueSettings) -> bool {
    s.concurrency.is_some_and(|c| c.global.is_some())
        || s.rate_limit.is_some_and(|r| r.is_limited())
}

/// Follows the settings until `stop`: every queue at once when the settings'
/// version changes and every [`RECHECK`] (when it also trims the history),
/// the queues missing at the heartbeat's pace (`every`).
pub(crate) async fn init<B: Backend>(
    backend: B,
    follow: Arc<Follow>,
    mut changes: watch::Receiver<u64>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut queues: Vec<String> = follow.limits.keys().cloned().collect();
    queues.sort_unstable();
    let mut missing: HashSet<String> = HashSet::new();
    let mut next_recheck = Instant::now();
    let mut all = true;
    loop {
        let recheck = Instant::now() >= next_recheck;
        for queue in &queues {
            if !(all || recheck || missing.contains(queue)) {
                continue;
            }
            if follow.read(&backend, queue).await == Found::Read {
                missing.remove(queue);
            } else {
                missing.insert(queue.clone());
            }
            if recheck
                && !missing.contains(queue)
                && let Err(e) = backend.trim_history(queue).await
                && !matches!(e, Error::QueueNotFound { .. })
            {
                tracing::debug!(queue = %queue, error = %e, "could not trim the history; will try again");
            }
        }
        if recheck {
            next_recheck = Instant::now() + RECHECK;
        }
        all = false;
        let wake = if missing.is_empty() {
            next_recheck
        } else {
            (Instant::now() + every).min(next_recheck)
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(wake) => {}
            r = changes.changed() => {
                if r.is_err() {
                    // the worker is going away
                    stop.cancelled().await;
                    return;
                }
                all = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::settings::Concurrency;

    fn follow() -> Follow {
        Follow {
            limits: HashMap::new(),
            unlimited: 20,
            base: QueueSettings::default(),
            by: "worker w".into(),
            read: HashMap::new(),
            told: Mutex::default(),
            wakes: HashMap::new(),
            seen: Mutex::default(),
            bodies: HashMap::new(),
        }
    }

    #[test]
    fn the_stored_concurrency_is_in_force_else_the_builders() {
        let f = follow();
        let stored = |c| QueueSettings::concurrency(c);
        let three = stored(Concurrency::per_worker(3));
        let none = QueueSettings::default();
        // nothing stored (a backend that stores no settings): the builder's
        assert_eq!(f.size(&none, &three), 3);
        assert_eq!(f.size(&none, &none), 20);
        // stored: over the builder's, either way
        assert_eq!(f.size(&stored(Concurrency::per_worker(1)), &three), 1);
        assert_eq!(f.size(&stored(Concurrency::UNLIMITED), &three), 20);
        assert_eq!(f.size(&stored(Concurrency::global(2)), &three), 20);
        // never more than the worker holds
        assert_eq!(f.size(&stored(Concurrency::per_worker(500)), &none), 20);
    }
}
