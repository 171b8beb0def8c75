//! RSMQ's validation rules.

use std::time::Duration;

use crate::{Error, Result};

/// The largest vt and delay RSMQ accepts, in seconds.
pub const MAX_SECONDS: u64 = 9_999_999;

/// The longest single delay redjob schedules: a retry's backoff or
/// [`JobError::retry_after`](crate::job::JobError::retry_after), a job timeout, the
/// cap of a [`RetryPolicy`](crate::worker::RetryPolicy). Longer ones are cut to it. 9,999,999 s (about 115
/// days) is RSMQ's own limit for a queue's `delay` and `vt`.
///
/// ```
/// assert_eq!(redjob::worker::MAX_DELAY.as_secs(), 9_999_999);
/// ```
pub const MAX_DELAY: Duration = Duration::from_secs(9_999_999);

/// How far ahead a single message (a job) may be due: 50 years of 365 days.
///
/// RSMQ's 9,999,999 s ([`MAX_SECONDS`]) bounds a queue's `vt` and `delay`
/// attributes and a receive's `vt`: settings that RSMQ clients write and read
/// too. A message's due time is only its score, which any RSMQ client reads
/// correctly however far ahead it is, so a job may be scheduled further: up to
/// this bound, and never at or past [`LAST_DUE_MS`].
///
/// ```
/// assert_eq!(redjob::queue::MAX_AHEAD.as_secs(), 1_576_800_000);
/// ```
pub const MAX_AHEAD: Duration = Duration::from_secs(50 * 365 * 86_400);

/// The latest due time a message may have, Unix ms (in the year 2096): leased
/// jobs' scores start just above it, so that every state of a job is one range
/// of scores (see [`inspect`](crate::inspect)). A send due later is refused; a
/// delay that would pass it (possible from 2046 on) is cut to it.
///
/// ```
/// assert_eq!(redjob::queue::LAST_DUE_MS, 3_999_999_999_999);
/// ```
pub const LAST_DUE_MS: u64 = crate::contract::leases::LEGACY_LEASED_MS - 1;

/// The highest priority a job or message may have: among due jobs of a queue,
/// higher priorities run first.
///
/// Priorities go from [`MIN_PRIORITY`] (-10, runs last) to `MAX_PRIORITY` (10,
/// runs first); the default is 0, and a message an RSMQ client sends is at 0.
/// Within one priority, due jobs run oldest first. The order is strict: while
/// jobs of a higher priority are due, lower ones wait (a steady stream of urgent
/// jobs starves the rest; give work that must never wait a queue of its own).
///
/// ```
/// use redjob::queue::{MAX_PRIORITY, MIN_PRIORITY};
/// assert_eq!((MIN_PRIORITY, MAX_PRIORITY), (-10, 10));
/// ```
pub const MAX_PRIORITY: i8 = 10;

/// The lowest priority: see [`MAX_PRIORITY`].
pub const MIN_PRIORITY: i8 = -10;

/// Every priority, highest first.
pub(crate) fn priorities() -> impl Iterator<Item = i8> {
    (MIN_PRIORITY..=MAX_PRIORITY).rev()
}

/// A priority within [`MIN_PRIORITY`]..=[`MAX_PRIORITY`].
pub(crate) fn priority(p: i8) -> Result<()> {
    if (MIN_PRIORITY..=MAX_PRIORITY).contains(&p) {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what: "priority",
            reason: format!("{p} is outside {MIN_PRIORITY}..={MAX_PRIORITY}"),
        })
    }
}

/// A namespace, the prefix of every key: 1 to 200 bytes, no whitespace or
/// control character (a worker's hand-off registration is words apart) and
/// no brace (on a Cluster a brace would make it every key's hash tag).
pub(crate) fn namespace(ns: &str) -> Result<()> {
    let ok = (1..=200).contains(&ns.len())
        && !ns
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '{' || c == '}');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what: "namespace",
            reason: format!(
                "{ns:?}: 1 to 200 bytes, without whitespace, control characters or braces"
            ),
        })
    }
}

pub(crate) fn queue_name(name: &str) -> Result<()> {
    let ok = (1..=160).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
        && name != "QUEUES";
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidQueueName { name: name.into() })
    }
}

pub(crate) fn seconds(what: &'static str, v: u64) -> Result<()> {
    if v <= MAX_SECONDS {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what,
            reason: format!("{v} is above the maximum of {MAX_SECONDS} seconds"),
        })
    }
}

/// A per-call vt or delay: at most [`MAX_SECONDS`], returned in milliseconds.
pub(crate) fn duration_ms(what: &'static str, d: Duration) -> Result<u64> {
    if d.as_secs() < MAX_SECONDS || d == Duration::from_secs(MAX_SECONDS) {
        Ok(d.as_millis() as u64)
    } else {
        Err(Error::InvalidValue {
            what,
            reason: format!("{d:?} is above the maximum of {MAX_SECONDS} seconds"),
        })
    }
}

/// A send's delay in whole ms, rounded up: a job sent with a delay never starts
/// before its send plus all of it.
pub(crate) fn whole_ms(d: Duration) -> u64 {
    d.as_micros().div_ceil(1000) as u64
}

/// A message's own delay: at most [`MAX_AHEAD`], returned in milliseconds.
pub(crate) fn delay_ms(d: Duration) -> Result<u64> {
    if d <= MAX_AHEAD {
        Ok(whole_ms(d))
    } else {
        Err(Error::InvalidValue {
            what: "delay",
            reason: format!("{d:?} is more than 50 years ahead (redjob::queue::MAX_AHEAD)"),
        })
    }
}

/// A message's own due time: at most [`LAST_DUE_MS`].
pub(crate) fn at_ms(at_ms: u64) -> Result<()> {
    if at_ms <= LAST_DUE_MS {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what: "due time",
            reason: format!(
                "{at_ms} ms is past the latest due time, {LAST_DUE_MS} (redjob::queue::LAST_DUE_MS)"
            ),
        })
    }
}

/// A job's due time, `at_ms`, seen from `now_ms`: at most [`MAX_AHEAD`] ahead.
pub(crate) fn due_at(at_ms: u64, now_ms: u64) -> Result<()> {
    self::at_ms(at_ms)?;
    if at_ms.saturating_sub(now_ms) <= MAX_AHEAD.as_millis() as u64 {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what: "due time",
            reason: format!(
                "{} s from now is more than 50 years ahead (redjob::queue::MAX_AHEAD)",
                (at_ms - now_ms) / 1000
            ),
        })
    }
}

pub(crate) fn maxsize(v: i64) -> Result<()> {
    if v == -1 || (1024..=65536).contains(&v) {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what: "maxsize",
            reason: format!("{v} is not -1 (unlimited) nor within 1024..=65536 bytes"),
        })
    }
}

/// Jobs to add to a running batch, each its queue and message: at most
/// `MAX_ADD` in one call, each queue
/// name and priority valid.
pub(crate) fn added_jobs(jobs: &[(String, crate::contract::queues::SendMessage)]) -> Result<()> {
    let most = crate::contract::batches::MAX_ADD;
    if jobs.len() > most {
        return Err(Error::InvalidValue {
            what: "jobs added to a batch",
            reason: format!("{} in one call; at most {most}", jobs.len()),
        });
    }
    for (q, m) in jobs {
        queue_name(q)?;
        priority(m.priority)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(queue_name("a").is_ok());
        assert!(queue_name("Jobs_high-1").is_ok());
        assert!(queue_name(&"x".repeat(160)).is_ok());
        for bad in ["", "a b", "a:b", "ünï", "QUEUES", &"x".repeat(161)] {
            assert!(
                matches!(queue_name(bad), Err(Error::InvalidQueueName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn ranges() {
        assert!(seconds("vt", MAX_SECONDS).is_ok());
        assert!(seconds("vt", MAX_SECONDS + 1).is_err());
        assert_eq!(
            duration_ms("vt", Duration::from_millis(1500)).unwrap(),
            1500
        );
        assert!(duration_ms("vt", Duration::from_millis(MAX_SECONDS * 1000 + 1)).is_err());
        for ok in [-1, 1024, 65536] {
            assert!(maxsize(ok).is_ok());
        }
        for bad in [-2, 0, 1023, 65537] {
            assert!(maxsize(bad).is_err());
        }
    }
}
