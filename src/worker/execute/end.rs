//! What a run tells its end hooks and metrics: the report filled in as it
//! goes, and how it ended.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::RunEnv;
use crate::JobId;
use crate::contract::attempts::AttemptOutcome;
use crate::worker::hooks::{CancelReason, JobRun, UNDECODABLE};
use crate::worker::metrics::JobMetrics;
use crate::worker::observe::End;
use crate::worker::recount::Limits;
use crate::worker::settle::Outcome;

/// What hooks and metrics need to know of a run, filled in as it goes.
#[derive(Default)]
pub(super) struct Report {
    /// The job type, once known.
    pub(super) job: Option<Cow<'static, str>>,
    /// When the handler started, and how long the job had waited by then.
    pub(super) started: Option<(Instant, Duration)>,
    /// The handles `Observer::started` returned.
    pub(super) metrics: Option<Arc<JobMetrics>>,
    /// How the attempt failed, when not by the handler's error: a panic or a
    /// timeout.
    pub(super) failed: Option<AttemptOutcome>,
    /// The envelope decoded into its job.
    pub(super) decoded: bool,
    /// The job type's most attempts and backoff, once known: a panic on the
    /// worker's path (not the handler's) is retried under them, and a retry
    /// decided again under them (see [`recount`](crate::worker::recount::recount)).
    pub(super) limits: Option<Limits>,
}

/// What the end hooks and metrics are told of a run that ended (see
/// [`tell_end`]).
pub(super) struct Ended {
    pub(super) id: JobId,
    /// The attempt it is settled as.
    pub(super) attempt: u32,
    /// How it ended.
    pub(super) heard: Outcome,
    pub(super) report: Report,
    /// When it ended.
    pub(super) at: Instant,
    pub(super) span: Option<tracing::Span>,
}

/// Tells the end hooks and metrics how a run ended: `finished`, its outcome
/// is settled; else why not.
pub(super) fn tell_end(env: &RunEnv, e: Ended, finished: Result<(), CancelReason>) {
    let Ended {
        id,
        attempt,
        heard,
        report,
        at: ended,
        span: job_span,
    } = e;
    let RunEnv {
        queue,
        shared,
        per_queue,
        ..
    } = env;
    let took = report
        .started
        .map(|(at, _)| ended.saturating_duration_since(at));
    let end = match (&finished, &heard) {
        // stopped before its handler started, or put back for another worker
        (_, Outcome::Release { .. }) | (Err(_), _) if took.is_none() => return,
        (Err(why), _) => End::Cancelled(*why),
        // cancelled by the shutdown, or by a lost lease whose job was then
        // delivered here again (merged into this run)
        (Ok(()), Outcome::Release { .. }) if per_queue.abort.is_cancelled() => {
            End::Cancelled(CancelReason::Shutdown)
        }
        (Ok(()), Outcome::Release { .. }) => End::Cancelled(CancelReason::LeaseLost),
        (Ok(()), Outcome::Ack { .. }) => End::Succeeded,
        (Ok(()), Outcome::Retry { delay, error }) => End::Retried {
            error,
            retry_in: *delay,
        },
        (Ok(()), Outcome::Dead { error }) => End::Dead { error },
        (Ok(()), Outcome::Throttle { delay, .. }) => End::Throttled { retry_in: *delay },
    };
    let job = report.job.as_deref().unwrap_or(UNDECODABLE);
    let waited = report.started.map_or(Duration::ZERO, |(_, w)| w);
    let run = JobRun::new(id, queue, job, attempt, waited);
    let ended = || {
        shared
            .observer
            .ended(&per_queue.metrics, report.metrics, &run, took, end)
    };
    match job_span {
        Some(span) => span.in_scope(ended),
        None => ended(),
    }
}
