//! The overview of every queue in a namespace, read in a bounded number of
//! round trips: the set of queues, then one pipelined script call per queue
//! (per node on a Cluster). Filtered by name, sorted by any column and paged
//! after the read.

use std::cmp::Ordering;
use std::time::Duration;

use crate::contract::inspect::StateCounts;
use crate::contract::stats::{MinuteStats, QueueStats};

/// One queue's line of an [`Overview`].
///
/// ```
/// use redjob::ops::QueueLine;
///
/// let l = QueueLine::new("mail");
/// assert_eq!((l.name.as_str(), l.paused, l.latency), ("mail", false, None));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueLine {
    /// The queue's name.
    pub name: String,
    /// Its jobs by state.
    pub counts: StateCounts,
    /// How long its oldest ready job has waited; `None` when none is ready.
    pub latency: Option<Duration>,
    /// Whether its workers are paused.
    pub paused: bool,
    /// Its counters since it was created.
    pub stats: QueueStats,
    /// The last hour, minute by minute (oldest first, see
    /// [`MINUTES`](crate::backend::MINUTES)), when the query asked for them;
    /// else empty.
    pub minutes: Vec<MinuteStats>,
    /// The last week, hour by hour (oldest first, see
    /// [`HOURS`](crate::backend::HOURS)), when the query asked for them; else
    /// empty.
    pub hours: Vec<MinuteStats>,
}

impl QueueLine {
    /// An empty line for queue `name`.
    pub fn new(name: &str) -> Self {
        QueueLine {
            name: name.into(),
            ..QueueLine::default()
        }
    }
}

/// The column an [`Overview`] is sorted by.
///
/// ```
/// use redjob::ops::OverviewSort;
///
/// assert_eq!("latency".parse::<OverviewSort>().ok(), Some(OverviewSort::Latency));
/// assert!("bogus".parse::<OverviewSort>().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OverviewSort {
    /// By name (the default).
    #[default]
    Name,
    /// Ready jobs.
    Ready,
    /// Scheduled jobs.
    Scheduled,
    /// Jobs in flight.
    InFlight,
    /// Dead letters.
    Dead,
    /// How long the oldest ready job has waited.
    Latency,
    /// Jobs processed.
    Processed,
    /// Failed runs.
    Failed,
    /// Paused queues (after the others ascending).
    Paused,
}

impl OverviewSort {
    /// Every column, by its name.
    pub const ALL: [(&'static str, OverviewSort); 9] = [
        ("name", OverviewSort::Name),
        ("ready", OverviewSort::Ready),
        ("scheduled", OverviewSort::Scheduled),
        ("in_flight", OverviewSort::InFlight),
        ("dead", OverviewSort::Dead),
        ("latency", OverviewSort::Latency),
        ("processed", OverviewSort::Processed),
        ("failed", OverviewSort::Failed),
        ("paused", OverviewSort::Paused),
    ];

    /// Its name, as [`FromStr`](std::str::FromStr) reads it.
    pub fn as_str(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("name", |(n, _)| n)
    }

    /// By this column alone.
    fn cmp(self, a: &QueueLine, b: &QueueLine) -> Ordering {
        match self {
            OverviewSort::Name => a.name.cmp(&b.name),
            OverviewSort::Ready => a.counts.ready.cmp(&b.counts.ready),
            OverviewSort::Scheduled => a.counts.scheduled.cmp(&b.counts.scheduled),
            OverviewSort::InFlight => a.counts.in_flight.cmp(&b.counts.in_flight),
            OverviewSort::Dead => a.counts.dead.cmp(&b.counts.dead),
            OverviewSort::Latency => a.latency.cmp(&b.latency),
            OverviewSort::Processed => a.stats.processed.cmp(&b.stats.processed),
            OverviewSort::Failed => a.stats.failed.cmp(&b.stats.failed),
            OverviewSort::Paused => a.paused.cmp(&b.paused),
        }
    }
}

impl std::str::FromStr for OverviewSort {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        let wanted = s.replace('-', "_");
        Self::ALL
            .iter()
            .find(|(n, _)| *n == wanted)
            .map(|(_, s)| *s)
            .ok_or_else(|| crate::Error::InvalidValue {
                what: "overview sort",
                reason: format!("{s:?}: use one of {}", Self::ALL.map(|(n, _)| n).join(", ")),
            })
    }
}

/// What an [`Overview`] shows: the queues whose name contains `filter`,
/// sorted, a page of them.
///
/// ```
/// use redjob::ops::{OverviewQuery, OverviewSort};
///
/// let q = OverviewQuery::default().filter("mail").sort(OverviewSort::Dead).descending().page(0, 20);
/// assert_eq!((q.offset, q.limit), (0, Some(20)));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OverviewQuery {
    /// Only queues whose name contains this (`None`, the default: all).
    pub filter: Option<String>,
    /// The column to sort by. Defaults to the name.
    pub sort: OverviewSort,
    /// Largest first. Defaults to `false` (smallest first). Ties are by
    /// name, A to Z, either way.
    pub descending: bool,
    /// Lines skipped before the page. Defaults to 0.
    pub offset: usize,
    /// The most lines (`None`, the default: every matching queue).
    pub limit: Option<usize>,
    /// Each line's last hour, minute by minute ([`QueueLine::minutes`]).
    /// Defaults to `false`: the read is smaller without them.
    pub minutes: bool,
    /// Each line's last week, hour by hour ([`QueueLine::hours`]). Defaults
    /// to `false` (169 entries a queue: about three times the minutes' read).
    pub hours: bool,
    /// [`filter`](Self::filter) is the whole name, not a part of it (see
    /// [`named`](Self::named)). Defaults to `false`.
    pub exact: bool,
}

impl OverviewQuery {
    /// Only queues whose name contains `text` (default: all).
    pub fn filter(mut self, text: impl Into<String>) -> Self {
        self.filter = Some(text.into()).filter(|t: &String| !t.is_empty());
        self
    }

    /// Only the queue named `name`: one line read, however many queues'
    /// names hold it.
    ///
    /// ```
    /// use redjob::ops::OverviewQuery;
    ///
    /// let q = OverviewQuery::default().named("mail");
    /// assert_eq!((q.filter.as_deref(), q.exact), (Some("mail"), true));
    /// ```
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.filter = Some(name.into());
        self.exact = true;
        self
    }

    /// Sorted by `column` (default: [`OverviewSort::Name`]).
    pub fn sort(mut self, column: OverviewSort) -> Self {
        self.sort = column;
        self
    }

    /// Largest first (default: smallest first).
    pub fn descending(mut self) -> Self {
        self.descending = true;
        self
    }

    /// `limit` lines after skipping `offset` (default: all).
    pub fn page(mut self, offset: usize, limit: usize) -> Self {
        self.offset = offset;
        self.limit = Some(limit);
        self
    }

    /// With each line's last hour, minute by minute (default: without).
    pub fn with_minutes(mut self) -> Self {
        self.minutes = true;
        self
    }

    /// With each line's last week by hour ([`QueueLine::hours`]).
    pub fn with_hours(mut self) -> Self {
        self.hours = true;
        self
    }

    /// Whether queue `name` is shown.
    pub(crate) fn wants(&self, name: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| {
            if self.exact {
                name == f
            } else {
                name.contains(f)
            }
        })
    }

    /// The read lines filtered, sorted and paged, as the overview.
    pub(crate) fn finish(
        &self,
        mut lines: Vec<QueueLine>,
        skipped: Vec<String>,
        now_ms: u64,
    ) -> Overview {
        lines.retain(|l| self.wants(&l.name));
        // ties by name, A to Z either way
        lines.sort_by(|a, b| {
            let o = self.sort.cmp(a, b);
            let o = if self.descending { o.reverse() } else { o };
            o.then_with(|| a.name.cmp(&b.name))
        });
        let matched = lines.len();
        let mut total = Totals::default();
        for l in &lines {
            total.add(l);
        }
        let lines = lines
            .into_iter()
            .skip(self.offset)
            .take(self.limit.unwrap_or(usize::MAX))
            .collect();
        Overview {
            lines,
            matched,
            total,
            skipped,
            now_ms,
        }
    }
}

/// The matching queues' lines added up.
///
/// ```
/// use redjob::ops::Totals;
///
/// assert_eq!(Totals::default().queues, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Totals {
    /// Queues.
    pub queues: u64,
    /// Their jobs by state.
    pub counts: StateCounts,
    /// Their counters.
    pub stats: QueueStats,
    /// Paused ones.
    pub paused: u64,
    /// The longest any oldest ready job has waited.
    pub latency: Option<Duration>,
}

impl Totals {
    fn add(&mut self, l: &QueueLine) {
        self.queues += 1;
        self.counts.add(&l.counts);
        self.stats.processed = self.stats.processed.saturating_add(l.stats.processed);
        self.stats.failed = self.stats.failed.saturating_add(l.stats.failed);
        self.stats.retried = self.stats.retried.saturating_add(l.stats.retried);
        self.stats.dead = self.stats.dead.saturating_add(l.stats.dead);
        self.paused += u64::from(l.paused);
        self.latency = self.latency.max(l.latency);
    }
}

/// Every queue of a namespace at a glance ([`Admin::overview`](crate::ops::Admin::overview)).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::ops::{Admin, OverviewQuery, OverviewSort};
/// use redjob::queue::{Queues, SendMessage};
///
/// let q = MemoryBackend::new();
/// for name in ["mail", "billing", "mail-bulk"] {
///     q.create_queue(name, Default::default()).await?;
/// }
/// q.send("mail", SendMessage::new("hi")).await?;
/// let o = q.overview(&OverviewQuery::default().filter("mail").sort(OverviewSort::Ready).descending()).await?;
/// assert_eq!(o.matched, 2);
/// assert_eq!(o.lines[0].name, "mail");
/// assert_eq!(o.total.counts.ready, 1);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overview {
    /// The page of lines, in the query's order.
    pub lines: Vec<QueueLine>,
    /// How many queues matched the filter (the lines of every page).
    pub matched: usize,
    /// The matching queues added up (all pages).
    pub total: Totals,
    /// Entries of the namespace's set of queues that are no valid queue name
    /// (another RSMQ port's looser names, a stray `SADD`): skipped, one that
    /// is not UTF-8 named lossily (U+FFFD).
    pub skipped: Vec<String>,
    /// The backend's clock when it was read (Unix ms).
    pub now_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str, ready: u64, latency_ms: Option<u64>) -> QueueLine {
        let mut l = QueueLine::new(name);
        l.counts.ready = ready;
        l.latency = latency_ms.map(Duration::from_millis);
        l
    }

    #[test]
    fn lines_are_filtered_sorted_with_ties_by_name_and_paged() {
        let lines = vec![
            line("b", 5, Some(10)),
            line("a", 5, None),
            line("c", 9, Some(3)),
            line("x", 1, Some(99)),
        ];
        let q = OverviewQuery::default()
            .sort(OverviewSort::Ready)
            .descending();
        let o = q.finish(lines.clone(), vec![], 1);
        let names: Vec<&str> = o.lines.iter().map(|l| l.name.as_str()).collect();
        // ties by name, A to Z, largest first or not
        assert_eq!(names, ["c", "a", "b", "x"]);
        assert_eq!((o.matched, o.total.counts.ready), (4, 20));
        assert_eq!(o.total.latency, Some(Duration::from_millis(99)));
        let q = OverviewQuery::default()
            .sort(OverviewSort::Latency)
            .page(1, 2);
        let o = q.finish(lines.clone(), vec![], 1);
        let names: Vec<&str> = o.lines.iter().map(|l| l.name.as_str()).collect();
        // none waiting sorts first ascending
        assert_eq!(names, ["c", "b"]);
        assert_eq!(o.matched, 4);
        let o = OverviewQuery::default()
            .filter("x")
            .finish(lines, vec![], 1);
        assert_eq!((o.matched, o.lines[0].name.as_str()), (1, "x"));
    }

    #[test]
    fn sort_names_round_trip() {
        for (name, s) in OverviewSort::ALL {
            assert_eq!(name.parse::<OverviewSort>().unwrap(), s);
            assert_eq!(s.as_str(), name);
        }
        assert_eq!(
            "in-flight".parse::<OverviewSort>().unwrap(),
            OverviewSort::InFlight
        );
    }
}
