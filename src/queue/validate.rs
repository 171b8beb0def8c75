//! RSMQ's validation rules.

use std::time::Duration;

use crate::{Error, Result};

/// The largest vt and delay RSMQ accepts, in seconds.
pub const MAX_SECONDS: u64 = 9_999_999;

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
