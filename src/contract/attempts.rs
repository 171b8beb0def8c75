//! The record of each attempt at a job (public at `redjob::inspect`): when it
//! started and ended, how, with what error, on which worker.
//!
//! Written by the settle that ends the attempt, in the same call (so a settle
//! retried after its reply was lost, which the fence turns away, records
//! nothing twice), and by the fetch that finds a lease ran out (the attempt
//! whose worker died or lost its lease: `lease_lost`, with what nobody saw
//! left unknown). A job keeps its last [`MAX_RECORDS`] while it lives, and a
//! dead letter keeps them. Stored as one JSON object per line, the oldest
//! first (the field `<id>:a` of the queue's hash, and of the dead letters'
//! hash), so both backends and every reader share this one form.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::JobId;

/// The most attempts a job keeps a record of: the last ones.
pub const MAX_RECORDS: usize = 25;

/// The longest error text an attempt keeps, in bytes: longer ones are cut at
/// a character boundary and end with `…`.
pub const MAX_ERROR: usize = 4096;

/// How an attempt ended.
///
/// ```
/// use redjob::inspect::AttemptOutcome;
///
/// assert_eq!(AttemptOutcome::LeaseLost.as_str(), "lease_lost");
/// assert!(AttemptOutcome::Timeout.failed());
/// assert_eq!(AttemptOutcome::Released.as_str(), "released");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The handler succeeded.
    Ok,
    /// The handler returned an error.
    Error,
    /// The handler (or the worker on the job's path) panicked.
    Panic,
    /// The handler ran past its timeout.
    Timeout,
    /// The job was cancelled or deleted while it ran.
    Cancelled,
    /// The worker's lease ran out before the attempt was settled (the worker
    /// died, stalled or lost Redis): recorded by the fetch that delivered the
    /// job again, which knows neither when the attempt started nor where.
    LeaseLost,
    /// The handler said a dependency throttles it
    /// ([`JobError::rate_limited`](crate::JobError::rate_limited)): put back
    /// without counting the delivery (unless it was throttled too many times
    /// in a row), its queue held until the throttle ends.
    Throttled,
    /// The worker gave the job (or a topic event) back while its handler ran
    /// (it shut down past its grace period, or its lease was lost and the job
    /// delivered to it again; an event's ordered subscriber was lost): the
    /// run was cancelled, and it runs again, this attempt not counted (the
    /// next has its number again). A delivery given back
    /// before its handler started is no attempt and has no record.
    Released,
    /// Written by a newer redjob: an outcome this one does not know.
    #[serde(other)]
    Unknown,
}

impl AttemptOutcome {
    /// Its name as stored and printed (`ok`, `error`, `panic`, `timeout`,
    /// `cancelled`, `lease_lost`, `throttled`, `released`, `unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Ok => "ok",
            AttemptOutcome::Error => "error",
            AttemptOutcome::Panic => "panic",
            AttemptOutcome::Timeout => "timeout",
            AttemptOutcome::Cancelled => "cancelled",
            AttemptOutcome::LeaseLost => "lease_lost",
            AttemptOutcome::Throttled => "throttled",
            AttemptOutcome::Released => "released",
            AttemptOutcome::Unknown => "unknown",
        }
    }

    /// Whether the attempt failed (anything but `ok`).
    pub fn failed(self) -> bool {
        self != AttemptOutcome::Ok
    }
}

/// One attempt at a job. Fields nobody could know are `None`: a `lease_lost`
/// attempt has no start, end or worker, only when its lease ran out.
///
/// ```
/// use redjob::inspect::{Attempt, AttemptOutcome};
///
/// let a: Attempt = serde_json::from_str(
///     r#"{"n":1,"start":1790000000000,"end":1790000000250,"outcome":"error","error":"smtp timed out","worker":"w1","host":"web-3"}"#,
/// )?;
/// assert_eq!((a.number, a.outcome), (1, AttemptOutcome::Error));
/// assert_eq!(a.duration(), Some(std::time::Duration::from_millis(250)));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Attempt {
    /// The delivery count of this attempt (1 for the first).
    #[serde(rename = "n")]
    pub number: u32,
    /// When the handler started, Unix ms (backend time, as the worker reckons
    /// it from its fetch).
    #[serde(rename = "start", default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// When it ended, Unix ms (backend time, as above).
    #[serde(rename = "end", default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
    /// A `lease_lost` attempt: when its lease ran out, Unix ms (backend time).
    #[serde(rename = "lease_end", default, skip_serializing_if = "Option::is_none")]
    pub lease_end_ms: Option<u64>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error, with its chain of causes (at most [`MAX_ERROR`] bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The worker's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The worker's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

impl Attempt {
    /// How long it ran, when its start and end are known.
    pub fn duration(&self) -> Option<Duration> {
        Some(Duration::from_millis(
            self.ended_ms?.saturating_sub(self.started_ms?),
        ))
    }

    /// The record an attempt ending now is stored as: one line of JSON.
    pub(crate) fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The record of a settled delivery's attempt number `number`: its times
    /// and outcome from `ran` (unknown without it: `error` when it failed,
    /// that is when `error` is given, else `ok`), its error (unless empty)
    /// bounded to [`MAX_ERROR`], its worker from `by`.
    pub(crate) fn settled(
        number: u32,
        ran: Option<&Ran>,
        error: Option<&str>,
        by: Option<&RunBy>,
    ) -> Self {
        let outcome = ran.map_or(
            if error.is_some() {
                AttemptOutcome::Error
            } else {
                AttemptOutcome::Ok
            },
            |r| r.outcome,
        );
        Attempt {
            number,
            started_ms: ran.map(|r| r.started_ms),
            ended_ms: ran.map(|r| r.ended_ms),
            lease_end_ms: None,
            outcome,
            error: error.filter(|e| !e.is_empty()).map(bound_error),
            worker: by.map(|b| b.worker.clone()),
            host: by.map(|b| b.host.clone()),
        }
    }

    /// The record of a throttled attempt: as [`settled`](Self::settled)'s,
    /// its outcome `throttled` whatever the run said.
    pub(crate) fn throttled(
        number: u32,
        ran: Option<&Ran>,
        error: &str,
        by: Option<&RunBy>,
    ) -> Self {
        Attempt {
            outcome: AttemptOutcome::Throttled,
            ..Self::settled(number, ran, Some(error), by)
        }
    }

    /// The record of a run released while its handler ran (see
    /// [`AttemptOutcome::Released`]): as [`settled`](Self::settled)'s, its
    /// outcome `released` whatever the run said, with no error.
    pub(crate) fn released(number: u32, ran: Option<&Ran>, by: Option<&RunBy>) -> Self {
        Attempt {
            outcome: AttemptOutcome::Released,
            ..Self::settled(number, ran, None, by)
        }
    }

    /// The record of an attempt cancelled or deleted at `now_ms` while it
    /// ran, as the cancel writes it (its start and worker are the worker's,
    /// whose settle the cancel fences off).
    pub(crate) fn cancelled(number: u32, now_ms: u64) -> Self {
        Attempt {
            ended_ms: Some(now_ms),
            outcome: AttemptOutcome::Cancelled,
            ..Self::lease_lost(number, None)
        }
    }

    /// The record of an attempt whose lease ran out, as the fetch writes it.
    pub(crate) fn lease_lost(number: u32, lease_end_ms: Option<u64>) -> Self {
        Attempt {
            number,
            started_ms: None,
            ended_ms: None,
            lease_end_ms,
            outcome: AttemptOutcome::LeaseLost,
            error: None,
            worker: None,
            host: None,
        }
    }
}

/// The stored records (one JSON object per line) as attempts, oldest first.
/// A line that does not parse is skipped.
pub(crate) fn parse(text: &[u8]) -> Vec<Attempt> {
    text.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// `log` with `line` added, keeping the last [`MAX_RECORDS`] lines.
pub(crate) fn append(log: Option<&str>, line: &str) -> String {
    let mut lines: Vec<&str> = log
        .unwrap_or("")
        .split('\n')
        .filter(|l| !l.is_empty())
        .collect();
    lines.push(line);
    let skip = lines.len().saturating_sub(MAX_RECORDS);
    lines[skip..].join("\n")
}

/// `error` cut to [`MAX_ERROR`] bytes at a character boundary.
pub(crate) fn bound_error(error: &str) -> String {
    if error.len() <= MAX_ERROR {
        return error.to_string();
    }
    let mut end = MAX_ERROR - '…'.len_utf8();
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &error[..end])
}

/// Who ran the attempts of a settle: a worker's id and host.
///
/// ```
/// use redjob::backend::RunBy;
///
/// let by = RunBy { worker: "w-1".into(), host: "web-3".into() };
/// assert_eq!(by.host, "web-3");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunBy {
    /// The worker's id.
    pub worker: String,
    /// Its host.
    pub host: String,
}

impl RunBy {
    /// As JSON members to add to a record (`,"worker":"…","host":"…"`), as
    /// the settle scripts take it.
    pub(crate) fn members(&self) -> String {
        let text = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
        format!(
            ",\"worker\":{},\"host\":{}",
            text(&self.worker),
            text(&self.host)
        )
    }
}

/// How one settled delivery's run went: the attempt record's times and
/// outcome (the error is the settle entry's).
///
/// ```
/// use redjob::backend::Ran;
/// use redjob::inspect::AttemptOutcome;
///
/// let ran = Ran {
///     id: "mhx3k0vz1qabcdefghijklmnopqrstuv".parse()?,
///     started_ms: 1_790_000_000_000,
///     ended_ms: 1_790_000_000_250,
///     outcome: AttemptOutcome::Timeout,
///     job_type: Some("SendEmail".into()),
/// };
/// assert_eq!(ran.ended_ms - ran.started_ms, 250);
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// The job.
    pub id: JobId,
    /// When the handler started, Unix ms (backend time).
    pub started_ms: u64,
    /// When it ended, Unix ms (backend time).
    pub ended_ms: u64,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The job type, when the run decoded it: its run time is counted for it
    /// ([`RunTimes`](crate::backend::RunTimes)).
    pub job_type: Option<std::borrow::Cow<'static, str>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_keep_the_last_ones() {
        let a = Attempt::lease_lost(2, Some(1_790_000_000_000));
        assert_eq!(
            a.line(),
            r#"{"n":2,"lease_end":1790000000000,"outcome":"lease_lost"}"#
        );
        let mut log = String::new();
        for n in 1..=30 {
            log = append(Some(&log), &Attempt::lease_lost(n, Some(0)).line());
        }
        let parsed = parse(log.as_bytes());
        assert_eq!(parsed.len(), MAX_RECORDS);
        assert_eq!(parsed[0].number, 6);
        assert_eq!(
            parse(b"{\"n\":1,\"outcome\":\"new\"}\nnot json\n")[0].outcome,
            AttemptOutcome::Unknown
        );
    }

    #[test]
    fn errors_are_bounded_at_a_char_boundary() {
        let long = "é".repeat(3000);
        let b = bound_error(&long);
        assert!(b.len() <= MAX_ERROR && b.ends_with('…'), "{}", b.len());
        assert_eq!(bound_error("short"), "short");
    }
}
