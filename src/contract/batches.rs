//! Batches: jobs enqueued together, counted as they finish, with callbacks
//! enqueued once when the batch is done (see the jobs chapter, "Batches").
//!
//! A batch's job carries `"batch":"<batch id>:<index>"` in its envelope (a
//! member older workers and RSMQ clients ignore); a callback carries
//! `"batch_done":{...}`, the batch's [`BatchStatus`] when it was enqueued.

use std::fmt;
use std::str::FromStr;

use memchr::memmem;
use serde::{Deserialize, Serialize};

use crate::{Error, JobId, Result};

/// A batch's id: 32 characters, as a [`JobId`] (its first ten give when it
/// was created).
///
/// ```
/// use redjob::ops::BatchId;
///
/// let id: BatchId = "0000000000abcdefghijklmnopqrstuv".parse()?;
/// assert_eq!(id.to_string(), "0000000000abcdefghijklmnopqrstuv");
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BatchId(pub(crate) JobId);

impl BatchId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BatchId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        s.parse::<JobId>()
            .map(BatchId)
            .map_err(|_| Error::InvalidValue {
                what: "batch id",
                reason: format!("{s:?} is not a batch id (32 characters)"),
            })
    }
}

/// A job's place in its batch, as its envelope says it: `<batch id>:<index>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRef {
    /// The batch.
    pub batch: BatchId,
    /// The job's index in it, from 0 in the order it was added.
    pub index: u64,
}

impl BatchRef {
    /// `<batch id>:<index>`.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.batch, self.index)
    }

    /// Reads [`encode`](Self::encode)'s form (at priority 0). An index over `u32::MAX`
    /// (past the last bit of a Redis string, more jobs than a batch can
    /// hold) is no batch's: `None`. A batch counts no finish at an index it
    /// never gave out, whatever the body says.
    pub fn decode(s: &str) -> Option<BatchRef> {
        let (b, i) = s.split_once(':')?;
        Some(BatchRef {
            batch: b.parse().ok()?,
            index: i.parse::<u32>().ok()?.into(),
        })
    }

    /// The batch a job's stored body names, if any (a quick byte search
    /// first: most bodies name none).
    pub fn of_body(body: &[u8]) -> Option<BatchRef> {
        #[derive(Deserialize)]
        struct Member<'a> {
            #[serde(borrow)]
            batch: Option<std::borrow::Cow<'a, str>>,
        }
        static FIELD: Field = Field::new(|| memmem::Finder::new(br#""batch":""#));
        // most bodies name none: no parse
        FIELD.find(body)?;
        let m: Member<'_> = serde_json::from_slice(body).ok()?;
        BatchRef::decode(m.batch.as_deref()?)
    }
}

/// A member's name looked for in a body before it is parsed (a worker does
/// for each job it starts): memchr's searcher takes 1.4 µs for a 64 KiB
/// body, where comparing each window of it took 36 µs.
type Field = std::sync::LazyLock<memmem::Finder<'static>>;

/// When a batch's callback is enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CallbackKind {
    /// Every job of the batch has finished: succeeded, dead or cancelled.
    Complete,
    /// Every job of the batch has succeeded (enqueued as the batch completes).
    Success,
    /// A job of the batch died (its first dead letter).
    Death,
    /// A flow's parent (see [`Flow`](crate::client::Flow)): enqueued, with the id
    /// chosen when the flow was, once every child succeeded.
    Parent,
    /// A flow's parent failed: dead-lettered or cancelled (as
    /// [`Callback::cancel`] says) when its first child dies or is cancelled.
    Failed,
}

impl CallbackKind {
    /// The letter the stores use: `c`, `s`, `d`, `p` or `x`.
    pub fn code(self) -> &'static str {
        match self {
            CallbackKind::Complete => "c",
            CallbackKind::Success => "s",
            CallbackKind::Death => "d",
            CallbackKind::Parent => "p",
            CallbackKind::Failed => "x",
        }
    }

    /// Reads [`code`](Self::code).
    pub fn from_code(s: &str) -> Option<CallbackKind> {
        match s {
            "c" => Some(CallbackKind::Complete),
            "s" => Some(CallbackKind::Success),
            "d" => Some(CallbackKind::Death),
            "p" => Some(CallbackKind::Parent),
            "x" => Some(CallbackKind::Failed),
            _ => None,
        }
    }
}

/// A callback: a job enqueued into `queue` when its [`CallbackKind`] comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Callback {
    /// When.
    pub kind: CallbackKind,
    /// Its queue.
    pub queue: String,
    /// Its envelope; `"batch_done"` is added when it is enqueued.
    pub body: Vec<u8>,
    /// Its id, chosen beforehand (a flow's parent); `None`: given at send.
    pub id: Option<JobId>,
    /// A [`Failed`](CallbackKind::Failed) parent is cancelled rather than
    /// dead-lettered.
    pub cancel: bool,
    /// The priority it is enqueued at (-10 to 10): a callback's job type's
    /// (see [`BatchBuilder`](crate::client::BatchBuilder)); a flow's parent
    /// is enqueued at 0.
    pub priority: i8,
}

impl Callback {
    /// A callback with its id given at send, enqueued at priority 0.
    pub fn new(kind: CallbackKind, queue: &str, body: Vec<u8>) -> Callback {
        Callback {
            kind,
            queue: queue.to_string(),
            body,
            id: None,
            cancel: false,
            priority: 0,
        }
    }

    /// The same, enqueued at `priority` instead: -10 to 10, as an enqueue's
    /// (`Backend::batch_open` refuses another with `InvalidValue`).
    ///
    /// ```
    /// use redjob::backend::Callback;
    /// use redjob::ops::CallbackKind;
    ///
    /// let body = br#"{"type":"album_done","args":null}"#.to_vec();
    /// let cb = Callback::new(CallbackKind::Complete, "albums", body).at_priority(5);
    /// assert_eq!((cb.priority, cb.queue.as_str()), (5, "albums"));
    /// ```
    pub fn at_priority(self, priority: i8) -> Callback {
        Callback { priority, ..self }
    }

    /// The stored form: `<queue>[ <id>[ c]]\n<body>` (its priority is
    /// stored apart).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.queue.as_bytes().to_vec();
        if let Some(id) = &self.id {
            out.push(b' ');
            out.extend_from_slice(id.as_str().as_bytes());
            if self.cancel {
                out.extend_from_slice(b" c");
            }
        }
        out.push(b'\n');
        out.extend_from_slice(&self.body);
        out
    }

    /// Reads [`encode`](Self::encode)'s form.
    pub fn decode(kind: CallbackKind, stored: &[u8]) -> Option<Callback> {
        let nl = stored.iter().position(|&c| c == b'\n')?;
        let head = std::str::from_utf8(&stored[..nl]).ok()?;
        let mut words = head.split(' ');
        let queue = words.next()?.to_string();
        let id = words.next().map(|w| w.parse::<JobId>()).transpose().ok()?;
        let cancel = words.next() == Some("c");
        Some(Callback {
            kind,
            queue,
            body: stored[nl + 1..].to_vec(),
            id,
            cancel,
            priority: 0,
        })
    }
}

/// A batch as its enqueuer opens it.
#[derive(Debug, Clone)]
pub struct BatchSpec {
    /// Its id.
    pub id: BatchId,
    /// Its callbacks (at most one of each kind).
    pub callbacks: Vec<Callback>,
    /// What it is, for operators (at most 1,024 bytes).
    pub description: Option<String>,
    /// How many jobs its enqueuer sends (indexes `0..members`); jobs added
    /// while it runs take the indexes after them.
    pub members: u64,
}

/// How a batch stands.
///
/// ```
/// use redjob::ops::BatchStatus;
///
/// let mut s = BatchStatus::default();
/// (s.total, s.succeeded, s.dead) = (3, 2, 1);
/// assert_eq!((s.finished(), s.pending()), (3, 0));
/// assert!(!s.is_complete()); // not sealed: its enqueue has not finished
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchStatus {
    /// Its id (empty in a default value).
    #[serde(default)]
    pub id: String,
    /// Its jobs: every job enqueued into it so far.
    pub total: u64,
    /// Jobs that succeeded.
    pub succeeded: u64,
    /// Jobs dead-lettered.
    pub dead: u64,
    /// Jobs cancelled (or deleted) before they finished.
    #[serde(default)]
    pub cancelled: u64,
    /// Whether its enqueue finished: a batch completes only once sealed.
    #[serde(default)]
    pub sealed: bool,
    /// When it was opened (Unix ms).
    #[serde(default)]
    pub created_ms: u64,
    /// When it completed (Unix ms).
    #[serde(default)]
    pub completed_ms: Option<u64>,
    /// What it is, as its enqueuer said.
    #[serde(default)]
    pub description: Option<String>,
    /// Its first job that died or was cancelled: `<queue> <id> dead` or
    /// `<queue> <id> cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<String>,
    /// A flow's batch: its parent, `<queue> <id>` (see
    /// [`parent_job`](Self::parent_job)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// When it was cancelled (Unix ms; see
    /// [`Client::cancel_batch`](crate::Client::cancel_batch)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_at_ms: Option<u64>,
}

impl BatchStatus {
    /// Jobs finished: succeeded, dead or cancelled (counts another client
    /// wrote out of range add up to `u64::MAX`).
    pub fn finished(&self) -> u64 {
        self.succeeded
            .saturating_add(self.dead)
            .saturating_add(self.cancelled)
    }

    /// How much of it finished, 0 to 100 % (100 for a batch of no jobs).
    ///
    /// ```
    /// use redjob::ops::BatchStatus;
    ///
    /// let mut s = BatchStatus::default();
    /// assert_eq!(s.percent(), 100);
    /// (s.total, s.succeeded, s.dead) = (3, 1, 1);
    /// assert_eq!(s.percent(), 66);
    /// // counts another client wrote out of range
    /// (s.total, s.succeeded, s.dead) = (10, u64::MAX, 5);
    /// assert_eq!((s.finished(), s.percent()), (u64::MAX, 100));
    /// ```
    pub fn percent(&self) -> u64 {
        let pct = (u128::from(self.finished()) * 100)
            .checked_div(u128::from(self.total))
            .unwrap_or(100);
        pct.min(100) as u64
    }

    /// Jobs not finished yet.
    pub fn pending(&self) -> u64 {
        self.total.saturating_sub(self.finished())
    }

    /// Sealed and every job finished.
    pub fn is_complete(&self) -> bool {
        self.sealed && self.finished() >= self.total
    }

    /// A flow's batch: its parent's queue and id, the job that waits for
    /// this batch's jobs.
    pub fn parent_job(&self) -> Option<(&str, JobId)> {
        let (q, id) = self.parent.as_deref()?.split_once(' ')?;
        Some((q, id.parse().ok()?))
    }
}

/// How a batch's job finished, as the stores count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// Succeeded.
    Succeeded,
    /// Dead-lettered.
    Dead,
    /// Cancelled before it finished (a flow's parent whose child failed).
    Cancelled,
}

/// The error for a batch that is not there.
pub fn no_batch(id: &BatchId) -> Error {
    Error::InvalidValue {
        what: "batch id",
        reason: format!(
            "no batch {id}: unknown, or past its retention (7 days after it completed)"
        ),
    }
}

/// The error for a job a flow cannot wait for: not known in `queue`.
pub fn no_job(queue: &str, id: &JobId) -> Error {
    Error::InvalidValue {
        what: "job to wait for",
        reason: format!(
            "{id} is not in {queue:?} nor in its dead letters or history: unknown, or past its history's retention"
        ),
    }
}

/// The most flows that wait for one job enqueued earlier (`Flow::after`):
/// the settle that finishes it enters a finish for each, so its work is
/// bounded by this. Flows cancelled (or gone) take no place: a flow that
/// finds no room drops their registrations and looks again.
pub const MAX_WAITERS: u64 = 100;

/// The error of a job waited for by [`MAX_WAITERS`] flows already.
pub fn too_many_waiters(queue: &str, id: &JobId) -> Error {
    Error::InvalidValue {
        what: "job to wait for",
        reason: format!(
            "{id} of {queue:?} has {MAX_WAITERS} flows waiting for it already, the most"
        ),
    }
}

/// The error of a seal that found its batch cancelled before its enqueue
/// finished.
pub fn cancelled_open(id: &BatchId) -> Error {
    Error::InvalidValue {
        what: "batch",
        reason: format!(
            "batch {id} was cancelled before its enqueue finished (by a cancel, or by a worker's sweep an hour after it was opened): its jobs are cancelled when fetched"
        ),
    }
}

/// The first failure of a batch cancelled before any of its jobs failed.
pub const CANCELLED: &str = "batch cancelled";

/// Why a flow's parent failed, from its batch's status.
pub fn failed_parent_why(s: &BatchStatus) -> String {
    match s.first_failure.as_deref() {
        Some(CANCELLED) => "its flow was cancelled".into(),
        f => format!("a job it waits for failed: {}", f.unwrap_or("unknown")),
    }
}

/// The error for jobs added to a batch that takes none any more.
pub fn closed(id: &BatchId, why: &str) -> Error {
    Error::InvalidValue {
        what: "batch",
        reason: format!("batch {id} takes no more jobs: {why}"),
    }
}

/// The most jobs one addition to a running batch holds.
pub const MAX_ADD: usize = 1000;

/// How long after it was opened a batch its enqueuer never sealed is
/// cancelled by a worker's sweep (ms).
pub(crate) const OPEN_MS: u64 = 3600 * 1000;

/// A page's size: 1 to 1,000.
pub fn check_limit(limit: usize) -> Result<usize> {
    if (1..=1000).contains(&limit) {
        Ok(limit)
    } else {
        Err(Error::InvalidValue {
            what: "limit",
            reason: format!("{limit} is not 1 to 1000"),
        })
    }
}

/// A callback's body: its stored envelope with `"batch_done"`, the batch's
/// status, added as its last member.
pub fn callback_body(body: &[u8], status: &BatchStatus) -> Vec<u8> {
    let member = serde_json::to_string(status).unwrap_or_else(|_| "{}".into());
    let trimmed = body.trim_ascii_end();
    match trimmed.strip_suffix(b"}") {
        Some(open) => {
            let mut out = open.to_vec();
            if !open.trim_ascii_end().ends_with(b"{") {
                out.push(b',');
            }
            out.extend_from_slice(br#""batch_done":"#);
            out.extend_from_slice(member.as_bytes());
            out.push(b'}');
            out
        }
        None => body.to_vec(),
    }
}

/// The status a callback's body carries (see [`callback_body`]).
pub fn done_of(body: &[u8]) -> Option<BatchStatus> {
    #[derive(Deserialize)]
    struct Member {
        batch_done: Option<BatchStatus>,
    }
    static FIELD: Field = Field::new(|| memmem::Finder::new(br#""batch_done":"#));
    FIELD.find(body)?;
    serde_json::from_slice::<Member>(body).ok()?.batch_done
}

/// A body with `"batch":"<ref>"` added as its last member.
pub fn with_batch(body: &[u8], r: &BatchRef) -> Vec<u8> {
    let trimmed = body.trim_ascii_end();
    match trimmed.strip_suffix(b"}") {
        Some(open) => {
            let mut out = open.to_vec();
            if !open.trim_ascii_end().ends_with(b"{") {
                out.push(b',');
            }
            out.extend_from_slice(format!(r#""batch":"{}"}}"#, r.encode()).as_bytes());
            out
        }
        None => body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's body of 70,000 bytes, naming no batch.
    fn padded(job: &str) -> Vec<u8> {
        let mut body = format!(r#"{{"type":"{job}","args":{{"text":""#).into_bytes();
        body.resize(70_000, b'a');
        body.extend_from_slice(br#""}}"#);
        body
    }

    #[test]
    fn a_body_names_its_batch_and_a_callback_its_status() {
        let id: BatchId = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
        let r = BatchRef {
            batch: id,
            index: 7,
        };
        let body = with_batch(br#"{"type":"Mail","args":{"to":1}}"#, &r);
        assert!(body.starts_with(br#"{"type":"Mail""#));
        assert_eq!(BatchRef::of_body(&body), Some(r));
        assert_eq!(BatchRef::of_body(br#"{"type":"Mail","args":{}}"#), None);
        assert_eq!(BatchRef::of_body(br#"{"batch":"nonsense"}"#), None);
        // an index past the last bit a Redis string holds is no batch's
        let last = format!("{id}:{}", u32::MAX);
        assert_eq!(BatchRef::decode(&last).map(|r| r.index), Some(4294967295));
        assert_eq!(BatchRef::decode(&format!("{id}:4294967296")), None);
        // the field found wherever it is, in a body of any size
        let large = padded("Mail");
        assert_eq!(BatchRef::of_body(&large), None);
        let large = with_batch(&large, &r);
        assert_eq!(BatchRef::of_body(&large), Some(r));
        // the field in the args is not the body's
        let inner = format!(r#"{{"type":"Mail","args":{{"batch":"{}"}}}}"#, r.encode());
        assert_eq!(BatchRef::of_body(inner.as_bytes()), None);
        let s = BatchStatus {
            id: id.to_string(),
            total: 3,
            succeeded: 3,
            sealed: true,
            ..BatchStatus::default()
        };
        let cb = callback_body(br#"{"type":"Album","args":{}}"#, &s);
        assert_eq!(done_of(&cb), Some(s.clone()));
        let large = padded("Album");
        assert_eq!(done_of(&large), None);
        assert_eq!(done_of(&callback_body(&large, &s)), Some(s));
        assert_eq!(done_of(&body), None);
        assert_eq!(
            crate::contract::envelope::job_name(&cb).as_deref(),
            Some("Album")
        );
    }
}
