//! A failed run's retry, decided again under the delivery count it is
//! settled with: a re-delivery of the job to the worker running it is merged
//! into the run (RELIABILITY.md, "One run per job per worker") and counts
//! toward the job's `max_attempts`, though the run decided under its own.

use std::time::Duration;

use super::retry::RetryPolicy;
use super::settle::Outcome;

/// A failed run's most attempts and backoff.
#[derive(Clone, Copy)]
pub(crate) struct Limits {
    /// The job type's `max_attempts` (at most [`MAX_ATTEMPTS`](crate::job::MAX_ATTEMPTS)).
    pub max_attempts: u32,
    /// The backoff's base; `None` when the retry's delay does not depend on
    /// the attempt (the handler's `retry_after`).
    pub backoff: Option<Duration>,
}

/// A panic on the worker's path before the job type was known: retried
/// after 1 s, up to the most attempts any type may have.
pub(crate) const PANIC_LIMITS: Limits = Limits {
    max_attempts: crate::job::MAX_ATTEMPTS,
    backoff: None,
};

/// The delay of a panic's retry when the job type's backoff is not known.
pub(crate) const PANIC_DELAY: Duration = Duration::from_secs(1);

/// A retry decided under the run's own delivery count (`attempt` less one or
/// more), decided again under the count of the delivery it is settled with
/// (`attempt`: a re-delivery merged into the run, see RELIABILITY.md "One run
/// per job per worker"): dead-lettered with its error once the job has had
/// its most attempts, else retried after the backoff of that attempt. Runs
/// under the lease table's lock, and only after a merge: `heard`, what the
/// hooks hear, is made the same. Returns whether it was dead-lettered
/// (`None`: not a retry, left as it was).
pub(crate) fn recount(
    outcome: &mut Outcome,
    attempt: u32,
    limits: Limits,
    retry: &RetryPolicy,
    heard: Option<&mut Outcome>,
) -> Option<bool> {
    let Outcome::Retry { delay, error } = outcome else {
        return None;
    };
    let max_attempts = limits.max_attempts;
    let dead = attempt >= max_attempts;
    if dead {
        let error = format!("failed {attempt} of {max_attempts} attempts: {error}");
        *outcome = Outcome::Dead { error };
    } else if let Some(base) = limits.backoff {
        *delay = retry.delay(base, attempt);
    }
    if let Some(heard) = heard {
        heard.clone_from(outcome);
    }
    Some(dead)
}
