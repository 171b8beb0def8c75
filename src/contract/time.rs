//! Readable instants for `Debug` output.

use std::fmt;

/// A Unix time in ms that prints as UTC, to the ms: `2026-11-27T09:30:00.000Z`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnixMs(pub u64);

impl fmt::Debug for UnixMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = i64::try_from(self.0)
            .ok()
            .and_then(chrono::DateTime::<chrono::Utc>::from_timestamp_millis);
        match at {
            Some(at) => write!(
                f,
                "{}",
                at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            ),
            None => write!(f, "{} ms", self.0),
        }
    }
}

impl fmt::Display for UnixMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::UnixMs;

    #[test]
    fn prints_utc_to_the_ms() {
        assert_eq!(
            format!("{:?}", UnixMs(1_764_235_800_123)),
            "2025-11-27T09:30:00.123Z"
        );
        assert_eq!(format!("{}", UnixMs(u64::MAX)), "18446744073709551615 ms");
    }
}
