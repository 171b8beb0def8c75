//! [`Inspect`]: looking into a queue, and the types its answers are made of
//! (public at `redjob::inspect`).

use std::future::Future;
use std::time::Duration;

use crate::contract::leases::{LEGACY_LEASED_MS, MAX_COUNT, is_lease, score_count};
use crate::contract::queues::Queues;
use crate::{Error, JobId, Result};

/// The most jobs one [`peek`](Inspect::peek) or [`list`](Inspect::list) page returns.
pub const MAX_PAGE: usize = 1000;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Due: the next fetch may take it. Includes a job whose lease ran out
    /// without being settled (its worker died): it runs again.
    Ready,
    /// Not due yet: delayed, or waiting for a retry. A message an RSMQ client
    /// received counts here until its visibility timeout ends.
    Scheduled,
    /// Leased by a worker: running, or finished with its outcome on the way.
    /// Its score is its lease end, marked as a lease in its thousandths.
    InFlight,
    /// In the dead-letter queue.
    Dead,
    /// Finished (succeeded, dead-lettered, cancelled or deleted) and kept in
    /// the queue's history for a while (see [`History`](crate::ops::History));
    /// [`JobInfo::finished`] says how.
    Finished,
    /// Waiting for a place of its concurrency key (see
    /// [`Keyed`](crate::queue::Keyed)): it takes one when one of the key's
    /// running jobs leaves, in order of its due time within the key.
    Blocked,
    /// A flow's parent waiting for its children (see
    /// [`Flow`](crate::client::Flow)): not in its queue until they have all
    /// succeeded; [`JobInfo::waits_for`] names their batch. Found by id
    /// only: no list holds such jobs.
    Waiting,
}

impl JobState {
    /// The name used by scripts, the CLI and URLs: `ready`, `scheduled`,
    /// `in_flight`, `dead`, `finished`, `blocked`, `waiting`.
    ///
    /// ```
    /// assert_eq!(redjob::inspect::JobState::InFlight.as_str(), "in_flight");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Scheduled => "scheduled",
            JobState::InFlight => "in_flight",
            JobState::Dead => "dead",
            JobState::Finished => "finished",
            JobState::Blocked => "blocked",
            JobState::Waiting => "waiting",
        }
    }
}

/// How many jobs of a queue are in each state.
///
/// ```
/// let c = redjob::inspect::StateCounts { ready: 2, ..Default::default() };
/// assert_eq!(c.total(), 2);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StateCounts {
    /// Due now.
    pub ready: u64,
    /// Delayed, or waiting for a retry.
    pub scheduled: u64,
    /// Leased by workers.
    pub in_flight: u64,
    /// In the dead-letter queue.
    pub dead: u64,
    /// Waiting for a place of their concurrency key.
    pub blocked: u64,
}

impl StateCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.ready + self.scheduled + self.in_flight + self.dead + self.blocked
    }

    /// Adds `other`'s counts to these, state by state (every state: a total
    /// of several queues, such as an overview's).
    ///
    /// ```
    /// use redjob::inspect::StateCounts;
    ///
    /// let mut c = StateCounts { ready: 2, blocked: 1, ..Default::default() };
    /// c.add(&StateCounts { ready: 1, blocked: 3, ..Default::default() });
    /// assert_eq!((c.ready, c.blocked, c.total()), (3, 4, 7));
    /// ```
    pub fn add(&mut self, other: &StateCounts) {
        // every field by name: a new state is a compile error here
        let StateCounts {
            ready,
            scheduled,
            in_flight,
            dead,
            blocked,
        } = *other;
        self.ready = self.ready.saturating_add(ready);
        self.scheduled = self.scheduled.saturating_add(scheduled);
        self.in_flight = self.in_flight.saturating_add(in_flight);
        self.dead = self.dead.saturating_add(dead);
        self.blocked = self.blocked.saturating_add(blocked);
    }
}

/// One job as stored.
///
/// ```
/// use redjob::inspect::{JobInfo, JobState};
///
/// let job = JobInfo {
///     id: "0000000000abcdefghijklmnopqrstuv".parse().unwrap(),
///     state: JobState::Ready,
///     priority: 0,
///     attempts: 1,
///     due_ms: 0,
///     body: br#"{"type":"Email","args":{"to":"a@b"}}"#.to_vec(),
///     last_error: Some("smtp timed out".into()),
///     runs: Vec::new(),
///     finished: None,
///     key: None,
///     result: None,
///     waits_for: None,
/// };
/// assert_eq!(job.job_name().as_deref(), Some("Email"));
/// assert_eq!(job.args().unwrap()["to"], "a@b");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// The job's id.
    pub id: JobId,
    /// Its state when it was read.
    pub state: JobState,
    /// Its priority level (a dead letter keeps the one it had).
    pub priority: i8,
    /// Deliveries so far (0 before its first run; counting the current one while
    /// in flight).
    pub attempts: u32,
    /// Ready or scheduled: when it is (or was) due; in flight: when its lease ends;
    /// dead: when it died. Unix ms, backend time.
    pub due_ms: u64,
    /// The stored body (the job envelope, or whatever a foreign client wrote).
    pub body: Vec<u8>,
    /// The error of its last failed run, when one was retried (dead: why it died).
    pub last_error: Option<String>,
    /// Its recorded attempts, oldest first (the last
    /// [`MAX_RECORDS`](crate::inspect::MAX_RECORDS)): read when one job is looked
    /// up ([`job`](Inspect::job), [`locate`](Inspect::locate)); empty in lists.
    pub runs: Vec<crate::contract::attempts::Attempt>,
    /// A job found in the history ([`JobState::Finished`]): when and how it
    /// finished. `due_ms` is then its finish time, and `body` empty once its
    /// arguments are no longer kept.
    pub finished: Option<crate::contract::history::Finished>,
    /// Its concurrency key ([`Keyed`](crate::queue::Keyed)), with the key's
    /// `per_key` in force (a dead letter's and a finished job's: the one it
    /// had), which a dead letter's requeue and
    /// [`retry_finished`](crate::ops::Admin::retry_finished) keep: read when
    /// one job is looked up, and in lists of blocked and finished jobs;
    /// `None` in the other lists.
    pub key: Option<crate::contract::keyed::Keyed>,
    /// A finished job's result (JSON), when it succeeded with one (see
    /// [`JobSpec::Output`](crate::job::JobSpec::Output)); read from its
    /// history entry.
    pub result: Option<Vec<u8>>,
    /// A flow's parent waiting for its children ([`JobState::Waiting`]):
    /// their batch, whose status says how far they are (see
    /// [`Flow`](crate::client::Flow)).
    pub waits_for: Option<crate::contract::batches::BatchId>,
}

impl JobInfo {
    /// The batch (or flow) this job belongs to, as its envelope says: its
    /// status's [`parent_job`](crate::ops::BatchStatus::parent_job) is the
    /// job that waits for it, in a flow.
    ///
    /// ```
    /// # use redjob::inspect::{JobInfo, JobState};
    /// let job = JobInfo {
    ///     id: "0000000000abcdefghijklmnopqrstuv".parse().unwrap(),
    ///     state: JobState::Ready,
    ///     priority: 0,
    ///     attempts: 0,
    ///     due_ms: 0,
    ///     body: br#"{"type":"Resize","args":{},"batch":"0000000000aaaaaaaaaaaaaaaaaaaaaa:3"}"#.to_vec(),
    ///     last_error: None,
    ///     runs: Vec::new(),
    ///     finished: None,
    ///     key: None,
    ///     result: None,
    ///     waits_for: None,
    /// };
    /// assert_eq!(job.batch().map(|r| r.index), Some(3));
    /// ```
    pub fn batch(&self) -> Option<crate::contract::batches::BatchRef> {
        crate::contract::batches::BatchRef::of_body(&self.body)
    }

    /// The job type named in the envelope, if the body is one.
    pub fn job_name(&self) -> Option<String> {
        crate::contract::envelope::job_name(&self.body)
            .or_else(|| self.finished.as_ref()?.job_type.clone())
    }

    /// The finished job this one is a copy of, when it was sent by
    /// [`retry_finished`](crate::ops::Admin::retry_finished).
    pub fn retry_of(&self) -> Option<JobId> {
        crate::contract::envelope::retry_of(&self.body)
    }

    /// The envelope's arguments as JSON.
    pub fn args(&self) -> Result<serde_json::Value> {
        #[derive(serde::Deserialize)]
        struct Args {
            #[serde(default)]
            args: serde_json::Value,
        }
        Ok(serde_json::from_slice::<Args>(&self.body)?.args)
    }
}

/// Where the next page of a [`list`](Inspect::list) starts: after the last job of
/// the previous page. Its text form (`priority:score:id`, or `b<key in
/// hex>:score:id` in a list of blocked jobs) can travel in a URL.
///
/// ```
/// use redjob::inspect::Cursor;
///
/// let c: Cursor = "3:1790000000123.004:0000000000abcdefghijklmnopqrstuv".parse().unwrap();
/// assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
/// let b: Cursor = "b6163:1790000000123.000:0000000000abcdefghijklmnopqrstuv".parse().unwrap();
/// assert_eq!(b.to_string().parse::<Cursor>().unwrap(), b);
/// assert!("3:x:y".parse::<Cursor>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub(crate) priority: i8,
    /// The row's score in thousandths of a ms.
    pub(crate) score: u64,
    pub(crate) id: JobId,
    /// A blocked job's concurrency key (blocked jobs are listed by key).
    pub(crate) key: Option<String>,
}

impl Cursor {
    /// The cursor after the dead letter `job` (dead letters are scored by their
    /// time of death in whole ms).
    pub(crate) fn dead(job: &JobInfo) -> Cursor {
        Cursor {
            priority: job.priority,
            score: job.due_ms.saturating_mul(1000),
            id: job.id,
            key: None,
        }
    }

    /// The cursor after a finished job `id` that finished at `ms`.
    pub(crate) fn dead_at(ms: u64, id: JobId) -> Cursor {
        Cursor {
            priority: 0,
            score: ms.saturating_mul(1000),
            id,
            key: None,
        }
    }

    /// The cursor after a blocked job of `key` at `score` (thousandths).
    pub(crate) fn blocked(key: &str, score: u64, id: JobId) -> Cursor {
        Cursor {
            priority: 0,
            score,
            id,
            key: Some(key.to_string()),
        }
    }

    /// A blocked job's member in the keyed set (see `concurrency_keys` in
    /// lib.lua): `<key>\0<due ms, 16 digits><count, 3 digits><id>`; `None`
    /// for another cursor.
    pub(crate) fn keyed_member(&self) -> Option<Vec<u8>> {
        let key = self.key.as_ref()?;
        let mut m = key.as_bytes().to_vec();
        m.push(0);
        m.extend_from_slice(
            format!(
                "{:016}{:03}{}",
                self.score / 1000,
                self.score % 1000,
                self.id
            )
            .as_bytes(),
        );
        Some(m)
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (s, id) = (self.score, self.id);
        match &self.key {
            Some(key) => {
                f.write_str("b")?;
                for b in key.as_bytes() {
                    write!(f, "{b:02x}")?;
                }
            }
            None => write!(f, "{}", self.priority)?,
        }
        write!(f, ":{}.{:03}:{id}", s / 1000, s % 1000)
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidValue {
            what: "cursor",
            reason: format!("{s:?} is not priority:score:id"),
        };
        let mut parts = s.splitn(3, ':');
        let (Some(p), Some(score), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let (ms, frac) = score.split_once('.').ok_or_else(bad)?;
        let score = match (ms.parse::<u64>(), frac.parse::<u64>()) {
            (Ok(ms), Ok(f)) if frac.len() == 3 => ms
                .checked_mul(1000)
                .and_then(|v| v.checked_add(f))
                .ok_or_else(bad)?,
            _ => return Err(bad()),
        };
        let id = id.parse().map_err(|_| bad())?;
        if let Some(hex) = p.strip_prefix('b') {
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(bad)?;
            let key = String::from_utf8(bytes).map_err(|_| bad())?;
            if key.is_empty() || key.contains('\0') {
                return Err(bad());
            }
            return Ok(Cursor::blocked(&key, score, id));
        }
        Ok(Cursor {
            priority: p.parse().map_err(|_| bad())?,
            score,
            id,
            key: None,
        })
    }
}

/// One page of a [`list`](Inspect::list).
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The jobs, in listing order.
    pub jobs: Vec<JobInfo>,
    /// Where the next page starts; `None` on the last page. A page may have one
    /// and be short (see [`list`](Inspect::list)).
    pub next: Option<Cursor>,
}

/// What a [`cancel`](Inspect::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancelled {
    /// The job was waiting (ready or scheduled, or a flow's parent waiting
    /// for its children: it never runs, and its children run on) and is
    /// gone.
    Removed,
    /// The job was running: it is gone from the queue, its worker cancels the run
    /// at once (told by a notice; one that misses it at its next lease
    /// renewal), and the run's outcome is dropped (never retried).
    Cancelling,
    /// No such job in the queue: never sent, finished (succeeded or dead), or
    /// cancelled already. Cancelling it changes nothing.
    NotFound,
}

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

/// The state of a queued job with score `k` (thousandths of a ms) at `now_ms`.
pub(crate) fn state_of(k: u64, now_ms: u64) -> JobState {
    // a score is due in its ms, whatever count its thousandths carry; a lease
    // is scored at its end, so one that ran out is due
    if due_ms(k, now_ms) <= now_ms {
        JobState::Ready
    } else if is_lease(k) || legacy(k, now_ms) {
        JobState::InFlight
    } else {
        JobState::Scheduled
    }
}

/// Whether score `k` is a lease an earlier redjob wrote (see [`LEGACY_LEASED_MS`]).
fn legacy(k: u64, now_ms: u64) -> bool {
    now_ms < LEGACY_LEASED_MS && k / 1000 >= LEGACY_LEASED_MS
}

/// When a job with score `k` becomes due at `now_ms`, Unix ms: its score's whole
/// ms (a fetch takes it in that ms; a lease's end).
pub(crate) fn due_ms(k: u64, now_ms: u64) -> u64 {
    let ms = k / 1000;
    if legacy(k, now_ms) {
        ms - LEGACY_LEASED_MS
    } else {
        ms
    }
}

/// A queued job's info from its stored parts: score `k`, the receive count an
/// RSMQ-style receive wrote (`rc`), its body and last error.
pub(crate) fn queued(
    id: JobId,
    priority: i8,
    k: u64,
    rc: u64,
    now_ms: u64,
    body: Vec<u8>,
    last_error: Option<String>,
) -> JobInfo {
    JobInfo {
        id,
        state: state_of(k, now_ms),
        priority,
        attempts: u64::from(score_count(k)).max(rc).min(u64::from(MAX_COUNT)) as u32,
        due_ms: due_ms(k, now_ms),
        body,
        last_error,
        runs: Vec::new(),
        finished: None,
        key: None,
        result: None,
        waits_for: None,
    }
}

/// A history entry of job `id` as a job's info, with `body` when it is
/// still kept.
pub(crate) fn finished_info(
    entry: crate::contract::history::Entry,
    id: JobId,
    body: Option<Vec<u8>>,
) -> JobInfo {
    let last_error = entry.runs.iter().rev().find_map(|a| a.error.clone());
    JobInfo {
        id,
        state: JobState::Finished,
        priority: entry.priority,
        attempts: entry.deliveries,
        due_ms: entry.finished.at_ms,
        body: body.unwrap_or_default(),
        last_error,
        runs: entry.runs,
        finished: Some(entry.finished),
        key: entry.key,
        result: entry.result,
        waits_for: None,
    }
}

/// A page size within bounds.
pub(crate) fn page_size(n: usize) -> usize {
    n.min(MAX_PAGE)
}

/// A page of `jobs` with their `scores`: with a cursor after its last job when
/// `full` (it read as many rows as asked, some maybe skipped as unreadable).
pub(crate) fn page(jobs: Vec<JobInfo>, scores: &[u64], full: bool) -> Page {
    let next = full
        .then(|| {
            jobs.last().zip(scores.last()).map(|(j, s)| Cursor {
                priority: j.priority,
                score: *s,
                id: j.id,
                key: None,
            })
        })
        .flatten();
    Page { jobs, next }
}

/// A page of dead letters: with a cursor after the last when `full`.
pub(crate) fn dead_page(jobs: Vec<JobInfo>, full: bool) -> Page {
    let next = full.then(|| jobs.last().map(Cursor::dead)).flatten();
    Page { jobs, next }
}

/// A flow's parent waiting for its children of `batch`, with its `body`.
pub(crate) fn waiting(id: JobId, batch: crate::contract::batches::BatchId, body: &[u8]) -> JobInfo {
    JobInfo {
        id,
        state: JobState::Waiting,
        priority: 0,
        attempts: 0,
        due_ms: id.sent_ms(),
        body: body.to_vec(),
        last_error: None,
        runs: Vec::new(),
        finished: None,
        key: None,
        result: None,
        waits_for: Some(batch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_score_ranges_and_marks() {
        let now = 1_000;
        // a score is due in its whole ms, whatever count its thousandths carry
        assert_eq!(state_of(1_000_999, now), JobState::Ready);
        assert_eq!(state_of(1_000_501, now), JobState::Ready);
        assert_eq!(state_of(1_001_000, now), JobState::Scheduled);
        assert_eq!(state_of(1_001_499, now), JobState::Scheduled);
        // a lease is marked in its thousandths (500 + count)
        assert_eq!(state_of(1_001_500, now), JobState::InFlight);
        assert_eq!(state_of(1_001_999, now), JobState::InFlight);
        let l = LEGACY_LEASED_MS * 1000;
        assert_eq!(state_of(l + 2_000_003, now), JobState::InFlight);
        assert_eq!(state_of(l + 999_003, now), JobState::Ready);
        let (a, b) = (due_ms(1_000_001, now), due_ms(l + 2_000_003, now));
        assert_eq!((a, b), (1_000, 2_000));
        // from the year 2096 on, every score is a time
        let later = LEGACY_LEASED_MS + 5;
        assert_eq!(due_ms(l + 2_000_003, later), LEGACY_LEASED_MS + 2_000);
        assert_eq!(state_of(l + 2_000_003, later), JobState::Scheduled);
        assert_eq!(state_of(l + 10_000_501, later), JobState::InFlight);
    }
}
