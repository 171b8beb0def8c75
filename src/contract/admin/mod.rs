//! [`Admin`]: acting on queues and dead letters; periodic ticks and worker
//! heartbeats (public at `redjob::ops`).

mod beat;
mod control;
mod dead;
mod events;
mod keys;
mod listing;
mod methods;
mod overview;
mod periodic;
mod workers;

use std::future::Future;

pub(crate) use beat::{Beat, BeatEvent, BeatJob};
pub use control::{BeatReply, Control, WorkerControl};
pub(crate) use control::{
    GONE_WAKE, SETTINGS_WAKE, check_id as check_worker_id, gone_wake, wake_name as control_wake,
};
pub use dead::{BulkCount, DeadOrder, DeadQuery, Spread};
pub(crate) use events::{event_word, noted};
pub use keys::{KeyPage, KeyUsage};
pub(crate) use methods::admin_methods;
pub use overview::{Overview, OverviewQuery, OverviewSort, QueueLine, Totals};
pub(crate) use periodic::schedule_name;
pub use periodic::{Missed, Paused, Schedule, ScheduleInfo, Tick, Ticked, Ticks};
pub use workers::{
    BeatSchedule, JobTypeInfo, RunningEvent, RunningJob, ServedSubscriber, Unserved, WorkerInfo,
};
pub(crate) use workers::{Serves, host_name};

use crate::contract::inspect::{Cursor, Inspect, JobState, MAX_PAGE, Page};
use crate::contract::settings::QueueSettings;
use crate::{JobId, Result};

/// The most dead letters one [`Admin::dead_matching`] call reads to find its
/// matches (ten pages of [`MAX_PAGE`](crate::inspect::MAX_PAGE)), however
/// many a queue keeps.
///
/// ```
/// assert_eq!(redjob::ops::MAX_SCAN, 10_000);
/// ```
pub const MAX_SCAN: usize = 10 * MAX_PAGE;

/// Operations on queues and their dead letters, on Redis and in memory alike.
///
/// Dead letters keep the job's body, its last error, its deliveries and its
/// priority. A requeued one goes back to its queue as a fresh job under the same
/// id: due now (or spread by a [`Spread`]), at its priority, with no deliveries
/// counted and no last error. A letter whose job held a unique key takes it
/// again while the key's lifetime lasts, as a send would; one whose key
/// another queued job holds by then stays dead (and is not counted as
/// requeued), so that a requeue never makes a second job of one key. A letter
/// that had a concurrency key enters its key again, as a send does.
///
/// ```
/// use redjob::ops::{Admin, DeadOrder, Spread};
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::queue::Queues;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("mail", Default::default()).await?;
/// let page = q.dead_page("mail", DeadOrder::NewestFirst, None, 50).await?;
/// let ids: Vec<_> = page.jobs.iter().map(|j| j.id).collect();
/// assert_eq!(q.requeue_dead("mail", &ids, Spread::NOW).await?, 0);
/// assert_eq!(q.purge_dead("mail").await?, 0);
/// # Ok(()) }
/// ```
pub trait Admin: Inspect {
    /// Pauses `queue`: from their next fetch on, workers lease none of its jobs
    /// (jobs already running go on). Sends still go in. Stored in the backend, so
    /// every worker process sees it; pausing twice is the same as once.
    fn pause(&self, queue: &str) -> impl Future<Output = Result<()>> + Send;

    /// Resumes a paused queue and wakes its idle workers at once.
    fn resume(&self, queue: &str) -> impl Future<Output = Result<()>> + Send;

    /// Whether `queue` is paused.
    fn is_paused(&self, queue: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Ends the throttle a handler put on `queue`
    /// ([`JobError::rate_limited`](crate::JobError::rate_limited)) and wakes
    /// its idle workers; the throttled jobs stay due when their handlers said
    /// (a pause is another matter: see [`resume`](Self::resume)). Returns
    /// false when no throttle was in force.
    ///
    /// ```
    /// use redjob::ops::Admin;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::queue::Queues;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail-api", Default::default()).await?;
    /// assert!(!q.end_throttle("mail-api").await?);
    /// # Ok(()) }
    /// ```
    fn end_throttle(&self, queue: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes every job of `queue` (not its dead letters), waiting or
    /// running: a running job's worker is told and finds it gone at once (at
    /// its next lease renewal if it missed the notice) and drops its outcome, as after a [`cancel`](Inspect::cancel). The
    /// queue, its settings and counters stay. Returns how many were deleted.
    ///
    /// It deletes the jobs sent before it started, by the time their id
    /// carries (the send's, by the backend's clock; a periodic job's is its
    /// tick's): its cutoff is the backend's clock when it starts, read once,
    /// and a job sent later is left, so it ends while producers send. (A dead
    /// letter requeued meanwhile keeps its id, and its old time: it is
    /// deleted too; so is a flow's parent sent meanwhile, whose id is the
    /// time its flow was enqueued, and a periodic job of a tick before it
    /// enqueued meanwhile.) A job there
    /// all along is deleted wherever it moves meanwhile (retried, leased,
    /// delayed, or a keyed job sent back to wait for its key's place),
    /// unless it changes priority. On Redis it goes a batch at a time (and
    /// scans the queue's sets again while keyed jobs it has to take went
    /// back to wait, or dead letters, flows' parents or periodic jobs it has
    /// to take were requeued, sent or enqueued, during a pass, up to 10 passes in all: keyed jobs that keep going back to wait
    /// faster than a pass ends, retried or throttled again and again, are
    /// purged as far as those passes reach);
    /// in memory it deletes them all at once, under one lock.
    fn purge_queue(&self, queue: &str) -> impl Future<Output = Result<u64>> + Send {
        self.purge_queue_by(queue, self.actor(), None)
    }

    /// How many jobs a purge of `queue` would delete now (waiting, scheduled
    /// and running), and its cutoff for
    /// [`purge_queue_upto`](Admin::purge_queue_upto): read at once, by the
    /// backend's clock.
    fn count_purge(&self, queue: &str) -> impl Future<Output = Result<BulkCount>> + Send;

    /// [`purge_queue`](Admin::purge_queue) of the jobs sent by `upto_ms`
    /// (Unix ms, backend time; a [`count_purge`](Admin::count_purge)'s
    /// cutoff) and no later: a purge confirmed after a count deletes what was
    /// counted, not the jobs sent while someone read the count. "Sent" is the
    /// time a job's id carries, as for [`purge_queue`](Admin::purge_queue):
    /// a dead letter requeued after the count keeps its id and its old time,
    /// and a periodic job enqueued late carries its tick's, so either is
    /// deleted too. A cutoff later than the backend's clock is taken as now.
    ///
    /// ```
    /// use redjob::inspect::Inspect;
    /// use redjob::ops::Admin;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::queue::{Queues, SendMessage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// q.send("mail", SendMessage::new("first")).await?;
    /// let count = q.count_purge("mail").await?;
    /// assert_eq!(count.count, 1);
    /// q.clock().advance(std::time::Duration::from_millis(5));
    /// q.send("mail", SendMessage::new("sent after the count")).await?;
    /// assert_eq!(q.purge_queue_upto("mail", count.upto_ms).await?, 1);
    /// assert_eq!(q.counts("mail").await?.ready, 1);
    /// # Ok(()) }
    /// ```
    fn purge_queue_upto(
        &self,
        queue: &str,
        upto_ms: u64,
    ) -> impl Future<Output = Result<u64>> + Send {
        self.purge_queue_by(queue, self.actor(), Some(upto_ms))
    }

    /// [`purge_queue`](Admin::purge_queue), recording one event in the
    /// queue's history: when, how many, and who (`api`, `cli alice`,
    /// `dashboard`; see [`Inspect::history_events`]). With `upto_ms`, only
    /// the jobs sent by then ([`purge_queue_upto`](Admin::purge_queue_upto)).
    fn purge_queue_by(
        &self,
        queue: &str,
        by: &str,
        upto_ms: Option<u64>,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Makes the scheduled job `id` due now, at its priority and with its
    /// deliveries counted as before, and wakes the queue's idle workers.
    /// Returns the state it was in: [`Scheduled`](JobState::Scheduled) (now
    /// due), [`Ready`](JobState::Ready) (due already, left as it is),
    /// [`InFlight`](JobState::InFlight) (running, left to its lease; also a
    /// message an RSMQ-style receive hid, left to its visibility timeout),
    /// [`Blocked`](JobState::Blocked) (a keyed job waiting for its concurrency
    /// key's place: due now within the key's wait, where the key's jobs start
    /// in order of due time, it takes a free place, or the place of a job of
    /// its key due later that does not run yet, else waits on), or `None`
    /// when the queue holds no such job (a dead letter is requeued with
    /// [`requeue_dead`](Admin::requeue_dead)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redjob::inspect::JobState;
    /// use redjob::ops::Admin;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::queue::{Queues, SendMessage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// let later = SendMessage::new(b"{}".to_vec()).delay(Duration::from_secs(3600));
    /// let id = q.send("mail", later).await?;
    /// assert_eq!(q.run_now("mail", &id).await?, Some(JobState::Scheduled));
    /// assert_eq!(q.run_now("mail", &id).await?, Some(JobState::Ready));
    /// # Ok(()) }
    /// ```
    fn run_now(
        &self,
        queue: &str,
        id: &JobId,
    ) -> impl Future<Output = Result<Option<JobState>>> + Send;

    /// Up to `n` dead letters (at most [`MAX_PAGE`]) by time of death, in
    /// `order`, after `after` (the previous page's [`next`](Page::next)).
    fn dead_page(
        &self,
        queue: &str,
        order: DeadOrder,
        after: Option<&Cursor>,
        n: usize,
    ) -> impl Future<Output = Result<Page>> + Send;

    /// Requeues the dead letters with these ids (others are skipped), the k-th
    /// due at `spread`'s time for k. Returns how many were requeued.
    ///
    /// A letter runs again in a later millisecond than it died, never in the
    /// same: a requeue in that millisecond waits for the next (in memory
    /// whose clock stands still, [`Clock::frozen_at`], the letter is due
    /// from the next instead).
    ///
    /// [`Clock::frozen_at`]: crate::backend::memory::Clock::frozen_at
    fn requeue_dead(
        &self,
        queue: &str,
        ids: &[JobId],
        spread: Spread,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes the dead letters with these ids; returns how many there were.
    fn delete_dead(&self, queue: &str, ids: &[JobId]) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes every dead letter of `queue`; returns how many there were.
    fn purge_dead(&self, queue: &str) -> impl Future<Output = Result<u64>> + Send;

    /// Runs a finished job again: a copy of it is sent to `queue` under a new
    /// id, which this returns; an envelope's copy names the job it copies in
    /// a `"retry_of"` member ([`JobInfo::retry_of`](crate::inspect::JobInfo::retry_of)),
    /// which RSMQ clients and handlers ignore; a keyed job's copy waits for
    /// its concurrency key as the job did (with the key's `per_key` in force
    /// when the key has jobs). The job must be in the queue's
    /// history with its arguments still kept ([`InvalidValue`](crate::Error::InvalidValue)
    /// says which is not so).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::inspect::Inspect;
    /// use redjob::ops::Admin;
    /// use redjob::queue::{Queues, SendMessage};
    ///
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// let id = q.send("mail", SendMessage::new(r#"{"type":"Welcome","args":{}}"#)).await?;
    /// q.cancel("mail", &id).await?;
    /// let copy = q.retry_finished("mail", &id).await?;
    /// let job = q.job("mail", &copy).await?.expect("queued");
    /// assert_eq!(job.retry_of(), Some(id));
    /// # Ok(()) }
    /// ```
    fn retry_finished(&self, queue: &str, id: &JobId) -> impl Future<Output = Result<JobId>> + Send
    where
        Self: crate::contract::queues::Queues,
    {
        async move {
            let bad = |reason: String| crate::Error::InvalidValue {
                what: "job",
                reason,
            };
            let job = self
                .job(queue, id)
                .await?
                .filter(|j| j.state == JobState::Finished)
                .ok_or_else(|| bad(format!("{id} is not in the history of {queue:?}")))?;
            if job.body.is_empty() {
                return Err(bad(format!(
                    "{id} finished, but its arguments are no longer kept (the history's args_max_age)"
                )));
            }
            let body = crate::contract::envelope::with_retry_of(&job.body, id);
            // due now at the priority it ran at, whatever the queue's delay
            let mut msg = crate::contract::queues::SendMessage::new(body)
                .priority(job.priority)
                .delay(std::time::Duration::ZERO);
            // its concurrency key, as it had, with the key's places in force
            // when it has jobs (a send sets them: as a dead letter's requeue)
            if let Some(mut k) = job.key {
                let now = self.key_usage(queue, &k.key).await?;
                if now.per_key > 0 {
                    k.per_key = now.per_key;
                }
                msg = msg.keyed(k);
            }
            let copy = crate::contract::queues::Queues::send(self, queue, msg).await?;
            noted(self.add_event(queue, "retried", 1).await, queue);
            Ok(copy)
        }
    }

    /// Adds an event to the queue's history (see
    /// [`Inspect::history_events`]): `what` (one word) happened to `count`
    /// jobs, by this handle's [`actor`](Inspect::actor), now. The operations
    /// that change jobs in bulk or the queue add theirs themselves: `purged`,
    /// `deleted` (a bulk delete), `dead_requeued`, `dead_deleted`, `run_now`,
    /// `retried`, `paused`, `resumed`, `settings`. A `what` that is not one
    /// word of 1 to 40 characters, or a `count` over 2^53, is
    /// [`Error::InvalidValue`](crate::Error::InvalidValue).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::inspect::Inspect;
    /// use redjob::ops::Admin;
    /// use redjob::queue::Queues;
    ///
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// q.add_event("mail", "migrated", 3).await?;
    /// let e = &q.history_events("mail").await?[0];
    /// assert_eq!((e.what.as_str(), e.count, e.by.as_deref()), ("migrated", 3, Some("api")));
    /// # Ok(()) }
    /// ```
    fn add_event(
        &self,
        queue: &str,
        what: &str,
        count: u64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Every queue of the namespace at a glance: jobs by state, latency,
    /// pause and counters per queue ([`QueueLine`]), filtered by name, sorted
    /// and paged as `query` says, with their totals. It reads in two round
    /// trips whatever the number of queues: the set of queues, then one
    /// pipelined script call per matching queue (per node on a Cluster);
    /// in memory, under one lock.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::ops::{Admin, OverviewQuery};
    /// use redjob::queue::Queues;
    ///
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// let o = q.overview(&OverviewQuery::default()).await?;
    /// assert_eq!((o.matched, o.lines[0].name.as_str()), (1, "mail"));
    /// # Ok(()) }
    /// ```
    fn overview(&self, query: &OverviewQuery) -> impl Future<Output = Result<Overview>> + Send;

    /// The live worker processes, by id: each one's last heartbeat (see
    /// [`WorkerInfo`]). A worker that stopped is gone at once; one that died
    /// is gone three heartbeats after its last.
    fn workers(&self) -> impl Future<Output = Result<Vec<WorkerInfo>>> + Send;

    /// The last tick enqueued, and the one after it, of each of the periodic
    /// schedules `names` whose jobs go to `queue` (Unix ms, backend time).
    fn ticks(&self, queue: &str, names: &[&str])
    -> impl Future<Output = Result<Vec<Ticks>>> + Send;

    /// [`ticks`](Self::ticks) of several queues' schedules together: for
    /// each `(queue, names)` asked, in order, the ticks of its `names`. On
    /// one Redis server one round trip however many queues (an `HMGET` a
    /// queue, pipelined), on a Cluster all at once; [`schedules`](Self::schedules)
    /// reads so. Defaults to [`ticks`](Self::ticks) of one queue after
    /// another.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::ops::Admin;
    ///
    /// let q = MemoryBackend::new();
    /// let ticks = q.ticks_of(&[("mail", vec!["digest"]), ("sms", vec!["a", "b"])]).await?;
    /// assert_eq!((ticks[0].len(), ticks[1].len()), (1, 2));
    /// assert_eq!(ticks[1][0].last_ms, None, "never ticked");
    /// # Ok(()) }
    /// ```
    fn ticks_of(
        &self,
        asked: &[(&str, Vec<&str>)],
    ) -> impl Future<Output = Result<Vec<Vec<Ticks>>>> + Send {
        async move {
            let mut out = Vec::with_capacity(asked.len());
            for (queue, names) in asked {
                out.push(self.ticks(queue, names).await?);
            }
            Ok(out)
        }
    }

    /// The periodic schedules live workers tick, by queue and name, with
    /// their last tick and the next. A schedule removed from the code (no
    /// live worker ticks it) is not listed. The next tick is the one of the
    /// schedule the live workers run: the one a worker's beat carries until
    /// its first tick (while no tick as late is recorded), else the one
    /// recorded with the last tick; a recorded
    /// one that has passed (missed while no worker ran) gives way to the
    /// schedule's next tick after the latest beat, for an interval or a cron
    /// expression in UTC or at a fixed offset.
    fn schedules(&self) -> impl Future<Output = Result<Vec<ScheduleInfo>>> + Send {
        listing::schedules(self)
    }

    /// The settings stored for `queue` (see [`QueueSettings`]);
    /// [`Error::QueueNotFound`](crate::Error::QueueNotFound) when it does not exist.
    fn settings(&self, queue: &str) -> impl Future<Output = Result<QueueSettings>> + Send;

    /// Pauses the periodic schedule `name` of `queue` for every worker that
    /// ticks it, recording when and who ([`actor`](Inspect::actor)): while
    /// paused its ticks pass and enqueue nothing ([`ScheduleInfo::paused`]).
    /// Returns false when it was paused already. Stored in the backend, so
    /// every worker process follows at its next tick, and a deploy does not
    /// undo it: this is also how a schedule is disabled (it stays paused
    /// until resumed, whatever the workers' code says).
    ///
    /// ```
    /// use redjob::ops::Admin;
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::queue::Queues;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("maintenance", Default::default()).await?;
    /// assert!(q.pause_schedule("maintenance", "cleanup").await?);
    /// assert!(!q.pause_schedule("maintenance", "cleanup").await?);
    /// let t = q.ticks("maintenance", &["cleanup"]).await?;
    /// assert_eq!(t[0].paused.as_ref().map(|p| p.by.as_str()), Some("api"));
    /// assert!(q.resume_schedule("maintenance", "cleanup").await?);
    /// # Ok(()) }
    /// ```
    fn pause_schedule(&self, queue: &str, name: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Resumes the periodic schedule `name` of `queue`: its next tick
    /// enqueues again (the ticks passed while paused are not caught up).
    /// Returns false when it was not paused.
    fn resume_schedule(&self, queue: &str, name: &str)
    -> impl Future<Output = Result<bool>> + Send;

    /// Sets `control` on the live worker `id` (`None` clears it: a quiet
    /// worker takes work again), recording when and who
    /// ([`actor`](Inspect::actor)). Stored in the backend beside the
    /// registry; the worker is woken to read it at once, and reads it with
    /// its full beats too (see [`BeatReply`]). Returns false when no live
    /// worker has that id (the control is not stored). [`WorkerInfo::control`] shows it, and
    /// [`WorkerInfo::quiet`] whether the worker follows it.
    ///
    /// ```
    /// use redjob::ops::{Admin, WorkerControl};
    /// use redjob::backend::memory::MemoryBackend;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// // no worker of that id is live
    /// assert!(!q.control_worker("9b1d...", Some(WorkerControl::Quiet)).await?);
    /// # Ok(()) }
    /// ```
    fn control_worker(
        &self,
        id: &str,
        control: Option<WorkerControl>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Quiets the live worker `id`: it stops taking work and finishes what it
    /// runs (see [`WorkerControl::Quiet`]); [`resume_worker`](Self::resume_worker)
    /// undoes it. False when no live worker has that id.
    fn quiet_worker(&self, id: &str) -> impl Future<Output = Result<bool>> + Send {
        self.control_worker(id, Some(WorkerControl::Quiet))
    }

    /// Clears the control on the live worker `id`: a quiet worker takes work
    /// again (a stop it has already seen goes on). False when no live worker
    /// has that id.
    fn resume_worker(&self, id: &str) -> impl Future<Output = Result<bool>> + Send {
        self.control_worker(id, None)
    }

    /// Stops the live worker `id` gracefully (see [`WorkerControl::Stop`]):
    /// its [`Worker::run`](crate::Worker::run) returns
    /// [`Stopped::Requested`](crate::worker::Stopped::Requested) with who
    /// asked. False when no live worker has that id.
    fn stop_worker(&self, id: &str) -> impl Future<Output = Result<bool>> + Send {
        self.control_worker(id, Some(WorkerControl::Stop))
    }

    /// Stores the settings `settings` gives (`Some`) for `queue`, in force for
    /// every worker from its next settle on (a retention) or at once (the
    /// concurrency: the workers are told, and one that missed it follows
    /// within two minutes), over whatever was stored, recording this
    /// caller's [actor](crate::inspect::Inspect::actor) as who set them; the
    /// others stay. Returns the settings stored after the change.
    ///
    /// A setting given whole ([`QueueSettings::history`](crate::ops::QueueSettings::history),
    /// [`dead_letters`](crate::ops::QueueSettings::dead_letters),
    /// [`concurrency`](crate::ops::QueueSettings::concurrency)) replaces each
    /// of its fields, those the caller did not mean to change too: a value
    /// read before and written back with one field changed puts back
    /// another's change of the other fields in between. Some fields given
    /// alone ([`history_parts`](crate::ops::QueueSettings::history_parts),
    /// [`dead_letters_parts`](crate::ops::QueueSettings::dead_letters_parts),
    /// [`concurrency_part`](crate::ops::QueueSettings::concurrency_part))
    /// change those and keep the others as stored, in the same step. A
    /// setting [reset](crate::ops::QueueSettings::reset) is stored no more.
    ///
    /// Each value is checked against its bound first (see
    /// [`MAX_RETAINED`](crate::ops::MAX_RETAINED),
    /// [`MAX_RETENTION_AGE`](crate::ops::MAX_RETENTION_AGE)):
    /// [`Error::InvalidValue`](crate::Error::InvalidValue) naming the field
    /// and the bound, nothing stored. A change records a `settings` event in
    /// the queue's history and tells every worker; one that changes nothing
    /// (nothing given, each value as stored, a reset of a setting not
    /// stored) does neither, and keeps who set each value.
    ///
    /// ```
    /// use redjob::ops::{Admin, QueueSettings, Retention};
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::queue::Queues;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("mail", Default::default()).await?;
    /// assert!(q.settings("mail").await?.is_empty());
    /// let keep = Retention { max_count: Some(100), max_age: None };
    /// q.set_settings("mail", &QueueSettings::dead_letters(keep)).await?;
    /// assert_eq!(q.settings("mail").await?.dead_letters, Some(keep));
    /// # Ok(()) }
    /// ```
    fn set_settings(
        &self,
        queue: &str,
        settings: &QueueSettings,
    ) -> impl Future<Output = Result<QueueSettings>> + Send;

    /// How much of `queue`'s limits across the fleet (global concurrency,
    /// rate limit) is in use now, and when a full one lets the next job start
    /// (see [`LimitUsage`](crate::ops::LimitUsage)).
    fn limit_usage(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<crate::contract::settings::LimitUsage>> + Send;

    /// What `queue`'s concurrency key `key` holds: its places, running,
    /// holding and blocked jobs (all 0 for a key the queue does not know).
    /// See [`KeyUsage`](crate::ops::KeyUsage) for an example.
    fn key_usage(&self, queue: &str, key: &str) -> impl Future<Output = Result<KeyUsage>> + Send;

    /// Up to about `n` of `queue`'s concurrency keys (those with jobs), after
    /// `after` (a page's `next`; `None` for the first page), in no particular
    /// order: each a few commands, however many jobs a key holds back.
    ///
    /// ```
    /// use redjob::backend::memory::MemoryBackend;
    /// use redjob::ops::Admin;
    /// use redjob::queue::{Keyed, Queues, SendMessage};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let q = MemoryBackend::new();
    /// q.create_queue("billing", Default::default()).await?;
    /// q.send("billing", SendMessage::new("a").keyed(Keyed::new("acct:7"))).await?;
    /// let page = q.keys("billing", None, 100).await?;
    /// assert_eq!((page.keys.len(), page.next), (1, None));
    /// # Ok(()) }
    /// ```
    fn keys(
        &self,
        queue: &str,
        after: Option<&str>,
        n: usize,
    ) -> impl Future<Output = Result<KeyPage>> + Send;

    /// Up to `n` dead letters that match `query`, in its order, after `after`.
    /// Filters are applied as pages are read, [`MAX_SCAN`] letters at most a
    /// call: a filter that matches few letters of a long list gives pages of
    /// fewer than `n` (none, even) that still have a `next`; only a page
    /// without `next` is the last.
    fn dead_matching(
        &self,
        queue: &str,
        query: &DeadQuery,
        after: Option<&Cursor>,
        n: usize,
    ) -> impl Future<Output = Result<Page>> + Send {
        async move {
            let n = crate::contract::inspect::page_size(n);
            let mut out = Page::default();
            let mut cursor = after.cloned();
            let mut read = 0;
            while out.jobs.len() < n {
                if read >= MAX_SCAN {
                    // the letters read so far: the next call reads on
                    out.next = cursor;
                    return Ok(out);
                }
                let page = self
                    .dead_page(queue, query.order, cursor.as_ref(), MAX_PAGE)
                    .await?;
                let read_all = page.next.is_none();
                read += page.jobs.len().max(1);
                for job in page.jobs {
                    if out.jobs.len() == n {
                        break;
                    }
                    cursor = Some(Cursor::dead(&job));
                    if query.matches(&job) {
                        out.jobs.push(job);
                    }
                }
                if read_all && out.jobs.len() < n {
                    return Ok(out);
                }
            }
            out.next = cursor;
            Ok(out)
        }
    }

    /// Requeues every dead letter that matches `query` (see
    /// [`requeue_dead`](Admin::requeue_dead)), a page at a time. With
    /// `per_second`, they become due at that rate rather than all at once, so a
    /// requeue of 100,000 does not flood the workers. Returns how many were
    /// requeued.
    ///
    /// It acts on the letters there when it starts: its cutoff is the
    /// backend's clock then (Redis's `TIME`, read once), and a letter that dies
    /// after it, such as one this call requeued and a worker failed again, is
    /// left for the next call. So it acts on each letter at most once, returns
    /// at most as many as matched when it started, and ends however fast
    /// workers add letters. On Redis it waits for Redis's clock to pass the
    /// cutoff's millisecond before its first requeue (a millisecond at most);
    /// in memory it waits for its clock to pass the millisecond in which the
    /// queue's last letter died (as long at most), then acts at once, under
    /// one lock.
    fn requeue_dead_matching(
        &self,
        queue: &str,
        query: &DeadQuery,
        per_second: Option<u32>,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// How many dead letters match `query` and died by now (by the backend's
    /// clock), with the cutoff that keeps a requeue or delete to
    /// them: `query.clone().died_by(count.upto_ms)`. Reads them a page at a
    /// time.
    fn count_dead(
        &self,
        queue: &str,
        query: &DeadQuery,
    ) -> impl Future<Output = Result<BulkCount>> + Send;

    /// Deletes every dead letter that matches `query`; returns how many. Like
    /// [`requeue_dead_matching`](Admin::requeue_dead_matching), only those there
    /// when it starts: a letter that dies after it is left.
    fn delete_dead_matching(
        &self,
        queue: &str,
        query: &DeadQuery,
    ) -> impl Future<Output = Result<u64>> + Send;
}
