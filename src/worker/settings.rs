//! The worker's builder settings, stored with each of its queues where none is
//! stored ([`Backend::init_settings`]): the first worker's values become the
//! queue's, and from then on the stored ones are in force for every worker, so
//! two workers with different values do not fight and a deploy does not undo
//! an operator's change. A queue that does not exist yet is tried again at the
//! heartbeat's pace until it does.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::contract::backend::Backend;
use crate::contract::settings::QueueSettings;
use crate::error::Error;

/// Stores `settings` for each of `queues` where none is stored; returns once
/// every queue has settings stored, or when `stop` is cancelled.
pub(crate) async fn init<B: Backend>(
    backend: B,
    mut queues: Vec<String>,
    settings: QueueSettings,
    every: Duration,
    stop: CancellationToken,
) {
    if settings.is_empty() {
        return;
    }
    loop {
        let mut missing = Vec::new();
        for queue in queues {
            match backend.init_settings(&queue, &settings).await {
                Ok(stored) if !stored.is_empty() && stored != settings => tracing::info!(
                    queue = %queue,
                    stored = ?stored,
                    builder = ?settings,
                    "the queue's stored settings are in force over this worker's"
                ),
                Ok(_) => {}
                Err(Error::QueueNotFound { .. }) => missing.push(queue),
                Err(e) => {
                    tracing::warn!(queue = %queue, error = %e, "could not store the worker's settings; will retry");
                    missing.push(queue);
                }
            }
        }
        if missing.is_empty() {
            return;
        }
        queues = missing;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
