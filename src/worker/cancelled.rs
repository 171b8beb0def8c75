//! Jobs of a cancelled batch: cancelled as they are fetched, not started.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::settle::Outcome;
use crate::Result;
use crate::contract::batches::BatchId;
use crate::contract::leases::Delivery;
use crate::job::BatchAccess;

/// How long the list of cancelled batches read here stands.
const FRESH: Duration = Duration::from_secs(1);
/// Most pages of it read at once (the rest a second later).
const PAGES: usize = 10;
/// How long a cancelled batch is remembered here (the list keeps a week).
const WEEK_MS: u64 = 7 * 24 * 3600 * 1000;

/// The batches cancelled, as this worker last read them: read at most once
/// a second (one command, however many batches its jobs belong to), and
/// only while it starts batch jobs. Each read goes on from the last score
/// seen: the list's scores grow with each batch listed, so none is missed.
#[derive(Default)]
pub(crate) struct CancelledBatches(tokio::sync::Mutex<Known>);

#[derive(Default)]
struct Known {
    read_at: Option<Instant>,
    /// The last score read.
    after: u64,
    /// Each batch read, with its score and, once its hash said so, whether
    /// it is cancelled indeed.
    ids: HashMap<BatchId, (u64, Option<bool>)>,
}

impl CancelledBatches {
    /// Whether batch `id` was cancelled, as last read (read again when that
    /// was a second ago or more; jobs starting meanwhile wait for it) and
    /// as its batch says: a listed batch is confirmed against its status
    /// (once: a cancel stays, as does a completion without one), since a
    /// cancel that lost the race with the batch's completion listed it for
    /// a moment, and a worker keeps what it read for a week. Only jobs of
    /// listed batches pay that read. `Err` when the status could not be
    /// read.
    pub(crate) async fn is_cancelled(&self, id: BatchId, access: &BatchAccess) -> Result<bool> {
        match self.listed(id, access).await {
            None | Some(Some(false)) => return Ok(false),
            Some(Some(true)) => return Ok(true),
            Some(None) => {}
        }
        let cancelled = match access.0.status(id).await? {
            Some(s) if s.cancelled_at_ms.is_some() => Some(true),
            // completed, not cancelled: it never will be
            Some(s) if s.completed_ms.is_some() => Some(false),
            // listed by a cancel that has not marked it yet (or failed
            // to): not cancelled so far; asked again at its next job
            Some(_) => None,
            // gone past its retention: as the list says
            None => Some(true),
        };
        if let Some(c) = cancelled
            && let Some(entry) = self.0.lock().await.ids.get_mut(&id)
        {
            entry.1 = Some(c);
        }
        Ok(cancelled.unwrap_or(false))
    }

    /// Whether batch `id` is listed, with what its status said if read.
    async fn listed(&self, id: BatchId, access: &BatchAccess) -> Option<Option<bool>> {
        let mut known = self.0.lock().await;
        if known.read_at.is_none_or(|at| at.elapsed() >= FRESH) {
            for _ in 0..PAGES {
                match access.0.cancelled(known.after).await {
                    Ok(page) => {
                        let full = page.len() >= 1000;
                        for (b, score) in page {
                            known.ids.entry(b).or_insert((score, None)).0 = score;
                            known.after = known.after.max(score);
                        }
                        if !full {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "reading the cancelled batches failed; their jobs run until it works");
                        break;
                    }
                }
            }
            let oldest = known.after.saturating_sub(WEEK_MS);
            known.ids.retain(|_, (score, _)| *score >= oldest);
            known.read_at = Some(Instant::now());
        }
        known.ids.get(&id).map(|(_, confirmed)| *confirmed)
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
