//! What [`Admin::schedules`](super::Admin::schedules) lists: the schedules
//! live workers' beats name, with the ticks their queues record, and the next
//! tick of the schedule those workers run.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Admin, Schedule, ScheduleInfo, Ticks, WorkerInfo};
use crate::Result;

/// A schedule as the live beats name it, with the latest beat that does.
struct Beaten {
    /// What the listing says of it, but its last and next ticks.
    info: ScheduleInfo,
    /// The next ticks its beats carry (a worker's, until its first tick).
    beat_next: Vec<u64>,
    /// The latest beat that names it, Unix ms (backend time): the listing's
    /// "now", a heartbeat old at most.
    beat_ms: u64,
}

/// See [`Admin::schedules`](super::Admin::schedules): the schedules of the
/// beats, completed with each queue's recorded ticks (read together).
pub(super) async fn schedules<A: Admin + ?Sized>(admin: &A) -> Result<Vec<ScheduleInfo>> {
    let beaten = from_beats(admin.workers().await?);
    // the schedules by queue (they come sorted by queue, then name), each
    // queue's ticks asked for together: one round trip on Redis
    let mut asked: Vec<(&str, Vec<&str>)> = Vec::new();
    for b in &beaten {
        match asked.last_mut() {
            Some((queue, names)) if *queue == b.info.queue => names.push(&b.info.name),
            _ => asked.push((&b.info.queue, vec![&b.info.name])),
        }
    }
    let ticks = admin.ticks_of(&asked).await?;
    if ticks.iter().map(Vec::len).sum::<usize>() != beaten.len() {
        return Err(crate::Error::Protocol(format!(
            "the ticks of {} schedules for {}",
            ticks.iter().map(Vec::len).sum::<usize>(),
            beaten.len()
        )));
    }
    Ok(beaten
        .iter()
        .zip(ticks.into_iter().flatten())
        .map(|(b, t)| recorded(b, t))
        .collect())
}

/// The schedules `workers` beat for, by queue and name, each with the
/// number of workers that tick it and the next ticks their beats carry.
fn from_beats(workers: Vec<WorkerInfo>) -> Vec<Beaten> {
    let mut by_key: BTreeMap<(String, String), Beaten> = BTreeMap::new();
    for w in workers {
        for s in w.schedules {
            let e = by_key
                .entry((s.queue.clone(), s.name.clone()))
                .or_insert_with(|| Beaten {
                    info: ScheduleInfo {
                        name: s.name,
                        queue: s.queue,
                        job: s.job,
                        schedule: s.schedule,
                        last_ms: None,
                        next_ms: None,
                        workers: 0,
                        body: s.body,
                        priority: s.priority,
                        key: s.key,
                        paused: None,
                    },
                    beat_next: Vec::new(),
                    beat_ms: 0,
                });
            e.info.workers += 1;
            e.beat_ms = e.beat_ms.max(w.last_beat_ms);
            e.beat_next.extend(s.next_ms);
        }
    }
    by_key.into_values().collect()
}

/// `b`'s listing with what its queue records, `t`: its last tick, its pause,
/// and its next tick (see [`next_tick`]).
fn recorded(b: &Beaten, t: Ticks) -> ScheduleInfo {
    // a beat's next tick stands until that tick (or a later one) is recorded:
    // a beat sent before its worker's first tick may be read after it
    let beat = (b.beat_next.iter())
        .filter(|&&n| t.last_ms.is_none_or(|last| n > last))
        .min()
        .copied();
    let stored = t.last_ms.and(t.next_ms);
    ScheduleInfo {
        last_ms: t.last_ms,
        paused: t.paused,
        next_ms: next_tick(beat, stored, t.last_ms, &b.info.schedule, b.beat_ms),
        ..b.info.clone()
    }
}

/// The next tick of the schedule the live workers run: `beat`, the earliest
/// a beat carries that is not recorded yet (a worker carries it until its
/// first tick, computed from its own schedule), else the stored one (recorded with the last tick, `last`). A stored
/// one before `now_ms`, missed in a downtime, or one the schedule the workers
/// print would not have recorded after `last` (a schedule changed between
/// deploys, while a new worker's beat carries no next tick yet), gives way
/// to the next after `now_ms` of that schedule, when its print reads back
/// (see [`printed`]).
fn next_tick(
    beat: Option<u64>,
    stored: Option<u64>,
    last: Option<u64>,
    schedule: &str,
    now_ms: u64,
) -> Option<u64> {
    if beat.is_some() {
        return beat;
    }
    let stored = stored?;
    let current = printed(schedule);
    let its_own = match (&current, last) {
        (Some(s), Some(last)) => s.next_after(last) == Some(stored),
        _ => true,
    };
    if stored >= now_ms && its_own {
        return Some(stored);
    }
    match current {
        Some(s) => s.next_after(now_ms),
        None => Some(stored),
    }
}

/// The [`Schedule`] that prints as `spec` (`every 60s`, `every 1500ms`,
/// `cron 0 3 * * *`, `cron 0 3 * * * (+01:00)`); `None` for a cron
/// expression in a named time zone (`Europe/Berlin`: the zone database is
/// not linked into redjob) or anything else.
fn printed(spec: &str) -> Option<Schedule> {
    if let Some(every) = spec.strip_prefix("every ") {
        let ms = match every.strip_suffix("ms") {
            Some(ms) => ms.parse().ok()?,
            None => every
                .strip_suffix('s')?
                .parse::<u64>()
                .ok()?
                .checked_mul(1000)?,
        };
        return Schedule::every(Duration::from_millis(ms)).ok();
    }
    let cron = spec.strip_prefix("cron ")?;
    let Some((expr, zone)) = cron.strip_suffix(')').and_then(|c| c.rsplit_once(" (")) else {
        return Schedule::cron(cron).ok();
    };
    let schedule = Schedule::cron(expr).ok()?;
    if zone == "UTC" {
        return Some(schedule.in_zone(chrono::Utc));
    }
    let offset: chrono::FixedOffset = zone.parse().ok()?;
    Some(schedule.in_zone(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z.
    const T: u64 = 1_767_225_600_000;

    /// Each schedule that prints in a form read back gives the same ticks
    /// read back; a named zone, or no schedule at all, reads as none.
    #[test]
    fn a_schedule_reads_back_from_its_print_but_in_a_named_zone() {
        let east = chrono::FixedOffset::east_opt(3600).unwrap();
        let all = [
            Schedule::every(Duration::from_secs(3600)).unwrap(),
            Schedule::every(Duration::from_millis(1500)).unwrap(),
            Schedule::cron("0 3 * * *").unwrap(),
            Schedule::cron("*/5 * * * * *").unwrap(),
            Schedule::cron("0 9 * * MON").unwrap().in_zone(east),
            Schedule::cron("0 9 * * *").unwrap().in_zone(chrono::Utc),
        ];
        for s in all {
            let back = printed(&s.to_string()).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(back.to_string(), s.to_string());
            assert_eq!(back.next_after(T + 1), s.next_after(T + 1), "{s}");
        }
        for spec in [
            "cron 0 9 * * * (Europe/Berlin)",
            "every 0s",
            "every",
            "cron 61 * * * *",
            "",
        ] {
            assert!(printed(spec).is_none(), "{spec:?}");
        }
    }

    /// A beat's next tick goes first; the stored one only when no beat
    /// carries one, and then only when it is still to come (else the
    /// schedule's next after the latest beat, if its print reads back).
    #[test]
    fn the_next_tick_is_the_beats_else_the_stored_one_still_to_come() {
        let hourly = "every 3600s";
        let (past, now, later) = (T - 3_600_000, T + 60_000, T + 3_600_000);
        let hour = 3_600_000;
        let last = |next: u64| Some(next - hour);
        assert_eq!(
            next_tick(Some(later), Some(past), last(past), hourly, now),
            Some(later)
        );
        assert_eq!(
            next_tick(None, Some(later), last(later), hourly, now),
            Some(later)
        );
        assert_eq!(
            next_tick(None, Some(past), last(past), hourly, now),
            Some(later)
        );
        assert_eq!(next_tick(None, None, None, hourly, now), None);
        let berlin = "cron 0 3 * * * (Europe/Berlin)";
        assert_eq!(
            next_tick(None, Some(past), last(past), berlin, now),
            Some(past)
        );
    }

    /// A schedule changed between deploys (every second, then daily at 3):
    /// while the new worker's beat carries no next tick yet (a beat sent
    /// before its first next was computed), the next tick the old schedule
    /// recorded, still to come, is not the new schedule's: the listing gives
    /// the new one's. The old code gave the old one's (a flaky conformance
    /// test on a loaded Cluster: a listing within a second of the old
    /// schedule's last tick).
    #[test]
    fn a_stored_next_tick_of_a_schedule_since_changed_gives_way() {
        let daily = "cron 0 3 * * *";
        let (last, now) = (T + 7_000, T + 7_500);
        assert_eq!(
            next_tick(None, Some(last + 1000), Some(last), daily, now),
            Schedule::cron("0 3 * * *").unwrap().next_after(now)
        );
        // the same schedule's own stored next stands
        assert_eq!(
            next_tick(None, Some(last + 1000), Some(last), "every 1s", now),
            Some(last + 1000)
        );
    }

    /// A beat read after its worker's first tick still carries that tick as
    /// next: once a tick as late is recorded, the recorded next one stands.
    #[test]
    fn a_beats_next_tick_recorded_since_gives_way_to_the_stored_one() {
        let info = ScheduleInfo {
            name: "n".into(),
            queue: "q".into(),
            job: "j".into(),
            schedule: "every 1s".into(),
            last_ms: None,
            next_ms: None,
            workers: 2,
            body: None,
            priority: 0,
            key: None,
            paused: None,
        };
        let b = Beaten {
            info,
            beat_next: vec![T, T + 1000],
            beat_ms: T + 500,
        };
        let at = |last_ms| Ticks {
            last_ms,
            next_ms: last_ms.map(|l| l + 1000),
            paused: None,
        };
        assert_eq!(recorded(&b, at(None)).next_ms, Some(T));
        assert_eq!(recorded(&b, at(Some(T))).next_ms, Some(T + 1000));
        assert_eq!(recorded(&b, at(Some(T + 2000))).next_ms, Some(T + 3000));
    }
}
