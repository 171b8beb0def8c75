//! What a running job knows about itself.

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use crate::job::batch::BatchAccess;
use crate::job::cancel::RunCancel;
use crate::job::data::Data;
use crate::{JobId, Result};

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
    cancel: Arc<RunCancel>,
    data: Data,
    batch: Option<crate::contract::batches::BatchId>,
    batch_done: Option<Arc<crate::contract::batches::BatchStatus>>,
    access: Option<BatchAccess>,
}

impl JobContext {
    /// A context with a fresh cancellation token.
    pub fn new(
        id: JobId,
        attempt: u32,
        queue: impl Into<Arc<str>>,
        enqueued_at: SystemTime,
    ) -> Self {
        Self::for_run(
            id,
            attempt,
            queue.into(),
            enqueued_at,
            Arc::default(),
            Data::default(),
        )
    }

    /// The context of a worker's run: its token and the worker's data, given
    /// (not made and then replaced: two allocations a job).
    pub(crate) fn for_run(
        id: JobId,
        attempt: u32,
        queue: Arc<str>,
        enqueued_at: SystemTime,
        cancel: Arc<RunCancel>,
        data: Data,
    ) -> Self {
        JobContext {
            id,
            attempt,
            queue,
            enqueued_at,
            cancel,
            data,
            batch: None,
            batch_done: None,
            access: None,
        }
    }

    /// How the job reaches its batch (the worker's backend).
    pub(crate) fn with_batch_access(mut self, access: Option<BatchAccess>) -> Self {
        self.access = access;
        self
    }

    /// The job's way to its batch, when a worker runs it.
    pub(crate) fn batch_access(&self) -> Option<&BatchAccess> {
        self.access.as_ref()
    }

    /// What the job's stored body says beyond its arguments: the batch it
    /// belongs to (read already), and the batch status a callback carries.
    pub(crate) fn with_body(
        mut self,
        batch: Option<crate::contract::batches::BatchId>,
        body: &[u8],
    ) -> Self {
        self.batch = batch;
        self.batch_done = crate::contract::batches::done_of(body).map(Arc::new);
        self
    }

    /// The batch this job belongs to (see
    /// [`Client::batch`](crate::Client::batch)); `None` for a job enqueued
    /// alone.
    ///
    /// ```
    /// use redjob::JobContext;
    /// use std::time::SystemTime;
    ///
    /// let id: redjob::JobId = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    /// let ctx = JobContext::new(id, 1, "mail", SystemTime::now());
    /// assert!(ctx.batch().is_none());
    /// ```
    pub fn batch(&self) -> Option<crate::contract::batches::BatchId> {
        self.batch
    }

    /// In a batch's callback: the batch's status when the callback was
    /// enqueued (its id, total, succeeded, dead, cancelled); `None` in any
    /// other job.
    ///
    /// ```
    /// use redjob::JobContext;
    /// use std::time::SystemTime;
    ///
    /// let id: redjob::JobId = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    /// let ctx = JobContext::new(id, 1, "mail", SystemTime::now());
    /// assert!(ctx.batch_status().is_none());
    /// ```
    pub fn batch_status(&self) -> Option<&crate::contract::batches::BatchStatus> {
        self.batch_done.as_deref()
    }

    /// In a flow's parent (see [`Flow`](crate::client::Flow)) or a batch's callback:
    /// the results its children (the batch's jobs) returned, by index in the
    /// order they were added, `None` for one that returned none (a job
    /// without `#[job(output)]`, or one that did not succeed). Each is read
    /// as `T`: use [`serde_json::Value`] for children of several types.
    /// They are as many as the batch's jobs as stored (those added while it
    /// ran too), whatever total the job's body says. Fails outside such a
    /// job, and with [`InvalidValue`](crate::Error::InvalidValue) when the
    /// batch is not there: past its retention (7 days after it completed),
    /// or never was (a body another client wrote, naming no batch).
    ///
    /// ```
    /// use redjob::JobContext;
    /// use std::time::SystemTime;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let id: redjob::JobId = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    /// let ctx = JobContext::new(id, 1, "albums", SystemTime::now());
    /// assert!(ctx.child_results::<u32>().await.is_err()); // not a parent
    /// # }
    /// ```
    pub async fn child_results<T: serde::de::DeserializeOwned>(&self) -> Result<Vec<Option<T>>> {
        let (Some(done), Some(read)) = (self.batch_done.as_deref(), &self.access) else {
            return Err(crate::Error::InvalidValue {
                what: "child results",
                reason: "only a flow's parent or a batch's callback, run by a worker, has them"
                    .into(),
            });
        };
        let id: crate::contract::batches::BatchId = done.id.parse()?;
        // the batch's total as stored, not the one the body carries: any
        // client can send a body claiming any total (and the stored one
        // counts the jobs added since the callback was enqueued)
        let total = read
            .0
            .status(id)
            .await?
            .ok_or_else(|| crate::contract::batches::no_batch(&id))?
            .total;
        let mut out: Vec<Option<T>> = (0..total).map(|_| None).collect();
        let mut from = 0u64;
        while from < total {
            let n = (total - from).min(1000) as usize;
            for (i, r) in read.0.results(id, from, n).await? {
                if let Some(slot) = usize::try_from(i).ok().and_then(|i| out.get_mut(i)) {
                    *slot = Some(serde_json::from_slice(&r)?);
                }
            }
            from += n as u64;
        }
        Ok(out)
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
        self.cancel = Arc::new(RunCancel::with(token));
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
    /// Values are found by type. One given as `Arc<T>` is found both as `T`
    /// and as `Arc<T>` (ask for the `Arc` to clone it into a task you spawn);
    /// one given as `T` only as `T` (there is no `Arc<T>` to lend). When a `T`
    /// and an `Arc<T>` were both given, `data::<T>()` gets the `T`. The worker
    /// keeps every value behind an `Arc` of its own, so a value needs no `Arc`
    /// to be shared; `.data(Arc::new(pool))` is found all the same because it is
    /// the usual way to write it, and a lookup that missed it would read as a
    /// missing value (with `.ok()`, silently).
    ///
    /// A value the worker was not given is a set-up mistake, not a passing
    /// failure: [`Error::MissingData`](crate::Error::MissingData) turned into a
    /// [`JobError`](crate::JobError) with `?` is fatal, so the job is
    /// dead-lettered at once (and logged at error level) instead of being
    /// retried 25 times. Its message names the type asked for and the types the
    /// worker holds: `no value of type Cache was given to the worker (it holds:
    /// Arc<Pool>, u64)`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use std::time::SystemTime;
    /// # use redjob::JobContext;
    /// struct Config { greeting: &'static str }
    /// struct Pool { size: u32 }
    ///
    /// let id = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    /// let ctx = JobContext::new(id, 1, "default", SystemTime::UNIX_EPOCH)
    ///     .with_data(Config { greeting: "hello" })
    ///     .with_data(Arc::new(Pool { size: 8 }));
    /// assert_eq!(ctx.data::<Config>().unwrap().greeting, "hello");
    /// // given as an `Arc`: found as `Pool` and as `Arc<Pool>`
    /// assert_eq!(ctx.data::<Pool>().unwrap().size, 8);
    /// let pool: Arc<Pool> = ctx.data::<Arc<Pool>>().unwrap().clone();
    /// # let _ = pool;
    /// let err = ctx.data::<String>().unwrap_err();
    /// assert!(err.to_string().starts_with(
    ///     "no value of type String was given to the worker (it holds: Arc<Pool>, Config)"
    /// ));
    /// ```
    pub fn data<T: Send + Sync + 'static>(&self) -> Result<&T> {
        self.data.require::<T>()
    }

    /// The run's cancellation token (tokio-util's [`CancellationToken`]). It
    /// fires when the run should stop: the job's timeout passed, the job was
    /// cancelled ([`Inspect::cancel`](crate::inspect::Inspect::cancel)) or
    /// deleted while it ran, its lease was lost, or the worker shuts down past
    /// its grace period.
    ///
    /// The handler's own `.await`s need nothing: once the token fires the
    /// worker drops the handler's future at its next `.await` (a timeout then
    /// counts as a failed attempt; after a shutdown or a lost lease the job
    /// runs again, from the start; a cancelled or deleted job does not). What does not
    /// stop with that future is work it handed elsewhere: a `spawn_blocking`
    /// closure, a spawned task, a loop that does not await. Such work watches
    /// the token, with `is_cancelled()` between steps or `cancelled().await`
    /// in a `tokio::select!`; clone it to move it into a task. The handler may
    /// cancel the token itself, to stop such tasks: that cancels nothing of
    /// the run, whose outcome is what the handler returns.
    ///
    /// ```
    /// # use std::time::SystemTime;
    /// use redjob::{Job, JobContext, JobError};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Job)]
    /// #[job(name = "doc_resize_all", timeout = "10m")]
    /// struct ResizeAll { images: Vec<String> }
    ///
    /// fn resize(_image: &str) { /* CPU work, a blocking library call */ }
    ///
    /// impl Job for ResizeAll {
    ///     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
    ///         // a thread of its own, which the worker cannot stop: it checks
    ///         // the token between images
    ///         let token = ctx.cancellation().clone();
    ///         let images = self.images.clone();
    ///         tokio::task::spawn_blocking(move || {
    ///             for image in &images {
    ///                 if token.is_cancelled() {
    ///                     return Err("stopped before the last image");
    ///                 }
    ///                 resize(image);
    ///             }
    ///             Ok(())
    ///         })
    ///         .await??;
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let id = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
    /// let ctx = JobContext::new(id, 1, "default", SystemTime::UNIX_EPOCH);
    /// ctx.cancellation().cancel(); // as a timeout or a shutdown would
    /// let job = ResizeAll { images: vec!["a.png".into()] };
    /// let err = job.perform(&ctx).await.unwrap_err();
    /// assert_eq!(err.to_string(), "stopped before the last image");
    /// # }
    /// ```
    pub fn cancellation(&self) -> &CancellationToken {
        self.cancel.token()
    }
}
