//! [`Cursor`]: where a [`list`](super::Inspect::list) page resumes.

use super::JobInfo;
use crate::{Error, JobId, Result};

/// Where the next page of a [`list`](super::Inspect::list) starts: after the last job of
/// the previous page. Its text form (`priority:score:id`, or `b<key in
/// hex>:score:id` in a list of blocked jobs) can travel in a URL.
///
/// ```
/// use redjob::inspect::Cursor;
///
/// let c: Cursor = "3:1790000000123.004:0000000000abcdefghijklmnopqrstuv".parse().unwrap();
/// assert_eq!(c.to_string().parse::<Cursor>().unwrap(), c);
/// let b: Cursor = "b6163:1790000000123.000:0000000000abcdefghijklmnopqrstuv".parse().unwrap();
/// assert_eq!(b.to_string().parse::<Cursor>().unwrap(), b);
/// assert!("3:x:y".parse::<Cursor>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    pub(crate) priority: i8,
    /// The row's score in thousandths of a ms.
    pub(crate) score: u64,
    pub(crate) id: JobId,
    /// A blocked job's concurrency key (blocked jobs are listed by key).
    pub(crate) key: Option<String>,
}

impl Cursor {
    /// The cursor after the dead letter `job` (dead letters are scored by their
    /// time of death in whole ms).
    pub(crate) fn dead(job: &JobInfo) -> Cursor {
        Cursor {
            priority: job.priority,
            score: job.due_ms.saturating_mul(1000),
            id: job.id,
            key: None,
        }
    }

    /// The cursor after a finished job `id` that finished at `ms`.
    pub(crate) fn dead_at(ms: u64, id: JobId) -> Cursor {
        Cursor {
            priority: 0,
            score: ms.saturating_mul(1000),
            id,
            key: None,
        }
    }

    /// The cursor after a blocked job of `key` at `score` (thousandths).
    pub(crate) fn blocked(key: &str, score: u64, id: JobId) -> Cursor {
        Cursor {
            priority: 0,
            score,
            id,
            key: Some(key.to_string()),
        }
    }

    /// A blocked job's member in the keyed set (see `concurrency_keys` in
    /// lib.lua): `<key>\0<due ms, 16 digits><count, 3 digits><id>`; `None`
    /// for another cursor.
    pub(crate) fn keyed_member(&self) -> Option<Vec<u8>> {
        let key = self.key.as_ref()?;
        let mut m = key.as_bytes().to_vec();
        m.push(0);
        m.extend_from_slice(
            format!(
                "{:016}{:03}{}",
                self.score / 1000,
                self.score % 1000,
                self.id
            )
            .as_bytes(),
        );
        Some(m)
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (s, id) = (self.score, self.id);
        match &self.key {
            Some(key) => {
                f.write_str("b")?;
                for b in key.as_bytes() {
                    write!(f, "{b:02x}")?;
                }
            }
            None => write!(f, "{}", self.priority)?,
        }
        write!(f, ":{}.{:03}:{id}", s / 1000, s % 1000)
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidValue {
            what: "cursor",
            reason: format!("{s:?} is not priority:score:id"),
        };
        let mut parts = s.splitn(3, ':');
        let (Some(p), Some(score), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let (ms, frac) = score.split_once('.').ok_or_else(bad)?;
        let score = match (ms.parse::<u64>(), frac.parse::<u64>()) {
            (Ok(ms), Ok(f)) if frac.len() == 3 => ms
                .checked_mul(1000)
                .and_then(|v| v.checked_add(f))
                .ok_or_else(bad)?,
            _ => return Err(bad()),
        };
        let id = id.parse().map_err(|_| bad())?;
        if let Some(hex) = p.strip_prefix('b') {
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(bad)?;
            let key = String::from_utf8(bytes).map_err(|_| bad())?;
            if key.is_empty() || key.contains('\0') {
                return Err(bad());
            }
            return Ok(Cursor::blocked(&key, score, id));
        }
        Ok(Cursor {
            priority: p.parse().map_err(|_| bad())?,
            score,
            id,
            key: None,
        })
    }
}
