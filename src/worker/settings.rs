//! The settings stored with each of the worker's queues: its builder values
//! are stored where none is ([`Backend::init_settings`]), so the first
//! worker's values become the queue's, and from then on the stored ones are
//! in force for every worker; two workers with different values do not
//! fight and a deploy does not undo an operator's change. The worker follows
//! them: each queue's concurrency limit takes the stored value when it
//! starts, and again whenever its beat hears that settings changed (an
//! operator's [`Admin::set_settings`](crate::ops::Admin::set_settings)), or
//! every [`RECHECK`] in case that word was lost. A queue that does not exist
//! yet is tried again at the heartbeat's pace; one deleted and created again
//! gets the builder's values back. At the recheck's pace it also trims each
//! queue's history ([`Backend::trim_history`]), so a queue that settles
//! nothing more is trimmed too.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::limit::Limit;
use crate::contract::backend::Backend;
use crate::contract::settings::{Concurrency, QueueSettings};
use crate::error::Error;

/// How often a worker stores its settings again where they are stored already
/// (a no-op unless the queue lost them), and reads them back.
pub(crate) const RECHECK: Duration = Duration::from_secs(120);

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
    /// The builder's values for `queue`.
    fn builder(&self, limit: Option<usize>) -> QueueSettings {
        let mut s = self.base.clone();
        if let Some(n) = limit {
            s.concurrency = Some(Concurrency::per_worker(n.min(u32::MAX as usize) as u32));
        }
        s
    }

    /// Sizes `limit` as `stored` says.
    fn apply(&self, queue: &str, limit: &Limit, stored: &QueueSettings) {
        let size = stored
            .in_force()
            .concurrency
            .per_worker
            .map_or(self.unlimited, |n| (n as usize).min(self.unlimited));
        if limit.size() != size {
            tracing::info!(queue = %queue, limit = ?stored.in_force().concurrency.per_worker, "the queue's concurrency per worker is now in force");
            limit.resize(size);
        }
    }
}

/// Stores the builder's settings for each queue where none is stored, applies
/// what is stored, and trims the queues' history, until `stop` is cancelled:
/// at the heartbeat's pace (`every`) while a queue is missing, at once when
/// the settings' version changes, else every [`RECHECK`].
pub(crate) async fn init<B: Backend>(
    backend: B,
    mut follow: Follow,
    every: Duration,
    stop: CancellationToken,
) {
    let mut told = HashSet::new();
    let mut queues: Vec<String> = follow.limits.keys().cloned().collect();
    queues.sort_unstable();
    loop {
        let mut missing = false;
        for queue in &queues {
            if let Err(e) = backend.trim_history(queue).await
                && !matches!(e, Error::QueueNotFound { .. })
            {
                tracing::debug!(queue = %queue, error = %e, "could not trim the history; will try again");
            }
            let (limit, builder_limit) = &follow.limits[queue];
            let settings = follow.builder(*builder_limit);
            match backend.init_settings(queue, &settings, &follow.by).await {
                Ok(stored) => {
                    let overridden = settings
                        .encode()
                        .iter()
                        .zip(stored.encode())
                        .any(|(mine, theirs)| mine.is_some() && *mine != theirs);
                    if overridden && told.insert(queue.clone()) {
                        tracing::info!(
                            queue = %queue,
                            stored = ?stored,
                            builder = ?settings,
                            "the queue's stored settings are in force over this worker's"
                        );
                    }
                    follow.apply(queue, limit, &stored);
                }
                Err(Error::QueueNotFound { .. }) => missing = true,
                Err(e) => {
                    missing = true;
                    tracing::warn!(queue = %queue, error = %e, "could not store the worker's settings; will retry");
                }
            }
        }
        let wait = if missing { every } else { RECHECK };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            r = follow.changes.changed() => {
                if r.is_err() {
                    // the worker is going away
                    stop.cancelled().await;
                    return;
                }
            }
        }
    }
}
