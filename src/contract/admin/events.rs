//! Events the operations add to a queue's history: checking one, and logging
//! one the history could not record.

use crate::Result;

/// Logs an event the history could not record: the action it records is done
/// (its caller's result stands).
pub(crate) fn noted(r: Result<()>, queue: &str) {
    if let Err(error) = r {
        tracing::warn!(queue, %error, "could not record the action in the queue's history");
    }
}

/// Checks an event: `what` 1 to 40 characters, no whitespace; `count` at
/// most 2^53 (Redis's scripts count in doubles, exact up to it).
pub(crate) fn event_word(what: &str, count: u64) -> Result<()> {
    if !(1..=40).contains(&what.chars().count()) || what.chars().any(char::is_whitespace) {
        return Err(crate::Error::InvalidValue {
            what: "history event",
            reason: format!("{what:?}: use one word of 1 to 40 characters"),
        });
    }
    if count > 1 << 53 {
        return Err(crate::Error::InvalidValue {
            what: "history event count",
            reason: format!("{count} is over 2^53"),
        });
    }
    Ok(())
}
