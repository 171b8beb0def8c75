//! The settings that limit how a queue's jobs start: how many run at once
//! ([`Concurrency`], per worker and across the fleet) and how many start in
//! a period ([`RateLimit`]). The scripts that lease jobs read their stored
//! forms (fetch.lua), so those forms are part of the layout.

use std::time::Duration;

/// The most a queue's concurrency (per worker or global) or its rate limit's
/// starts per period may be.
pub const MAX_CONCURRENCY: u32 = 1_000_000;

/// The longest period a [`RateLimit`] counts starts over.
pub const MAX_RATE_PERIOD: Duration = Duration::from_secs(86_400);

/// How many of a queue's jobs run at once.
///
/// `per_worker` bounds each worker; `global` bounds the whole fleet, counted
/// by the leases in flight: a job a worker holds (running, or leased ahead of
/// a free slot) takes a place until it is settled or its lease runs out, so a
/// worker that dies frees its places when their leases end. A handler that
/// ignores its [cancellation](crate::JobContext::cancellation) can outlive
/// its lease, and then runs beside the job that took its place.
///
/// ```
/// use redjob::ops::Concurrency;
///
/// assert_eq!(Concurrency::per_worker(2).per_worker, Some(2));
/// assert_eq!(Concurrency::global(10).global, Some(10));
/// let both = Concurrency::per_worker(2).with_global(10);
/// assert_eq!((both.per_worker, both.global), (Some(2), Some(10)));
/// assert_eq!(Concurrency::default(), Concurrency::UNLIMITED);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Concurrency {
    /// The most a worker runs (or holds prefetched) of the queue's jobs at
    /// once; `None`: only the worker's own concurrency limits them.
    pub per_worker: Option<u32>,
    /// The most of the queue's jobs leased at once across every worker;
    /// `None`: no limit across the fleet.
    pub global: Option<u32>,
}

impl Concurrency {
    /// No limit of the queue's own.
    pub const UNLIMITED: Concurrency = Concurrency {
        per_worker: None,
        global: None,
    };

    /// At most `n` at once in each worker.
    pub fn per_worker(n: u32) -> Self {
        Concurrency {
            per_worker: Some(n),
            global: None,
        }
    }

    /// At most `n` at once across every worker.
    pub fn global(n: u32) -> Self {
        Concurrency {
            per_worker: None,
            global: Some(n),
        }
    }

    /// These, with at most `n` at once across every worker.
    pub fn with_global(self, n: u32) -> Self {
        Concurrency {
            global: Some(n),
            ..self
        }
    }

    /// The stored form: `"<per worker>"`, or `"<per worker> <global>"` when a
    /// global limit is set; `0` for none (a release before global limits
    /// reads the first number alone).
    pub(crate) fn encode(&self) -> String {
        let pw = self.per_worker.unwrap_or(0);
        match self.global {
            Some(g) => format!("{pw} {g}"),
            None => pw.to_string(),
        }
    }

    /// From the stored form; `None` for a value the scripts would not read.
    /// Numbers after the second are a later release's, left to it.
    pub(crate) fn decode(v: &str) -> Option<Concurrency> {
        let mut parts = v.split(' ');
        let number = |p: Option<&str>| {
            p.and_then(crate::contract::stored::digits::<u32>)
                .filter(|n| *n <= MAX_CONCURRENCY)
        };
        let pw = number(parts.next())?;
        let global = match parts.next() {
            None => 0,
            some => number(some)?,
        };
        Some(Concurrency {
            per_worker: (pw > 0).then_some(pw),
            global: (global > 0).then_some(global),
        })
    }

    /// Why these cannot be stored, if so.
    pub(crate) fn problem(&self) -> Option<String> {
        for (what, n) in [("per worker", self.per_worker), ("global", self.global)] {
            if let Some(n) = n
                && (n == 0 || n > MAX_CONCURRENCY)
            {
                return Some(format!(
                    "{n}: the limit {what} is 1 to {MAX_CONCURRENCY} (None for no limit)"
                ));
            }
        }
        None
    }
}

/// At most `max` of a queue's jobs start in any window of `period`, across
/// every worker: a sliding window, checked at each start by Redis's clock
/// (or the memory backend's), so no two windows' edges let `2 × max`
/// through. A start is a lease: a worker leases a limited queue's jobs only
/// as it can start them (no prefetch).
///
/// ```
/// use std::time::Duration;
/// use redjob::ops::RateLimit;
///
/// let fifty = RateLimit::per_second(50);
/// assert_eq!((fifty.max, fifty.period), (50, Duration::from_secs(1)));
/// assert_eq!(RateLimit::per_minute(100).period, Duration::from_secs(60));
/// assert!(!RateLimit::NONE.is_limited());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimit {
    /// The most starts in a window; `0`: no limit.
    pub max: u32,
    /// The window's length: 1 ms to [`MAX_RATE_PERIOD`], whole milliseconds.
    pub period: Duration,
}

impl RateLimit {
    /// No rate limit (stored, it goes over a worker's builder value).
    pub const NONE: RateLimit = RateLimit {
        max: 0,
        period: Duration::ZERO,
    };

    /// At most `max` starts in any window of `period`.
    pub fn new(max: u32, period: Duration) -> Self {
        RateLimit { max, period }
    }

    /// At most `max` starts in any second.
    pub fn per_second(max: u32) -> Self {
        Self::new(max, Duration::from_secs(1))
    }

    /// At most `max` starts in any minute.
    pub fn per_minute(max: u32) -> Self {
        Self::new(max, Duration::from_secs(60))
    }

    /// At most `max` starts in any hour.
    pub fn per_hour(max: u32) -> Self {
        Self::new(max, Duration::from_secs(3600))
    }

    /// Whether it limits anything.
    pub fn is_limited(&self) -> bool {
        self.max > 0
    }

    /// The stored form: `"<max> <period ms>"`, `"0 0"` for none.
    pub(crate) fn encode(&self) -> String {
        if !self.is_limited() {
            return "0 0".into();
        }
        format!("{} {}", self.max, self.period.as_millis())
    }

    /// From the stored form; `None` for a value the scripts would not read.
    pub(crate) fn decode(v: &str) -> Option<RateLimit> {
        let (max, ms) = v.split_once(' ')?;
        let (max, ms) = (
            crate::contract::stored::digits::<u32>(max)?,
            crate::contract::stored::digits::<u64>(ms)?,
        );
        if max == 0 {
            return Some(RateLimit::NONE);
        }
        let r = RateLimit::new(max, Duration::from_millis(ms));
        r.problem().is_none().then_some(r)
    }

    /// Why it cannot be stored, if so.
    pub(crate) fn problem(&self) -> Option<String> {
        if !self.is_limited() {
            return None;
        }
        if self.max > MAX_CONCURRENCY {
            return Some(format!(
                "{} starts: at most {MAX_CONCURRENCY} per period",
                self.max
            ));
        }
        if self.period < Duration::from_millis(1) || self.period > MAX_RATE_PERIOD {
            return Some(format!("a period of {:?}: it is 1 ms to 24 h", self.period));
        }
        if !self.period.subsec_nanos().is_multiple_of(1_000_000) {
            return Some(format!(
                "a period of {:?}: it is whole milliseconds",
                self.period
            ));
        }
        None
    }
}

impl std::str::FromStr for RateLimit {
    type Err = crate::Error;

    /// As an operator types one (the CLI, the dashboard): starts per period,
    /// `50/1s`, `100/1m`, `1000/1h` (the period as
    /// [`parse_duration`](super::parse_duration) reads it), or `none`.
    ///
    /// ```
    /// use redjob::ops::RateLimit;
    ///
    /// let r: RateLimit = "100/1m".parse()?;
    /// assert_eq!(r, RateLimit::per_minute(100));
    /// assert_eq!("none".parse::<RateLimit>()?, RateLimit::NONE);
    /// assert!("100".parse::<RateLimit>().is_err());
    /// # Ok::<(), redjob::Error>(())
    /// ```
    fn from_str(s: &str) -> crate::Result<RateLimit> {
        let bad = |reason: String| crate::Error::InvalidValue {
            what: "rate limit",
            reason,
        };
        if s == "none" {
            return Ok(RateLimit::NONE);
        }
        let (n, period) = s.split_once('/').ok_or_else(|| {
            bad(format!(
                "{s:?}: give starts per period (50/1s, 100/1m), or none"
            ))
        })?;
        let n: u32 = n.parse().map_err(|_| {
            bad(format!(
                "{s:?}: give starts per period (50/1s, 100/1m), or none"
            ))
        })?;
        let period = super::parse_duration(period)?;
        if n == 0 || n > MAX_CONCURRENCY {
            return Err(bad(format!(
                "{s:?}: give 1 to {MAX_CONCURRENCY} starts per period"
            )));
        }
        if period.is_zero() || period > MAX_RATE_PERIOD {
            return Err(bad(format!("{s:?}: give a period from 1ms to 24h")));
        }
        Ok(RateLimit::new(n, period))
    }
}

impl std::fmt::Display for RateLimit {
    /// `50/1s`, `100/1m`, or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.is_limited() {
            return f.write_str("none");
        }
        write!(f, "{}/{}", self.max, super::duration_text(self.period))
    }
}

/// How much of a queue's limits across the fleet is in use now
/// ([`Admin::limit_usage`](crate::ops::Admin::limit_usage)), as the next
/// fetch would count it.
///
/// ```
/// use redjob::ops::{Admin, Concurrency, QueueSettings};
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::queue::Queues;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("mail", Default::default()).await?;
/// q.set_settings("mail", &QueueSettings::concurrency(Concurrency::global(10))).await?;
/// let usage = q.limit_usage("mail").await?;
/// assert_eq!((usage.concurrency.global, usage.in_flight), (Some(10), 0));
/// assert_eq!(usage.held_until_ms, None);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitUsage {
    /// The concurrency in force.
    pub concurrency: Concurrency,
    /// The rate limit in force.
    pub rate_limit: RateLimit,
    /// Leases in flight, as the global concurrency counts them (a lease until
    /// the second it ends in has passed).
    pub in_flight: u64,
    /// Starts in the rate limit's window up to now (0 without a rate limit).
    pub started_in_window: u64,
    /// When a full limit lets the next job start (Unix ms); `None` when no
    /// limit is full.
    pub held_until_ms: Option<u64>,
    /// Until when a handler's throttle holds the queue (Unix ms); `None` when
    /// none does.
    pub throttled_until_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_survive_their_stored_form_and_odd_ones_are_refused() {
        for c in [
            Concurrency::UNLIMITED,
            Concurrency::per_worker(3),
            Concurrency::global(7),
            Concurrency::per_worker(1).with_global(MAX_CONCURRENCY),
        ] {
            assert_eq!(Concurrency::decode(&c.encode()), Some(c), "{c:?}");
        }
        // a release before global limits stored the first number alone
        assert_eq!(Concurrency::per_worker(4).encode(), "4");
        assert_eq!(
            Concurrency::decode("4 5 6"),
            Some(Concurrency::per_worker(4).with_global(5))
        );
        for odd in ["", "x", "-1", "1 x", "1 -2", "1000001", "1 1000001", " 1"] {
            assert_eq!(Concurrency::decode(odd), None, "{odd:?}");
        }
        assert!(Concurrency::global(0).problem().is_some());
        assert!(
            Concurrency::per_worker(MAX_CONCURRENCY + 1)
                .problem()
                .is_some()
        );
        for r in [
            RateLimit::NONE,
            RateLimit::per_second(50),
            RateLimit::new(1, Duration::from_millis(1)),
            RateLimit::new(MAX_CONCURRENCY, MAX_RATE_PERIOD),
        ] {
            assert_eq!(RateLimit::decode(&r.encode()), Some(r), "{r:?}");
        }
        for odd in [
            "",
            "5",
            "5 x",
            "x 5",
            "5 0",
            "5 86400001",
            "1000001 1000",
            "-1 5",
        ] {
            assert_eq!(RateLimit::decode(odd), None, "{odd:?}");
        }
        assert_eq!(RateLimit::decode("0 123"), Some(RateLimit::NONE));
        assert!(RateLimit::new(5, Duration::ZERO).problem().is_some());
        assert!(
            RateLimit::new(5, Duration::from_secs(86_401))
                .problem()
                .is_some()
        );
        // a part of a millisecond is refused, not cut (1.5 ms was stored as 1)
        assert!(
            RateLimit::new(1, Duration::from_micros(1500))
                .problem()
                .is_some()
        );
        assert!(
            RateLimit::new(1, Duration::from_millis(2))
                .problem()
                .is_none()
        );
        assert_eq!(RateLimit::per_minute(100).to_string(), "100/1m");
        assert_eq!(RateLimit::NONE.to_string(), "none");
    }
}
