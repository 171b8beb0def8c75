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
//! gets the builder's values back. At the recheck's pace it also trims each
//! queue's history ([`Backend::trim_history`]), so a queue that settles
//! nothing more is trimmed too.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::limit::Limit;
use crate::contract::backend::Backend;
use crate::contract::settings::{Concurrency, QueueSettings};
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
    /// Each queue's limit, with the builder's value for it.
    pub limits: HashMap<String, (Arc<Limit>, Option<usize>)>,
    /// A limit's size when none is set: all the worker holds.
    pub unlimited: usize,
    /// The builder's values for every queue (but the concurrency).
    pub base: QueueSettings,
    /// Who stores the builder's values (`worker <id>`).
    pub by: String,
    /// The settings' version the beats hear: a change reads them again.
    pub changes: watch::Receiver<u64>,
}

impl Follow {
    /// The builder's values for a queue whose builder limit is `limit`.
    fn builder(&self, limit: Option<usize>) -> QueueSettings {
        let mut s = self.base.clone();
        if let Some(n) = limit {
            s.concurrency = Some(Concurrency::per_worker(n.min(u32::MAX as usize) as u32));
        }
        s
    }

    /// The size of a queue's limit: the stored concurrency, else the
    /// builder's (a backend that stores no settings), at most all the worker
    /// holds.
    fn size(&self, stored: &QueueSettings, builder: Option<usize>) -> usize {
        let limit = match stored.concurrency {
            Some(c) => c.per_worker.map(|n| n as usize),
            None => builder,
        };
        limit.map_or(self.unlimited, |n| n.min(self.unlimited))
    }

    /// Stores the builder's values for `queue` where none is and sizes its
    /// limit as the stored ones say; whether the queue exists.
    async fn read<B: Backend>(&self, backend: &B, queue: &str, told: &mut HashSet<String>) -> bool {
        let (limit, builder_limit) = &self.limits[queue];
        let settings = self.builder(*builder_limit);
        match backend.init_settings(queue, &settings, &self.by).await {
            Ok(stored) => {
                let overridden = settings
                    .encode()
                    .iter()
                    .zip(stored.encode())
                    .any(|(mine, theirs)| mine.is_some() && theirs.is_some() && *mine != theirs);
                if overridden && told.insert(queue.to_string()) {
                    tracing::info!(
                        queue = %queue,
                        stored = ?stored,
                        builder = ?settings,
                        "the queue's stored settings are in force over this worker's"
                    );
                }
                let size = self.size(&stored, *builder_limit);
                if limit.size() != size {
                    tracing::info!(queue = %queue, limit = size, "the queue's concurrency per worker is now in force");
                    limit.resize(size);
                }
                true
            }
            Err(Error::QueueNotFound { .. }) => false,
            Err(e) => {
                tracing::warn!(queue = %queue, error = %e, "could not read the queue's settings; will retry");
                false
            }
        }
    }

    /// The first read, before the worker takes jobs: at most [`FIRST_READ`].
    pub async fn first_pass<B: Backend>(&self, backend: &B) {
        let mut told = HashSet::new();
        let all = async {
            for queue in self.limits.keys() {
                self.read(backend, queue, &mut told).await;
            }
        };
        if tokio::time::timeout(FIRST_READ, all).await.is_err() {
            tracing::warn!(
                "the queues' settings could not be read in time: the worker starts with its own, and follows the stored ones once read"
            );
        }
    }
}

/// Follows the settings until `stop`: every queue at once when the settings'
/// version changes and every [`RECHECK`] (when it also trims the history),
/// the queues missing at the heartbeat's pace (`every`).
pub(crate) async fn init<B: Backend>(
    backend: B,
    mut follow: Follow,
    every: Duration,
    stop: CancellationToken,
) {
    let mut told = HashSet::new();
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
            if follow.read(&backend, queue, &mut told).await {
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
            r = follow.changes.changed() => {
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

    fn follow() -> Follow {
        Follow {
            limits: HashMap::new(),
            unlimited: 20,
            base: QueueSettings::default(),
            by: "worker w".into(),
            changes: watch::channel(0).1,
        }
    }

    #[test]
    fn the_stored_concurrency_is_in_force_else_the_builders() {
        let f = follow();
        let stored = |c| QueueSettings::concurrency(c);
        // nothing stored (a backend that stores no settings): the builder's
        assert_eq!(f.size(&QueueSettings::default(), Some(3)), 3);
        assert_eq!(f.size(&QueueSettings::default(), None), 20);
        // stored: over the builder's, either way
        assert_eq!(f.size(&stored(Concurrency::per_worker(1)), Some(3)), 1);
        assert_eq!(f.size(&stored(Concurrency::UNLIMITED), Some(3)), 20);
        // never more than the worker holds
        assert_eq!(f.size(&stored(Concurrency::per_worker(500)), None), 20);
    }
}
