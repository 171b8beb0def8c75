//! The storage a worker runs on: a small trait of atomic, batched operations,
//! and the helpers its implementations share.

use std::future::Future;
use std::time::Duration;

use crate::contract::admin::{BeatReply, Tick, Ticked};
use crate::contract::inspect::StateCounts;
use crate::contract::leases::{Fetched, Handed, Settle, Settled, Token};
use crate::contract::queues::{QueueOptions, Queues, SendMessage, Sent};
use crate::contract::settings::QueueSettings;
use crate::contract::stats::{DeadLetter, MinuteStats, QueueStats};
use crate::{JobId, Result};

/// What a worker needs from storage. Every operation is one atomic call per batch
/// (on Redis, renewals and settles of jobs at several priorities make one call
/// per priority, pipelined in one round trip).
pub trait Backend: Clone + Send + Sync + 'static {
    /// Sends messages to `queue` in one call, all or nothing, creating the queue with
    /// `create` when it does not exist. Returns their ids in order, each with what
    /// the send did (see [`Queues::send_outcomes`]).
    fn send(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        create: &QueueOptions,
    ) -> impl Future<Output = Result<Vec<Sent>>> + Send;

    /// Leases up to `max` due jobs of `queue` for `lease`.
    fn fetch(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Fetched>> + Send;

    /// [`fetch`](Backend::fetch), and when fewer than `max` jobs were due, asks the
    /// queue's next sends of jobs due at once to lease them to worker `worker` and
    /// hand them over through [`listen_handoff`](Backend::listen_handoff) (one hop
    /// from the send to the worker instead of a wake-up and a fetch). Good for
    /// `hands` jobs (the most the worker can start at once) less those this fetch
    /// leased, at least one, so a worker handed a job need not fetch again to
    /// take the next; a fetch that leases all it asked for withdraws it, and the
    /// next registering fetch replaces it. A backend without hand-offs fetches
    /// (the default); implement both methods or neither.
    fn fetch_waiting(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        worker: &str,
        hands: usize,
    ) -> impl Future<Output = Result<Fetched>> + Send {
        let _ = (worker, hands);
        self.fetch(queue, max, lease)
    }

    /// Withdraws worker `worker`'s hand-off registrations (see
    /// [`fetch_waiting`](Backend::fetch_waiting), made with `lease`) on `queues`,
    /// where they are still in place: the worker can no longer start a job at
    /// once (its running slots filled with other jobs), so the next send wakes
    /// the queue's workers instead. A backend without hand-offs does nothing (the
    /// default).
    fn withdraw_handoffs(
        &self,
        queues: &[String],
        worker: &str,
        lease: Duration,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (queues, worker, lease);
        async { Ok(()) }
    }

    /// Extends leases still held to now + `lease`; returns each one's new token, or
    /// `None` where the lease was lost.
    fn extend(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<Option<Token>>>> + Send;

    /// Acks, reschedules and dead-letters finished deliveries, each only if its
    /// token still matches.
    fn settle(&self, queue: &str, batch: &Settle) -> impl Future<Output = Result<Settled>> + Send;

    /// A queue's counters (zero before any job was settled there).
    fn stats(&self, queue: &str) -> impl Future<Output = Result<QueueStats>> + Send;

    /// A queue's processed and failed runs in each minute of the last hour:
    /// [`MINUTES`](crate::backend::MINUTES) entries, oldest first, the current (partial) minute last. Each
    /// settle call adds its counts to its minute, in a ring of [`MINUTES`](crate::backend::MINUTES)
    /// entries the backend keeps per queue (on Redis, fields of the queue's
    /// counters hash), so the history costs nothing per job and stays bounded.
    fn minutes(&self, queue: &str) -> impl Future<Output = Result<Vec<MinuteStats>>> + Send;

    /// A queue's processed and failed runs in each hour of the last week:
    /// [`HOURS`](crate::backend::HOURS) entries, oldest first, the current
    /// (partial) hour last; a second ring beside the minutes', added to by the
    /// same settle calls (on Redis, in the same read and write of the
    /// counters hash).
    fn hours(&self, queue: &str) -> impl Future<Output = Result<Vec<MinuteStats>>> + Send;

    /// Per job type, how long the queue's runs took: a histogram each, added
    /// to by every settle (runs whose type and times the worker knew). The
    /// default keeps none.
    fn run_times(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Vec<crate::contract::runtimes::RunTimes>>> + Send {
        let _ = queue;
        async { Ok(Vec::new()) }
    }

    /// How many jobs of a queue are in each state, as
    /// [`Inspect::counts`](crate::inspect::Inspect::counts) (the worker samples
    /// it into its queue-size gauges).
    fn sizes(&self, queue: &str) -> impl Future<Output = Result<StateCounts>> + Send;

    /// The oldest `limit` dead letters of a queue, at most
    /// [`MAX_PAGE`](crate::inspect::MAX_PAGE) (one call reads no more; page
    /// through [`Admin::dead_page`](crate::ops::Admin::dead_page) for
    /// the rest).
    fn dead_letters(
        &self,
        queue: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeadLetter>>> + Send;

    /// The current score of each held job (at its token's priority) as a token:
    /// `None` for a job that is gone. Read when a renewal's reply was lost, to
    /// learn what it wrote.
    fn scores(
        &self,
        queue: &str,
        held: &[(JobId, Token)],
    ) -> impl Future<Output = Result<Vec<Option<Token>>>> + Send;

    /// Settings of the backend that can lose or delay jobs, as sentences to log
    /// at worker start (e.g. a Redis `maxmemory-policy` that evicts keys).
    fn warnings(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// Calls `subscribed()` once notifications are in effect, and `wake(queue)`
    /// for each of `queues` then (a send before that was heard by no one: a
    /// worker starting as it came has fetched already) and whenever jobs are
    /// sent to one of `queues`, until the notification channel
    /// fails (the worker then polls and listens again). It calls
    /// `wake("@control:<worker id>")` when a control is set on a worker
    /// ([`Admin::control_worker`](crate::ops::Admin::control_worker)), and
    /// `wake("@settings")` when a queue's settings change
    /// ([`Admin::set_settings`](crate::ops::Admin::set_settings)): a worker
    /// reads them at once with a full [`beat`](Self::beat) (`@` is in
    /// no queue name; a worker ignores another's control). It calls
    /// `subscribed()` again after notifications may have been lost (the
    /// worker then beats in full too).
    fn listen(
        &self,
        queues: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> impl Future<Output = Result<()>> + Send;

    /// [`listen`](Backend::listen), and also takes the jobs sends hand to worker
    /// `worker` (see [`fetch_waiting`](Backend::fetch_waiting)), passing each to
    /// `handed`, until `stop` is cancelled: it then stops taking hand-offs, passes
    /// on every job handed before that (so that none is left leased to a worker
    /// that no longer listens) and returns `Ok(())`. The default listens without
    /// hand-offs.
    fn listen_handoff(
        &self,
        queues: &[String],
        worker: &str,
        wake: &(dyn Fn(&str) + Send + Sync),
        handed: &(dyn Fn(Handed) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
        stop: &tokio_util::sync::CancellationToken,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (worker, handed);
        async move {
            tokio::select! {
                r = self.listen(queues, wake, subscribed) => r,
                _ = stop.cancelled() => Ok(()),
            }
        }
    }

    /// Whether the backend keeps real time, so that a worker waits for a due job
    /// with sub-millisecond precision, off tokio's millisecond timer. False (the
    /// default) for a backend on a test clock, whose waits stay on tokio's
    /// (possibly paused) timer.
    fn real_time(&self) -> bool {
        false
    }

    /// The worker's fallback poll of all its queues in one call: whether each
    /// has a job due, or a lease ending, within `within` (a send that woke no
    /// one, as an RSMQ client's without `realtime`; a retry or a lease of
    /// another worker). The default says yes for each, so every queue's
    /// dispatcher fetches.
    fn due_soon(
        &self,
        queues: &[String],
        within: Duration,
    ) -> impl Future<Output = Result<Vec<bool>>> + Send {
        let _ = within;
        let n = queues.len();
        async move { Ok(vec![true; n]) }
    }

    /// The backend's clock, Unix ms: the clock periodic schedules tick by.
    fn now_ms(&self) -> impl Future<Output = Result<u64>> + Send;

    /// Watches for job `id` of `queue` to finish, for at most `within`:
    /// subscribed (and registered, on Redis) before it returns, the stream
    /// yields when the job may have finished (acked, dead-lettered,
    /// cancelled, deleted; a yield can be spurious: read the job again) and
    /// ends when its connection is lost (watch again, then read again).
    /// Fails with [`QueueNotFound`](crate::Error::QueueNotFound) for no queue.
    fn watch_finish(
        &self,
        queue: &str,
        id: &JobId,
        within: std::time::Duration,
    ) -> impl Future<Output = Result<FinishWatch>> + Send;

    /// Opens batch `spec.id` with its callbacks; its jobs follow, each naming
    /// the batch in its envelope. Fails with
    /// [`InvalidValue`](crate::Error::InvalidValue) when the id is taken, or
    /// a callback's priority is outside -10..=10 (nothing is opened then).
    fn batch_open(
        &self,
        spec: &crate::contract::batches::BatchSpec,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Seals batch `id`, its enqueue done: its total grows by the `total`
    /// jobs its enqueuer sent (jobs its jobs added are counted already; a
    /// second seal changes nothing). It completes once they have all
    /// finished (at once when they have), and its callbacks are enqueued
    /// then. Fails with [`InvalidValue`](crate::Error::InvalidValue)
    /// for an unknown batch.
    fn batch_seal(
        &self,
        id: &crate::contract::batches::BatchId,
        total: u64,
    ) -> impl Future<Output = Result<()>> + Send;

    /// How batch `id` stands; `None` when unknown (or past its retention).
    fn batch_status(
        &self,
        id: &crate::contract::batches::BatchId,
    ) -> impl Future<Output = Result<Option<crate::contract::batches::BatchStatus>>> + Send;

    /// Counts, in their batches, the finishes a settle of `queue` recorded
    /// ([`Settled::batched`](crate::contract::leases::Settled::batched)),
    /// enqueues the callbacks that became due (each once, however often this
    /// runs for the same finish), then forgets them in the queue.
    fn batch_settled(
        &self,
        queue: &str,
        members: &[String],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Does what [`batch_settled`](Self::batch_settled) would have done for
    /// finishes of `queue` recorded long ago and not counted yet (their
    /// settle's worker died between its two steps): at most a few hundred a
    /// call.
    fn batch_recover(&self, queue: &str) -> impl Future<Output = Result<()>> + Send;

    /// Batches, newest first: those opened before `before_ms` (Unix ms; all
    /// with `None`), at most `limit` (1 to 1,000). A batch past its
    /// retention is left out (and forgotten): the page reads on past it, so
    /// that it is shorter than `limit` only when no older batch is kept, or,
    /// on Redis, when it read past 1,000 index entries of such batches (a
    /// call reads past no more): it then ends before the next, even empty,
    /// and the same call made again goes on past them, as the page forgot
    /// those it read past. The workers' sweep drops those over a week old,
    /// see [`batch_sweep`](Self::batch_sweep), so that many are left only
    /// when no worker swept for a while.
    fn batches(
        &self,
        before_ms: Option<u64>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<crate::contract::batches::BatchStatus>>> + Send;

    /// Batch `id`'s first dead jobs, in order of death: (queue, job id), at
    /// most `limit` (1 to 1,000; the batch keeps its first 1,000).
    fn batch_dead(
        &self,
        id: &crate::contract::batches::BatchId,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(String, JobId)>>> + Send;

    /// Records job `id` of `queue`, a flow's parent, as waiting for the jobs
    /// of `batch` (found by id as [`Waiting`](crate::inspect::JobState::Waiting)
    /// with its `body`) until it is sent or failed. Fails with
    /// [`QueueNotFound`](crate::Error::QueueNotFound) for no queue.
    fn flow_wait(
        &self,
        queue: &str,
        id: &JobId,
        batch: &crate::contract::batches::BatchId,
        body: &[u8],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Makes job `id` of `queue`, which exists already, job `r.index` of
    /// batch `r.batch`: its finish is counted there when it comes, or at
    /// once when it came already (checked and registered in one step).
    /// Fails with [`InvalidValue`](crate::Error::InvalidValue) for a job not
    /// known there (never was, or past its history's retention).
    fn flow_after(
        &self,
        queue: &str,
        id: &JobId,
        r: &crate::contract::batches::BatchRef,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The results batch `id`'s jobs returned (a flow's children), by index:
    /// those of indexes `from` to `from + limit - 1` (`limit` 1 to 1,000)
    /// that returned one. A batch keeps them as long as itself.
    fn batch_results(
        &self,
        id: &crate::contract::batches::BatchId,
        from: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<(u64, Vec<u8>)>>> + Send;

    /// Adds `jobs` (at most 1,000, each its queue and message) to batch `id` while it runs: its total
    /// grows first, so it completes only once they finish too, and they are
    /// sent each once (Redis keeps them in the batch until sent, for a
    /// sweep to send should the caller stop first). Queues are created with
    /// defaults when missing. Fails with
    /// [`InvalidValue`](crate::Error::InvalidValue) for a batch unknown,
    /// completed or cancelled (nothing added), or a job over its queue's
    /// maxsize: the call's jobs of that queue and priority are not added,
    /// the others are. Another error (a connection lost) may come after
    /// the jobs were kept: they are sent all the same. Each message's body
    /// and priority are taken; it is due after its queue's delay, and its
    /// `when`, `unique` and `keyed` are ignored.
    fn batch_add(
        &self,
        id: &crate::contract::batches::BatchId,
        jobs: &[(String, crate::contract::queues::SendMessage)],
    ) -> impl Future<Output = Result<()>> + Send;

    /// Cancels batch `id`: it takes no more jobs, and workers cancel its
    /// jobs rather than start them. Returns whether it was cancelled now
    /// (`false`: unknown, completed, or cancelled already).
    fn batch_cancel(
        &self,
        id: &crate::contract::batches::BatchId,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Batches cancelled, listed after `after` (a score this returned, 0
    /// for all), each with its score, in the order they were listed: at
    /// most 1,000 (page on from the last one's score). Scores grow with
    /// each batch listed (about its time, Unix ms), so reading on from the
    /// last one seen misses none. A batch stays listed a week. Workers read
    /// it once a second while they run batch jobs, to cancel a cancelled
    /// batch's jobs.
    fn cancelled_batches(
        &self,
        after: u64,
    ) -> impl Future<Output = Result<Vec<(crate::contract::batches::BatchId, u64)>>> + Send;

    /// Frees the unique key job `id` of `queue` holds, if it still holds it
    /// (see [`UniqueUntil::Start`](crate::queue::UniqueUntil::Start)): a
    /// worker calls it as a run of a job enqueued unique until its run starts
    /// begins, before the handler. A key another job took over stays with
    /// that job; a job that holds none changes nothing. The default frees
    /// nothing: such a job then holds its key until it is done, as a job
    /// unique until done does (redjob's backends free it).
    fn unique_started(&self, queue: &str, id: &JobId) -> impl Future<Output = Result<()>> + Send {
        let _ = (queue, id);
        async { Ok(()) }
    }

    /// Cancels job `id` of `queue` as [`Inspect::cancel_by`] does (a worker
    /// cancels a cancelled batch's jobs so); returns whether it was there.
    ///
    /// [`Inspect::cancel_by`]: crate::inspect::Inspect::cancel_by
    fn cancel_job(
        &self,
        queue: &str,
        id: &JobId,
        by: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Marks `queue` as holding batch finishes that may not be counted yet,
    /// for `until` from now (at least 1 s; a later mark stands): a worker
    /// calls it with its lease before it settles jobs of batches there
    /// (again a third of its lease later), so that a sweep finds them should
    /// it die between its settle and its count.
    fn batch_mark(
        &self,
        queue: &str,
        until: std::time::Duration,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Counts the finishes of every queue whose mark ran out
    /// ([`batch_mark`](Self::batch_mark)) that are not counted yet, dropping
    /// the marks of queues with none left, and sends the callbacks a sealer
    /// left due (10 s after the seal was recorded). Workers sweep every
    /// third of their lease; an idle sweep is one command. A sweep also
    /// forgets batches past their retention: in memory up to 1,000 a sweep;
    /// on Redis, where a batch's keys expire but not its entry in the index
    /// of batches (`ns:@batches`), a backend's first sweep and then one a
    /// minute read up to 1,000 entries over a week old (one
    /// `ZRANGEBYSCORE` per 100, going on where the last stopped), and remove
    /// those whose batch is gone (an `EXISTS` each).
    fn batch_sweep(&self) -> impl Future<Output = Result<()>> + Send;

    /// Enqueues `msg` (its body and priority; due at once) as the job of
    /// `tick`, unless this tick (or a later one) of the schedule was enqueued
    /// already: however many workers call it, a tick is enqueued once. The
    /// job's id is [`Tick::id`]. Creates the queue with `create` when missing.
    /// A schedule name none may have (empty, over 200 bytes, with a control
    /// character, ending in `:paused` or `:next`, as a worker's build refuses)
    /// is [`Error::InvalidValue`](crate::Error::InvalidValue), nothing written.
    fn tick(
        &self,
        queue: &str,
        tick: &Tick<'_>,
        msg: &SendMessage,
        create: &QueueOptions,
    ) -> impl Future<Output = Result<Ticked>> + Send;

    /// [`tick`](Self::tick) for ticks of several schedules of `queue` due
    /// together: each one's outcome, in order, as `tick` one after another
    /// would give it (an invalid name or priority, or a body too large, fails
    /// its own tick); `Err` only when the call fails as a whole (Redis). The Redis
    /// backend sends those alike in priority and without a concurrency key in
    /// one call (up to 100), so that a fleet of workers with many schedules
    /// makes a call per worker, not per schedule, at each instant; the default
    /// calls `tick` for each.
    fn tick_many(
        &self,
        queue: &str,
        ticks: &[(Tick<'_>, &SendMessage)],
        create: &QueueOptions,
    ) -> impl Future<Output = Result<Vec<Result<Ticked>>>> + Send {
        async move {
            let mut out = Vec::with_capacity(ticks.len());
            for (tick, msg) in ticks {
                out.push(self.tick(queue, tick, msg, create).await);
            }
            Ok(out)
        }
    }

    /// Registers worker `id` in the live-worker registry (or refreshes it)
    /// with `beat` (JSON) for `ttl`, and returns the control an operator set
    /// on it ([`Admin::control_worker`](crate::ops::Admin::control_worker))
    /// and the settings' version; `beat` empty removes it with its control
    /// (and returns no control).
    fn beat(
        &self,
        id: &str,
        beat: &[u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<BeatReply>> + Send;

    /// Stores `settings` (a worker's builder values) for `queue` where it has
    /// none stored, leaving stored ones alone, recording `by` (`worker <id>`)
    /// as who stored them, and returns the settings stored after it: those
    /// are in force for every worker (see
    /// [`QueueSettings`](crate::ops::QueueSettings)).
    /// [`Error::QueueNotFound`](crate::Error::QueueNotFound) when the queue does
    /// not exist (yet). The default stores nothing and returns no settings,
    /// for a backend that keeps none: each worker's own values apply.
    fn init_settings(
        &self,
        queue: &str,
        settings: &QueueSettings,
        by: &str,
    ) -> impl Future<Output = Result<QueueSettings>> + Send {
        let _ = (queue, settings, by);
        async { Ok(QueueSettings::default()) }
    }

    /// Drops `queue`'s history entries past their age, and the arguments past
    /// theirs, as the setting stored with the queue says (at most 1,000 a
    /// call): a queue that settles nothing more is trimmed too. Workers call
    /// it for each of their queues every two minutes. The default does
    /// nothing, for a backend without a history.
    fn trim_history(&self, queue: &str) -> impl Future<Output = Result<()>> + Send {
        let _ = queue;
        async { Ok(()) }
    }

    /// Stores what a worker serves (its job types with their options, its
    /// subscribers, its periodic schedules: JSON) under `digest`, which its
    /// beats name: one entry for all the workers of one build, written at a
    /// worker's start and with its full beats every two minutes, read with the
    /// registry's listing. The default stores nothing: the listing then shows
    /// no job types, and only the schedules that have not ticked yet.
    fn serve(&self, digest: &str, serves: &[u8]) -> impl Future<Output = Result<()>> + Send {
        let _ = (digest, serves);
        async { Ok(()) }
    }

    /// Checks the layout version the backend's stored data is in (storing
    /// [`LAYOUT_VERSION`] where none is): a worker calls it before it takes
    /// any work, and refuses to start on a later layout with
    /// [`Error::LayoutUnsupported`](crate::Error::LayoutUnsupported). Returns
    /// the version in force. The default, for a backend that stores nothing
    /// across releases, is this release's.
    fn check_layout(&self) -> impl Future<Output = Result<u32>> + Send {
        async { Ok(LAYOUT_VERSION) }
    }

    /// Moves worker `id`'s registration on, keeping its beat: it then runs out
    /// `ttl` from now, its last beat or touch having been `since` ago (which a
    /// backend without a clock of its own adds to the entry's end). False when
    /// it has no entry, which it leaves so: the worker then beats in full. It
    /// reads neither the control nor the settings' version: the backend tells
    /// of their changes through [`listen`](Self::listen), and the worker reads
    /// them with its full beats.
    fn touch(
        &self,
        id: &str,
        ttl: Duration,
        since: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// The version of the layout this release stores in Redis (keys, fields,
/// their encodings), kept in the namespace (`ns:@meta`, field `layout`; a key
/// RSMQ's clients never read). A release reads every layout up to its own; a
/// change a release before it could not read (a key it would misread, not a
/// field it ignores) raises it, and a worker of that earlier release then
/// refuses to start ([`Backend::check_layout`]).
///
/// ```
/// assert_eq!(redjob::backend::LAYOUT_VERSION, 1);
/// ```
pub const LAYOUT_VERSION: u32 = 1;

/// `d` in whole milliseconds, cut to [`MAX_DELAY`](crate::worker::MAX_DELAY): every
/// lease and delay a backend schedules goes through it, so no duration overflows.
pub(crate) fn clamped_ms(d: Duration) -> u64 {
    // at most 9,999,999,000 ms: the cast is exact
    d.min(crate::contract::queues::MAX_DELAY).as_millis() as u64
}

/// Sends `msgs` to `queue`, creating the queue with `create` on first use (when the
/// send finds it missing), for backends whose queue API is a [`Queues`].
pub(crate) async fn send_creating<Q: Queues + Sync>(
    q: &Q,
    queue: &str,
    msgs: &[SendMessage],
    create: &QueueOptions,
) -> Result<Vec<Sent>> {
    creating(q, queue, create, || q.send_outcomes(queue, msgs)).await
}

/// Runs `call`; when it finds `queue` missing, creates it with `create` and
/// runs it again.
pub(crate) async fn creating<Q, T, F>(
    q: &Q,
    queue: &str,
    create: &QueueOptions,
    call: impl Fn() -> F,
) -> Result<T>
where
    Q: Queues + Sync,
    F: Future<Output = Result<T>>,
{
    match call().await {
        Err(crate::Error::QueueNotFound { .. }) => {
            match q.create_queue(queue, *create).await {
                Ok(()) | Err(crate::Error::QueueExists { .. }) => {}
                Err(e) => return Err(e),
            }
            tracing::debug!(queue, "created queue on first use");
            call().await
        }
        r => r,
    }
}

/// [`Backend`]'s methods, for [`forward!`](crate::contract::forward::forward):
/// `backend_methods! { impl Backend for Type, |self| ...; }`.
macro_rules! backend_methods {
    ($($head:tt)*) => {
        $crate::contract::forward::forward! {
            $($head)*
            async fn send(queue: &str, msgs: &[$crate::contract::queues::SendMessage], create: &$crate::contract::queues::QueueOptions) -> $crate::Result<Vec<$crate::contract::queues::Sent>>;
            async fn fetch(queue: &str, max: usize, lease: std::time::Duration) -> $crate::Result<$crate::contract::leases::Fetched>;
            async fn fetch_waiting(queue: &str, max: usize, lease: std::time::Duration, worker: &str, hands: usize) -> $crate::Result<$crate::contract::leases::Fetched>;
            async fn withdraw_handoffs(queues: &[String], worker: &str, lease: std::time::Duration) -> $crate::Result<()>;
            async fn extend(queue: &str, leases: &[($crate::JobId, $crate::contract::leases::Token)], lease: std::time::Duration) -> $crate::Result<Vec<Option<$crate::contract::leases::Token>>>;
            async fn settle(queue: &str, batch: &$crate::contract::leases::Settle) -> $crate::Result<$crate::contract::leases::Settled>;
            async fn sizes(queue: &str) -> $crate::Result<$crate::contract::inspect::StateCounts>;
            async fn stats(queue: &str) -> $crate::Result<$crate::contract::stats::QueueStats>;
            async fn run_times(queue: &str) -> $crate::Result<Vec<$crate::contract::runtimes::RunTimes>>;
            async fn minutes(queue: &str) -> $crate::Result<Vec<$crate::contract::stats::MinuteStats>>;
            async fn hours(queue: &str) -> $crate::Result<Vec<$crate::contract::stats::MinuteStats>>;
            async fn dead_letters(queue: &str, limit: usize) -> $crate::Result<Vec<$crate::contract::stats::DeadLetter>>;
            async fn scores(queue: &str, held: &[($crate::JobId, $crate::contract::leases::Token)]) -> $crate::Result<Vec<Option<$crate::contract::leases::Token>>>;
            async fn warnings() -> $crate::Result<Vec<String>>;
            async fn listen(queues: &[String], wake: &(dyn Fn(&str) + Send + Sync), subscribed: &(dyn Fn() + Send + Sync)) -> $crate::Result<()>;
            async fn due_soon(queues: &[String], within: std::time::Duration) -> $crate::Result<Vec<bool>>;
            async fn listen_handoff(queues: &[String], worker: &str, wake: &(dyn Fn(&str) + Send + Sync), handed: &(dyn Fn($crate::contract::leases::Handed) + Send + Sync), subscribed: &(dyn Fn() + Send + Sync), stop: &tokio_util::sync::CancellationToken) -> $crate::Result<()>;
            async fn now_ms() -> $crate::Result<u64>;
            async fn watch_finish(queue: &str, id: &$crate::JobId, within: std::time::Duration) -> $crate::Result<$crate::contract::backend::FinishWatch>;
            async fn batch_open(spec: &$crate::contract::batches::BatchSpec) -> $crate::Result<()>;
            async fn batch_seal(id: &$crate::contract::batches::BatchId, total: u64) -> $crate::Result<()>;
            async fn batch_status(id: &$crate::contract::batches::BatchId) -> $crate::Result<Option<$crate::contract::batches::BatchStatus>>;
            async fn batch_settled(queue: &str, members: &[String]) -> $crate::Result<()>;
            async fn batch_recover(queue: &str) -> $crate::Result<()>;
            async fn batch_mark(queue: &str, until: std::time::Duration) -> $crate::Result<()>;
            async fn batches(before_ms: Option<u64>, limit: usize) -> $crate::Result<Vec<$crate::contract::batches::BatchStatus>>;
            async fn batch_dead(id: &$crate::contract::batches::BatchId, limit: usize) -> $crate::Result<Vec<(String, $crate::JobId)>>;
            async fn flow_wait(queue: &str, id: &$crate::JobId, batch: &$crate::contract::batches::BatchId, body: &[u8]) -> $crate::Result<()>;
            async fn flow_after(queue: &str, id: &$crate::JobId, r: &$crate::contract::batches::BatchRef) -> $crate::Result<()>;
            async fn batch_results(id: &$crate::contract::batches::BatchId, from: u64, limit: usize) -> $crate::Result<Vec<(u64, Vec<u8>)>>;
            async fn batch_sweep() -> $crate::Result<()>;
            async fn batch_add(id: &$crate::contract::batches::BatchId, jobs: &[(String, $crate::contract::queues::SendMessage)]) -> $crate::Result<()>;
            async fn batch_cancel(id: &$crate::contract::batches::BatchId) -> $crate::Result<bool>;
            async fn cancel_job(queue: &str, id: &$crate::JobId, by: &str) -> $crate::Result<bool>;
            async fn unique_started(queue: &str, id: &$crate::JobId) -> $crate::Result<()>;
            async fn cancelled_batches(after: u64) -> $crate::Result<Vec<($crate::contract::batches::BatchId, u64)>>;
            async fn tick(queue: &str, tick: &$crate::contract::admin::Tick<'_>, msg: &$crate::contract::queues::SendMessage, create: &$crate::contract::queues::QueueOptions) -> $crate::Result<$crate::contract::admin::Ticked>;
            async fn tick_many(queue: &str, ticks: &[($crate::contract::admin::Tick<'_>, &$crate::contract::queues::SendMessage)], create: &$crate::contract::queues::QueueOptions) -> $crate::Result<Vec<$crate::Result<$crate::contract::admin::Ticked>>>;
            async fn beat(id: &str, beat: &[u8], ttl: std::time::Duration) -> $crate::Result<$crate::contract::admin::BeatReply>;
            async fn touch(id: &str, ttl: std::time::Duration, since: std::time::Duration) -> $crate::Result<bool>;
            async fn serve(digest: &str, serves: &[u8]) -> $crate::Result<()>;
            async fn check_layout() -> $crate::Result<u32>;
            async fn init_settings(queue: &str, settings: &$crate::contract::settings::QueueSettings, by: &str) -> $crate::Result<$crate::contract::settings::QueueSettings>;
            async fn trim_history(queue: &str) -> $crate::Result<()>;
            fn real_time() -> bool;
        }
    };
}
pub(crate) use backend_methods;

/// What [`Backend::watch_finish`] returns: a yield for each notice that the
/// job may have finished; its end, a lost connection.
pub type FinishWatch = futures::stream::BoxStream<'static, ()>;
