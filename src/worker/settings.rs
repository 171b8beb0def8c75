//! The worker's builder settings, stored with each of its queues where none is
//! stored ([`Backend::init_settings`]): the first worker's values become the
//! queue's, and from then on the stored ones are in force for every worker, so
//! two workers with different values do not fight and a deploy does not undo
//! an operator's change. A queue that does not exist yet is tried again at the
//! heartbeat's pace; one that has settings stored is checked again every
//! [`RECHECK`], so a queue deleted and created again gets them back. At that
//! pace it also trims each queue's history ([`Backend::trim_history`]), so a
//! queue that settles nothing more is trimmed too.

use std::collections::HashSet;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::contract::backend::Backend;
use crate::contract::settings::QueueSettings;
use crate::error::Error;

/// How often a worker stores its settings again where they are stored already
/// (a no-op unless the queue lost them).
pub(crate) const RECHECK: Duration = Duration::from_secs(120);

/// Stores `settings` for each of `queues` where none is stored (nothing when
/// the builder set none) and trims their history, until `stop` is
/// cancelled: at the heartbeat's pace (`every`) while a queue is missing,
/// else every [`RECHECK`].
pub(crate) async fn init<B: Backend>(
    backend: B,
    queues: Vec<String>,
    settings: QueueSettings,
    every: Duration,
    stop: CancellationToken,
) {
    let mut told = HashSet::new();
    loop {
        let mut missing = false;
        for queue in &queues {
            if let Err(e) = backend.trim_history(queue).await
                && !matches!(e, Error::QueueNotFound { .. })
            {
                tracing::debug!(queue = %queue, error = %e, "could not trim the history; will try again");
            }
            if settings.is_empty() {
                continue;
            }
            match backend.init_settings(queue, &settings).await {
                Ok(stored) if !stored.is_empty() && stored != settings => {
                    if told.insert(queue.clone()) {
                        tracing::info!(
                            queue = %queue,
                            stored = ?stored,
                            builder = ?settings,
                            "the queue's stored settings are in force over this worker's"
                        );
                    }
                }
                Ok(_) => {}
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
        }
    }
}
