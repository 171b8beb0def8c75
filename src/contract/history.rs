//! A queue's finished jobs, kept for a while (public at `redjob::inspect`):
//! each succeeded, dead-lettered, cancelled or deleted job with its attempts,
//! type, arguments (for a shorter while) and when and how it finished.
//!
//! Stored beside the queue, in its slot (keys RSMQ ignores, deleted with the
//! queue): `ns:q:history:ids`, a list of ids in the order they finished,
//! oldest first (an id `~<ms> <id>` is a requeued job's entry of that time);
//! `ns:q:history:Q`, a hash with each entry (`<id>`, see [`Entry`]: one field
//! with the job's body at its end while its arguments are kept). How many
//! entries and for how long is the queue setting [`History`], in force for
//! every writer.

use std::time::Duration;

use crate::contract::attempts::{self, Attempt};
use crate::contract::keyed::Keyed;

/// How long a queue keeps its finished jobs: a queue setting
/// ([`QueueSettings::history`](crate::ops::QueueSettings::history)).
///
/// The defaults keep the last 1,000 finished jobs of each queue for a day,
/// and their arguments for an hour:
/// - BullMQ keeps every finished job unless told otherwise, its best-known
///   memory trap; Oban prunes after 60 s, too short to answer after an
///   incident; Sidekiq keeps no successes, asynq none unless asked. A count
///   bounds memory on a busy queue (a few hundred KB per queue for small
///   payloads, see BENCHMARKS.md); a day covers a quiet one.
/// - Arguments may hold personal data: kept an hour by default
///   ([`args_max_age`](Self::args_max_age)), then the entry stays without them.
///
/// ```
/// use redjob::ops::History;
/// use std::time::Duration;
///
/// let h = History::default();
/// assert_eq!((h.enabled, h.max_count), (true, Some(1000)));
/// assert_eq!(h.max_age, Some(Duration::from_secs(24 * 3600)));
/// assert_eq!(h.args_max_age, Some(Duration::from_secs(3600)));
/// let private = History { args_max_age: Some(Duration::ZERO), ..History::default() };
/// # let _ = (private, History::OFF);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct History {
    /// Whether finished jobs are recorded at all. Defaults to true.
    pub enabled: bool,
    /// The most entries kept; `None` for no limit. Defaults to 1,000.
    /// Once over it, the oldest go down to a twentieth under it in one
    /// step (so trims are one settle in many): a queue keeps between 95 %
    /// and 100 % of it, never more, and a job past it is not read by id (a
    /// lowered count is reached over the following settles, up to 1,000
    /// entries a call more than they add).
    pub max_count: Option<u64>,
    /// The oldest an entry gets; `None` for no limit. Defaults to 24 h.
    pub max_age: Option<Duration>,
    /// How long an entry keeps the job's arguments (its body):
    /// `Some(Duration::ZERO)` never keeps them, `None` as long as the entry.
    /// Defaults to 1 h.
    pub args_max_age: Option<Duration>,
}

impl History {
    /// Records nothing.
    pub const OFF: History = History {
        enabled: false,
        max_count: Some(1000),
        max_age: Some(Duration::from_secs(24 * 3600)),
        args_max_age: Some(Duration::from_secs(3600)),
    };

    /// Whether entries keep the job's arguments (its body) at all.
    pub(crate) fn keeps_bodies(&self) -> bool {
        self.enabled && self.args_max_age != Some(Duration::ZERO)
    }

    /// The stored form: `"<on 1|0> <max count, 0: none> <max age ms, 0:
    /// none> <args ms, -1: as long as the entry>"` (complete.lua reads it).
    pub(crate) fn encode(&self) -> String {
        let ms = |d: Duration| d.as_millis().min(1 << 52) as u64;
        let age = self.max_age.map_or(0, |d| ms(d).max(1));
        let args = self.args_max_age.map_or(-1, |d| ms(d) as i64);
        format!(
            "{} {} {age} {args}",
            u8::from(self.enabled),
            self.max_count.unwrap_or(0)
        )
    }

    /// The stored form read back; `None` when it is not that form.
    pub(crate) fn decode(v: &str) -> Option<History> {
        let mut p = v.split(' ');
        let on = match p.next()? {
            "1" => true,
            "0" => false,
            _ => return None,
        };
        use crate::contract::stored::digits;
        let count: u64 = digits(p.next()?)?;
        let age: u64 = digits(p.next()?)?;
        // (the scripts read `-?%d+`: "-0" and "-01" too)
        let a = p.next()?;
        let args: i64 = match a.strip_prefix('-') {
            Some(d) => -digits::<i64>(d)?,
            None => digits(a)?,
        };
        if p.next().is_some() || args < -1 {
            return None;
        }
        Some(History {
            enabled: on,
            max_count: (count > 0).then_some(count),
            max_age: (age > 0).then(|| Duration::from_millis(age)),
            args_max_age: (args >= 0).then(|| Duration::from_millis(args as u64)),
        })
    }
}

impl Default for History {
    fn default() -> Self {
        History {
            enabled: true,
            ..History::OFF
        }
    }
}

/// How a finished job ended.
///
/// ```
/// use redjob::inspect::Finish;
///
/// assert_eq!(Finish::Succeeded.as_str(), "succeeded");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Finish {
    /// Its handler succeeded.
    Succeeded,
    /// It was dead-lettered.
    Dead,
    /// It was cancelled.
    Cancelled,
    /// It was deleted.
    Deleted,
    /// Written by a newer redjob: an ending this one does not know.
    Unknown,
}

impl Finish {
    /// Its name as stored and printed: `succeeded`, `dead`, `cancelled`,
    /// `deleted` (`unknown`).
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Succeeded => "succeeded",
            Finish::Dead => "dead",
            Finish::Cancelled => "cancelled",
            Finish::Deleted => "deleted",
            Finish::Unknown => "unknown",
        }
    }

    /// The ending a name stands for ([`Unknown`](Finish::Unknown) for any other).
    pub fn from_name(s: &str) -> Finish {
        match s {
            "succeeded" => Finish::Succeeded,
            "dead" => Finish::Dead,
            "cancelled" => Finish::Cancelled,
            "deleted" => Finish::Deleted,
            _ => Finish::Unknown,
        }
    }
}

/// When and how a job in the history finished.
///
/// ```
/// use redjob::inspect::{Finish, Finished};
///
/// let f = Finished {
///     how: Finish::Cancelled,
///     at_ms: 1_790_000_000_000,
///     by: Some("cli alice".into()),
///     job_type: Some("SendEmail".into()),
/// };
/// assert_eq!(f.how.as_str(), "cancelled");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// How it ended.
    pub how: Finish,
    /// When, Unix ms (backend time).
    pub at_ms: u64,
    /// Who ended it, when someone did (a cancel, a delete): the source
    /// (`api`, `cli`, `dashboard`) and the actor's name.
    pub by: Option<String>,
    /// The job type its envelope named (kept after its arguments are not).
    pub job_type: Option<String>,
}

/// Who acted, as an entry keeps it: one line (newlines become spaces), at
/// most 200 bytes.
pub(crate) fn actor_line(by: &str) -> String {
    let mut line = by.replace(['\n', '\r'], " ");
    if line.len() > 200 {
        let mut end = 200;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
    line
}

/// The job type a body names in its leading `"type"` field, as redjob's
/// envelope writes it (`body_type` in lib.lua reads it alike); `None` for
/// another body.
pub(crate) fn body_type(body: &[u8]) -> Option<String> {
    let rest = body.strip_prefix(br#"{"type":""#)?;
    let end = rest.iter().position(|b| *b == b'"' || *b == b'\\')?;
    (rest[end] == b'"' && end > 0).then(|| String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// An entry as stored: its header line `h1 <how> <ms> <deliveries> <body
/// bytes>[ p<priority>][ k<key bytes>][ r<result bytes>]` (no `p` word at
/// priority 0), the job type (empty when the
/// body is not an envelope), the actor (empty for a worker's settle), a keyed
/// job's concurrency key as `<per key> <key>` and the job's result (JSON),
/// each that many bytes then a newline (a key may hold one), its attempt
/// records (one per line), then a newline and the body (none once its
/// arguments are no longer kept). A reader skips header words it does not
/// know.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub finished: Finished,
    pub deliveries: u32,
    pub runs: Vec<Attempt>,
    pub key: Option<Keyed>,
    /// What the job returned (JSON), when it succeeded with a result.
    pub result: Option<Vec<u8>>,
    /// The priority it ran at (a copy run again is sent at it).
    pub priority: i8,
}

impl Entry {
    /// The stored text with `body`, as the scripts write it.
    pub(crate) fn encode(&self, body: &[u8]) -> Vec<u8> {
        let lines: Vec<String> = self.runs.iter().map(Attempt::line).collect();
        let key = self.key.as_ref().map(|k| k.encode());
        let mut s = format!(
            "h1 {} {} {} {}{}{}{}\n{}\n{}\n",
            self.finished.how.as_str(),
            self.finished.at_ms,
            self.deliveries,
            body.len(),
            match self.priority {
                0 => String::new(),
                p => format!(" p{p}"),
            },
            key.as_ref()
                .map_or(String::new(), |k| format!(" k{}", k.len())),
            self.result
                .as_ref()
                .map_or(String::new(), |r| format!(" r{}", r.len())),
            self.finished
                .job_type
                .as_deref()
                .unwrap_or("")
                .replace('\n', " "),
            self.finished.by.as_deref().unwrap_or("").replace('\n', " "),
        )
        .into_bytes();
        if let Some(k) = key {
            s.extend_from_slice(k.as_bytes());
            s.push(b'\n');
        }
        if let Some(r) = &self.result {
            s.extend_from_slice(r);
            s.push(b'\n');
        }
        s.extend_from_slice(lines.join("\n").as_bytes());
        s.push(b'\n');
        s.extend_from_slice(body);
        s
    }

    /// The stored text read back, with its body (`None` when it keeps none);
    /// `None` when it is not an entry.
    pub(crate) fn decode(text: &[u8]) -> Option<(Entry, Option<Vec<u8>>)> {
        let mut parts = text.splitn(4, |b| *b == b'\n');
        let head = std::str::from_utf8(parts.next()?).ok()?;
        let job_type = String::from_utf8_lossy(parts.next()?).into_owned();
        let by = String::from_utf8_lossy(parts.next()?).into_owned();
        let rest = parts.next().unwrap_or_default();
        let mut h = head.split(' ');
        if h.next()? != "h1" {
            return None;
        }
        let how = Finish::from_name(h.next()?);
        let at_ms = h.next()?.parse().ok()?;
        let deliveries = h.next()?.parse().ok()?;
        let bytes: usize = h.next()?.parse().ok()?;
        // a keyed job's key and a result, their lengths in the header
        let (mut klen, mut rlen, mut priority) = (None, None, 0);
        for word in h {
            let len = |tag: char| word.strip_prefix(tag)?.parse::<usize>().ok();
            if let Some(n) = len('k') {
                klen = Some(n);
            } else if let Some(n) = len('r') {
                rlen = Some(n);
            } else if let Some(p) = word.strip_prefix('p').and_then(|p| p.parse().ok()) {
                priority = p;
            }
        }
        let mut rest = rest;
        let mut take = |n: Option<usize>| -> Option<Option<Vec<u8>>> {
            let Some(n) = n else { return Some(None) };
            let (part, after) = (rest.get(..n)?, rest.get(n..)?);
            rest = after.strip_prefix(b"\n")?;
            Some(Some(part.to_vec()))
        };
        let key = take(klen)?.and_then(|k| Keyed::decode(&k));
        let result = take(rlen)?;
        // the records, a newline, then the body's bytes
        let split = rest.len().checked_sub(bytes)?.checked_sub(1)?;
        let body = (bytes > 0).then(|| rest[split + 1..].to_vec());
        // an empty type line while the body is kept: the body names it
        let job_type = match &body {
            Some(b) if job_type.is_empty() => body_type(b).unwrap_or_default(),
            _ => job_type,
        };
        let entry = Entry {
            finished: Finished {
                how,
                at_ms,
                by: (!by.is_empty()).then_some(by),
                job_type: (!job_type.is_empty()).then_some(job_type),
            },
            deliveries,
            runs: attempts::parse(&rest[..split]),
            key,
            result,
            priority,
        };
        Some((entry, body))
    }
}

/// Which finished jobs a history listing shows
/// ([`Inspect::history`](crate::inspect::Inspect::history)): all by default.
///
/// ```
/// use redjob::inspect::{Finish, HistoryQuery};
///
/// let q = HistoryQuery::default()
///     .how(Finish::Dead)
///     .job_type("SendEmail")
///     .since_ms(1_790_000_000_000);
/// assert!(q.selects(Finish::Dead, Some("SendEmail"), 1_790_000_000_001));
/// assert!(!q.selects(Finish::Succeeded, Some("SendEmail"), 1_790_000_000_001));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    /// Only jobs that finished so. Defaults to any.
    pub how: Option<Finish>,
    /// Only jobs of this type. Defaults to any.
    pub job_type: Option<String>,
    /// Only jobs that finished at or after this, Unix ms. Defaults to any.
    pub since_ms: Option<u64>,
}

impl HistoryQuery {
    /// Only jobs that finished `how`.
    pub fn how(mut self, how: Finish) -> Self {
        self.how = Some(how);
        self
    }

    /// Only jobs of type `name`.
    pub fn job_type(mut self, name: impl Into<String>) -> Self {
        self.job_type = Some(name.into());
        self
    }

    /// Only jobs that finished at or after `ms` (Unix ms).
    pub fn since_ms(mut self, ms: u64) -> Self {
        self.since_ms = Some(ms);
        self
    }

    /// Whether a job that finished `how`, of type `job_type`, at `at_ms` is
    /// one this query selects.
    pub fn selects(&self, how: Finish, job_type: Option<&str>, at_ms: u64) -> bool {
        self.how.is_none_or(|h| h == how)
            && self.job_type.as_deref().is_none_or(|t| job_type == Some(t))
            && self.since_ms.is_none_or(|s| at_ms >= s)
    }
}

/// The most history events a queue keeps: the last ones.
pub const MAX_EVENTS: usize = 100;

/// An action on many jobs at once, kept in the queue's history as one event
/// rather than an entry per job: a purge.
///
/// ```
/// use redjob::inspect::HistoryEvent;
///
/// let e = HistoryEvent { at_ms: 1_790_000_000_000, what: "purged".into(), count: 5_000, by: Some("cli alice".into()) };
/// assert_eq!(e.count, 5_000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEvent {
    /// When, Unix ms (backend time).
    pub at_ms: u64,
    /// What: `purged`.
    pub what: String,
    /// How many jobs it took.
    pub count: u64,
    /// Who: the source and the actor's name (`api`, `cli alice`, `dashboard`).
    pub by: Option<String>,
}

impl HistoryEvent {
    /// The stored line: `<ms> <what> <count> <by>` (purge.lua writes it).
    pub(crate) fn line(&self) -> String {
        format!(
            "{} {} {} {}",
            self.at_ms,
            self.what,
            self.count,
            actor_line(self.by.as_deref().unwrap_or(""))
        )
    }

    /// The stored lines (one event each, oldest first) read back, newest
    /// first; lines of another form are passed over.
    pub(crate) fn parse_all(text: &str) -> Vec<HistoryEvent> {
        let mut out: Vec<HistoryEvent> = text
            .lines()
            .filter_map(|l| {
                let mut p = l.splitn(4, ' ');
                let at_ms = p.next()?.parse().ok()?;
                let what = p.next()?.to_string();
                let count = p.next()?.parse().ok()?;
                let by = p.next().filter(|b| !b.is_empty()).map(str::to_string);
                Some(HistoryEvent {
                    at_ms,
                    what,
                    count,
                    by,
                })
            })
            .collect();
        out.reverse();
        out
    }
}

/// `log` with `line` added, keeping the last [`MAX_EVENTS`] lines.
pub(crate) fn push_event(log: Option<&str>, line: &str) -> String {
    let mut lines: Vec<&str> = log
        .unwrap_or("")
        .lines()
        .filter(|l| !l.is_empty())
        .collect();
    lines.push(line);
    let skip = lines.len().saturating_sub(MAX_EVENTS);
    lines[skip..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_keeps_a_keyed_jobs_key_with_or_without_its_body() {
        let entry = Entry {
            finished: Finished {
                how: Finish::Dead,
                at_ms: 1_790_000_000_000,
                by: None,
                job_type: Some("Charge".into()),
            },
            deliveries: 3,
            runs: Vec::new(),
            // a key may hold spaces and newlines
            key: Some(Keyed::new("acct 7\nb").per_key(4)),
            result: Some(br#"{"n":1}"#.to_vec()),
            priority: -3,
        };
        let body = br#"{"type":"Charge","args":{}}"#;
        let (back, kept) = Entry::decode(&entry.encode(body)).expect("an entry");
        assert_eq!((&back.key, &back.result), (&entry.key, &entry.result));
        assert_eq!(back.priority, -3);
        assert_eq!((back.deliveries, kept.as_deref()), (3, Some(&body[..])));
        let (back, kept) = Entry::decode(&entry.encode(b"")).expect("an entry");
        assert_eq!((back.key, kept), (entry.key.clone(), None));
        assert_eq!(back.finished.job_type.as_deref(), Some("Charge"));
        // header words it does not know are skipped
        let text = String::from_utf8(entry.encode(body)).unwrap();
        let (head, rest) = text.split_once('\n').unwrap();
        let odd = format!("{head} kind rx z9\n{rest}");
        let (back, _) = Entry::decode(odd.as_bytes()).expect("an entry");
        assert_eq!(back.result, entry.result);
        // an entry without a key reads as before
        let plain = Entry {
            key: None,
            result: None,
            ..entry
        };
        let (back, kept) = Entry::decode(&plain.encode(body)).expect("an entry");
        assert_eq!((back.key, kept.as_deref()), (None, Some(&body[..])));
        // at priority 0 the header has no priority word, as before
        let zero = Entry {
            priority: 0,
            ..plain
        };
        let text = String::from_utf8(zero.encode(body)).unwrap();
        assert!(!text.split('\n').next().unwrap().contains(" p"), "{text}");
        assert_eq!(Entry::decode(text.as_bytes()).unwrap().0.priority, 0);
    }
}
