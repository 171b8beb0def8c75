//! Enqueueing a batch: jobs counted as they finish, with callbacks enqueued
//! once when the batch is done.

use super::Client;
use crate::contract::backend::Backend;
use crate::contract::batches::{
    BatchId, BatchRef, BatchSpec, BatchStatus, Callback, CallbackKind, with_batch,
};
use crate::contract::queues::{SendMessage, validate};
use crate::job::{self, Job, batch_member};
use crate::{Error, JobId, Result};

/// The most bytes a batch's description holds.
const MAX_DESCRIPTION: usize = 1024;

/// A batch being put together: its jobs and its callbacks, enqueued by
/// [`enqueue`](Self::enqueue). Take one with [`Client::batch`].
///
/// Each job goes to its type's queue at its type's priority (after the queue's delay),
/// and is counted once it succeeds or dies (a retried job is not finished
/// until then). The callbacks are jobs too, enqueued once each however many
/// workers finish the batch's last jobs together: `on_complete` when every
/// job has finished, `on_success` when every job succeeded, `on_death` when
/// the first job dies. A callback reads the batch's status with
/// [`JobContext::batch_status`](crate::JobContext::batch_status).
///
/// ```
/// # use redjob::{Client, Job, JobContext, JobError};
/// # use serde::{Deserialize, Serialize};
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "batch_doc_resize", queue = "images")]
/// struct Resize { image: u32 }
/// # impl Job for Resize {
/// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
///
/// #[derive(Serialize, Deserialize, Job)]
/// #[job(name = "batch_doc_album", queue = "albums")]
/// struct BuildAlbum { album: u32 }
/// impl Job for BuildAlbum {
///     async fn perform(&self, ctx: &JobContext) -> Result<(), JobError> {
///         let done = ctx.batch_status().expect("a batch callback");
///         println!("{} of {} resized", done.succeeded, done.total);
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let client = Client::memory(redjob::backend::memory::MemoryBackend::new());
/// let id = client
///     .batch()
///     .description("album 7")
///     .on_complete(&BuildAlbum { album: 7 })
///     .jobs(&(0..100).map(|image| Resize { image }).collect::<Vec<_>>())
///     .enqueue()
///     .await?;
/// let status = client.batch_status(&id).await?.expect("just enqueued");
/// assert_eq!((status.total, status.pending()), (100, 100));
/// # Ok(()) }
/// ```
#[must_use = "a batch is enqueued by .enqueue().await"]
pub struct BatchBuilder<'c> {
    client: &'c Client,
    description: Option<String>,
    callbacks: Vec<Result<Callback>>,
    /// Each job's queue and message.
    jobs: Vec<Result<(String, SendMessage)>>,
}

impl Client {
    /// Starts a batch: add its jobs and callbacks, then
    /// [`enqueue`](BatchBuilder::enqueue) it.
    pub fn batch(&self) -> BatchBuilder<'_> {
        BatchBuilder {
            client: self,
            description: None,
            callbacks: Vec::new(),
            jobs: Vec::new(),
        }
    }

    /// How batch `id` stands: its counts, whether it completed and when;
    /// `None` for an unknown batch or one past its retention (7 days after
    /// it completed).
    pub async fn batch_status(&self, id: &BatchId) -> Result<Option<BatchStatus>> {
        self.backend.batch_status(id).await
    }

    /// Batches, newest first: `limit` (1 to 1,000) opened before `before_ms`
    /// (Unix ms; the newest with `None`), and a full page also the rest of
    /// those opened in its last one's millisecond (so that it may hold a few
    /// more; up to 1,000 of one millisecond). Page on with the last one's
    /// `created_ms`: every batch is on one page, also when many were opened
    /// in one millisecond (those of it after a page's end were on none). On
    /// Redis a page can also come back short (even empty) while older
    /// batches are kept, when it read past 1,000 entries of batches past
    /// their retention that no worker's sweep dropped yet: the same call
    /// made again goes on past them (see
    /// [`Backend::batches`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redjob::Result<()> {
    /// use redjob::backend::memory::{Clock, MemoryBackend};
    ///
    /// // a clock that stands still: all three in one millisecond, one page
    /// let clock = Clock::frozen_at(std::time::SystemTime::now());
    /// let client = redjob::Client::memory(MemoryBackend::with_clock(clock));
    /// for _ in 0..3 {
    ///     client.batch().enqueue().await?;
    /// }
    /// let page = client.batches(None, 2).await?;
    /// assert_eq!(page.len(), 3);
    /// let older = client.batches(Some(page[2].created_ms), 2).await?;
    /// assert!(older.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn batches(&self, before_ms: Option<u64>, limit: usize) -> Result<Vec<BatchStatus>> {
        let mut page = self.backend.batches(before_ms, limit).await?;
        let Some(last) = page
            .last()
            .map(|s| s.created_ms)
            .filter(|_| page.len() == limit)
        else {
            return Ok(page);
        };
        // those of its last millisecond come first among the batches opened
        // up to it, in the order the page had them: read a few past them,
        // more only when that millisecond holds more
        let at_last = page
            .iter()
            .rev()
            .take_while(|s| s.created_ms == last)
            .count();
        let mut n = (at_last + 8).min(crate::contract::inspect::MAX_PAGE);
        let rest = loop {
            let more = self
                .backend
                .batches(Some(last.saturating_add(1)), n)
                .await?;
            let whole = more.len() < n || more.last().is_some_and(|s| s.created_ms != last);
            if whole || n == crate::contract::inspect::MAX_PAGE {
                break more;
            }
            n = (n * 4).min(crate::contract::inspect::MAX_PAGE);
        };
        page.retain(|s| s.created_ms != last);
        page.extend(rest.into_iter().take_while(|s| s.created_ms == last));
        Ok(page)
    }

    /// Cancels batch `id`: it takes no more jobs, and workers cancel its
    /// jobs as they fetch them rather than start them (each counted as
    /// cancelled, as [`cancel`](crate::inspect::Inspect::cancel) would), so
    /// the batch completes once its running jobs finish and its waiting
    /// ones come due. Jobs already running go on. A flow's batch cancelled
    /// cancels its parent. Returns whether it was cancelled now (`false`:
    /// unknown, completed or cancelled already).
    ///
    /// ```
    /// # use redjob::{Client, Job, JobContext, JobError};
    /// # use serde::{Deserialize, Serialize};
    /// # #[derive(Serialize, Deserialize, Job)]
    /// # #[job(name = "cancel_batch_doc")]
    /// # struct Resize { image: u32 }
    /// # impl Job for Resize {
    /// #     async fn perform(&self, _: &JobContext) -> Result<(), JobError> { Ok(()) }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let client = Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// let id = client.batch().job(&Resize { image: 1 }).enqueue().await?;
    /// assert!(client.cancel_batch(&id).await?);
    /// let status = client.batch_status(&id).await?.expect("just enqueued");
    /// assert!(status.cancelled_at_ms.is_some());
    /// # Ok(()) }
    /// ```
    pub async fn cancel_batch(&self, id: &BatchId) -> Result<bool> {
        self.backend.batch_cancel(id).await
    }

    /// Batch `id`'s dead jobs in order of death, (queue, job id): at most
    /// `limit` (1 to 1,000; a batch keeps its first 1,000). Each is a dead
    /// letter of its queue while the queue keeps it.
    pub async fn batch_dead(&self, id: &BatchId, limit: usize) -> Result<Vec<(String, JobId)>> {
        self.backend.batch_dead(id, limit).await
    }
}

impl<'c> BatchBuilder<'c> {
    /// What the batch is, for operators (at most 1,024 bytes). Defaults to
    /// none.
    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    fn callback<J: Job>(mut self, kind: CallbackKind, queue: &str, job: &J) -> Self {
        self.callbacks.push(
            // sent with no unique key nor concurrency key: refused
            crate::job::refuse_unique_or_keyed(job, "batch callback")
                .and_then(|()| validate::queue_name(queue))
                .and_then(|()| validate::priority(J::OPTIONS.priority))
                .and_then(|()| job::encode(job))
                // at its type's priority, as an enqueue of it is
                .map(|body| Callback::new(kind, queue, body).at_priority(J::OPTIONS.priority)),
        );
        self
    }

    /// Enqueues `job` once every job of the batch has finished (succeeded or
    /// died). Defaults to none. A callback (this one or another) whose type
    /// is unique or has a concurrency key is refused at
    /// [`enqueue`](Self::enqueue): it would be sent without them.
    pub fn on_complete<J: Job>(self, job: &J) -> Self {
        self.callback(CallbackKind::Complete, J::OPTIONS.queue, job)
    }

    /// [`on_complete`](Self::on_complete) into `queue` instead of the job
    /// type's.
    pub fn on_complete_in<J: Job>(self, queue: &str, job: &J) -> Self {
        self.callback(CallbackKind::Complete, queue, job)
    }

    /// Enqueues `job` once every job of the batch has succeeded. Defaults to
    /// none.
    pub fn on_success<J: Job>(self, job: &J) -> Self {
        self.callback(CallbackKind::Success, J::OPTIONS.queue, job)
    }

    /// [`on_success`](Self::on_success) into `queue` instead of the job
    /// type's.
    pub fn on_success_in<J: Job>(self, queue: &str, job: &J) -> Self {
        self.callback(CallbackKind::Success, queue, job)
    }

    /// Enqueues `job` when the batch's first job dies. Defaults to none.
    pub fn on_death<J: Job>(self, job: &J) -> Self {
        self.callback(CallbackKind::Death, J::OPTIONS.queue, job)
    }

    /// [`on_death`](Self::on_death) into `queue` instead of the job type's.
    pub fn on_death_in<J: Job>(self, queue: &str, job: &J) -> Self {
        self.callback(CallbackKind::Death, queue, job)
    }

    /// Adds `job` to the batch. A job whose type is unique or has a
    /// concurrency key is refused at [`enqueue`](Self::enqueue).
    pub fn job<J: Job>(mut self, job: &J) -> Self {
        self.jobs.push(batch_member(J::OPTIONS.queue, job));
        self
    }

    /// Adds every job of `jobs`, in order.
    pub fn jobs<J: Job>(mut self, jobs: &[J]) -> Self {
        self.jobs
            .extend(jobs.iter().map(|j| batch_member(J::OPTIONS.queue, j)));
        self
    }

    /// [`job`](Self::job) into `queue` instead of the job type's.
    pub fn job_in<J: Job>(mut self, queue: &str, job: &J) -> Self {
        self.jobs.push(batch_member(queue, job));
        self
    }

    /// Opens the batch, sends its jobs (one round trip per queue, as
    /// [`Client::enqueue_batch`]) and seals it; returns its id. A batch whose
    /// enqueue failed part way is cancelled, as well as the failure allows
    /// ([`Client::cancel_batch`]): its jobs sent so far are cancelled when
    /// fetched, and it never completes (it was not sealed), so its
    /// callbacks never fire. Once the seal landed it succeeds: a callback
    /// the seal made due and could not send here is sent by a worker's
    /// sweep.
    pub async fn enqueue(self) -> Result<BatchId> {
        if self.client.inline.is_some() {
            return Err(Error::InvalidValue {
                what: "batch",
                reason: "an inline client runs jobs at once and keeps no batch".into(),
            });
        }
        if self
            .description
            .as_ref()
            .is_some_and(|d| d.len() > MAX_DESCRIPTION)
        {
            return Err(Error::InvalidValue {
                what: "batch description",
                reason: format!("over {MAX_DESCRIPTION} bytes"),
            });
        }
        let callbacks = self.callbacks.into_iter().collect::<Result<Vec<_>>>()?;
        for (i, c) in callbacks.iter().enumerate() {
            if callbacks[..i].iter().any(|o| o.kind == c.kind) {
                return Err(Error::InvalidValue {
                    what: "batch callback",
                    reason: format!("two {:?} callbacks", c.kind),
                });
            }
        }
        let jobs = self.jobs.into_iter().collect::<Result<Vec<_>>>()?;
        let id = BatchId(fresh_id(&self.client.backend));
        let backend = &self.client.backend;
        // cancelled should this enqueue be dropped part way (see Opened)
        let mut opened = super::flow::Opened::new(self.client);
        opened.groups.push(id);
        backend
            .batch_open(&BatchSpec {
                id,
                callbacks,
                description: self.description,
                members: jobs.len() as u64,
            })
            .await?;
        let sent = send_members(
            self.client,
            id,
            jobs.into_iter()
                .enumerate()
                .map(|(i, (q, m))| (i as u64, q, m))
                .collect(),
        )
        .await;
        let sealed = match sent {
            Ok(total) => backend.batch_seal(&id, total).await,
            Err(e) => Err(e),
        };
        if let Err(e) = sealed {
            // enqueued part way: cancelled, its jobs sent so far cancelled
            // when fetched
            super::flow::cancel_partial(self.client, &id).await;
            opened.groups.clear();
            return Err(super::flow::whole(e));
        }
        opened.groups.clear();
        Ok(id)
    }
}

/// Sends batch `id`'s jobs (index, queue, message), each body naming its
/// place in the batch: one call per queue and priority, as
/// [`Client::enqueue_batch`]. Returns how many.
pub(super) async fn send_members(
    client: &Client,
    id: BatchId,
    jobs: Vec<(u64, String, SendMessage)>,
) -> Result<u64> {
    let mut queues: Vec<(String, Vec<SendMessage>)> = Vec::new();
    for (index, queue, mut msg) in jobs {
        msg.body = with_batch(&msg.body, &BatchRef { batch: id, index });
        match queues.iter_mut().find(|(q, _)| *q == queue) {
            Some((_, msgs)) => msgs.push(msg),
            None => queues.push((queue, vec![msg])),
        }
    }
    let mut total = 0u64;
    for (queue, mut msgs) in queues {
        // a send call is one priority: sorted by it, highest first
        msgs.sort_by_key(|m| std::cmp::Reverse(m.priority));
        total += msgs.len() as u64;
        client
            .backend
            .send(&queue, &msgs, &client.queue_defaults)
            .await?;
    }
    Ok(total)
}

/// A fresh id for a batch or a flow's parent: now by `backend`'s clock (the
/// memory backend's own, which the test kit moves; see
/// [`AnyBackend::fresh_id`](crate::backend::any::AnyBackend::fresh_id)).
pub(super) fn fresh_id(backend: &crate::backend::any::AnyBackend) -> JobId {
    backend.fresh_id()
}
