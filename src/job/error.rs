//! What a handler returns when it fails.

use std::fmt;
use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed job run: retried with backoff, retried after a set time, or fatal.
///
/// `?` converts what converts into `Box<dyn Error + Send + Sync>`, and the job is
/// retried with its backoff: every `std::error::Error + Send + Sync` type, an
/// `anyhow::Error` (or `eyre::Report`), a boxed error, a `String` or a `&str`.
/// (`Box<dyn Error>` without `Send + Sync` cannot cross into the worker's tasks.)
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
    /// A dependency throttles the job (an HTTP 429 with `Retry-After`): put
    /// back after this long without counting the attempt, and its queue
    /// starts no job until then (see [`JobError::rate_limited`]).
    RateLimited(Duration),
    /// A dependency throttles the job's concurrency key (say, one account's
    /// API quota): as [`RateLimited`](Self::RateLimited), but only the jobs
    /// of its key wait (see [`JobError::rate_limited_key`]).
    KeyRateLimited(Duration),
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

    /// A dependency throttles the job, as an HTTP 429 with `Retry-After`
    /// says: the job goes back, due after `retry_after`, and its queue starts
    /// no job until then across every worker. The attempt does not count,
    /// unless the job was throttled [`throttle_limit`](crate::worker::WorkerBuilder::throttle_limit)
    /// times in a row (20 by default), so that a job cannot bounce for ever.
    ///
    /// A throttle is apart from an operator's pause: resuming a queue does not
    /// end a throttle, and a throttle's end does not resume a paused queue.
    /// A worker caps it at [`max_throttle`](crate::worker::WorkerBuilder::max_throttle)
    /// (5 minutes by default) and logs it at warn.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::JobError;
    /// use redjob::job::Outcome;
    ///
    /// let e = JobError::rate_limited(Duration::from_secs(30));
    /// assert_eq!(e.outcome(), Outcome::RateLimited(Duration::from_secs(30)));
    /// assert_eq!(e.to_string(), "rate limited: retry after 30s");
    /// ```
    pub fn rate_limited(retry_after: Duration) -> Self {
        JobError {
            outcome: Outcome::RateLimited(retry_after),
            error: format!("rate limited: retry after {retry_after:?}").into(),
        }
    }

    /// A dependency throttles the job's concurrency key, not its whole queue
    /// (one account's quota at an API that others share): as
    /// [`rate_limited`](Self::rate_limited), but only the jobs of the job's
    /// [concurrency key](crate::queue::Keyed) start no job until then, across
    /// every worker; other keys run on. A job without a key throttles its
    /// queue.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::JobError;
    /// use redjob::job::Outcome;
    ///
    /// let e = JobError::rate_limited_key(Duration::from_secs(30));
    /// assert_eq!(e.outcome(), Outcome::KeyRateLimited(Duration::from_secs(30)));
    /// ```
    pub fn rate_limited_key(retry_after: Duration) -> Self {
        JobError {
            outcome: Outcome::KeyRateLimited(retry_after),
            error: format!("rate limited: retry after {retry_after:?}").into(),
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

/// `?` on any error a `Box<dyn Error + Send + Sync>` can hold: retried with the
/// job's backoff.
///
/// ```
/// use redjob::JobError;
///
/// // a std error
/// fn port(s: &str) -> Result<u16, JobError> {
///     Ok(s.parse::<u16>()?)
/// }
/// assert_eq!(port("x").unwrap_err().to_string(), "invalid digit found in string");
///
/// // anyhow
/// fn fetch() -> anyhow::Result<()> {
///     anyhow::bail!("upstream returned 503")
/// }
/// fn job_anyhow() -> Result<(), JobError> {
///     fetch()?;
///     Ok(())
/// }
/// assert_eq!(job_anyhow().unwrap_err().to_string(), "upstream returned 503");
///
/// // a boxed error
/// fn boxed() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     Err("disk full".into())
/// }
/// fn job_boxed() -> Result<(), JobError> {
///     boxed()?;
///     Ok(())
/// }
/// assert_eq!(job_boxed().unwrap_err().to_string(), "disk full");
///
/// // a String, and a &str
/// fn job_string(user: Option<u64>) -> Result<u64, JobError> {
///     let user = user.ok_or(format!("no user in {:?}", "payload"))?;
///     Ok(user)
/// }
/// assert_eq!(job_string(None).unwrap_err().to_string(), "no user in \"payload\"");
/// fn job_str(ok: bool) -> Result<(), JobError> {
///     ok.then_some(()).ok_or("not ready")?;
///     Ok(())
/// }
/// assert_eq!(job_str(false).unwrap_err().to_string(), "not ready");
/// ```
///
/// One exception: [`Error::MissingData`](crate::Error::MissingData) (a handler
/// asked [`JobContext::data`](crate::JobContext::data) for a value the worker
/// was not given) is a configuration error that no retry fixes, so it is fatal.
impl<E: Into<BoxError>> From<E> for JobError {
    fn from(e: E) -> Self {
        let error = e.into();
        let outcome = match error.downcast_ref::<crate::Error>() {
            Some(crate::Error::MissingData { .. }) => Outcome::Fatal,
            _ => Outcome::Retry,
        };
        JobError { outcome, error }
    }
}

impl JobError {
    /// The error and its chain of causes, `outer: cause: root cause` (a cause
    /// whose text the error's own already ends with is not repeated).
    ///
    /// ```
    /// use redjob::JobError;
    ///
    /// let io = std::io::Error::other("connection reset");
    /// #[derive(Debug)]
    /// struct Send(std::io::Error);
    /// impl std::fmt::Display for Send {
    ///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    ///         f.write_str("sending the mail failed")
    ///     }
    /// }
    /// impl std::error::Error for Send {
    ///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
    ///         Some(&self.0)
    ///     }
    /// }
    /// let e = JobError::retry(Send(io));
    /// assert_eq!(e.chain(), "sending the mail failed: connection reset");
    /// ```
    pub fn chain(&self) -> String {
        let mut text = self.error.to_string();
        let mut cause = self.error.source();
        while let Some(c) = cause {
            let part = c.to_string();
            if !text.ends_with(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            cause = c.source();
        }
        text
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

/// A panic's message, as a worker records it (`handler panicked: <this>`).
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
