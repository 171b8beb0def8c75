//! The topic events a worker runs, as its registry's beats list them.
//!
//! An event's run holds one of the worker's running slots, as a job does: it
//! is entered in a table here when it starts and taken out when it ends (a
//! guard), under a lock no one else holds for long (the beat, every few
//! seconds or soon after a run starts or ends, copies the table out). No
//! allocation an event once the table has grown to the events running.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::contract::admin::BeatEvent;
use crate::contract::topics::EventId;
use crate::worker::leases::Changes;

/// A subscriber a worker serves, by its index here.
pub(crate) struct Served {
    pub topic: String,
    pub name: String,
    /// Its event types, sorted: an entry names one by its index.
    pub types: Vec<&'static str>,
}

/// The events a worker runs (see the module's documentation).
pub(crate) struct RunningEvents {
    subs: Vec<Served>,
    /// Each running event by its number: its subscriber's and its type's
    /// indexes, its id, when it started.
    running: Mutex<HashMap<u64, (usize, usize, EventId, Instant)>>,
    next: AtomicU64,
    /// Told when an event starts or ends: the registry beats soon.
    changed: Arc<Changes>,
}

/// A listed event: taken out of the table when this is dropped (before the
/// run's running slot, declared before it).
pub(crate) struct Listed<'a> {
    events: &'a RunningEvents,
    n: u64,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.events.lock().remove(&self.n);
        self.events.changed.tell();
    }
}

impl RunningEvents {
    /// The running events of `subs`.
    pub fn new(subs: Vec<Served>, changed: Arc<Changes>) -> Self {
        RunningEvents {
            subs,
            running: Mutex::default(),
            next: AtomicU64::new(0),
            changed,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u64, (usize, usize, EventId, Instant)>> {
        // a table of plain values cannot be left half-changed
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An event `id` of type `ty` of subscriber `sub` started at `at`: listed
    /// until the guard is dropped. `None` (not listed) for a type the
    /// subscriber does not name.
    pub fn start(&self, sub: usize, ty: &str, id: EventId, at: Instant) -> Option<Listed<'_>> {
        let t = self.subs.get(sub)?.types.binary_search(&ty).ok()?;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(n, (sub, t, id, at));
        self.changed.tell();
        Some(Listed { events: self, n })
    }

    /// The events running now, for a beat at `now`.
    pub fn listed(&self, now: Instant) -> Vec<BeatEvent> {
        let running: Vec<_> = self.lock().values().copied().collect();
        running
            .into_iter()
            .map(|(sub, t, id, at)| {
                let sub = &self.subs[sub];
                BeatEvent {
                    topic: sub.topic.clone(),
                    subscriber: sub.name.clone(),
                    id: id.to_string(),
                    event: sub.types[t].to_string(),
                    for_ms: now.saturating_duration_since(at).as_millis() as u64,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events() -> RunningEvents {
        let subs = vec![
            Served {
                topic: "t".into(),
                name: "a".into(),
                types: vec!["x", "y"],
            },
            Served {
                topic: "u".into(),
                name: "b".into(),
                types: vec!["z"],
            },
        ];
        RunningEvents::new(subs, Arc::default())
    }

    #[test]
    fn running_events_are_listed_until_they_end() {
        let e = events();
        let at = Instant::now();
        let mut held: Vec<_> = (0..70)
            .map(|i| e.start(i % 2, ["y", "z"][i % 2], EventId::new(5, i as u64), at))
            .map(|l| l.expect("listed"))
            .collect();
        assert!(e.start(0, "nope", EventId::new(6, 0), at).is_none());
        let listed = e.listed(at + std::time::Duration::from_millis(7));
        assert_eq!(listed.len(), 70);
        let first = listed.iter().find(|l| l.id == "5-1").unwrap();
        assert_eq!(
            (
                &*first.topic,
                &*first.subscriber,
                &*first.event,
                first.for_ms
            ),
            ("u", "b", "z", 7)
        );
        // one ends: it is listed no more, and another starts
        drop(held.remove(1));
        assert!(e.listed(at).iter().all(|l| l.id != "5-1"));
        let again = e.start(0, "x", EventId::new(9, 9), at).expect("listed");
        assert!(e.listed(at).iter().any(|l| l.id == "9-9" && l.event == "x"));
        drop(again);
        drop(held);
        assert!(e.listed(at).is_empty());
    }

    #[test]
    fn a_worker_without_subscribers_lists_none() {
        let e = RunningEvents::new(Vec::new(), Arc::default());
        assert!(e.start(0, "x", EventId::ZERO, Instant::now()).is_none());
    }
}
