//! The topic events a worker runs, as its registry's beats list them.
//!
//! An event's run holds one of the worker's running slots, as a job does, so
//! at most `concurrency` run at once: the worker keeps that many places here.
//! A run takes a free place (one bit of a word, with a compare-and-swap) and
//! writes what it runs there (a few stores between two of the place's
//! sequence numbers), then gives the place back when it ends: no lock and no
//! allocation an event. The beat (every few seconds, or soon after a run
//! starts or ends) reads the places taken, skipping one written as it reads
//! (a seqlock: the run that writes it tells the registry, which beats again).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::Instant;

use crate::contract::admin::BeatEvent;
use crate::contract::topics::EventId;
use crate::worker::leases::Changes;

/// A subscriber a worker serves, by its index here.
pub(crate) struct Served {
    pub topic: String,
    pub name: String,
    /// Its event types, sorted: a place names one by its index.
    pub types: Vec<&'static str>,
}

/// The events a worker runs (see the module's documentation).
pub(crate) struct RunningEvents {
    subs: Vec<Served>,
    /// A bit a place: taken.
    taken: Box<[AtomicU64]>,
    places: Box<[Place]>,
    /// What the places' start times count from.
    base: Instant,
    /// Told when an event starts or ends: the registry beats soon.
    changed: Arc<Changes>,
}

/// What one running event is: written by its run alone, between an odd and
/// an even `seq`.
#[derive(Default)]
struct Place {
    seq: AtomicU64,
    /// The subscriber's index (high 32 bits) and its event type's (low 32).
    what: AtomicU64,
    id_ms: AtomicU64,
    id_seq: AtomicU64,
    /// µs after `base`.
    started_us: AtomicU64,
}

/// A listed event: its place is given back when this is dropped (before the
/// run's running slot, declared before it).
pub(crate) struct Listed<'a> {
    events: &'a RunningEvents,
    place: usize,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        let (word, bit) = (self.place / 64, self.place % 64);
        self.events.taken[word].fetch_and(!(1u64 << bit), Ordering::Release);
        self.events.changed.tell();
    }
}

impl RunningEvents {
    /// Places for `concurrency` events of `subs` (none without subscribers).
    pub fn new(subs: Vec<Served>, concurrency: usize, changed: Arc<Changes>) -> Self {
        let n = if subs.is_empty() { 0 } else { concurrency };
        RunningEvents {
            subs,
            taken: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            places: (0..n).map(|_| Place::default()).collect(),
            base: Instant::now(),
            changed,
        }
    }

    /// An event `id` of type `ty` of subscriber `sub` started at `at`: listed
    /// until the guard is dropped. `None` (not listed) for a type the
    /// subscriber does not name, or with no place free (a run holds a running
    /// slot, so one is).
    pub fn start(&self, sub: usize, ty: &str, id: EventId, at: Instant) -> Option<Listed<'_>> {
        let t = self.subs.get(sub)?.types.binary_search(&ty).ok()?;
        let place = self.take()?;
        let p = &self.places[place];
        let s = p.seq.load(Ordering::Relaxed);
        p.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        p.what
            .store(((sub as u64) << 32) | t as u64, Ordering::Relaxed);
        p.id_ms.store(id.ms(), Ordering::Relaxed);
        p.id_seq.store(id.seq(), Ordering::Relaxed);
        let us = u64::try_from(at.saturating_duration_since(self.base).as_micros());
        p.started_us
            .store(us.unwrap_or(u64::MAX), Ordering::Relaxed);
        p.seq.store(s.wrapping_add(2), Ordering::Release);
        self.changed.tell();
        Some(Listed {
            events: self,
            place,
        })
    }

    /// A free place, taken.
    fn take(&self) -> Option<usize> {
        for (w, word) in self.taken.iter().enumerate() {
            let mut bits = word.load(Ordering::Relaxed);
            loop {
                let bit = (!bits).trailing_zeros() as usize;
                if bit == 64 || w * 64 + bit >= self.places.len() {
                    break;
                }
                match word.compare_exchange_weak(
                    bits,
                    bits | (1 << bit),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(w * 64 + bit),
                    Err(now) => bits = now,
                }
            }
        }
        None
    }

    /// The events running now, for a beat at `now`.
    pub fn listed(&self, now: Instant) -> Vec<BeatEvent> {
        let mut out = Vec::new();
        for (w, word) in self.taken.iter().enumerate() {
            let mut bits = word.load(Ordering::Acquire);
            while bits != 0 {
                let place = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let p = &self.places[place];
                let s = p.seq.load(Ordering::Acquire);
                let what = p.what.load(Ordering::Relaxed);
                let id = EventId::new(
                    p.id_ms.load(Ordering::Relaxed),
                    p.id_seq.load(Ordering::Relaxed),
                );
                let us = p.started_us.load(Ordering::Relaxed);
                fence(Ordering::Acquire);
                // being written (or never written): its run tells the registry
                if s % 2 == 1 || s == 0 || p.seq.load(Ordering::Relaxed) != s {
                    continue;
                }
                let Some(sub) = self.subs.get((what >> 32) as usize) else {
                    continue;
                };
                let Some(ty) = sub.types.get((what & u64::from(u32::MAX)) as usize) else {
                    continue;
                };
                let at = self.base + std::time::Duration::from_micros(us);
                out.push(BeatEvent {
                    topic: sub.topic.clone(),
                    subscriber: sub.name.clone(),
                    id: id.to_string(),
                    event: ty.to_string(),
                    for_ms: now.saturating_duration_since(at).as_millis() as u64,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(concurrency: usize) -> RunningEvents {
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
        RunningEvents::new(subs, concurrency, Arc::default())
    }

    #[test]
    fn running_events_are_listed_until_they_end_and_their_places_are_reused() {
        let e = events(70);
        let at = Instant::now();
        let mut held: Vec<_> = (0..70)
            .map(|i| e.start(i % 2, ["y", "z"][i % 2], EventId::new(5, i as u64), at))
            .map(|l| l.expect("a place free"))
            .collect();
        assert!(
            e.start(0, "x", EventId::new(6, 0), at).is_none(),
            "all taken"
        );
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
        // one ends: its place goes to the next
        drop(held.remove(1));
        assert!(e.listed(at).iter().all(|l| l.id != "5-1"));
        let again = e
            .start(0, "x", EventId::new(9, 9), at)
            .expect("a place free");
        assert!(e.listed(at).iter().any(|l| l.id == "9-9" && l.event == "x"));
        drop(again);
        drop(held);
        assert!(e.listed(at).is_empty());
    }

    #[test]
    fn a_worker_without_subscribers_has_no_places() {
        let e = RunningEvents::new(Vec::new(), 1000, Arc::default());
        assert!(e.places.is_empty() && e.taken.is_empty());
        assert!(e.start(0, "x", EventId::ZERO, Instant::now()).is_none());
    }
}
