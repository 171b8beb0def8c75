//! Running one delivery: decode, handler with timeout and panic capture, outcome.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::SystemTime;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Shared;
use super::dispatch::PerQueue;
use super::settle::{Event, Outcome};
use crate::backend::Delivery;
use crate::job::{self, JobContext, Outcome as Wants};

/// Gives the slot back to the worker and the queue, even if the task is dropped.
pub(crate) struct SlotGuard {
    pub shared: Arc<Shared>,
    pub queue_slots: Option<Arc<tokio::sync::Semaphore>>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.shared.slots.add_permits(1);
        if let Some(q) = &self.queue_slots {
            q.add_permits(1);
        }
    }
}

pub(crate) async fn execute(
    d: Delivery,
    queue: Arc<str>,
    shared: Arc<Shared>,
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    cancel: CancellationToken,
    per_queue: Arc<PerQueue>,
    _slot: SlotGuard,
) {
    let attempt = d.token.attempt();
    // a prefetched job waits for a running slot; shutdown releases it unstarted
    let running = tokio::select! {
        biased;
        _ = per_queue.stop.cancelled() => None,
        _ = cancel.cancelled() => None,
        p = shared.running.acquire() => p.ok(),
    };
    let outcome = match running {
        None => Outcome::Release,
        Some(_permit) => {
            let span = tracing::info_span!("job", job.id = %d.id, job.name = tracing::field::Empty, queue = %queue, attempt);
            let started = tokio::time::Instant::now();
            let outcome = run(&d, &queue, &shared, cancel).instrument(span).await;
            per_queue.ran(started.elapsed());
            outcome
        }
    };
    let _ = tx.send(Event::Finished { id: d.id, outcome });
}

async fn run(
    d: &Delivery,
    queue: &Arc<str>,
    shared: &Shared,
    cancel: CancellationToken,
) -> Outcome {
    let attempt = d.token.attempt();
    let job = match job::decode(&d.body) {
        Ok(job) => job,
        Err(e) => {
            let error = format!("cannot run this body: {e}");
            tracing::error!(%error, "dead-lettered");
            return Outcome::Dead { error };
        }
    };
    tracing::Span::current().record("job.name", job.job_name());
    let opts = job.job_options();
    if attempt > opts.max_attempts {
        let error = format!(
            "delivered {attempt} times, over max_attempts {}: earlier runs never finished (worker killed or lease lost)",
            opts.max_attempts
        );
        tracing::error!(%error, "dead-lettered");
        return Outcome::Dead { error };
    }
    let timeout = shared.job_timeout.unwrap_or(opts.timeout);
    let ctx = JobContext::new(
        d.id,
        attempt,
        queue.clone(),
        d.id.sent_at().unwrap_or(SystemTime::UNIX_EPOCH),
    )
    .with_cancellation(cancel.clone())
    .with_data_map(shared.data.clone());
    let handler = AssertUnwindSafe(job.perform_dyn(&ctx)).catch_unwind();
    let result = tokio::select! {
        r = tokio::time::timeout(timeout, handler) => r,
        _ = cancel.cancelled() => {
            tracing::info!("cancelled (lost lease, or shutdown past the grace period); released");
            return Outcome::Release;
        }

    };
    let (error, wants) = match result {
        Ok(Ok(Ok(()))) => {
            tracing::debug!("done");
            return Outcome::Ack;
        }
        Ok(Ok(Err(e))) => (e.to_string(), e.outcome()),
        Ok(Err(panic)) => (
            format!("handler panicked: {}", panic_message(&*panic)),
            Wants::Retry,
        ),
        Err(_) => (format!("timed out after {timeout:?}"), Wants::Retry),
    };
    let delay = match wants {
        Wants::Fatal => None,
        _ if attempt >= opts.max_attempts => None,
        Wants::RetryAfter(d) => Some(d),
        _ => Some(shared.retry.delay(opts.backoff, attempt)),
    };
    match delay {
        Some(delay) => {
            tracing::warn!(%error, retry_in = ?delay, "failed; will retry");
            Outcome::Retry { delay }
        }
        None => {
            let error = if matches!(wants, Wants::Fatal) {
                format!("fatal: {error}")
            } else {
                format!(
                    "failed {attempt} of {} attempts: {error}",
                    opts.max_attempts
                )
            };
            tracing::error!(%error, "dead-lettered");
            Outcome::Dead { error }
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
