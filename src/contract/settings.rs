//! Settings of a queue that govern state every worker shares, stored with the
//! queue (public at `redjob::ops`): one value in force for all workers, which an
//! operator changes at run time and a deploy does not undo.
//!
//! On Redis each setting is a field of the queue's hash (`ns:q:Q`), which RSMQ
//! ignores, deleted with the queue; in memory it sits with the queue. A new
//! setting is one field of [`QueueSettings`] and its entry in
//! [`QueueSettings::FIELDS`], read and written by the same code.

use std::time::Duration;

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
/// let s = QueueSettings { dead_letters: Some(Retention { max_count: Some(500), max_age: None }) };
/// assert_eq!(s.in_force().dead_letters.max_count, Some(500));
/// assert_eq!(QueueSettings::default().in_force().dead_letters, Retention::default());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSettings {
    /// How many dead letters the queue keeps, and for how long.
    pub dead_letters: Option<Retention>,
}

/// The settings in force for a queue: the stored ones, else the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InForce {
    /// How many dead letters the queue keeps, and for how long.
    pub dead_letters: Retention,
}

impl QueueSettings {
    /// The hash fields the settings are stored in (names and order as the
    /// scripts read them): dead-letter count then age, in ms, `0` for no limit.
    pub(crate) const FIELDS: [&'static str; 2] = ["redjob:dead_keep", "redjob:dead_age"];

    /// Settings with the dead-letter retention `r`.
    pub fn dead_letters(r: Retention) -> Self {
        QueueSettings {
            dead_letters: Some(r),
        }
    }

    /// The settings in force: these where stored, else the defaults.
    pub fn in_force(&self) -> InForce {
        InForce {
            dead_letters: self.dead_letters.unwrap_or_default(),
        }
    }

    /// Whether no setting is stored.
    pub fn is_empty(&self) -> bool {
        *self == QueueSettings::default()
    }

    /// The field values, in [`FIELDS`](Self::FIELDS) order; `None` where
    /// nothing is set.
    pub(crate) fn encode(&self) -> [Option<String>; 2] {
        match self.dead_letters {
            Some(r) => {
                let (keep, age) = r.limits();
                [Some(keep.to_string()), Some(age.to_string())]
            }
            None => [None, None],
        }
    }

    /// The settings from stored field values in [`FIELDS`](Self::FIELDS)
    /// order; an unreadable value is an error naming the field.
    pub(crate) fn decode(values: &[Option<String>]) -> Result<Self> {
        let num = |i: usize| -> Result<Option<u64>> {
            match values.get(i).and_then(|v| v.as_deref()) {
                None => Ok(None),
                Some(v) => v.parse().map(Some).map_err(|_| {
                    Error::Protocol(format!(
                        "queue setting {} is {v:?}, not a number",
                        Self::FIELDS[i]
                    ))
                }),
            }
        };
        let dead_letters = match (num(0)?, num(1)?) {
            (None, None) => None,
            (keep, age) => Some(Retention {
                max_count: keep.filter(|&k| k > 0),
                max_age: age.filter(|&a| a > 0).map(Duration::from_millis),
            }),
        };
        Ok(QueueSettings { dead_letters })
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_survive_their_stored_form() {
        for s in [
            QueueSettings::default(),
            QueueSettings::dead_letters(Retention::default()),
            QueueSettings::dead_letters(Retention::UNBOUNDED),
            QueueSettings::dead_letters(Retention {
                max_count: Some(7),
                max_age: None,
            }),
        ] {
            assert_eq!(QueueSettings::decode(&s.encode()).unwrap(), s);
        }
        let bad = QueueSettings::decode(&[Some("x".into()), None]).unwrap_err();
        assert!(bad.to_string().contains("redjob:dead_keep"), "{bad}");
        assert!(
            QueueSettings::dead_letters(Retention {
                max_count: Some(0),
                max_age: None
            })
            .check()
            .is_err()
        );
    }
}
