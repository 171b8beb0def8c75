//! What a handler returns when it fails.

use std::fmt;
use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed job run: retried with backoff, retried after a set time, or fatal.
///
/// Any error converts with `?` and is retried with the job's backoff:
///
/// ```
/// use std::time::Duration;
/// use redjob::JobError;
/// use redjob::job::Outcome;
///
/// fn parse(s: &str) -> Result<u32, JobError> {
///     Ok(s.parse::<u32>()?)
/// }
/// assert_eq!(parse("x").unwrap_err().outcome(), Outcome::Retry);
/// let later = JobError::retry_after("rate limited", Duration::from_secs(60));
/// assert_eq!(later.outcome(), Outcome::RetryAfter(Duration::from_secs(60)));
/// assert_eq!(JobError::fatal("no such user").outcome(), Outcome::Fatal);
/// ```
pub struct JobError {
    outcome: Outcome,
    error: BoxError,
}

/// What the worker does with a failed job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Retry after the job's backoff (if attempts remain).
    Retry,
    /// Retry after this long (if attempts remain).
    RetryAfter(Duration),
    /// Do not retry: dead-letter now.
    Fatal,
}

impl JobError {
    /// Retry with the job's backoff.
    pub fn retry(error: impl Into<BoxError>) -> Self {
        JobError {
            outcome: Outcome::Retry,
            error: error.into(),
        }
    }

    /// Retry after `delay` instead of the backoff.
    pub fn retry_after(error: impl Into<BoxError>, delay: Duration) -> Self {
        JobError {
            outcome: Outcome::RetryAfter(delay),
            error: error.into(),
        }
    }

    /// Do not retry; the job goes to the dead-letter queue with this error.
    pub fn fatal(error: impl Into<BoxError>) -> Self {
        JobError {
            outcome: Outcome::Fatal,
            error: error.into(),
        }
    }

    /// What the worker will do.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(e: E) -> Self {
        JobError::retry(e)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("outcome", &self.outcome)
            .field("error", &self.error)
            .finish()
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}
