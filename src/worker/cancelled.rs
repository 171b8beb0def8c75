//! Jobs of a cancelled batch: cancelled as they are fetched, not started.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::settle::Outcome;
use crate::contract::batches::BatchId;
use crate::contract::leases::Delivery;
use crate::job::BatchAccess;

/// How long a batch's state read here stands before it is read again.
const FRESH: Duration = Duration::from_secs(1);
/// Most batches remembered before the stale ones are forgotten.
const REMEMBERED: usize = 1000;

/// One batch's state as last read: when, and whether it was cancelled.
type Known = Arc<tokio::sync::Mutex<Option<(Instant, bool)>>>;

/// Which batches were cancelled, as this worker last read them: each read
/// at most once a second, however many of its jobs start (those starting
/// while it is read wait for the read).
#[derive(Default)]
pub(crate) struct CancelledBatches(Mutex<HashMap<BatchId, Known>>);

impl CancelledBatches {
    /// Whether batch `id` was cancelled: as last read when that was under a
    /// second ago (or it said cancelled), else read now.
    pub(crate) async fn is_cancelled(&self, id: BatchId, access: &BatchAccess) -> bool {
        let now = Instant::now();
        let known = {
            let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if all.len() >= REMEMBERED && !all.contains_key(&id) {
                // forgotten: those no job holds (read again when needed)
                all.retain(|_, k| Arc::strong_count(k) > 1);
            }
            all.entry(id).or_default().clone()
        };
        let mut state = known.lock().await;
        if let Some((at, said)) = *state
            && (said || now.duration_since(at) < FRESH)
        {
            return said;
        }
        let said = match access.0.status(id).await {
            Ok(s) => s.is_some_and(|s| s.cancelled_at_ms.is_some()),
            Err(e) => {
                tracing::warn!(batch = %id, error = %e, "reading whether a batch was cancelled failed; its jobs run");
                false
            }
        };
        *state = Some((Instant::now(), said));
        said
    }
}

/// Cancels delivery `d` of `queue`, a job of cancelled batch `batch`, rather
/// than start it: the cancel counts it in its batch, and its run is released
/// (a fenced settle of a job no longer there changes nothing). Should the
/// cancel fail, the job goes back for a second later.
pub(crate) async fn cancel(
    d: &Delivery,
    queue: &str,
    batch: BatchId,
    access: &BatchAccess,
) -> Outcome {
    let by = format!("batch {batch} cancelled");
    match access.0.cancel_job(queue.to_string(), d.id, by).await {
        Ok(_) => {
            tracing::info!(job.id = %d.id, %batch, "its batch was cancelled: cancelled, not started");
            Outcome::Release {
                delay: Duration::ZERO,
            }
        }
        Err(e) => {
            tracing::warn!(job.id = %d.id, %batch, error = %e, "cancelling a job of a cancelled batch failed; tried again in a second");
            Outcome::Release {
                delay: Duration::from_secs(1),
            }
        }
    }
}
