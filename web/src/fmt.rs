//! Numbers, times and job bodies as the pages show them.

use std::time::Duration;

use chrono::DateTime;
use redjob::inspect::JobInfo;

/// `1234567` as `1,234,567`.
pub(crate) fn num(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Unix ms as `2026-11-23 04:28:26 UTC`.
pub(crate) fn when(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .map_or_else(
            || format!("{ms} ms"),
            |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
}

/// A limit as typed in the settings form: `none` for no limit, else a
/// duration above 0 ([`parse_duration`](redjob::ops::parse_duration)'s form).
pub(crate) fn parse_limit(s: &str) -> Result<Option<Duration>, String> {
    let s = s.trim();
    if s == "none" {
        return Ok(None);
    }
    match redjob::ops::parse_duration(s).map_err(|e| e.to_string())? {
        d if d.is_zero() => Err(format!("{s:?}: give an age above 0, or none")),
        d => Ok(Some(d)),
    }
}

/// A span of ms as `3d 4h`, `5m 20s`, `1.2s`, `40ms`: its two largest units.
pub(crate) fn span(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1000, "s"),
    ];
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 10_000 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    for (k, (unit, name)) in UNITS.iter().enumerate() {
        if ms >= *unit {
            let head = format!("{}{name}", ms / unit);
            return match UNITS.get(k + 1) {
                Some((next, next_name)) if ms % unit >= *next => {
                    format!("{head} {}{next_name}", ms % unit / next)
                }
                _ => head,
            };
        }
    }
    format!("{ms}ms")
}

/// Time `at` seen from `now` (Unix ms): `5m 20s ago`, `in 3s`, `now`.
pub(crate) fn relative(now: u64, at: u64) -> String {
    match at.cmp(&now) {
        std::cmp::Ordering::Less => format!("{} ago", span(now - at)),
        std::cmp::Ordering::Greater => format!("in {}", span(at - now)),
        std::cmp::Ordering::Equal => "now".into(),
    }
}

/// The job type its envelope names, or a placeholder for a foreign body.
pub(crate) fn job_type(job: &JobInfo) -> String {
    job.job_name()
        .unwrap_or_else(|| "(not a job envelope)".into())
}

/// The most of a job's body its page shows, in bytes.
pub(crate) const SHOWN: usize = 64 * 1024;

/// Bodies up to this many bytes are previewed from their arguments parsed;
/// longer ones from their first bytes, so a preview never costs more.
const PARSED: usize = 4096;

/// The first `max` characters of a job's arguments (or of its raw body). A
/// body over [`PARSED`] bytes is not parsed: the preview is cut from its
/// bytes after `"args":` (when the envelope names it within its first
/// [`PARSED`] bytes, as redjob writes it), else from its first bytes.
pub(crate) fn preview(job: &JobInfo, max: usize) -> String {
    let body = &job.body[..];
    if body.len() <= PARSED {
        let text = job
            .args()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned());
        return shorten(&text, max);
    }
    const ARGS: &[u8] = br#""args":"#;
    let start = body[..PARSED]
        .windows(ARGS.len())
        .position(|w| w == ARGS)
        .map_or(0, |at| at + ARGS.len());
    // a character is 4 bytes at most: one more than `max` to know it was cut
    let text = prefix(&body[start..], (max + 1) * 4);
    shorten(text.trim_start(), max)
}

/// The first `max` bytes of `bytes` as text, a character cut in two at the
/// end left out.
fn prefix(bytes: &[u8], max: usize) -> String {
    let cut = &bytes[..bytes.len().min(max)];
    let end = match std::str::from_utf8(cut) {
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        _ => cut.len(),
    };
    String::from_utf8_lossy(&cut[..end]).into_owned()
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// A job's arguments pretty-printed, or its raw body when it is no envelope;
/// a body over [`SHOWN`] bytes is not parsed, its first [`SHOWN`] bytes are
/// shown as they are (and `true` says it was cut).
pub(crate) fn pretty(job: &JobInfo) -> (String, bool) {
    if job.body.len() > SHOWN {
        return (prefix(&job.body, SHOWN), true);
    }
    let text = job
        .args()
        .ok()
        .and_then(|a| serde_json::to_string_pretty(&a).ok())
        .unwrap_or_else(|| String::from_utf8_lossy(&job.body).into_owned());
    (text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_spans_and_times_read_well() {
        assert_eq!(num(0), "0");
        assert_eq!(num(999), "999");
        assert_eq!(num(1000), "1,000");
        assert_eq!(num(1_234_567), "1,234,567");
        assert_eq!(span(40), "40ms");
        assert_eq!(span(1200), "1.2s");
        assert_eq!(span(320_000), "5m 20s");
        assert_eq!(span(3_600_000), "1h");
        assert_eq!(span(90_061_000), "1d 1h");
        assert_eq!(relative(10_000, 4_000), "6.0s ago");
        assert_eq!(relative(0, 3_000), "in 3.0s");
        assert_eq!(when(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(when(u64::MAX), format!("{} ms", u64::MAX));
    }

    fn job(body: &[u8]) -> JobInfo {
        JobInfo {
            id: "0000000000abcdefghijklmnopqrstuv".parse().unwrap(),
            state: redjob::inspect::JobState::Ready,
            priority: 0,
            attempts: 0,
            due_ms: 0,
            body: body.to_vec(),
            last_error: None,
            runs: Vec::new(),
            finished: None,
            key: None,
            result: None,
            waits_for: None,
        }
    }

    #[test]
    fn bodies_preview_their_args_cut_to_length() {
        let email = job(br#"{"type":"Email","args":{"to":"a@b","n":1}}"#);
        assert_eq!(job_type(&email), "Email");
        assert_eq!(job_type(&job(b"hello")), "(not a job envelope)");
        assert_eq!(preview(&email, 100), r#"{"n":1,"to":"a@b"}"#);
        assert_eq!(preview(&email, 5), r#"{"n":…"#);
        let raw = job(b"plain \xff text");
        assert_eq!(preview(&raw, 100), "plain \u{fffd} text");
        assert!(!pretty(&email).1);
        assert!(pretty(&email).0.contains("\n"));
        assert_eq!(pretty(&raw).0, "plain \u{fffd} text");
    }

    /// A large body is cut from its bytes, never parsed: one whose end is
    /// no JSON at all still previews its arguments (parsed, it would fall
    /// back to the raw body from its first byte), and its page shows its
    /// first 64 KiB, a character cut in two left out.
    #[test]
    fn large_bodies_are_cut_from_their_first_bytes() {
        let mut body = r#"{"type":"A","args":{"x":"é"#.as_bytes().to_vec();
        body.extend(std::iter::repeat_n(b'a', 100_000));
        body.extend(b"\xff not json");
        let big = job(&body);
        assert_eq!(preview(&big, 8), r#"{"x":"éa…"#);
        let (text, cut) = pretty(&big);
        assert!(cut);
        assert_eq!(text.len(), SHOWN);
        // cut in the middle of a two-byte character: left out
        let mut odd = vec![b'a'; SHOWN - 1];
        odd.extend("é".repeat(10).as_bytes());
        let (text, _) = pretty(&job(&odd));
        assert_eq!(text.len(), SHOWN - 1);
        // no "args" near the start: the first bytes
        let raw = job(&vec![b'z'; 10_000]);
        assert_eq!(preview(&raw, 3), "zzz…");
    }
}
