//! The memory backend's controllable clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A clock that tests control: it runs with tokio's clock (so `tokio::time::pause()`
/// and `tokio::time::advance` move it too) plus whatever [`Clock::advance`] added.
///
/// It stops at 10^19 µs after 1970 (about the year 318,857), however far it is
/// advanced, so that every time the backend computes from it fits.
///
/// ```
/// use std::time::Duration;
/// use redjob::backend::memory::Clock;
///
/// let clock = Clock::new();
/// let before = clock.now_ms();
/// clock.advance(Duration::from_secs(3600));
/// assert!(clock.now_ms() >= before + 3_600_000);
/// ```
#[derive(Clone)]
pub struct Clock {
    inner: Arc<Inner>,
}

/// Where the clock stops, in Unix µs: scores in thousandths of a millisecond of
/// this time plus RSMQ's longest delay still fit in a `u64`.
const END_US: u64 = 10_000_000_000_000_000_000;

/// A duration in whole microseconds, at most `u64::MAX`.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[derive(Debug)]
struct Inner {
    base_us: u64,
    /// Where tokio's clock was at the start; `None` for a clock that stands still.
    start: Option<tokio::time::Instant>,
    offset_us: AtomicU64,
    advanced: watch::Sender<u64>,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clock")
            .field("now", &crate::contract::time::UnixMs(self.now_ms()))
            .field("frozen", &self.inner.start.is_none())
            .finish()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock that starts at the system's current time.
    pub fn new() -> Self {
        Self::starting_at(SystemTime::now())
    }

    /// A clock that starts at `t`.
    pub fn starting_at(t: SystemTime) -> Self {
        Self::make(t, Some(tokio::time::Instant::now()))
    }

    /// A clock that stands at `t` and moves only with [`advance`](Self::advance):
    /// neither real time nor tokio's clock moves it, so every call between two
    /// advances happens at the same microsecond.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use redjob::backend::memory::Clock;
    ///
    /// let clock = Clock::frozen_at(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    /// assert_eq!(clock.now_ms(), 1_800_000_000_000);
    /// clock.advance_exact(Duration::from_micros(1500));
    /// assert_eq!(clock.now_us(), 1_800_000_000_001_500);
    /// ```
    pub fn frozen_at(t: SystemTime) -> Self {
        Self::make(t, None)
    }

    fn make(t: SystemTime, start: Option<tokio::time::Instant>) -> Self {
        Clock {
            inner: Arc::new(Inner {
                base_us: micros(t.duration_since(UNIX_EPOCH).unwrap_or_default()),
                start,
                offset_us: AtomicU64::new(0),
                advanced: watch::Sender::new(0),
            }),
        }
    }

    /// Unix microseconds now.
    pub fn now_us(&self) -> u64 {
        let i = &self.inner;
        let run = i.start.map_or(0, |s| micros(s.elapsed()));
        i.base_us
            .saturating_add(run)
            .saturating_add(i.offset_us.load(Ordering::SeqCst))
            .min(END_US)
    }

    /// Unix milliseconds now.
    pub fn now_ms(&self) -> u64 {
        self.now_us() / 1000
    }

    /// The time now.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_micros(self.now_us())
    }

    /// Moves the clock forward by `d`, then on to the next whole millisecond if
    /// it stops inside one, and wakes workers waiting on it.
    ///
    /// A job enqueued with a delay of `d` is due at its send's microsecond
    /// plus `d` (as on Redis; its score is rounded up to the next whole
    /// millisecond), so it is due after `advance(d)`, which moves the clock by
    /// at least `d`. Use [`advance_exact`](Self::advance_exact) to place the
    /// clock on a microsecond.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use redjob::backend::memory::Clock;
    ///
    /// let clock = Clock::frozen_at(UNIX_EPOCH + Duration::from_micros(1_800_000_000_000_250));
    /// clock.advance(Duration::from_secs(10));
    /// assert_eq!(clock.now_us(), 1_800_000_010_001_000);
    /// ```
    pub fn advance(&self, d: Duration) {
        self.add(micros(d));
        let into_ms = self.now_us() % 1000;
        if into_ms != 0 {
            self.add(1000 - into_ms);
        }
        self.inner.advanced.send_modify(|n| *n += 1);
    }

    /// Moves the clock forward by exactly `d` and wakes workers waiting on it.
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use redjob::backend::memory::Clock;
    ///
    /// let clock = Clock::frozen_at(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    /// clock.advance_exact(Duration::from_micros(1500));
    /// assert_eq!(clock.now_us(), 1_800_000_000_001_500);
    /// ```
    pub fn advance_exact(&self, d: Duration) {
        self.add(micros(d));
        self.inner.advanced.send_modify(|n| *n += 1);
    }

    fn add(&self, us: u64) {
        let _ = self
            .inner
            .offset_us
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                Some(o.saturating_add(us))
            });
    }

    /// Whether it stands still (see [`frozen_at`](Self::frozen_at)).
    pub(crate) fn is_frozen(&self) -> bool {
        self.inner.start.is_none()
    }

    /// Wakes what waits for the clock to move (a blocked topic read returns),
    /// without moving it.
    pub(crate) fn nudge(&self) {
        self.inner.advanced.send_modify(|n| *n += 1);
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.advanced.subscribe()
    }
}
