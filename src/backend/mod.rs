//! The storage a worker runs on: a small trait of atomic, batched operations.
//!
//! [`RedisBackend`](redis::RedisBackend) is the product. The trait is kept small so
//! that an in-memory backend can give the same semantics.

pub mod any;
pub mod memory;
pub mod redis;

use std::future::Future;
use std::time::Duration;

use crate::ops::{Retention, Tick, Ticked};
use crate::queue::{QueueOptions, Queues, SendMessage, Sent};
use crate::{JobId, Result};

/// Added to a leased job's delivery count in its score's thousandths: a lease
/// is scored at its end, `<lease end ms>.<500 + count>`, as RSMQ scores a
/// received message at the end of its visibility timeout (so RSMQ clients see
/// the job again once the lease runs out); every other score carries a count
/// below 500 (a retry's `<due>.<count>`, a send's whole ms). `LEASE_MARK` in
/// lib.lua.
pub(crate) const LEASE_MARK: u64 = 500;

/// The most deliveries a score counts (`MAX_COUNT` in lib.lua): a count of 499
/// means "499 or more".
pub(crate) const MAX_COUNT: u32 = 499;

/// Until the clock reaches it (the year 2096), where the scores of leases written
/// by an earlier redjob start, in ms (`LEGACY + <lease end>`; `LEGACY` in
/// lib.lua): nothing is scored there any more, and due times stop below it
/// ([`LAST_DUE_MS`](crate::queue::LAST_DUE_MS)).
pub(crate) const LEGACY_LEASED_MS: u64 = 4_000_000_000_000;

/// Whether a score in thousandths of a ms is a lease's (see [`LEASE_MARK`]).
pub(crate) fn is_lease(k: u64) -> bool {
    k % 1000 >= LEASE_MARK
}

/// The delivery count a score in thousandths of a ms carries (see [`LEASE_MARK`]).
pub(crate) fn score_count(k: u64) -> u32 {
    let t = k % 1000;
    (if t >= LEASE_MARK { t - LEASE_MARK } else { t }) as u32
}

/// A delivery's fencing token: the job's score while this worker holds it, and
/// the priority level the job lives at.
///
/// The score is `<lease end ms>.<500 + delivery count>`: a lease is scored at its
/// end, as RSMQ does, and its thousandths tell it from a scheduled job's score
/// (see [`JobState`](crate::inspect::JobState)). [`Token::attempt`] is the
/// delivery count (1 on first delivery, at most 499), and ack, extend and
/// reschedule act only while the score is unchanged. Its text form
/// ([`Display`](std::fmt::Display), [`FromStr`](std::str::FromStr)) is the score
/// alone, as the scripts compare it; a parsed token is at priority 0.
///
/// ```
/// use redjob::backend::Token;
///
/// let t = Token::new(1_790_000_000_123, 4);
/// assert_eq!((t.attempt(), t.lease_until_ms(), t.priority()), (4, 1_790_000_000_123, 0));
/// assert_eq!(t.to_string(), "1790000000123.504");
/// assert_eq!(t.to_string().parse::<Token>().unwrap(), t);
/// assert_eq!(t.at_priority(3).priority(), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token {
    score: u64,
    priority: i8,
}

impl Token {
    /// A token for a lease ending at `lease_until_ms` on delivery number `attempt`,
    /// at priority 0.
    pub fn new(lease_until_ms: u64, attempt: u32) -> Self {
        Token {
            score: lease_until_ms
                .saturating_mul(1000)
                .saturating_add(LEASE_MARK + u64::from(attempt.min(MAX_COUNT))),
            priority: 0,
        }
    }

    /// The same token for a job at priority level `priority`.
    pub fn at_priority(self, priority: i8) -> Self {
        Token { priority, ..self }
    }

    /// The delivery count, starting at 1.
    pub fn attempt(self) -> u32 {
        score_count(self.score)
    }

    /// When the lease ends, Unix ms (Redis time).
    pub fn lease_until_ms(self) -> u64 {
        self.score / 1000
    }

    /// The priority level of the job (see [`queue::MAX_PRIORITY`](crate::queue::MAX_PRIORITY)).
    pub fn priority(self) -> i8 {
        self.priority
    }

    /// The score in thousandths of a millisecond.
    pub(crate) fn score(self) -> u64 {
        self.score
    }

    /// The token for a score in thousandths of a ms, as stored.
    pub(crate) fn from_raw(score: u64, priority: i8) -> Token {
        Token { score, priority }
    }

    /// The token a sorted-set score stands for (thousandths rounded), if the
    /// score is a finite, non-negative number of milliseconds. The whole ms and
    /// the fraction are taken apart first: a double near 2^43 is exact to half
    /// a thousandth only that way.
    pub(crate) fn from_score(score: f64, priority: i8) -> Option<Token> {
        let ms = score.floor();
        if !(0.0..9.0e12).contains(&ms) {
            return None;
        }
        // both in range, so the casts are exact
        let frac = ((score - ms) * 1000.0).round() as u64;
        Some(Token {
            score: ms as u64 * 1000 + frac,
            priority,
        })
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.score / 1000, self.score % 1000)
    }
}

impl std::str::FromStr for Token {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || crate::Error::Protocol(format!("bad token {s:?}"));
        let (ms, n) = s.split_once('.').ok_or_else(bad)?;
        if n.len() != 3 {
            return Err(bad());
        }
        let ms = ms.parse::<u64>().map_err(|_| bad())?;
        let n = n.parse::<u64>().map_err(|_| bad())?;
        if n < LEASE_MARK {
            return Err(bad());
        }
        ms.checked_mul(1000)
            .and_then(|v| v.checked_add(n))
            .map(|score| Token { score, priority: 0 })
            .ok_or_else(bad)
    }
}

/// A job leased to a worker.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The job's id.
    pub id: JobId,
    /// The stored body (the job envelope, or whatever a foreign client wrote).
    pub body: Vec<u8>,
    /// This delivery's fencing token.
    pub token: Token,
    /// How long the job had been due when it was leased, in ms of the backend's
    /// clock: its queue wait (for a job whose lease ran out, since then). 0 when
    /// the backend does not know.
    pub waited_ms: u64,
}

/// A job a send handed straight to a waiting worker (see
/// [`Backend::fetch_waiting`]): leased to that worker as a fetch would have.
///
/// ```
/// use redjob::backend::{Delivery, Handed, Token};
///
/// let handed = Handed {
///     queue: "mail".into(),
///     delivery: Delivery {
///         id: "mhx3k0vz1qabcdefghijklmnopqrstuv".parse()?,
///         body: br#"{"type":"welcome","args":{}}"#.to_vec(),
///         token: Token::new(1_790_000_030_000, 1),
///         waited_ms: 0,
///     },
///     now_us: 1_790_000_000_000_000,
///     lost: false,
/// };
/// // leased for 30 s from the hand-off, first delivery
/// let lease_ms = handed.delivery.token.lease_until_ms() - handed.now_us / 1000;
/// assert_eq!((lease_ms, handed.delivery.token.attempt()), (30_000, 1));
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Handed {
    /// The queue it was sent to.
    pub queue: String,
    /// The job and its lease.
    pub delivery: Delivery,
    /// The backend's clock when the lease began, Unix µs.
    pub now_us: u64,
    /// Not the job but a note of it: it was handed to this worker before its
    /// listener last connected, and its message may have been lost with the
    /// connection before (`body` is empty, `now_us` 0). The worker releases it,
    /// not counted as an attempt, unless it holds it.
    pub lost: bool,
}

/// The result of a fetch.
#[derive(Debug, Default)]
pub struct Fetched {
    /// The leased jobs, highest priority first, oldest first within one.
    pub jobs: Vec<Delivery>,
    /// The backend's clock at the fetch, Unix µs.
    pub now_us: u64,
    /// When fewer jobs than asked were due: when the earliest job left in the
    /// queue is due (a delayed job, a retry, or a lease that may expire), Unix µs.
    pub next_due_us: Option<u64>,
    /// The queue's maxsize: a body over it (written around the checks of a send)
    /// is dead-lettered unrun. `None` for no limit.
    pub max_body: Option<usize>,
    /// Due ids without a body, removed from the queue (evicted by Redis, or
    /// deleted halfway by another client).
    pub orphans: usize,
    /// The queue does not exist.
    pub missing: bool,
    /// The queue is paused (see [`Admin::pause`](crate::ops::Admin::pause)):
    /// nothing was leased.
    pub paused: bool,
}

/// A finished delivery to put back for later: a retry, or a release at shutdown.
#[derive(Debug, Clone)]
pub struct Reschedule {
    /// The job.
    pub id: JobId,
    /// The delivery's token.
    pub token: Token,
    /// Visible again after this delay (backend time).
    pub delay: Duration,
    /// Deliveries to count so far: the attempt for a retry, one less for a release.
    pub deliveries: u32,
    /// A release (shutdown) rather than a retry; counted apart in the stats.
    pub release: bool,
    /// Why a retry's run failed: kept as the job's last error (see
    /// [`JobInfo::last_error`](crate::inspect::JobInfo::last_error)).
    pub error: Option<String>,
}

/// A delivery to move to the dead-letter queue.
#[derive(Debug, Clone)]
pub struct DeadLetterEntry {
    /// The job.
    pub id: JobId,
    /// The delivery's token.
    pub token: Token,
    /// Why it died.
    pub error: String,
}

/// Finished deliveries of one queue, settled in one call.
#[derive(Debug, Default, Clone)]
pub struct Settle {
    /// Succeeded: delete.
    pub acks: Vec<(JobId, Token)>,
    /// Retry or release.
    pub reschedules: Vec<Reschedule>,
    /// Dead-letter.
    pub dead: Vec<DeadLetterEntry>,
    /// How many dead letters the queue keeps: dead-lettering drops the oldest
    /// beyond it.
    pub retention: Retention,
}

impl Settle {
    /// Nothing to settle.
    pub fn is_empty(&self) -> bool {
        self.acks.is_empty() && self.reschedules.is_empty() && self.dead.is_empty()
    }

    /// The batch split by the priority of its jobs (their tokens'), in order of
    /// first appearance.
    pub(crate) fn by_priority(&self) -> Vec<(i8, Settle)> {
        fn part(parts: &mut Vec<(i8, Settle)>, p: i8, retention: Retention) -> &mut Settle {
            let i = match parts.iter().position(|(q, _)| *q == p) {
                Some(i) => i,
                None => {
                    let part = Settle {
                        retention,
                        ..Settle::default()
                    };
                    parts.push((p, part));
                    parts.len() - 1
                }
            };
            &mut parts[i].1
        }
        let mut parts: Vec<(i8, Settle)> = Vec::new();
        for a in &self.acks {
            part(&mut parts, a.1.priority(), self.retention)
                .acks
                .push(*a);
        }
        for r in &self.reschedules {
            part(&mut parts, r.token.priority(), self.retention)
                .reschedules
                .push(r.clone());
        }
        for d in &self.dead {
            part(&mut parts, d.token.priority(), self.retention)
                .dead
                .push(d.clone());
        }
        parts
    }
}

/// How many entries of a [`Settle`] passed the fence.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Settled {
    /// Acks applied.
    pub acked: u64,
    /// Retries and releases applied.
    pub rescheduled: u64,
    /// Dead letters applied.
    pub dead: u64,
    /// Entries that failed the fence because their job no longer exists: deleted
    /// while it ran, or settled already (by a call whose reply was lost). The
    /// other failures were delivered again after their lease ran out.
    pub gone: Vec<JobId>,
}

/// A queue's counters, kept by the workers in the backend.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Jobs that succeeded.
    pub processed: u64,
    /// Failed runs: retried plus dead.
    pub failed: u64,
    /// Failed runs scheduled for another attempt.
    pub retried: u64,
    /// Jobs moved to the dead-letter queue.
    pub dead: u64,
}

/// One minute of a queue's settled runs: a point of
/// [`Backend::minutes`]' last hour.
///
/// ```
/// use redjob::backend::MinuteStats;
///
/// let m = MinuteStats { start_ms: 60_000, processed: 12, failed: 1 };
/// assert_eq!(m.processed + m.failed, 13);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MinuteStats {
    /// The minute's start, Unix ms (backend time).
    pub start_ms: u64,
    /// Jobs that succeeded in it.
    pub processed: u64,
    /// Failed runs in it: retried plus dead.
    pub failed: u64,
}

/// How many minutes [`Backend::minutes`] returns: the hour before the current
/// minute, then the current one.
pub const MINUTES: usize = 61;

/// The [`MINUTES`] minutes up to `now_ms`, oldest first, with `minutes` added
/// up into them by the minute each starts in; those of other minutes are left
/// out, and a minute without any counts zero (sums saturate). How
/// [`Backend::minutes`] lays out its ring, and how to sum the hours of several
/// queues, read at slightly different times, into one.
///
/// ```
/// use redjob::backend::{MINUTES, MinuteStats, last_hour};
///
/// let now = 100 * 60_000 + 5;
/// let a = MinuteStats { start_ms: 100 * 60_000, processed: 1, failed: 2 };
/// let b = MinuteStats { start_ms: 100 * 60_000, processed: 10, failed: 0 };
/// let old = MinuteStats { start_ms: 39 * 60_000, processed: 50, failed: 50 };
/// let hour = last_hour(now, [a, b, old]);
/// assert_eq!(hour.len(), MINUTES);
/// assert_eq!(hour[0].start_ms, 40 * 60_000);
/// assert_eq!((hour[60].processed, hour[60].failed), (11, 2));
/// ```
pub fn last_hour(now_ms: u64, minutes: impl IntoIterator<Item = MinuteStats>) -> Vec<MinuteStats> {
    let now = now_ms / 60_000;
    let first = now.saturating_sub(MINUTES as u64 - 1);
    let mut out: Vec<MinuteStats> = (first..=now)
        .map(|m| MinuteStats {
            start_ms: m * 60_000,
            ..MinuteStats::default()
        })
        .collect();
    for m in minutes {
        let at = m.start_ms / 60_000;
        if (first..=now).contains(&at) {
            let slot = &mut out[(at - first) as usize];
            slot.processed = slot.processed.saturating_add(m.processed);
            slot.failed = slot.failed.saturating_add(m.failed);
        }
    }
    out
}

/// A ring entry `(minute, processed, failed)` (minute: Unix ms / 60,000).
pub(crate) fn ring_minute((m, processed, failed): (u64, u64, u64)) -> MinuteStats {
    MinuteStats {
        start_ms: m.saturating_mul(60_000),
        processed,
        failed,
    }
}

/// A job in the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The job's id.
    pub id: JobId,
    /// Its body as stored (the envelope, or whatever could not be decoded).
    pub body: Vec<u8>,
    /// The last error, or why the body could not be run.
    pub error: String,
    /// Deliveries it had.
    pub attempts: u32,
    /// When it died, Unix ms (backend time).
    pub died_at_ms: u64,
}

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
    /// queue's next send of a job due at once to lease it to worker `worker` and
    /// hand it over through [`listen_handoff`](Backend::listen_handoff) (one hop
    /// from the send to the worker instead of a wake-up and a fetch). Good for one
    /// job; a fetch that leases all it asked for withdraws it. A backend without
    /// hand-offs fetches (the default); implement both methods or neither.
    fn fetch_waiting(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        worker: &str,
    ) -> impl Future<Output = Result<Fetched>> + Send {
        let _ = worker;
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
    /// [`MINUTES`] entries, oldest first, the current (partial) minute last. Each
    /// settle call adds its counts to its minute, in a ring of [`MINUTES`]
    /// entries the backend keeps per queue (on Redis, fields of the queue's
    /// counters hash), so the history costs nothing per job and stays bounded.
    fn minutes(&self, queue: &str) -> impl Future<Output = Result<Vec<MinuteStats>>> + Send;

    /// How many jobs of a queue are in each state, as
    /// [`Inspect::counts`](crate::inspect::Inspect::counts) (the worker samples
    /// it into its queue-size gauges).
    fn sizes(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<crate::inspect::StateCounts>> + Send;

    /// The oldest `limit` dead letters of a queue.
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

    /// Calls `subscribed()` once notifications are in effect, then `wake(queue)`
    /// whenever jobs are sent to one of `queues`, until the notification channel
    /// fails (the worker then polls and listens again).
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

    /// Enqueues `msg` (its body and priority; due at once) as the job of
    /// `tick`, unless this tick (or a later one) of the schedule was enqueued
    /// already: however many workers call it, a tick is enqueued once. The
    /// job's id is [`Tick::id`]. Creates the queue with `create` when missing.
    fn tick(
        &self,
        queue: &str,
        tick: &Tick<'_>,
        msg: &SendMessage,
        create: &QueueOptions,
    ) -> impl Future<Output = Result<Ticked>> + Send;

    /// Registers worker `id` in the live-worker registry (or refreshes it)
    /// with `beat` (JSON) for `ttl`; `beat` empty removes it.
    fn beat(&self, id: &str, beat: &[u8], ttl: Duration)
    -> impl Future<Output = Result<()>> + Send;

    /// Moves worker `id`'s registration on, keeping its beat: it then runs out
    /// `ttl` from now, its last beat or touch having been `since` ago (which a
    /// backend without a clock of its own adds to the entry's end). False when
    /// it has no entry, which it leaves so: the worker then beats in full.
    fn touch(
        &self,
        id: &str,
        ttl: Duration,
        since: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// `d` in whole milliseconds, cut to [`MAX_DELAY`](crate::worker::MAX_DELAY): every
/// lease and delay a backend schedules goes through it, so no duration overflows.
pub(crate) fn clamped_ms(d: Duration) -> u64 {
    // at most 9,999,999,000 ms: the cast is exact
    d.min(crate::worker::MAX_DELAY).as_millis() as u64
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
