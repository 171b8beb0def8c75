//! What a running job knows about itself.

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use crate::JobId;

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
        }
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

    /// Fires when the job should stop: timeout or worker shutdown past its grace period.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }
}
