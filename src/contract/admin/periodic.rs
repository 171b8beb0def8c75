//! Periodic jobs: when a schedule ticks, and what is listed about it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::{Error, Result};

/// When a periodic job runs: a cron expression (in UTC or a time zone of
/// yours) or a fixed interval. Given to
/// [`WorkerBuilder::periodic`](crate::worker::WorkerBuilder::periodic).
///
/// Cron expressions are parsed by the [`croner`] crate: five fields (minute,
/// hour, day of month, month, day of week) or six with seconds first, plus
/// `L`, `W` and `#` and names such as `MON` or `JAN`.
///
/// ```
/// use std::time::Duration;
/// use redjob::ops::Schedule;
///
/// let every_5_min = Schedule::cron("*/5 * * * *")?;
/// let each_second = Schedule::cron("* * * * * *")?;
/// let nightly = Schedule::cron("0 3 * * *")?.in_zone(chrono_tz::Europe::Berlin);
/// let hourly = Schedule::every(Duration::from_secs(3600))?;
/// assert_eq!(nightly.to_string(), "cron 0 3 * * * (Europe/Berlin)");
/// assert_eq!(hourly.to_string(), "every 3600s");
///
/// // 2026-01-01T00:00:00Z: the next tick of "every 5 minutes" is 5 minutes on
/// let t = 1_767_225_600_000;
/// assert_eq!(every_5_min.next_after(t), Some(t + 300_000));
/// assert_eq!(each_second.next_after(t + 1), Some(t + 1000));
/// assert!(Schedule::cron("61 * * * *").is_err());
/// // a day no month has: never a tick
/// assert!(Schedule::cron("0 0 30 2 *").is_err());
/// assert!(Schedule::cron("0 0 29 2 *").is_ok());
/// # Ok::<(), redjob::Error>(())
/// ```
#[derive(Clone)]
pub struct Schedule {
    spec: String,
    kind: Kind,
}

/// The next (forward) or previous tick strictly after / before a Unix ms.
type Finder = Arc<dyn Fn(u64, bool) -> Option<u64> + Send + Sync>;

#[derive(Clone)]
enum Kind {
    Every(u64),
    /// The parsed expression, as written, and its finder in its zone.
    Cron(Box<croner::Cron>, String, Finder),
}

impl Schedule {
    /// A cron expression in UTC (seconds field optional). An expression
    /// [`croner`] cannot parse, or one that never ticks from now on (the
    /// 30th of February), gives [`Error::InvalidValue`].
    pub fn cron(expr: &str) -> Result<Schedule> {
        let invalid = |reason: String| Error::InvalidValue {
            what: "cron expression",
            reason: format!("{expr:?}: {reason}"),
        };
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(expr)
            .map_err(|e| invalid(e.to_string()))?;
        let schedule = Schedule::zoned(cron, expr.trim().to_string(), chrono::Utc, None);
        // (a worker would find no tick to wait for, and stop ticking it)
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if schedule.next_after(now).is_none() {
            return Err(invalid("it never ticks".into()));
        }
        Ok(schedule)
    }

    /// The cron expression in `zone` instead of UTC: `0 9 * * *` in
    /// `chrono_tz::Europe::Paris` ticks at 9:00 Paris time, summer and winter.
    /// Takes any [`chrono::TimeZone`] that prints its name (`chrono_tz::Tz`,
    /// `chrono::FixedOffset`, `chrono::Utc`). An interval has no zone: it is
    /// returned as it is.
    pub fn in_zone<Z>(self, zone: Z) -> Schedule
    where
        Z: chrono::TimeZone + fmt::Display + Send + Sync + 'static,
    {
        match &self.kind {
            Kind::Cron(cron, expr, _) => {
                let name = zone.to_string();
                Schedule::zoned((**cron).clone(), expr.clone(), zone, Some(name))
            }
            Kind::Every(_) => self,
        }
    }

    fn zoned<Z>(cron: croner::Cron, expr: String, zone: Z, name: Option<String>) -> Schedule
    where
        Z: chrono::TimeZone + Send + Sync + 'static,
    {
        let c = cron.clone();
        let find = move |ms: u64, forward: bool| {
            let cron = &c;
            // croner searches in whole seconds, leaving out the second it
            // starts in: backwards from a later part of a tick's second it
            // would skip that tick, so it starts at the next whole second
            // (ticks fall on whole seconds)
            let ms = if forward {
                ms
            } else {
                ms.checked_next_multiple_of(1000)?
            };
            let at = zone
                .timestamp_millis_opt(i64::try_from(ms).ok()?)
                .single()?;
            let found = if forward {
                cron.find_next_occurrence(&at, false)
            } else {
                cron.find_previous_occurrence(&at, false)
            };
            u64::try_from(found.ok()?.timestamp_millis()).ok()
        };
        let spec = match name {
            Some(zone) => format!("cron {expr} ({zone})"),
            None => format!("cron {expr}"),
        };
        Schedule {
            spec,
            kind: Kind::Cron(Box::new(cron), expr, Arc::new(find)),
        }
    }

    /// Every `interval` (1 s to [`MAX_DELAY`](crate::worker::MAX_DELAY), whole
    /// milliseconds), at multiples of it since the Unix epoch, so every
    /// process agrees on the ticks: every hour on the hour (UTC).
    pub fn every(interval: Duration) -> Result<Schedule> {
        if interval < Duration::from_secs(1) || interval > crate::contract::queues::MAX_DELAY {
            return Err(Error::InvalidValue {
                what: "periodic interval",
                reason: format!("{interval:?} is not between 1 s and 9999999 s"),
            });
        }
        if !interval.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::InvalidValue {
                what: "periodic interval",
                reason: format!("{interval:?} is not whole milliseconds"),
            });
        }
        let ms = interval.as_millis() as u64;
        let spec = if ms.is_multiple_of(1000) {
            format!("every {}s", ms / 1000)
        } else {
            format!("every {ms}ms")
        };
        Ok(Schedule {
            spec,
            kind: Kind::Every(ms),
        })
    }

    /// The first tick strictly after `unix_ms`; `None` when there is none (a
    /// cron expression that never matches again).
    pub fn next_after(&self, unix_ms: u64) -> Option<u64> {
        match &self.kind {
            Kind::Every(every) => (unix_ms / every + 1).checked_mul(*every),
            Kind::Cron(.., find) => find(unix_ms, true),
        }
    }

    /// The last tick strictly before `unix_ms`, if any.
    pub fn last_before(&self, unix_ms: u64) -> Option<u64> {
        match &self.kind {
            Kind::Every(every) => unix_ms.checked_sub(1).map(|t| t / every * every),
            Kind::Cron(.., find) => find(unix_ms, false),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spec)
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Schedule").field(&self.spec).finish()
    }
}

/// What a worker that starts (or whose backend comes back) does about ticks
/// it missed while no worker ticked the schedule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Missed {
    /// Skip them: the next tick is the first after now. The default, as cron.
    #[default]
    Skip,
    /// Enqueue the last missed tick once (only when an earlier tick of the
    /// schedule was recorded, so a new schedule does not run at deploy).
    RunLast,
}

/// Checks a periodic schedule's name: 1 to 200 bytes, none a control
/// character, not ending in `:paused` or `:next` (on Redis a schedule's
/// pause and next tick are kept beside its last tick, under its name with
/// those endings: a schedule so named would pause, or move, another).
pub(crate) fn schedule_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 200 || name.chars().any(char::is_control) {
        return Err(Error::InvalidValue {
            what: "periodic job name",
            reason: format!("{name:?} must be 1 to 200 characters, none a control"),
        });
    }
    if name.ends_with(":paused") || name.ends_with(":next") {
        return Err(Error::InvalidValue {
            what: "periodic job name",
            reason: format!("{name:?} must not end in \":paused\" or \":next\""),
        });
    }
    Ok(())
}

/// A periodic schedule as listed by [`Admin::schedules`](super::Admin::schedules):
/// what live workers tick, with its last tick and the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The schedule's name (unique per queue).
    pub name: String,
    /// The queue its jobs go to.
    pub queue: String,
    /// The job type.
    pub job: String,
    /// The schedule, as [`Schedule`] prints it (`cron */5 * * * *`, `every 60s`).
    pub schedule: String,
    /// The last tick enqueued, Unix ms (backend time); `None` before the first.
    pub last_ms: Option<u64>,
    /// The next tick, Unix ms; `None` when it never ticks again.
    pub next_ms: Option<u64>,
    /// Live workers that tick it.
    pub workers: usize,
    /// The job each tick enqueues, as its envelope: send it to
    /// [`queue`](Self::queue) at [`priority`](Self::priority) to run one now.
    pub body: Option<String>,
    /// The priority its jobs are sent at.
    pub priority: i8,
    /// The concurrency key its jobs are sent with (send one now with it).
    pub key: Option<crate::contract::keyed::Keyed>,
    /// Paused for every worker ([`Admin::pause_schedule`](super::Admin::pause_schedule)):
    /// when (Unix ms) and by whom; `None` when it runs.
    pub paused: Option<Paused>,
}

/// When and by whom something was paused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Paused {
    /// When, Unix ms (backend time).
    pub at_ms: u64,
    /// Who (`api`, `cli alice`, `dashboard bob`).
    pub by: String,
}

impl Paused {
    /// Reads the stored form, `<ms> <who>`.
    pub(crate) fn parse(v: &str) -> Option<Paused> {
        let (at, by) = v.split_once(' ')?;
        Some(Paused {
            at_ms: at.parse().ok()?,
            by: by.to_string(),
        })
    }
}

/// What [`Backend::tick`](crate::backend::Backend::tick) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ticked {
    /// Enqueued now (backend time, Unix ms).
    Enqueued {
        /// The backend's clock.
        now_ms: u64,
    },
    /// Another worker enqueued it already (or a catch-up found nothing to
    /// catch up).
    Done {
        /// The backend's clock.
        now_ms: u64,
    },
    /// The tick is this far ahead of the backend's clock: try again then.
    Early(Duration),
    /// The schedule is paused: the tick is recorded as done, and nothing
    /// enqueued.
    Paused {
        /// The backend's clock.
        now_ms: u64,
    },
}

/// One tick of a periodic schedule, to enqueue with
/// [`Backend::tick`](crate::backend::Backend::tick).
///
/// ```
/// use redjob::ops::Tick;
///
/// let t = Tick { name: "cleanup", at_ms: 1_767_225_600_000, catch_up: false, next_ms: None };
/// // the same id in every process, sent at the tick
/// assert_eq!(t.id("ops"), t.id("ops"));
/// assert_eq!(t.id("ops").sent_ms(), 1_767_225_600_000);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Tick<'a> {
    /// The schedule's name.
    pub name: &'a str,
    /// The tick, Unix ms (backend time).
    pub at_ms: u64,
    /// Enqueue only when an earlier tick was recorded (a catch-up).
    pub catch_up: bool,
    /// The schedule's tick after this one, recorded with it for listings.
    pub next_ms: Option<u64>,
}

/// A periodic schedule's ticks as its queue records them
/// ([`Admin::ticks`](super::Admin::ticks)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Ticks {
    /// The last tick enqueued (or skipped while paused), Unix ms (backend
    /// time).
    pub last_ms: Option<u64>,
    /// The tick after it, as the worker that enqueued it computed.
    pub next_ms: Option<u64>,
    /// When and by whom the schedule was paused; `None` when it runs.
    pub paused: Option<Paused>,
}

impl Tick<'_> {
    /// The job id of this tick: its time prefix is the tick, its suffix comes
    /// from the queue and the schedule's name, so every process makes the same.
    pub fn id(&self, queue: &str) -> crate::JobId {
        let suffix = crate::id::hashed_suffix(&format!("{queue}/{}", self.name));
        crate::JobId::make(self.at_ms.saturating_mul(1000), &suffix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z.
    const T: u64 = 1_767_225_600_000;

    /// An interval with a part of a millisecond is refused, not cut (1.0005 s
    /// ticked every second); whole milliseconds are kept as given.
    #[test]
    fn an_interval_is_whole_milliseconds() {
        let odd = Schedule::every(Duration::from_micros(1_000_500));
        assert!(
            matches!(odd, Err(Error::InvalidValue { .. })),
            "{:?}",
            odd.map(|s| s.to_string())
        );
        let s = Schedule::every(Duration::from_millis(1_500)).unwrap();
        assert_eq!(s.next_after(0), Some(1_500));
        assert_eq!(s.to_string(), "every 1500ms");
    }

    #[test]
    fn a_cron_tick_is_before_any_instant_within_its_second() {
        let every5 = Schedule::cron("*/5 * * * * *").unwrap();
        let daily = Schedule::cron("0 0 * * *").unwrap();
        let paris = Schedule::cron("0 1 * * *")
            .unwrap()
            .in_zone(chrono::FixedOffset::east_opt(3600).unwrap());
        for s in [&every5, &daily, &paris] {
            // (T is a tick of all three: midnight UTC, 1:00 at UTC+1)
            for at in [T + 1, T + 300, T + 999, T + 1000] {
                assert_eq!(s.last_before(at), Some(T), "{s} before {at}");
            }
            assert!(s.last_before(T).unwrap() < T, "{s}");
            assert!(s.next_after(T + 1).unwrap() > T + 1, "{s}");
            assert_eq!(s.next_after(T - 1), Some(T), "{s}");
            assert_eq!(s.next_after(T - 300), Some(T), "{s}");
        }
        assert_eq!(every5.last_before(T), Some(T - 5000));
        assert_eq!(every5.next_after(T), Some(T + 5000));
        assert_eq!(every5.next_after(T + 300), Some(T + 5000));
    }
}
