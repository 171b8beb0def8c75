//! [`Inspect`]: looking into a queue, and the types its answers are made of
//! (public at `redjob::inspect`).

use std::future::Future;
use std::time::Duration;

use crate::contract::queues::Queues;
use crate::{Error, JobId, Result};

mod cursor;
mod scores;
mod types;

pub use cursor::Cursor;
pub(crate) use scores::{
    dead_page, due_ms, finished_info, page, page_size, queued, state_of, waiting,
};
pub use types::{Cancelled, JobInfo, JobState, MAX_PAGE, Page, StateCounts};

/// Inspection and cancel, on Redis and in memory alike.
///
/// ```
/// use redjob::inspect::{Cancelled, Inspect, JobState};
/// use redjob::queue::{Queues, SendMessage};
/// use redjob::backend::memory::MemoryBackend;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("mail", Default::default()).await?;
/// for i in 0..3 {
///     q.send("mail", SendMessage::new(format!("{i}")).delay(Duration::from_secs(60))).await?;
/// }
/// let first = q.list("mail", JobState::Scheduled, None, 2).await?;
/// let rest = q.list("mail", JobState::Scheduled, first.next.as_ref(), 2).await?;
/// assert_eq!((first.jobs.len(), rest.jobs.len(), rest.next), (2, 1, None));
/// assert_eq!(q.peek("mail", 10).await?.len(), 3);
/// assert_eq!(q.cancel("mail", &rest.jobs[0].id).await?, Cancelled::Removed);
/// assert_eq!(q.cancel("mail", &rest.jobs[0].id).await?, Cancelled::NotFound);
/// # Ok(()) }
/// ```
pub trait Inspect: Sync {
    /// How many jobs are in each state ([`Error::QueueNotFound`] for no queue).
    fn counts(&self, queue: &str) -> impl Future<Output = Result<StateCounts>> + Send;

    /// How long the longest-waiting ready job has waited since it became ready
    /// (its due time, or the end of a lease that ran out), over every priority;
    /// `None` when no job is ready. A queue's latency, as Sidekiq calls it: with
    /// priorities it can be older than the wait of the job that runs next.
    fn latency(&self, queue: &str) -> impl Future<Output = Result<Option<Duration>>> + Send;

    /// The next `n` jobs that would run (at most [`MAX_PAGE`]), without leasing
    /// them: the ready ones in the order a fetch takes them (highest priority
    /// first, then oldest due first; a lease that ran out is due from its end),
    /// then the scheduled ones by due time (at one time, highest priority
    /// first). On Redis the scheduled ones are looked for among at most `n` +
    /// 1,000 jobs due later, passing over the leases among them.
    fn peek(&self, queue: &str, n: usize) -> impl Future<Output = Result<Vec<JobInfo>>> + Send;

    /// One job by id: in the queue (a flow's parent waiting for its children
    /// too), its dead letters or its history of finished jobs; `None` when it
    /// is in none of them.
    fn job(&self, queue: &str, id: &JobId) -> impl Future<Output = Result<Option<JobInfo>>> + Send;

    /// Up to `n` jobs (at most [`MAX_PAGE`]) of one state, after `after` (the
    /// previous page's [`next`](Page::next); `None` for the first page). `n = 0`
    /// gives an empty page without a cursor. Ordered by
    /// priority, highest first, then by score: ready jobs oldest first (a lease
    /// that ran out from its end), scheduled by due time, in flight by lease end,
    /// dead by time of death; blocked ones by concurrency key (its bytes), then
    /// due time, each with its [`key`](JobInfo::key). Scheduled and in-flight jobs share the scores after
    /// now: on Redis a page of either reads at most `n` + 1,000 of them, so a page
    /// may hold fewer than `n` jobs and still have a [`next`](Page::next) (follow
    /// it; only a page without one is the last). A job that changes state between
    /// pages may be missed or seen twice.
    fn list(
        &self,
        queue: &str,
        state: JobState,
        after: Option<&Cursor>,
        n: usize,
    ) -> impl Future<Output = Result<Page>> + Send;

    /// Cancels a job: removes it whether it waits or runs, frees its unique key,
    /// and says which it was (see [`Cancelled`]). Dead letters are not touched.
    /// A flow's parent waiting for its children is cancelled as a failed
    /// child with `cancel_on_failure` would: it never runs, whoever awaits
    /// it learns so, and so do the flows above it; its children run on
    /// (`cancel_batch` of its flow cancels them).
    /// The queue's history keeps it as cancelled, by this handle's
    /// [`actor`](Inspect::actor) ([`cancel_by`](Inspect::cancel_by) names who).
    fn cancel(&self, queue: &str, id: &JobId) -> impl Future<Output = Result<Cancelled>> + Send {
        self.cancel_by(queue, id, self.actor())
    }

    /// Who this handle's actions are recorded as in the queues' history (a
    /// cancel, a delete, a purge, a dead-letter requeue or delete, a run now,
    /// a retry, a pause, a settings change; see
    /// [`history_events`](Inspect::history_events)): the source and the
    /// actor's name, `api` unless set ([`Client::acting_as`](crate::Client::acting_as));
    /// the CLI acts as `cli <user>`, the dashboard as `dashboard`.
    ///
    /// ```
    /// use redjob::Client;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::inspect::Inspect;
    ///
    /// let c = Client::memory(MemoryBackend::new());
    /// assert_eq!(c.actor(), "api");
    /// assert_eq!(c.acting_as("cli alice").actor(), "cli alice");
    /// ```
    fn actor(&self) -> &str {
        "api"
    }

    /// [`cancel`](Inspect::cancel), recording who in the history entry: the
    /// source and the actor's name, `api`, `cli alice`, `dashboard` (one line;
    /// the CLI and the dashboard fill it).
    fn cancel_by(
        &self,
        queue: &str,
        id: &JobId,
        by: &str,
    ) -> impl Future<Output = Result<Cancelled>> + Send;

    /// The finished jobs of `queue`'s history that `query` selects, newest
    /// first (those of one ms last entered first, on either backend), up to
    /// `n` (at most
    /// [`MAX_PAGE`]), after `after` (the previous
    /// page's [`next`](Page::next)). Reads the history a page at a time
    /// ([`list`](Inspect::list) of [`JobState::Finished`]) and stops at
    /// `since` (entries are by finish time); after [`HISTORY_SCAN`] entries
    /// without filling the page it returns what it found with a cursor to go
    /// on from, so a filter that matches little costs bounded calls.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::inspect::{Finish, HistoryQuery, Inspect};
    /// use redjob::queue::{Queues, SendMessage};
    ///
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// let id = q.send("mail", SendMessage::new("hi")).await?;
    /// q.cancel("mail", &id).await?;
    /// let cancelled = HistoryQuery::default().how(Finish::Cancelled);
    /// let page = q.history("mail", &cancelled, None, 10).await?;
    /// assert_eq!(page.jobs[0].id, id);
    /// let dead = HistoryQuery::default().how(Finish::Dead);
    /// assert!(q.history("mail", &dead, None, 10).await?.jobs.is_empty());
    /// # Ok(()) }
    /// ```
    fn history(
        &self,
        queue: &str,
        query: &crate::contract::history::HistoryQuery,
        after: Option<&Cursor>,
        n: usize,
    ) -> impl Future<Output = Result<Page>> + Send
    where
        Self: Sync,
    {
        async move {
            let n = page_size(n);
            let mut jobs = Vec::new();
            if n == 0 {
                return Ok(Page { jobs, next: None });
            }
            let mut cursor = after.cloned();
            let mut scanned = 0;
            // as many entries as the page shows when each is selected, more
            // (twice as many each time, up to MAX_PAGE) while a filter passes
            // them over
            let mut read = n;
            loop {
                let page = self
                    .list(queue, JobState::Finished, cursor.as_ref(), read)
                    .await?;
                read = read.saturating_mul(2).min(MAX_PAGE);
                for job in page.jobs {
                    scanned += 1;
                    let at = Cursor::dead(&job);
                    let Some(f) = &job.finished else { continue };
                    // newest first: the rest finished before `since`
                    if query.since_ms.is_some_and(|s| f.at_ms < s) {
                        return Ok(Page { jobs, next: None });
                    }
                    cursor = Some(at);
                    if query.selects(f.how, job.job_name().as_deref(), f.at_ms) {
                        jobs.push(job);
                        if jobs.len() == n {
                            return Ok(Page { jobs, next: cursor });
                        }
                    }
                }
                // (a backend's page may end with rows it did not show)
                let Some(next) = page.next else {
                    return Ok(Page { jobs, next: None });
                };
                cursor = Some(next);
                if scanned >= HISTORY_SCAN {
                    return Ok(Page { jobs, next: cursor });
                }
            }
        }
    }

    /// The queue's history events (actions on many jobs at once, such as a
    /// purge), newest first, the last [`MAX_EVENTS`](crate::inspect::MAX_EVENTS).
    /// The default keeps none.
    fn history_events(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Vec<crate::contract::history::HistoryEvent>>> + Send {
        let _ = queue;
        async { Ok(Vec::new()) }
    }

    /// One job by id without its queue (an id is unique across queues): every
    /// queue is asked, [`job`](Inspect::job) per queue, with up to
    /// [`LOCATE_AT_ONCE`] calls in flight (on Redis they share the connection,
    /// so they travel pipelined; on a Cluster each goes to its queue's node),
    /// and the first queue found to hold it answers. No index outside the
    /// queues: the cost grows with the number of queues, one script call each.
    /// A queue deleted meanwhile, or whose name no redjob or RSMQ client can
    /// use, is passed over; one that fails otherwise gives its error only when
    /// no queue holds the job.
    ///
    /// ```
    /// use redjob::inspect::Inspect;
    /// use redjob::queue::{Queues, SendMessage};
    /// use redjob::backend::memory::MemoryBackend;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// q.create_queue("sms", Default::default()).await?;
    /// let id = q.send("sms", SendMessage::new("hi")).await?;
    /// let found = q.locate(&id).await?.expect("queued");
    /// assert_eq!((found.queue.as_str(), found.job.id), ("sms", id));
    /// # Ok(()) }
    /// ```
    fn locate(&self, id: &JobId) -> impl Future<Output = Result<Option<Located>>> + Send
    where
        Self: Queues,
    {
        async move {
            use futures::stream::{self, StreamExt};
            let queues = self.list_queues().await?;
            let mut asks = stream::iter(queues)
                .map(|queue| async move { (self.job(&queue, id).await, queue) })
                .buffer_unordered(LOCATE_AT_ONCE);
            // one queue that fails (a node down, a key of another type) does
            // not hide the job in another: its error counts only if none has it
            let mut failed = None;
            while let Some((answer, queue)) = asks.next().await {
                match answer {
                    Ok(Some(job)) => return Ok(Some(Located { queue, job })),
                    Ok(None)
                    | Err(Error::QueueNotFound { .. })
                    | Err(Error::InvalidQueueName { .. }) => {}
                    Err(e) => _ = failed.get_or_insert(e),
                }
            }
            failed.map_or(Ok(None), Err)
        }
    }
}

/// The most history entries a [`history`](Inspect::history) call reads
/// before it returns a page, shorter or empty, with a cursor to go on from.
///
/// ```
/// assert_eq!(redjob::inspect::HISTORY_SCAN, 10_000);
/// ```
pub const HISTORY_SCAN: usize = 10_000;

/// How many queues a [`locate`](Inspect::locate) asks at once.
///
/// ```
/// assert_eq!(redjob::inspect::LOCATE_AT_ONCE, 256);
/// ```
pub const LOCATE_AT_ONCE: usize = 256;

/// A job [`locate`](Inspect::locate) found, and the queue it is in.
///
/// ```
/// use redjob::inspect::{Inspect, Located};
/// use redjob::queue::{Queues, SendMessage};
/// use redjob::backend::memory::MemoryBackend;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("mail", Default::default()).await?;
/// let id = q.send("mail", SendMessage::new("hi")).await?;
/// let Located { queue, job, .. } = q.locate(&id).await?.expect("queued");
/// assert_eq!((queue.as_str(), job.id), ("mail", id));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Located {
    /// The queue.
    pub queue: String,
    /// The job.
    pub job: JobInfo,
}

/// [`Inspect`]'s methods, for [`forward!`](crate::contract::forward::forward):
/// `inspect_methods! { impl Inspect for Type, |self| ...; }`.
macro_rules! inspect_methods {
    ($($head:tt)*) => {
        $crate::contract::forward::forward! {
            $($head)*
            async fn counts(queue: &str) -> $crate::Result<$crate::contract::inspect::StateCounts>;
            async fn latency(queue: &str) -> $crate::Result<Option<std::time::Duration>>;
            async fn peek(queue: &str, n: usize) -> $crate::Result<Vec<$crate::contract::inspect::JobInfo>>;
            async fn job(queue: &str, id: &$crate::JobId) -> $crate::Result<Option<$crate::contract::inspect::JobInfo>>;
            async fn list(queue: &str, state: $crate::contract::inspect::JobState, after: Option<&$crate::contract::inspect::Cursor>, n: usize) -> $crate::Result<$crate::contract::inspect::Page>;
            async fn cancel(queue: &str, id: &$crate::JobId) -> $crate::Result<$crate::contract::inspect::Cancelled>;
            async fn cancel_by(queue: &str, id: &$crate::JobId, by: &str) -> $crate::Result<$crate::contract::inspect::Cancelled>;
            async fn history_events(queue: &str) -> $crate::Result<Vec<$crate::contract::history::HistoryEvent>>;
            fn actor() -> &str;
        }
    };
}
pub(crate) use inspect_methods;
