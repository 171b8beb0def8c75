//! Dead letters: which to list and in what order, how to spread a requeue, and
//! how many a queue keeps.

use std::time::Duration;

use crate::contract::inspect::JobInfo;

/// The order of a dead-letter listing, by time of death.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeadOrder {
    /// The ones that died first come first.
    #[default]
    OldestFirst,
    /// The ones that died last come first.
    NewestFirst,
}

/// Which dead letters to list, requeue or delete: all by default.
///
/// ```
/// use redjob::ops::{DeadOrder, DeadQuery};
///
/// let q = DeadQuery::default()
///     .newest_first()
///     .job_type("SendEmail")
///     .error_contains("timed out");
/// assert_eq!(q.order, DeadOrder::NewestFirst);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadQuery {
    /// The listing order. Defaults to oldest first.
    pub order: DeadOrder,
    /// Only jobs of this type (the envelope's `"type"`). Defaults to any.
    pub job_type: Option<String>,
    /// Only jobs whose last error contains this text (case-sensitive). Defaults
    /// to any.
    pub error_contains: Option<String>,
    /// Only letters that died at or before this time, Unix ms by the
    /// backend's clock: the cutoff a count took ([`BulkCount::upto_ms`]), so
    /// that the action confirmed acts on the letters counted and not on those
    /// that died since. Defaults to any time.
    pub died_by_ms: Option<u64>,
}

impl DeadQuery {
    /// Lists the newest first.
    pub fn newest_first(mut self) -> Self {
        self.order = DeadOrder::NewestFirst;
        self
    }

    /// Only jobs of type `name`.
    pub fn job_type(mut self, name: impl Into<String>) -> Self {
        self.job_type = Some(name.into());
        self
    }

    /// Only jobs whose last error contains `text`.
    pub fn error_contains(mut self, text: impl Into<String>) -> Self {
        self.error_contains = Some(text.into());
        self
    }

    /// Only letters that died at or before `ms` (Unix ms, backend time).
    pub fn died_by(mut self, ms: u64) -> Self {
        self.died_by_ms = Some(ms);
        self
    }

    /// Whether the dead letter `job` is one this query selects.
    ///
    /// ```
    /// use redjob::inspect::{JobInfo, JobState};
    /// use redjob::ops::DeadQuery;
    ///
    /// let job = JobInfo {
    ///     id: "0000000000abcdefghijklmnopqrstuv".parse().unwrap(),
    ///     state: JobState::Dead,
    ///     priority: 0,
    ///     attempts: 5,
    ///     due_ms: 0,
    ///     body: br#"{"type":"SendEmail","args":{}}"#.to_vec(),
    ///     last_error: Some("smtp timed out".into()),
    ///     runs: Vec::new(),
    ///     finished: None,
    ///     key: None,
    ///     result: None,
    ///     waits_for: None,
    /// };
    /// assert!(DeadQuery::default().job_type("SendEmail").error_contains("timed").matches(&job));
    /// assert!(!DeadQuery::default().job_type("Resize").matches(&job));
    /// ```
    pub fn matches(&self, job: &JobInfo) -> bool {
        let ty = self
            .job_type
            .as_ref()
            .is_none_or(|t| job.job_name().as_deref() == Some(t));
        let err = self.error_contains.as_ref().is_none_or(|t| {
            job.last_error
                .as_deref()
                .is_some_and(|e| e.contains(t.as_str()))
        });
        let when = self.died_by_ms.is_none_or(|t| job.due_ms <= t);
        ty && err && when
    }
}

/// How many jobs or letters a bulk action would take, counted before it is
/// confirmed, and the cutoff that keeps the action to them: pass
/// [`upto_ms`](BulkCount::upto_ms) back
/// ([`purge_queue_upto`](crate::ops::Admin::purge_queue_upto),
/// [`DeadQuery::died_by`]) and the action takes none sent or dead after the
/// count (but for a purge's exceptions: a job whose id carries an earlier
/// time, see [`purge_queue_upto`](crate::ops::Admin::purge_queue_upto)). It
/// may take fewer, when some were taken meanwhile (run, deleted, requeued).
///
/// ```
/// use redjob::ops::{Admin, DeadQuery};
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::queue::Queues;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("mail", Default::default()).await?;
/// let dead = q.count_dead("mail", &DeadQuery::default()).await?;
/// assert_eq!(dead.count, 0);
/// let query = DeadQuery::default().died_by(dead.upto_ms);
/// assert_eq!(q.delete_dead_matching("mail", &query).await?, 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BulkCount {
    /// How many it would take.
    pub count: u64,
    /// The cutoff, Unix ms by the backend's clock: the last millisecond the
    /// count covers, its own. (To the millisecond: on Redis a dead-letter
    /// count waits for Redis's clock to pass it, so it counts every letter
    /// the cutoff takes; a purge's count is read with the clock at once, and
    /// a job sent later in that millisecond is taken too. In memory, whose
    /// clock may stand still, neither waits.)
    pub upto_ms: u64,
}

/// When requeued dead letters become due: the k-th (from 0) at `first + k *
/// every` from now.
///
/// ```
/// use redjob::ops::Spread;
/// use std::time::Duration;
///
/// let s = Spread::per_second(100);
/// assert_eq!(s.every, Duration::from_millis(10));
/// assert_eq!(s.skip(300).first, Duration::from_secs(3));
/// assert_eq!(Spread::NOW.skip(300), Spread::NOW);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spread {
    /// When the first one is due, from now.
    pub first: Duration,
    /// The time between two.
    pub every: Duration,
}

impl Spread {
    /// All due now.
    pub const NOW: Spread = Spread {
        first: Duration::ZERO,
        every: Duration::ZERO,
    };

    /// `rate` a second, the first now (0 means all now).
    pub fn per_second(rate: u32) -> Spread {
        Spread {
            first: Duration::ZERO,
            every: match rate {
                0 => Duration::ZERO,
                r => Duration::from_secs(1) / r,
            },
        }
    }

    /// The same pace for the ones after the first `n`.
    pub fn skip(self, n: u64) -> Spread {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        Spread {
            first: self
                .first
                .saturating_add(self.every.saturating_mul(n))
                .min(crate::contract::queues::MAX_DELAY),
            every: self.every,
        }
    }
}
