//! Freeing the unique key of a job enqueued unique until its run starts
//! ([`UniqueUntil::Start`](crate::queue::UniqueUntil::Start)) as a run of it
//! starts, before its handler: the handler may enqueue the key again.

use futures::future::BoxFuture;

use crate::contract::backend::Backend;
use crate::contract::envelope::unique_until_start;
use crate::{JobId, Result};

/// The worker's way to [`Backend::unique_started`], without its backend's type.
pub(crate) trait UniqueStart: Send + Sync {
    /// Frees the key job `id` of `queue` holds, if it still does.
    fn free(&self, queue: &str, id: JobId) -> BoxFuture<'static, Result<()>>;
}

/// [`UniqueStart`] through a backend.
pub(crate) struct Through<B>(pub B);

impl<B: Backend> UniqueStart for Through<B> {
    fn free(&self, queue: &str, id: JobId) -> BoxFuture<'static, Result<()>> {
        let (b, queue) = (self.0.clone(), queue.to_owned());
        Box::pin(async move { b.unique_started(&queue, &id).await })
    }
}

/// Frees the key of job `id` when its body says it is held until its run
/// starts (its envelope's last member; for any other job, a look at the
/// body's last bytes and nothing more). Returns whether it asked the backend.
/// A failure is logged and the run goes on: the key is then held until the
/// job is done or the next run's start (a retry's, a re-delivery's) frees
/// it, rather than the run waiting or failing.
pub(crate) async fn free_at_start(
    access: &dyn UniqueStart,
    queue: &str,
    id: JobId,
    body: &[u8],
) -> bool {
    if !unique_until_start(body) {
        return false;
    }
    if let Err(e) = access.free(queue, id).await {
        tracing::warn!(error = %e, "could not free the unique key as the run started: it is held until the job is done or the next run's start");
    }
    true
}
