//! The bounds of one publish: a publish is one script call (all or none), so
//! its size is bounded for its reply to come within the response timeout.

use crate::{Error, Result};

/// The most events one publish ([`Topics::publish`](super::Topics::publish),
/// [`Client::publish_all`](crate::Client::publish_all)) takes: a larger one
/// is refused with [`Error::InvalidValue`], nothing stored. A publish is one
/// call, all or none, and must answer within the response timeout; publish
/// more in parts of this size (each part all or none).
///
/// ```
/// assert_eq!(redjob::topic::MAX_PUBLISH, 16_000);
/// ```
pub const MAX_PUBLISH: usize = 16_000;

/// The most bytes (events' types and data) one publish takes: a larger one
/// is refused as one of over [`MAX_PUBLISH`] events is.
///
/// ```
/// assert_eq!(redjob::topic::MAX_PUBLISH_BYTES, 64 * 1024 * 1024);
/// ```
pub const MAX_PUBLISH_BYTES: usize = 64 * 1024 * 1024;

/// Refuses a publish of more than [`MAX_PUBLISH`] events or
/// [`MAX_PUBLISH_BYTES`], before anything is sent (both backends).
pub(crate) fn check_publish(events: &[(&str, &str)]) -> Result<()> {
    if events.len() > MAX_PUBLISH {
        return Err(too_large(format!(
            "{} events: one publish takes at most {MAX_PUBLISH}; publish them in parts",
            events.len()
        )));
    }
    let bytes = events
        .iter()
        .fold(0usize, |n, (t, d)| n.saturating_add(t.len() + d.len()));
    if bytes > MAX_PUBLISH_BYTES {
        return Err(too_large(format!(
            "{bytes} bytes of events: one publish takes at most {MAX_PUBLISH_BYTES} (64 MiB); \
             publish them in parts"
        )));
    }
    Ok(())
}

fn too_large(reason: String) -> Error {
    Error::InvalidValue {
        what: "publish",
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_are_inclusive() {
        let small = vec![("t", "d"); MAX_PUBLISH];
        assert!(check_publish(&small).is_ok());
        let more = vec![("t", "d"); MAX_PUBLISH + 1];
        assert!(matches!(
            check_publish(&more),
            Err(Error::InvalidValue { .. })
        ));
        let big = "x".repeat(MAX_PUBLISH_BYTES / 2);
        assert!(check_publish(&[("", &big), ("", &big)]).is_ok());
        assert!(check_publish(&[("", &big), ("t", &big)]).is_err());
    }
}
