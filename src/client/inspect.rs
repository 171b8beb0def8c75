//! [`Inspect`](crate::inspect::Inspect) and [`Admin`](crate::ops::Admin) on a
//! [`Client`]: the same operations on its backend.

use super::Client;
use crate::contract::admin::{Admin, admin_methods};
use crate::contract::inspect::{Inspect, inspect_methods};

inspect_methods! {
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
    impl Inspect for Client, |self| &self.backend;
}

admin_methods! { impl Admin for Client, |self| &self.backend; }
