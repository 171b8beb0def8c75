//! [`Inspect`] on a [`Client`]: the same operations on its backend.

use super::Client;
use crate::inspect::{Cancelled, Cursor, Inspect, JobInfo, JobState, Page, StateCounts};
use crate::{JobId, Result};

/// ```
/// use redjob::inspect::{Cancelled, Inspect};
/// use redjob::{Client, Job, JobContext, JobError};
/// use redjob::backend::memory::MemoryBackend;
///
/// #[derive(Job, serde::Serialize, serde::Deserialize)]
/// struct Digest { user: u64 }
/// impl Job for Digest {
///     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let client = Client::memory(MemoryBackend::new());
/// let id = client.enqueue(&Digest { user: 7 }).await?;
/// let job = client.job("default", &id).await?.expect("queued");
/// assert_eq!(job.decode::<Digest>()?.user, 7);
/// assert_eq!(client.cancel("default", &id).await?, Cancelled::Removed);
/// # Ok(()) }
/// ```
impl Inspect for Client {
    async fn counts(&self, queue: &str) -> Result<StateCounts> {
        self.backend.counts(queue).await
    }
    async fn peek(&self, queue: &str, n: usize) -> Result<Vec<JobInfo>> {
        self.backend.peek(queue, n).await
    }
    async fn job(&self, queue: &str, id: &JobId) -> Result<Option<JobInfo>> {
        self.backend.job(queue, id).await
    }
    async fn list(
        &self,
        queue: &str,
        state: JobState,
        after: Option<&Cursor>,
        n: usize,
    ) -> Result<Page> {
        self.backend.list(queue, state, after, n).await
    }
    async fn cancel(&self, queue: &str, id: &JobId) -> Result<Cancelled> {
        self.backend.cancel(queue, id).await
    }
}
