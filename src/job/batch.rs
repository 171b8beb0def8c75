//! What a running job does with its batch: add jobs to it while it runs.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::contract::batches::{BatchId, BatchStatus, MAX_ADD};
use crate::contract::queues::{SendMessage, When, validate};
use crate::job::{self, Job, JobContext};
use crate::{Error, JobId, Result};

/// A batch's results read: (index, result) pairs.
pub(crate) type Results = BoxFuture<'static, Result<Vec<(u64, Vec<u8>)>>>;

/// What a job reaches of its batch, through the worker's backend.
pub(crate) trait BatchOps: Send + Sync {
    /// How batch `id` stands, as stored; `None` when unknown (or past its
    /// retention).
    fn status(&self, id: BatchId) -> BoxFuture<'static, Result<Option<BatchStatus>>>;
    /// The results batch `id`'s jobs returned: (from, limit).
    fn results(&self, id: BatchId, from: u64, limit: usize) -> Results;
    /// Adds jobs to batch `id` while it runs.
    fn add(&self, id: BatchId, jobs: Vec<(String, SendMessage)>) -> BoxFuture<'static, Result<()>>;
    /// Batches cancelled, listed after score `after`, with their scores.
    fn cancelled(&self, after: u64) -> BoxFuture<'static, Result<Vec<(BatchId, u64)>>>;
    /// Cancels job `id` of `queue` (its batch was cancelled).
    fn cancel_job(&self, queue: String, id: JobId, by: String) -> BoxFuture<'static, Result<bool>>;
}

/// A worker's way to a job's batch, for [`JobContext::child_results`] and
/// [`JobContext::add_to_batch`].
#[derive(Clone)]
pub(crate) struct BatchAccess(pub(crate) Arc<dyn BatchOps>);

impl std::fmt::Debug for BatchAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchAccess")
    }
}

/// Refuses `job` as a batch's job or callback (`what`) when its type is
/// unique or it has a concurrency key: both are sent without them, so such
/// a job would run beside a copy, or past its key's `per_key`.
pub(crate) fn refuse_unique_or_keyed<J: Job>(job: &J, what: &'static str) -> Result<()> {
    if J::OPTIONS.unique.is_some()
        || J::OPTIONS.unique_for.is_some()
        || job.concurrency_key()?.is_some()
    {
        return Err(Error::InvalidValue {
            what,
            reason: format!(
                "{:?} is unique or has a concurrency key: batches do not take such jobs yet",
                J::NAME
            ),
        });
    }
    Ok(())
}

/// A batch job's queue and message: at its type's priority, after the
/// queue's delay; a unique or keyed type is refused.
pub(crate) fn batch_member<J: Job>(queue: &str, job: &J) -> Result<(String, SendMessage)> {
    refuse_unique_or_keyed(job, "batch job")?;
    validate::queue_name(queue)?;
    Ok((
        queue.to_string(),
        SendMessage {
            body: job::encode(job)?,
            when: When::QueueDelay,
            priority: J::OPTIONS.priority,
            unique: None,
            keyed: None,
        },
    ))
}

impl JobContext {
    /// In a job of a batch (or a flow's child the flow enqueued; a job added
    /// with [`Flow::after`](crate::client::Flow::after) is no job of that
    /// flow's batch, and adds to the batch it was enqueued in, if any): adds
    /// `job` to the batch, at its type's queue and priority. The batch's total grows
    /// before the job is sent, so the batch completes (and a flow's parent
    /// runs) only once it finishes too; it is counted, and its result kept,
    /// like the batch's other jobs. A job may add jobs as long as its batch
    /// runs, which it does while the job itself has not finished.
    ///
    /// Each attempt adds its jobs: a job that adds jobs and then fails adds
    /// them again when it is retried. Add them as the last step of a
    /// handler, after the work that may fail, or make the added jobs
    /// idempotent. Fails outside a batch's job run by a worker, for a batch
    /// that completed or was [cancelled](crate::Client::cancel_batch), and
    /// for a unique or keyed job type.
    ///
    /// ```
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "doc_crawl_page")]
    /// struct CrawlPage { url: String }
    ///
    /// impl Job for CrawlPage {
    ///     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
    ///         let links: Vec<String> = Vec::new(); // the page's links
    ///         // the batch that crawls the site waits for these pages too
    ///         let pages: Vec<CrawlPage> = links.into_iter().map(|url| CrawlPage { url }).collect();
    ///         ctx.add_all_to_batch(&pages).await?;
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let ctx = JobContext::new("0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap(), 1, "default", std::time::SystemTime::now());
    /// // outside a batch's job run by a worker, adding fails
    /// assert!(ctx.add_to_batch(&CrawlPage { url: "/".into() }).await.is_err());
    /// # }
    /// ```
    pub async fn add_to_batch<J: Job>(&self, job: &J) -> Result<()> {
        self.add_to_batch_in(J::OPTIONS.queue, job).await
    }

    /// [`add_to_batch`](Self::add_to_batch) into `queue` instead of the job
    /// type's.
    pub async fn add_to_batch_in<J: Job>(&self, queue: &str, job: &J) -> Result<()> {
        self.add_messages(vec![batch_member(queue, job)?]).await
    }

    /// [`add_to_batch`](Self::add_to_batch) for every job of `jobs`, in
    /// order: one call to the backend per 1,000 jobs.
    pub async fn add_all_to_batch<J: Job>(&self, jobs: &[J]) -> Result<()> {
        let msgs = jobs
            .iter()
            .map(|j| batch_member(J::OPTIONS.queue, j))
            .collect::<Result<Vec<_>>>()?;
        self.add_messages(msgs).await
    }

    async fn add_messages(&self, mut msgs: Vec<(String, SendMessage)>) -> Result<()> {
        let (Some(batch), Some(access)) = (self.batch(), self.batch_access()) else {
            return Err(Error::InvalidValue {
                what: "batch",
                reason: "only a batch's job run by a worker adds jobs to its batch".into(),
            });
        };
        while !msgs.is_empty() {
            let rest = msgs.split_off(msgs.len().min(MAX_ADD));
            access.0.add(batch, msgs).await?;
            msgs = rest;
        }
        Ok(())
    }
}
