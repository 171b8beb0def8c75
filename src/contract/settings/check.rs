//! The bounds of a queue's settings, and the check of the values a caller
//! asks to store: a value past its bound is refused with an error that names
//! the field and the bound, never cut to fit (the CLI and the dashboard
//! refuse what the library refuses).

use std::time::Duration;

use super::QueueSettings;
use super::text::duration_text;
use crate::{Error, Result};

/// The most dead letters, or history entries, a queue may be set to keep: a
/// billion (a few hundred GB of Redis at the smallest entries; a Redis list
/// or sorted set holds at most 2^32).
///
/// ```
/// use redjob::ops::{Admin, QueueSettings, Retention, MAX_RETAINED};
/// use redjob::queue::{QueueOptions, Queues};
///
/// # async fn demo() -> redjob::Result<()> {
/// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
/// client.queues().create_queue("api", QueueOptions::default()).await?;
/// let more = Retention { max_count: Some(MAX_RETAINED + 1), max_age: None };
/// let err = client.set_settings("api", &QueueSettings::dead_letters(more)).await.unwrap_err();
/// assert!(err.to_string().contains("max count 1000000001: at most 1000000000"));
/// # Ok(()) }
/// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
/// ```
pub const MAX_RETAINED: u64 = 1_000_000_000;

/// The longest a queue may be set to keep a dead letter, a history entry or
/// an entry's arguments: 50 years (`18250d`), as far ahead as a job may be
/// due ([`MAX_AHEAD`](crate::queue::MAX_AHEAD)); in whole milliseconds, as
/// stored.
///
/// ```
/// use redjob::ops::{duration_text, MAX_RETENTION_AGE};
///
/// assert_eq!(duration_text(MAX_RETENTION_AGE), "18250d");
/// ```
pub const MAX_RETENTION_AGE: Duration = crate::contract::queues::MAX_AHEAD;

/// Why a count `n` given for `field` cannot be stored, if so.
fn count_problem(field: &str, n: Option<u64>) -> Option<String> {
    match n? {
        0 => Some(format!(
            "{field} 0 would keep nothing: give 1 to {MAX_RETAINED}, or None for no limit"
        )),
        n if n > MAX_RETAINED => Some(format!(
            "{field} {n}: at most {MAX_RETAINED} (MAX_RETAINED), or None for no limit"
        )),
        _ => None,
    }
}

/// Why an age `d` given for `field` cannot be stored, if so (`zero`: whether
/// 0 is a value of its own, never keep, rather than a mistake).
fn age_problem(field: &str, d: Option<Duration>, zero: bool) -> Option<String> {
    let d = d?;
    let bound = duration_text(MAX_RETENTION_AGE);
    if d.is_zero() && !zero {
        Some(format!(
            "{field} 0 would keep nothing: give 1ms to {bound}, or None for no limit"
        ))
    } else if d > MAX_RETENTION_AGE {
        Some(format!(
            "{field} {}: at most {bound} (MAX_RETENTION_AGE, 50 years), or None for no limit",
            duration_text(d)
        ))
    } else if !d.subsec_nanos().is_multiple_of(1_000_000) {
        Some(format!(
            "{field} {d:?}: give whole milliseconds (it is stored in ms), up to {bound}"
        ))
    } else {
        None
    }
}

impl QueueSettings {
    /// Checks the values a caller asks to store (an operator's change or a
    /// worker's builder values): each within its bound, else
    /// [`Error::InvalidValue`] naming the setting, the field and the bound.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(r) = self.dead_letters
            && let Some(reason) = count_problem("max count", r.max_count)
                .or_else(|| age_problem("max age", r.max_age, false))
        {
            return Err(Error::InvalidValue {
                what: "dead-letter retention",
                reason,
            });
        }
        if let Some(h) = self.history
            && let Some(reason) = count_problem("max count", h.max_count)
                .or_else(|| age_problem("max age", h.max_age, false))
                .or_else(|| age_problem("arguments' max age", h.args_max_age, true))
        {
            let reason = if h.max_count == Some(0) || h.max_age == Some(Duration::ZERO) {
                format!("{reason} (History::OFF keeps none)")
            } else {
                reason
            };
            return Err(Error::InvalidValue {
                what: "history retention",
                reason,
            });
        }
        if let Some(reason) = self.concurrency.and_then(|c| c.problem()) {
            return Err(Error::InvalidValue {
                what: "queue concurrency",
                reason,
            });
        }
        if let Some(reason) = self.rate_limit.and_then(|r| r.problem()) {
            return Err(Error::InvalidValue {
                what: "queue rate limit",
                reason,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::history::History;
    use crate::contract::leases::Retention;

    #[test]
    fn values_past_their_bounds_are_refused_and_the_bounds_taken() {
        let ms = Duration::from_millis(1);
        for ok in [
            History {
                max_count: Some(MAX_RETAINED),
                max_age: Some(MAX_RETENTION_AGE),
                args_max_age: Some(MAX_RETENTION_AGE),
                enabled: true,
            },
            History {
                args_max_age: Some(Duration::ZERO),
                max_age: Some(ms),
                ..History::default()
            },
        ] {
            assert!(QueueSettings::history(ok).check().is_ok(), "{ok:?}");
        }
        let past = MAX_RETENTION_AGE + ms;
        for (bad, says) in [
            (
                History {
                    max_age: Some(past),
                    ..History::default()
                },
                "max age 1576800000001ms: at most 18250d",
            ),
            (
                History {
                    max_count: Some(MAX_RETAINED + 1),
                    ..History::default()
                },
                "max count 1000000001: at most 1000000000",
            ),
            (
                History {
                    args_max_age: Some(Duration::from_micros(1)),
                    ..History::default()
                },
                "arguments' max age 1µs: give whole milliseconds",
            ),
            (
                History {
                    max_count: Some(0),
                    ..History::default()
                },
                "History::OFF",
            ),
        ] {
            let err = QueueSettings::history(bad).check().unwrap_err().to_string();
            assert!(
                err.starts_with("invalid history retention: ") && err.contains(says),
                "{err}"
            );
        }
        let err = QueueSettings::dead_letters(Retention {
            max_count: None,
            max_age: Some(past),
        })
        .check()
        .unwrap_err()
        .to_string();
        assert!(err.contains("at most 18250d (MAX_RETENTION_AGE"), "{err}");
    }
}
