//! The lease a worker holds on a job and what it hands back: tokens, deliveries,
//! hand-offs, fetched batches and settles, with the score marks they are read from.

use std::time::Duration;

use crate::contract::attempts::{Ran, RunBy};
use crate::contract::history::History;
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

    /// The token as its `Display` writes it (`"<ms>.<thousandths>"`), into
    /// `buf` without the formatting machinery: a settle writes one a job.
    pub(crate) fn write_digits<'b>(&self, buf: &'b mut [u8; 24]) -> &'b [u8] {
        // "1ttt", its leading 1 then made the point
        let point = digits_before(buf, 24, 1000 + self.score % 1000);
        buf[point] = b'.';
        let at = digits_before(buf, point, self.score / 1000);
        &buf[at..]
    }
}

/// Writes `n` in decimal into `buf`, ending just before `end`; returns where
/// it starts (`buf` must have room).
pub(crate) fn digits_before(buf: &mut [u8], end: usize, n: u64) -> usize {
    let (mut at, mut n) = (end, n);
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return at;
        }
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
/// [`Backend::fetch_waiting`](crate::backend::Backend::fetch_waiting)): leased to that worker as a fetch would have.
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
    /// A limit across the fleet (a global concurrency or a rate limit) left
    /// no place for more: `next_due_us` says when it lets a job start; the
    /// fetch did not register for a hand-off.
    pub held: Held,
    /// Batch counts of the queue's finished jobs have waited too long to be
    /// applied (their settle's worker died between its two steps): call
    /// [`Backend::batch_recover`](crate::backend::Backend::batch_recover).
    pub stale_batches: bool,
}

/// Which of a queue's limits across the fleet held a fetch back (none: the
/// default).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// The global concurrency: every place is taken.
    pub concurrency: bool,
    /// The rate limit: its window is full.
    pub rate: bool,
    /// A handler's throttle ([`JobError::rate_limited`](crate::JobError::rate_limited))
    /// holds the queue.
    pub throttle: bool,
    /// How many due jobs the limits kept the fetch from leasing, at most what
    /// it asked for less what it leased (0 when nothing else was due).
    pub jobs: u32,
}

impl Held {
    /// From fetch.lua's bits: 1 the concurrency, 2 the rate, 4 a throttle;
    /// the jobs held back, 16 each.
    pub(crate) fn from_bits(b: i64) -> Self {
        Held {
            concurrency: b & 1 != 0,
            rate: b & 2 != 0,
            throttle: b & 4 != 0,
            jobs: u32::try_from(b.max(0) >> 4).unwrap_or(u32::MAX),
        }
    }

    /// Whether any limit held the fetch back.
    pub fn any(&self) -> bool {
        self.concurrency || self.rate || self.throttle
    }
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
    /// A release whose run is in [`Settle::ran`] (its handler started, and
    /// was cancelled) gets an attempt record of outcome `released`, its
    /// delivery still not counted; one without (never started) gets none.
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

/// Finished deliveries of one queue, settled in one call. A job given twice
/// is settled once, by its first entry in the order acks, reschedules,
/// throttles, dead letters: the job's token no longer matches after it, so
/// the others fail the fence and are not counted.
#[derive(Debug, Default, Clone)]
pub struct Settle {
    /// Succeeded: delete.
    pub acks: Vec<(JobId, Token)>,
    /// The results of acks that returned one (JSON): kept with their
    /// history entries (none while the history is off).
    pub results: Vec<(JobId, Vec<u8>)>,
    /// The bodies of some acks as they were delivered, in the order of
    /// `acks`: the history keeps these bytes as the jobs' arguments rather
    /// than reading its stored copy again (so they must be what was
    /// delivered). Optional, and only ever a saving: an ack without one here
    /// has its body read as before, and so does every ack after an entry out
    /// of that order; a backend that holds its bodies itself ignores them.
    pub ack_bodies: Vec<(JobId, Vec<u8>)>,
    /// Retry or release.
    pub reschedules: Vec<Reschedule>,
    /// Dead-letter.
    pub dead: Vec<DeadLetterEntry>,
    /// How many dead letters the queue keeps: dead-lettering drops the oldest
    /// beyond it.
    pub retention: Retention,
    /// How the entries' runs went, by job id (any order): each entry's attempt
    /// record takes its times and outcome from here. An entry without one is
    /// recorded with its times unknown (and `ok`, or `error` when it failed),
    /// but a release without one is not recorded (it never ran: see
    /// [`Reschedule::release`]).
    pub ran: Vec<Ran>,
    /// Who ran them: recorded in each attempt (`None`: unknown).
    pub by: Option<RunBy>,
    /// How long the queue keeps finished jobs, unless the queue stores its
    /// own setting (which is in force over this).
    pub history: History,
    /// Throttled: put back for later without counting the delivery, and the
    /// queue starts no job until the delay ends (see [`Throttle`]).
    pub throttles: Vec<Throttle>,
    /// How many throttles in a row a job may have uncounted: the next one
    /// counts as an attempt (0: [`DEFAULT_THROTTLES`]; at most 24, as a job
    /// keeps its last 25 attempt records).
    pub throttle_limit: u32,
    /// The batch of each ack or dead letter that belongs to one (any order):
    /// its finish is counted there (see [`Settled::batched`]).
    pub batched: Vec<(JobId, crate::contract::batches::BatchRef)>,
}

/// The throttles in a row a job may have before the next counts as an
/// attempt, unless a worker says otherwise.
pub const DEFAULT_THROTTLES: u32 = 20;

/// A delivery whose handler said a dependency throttles it
/// ([`JobError::rate_limited`](crate::JobError::rate_limited)): the job goes
/// back, due after `delay`, without counting the delivery (unless it is
/// [`Settle::throttle_limit`] throttles in a row), with an attempt record
/// of outcome `throttled`, and its queue starts no job until `delay` ends.
#[derive(Debug, Clone)]
pub struct Throttle {
    /// The job.
    pub id: JobId,
    /// The delivery's token.
    pub token: Token,
    /// Deliveries to count so far when the throttle does not count: one
    /// less than the token's attempt for a run of one delivery, less again
    /// for each re-delivery merged into the run (all given back, as a
    /// release gives them). A throttle that counts (past
    /// [`Settle::throttle_limit`] in a row) keeps the token's attempt.
    pub deliveries: u32,
    /// How long the job, and its queue, wait.
    pub delay: Duration,
    /// What the handler said.
    pub error: String,
    /// Only the job's concurrency key waits, not its queue (a job without a
    /// key: its queue).
    pub key: bool,
}

impl Settle {
    /// Nothing to settle.
    pub fn is_empty(&self) -> bool {
        self.acks.is_empty()
            && self.reschedules.is_empty()
            && self.dead.is_empty()
            && self.throttles.is_empty()
    }

    /// The throttles in a row a job may have uncounted.
    pub(crate) fn throttles_allowed(&self) -> u32 {
        if self.throttle_limit == 0 {
            DEFAULT_THROTTLES
        } else {
            // a job keeps 25 records, where throttles in a row are counted
            self.throttle_limit.min(24)
        }
    }

    /// The batch split by the priority of its jobs (their tokens'), in order of
    /// first appearance; a batch of one level borrowed whole.
    pub(crate) fn by_priority(&self) -> Vec<(i8, std::borrow::Cow<'_, Settle>)> {
        // the usual case, one level: the batch as it is, not copied
        let mut levels = self
            .acks
            .iter()
            .map(|a| a.1.priority())
            .chain(self.reschedules.iter().map(|r| r.token.priority()))
            .chain(self.dead.iter().map(|d| d.token.priority()))
            .chain(self.throttles.iter().map(|t| t.token.priority()));
        if let Some(first) = levels.next()
            && levels.all(|p| p == first)
        {
            return vec![(first, std::borrow::Cow::Borrowed(self))];
        }
        let shared = Settle {
            retention: self.retention,
            history: self.history,
            by: self.by.clone(),
            throttle_limit: self.throttle_limit,
            ..Settle::default()
        };
        let part = |parts: &mut Vec<(i8, Settle)>, p: i8| -> usize {
            match parts.iter().position(|(q, _)| *q == p) {
                Some(i) => i,
                None => {
                    parts.push((p, shared.clone()));
                    parts.len() - 1
                }
            }
        };
        let mut parts: Vec<(i8, Settle)> = Vec::new();
        for a in &self.acks {
            let i = part(&mut parts, a.1.priority());
            parts[i].1.acks.push(*a);
        }
        for r in &self.reschedules {
            let i = part(&mut parts, r.token.priority());
            parts[i].1.reschedules.push(r.clone());
        }
        for d in &self.dead {
            let i = part(&mut parts, d.token.priority());
            parts[i].1.dead.push(d.clone());
        }
        for t in &self.throttles {
            let i = part(&mut parts, t.token.priority());
            parts[i].1.throttles.push(t.clone());
        }
        // several levels (one was returned whole above): each part takes
        // its own entries' runs, results and batches
        if !self.ran.is_empty()
            || !self.results.is_empty()
            || !self.batched.is_empty()
            || !self.ack_bodies.is_empty()
        {
            for (_, part) in &mut parts {
                let ids: std::collections::HashSet<JobId> = part.ids().collect();
                part.ran = self
                    .ran
                    .iter()
                    .filter(|r| ids.contains(&r.id))
                    .cloned()
                    .collect();
                part.results = self
                    .results
                    .iter()
                    .filter(|r| ids.contains(&r.0))
                    .cloned()
                    .collect();
                part.batched = self
                    .batched
                    .iter()
                    .filter(|r| ids.contains(&r.0))
                    .cloned()
                    .collect();
                // (in the acks' order still: each part keeps their order)
                part.ack_bodies = self
                    .ack_bodies
                    .iter()
                    .filter(|b| ids.contains(&b.0))
                    .cloned()
                    .collect();
            }
        }
        parts
            .into_iter()
            .map(|(p, part)| (p, std::borrow::Cow::Owned(part)))
            .collect()
    }

    /// The ids of every entry.
    pub(crate) fn ids(&self) -> impl Iterator<Item = JobId> + '_ {
        self.acks
            .iter()
            .map(|a| a.0)
            .chain(self.reschedules.iter().map(|r| r.id))
            .chain(self.dead.iter().map(|d| d.id))
            .chain(self.throttles.iter().map(|t| t.id))
    }

    /// The runs the batch says how they went, by job id.
    pub(crate) fn runs(&self) -> std::collections::HashMap<JobId, &Ran, crate::id::IdHash> {
        self.ran.iter().map(|r| (r.id, r)).collect()
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
    /// The batch finishes the settle recorded with the queue, still to be
    /// counted by their batches: pass them to
    /// [`Backend::batch_settled`](crate::backend::Backend::batch_settled)
    /// (empty where the settle counted them itself, as in memory).
    pub batched: Vec<String>,
}

/// How many dead letters a queue keeps: when a job is dead-lettered, the
/// oldest beyond `max_count` and those older than `max_age` are deleted, so a
/// flood of failures cannot fill Redis. A queue setting
/// ([`QueueSettings`](crate::ops::QueueSettings)), stored with the queue and
/// in force for every worker; a worker's
/// [`WorkerBuilder::dead_letter_retention`](crate::worker::WorkerBuilder::dead_letter_retention)
/// is stored where none is.
///
/// ```
/// use redjob::ops::Retention;
/// use std::time::Duration;
///
/// let r = Retention::default();
/// assert_eq!(r.max_count, Some(10_000));
/// assert_eq!(r.max_age, Some(Duration::from_secs(30 * 24 * 3600)));
/// let keep_more = Retention { max_count: Some(100_000), ..Retention::default() };
/// # let _ = keep_more;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The most dead letters a queue keeps; `None` for no limit. Defaults to
    /// 10,000.
    pub max_count: Option<u64>,
    /// The oldest a dead letter gets; `None` for no limit. Defaults to 30 days.
    pub max_age: Option<Duration>,
}

impl Retention {
    /// Keeps every dead letter forever: Redis's memory grows with them.
    pub const UNBOUNDED: Retention = Retention {
        max_count: None,
        max_age: None,
    };

    /// The limits as the scripts take them: count, age in ms (0: none).
    pub(crate) fn limits(&self) -> (u64, u64) {
        // at most about 142,000 years: exact in a double, as Lua reads it
        let age = self
            .max_age
            .map_or(0, |d| d.as_millis().clamp(1, 1 << 52) as u64);
        (self.max_count.unwrap_or(0), age)
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_count: Some(10_000),
            max_age: Some(Duration::from_secs(30 * 24 * 3600)),
        }
    }
}

/// A job's lease: its id and token.
pub(crate) type Lease = (JobId, Token);

/// `leases` once each, should one be given more than once: the leases once
/// and, for each place given, its place among them (`None` when each was
/// given once). Extending a lease twice in one call would move its count in
/// the lease counts twice.
pub(crate) fn once(leases: &[Lease]) -> Option<(Vec<Lease>, Vec<usize>)> {
    if leases.len() < 2 {
        return None;
    }
    // a worker's renewals never repeat a lease: up to 64, told without
    // allocating
    if leases.len() <= 64
        && !leases
            .iter()
            .enumerate()
            .any(|(i, l)| leases[..i].contains(l))
    {
        return None;
    }
    let mut first = std::collections::HashMap::with_capacity(leases.len());
    let mut once = Vec::new();
    let place: Vec<usize> = leases
        .iter()
        .map(|l| {
            *first.entry(l).or_insert_with(|| {
                once.push(*l);
                once.len() - 1
            })
        })
        .collect();
    (once.len() < leases.len()).then_some((once, place))
}
