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

mod check;
mod limits;
mod part;
mod reset;
mod text;

pub use check::{MAX_RETAINED, MAX_RETENTION_AGE};
pub use limits::{Concurrency, LimitUsage, MAX_CONCURRENCY, MAX_RATE_PERIOD, RateLimit};
pub use part::{ConcurrencyPart, HistoryPart, RetentionPart};
pub use reset::Setting;
pub use text::{duration_text, parse_duration};

use crate::contract::history::History;
use crate::contract::leases::Retention;
use crate::contract::stored::digits;

/// The settings stored for a queue; `None` where none is stored, so the
/// built-in default applies ([`Retention::default`] for dead letters, no
/// limit per worker for concurrency).
///
/// A worker's builder value ([`WorkerBuilder::dead_letter_retention`](crate::worker::WorkerBuilder::dead_letter_retention),
/// [`queue_concurrency`](crate::worker::WorkerBuilder::queue_concurrency), …)
/// is stored only where none is ([`Backend::init_settings`](crate::backend::Backend::init_settings));
/// from then on the stored value is in force for every worker, and an operator
/// changes it with [`Admin::set_settings`](crate::ops::Admin::set_settings), the
/// CLI (`redjob queue settings`) or the dashboard. Every worker follows a
/// change at once (a worker that missed its notice, within two minutes).
///
/// ```
/// use redjob::ops::{Concurrency, QueueSettings, Retention};
///
/// let s = QueueSettings::dead_letters(Retention { max_count: Some(500), max_age: None });
/// assert_eq!(s.in_force().dead_letters.max_count, Some(500));
/// assert_eq!(QueueSettings::default().in_force().dead_letters, Retention::default());
/// let one = QueueSettings::concurrency(Concurrency::per_worker(1));
/// assert_eq!(one.in_force().concurrency.per_worker, Some(1));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSettings {
    /// How many dead letters the queue keeps, and for how long.
    pub dead_letters: Option<Retention>,
    /// How many finished jobs the queue keeps, for how long, and their
    /// arguments for how long.
    pub history: Option<History>,
    /// How many of the queue's jobs run at once, per worker and across the
    /// fleet.
    pub concurrency: Option<Concurrency>,
    /// How many of the queue's jobs start in a period, across the fleet.
    pub rate_limit: Option<RateLimit>,
    /// Set by [`concurrency_part`](Self::concurrency_part): only this part
    /// of `concurrency` is stored, the other kept as stored.
    pub(crate) concurrency_part: Option<ConcurrencyPart>,
    /// Set by [`history_parts`](Self::history_parts): only these fields of
    /// `history` are stored, the others kept as stored.
    pub(crate) history_part: Option<part::Given>,
    /// Set by [`dead_letters_parts`](Self::dead_letters_parts): only these
    /// fields of `dead_letters` are stored, the others kept as stored.
    pub(crate) dead_letters_part: Option<part::Given>,
    /// Set by [`reset`](Self::reset): the settings (bit `i`: the one at
    /// place `i` of [`FIELDS`](Self::FIELDS)) to remove.
    pub(crate) reset: u8,
    /// Who stored each setting, and when (read back from the backend; what a
    /// caller sets here is ignored).
    pub set_by: SetBy,
}

/// Who stored each of a queue's settings, and when; `None` for one not stored
/// (or stored by a release that did not record it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SetBy {
    /// The dead-letter retention's.
    pub dead_letters: Option<Change>,
    /// The history retention's.
    pub history: Option<Change>,
    /// The concurrency's.
    pub concurrency: Option<Change>,
    /// The rate limit's.
    pub rate_limit: Option<Change>,
}

/// A setting's last change: who (`worker <id>` for a worker's builder
/// value, else the [actor](crate::inspect::Inspect::actor): `api`, `cli
/// alice`, `dashboard bob`) and when.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// Who.
    pub by: String,
    /// When, Unix ms (backend time).
    pub at_ms: u64,
}

impl Change {
    /// The stored form: `<ms> <who>`.
    pub(crate) fn encode(at_ms: u64, by: &str) -> String {
        format!("{at_ms} {by}")
    }

    fn decode(v: &str) -> Option<Change> {
        let (ms, by) = v.split_once(' ')?;
        Some(Change {
            by: by.to_string(),
            at_ms: ms.parse().ok()?,
        })
    }
}

/// The settings in force for a queue: the stored ones, else the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InForce {
    /// How many dead letters the queue keeps, and for how long.
    pub dead_letters: Retention,
    /// How many finished jobs the queue keeps, and for how long.
    pub history: History,
    /// How many of the queue's jobs run at once.
    pub concurrency: Concurrency,
    /// How many of the queue's jobs start in a period.
    pub rate_limit: RateLimit,
}

/// A stored dead-letter retention, `"<max count> <max age ms>"` (`0`: no
/// limit); `None` for a value the scripts would not read.
pub(crate) fn decode_retention(v: &str) -> Option<Retention> {
    let (keep, age) = v
        .split_once(' ')
        .and_then(|(k, a)| Some((digits::<u64>(k)?, digits::<u64>(a)?)))?;
    Some(Retention {
        max_count: (keep > 0).then_some(keep),
        max_age: (age > 0).then(|| Duration::from_millis(age)),
    })
}

/// How many settings there are (one hash field each).
pub(crate) const COUNT: usize = 4;

/// Field values in [`QueueSettings::FIELDS`] order; `None`: not stored.
pub(crate) type Fields = [Option<String>; COUNT];

impl QueueSettings {
    /// The hash field of each setting, in the order the scripts take them.
    /// `redjob:dead_letters` holds `"<max count> <max age ms>"`, `0` for no
    /// limit (complete.lua reads it); `redjob:history` holds
    /// [`History`]'s stored form; `redjob:concurrency` holds
    /// `"<per worker> <global>"` (`0` for none; the global part only when
    /// set), `redjob:rate` `"<max> <period ms>"` (`"0 0"` for none); fetch.lua
    /// reads the last two.
    pub(crate) const FIELDS: [&'static str; COUNT] = [
        "redjob:dead_letters",
        "redjob:history",
        "redjob:concurrency",
        "redjob:rate",
    ];

    /// Who set each field and when (`"<ms> <who>"`), in the same order.
    pub(crate) const BY_FIELDS: [&'static str; COUNT] = [
        "redjob:dead_letters:by",
        "redjob:history:by",
        "redjob:concurrency:by",
        "redjob:rate:by",
    ];

    /// Settings with the dead-letter retention `r`: stored whole, each of
    /// its fields over the one stored (a field a caller did not mean to
    /// change too: to change some alone, see
    /// [`dead_letters_parts`](Self::dead_letters_parts)).
    pub fn dead_letters(r: Retention) -> Self {
        QueueSettings {
            dead_letters: Some(r),
            ..QueueSettings::default()
        }
    }

    /// Settings with the history retention `h`: stored whole, each of its
    /// fields over the one stored (to change some alone, see
    /// [`history_parts`](Self::history_parts)).
    ///
    /// ```
    /// use redjob::ops::{History, QueueSettings};
    ///
    /// let off = QueueSettings::history(History::OFF);
    /// assert!(!off.in_force().history.enabled);
    /// ```
    pub fn history(h: History) -> Self {
        QueueSettings {
            history: Some(h),
            ..QueueSettings::default()
        }
    }

    /// Settings that change the fields of the queue's dead-letter retention
    /// given (a later one over an earlier one of the same field) and keep
    /// the others as stored, in one step with its read: two operators
    /// changing different fields at once keep both changes, where a read of
    /// the retention in force and a write of it whole with one field
    /// changed ([`dead_letters`](Self::dead_letters)) would put back a field
    /// the other had changed in between (the CLI's `--dead-max-count` or
    /// `--dead-max-age`, and the dashboard's form, store so). With nothing
    /// stored (or a value the scripts would not read), the others are
    /// [`Retention::default`]'s. No part given: the retention is left as it
    /// is.
    ///
    /// ```
    /// use redjob::ops::{Admin, QueueSettings, Retention, RetentionPart};
    /// use redjob::queue::{QueueOptions, Queues};
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// client.queues().create_queue("api", QueueOptions::default()).await?;
    /// let day = Some(Duration::from_secs(86_400));
    /// let r = Retention { max_count: Some(500), max_age: day };
    /// client.set_settings("api", &QueueSettings::dead_letters(r)).await?;
    /// let s = QueueSettings::dead_letters_parts([RetentionPart::MaxCount(None)]);
    /// let stored = client.set_settings("api", &s).await?;
    /// assert_eq!(stored.dead_letters, Some(Retention { max_count: None, max_age: day }));
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn dead_letters_parts(parts: impl IntoIterator<Item = RetentionPart>) -> Self {
        let mut r = Retention::default();
        let given = parts.into_iter().fold(0, |g, p| g | 1 << p.apply(&mut r));
        if given == 0 {
            return QueueSettings::default();
        }
        QueueSettings {
            dead_letters: Some(r),
            dead_letters_part: Some(given),
            ..QueueSettings::default()
        }
    }

    /// Settings that change the fields of the queue's history retention
    /// given (a later one over an earlier one of the same field) and keep
    /// the others as stored, in one step with its read: two operators
    /// changing different fields at once keep both changes, where a read of
    /// the history in force and a write of it whole with one field changed
    /// ([`history`](Self::history)) would put back a field the other had
    /// changed in between (the CLI's `--history…` flags, and the dashboard's
    /// form, store so). With nothing stored (or a value the scripts would
    /// not read), the others are [`History::default`]'s. No part given: the
    /// history is left as it is.
    ///
    /// ```
    /// use redjob::ops::{Admin, History, HistoryPart, QueueSettings};
    /// use redjob::queue::{QueueOptions, Queues};
    /// use std::time::Duration;
    ///
    /// # async fn demo() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// client.queues().create_queue("api", QueueOptions::default()).await?;
    /// let week = Some(Duration::from_secs(7 * 86_400));
    /// let h = History { max_age: week, ..History::default() };
    /// client.set_settings("api", &QueueSettings::history(h)).await?;
    /// let s = QueueSettings::history_parts([
    ///     HistoryPart::MaxCount(Some(5_000)),
    ///     HistoryPart::ArgsMaxAge(Some(Duration::ZERO)),
    /// ]);
    /// let stored = client.set_settings("api", &s).await?.history.unwrap();
    /// assert_eq!((stored.max_count, stored.max_age), (Some(5_000), week));
    /// assert_eq!(stored.args_max_age, Some(Duration::ZERO));
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn history_parts(parts: impl IntoIterator<Item = HistoryPart>) -> Self {
        let mut h = History::default();
        let given = parts.into_iter().fold(0, |g, p| g | 1 << p.apply(&mut h));
        if given == 0 {
            return QueueSettings::default();
        }
        QueueSettings {
            history: Some(h),
            history_part: Some(given),
            ..QueueSettings::default()
        }
    }

    /// Settings with the concurrency `c`.
    ///
    /// ```
    /// use redjob::ops::{Concurrency, QueueSettings};
    ///
    /// let none = QueueSettings::concurrency(Concurrency::UNLIMITED);
    /// assert_eq!(none.concurrency, Some(Concurrency::UNLIMITED)); // stored: no limit
    /// ```
    pub fn concurrency(c: Concurrency) -> Self {
        QueueSettings {
            concurrency: Some(c),
            ..QueueSettings::default()
        }
    }

    /// Settings that change one part of the queue's concurrency to `n` at
    /// once (`None`: no limit) and keep the other part as stored, in one
    /// step with its read: two operators changing each part at once keep
    /// both changes (the CLI's `--concurrency` or `--global-concurrency`
    /// alone, and the dashboard's form with one of its fields left empty,
    /// store so). With nothing stored, the other part is no limit.
    ///
    /// ```
    /// use redjob::ops::{Admin, Concurrency, ConcurrencyPart, QueueSettings};
    /// use redjob::queue::{QueueOptions, Queues};
    ///
    /// # async fn demo() -> redjob::Result<()> {
    /// let client = redjob::Client::memory(redjob::backend::memory::MemoryBackend::new());
    /// client.queues().create_queue("api", QueueOptions::default()).await?;
    /// let both = Concurrency::per_worker(2).with_global(10);
    /// client.set_settings("api", &QueueSettings::concurrency(both)).await?;
    /// let s = QueueSettings::concurrency_part(ConcurrencyPart::Global, Some(20));
    /// let stored = client.set_settings("api", &s).await?;
    /// assert_eq!(stored.concurrency, Some(Concurrency::per_worker(2).with_global(20)));
    /// # Ok(()) }
    /// # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn concurrency_part(part: ConcurrencyPart, n: Option<u32>) -> Self {
        let c = match part {
            ConcurrencyPart::PerWorker => Concurrency {
                per_worker: n,
                ..Concurrency::UNLIMITED
            },
            ConcurrencyPart::Global => Concurrency {
                global: n,
                ..Concurrency::UNLIMITED
            },
        };
        QueueSettings {
            concurrency: Some(c),
            concurrency_part: Some(part),
            ..QueueSettings::default()
        }
    }

    /// Settings with the rate limit `r`.
    ///
    /// ```
    /// use redjob::ops::{QueueSettings, RateLimit};
    ///
    /// let s = QueueSettings::rate_limit(RateLimit::per_minute(100));
    /// assert_eq!(s.in_force().rate_limit.max, 100);
    /// ```
    pub fn rate_limit(r: RateLimit) -> Self {
        QueueSettings {
            rate_limit: Some(r),
            ..QueueSettings::default()
        }
    }

    /// These settings with those `other` gives over them: each setting
    /// `other` gives (whole or some of its parts) replaces this one's, the
    /// others stay. Several settings changed so go in one
    /// [`Admin::set_settings`](crate::ops::Admin::set_settings) call: one
    /// step, one operator action.
    ///
    /// ```
    /// use redjob::ops::{HistoryPart, QueueSettings, RateLimit};
    ///
    /// let s = QueueSettings::rate_limit(RateLimit::per_second(5))
    ///     .and(QueueSettings::history_parts([HistoryPart::Enabled(false)]));
    /// assert_eq!(s.rate_limit, Some(RateLimit::per_second(5)));
    /// assert!(!s.in_force().history.enabled);
    /// ```
    pub fn and(mut self, other: QueueSettings) -> Self {
        if other.dead_letters.is_some() || other.resets(Setting::DeadLetters) {
            self.dead_letters = other.dead_letters;
            self.dead_letters_part = other.dead_letters_part;
        }
        if other.history.is_some() || other.resets(Setting::History) {
            self.history = other.history;
            self.history_part = other.history_part;
        }
        if other.concurrency.is_some() || other.resets(Setting::Concurrency) {
            self.concurrency = other.concurrency;
            self.concurrency_part = other.concurrency_part;
        }
        if other.rate_limit.is_some() || other.resets(Setting::RateLimit) {
            self.rate_limit = other.rate_limit;
        }
        // a value given over a reset of its setting takes its place
        for (i, given) in [
            other.dead_letters.is_some(),
            other.history.is_some(),
            other.concurrency.is_some(),
            other.rate_limit.is_some(),
        ]
        .into_iter()
        .enumerate()
        {
            if given {
                self.reset &= !(1 << i);
            }
        }
        self.reset |= other.reset;
        self
    }

    /// The settings in force: these where stored, else the defaults.
    pub fn in_force(&self) -> InForce {
        InForce {
            dead_letters: self.dead_letters.unwrap_or_default(),
            history: self.history.unwrap_or_default(),
            concurrency: self.concurrency.unwrap_or_default(),
            rate_limit: self.rate_limit.unwrap_or_default(),
        }
    }

    /// Whether no setting is stored (for settings to store: none is given,
    /// nor [reset](Self::reset)).
    pub fn is_empty(&self) -> bool {
        self.dead_letters.is_none()
            && self.history.is_none()
            && self.concurrency.is_none()
            && self.rate_limit.is_none()
            && self.reset == 0
    }

    /// Whether both hold the same values (whoever set them).
    pub fn same_values(&self, other: &QueueSettings) -> bool {
        self.encode() == other.encode()
    }

    /// The field values, in [`FIELDS`](Self::FIELDS) order; `None` where
    /// nothing is set, [`reset::RESET`] where a setting is reset.
    pub(crate) fn encode(&self) -> Fields {
        let mut fields = self.values();
        for (i, f) in fields.iter_mut().enumerate() {
            if self.reset & (1 << i) != 0 {
                *f = Some(reset::RESET.to_string());
            }
        }
        fields
    }

    /// The values given, in [`FIELDS`](Self::FIELDS) order.
    fn values(&self) -> Fields {
        [
            self.dead_letters.map(|r| {
                let (keep, age) = r.limits();
                let v = format!("{keep} {age}");
                match self.dead_letters_part {
                    Some(given) => part::fields_change('d', given, &v),
                    None => v,
                }
            }),
            self.history.map(|h| match self.history_part {
                Some(given) => part::fields_change('h', given, &h.encode()),
                None => h.encode(),
            }),
            self.concurrency.map(|c| match self.concurrency_part {
                Some(part) => part.encode(&c),
                None => c.encode(),
            }),
            self.rate_limit.map(|r| r.encode()),
        ]
    }

    /// The settings from stored field values in [`FIELDS`](Self::FIELDS)
    /// order, and who set them ([`BY_FIELDS`](Self::BY_FIELDS) order). A
    /// value the scripts would not read either counts as not stored, with a
    /// warning: the default applies until it is set again.
    pub(crate) fn decode(values: &[Option<String>], by: &[Option<String>]) -> Self {
        let field = |i: usize| values.get(i).and_then(|v| v.as_deref());
        let ignored = |i: usize, v: &str| {
            tracing::warn!(
                field = Self::FIELDS[i],
                value = v,
                "a queue setting the scripts cannot read is ignored"
            );
        };
        let dead_letters = field(0).and_then(|v| {
            let read = decode_retention(v);
            if read.is_none() {
                ignored(0, v);
            }
            read
        });
        let history = field(1).and_then(|v| {
            let read = History::decode(v);
            if read.is_none() {
                ignored(1, v);
            }
            read
        });
        let concurrency = field(2).and_then(|v| {
            let read = Concurrency::decode(v);
            if read.is_none() {
                ignored(2, v);
            }
            read
        });
        let rate_limit = field(3).and_then(|v| {
            let read = RateLimit::decode(v);
            if read.is_none() {
                ignored(3, v);
            }
            read
        });
        let set_by = |i: usize| {
            by.get(i)
                .and_then(|v| v.as_deref())
                .and_then(Change::decode)
        };
        QueueSettings {
            set_by: SetBy {
                dead_letters: dead_letters.and(set_by(0)),
                history: history.and(set_by(1)),
                concurrency: concurrency.and(set_by(2)),
                rate_limit: rate_limit.and(set_by(3)),
            },
            dead_letters,
            history,
            concurrency,
            rate_limit,
            concurrency_part: None,
            history_part: None,
            dead_letters_part: None,
            reset: 0,
        }
    }

    /// `stored` after storing these settings: each one given (`Some`) goes
    /// over what is stored (`over`), or only where nothing is; each one
    /// stored records `change` (`<ms> <who>`) in `by`; a change of some
    /// parts of a setting keeps the others as stored (see
    /// [`concurrency_part`](Self::concurrency_part),
    /// [`history_parts`](Self::history_parts) and
    /// [`dead_letters_parts`](Self::dead_letters_parts)); a setting
    /// [reset](Self::reset) is removed with who set it (`over` only). A
    /// value given as it is stored is left, with who set it. Whether any
    /// field changed. Both backends merge so (settings.lua does the same
    /// per field).
    pub(crate) fn merge(
        &self,
        stored: &mut Fields,
        by: &mut Fields,
        over: bool,
        change: &str,
    ) -> bool {
        let mut changed = false;
        for ((field, new), by) in stored.iter_mut().zip(self.encode()).zip(by.iter_mut()) {
            let Some(new) = new else { continue };
            if new == reset::RESET {
                if over && field.is_some() {
                    (*field, *by) = (None, None);
                    changed = true;
                }
                continue;
            }
            let new = if part::is_change(&new) {
                part::merge(field.as_deref(), &new)
            } else {
                new
            };
            if (over || field.is_none()) && field.as_deref() != Some(new.as_str()) {
                *field = Some(new);
                *by = Some(change.to_string());
                changed = true;
            }
        }
        changed
    }
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
            assert_eq!(QueueSettings::decode(&s.encode(), &[]), s);
        }
        for odd in ["x", "2.5 0", "-1 0", "1 2 3", ""] {
            assert!(
                QueueSettings::decode(&[Some(odd.into()), Some(odd.into()), None], &[]).is_empty(),
                "{odd:?}"
            );
        }
        for odd in ["x", "-1", "2.5", "", " 3", "1000001"] {
            assert!(
                QueueSettings::decode(&[None, None, Some(odd.into())], &[]).is_empty(),
                "{odd:?}"
            );
        }
        // the global limit follows the limit per worker
        assert_eq!(
            QueueSettings::decode(&[None, None, Some("4 100".into())], &[]).concurrency,
            Some(Concurrency::per_worker(4).with_global(100))
        );
        let rate = QueueSettings::rate_limit(RateLimit::per_second(50));
        assert_eq!(QueueSettings::decode(&rate.encode(), &[]), rate);
        assert!(
            QueueSettings::decode(&[None, None, None, Some("50".into())], &[]).is_empty(),
            "a rate limit without its period"
        );
        assert!(
            QueueSettings::rate_limit(RateLimit::new(5, Duration::ZERO))
                .check()
                .is_err()
        );
        for c in [
            Concurrency::UNLIMITED,
            Concurrency::per_worker(1),
            Concurrency::per_worker(MAX_CONCURRENCY),
        ] {
            let s = QueueSettings::concurrency(c);
            assert_eq!(QueueSettings::decode(&s.encode(), &[]), s);
        }
        assert!(
            QueueSettings::concurrency(Concurrency::per_worker(0))
                .check()
                .is_err()
        );
        assert!(
            QueueSettings::concurrency(Concurrency::per_worker(MAX_CONCURRENCY + 1))
                .check()
                .is_err()
        );
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
            assert_eq!(QueueSettings::decode(&s.encode(), &[]), s);
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
        let (mut stored, mut by): (Fields, Fields) = Default::default();
        five.merge(&mut stored, &mut by, false, "10 worker w1");
        let read = QueueSettings::decode(&stored, &by);
        assert!(read.same_values(&five));
        let first = Change {
            by: "worker w1".into(),
            at_ms: 10,
        };
        assert_eq!(read.set_by.dead_letters, Some(first.clone()));
        QueueSettings::dead_letters(Retention::UNBOUNDED).merge(
            &mut stored,
            &mut by,
            false,
            "20 worker w2",
        );
        let read = QueueSettings::decode(&stored, &by);
        assert!(read.same_values(&five), "kept");
        assert_eq!(read.set_by.dead_letters, Some(first), "kept");
        QueueSettings::default().merge(&mut stored, &mut by, true, "30 api");
        assert!(
            QueueSettings::decode(&stored, &by).same_values(&five),
            "nothing given"
        );
        QueueSettings::dead_letters(Retention::UNBOUNDED).merge(
            &mut stored,
            &mut by,
            true,
            "40 cli alice",
        );
        let read = QueueSettings::decode(&stored, &by);
        assert_eq!(read.dead_letters, Some(Retention::UNBOUNDED));
        assert_eq!(
            read.set_by.dead_letters,
            Some(Change {
                by: "cli alice".into(),
                at_ms: 40
            })
        );
        assert_eq!(read.set_by.history, None);
    }
}
