//! A run's body: the batch's cancel check, decoding, the handler under its
//! timeout with panics caught, and the outcome it asks for.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use tokio::time::Instant;

use super::{Report, Run};
use crate::contract::attempts::AttemptOutcome;
use crate::job;
use crate::job::{JobContext, Outcome as Wants, panic_message};
use crate::worker::hooks::JobRun;
use crate::worker::leases::Leases;
use crate::worker::per_queue::PerQueue;
use crate::worker::recount::Limits;
use crate::worker::settle::Outcome;
use crate::worker::{MAX_DELAY, Shared};

pub(super) async fn run(
    r: &Run,
    queue: &Arc<str>,
    shared: &Shared,
    leases: &Leases,
    per_queue: &PerQueue,
    report: &mut Report,
    began: Instant,
) -> Outcome {
    let d = &r.delivery;
    let mut began = began;
    if let (Some(b), Some(access)) = (r.batch.as_deref(), &shared.batches) {
        match shared.cancelled_batches.is_cancelled(*b, access).await {
            Ok(true) => return crate::worker::cancelled::cancel(d, queue, *b, access).await,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(job.id = %d.id, batch = %b, error = %e, "reading whether the job's batch was cancelled failed; tried again in a second");
                return Outcome::Release {
                    delay: Duration::from_secs(1),
                };
            }
        }
        // the check may have asked Redis: the run begins after it
        began = Instant::now();
    }
    // a type's Deserialize may panic (a helper that unwraps, meeting a
    // changed schema): a body that cannot be decoded, every time
    let decoded =
        std::panic::catch_unwind(AssertUnwindSafe(|| job::decode_linked(r.linked, &d.body)))
            .unwrap_or_else(|panic| {
                let why = format!("decoding panicked: {}", panic_message(&*panic));
                Err(crate::Error::Decode(serde::de::Error::custom(why)))
            });
    let job = match decoded {
        Ok(job) => job,
        Err(crate::Error::UnknownJob { name }) => {
            record_name(&tracing::Span::current(), &name);
            let outcome = unknown(&name, r, shared);
            report.job = Some(Cow::Owned(name));
            return outcome;
        }
        Err(e) => {
            report.job = crate::contract::envelope::job_name(&d.body).map(Cow::Owned);
            if let Some(name) = &report.job {
                record_name(&tracing::Span::current(), name);
            }
            let error = format!("cannot run this body: {e}");
            tracing::error!(%error, "dead-lettered");
            return Outcome::Dead { error };
        }
    };
    tracing::Span::current().record("job.name", job.job_name());
    report.job = Some(Cow::Borrowed(job.job_name()));
    report.decoded = true;
    if r.linked.is_none() {
        leases.named(d.id, r.run, Some(job.job_name()));
    }
    // dropped apart: a Drop that panics changes no outcome
    let job = Decoded(Some(job));
    let cancel = &r.cancel;
    let attempt = d.token.attempt();
    let opts = job.job_options();
    let max_attempts = opts.max_attempts.min(crate::job::MAX_ATTEMPTS);
    report.limits = Some(Limits {
        max_attempts,
        backoff: Some(opts.backoff),
    });
    if attempt > max_attempts {
        let error = format!(
            "delivered {attempt} times, over max_attempts {max_attempts}: earlier deliveries never finished (the worker was killed or lost its lease, maybe before they started), were throttled too often in a row, or ran under a higher max_attempts than this release's"
        );
        tracing::error!(%error, "dead-lettered");
        return Outcome::Dead { error };
    }
    // a job unique until its run starts frees its key here, before its
    // handler (which may enqueue the key again); the run begins after it
    if crate::worker::unique_start::free_at_start(&*shared.unique_start, queue, d.id, &d.body).await
    {
        began = Instant::now();
    }
    let timeout = shared.job_timeout.unwrap_or(opts.timeout).min(MAX_DELAY);
    let ctx = JobContext::for_run(
        d.id,
        attempt,
        queue.clone(),
        d.id.sent_at().unwrap_or(SystemTime::UNIX_EPOCH),
        cancel.clone(),
        shared.data.clone(),
    )
    .with_body(r.batch.as_deref().copied(), &d.body)
    .with_batch_access(shared.batches.clone());
    // the run began before the job was decoded (a microsecond or so)
    let waited = Duration::from_millis(d.waited_ms) + began.saturating_duration_since(r.fetched);
    if shared.observer.active(&per_queue.metrics) {
        let run = JobRun::new(d.id, queue, job.job_name(), attempt, waited);
        report.metrics = shared.observer.started(&per_queue.metrics, &run);
        // the handler starts after the app's `started` hook: its timeout and
        // run time count from then
        if shared.observer.hooked() {
            began = Instant::now();
        }
    }
    report.started = Some((began, waited));
    let handler = AssertUnwindSafe(shared.sink.recording(job.perform_dyn(&ctx))).catch_unwind();
    // timed from `began`, the run's one clock read before it
    let limited = match began.checked_add(timeout) {
        Some(at) => tokio::time::timeout_at(at, handler),
        None => tokio::time::timeout(timeout, handler),
    };
    let result = tokio::select! {
        // a handler that finished as it was cancelled did its work: its outcome
        // stands (not a release that would run it again)
        biased;
        r = limited => r,
        _ = cancel.cancelled() => {
            tracing::info!("cancelled (lost lease, or shutdown past the grace period); released");
            return Outcome::Release { delay: Duration::ZERO };
        }

    };
    let (error, wants) = match result {
        Ok(Ok(Ok(result))) => {
            tracing::debug!("done");
            return Outcome::Ack { result };
        }
        // a handler that gave up because it was cancelled (shutdown past the
        // grace period, a lost lease) failed no attempt: released, as if
        // dropped (the timeout below cancels the token itself, after)
        Ok(_) if cancel.is_cancelled() => {
            tracing::info!(
                "stopped by its cancellation (lost lease, or shutdown past the grace period); released"
            );
            return Outcome::Release {
                delay: Duration::ZERO,
            };
        }
        Ok(Ok(Err(e))) => (e.chain(), e.outcome()),
        Ok(Err(panic)) => {
            report.failed = Some(AttemptOutcome::Panic);
            (
                format!("handler panicked: {}", panic_message(&*panic)),
                Wants::Retry,
            )
        }
        Err(_) => {
            // whatever the handler spawned learns of it through the token
            cancel.cancel();
            report.failed = Some(AttemptOutcome::Timeout);
            (format!("timed out after {timeout:?}"), Wants::Retry)
        }
    };
    if let Wants::RateLimited(asked) | Wants::KeyRateLimited(asked) = wants {
        let key = matches!(wants, Wants::KeyRateLimited(_));
        // not a failed attempt: the job and its queue wait, capped
        report.failed = Some(AttemptOutcome::Throttled);
        let delay = asked.min(shared.max_throttle);
        if delay < asked {
            tracing::warn!(%error, asked = ?asked, retry_in = ?delay, "throttled by a dependency; the wait is capped at max_throttle");
        } else {
            tracing::warn!(%error, retry_in = ?delay, "throttled by a dependency: the job and its queue wait");
        }
        // this worker holds the queue before the slot frees; the backend holds
        // it for every worker once settled (a key's throttle: the backend
        // holds the key's jobs back, which a worker leases none of; but a
        // type without a key throttles its queue, so it is held here too)
        let queue_wide = !key || opts.concurrency_key.is_none();
        let hold = queue_wide.then(|| per_queue.hold.throttle(delay));
        return Outcome::Throttle {
            delay,
            error,
            key,
            hold,
        };
    }
    let delay = match wants {
        Wants::Fatal => None,
        _ if attempt >= max_attempts => None,
        Wants::RetryAfter(d) => {
            report.limits = Some(Limits {
                max_attempts,
                backoff: None,
            });
            Some(d.min(MAX_DELAY))
        }
        _ => Some(shared.retry.delay(opts.backoff, attempt)),
    };
    match delay {
        Some(delay) => {
            tracing::warn!(%error, retry_in = ?delay, "failed; will retry");
            Outcome::Retry { delay, error }
        }
        None => {
            let error = if matches!(wants, Wants::Fatal) {
                format!("fatal: {error}")
            } else {
                format!("failed {attempt} of {max_attempts} attempts: {error}")
            };
            tracing::error!(%error, "dead-lettered");
            Outcome::Dead { error }
        }
    }
}

/// A decoded job, whose value is dropped apart from the run's outcome: a
/// `Drop` that panics is logged, and changes nothing.
struct Decoded(Option<Box<dyn job::DynJob>>);

impl std::ops::Deref for Decoded {
    type Target = dyn job::DynJob;

    fn deref(&self) -> &Self::Target {
        self.0.as_deref().expect("taken only when dropped")
    }
}

impl Drop for Decoded {
    fn drop(&mut self) {
        let job = self.0.take();
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || drop(job))) {
            tracing::error!(
                error = panic_message(&*panic),
                "dropping the job's value panicked; its outcome stands"
            );
        }
    }
}

/// A job type this worker does not know: in a rolling deploy, a newer worker
/// does. Put back without counting the delivery, for `unknown_jobs_retry_for`
/// after it was sent, waiting a tenth of its age (1 s to 5 min) each time; then
/// dead-lettered with the reason (at once when its id says it was sent
/// further ahead than that window, so it is never put back for longer).
fn unknown(name: &str, r: &Run, shared: &Shared) -> Outcome {
    let sent_ms = r.delivery.id.sent_ms();
    let now_ms = r.fetched_at_us / 1000;
    let window = shared.unknown_jobs_retry_for;
    // an id that says it was sent further ahead than the window would be put
    // back until then: a clock that stepped back, or an id another client made
    let ahead = Duration::from_millis(sent_ms.saturating_sub(now_ms));
    if !window.is_zero() && ahead > window {
        let error = format!(
            "unknown job type \"{name}\": no worker knows it, and its id says it was sent {:?} from now, further ahead than unknown_jobs_retry_for ({window:?}): a clock that stepped back, or an id not made by redjob or RSMQ; deploy the workers that define it, then move the dead letter back",
            Duration::from_secs(ahead.as_secs()),
        );
        tracing::error!(%error, "dead-lettered");
        return Outcome::Dead { error };
    }
    let age = Duration::from_millis(now_ms.saturating_sub(sent_ms));
    if age < window {
        let delay = (age / 10).clamp(Duration::from_secs(1), Duration::from_secs(300));
        tracing::warn!(job.name = name, ?age, retry_in = ?delay, "unknown job type: put back for a worker that knows it");
        return Outcome::Release { delay };
    }
    let error = format!(
        "unknown job type \"{name}\": no worker knows it, and it was sent {:?} ago, over unknown_jobs_retry_for ({:?}; a delayed job counts from its send too): deploy the workers that define it, then move the dead letter back",
        Duration::from_secs(age.as_secs()),
        shared.unknown_jobs_retry_for
    );
    tracing::error!(%error, "dead-lettered");
    Outcome::Dead { error }
}

/// The most bytes of a job type's name a span records: a name read from a
/// body that never decoded may be anything.
const MAX_SPAN_NAME: usize = 200;

/// Records `name`, the job type an envelope names, as the span's `job.name`,
/// cut to [`MAX_SPAN_NAME`] bytes at a character boundary.
pub(crate) fn record_name(span: &tracing::Span, name: &str) {
    let mut end = name.len().min(MAX_SPAN_NAME);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    span.record("job.name", &name[..end]);
}
