//! A change of one part of a queue's [`Concurrency`] (per worker, or across
//! every worker) that keeps the other part as stored, in the same atomic
//! step as it reads it: two operators changing each part at once keep both
//! changes, where a read of the stored value and a write of both parts
//! would put back the part the other had just changed.
//!
//! Its stored form on the way in (an argument of settings.lua, never stored
//! as such) is `"p<n>"` or `"g<n>"` (`0`: no limit); both backends merge it
//! with the stored value as [`merge`] does.

use super::limits::Concurrency;

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

    /// Whether `v` is such a change (settings.lua tells it so too).
    pub(crate) fn is_change(v: &str) -> bool {
        v.starts_with(['p', 'g'])
    }
}

/// The stored concurrency `stored` (none, or one the scripts would not read:
/// no limit) with the change `change` (see [`ConcurrencyPart::encode`])
/// applied, in its stored form. Numbers a later release stored after the
/// second are dropped, as a whole change drops them. settings.lua merges the
/// same way.
pub(crate) fn merge(stored: Option<&str>, change: &str) -> String {
    let mut c = stored.and_then(Concurrency::decode).unwrap_or_default();
    let n = crate::contract::stored::digits::<u32>(&change[1..]).filter(|n| *n > 0);
    if change.starts_with('p') {
        c.per_worker = n;
    } else {
        c.global = n;
    }
    c.encode()
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
}
