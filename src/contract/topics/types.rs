//! Event ids, start positions, options and what inspection returns.

use std::time::{Duration, SystemTime};

use crate::{Error, Result};

/// An event's id in its topic: the Redis stream id `<ms>-<seq>`, the Unix time
/// in milliseconds it was published at (Redis's clock) and a sequence number
/// within that millisecond. Ids grow with every publish; their order is the
/// topic's order.
///
/// ```
/// use redjob::topic::EventId;
///
/// let id: EventId = "1700000000000-3".parse()?;
/// assert_eq!(id.ms(), 1_700_000_000_000);
/// assert_eq!(id.seq(), 3);
/// assert_eq!(id.to_string(), "1700000000000-3");
/// assert!(id < "1700000000001-0".parse()?);
/// assert!("17-x".parse::<EventId>().is_err());
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EventId {
    ms: u64,
    seq: u64,
}

impl EventId {
    /// `0-0`: before every event.
    pub const ZERO: EventId = EventId { ms: 0, seq: 0 };

    /// The id `<ms>-<seq>`.
    pub const fn new(ms: u64, seq: u64) -> Self {
        EventId { ms, seq }
    }

    /// Unix milliseconds of the publish.
    pub fn ms(self) -> u64 {
        self.ms
    }

    /// The sequence number within its millisecond.
    pub fn seq(self) -> u64 {
        self.seq
    }

    /// When the event was published (Redis's clock).
    pub fn time(self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.ms)
    }

    /// The id just after this one (the first a read after it can take).
    ///
    /// ```
    /// use redjob::topic::EventId;
    /// assert_eq!(EventId::new(5, 1).after(), EventId::new(5, 2));
    /// ```
    pub fn after(self) -> EventId {
        match self.seq.checked_add(1) {
            Some(seq) => EventId::new(self.ms, seq),
            None => EventId::new(self.ms.saturating_add(1), 0),
        }
    }

    /// The id just before this one; `None` for `0-0`.
    pub(crate) fn before(self) -> Option<EventId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(EventId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(EventId::new(ms, seq - 1)),
        }
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

impl std::str::FromStr for EventId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidValue {
            what: "event id",
            reason: format!("{s:?} is not <ms>-<seq> (two unsigned integers)"),
        };
        let (ms, seq) = s.split_once('-').ok_or_else(bad)?;
        let num = |p: &str| {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            p.parse::<u64>().map_err(|_| bad())
        };
        Ok(EventId::new(num(ms)?, num(seq)?))
    }
}

/// Where a subscriber starts reading, or where a replay rewinds it to.
///
/// ```
/// use redjob::topic::{EventId, Start};
///
/// let s = Start::At(EventId::new(1_700_000_000_000, 0));
/// assert_ne!(s, Start::Beginning);
/// assert_eq!(Start::default(), Start::End);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Start {
    /// The oldest event the topic still holds.
    Beginning,
    /// Only events published from now on (the default for a new subscriber, as
    /// Kafka's `auto.offset.reset = latest`).
    #[default]
    End,
    /// This event and every later one.
    At(EventId),
    /// The first event published at or after this time, and every later one.
    Time(SystemTime),
}

impl Start {
    /// The offset (last id taken) that makes the next read start here; `None`
    /// for [`Start::End`] (the topic's last id, known only to the backend).
    pub(crate) fn offset(self) -> Option<EventId> {
        let first = match self {
            Start::Beginning => return Some(EventId::ZERO),
            Start::End => return None,
            Start::At(id) => id,
            Start::Time(t) => {
                let ms = t
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0);
                EventId::new(ms, 0)
            }
        };
        Some(first.before().unwrap_or(EventId::ZERO))
    }
}

/// What a publish does when the topic holds its event type's `max_len` events.
///
/// ```
/// use redjob::topic::WhenFull;
/// assert_eq!(WhenFull::default(), WhenFull::TrimOldest);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhenFull {
    /// Drop the oldest events, subscribers or not (Kafka's retention). The
    /// default. Trimming is approximate, by whole stream nodes, as Redis's
    /// `MAXLEN ~`: a topic may hold up to about a hundred events more.
    #[default]
    TrimOldest,
    /// Refuse the publish with [`Error::TopicFull`](crate::Error::TopicFull).
    Refuse,
}

/// An event type's topic, retention and handler limits, from `#[event(...)]`.
///
/// ```
/// use std::time::Duration;
/// use redjob::topic::{EventOptions, WhenFull};
///
/// let o = EventOptions::DEFAULT;
/// assert_eq!(o.topic, "default");
/// assert_eq!(o.max_len, Some(1_000_000));
/// assert_eq!(o.max_age, None);
/// assert_eq!(o.when_full, WhenFull::TrimOldest);
/// assert_eq!(o.max_attempts, 25);
/// assert_eq!(o.timeout, Duration::from_secs(1800));
/// assert_eq!(o.backoff, Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventOptions {
    /// The topic it is published to (`topic = "orders"`). Defaults to `default`.
    pub topic: &'static str,
    /// The most events the topic keeps when this type is published
    /// (`max_len = 100000`); `None` (`unbounded`) keeps all, and so does a
    /// limit no stream reaches (over `i64::MAX`, past what Redis counts in).
    /// Defaults to 1,000,000: every event is in Redis's memory.
    pub max_len: Option<u64>,
    /// The oldest event the topic keeps when this type is published
    /// (`max_age = "7d"`). Defaults to `None`: no age limit.
    pub max_age: Option<Duration>,
    /// What a publish does over `max_len` (`when_full = "refuse"`). Defaults to
    /// trimming the oldest.
    pub when_full: WhenFull,
    /// Deliveries to one subscriber before the event goes to its dead letters
    /// (`max_attempts = N`), 1 to [`MAX_ATTEMPTS`](crate::job::MAX_ATTEMPTS).
    /// Defaults to 25.
    pub max_attempts: u32,
    /// Longest a handler may run (`timeout = "30s"`). Defaults to 30 minutes.
    pub timeout: Duration,
    /// Base of the exponential backoff between attempts (`backoff = "1s"`),
    /// capped at the worker's lease. Defaults to 1 s.
    pub backoff: Duration,
}

impl EventOptions {
    /// The defaults listed on each field.
    pub const DEFAULT: EventOptions = EventOptions {
        topic: "default",
        max_len: Some(1_000_000),
        max_age: None,
        when_full: WhenFull::TrimOldest,
        max_attempts: 25,
        timeout: Duration::from_secs(30 * 60),
        backoff: Duration::from_secs(1),
    };
}

/// A topic as inspection sees it.
///
/// ```
/// use redjob::topic::TopicInfo;
/// let t = TopicInfo::default();
/// assert_eq!(t.length, 0);
/// assert!(t.first.is_none());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicInfo {
    /// Events it holds.
    pub length: u64,
    /// Events ever published to it (including trimmed ones).
    pub published: u64,
    /// Its oldest event.
    pub first: Option<EventId>,
    /// Its newest event.
    pub last: Option<EventId>,
    /// Bytes of memory its events take: an estimate (Redis's `MEMORY USAGE`
    /// with its default sample of 5 of the stream's nodes, so that a call does
    /// not grow with the topic; the memory backend's own estimate).
    pub memory: u64,
    /// Its subscribers, by name.
    pub subscribers: Vec<SubscriberInfo>,
}

/// The most events after a subscriber's offset that inspection counts when
/// Redis does not know the subscriber's lag (see [`SubscriberInfo::lag_exact`]):
/// a subscriber further behind has a lag of "more than 100".
pub const LAG_COUNTED: u64 = 100;

/// One subscriber (consumer group) of a topic.
///
/// ```
/// use redjob::topic::SubscriberInfo;
/// let s = SubscriberInfo::default();
/// assert_eq!((s.lag, s.lag_exact), (0, true));
/// assert_eq!(s.lag_text(), "0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriberInfo {
    /// Its name.
    pub name: String,
    /// The last event it took (its offset); `0-0` before the first.
    pub offset: EventId,
    /// Events taken and not yet acknowledged (running, waiting for a retry, or
    /// held by a consumer that died).
    pub pending: u64,
    /// Events in the topic after its offset: not taken yet. When
    /// [`lag_exact`](Self::lag_exact) is false, more than this many.
    pub lag: u64,
    /// Whether [`lag`](Self::lag) is the exact count. Redis keeps each
    /// subscriber's lag, except after another client deleted events ahead of
    /// it (`XDEL`) or moved it (`XGROUP SETID` without `ENTRIESREAD`), and after
    /// a subscribe or rewind to an id or a time more than [`LAG_COUNTED`]
    /// events before the end, until the subscriber has read up to the end. Its
    /// lag is then counted, up to [`LAG_COUNTED`] events so that no call reads
    /// the whole topic: a subscriber further behind has `lag` 100 and
    /// `lag_exact` false, "more than 100" ([`lag_text`](Self::lag_text)).
    /// Always true on the memory backend.
    pub lag_exact: bool,
    /// Processes (consumers) that have read for it.
    pub consumers: u64,
    /// Events in its dead letters.
    pub dead: u64,
}

impl Default for SubscriberInfo {
    fn default() -> Self {
        SubscriberInfo {
            name: String::new(),
            offset: EventId::ZERO,
            pending: 0,
            lag: 0,
            lag_exact: true,
            consumers: 0,
            dead: 0,
        }
    }
}

impl SubscriberInfo {
    /// The lag as people read it: `"42"`, or `"more than 100"` when it is not
    /// exact (see [`lag_exact`](Self::lag_exact)).
    ///
    /// ```
    /// use redjob::topic::SubscriberInfo;
    /// let mut s = SubscriberInfo::default();
    /// s.lag = 100;
    /// s.lag_exact = false;
    /// assert_eq!(s.lag_text(), "more than 100");
    /// ```
    pub fn lag_text(&self) -> String {
        if self.lag_exact {
            self.lag.to_string()
        } else {
            format!("more than {}", self.lag)
        }
    }
}

/// Which of a subscriber's dead letters a requeue or delete takes.
///
/// ```
/// use redjob::topic::{DeadEvents, EventId};
///
/// let upto: EventId = "1700000000000-3".parse().unwrap();
/// assert!(DeadEvents::UpTo(upto).takes(&"1700000000000-2".parse().unwrap()));
/// assert!(!DeadEvents::UpTo(upto).takes(&"1700000000001-0".parse().unwrap()));
/// assert!(DeadEvents::All.takes(&upto));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadEvents<'a> {
    /// Those with these [`dead_id`](DeadEvent::dead_id)s.
    Ids(&'a [EventId]),
    /// All of them: those there when the call starts.
    All,
    /// Those whose [`dead_id`](DeadEvent::dead_id) is at most this one: the
    /// newest a count saw, so that an action confirmed after the count takes
    /// the letters counted and none that died since.
    UpTo(EventId),
}

impl DeadEvents<'_> {
    /// Whether it takes the letter `dead_id` (any, for `All`).
    pub fn takes(&self, dead_id: &EventId) -> bool {
        match self {
            DeadEvents::Ids(ids) => ids.contains(dead_id),
            DeadEvents::All => true,
            DeadEvents::UpTo(upto) => dead_id <= upto,
        }
    }
}

/// A subscriber's dead letters counted before a bulk action is confirmed
/// ([`Client::count_dead_events`](crate::Client::count_dead_events)).
///
/// The count is read after the newest letter's id: a letter that died in
/// between is counted but not taken by an action up to that id, so the count
/// may say more than the action takes, never less.
///
/// ```
/// # use redjob::topic::Start;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> redjob::Result<()> {
/// let client = redjob::Client::memory(Default::default());
/// client.subscribe("clicks", "stats", Start::End).await?;
/// let c = client.count_dead_events("clicks", "stats").await?;
/// assert!(c.upto.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadEventCount {
    /// How many there are.
    pub count: u64,
    /// The newest's [`dead_id`](DeadEvent::dead_id); `None` when there are none.
    pub upto: Option<EventId>,
}

/// An event a subscriber gave up on, with why.
///
/// ```
/// use redjob::topic::DeadEvent;
/// let d = DeadEvent::default();
/// assert!(d.error.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadEvent {
    /// The dead letter's own id, to requeue or delete it (see
    /// [`Client::requeue_dead_events`](crate::Client::requeue_dead_events)).
    pub dead_id: EventId,
    /// Its id in the topic.
    pub id: EventId,
    /// Its `type` field, as stored (empty when it had none).
    pub event_type: String,
    /// Its `data` field, as stored.
    pub data: String,
    /// Why it was given up.
    pub error: String,
    /// How often it was delivered to the subscriber.
    pub deliveries: u32,
    /// When (Unix ms).
    pub at_ms: u64,
    /// Its attempts, oldest first (the last
    /// [`MAX_RECORDS`](crate::inspect::MAX_RECORDS)): each run's times,
    /// outcome, error and worker, and a delivery whose consumer died as
    /// `lease_lost` (recorded by the claim that took it over).
    pub runs: Vec<crate::contract::attempts::Attempt>,
}

/// Checks a topic or subscriber name: 1 to 160 of `A-Z a-z 0-9 _ -`.
pub(crate) fn name(what: &'static str, name: &str) -> Result<()> {
    let ok = (1..=160).contains(&name.len())
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidValue {
            what,
            reason: format!("{name:?}: use 1 to 160 characters of A-Z, a-z, 0-9, _ and -"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_start_just_before_the_first_event_wanted() {
        assert_eq!(Start::Beginning.offset(), Some(EventId::ZERO));
        assert_eq!(Start::End.offset(), None);
        assert_eq!(
            Start::At(EventId::new(5, 2)).offset(),
            Some(EventId::new(5, 1))
        );
        assert_eq!(
            Start::At(EventId::new(5, 0)).offset(),
            Some(EventId::new(4, u64::MAX))
        );
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(7);
        assert_eq!(Start::Time(t).offset(), Some(EventId::new(6, u64::MAX)));
        assert_eq!(Start::At(EventId::ZERO).offset(), Some(EventId::ZERO));
    }

    #[test]
    fn names_are_checked() {
        assert!(name("topic name", "orders-v2_x").is_ok());
        for bad in ["", "a b", "a:b", "{x}", &"x".repeat(161)] {
            assert!(name("topic name", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ids_parse_strictly() {
        for bad in [
            "",
            "1",
            "1-",
            "-1",
            "1-2-3",
            "a-1",
            "1-+2",
            "99999999999999999999-0",
        ] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?}");
        }
    }
}
