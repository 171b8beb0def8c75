//! Durations as operators type them (the CLI's flags, the dashboard's forms).

use std::time::Duration;

use crate::{Error, Result};

/// The units of a duration's text form, largest first, in ms.
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1000),
    ("ms", 1),
];

/// A duration as an operator types one (the CLI's flags, the dashboard's
/// settings form): whole `ms`, `s`, `m`, `h` or `d`.
///
/// ```
/// use std::time::Duration;
/// use redjob::ops::{duration_text, parse_duration};
///
/// assert_eq!(parse_duration("36h")?, Duration::from_secs(36 * 3600));
/// assert_eq!(duration_text(Duration::from_secs(36 * 3600)), "36h");
/// assert!(parse_duration("5").is_err());
/// # Ok::<(), redjob::Error>(())
/// ```
pub fn parse_duration(s: &str) -> Result<Duration> {
    let bad = |reason: String| Error::InvalidValue {
        what: "duration",
        reason,
    };
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| bad(format!("{s:?}: add a unit (ms, s, m, h, d)")))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| bad(format!("{s:?} is not a duration")))?;
    let (_, ms) = UNITS
        .iter()
        .find(|(u, _)| *u == unit)
        .ok_or_else(|| bad(format!("{s:?}: unit must be ms, s, m, h or d")))?;
    n.checked_mul(*ms)
        .map(Duration::from_millis)
        .ok_or_else(|| bad(format!("{s:?} is too long")))
}

/// A duration as [`parse_duration`] reads it back, in its largest whole unit
/// (`30d`, `90m`, `1500ms`; below a ms, `0ms`).
pub fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    let (unit, n) = UNITS
        .iter()
        .find(|(_, n)| ms >= u128::from(*n) && ms.is_multiple_of(u128::from(*n)))
        .unwrap_or(&("ms", 1));
    format!("{}{unit}", ms / u128::from(*n))
}
