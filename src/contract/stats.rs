//! What the backends count per queue: totals, the last hour by minute, the
//! last week by hour, dead letters.

use crate::JobId;

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
/// [`Backend::minutes`](crate::backend::Backend::minutes)' last hour; or one
/// hour, a point of [`Backend::hours`](crate::backend::Backend::hours)' last
/// week.
///
/// ```
/// use redjob::backend::MinuteStats;
///
/// let m = MinuteStats { start_ms: 60_000, processed: 12, failed: 1 };
/// assert_eq!(m.processed + m.failed, 13);
/// ```
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MinuteStats {
    /// The minute's (or hour's) start, Unix ms (backend time).
    pub start_ms: u64,
    /// Jobs that succeeded in it.
    pub processed: u64,
    /// Failed runs in it: retried plus dead.
    pub failed: u64,
}

/// How many minutes [`Backend::minutes`](crate::backend::Backend::minutes) returns: the hour before the current
/// minute, then the current one.
pub const MINUTES: usize = 61;

/// The [`MINUTES`] minutes up to `now_ms`, oldest first, with `minutes` added
/// up into them by the minute each starts in; those of other minutes are left
/// out, and a minute without any counts zero (sums saturate). How
/// [`Backend::minutes`](crate::backend::Backend::minutes) lays out its ring, and how to sum the hours of several
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
    last(now_ms, MINUTE_MS, MINUTES, minutes)
}

/// How many hours [`Backend::hours`](crate::backend::Backend::hours)
/// returns: the 7 days before the current hour, then the current one.
pub const HOURS: usize = 169;

/// The [`HOURS`] hours up to `now_ms`, oldest first, with `hours` added up
/// into them by the hour each starts in: [`last_hour`] for hours.
///
/// ```
/// use redjob::backend::{HOURS, MinuteStats, last_week};
///
/// let hour = 3_600_000;
/// let now = 500 * hour + 5;
/// let a = MinuteStats { start_ms: 500 * hour, processed: 1, failed: 2 };
/// let old = MinuteStats { start_ms: 331 * hour, processed: 50, failed: 50 };
/// let week = last_week(now, [a, old]);
/// assert_eq!(week.len(), HOURS);
/// assert_eq!(week[0].start_ms, 332 * hour);
/// assert_eq!((week[168].processed, week[168].failed), (1, 2));
/// ```
pub fn last_week(now_ms: u64, hours: impl IntoIterator<Item = MinuteStats>) -> Vec<MinuteStats> {
    last(now_ms, HOUR_MS, HOURS, hours)
}

const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 3_600_000;

/// The `n` periods of `period` ms up to `now_ms`, with `points` added up into
/// them.
fn last(
    now_ms: u64,
    period: u64,
    n: usize,
    points: impl IntoIterator<Item = MinuteStats>,
) -> Vec<MinuteStats> {
    let now = now_ms / period;
    let first = now.saturating_sub(n as u64 - 1);
    let mut out: Vec<MinuteStats> = (first..=now)
        .map(|m| MinuteStats {
            start_ms: m * period,
            ..MinuteStats::default()
        })
        .collect();
    for m in points {
        let at = m.start_ms / period;
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
        start_ms: m.saturating_mul(MINUTE_MS),
        processed,
        failed,
    }
}

/// A ring entry `(hour, processed, failed)` (hour: Unix ms / 3,600,000).
pub(crate) fn ring_hour((h, processed, failed): (u64, u64, u64)) -> MinuteStats {
    MinuteStats {
        start_ms: h.saturating_mul(HOUR_MS),
        processed,
        failed,
    }
}

/// A job in the dead-letter queue. Its `Debug` shows the body as text when
/// it is UTF-8:
///
/// ```
/// use redjob::backend::DeadLetter;
///
/// let letter = DeadLetter {
///     id: "0000000000abcdefghijklmnopqrstuv".parse()?,
///     body: br#"{"job":"welcome"}"#.to_vec(),
///     error: "boom".into(),
///     attempts: 3,
///     died_at_ms: 1_764_235_800_000,
/// };
/// assert_eq!(
///     format!("{letter:?}"),
///     r#"DeadLetter { id: JobId(0000000000abcdefghijklmnopqrstuv), body: "{\"job\":\"welcome\"}", error: "boom", attempts: 3, died_at: 2025-11-27T09:30:00.000Z }"#
/// );
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
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

impl std::fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("DeadLetter");
        d.field("id", &self.id);
        match std::str::from_utf8(&self.body) {
            Ok(text) => d.field("body", &text),
            Err(_) => d.field("body", &self.body),
        };
        d.field("error", &self.error)
            .field("attempts", &self.attempts)
            .field("died_at", &crate::contract::time::UnixMs(self.died_at_ms))
            .finish()
    }
}
