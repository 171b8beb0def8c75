//! Changes of some parts of a setting that keep the others as stored, in the
//! same atomic step as they read them: two operators changing different
//! parts at once keep both changes, where a read of the stored value and a
//! write of the whole would put back the part the other had just changed.
//! One part of a queue's [`Concurrency`] (per worker, or across every
//! worker); some fields of its [`History`] or of its dead letters'
//! [`Retention`].
//!
//! Their forms on the way in (arguments of settings.lua, never stored as
//! such): `"p<n>"` or `"g<n>"` (`0`: no limit) for the concurrency;
//! `"h<mask> <history>"` and `"d<mask> <retention>"` for the others, the
//! value's stored form with the fields not given at their defaults and a
//! mask of `0`/`1`, one a field in stored order, `1` for a field given.
//! Both backends merge them with the stored value as [`merge`] does.

use std::time::Duration;

use super::limits::Concurrency;
use crate::contract::history::History;
use crate::contract::leases::Retention;

/// One part of a queue's [`Concurrency`]: its limit per worker, or the one
/// across every worker. [`QueueSettings::concurrency_part`](crate::ops::QueueSettings::concurrency_part)
/// changes one and keeps the other as stored.
///
/// ```
/// use redjob::ops::{ConcurrencyPart, QueueSettings};
///
/// let s = QueueSettings::concurrency_part(ConcurrencyPart::Global, Some(20));
/// assert_eq!(s.concurrency.and_then(|c| c.global), Some(20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConcurrencyPart {
    /// [`Concurrency::per_worker`](Concurrency#structfield.per_worker).
    PerWorker,
    /// [`Concurrency::global`](Concurrency#structfield.global).
    Global,
}

impl ConcurrencyPart {
    /// The change of this part of `c` (the other is not read) as it goes to
    /// the backend: `"p<n>"` or `"g<n>"`.
    pub(crate) fn encode(self, c: &Concurrency) -> String {
        match self {
            ConcurrencyPart::PerWorker => format!("p{}", c.per_worker.unwrap_or(0)),
            ConcurrencyPart::Global => format!("g{}", c.global.unwrap_or(0)),
        }
    }
}

/// One field of a queue's [`History`] with its new value.
/// [`QueueSettings::history_parts`](crate::ops::QueueSettings::history_parts)
/// changes the fields given and keeps the others as stored.
///
/// ```
/// use redjob::ops::{HistoryPart, QueueSettings};
///
/// let s = QueueSettings::history_parts([HistoryPart::MaxCount(Some(5_000))]);
/// assert_eq!(s.history.and_then(|h| h.max_count), Some(5_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HistoryPart {
    /// [`History::enabled`](History#structfield.enabled).
    Enabled(bool),
    /// [`History::max_count`](History#structfield.max_count) (`None`: no
    /// limit).
    MaxCount(Option<u64>),
    /// [`History::max_age`](History#structfield.max_age) (`None`: no limit).
    MaxAge(Option<Duration>),
    /// [`History::args_max_age`](History#structfield.args_max_age)
    /// (`Some(Duration::ZERO)`: never kept, `None`: as long as the entry).
    ArgsMaxAge(Option<Duration>),
}

impl HistoryPart {
    /// `h` with this field set to its value; returns the field's place in
    /// the stored form.
    pub(crate) fn apply(self, h: &mut History) -> usize {
        match self {
            HistoryPart::Enabled(on) => {
                h.enabled = on;
                0
            }
            HistoryPart::MaxCount(n) => {
                h.max_count = n;
                1
            }
            HistoryPart::MaxAge(d) => {
                h.max_age = d;
                2
            }
            HistoryPart::ArgsMaxAge(d) => {
                h.args_max_age = d;
                3
            }
        }
    }
}

/// One field of a queue's dead-letter [`Retention`] with its new value.
/// [`QueueSettings::dead_letters_parts`](crate::ops::QueueSettings::dead_letters_parts)
/// changes the fields given and keeps the others as stored.
///
/// ```
/// use redjob::ops::{QueueSettings, RetentionPart};
///
/// let s = QueueSettings::dead_letters_parts([RetentionPart::MaxCount(Some(250))]);
/// assert_eq!(s.dead_letters.and_then(|r| r.max_count), Some(250));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetentionPart {
    /// [`Retention::max_count`](Retention#structfield.max_count) (`None`: no
    /// limit).
    MaxCount(Option<u64>),
    /// [`Retention::max_age`](Retention#structfield.max_age) (`None`: no
    /// limit).
    MaxAge(Option<Duration>),
}

impl RetentionPart {
    /// `r` with this field set to its value; returns the field's place in
    /// the stored form.
    pub(crate) fn apply(self, r: &mut Retention) -> usize {
        match self {
            RetentionPart::MaxCount(n) => {
                r.max_count = n;
                0
            }
            RetentionPart::MaxAge(d) => {
                r.max_age = d;
                1
            }
        }
    }
}

/// The fields given of a [`History`] or a [`Retention`] (bit `i`: the
/// field at place `i` of the stored form).
pub(crate) type Given = u8;

/// The change of the fields `given` (`'h'` for a history, `'d'` for a
/// dead-letter retention) as it goes to the backend: `"<kind><mask>
/// <value>"`, `value` the stored form of the whole with the fields not given
/// at their defaults (what is stored where nothing is).
pub(crate) fn fields_change(kind: char, given: Given, value: &str) -> String {
    let places = value.split(' ').count();
    let mask: String = (0..places)
        .map(|i| if given & (1 << i) != 0 { '1' } else { '0' })
        .collect();
    format!("{kind}{mask} {value}")
}

/// Whether `v` (a field's value on its way to the backend) is a change of
/// some parts of a setting rather than a whole value (settings.lua tells it
/// so too: stored values start with a digit).
pub(crate) fn is_change(v: &str) -> bool {
    v.starts_with(['p', 'g', 'h', 'd'])
}

/// The stored value `stored` (none, or one Rust would not read: the
/// defaults) with the change `change` (see [`ConcurrencyPart::encode`] and
/// [`fields_change`]) applied, in its stored form. settings.lua merges the
/// same way.
pub(crate) fn merge(stored: Option<&str>, change: &str) -> String {
    if change.starts_with(['h', 'd']) {
        merge_fields(stored, change)
    } else {
        merge_concurrency(stored, change)
    }
}

/// [`merge`] of a concurrency part. Numbers a later release stored after
/// the second are dropped, as a whole change drops them.
fn merge_concurrency(stored: Option<&str>, change: &str) -> String {
    let mut c = stored.and_then(Concurrency::decode).unwrap_or_default();
    let n = crate::contract::stored::digits::<u32>(&change[1..]).filter(|n| *n > 0);
    if change.starts_with('p') {
        c.per_worker = n;
    } else {
        c.global = n;
    }
    c.encode()
}

/// [`merge`] of some fields of a history or a retention: the fields given
/// from the change, the others as stored, each as written there (a stored
/// value Rust would not read counts as none: the change's defaults).
fn merge_fields(stored: Option<&str>, change: &str) -> String {
    let Some((head, value)) = change.split_once(' ') else {
        return change.to_string();
    };
    let (kind, mask) = head.split_at(1);
    let readable = |v: &str| match kind {
        "h" => History::decode(v).is_some(),
        _ => super::decode_retention(v).is_some(),
    };
    let Some(stored) = stored.filter(|v| readable(v)) else {
        return value.to_string();
    };
    stored
        .split(' ')
        .zip(value.split(' '))
        .zip(mask.bytes())
        .map(|((old, new), given)| if given == b'1' { new } else { old })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_one_part_keeps_the_other() {
        assert_eq!(merge(Some("2 10"), "p5"), "5 10");
        assert_eq!(merge(Some("2 10"), "g20"), "2 20");
        assert_eq!(merge(Some("2 10"), "g0"), "2");
        assert_eq!(merge(Some("2"), "g3"), "2 3");
        assert_eq!(merge(None, "g3"), "0 3");
        assert_eq!(merge(None, "p0"), "0");
        assert_eq!(merge(Some("x"), "p4"), "4", "unreadable: no limit");
        assert_eq!(merge(Some("2 10 7"), "p1"), "1 10");
    }

    #[test]
    fn a_change_of_some_fields_keeps_the_others_as_stored() {
        let h = |given, value: &str| fields_change('h', given, value);
        assert_eq!(
            h(0b0010, "1 5000 86400000 3600000"),
            "h0100 1 5000 86400000 3600000"
        );
        let count = h(0b0010, "1 5000 86400000 3600000");
        assert_eq!(
            merge(Some("0 20 604800000 -1"), &count),
            "0 5000 604800000 -1"
        );
        // kept as written, leading zeros and all
        assert_eq!(merge(Some("1 7 007 -01"), &count), "1 5000 007 -01");
        // nothing stored, or a value Rust does not read: the defaults
        assert_eq!(merge(None, &count), "1 5000 86400000 3600000");
        for odd in [
            "",
            "1 7 7",
            "1 7 7 -2",
            "2 7 7 7",
            "1 7 7 7 7",
            "1 18446744073709551616 0 0",
        ] {
            assert_eq!(
                merge(Some(odd), &count),
                "1 5000 86400000 3600000",
                "{odd:?}"
            );
        }
        let age = fields_change('d', 0b10, "10000 86400000");
        assert_eq!(age, "d01 10000 86400000");
        assert_eq!(merge(Some("250 0"), &age), "250 86400000");
        assert_eq!(merge(Some("250 0 1"), &age), "10000 86400000");
        assert_eq!(
            merge(Some("250 0"), &fields_change('d', 0b11, "1 2")),
            "1 2"
        );
    }
}
