//! What a running job knows about itself.

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use crate::worker::data::Data;
use crate::{Error, JobId, Result};

/// The context of one job execution: its id, attempt, queue, enqueue time and a
/// cancellation token that fires on timeout or when the worker gives up on it.
///
/// Workers build it; tests of a handler can build one with [`JobContext::new`]:
///
/// ```
/// use std::time::SystemTime;
/// use redjob::{JobContext, JobId};
///
/// let id: JobId = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
/// let ctx = JobContext::new(id, 1, "default", SystemTime::UNIX_EPOCH);
/// assert_eq!(ctx.attempt(), 1);
/// assert!(!ctx.cancellation().is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct JobContext {
    id: JobId,
    attempt: u32,
    queue: Arc<str>,
    enqueued_at: SystemTime,
    cancel: CancellationToken,
    data: Data,
}

impl JobContext {
    /// A context with a fresh cancellation token.
    pub fn new(
        id: JobId,
        attempt: u32,
        queue: impl Into<Arc<str>>,
        enqueued_at: SystemTime,
    ) -> Self {
        JobContext {
            id,
            attempt,
            queue: queue.into(),
            enqueued_at,
            cancel: CancellationToken::new(),
            data: Data::default(),
        }
    }

    /// Adds a shared value for [`JobContext::data`] (workers do this from
    /// `Worker::builder(..).data(value)`; tests of a handler call it directly).
    pub fn with_data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data = self.data.with(value);
        self
    }

    pub(crate) fn with_data_map(mut self, data: Data) -> Self {
        self.data = data;
        self
    }

    /// Uses this cancellation token (a child of the worker's, say).
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.id
    }

    /// Which delivery this is, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The queue the job came from.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// When the job was enqueued (Redis time, from the id).
    pub fn enqueued_at(&self) -> SystemTime {
        self.enqueued_at
    }

    /// The shared value of type `T` the worker was given with `.data(value)`, the
    /// way axum's `State` works.
    ///
    /// A value the worker was not given is a set-up mistake, not a passing
    /// failure: [`Error::MissingData`] turned into a [`JobError`](crate::JobError)
    /// with `?` is fatal, so the job is dead-lettered at once with the type's name
    /// (and logged at error level) instead of being retried 25 times.
    ///
    /// ```
    /// # use std::time::SystemTime;
    /// # use redjob::JobContext;
    /// struct Config { greeting: &'static str }
    ///
    /// let id = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    /// let ctx = JobContext::new(id, 1, "default", SystemTime::UNIX_EPOCH)
    ///     .with_data(Config { greeting: "hello" });
    /// assert_eq!(ctx.data::<Config>().unwrap().greeting, "hello");
    /// assert!(ctx.data::<String>().is_err());
    /// ```
    pub fn data<T: Send + Sync + 'static>(&self) -> Result<&T> {
        self.data.get::<T>().ok_or(Error::MissingData {
            type_name: std::any::type_name::<T>(),
        })
    }

    /// Fires when the job should stop: timeout or worker shutdown past its grace period.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }
}
