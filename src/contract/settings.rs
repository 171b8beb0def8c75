//! Settings of a queue that govern state every worker shares, stored with the
//! queue (public at `redjob::ops`): one value in force for all workers, which an
//! operator changes at run time and a deploy does not undo.
//!
//! Each setting is one field of the queue's hash (`ns:q:Q`, which RSMQ's
//! clients read only their own fields of; deleted with the queue), so it is
//! stored or not as a whole. Both backends keep the same field values, read
//! and merged by the same code here: adding a setting is a field of
//! [`QueueSettings`], its [`FIELDS`](QueueSettings::FIELDS) entry and its
//! arms in `encode` and `decode`.

use std::time::Duration;

use crate::contract::history::History;
use crate::contract::leases::Retention;
use crate::{Error, Result};

/// The settings stored for a queue; `None` where none is stored, so the
/// built-in default applies ([`Retention::default`] for dead letters).
///
/// A worker's builder value ([`WorkerBuilder::dead_letter_retention`](crate::worker::WorkerBuilder::dead_letter_retention))
/// is stored only where none is ([`Backend::init_settings`](crate::backend::Backend::init_settings));
/// from then on the stored value is in force for every worker, and an operator
/// changes it with [`Admin::set_settings`](crate::ops::Admin::set_settings), the
/// CLI (`redjob queue settings`) or the dashboard.
///
/// ```
/// use redjob::ops::{QueueSettings, Retention};
///
/// let s = QueueSettings::dead_letters(Retention { max_count: Some(500), max_age: None });
/// assert_eq!(s.in_force().dead_letters.max_count, Some(500));
/// assert_eq!(QueueSettings::default().in_force().dead_letters, Retention::default());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSettings {
    /// How many dead letters the queue keeps, and for how long.
    pub dead_letters: Option<Retention>,
    /// How many finished jobs the queue keeps, for how long, and their
    /// arguments for how long.
    pub history: Option<History>,
}

/// The settings in force for a queue: the stored ones, else the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InForce {
    /// How many dead letters the queue keeps, and for how long.
    pub dead_letters: Retention,
    /// How many finished jobs the queue keeps, and for how long.
    pub history: History,
}

/// How many settings there are (one hash field each).
pub(crate) const COUNT: usize = 2;

/// Field values in [`QueueSettings::FIELDS`] order; `None`: not stored.
pub(crate) type Fields = [Option<String>; COUNT];

impl QueueSettings {
    /// The hash field of each setting, in the order the scripts take them.
    /// `redjob:dead_letters` holds `"<max count> <max age ms>"`, `0` for no
    /// limit (complete.lua reads it); `redjob:history` holds
    /// [`History`]'s stored form.
    pub(crate) const FIELDS: [&'static str; COUNT] = ["redjob:dead_letters", "redjob:history"];

    /// Settings with the dead-letter retention `r`.
    pub fn dead_letters(r: Retention) -> Self {
        QueueSettings {
            dead_letters: Some(r),
            history: None,
        }
    }

    /// Settings with the history retention `h`.
    ///
    /// ```
    /// use redjob::ops::{History, QueueSettings};
    ///
    /// let off = QueueSettings::history(History::OFF);
    /// assert!(!off.in_force().history.enabled);
    /// ```
    pub fn history(h: History) -> Self {
        QueueSettings {
            dead_letters: None,
            history: Some(h),
        }
    }

    /// The settings in force: these where stored, else the defaults.
    pub fn in_force(&self) -> InForce {
        InForce {
            dead_letters: self.dead_letters.unwrap_or_default(),
            history: self.history.unwrap_or_default(),
        }
    }

    /// Whether no setting is stored.
    pub fn is_empty(&self) -> bool {
        *self == QueueSettings::default()
    }

    /// The field values, in [`FIELDS`](Self::FIELDS) order; `None` where
    /// nothing is set.
    pub(crate) fn encode(&self) -> Fields {
        [
            self.dead_letters.map(|r| {
                let (keep, age) = r.limits();
                format!("{keep} {age}")
            }),
            self.history.map(|h| h.encode()),
        ]
    }

    /// The settings from stored field values in [`FIELDS`](Self::FIELDS)
    /// order. A value the scripts would not read either (not two whole
    /// numbers) counts as not stored, with a warning: the default applies
    /// until it is set again.
    pub(crate) fn decode(values: &[Option<String>]) -> Self {
        let dead_letters = values.first().and_then(|v| v.as_deref()).and_then(|v| {
            let read = v
                .split_once(' ')
                .and_then(|(k, a)| Some((k.parse::<u64>().ok()?, a.parse::<u64>().ok()?)));
            if read.is_none() {
                tracing::warn!(
                    field = Self::FIELDS[0],
                    value = v,
                    "a queue setting that is not two whole numbers is ignored"
                );
            }
            let (keep, age) = read?;
            Some(Retention {
                max_count: (keep > 0).then_some(keep),
                max_age: (age > 0).then(|| Duration::from_millis(age)),
            })
        });
        let history = values.get(1).and_then(|v| v.as_deref()).and_then(|v| {
            let read = History::decode(v);
            if read.is_none() {
                tracing::warn!(
                    field = Self::FIELDS[1],
                    value = v,
                    "a history setting the scripts cannot read is ignored"
                );
            }
            read
        });
        QueueSettings {
            dead_letters,
            history,
        }
    }

    /// `stored` after storing these settings: each one given (`Some`) goes
    /// over what is stored (`over`), or only where nothing is. Both backends
    /// merge so (settings.lua does the same per field).
    pub(crate) fn merge(&self, stored: &mut Fields, over: bool) {
        for (field, new) in stored.iter_mut().zip(self.encode()) {
            if new.is_some() && (over || field.is_none()) {
                *field = new;
            }
        }
    }

    /// Checks the values a caller asks to store.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(r) = self.dead_letters
            && (r.max_count == Some(0) || r.max_age == Some(Duration::ZERO))
        {
            return Err(Error::InvalidValue {
                what: "dead-letter retention",
                reason: "a limit of 0 would keep no dead letter; use None for no limit".into(),
            });
        }
        if let Some(h) = self.history
            && (h.max_count == Some(0) || h.max_age == Some(Duration::ZERO))
        {
            return Err(Error::InvalidValue {
                what: "history retention",
                reason: "a limit of 0 would keep no entry; use History::OFF to keep none, None for no limit".into(),
            });
        }
        Ok(())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_survive_their_stored_form_and_odd_values_are_not_stored() {
        for s in [
            QueueSettings::default(),
            QueueSettings::dead_letters(Retention::default()),
            QueueSettings::dead_letters(Retention::UNBOUNDED),
            QueueSettings::dead_letters(Retention {
                max_count: Some(7),
                max_age: None,
            }),
        ] {
            assert_eq!(QueueSettings::decode(&s.encode()), s);
        }
        for odd in ["x", "5", "2.5 0", "-1 0", "1 2 3", ""] {
            assert!(
                QueueSettings::decode(&[Some(odd.into()), Some(odd.into())]).is_empty(),
                "{odd:?}"
            );
        }
        for h in [
            History::default(),
            History::OFF,
            History {
                max_count: None,
                max_age: None,
                args_max_age: None,
                ..History::default()
            },
            History {
                args_max_age: Some(Duration::ZERO),
                ..History::default()
            },
        ] {
            let s = QueueSettings::history(h);
            assert_eq!(QueueSettings::decode(&s.encode()), s);
        }
        assert_eq!(History::default().encode(), "1 1000 86400000 3600000");
        assert!(
            QueueSettings::dead_letters(Retention {
                max_count: Some(0),
                max_age: None
            })
            .check()
            .is_err()
        );
    }

    #[test]
    fn a_merge_sets_over_or_only_where_nothing_is_stored() {
        let five = QueueSettings::dead_letters(Retention {
            max_count: Some(5),
            max_age: None,
        });
        let mut stored: Fields = [None, None];
        five.merge(&mut stored, false);
        assert_eq!(QueueSettings::decode(&stored), five);
        QueueSettings::dead_letters(Retention::UNBOUNDED).merge(&mut stored, false);
        assert_eq!(QueueSettings::decode(&stored), five, "kept");
        QueueSettings::default().merge(&mut stored, true);
        assert_eq!(QueueSettings::decode(&stored), five, "nothing given");
        QueueSettings::dead_letters(Retention::UNBOUNDED).merge(&mut stored, true);
        assert_eq!(
            QueueSettings::decode(&stored).dead_letters,
            Some(Retention::UNBOUNDED)
        );
    }
}
