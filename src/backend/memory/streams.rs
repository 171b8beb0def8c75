//! A topic's stream in memory, as Redis Streams keep it: entries with ids from
//! the backend's clock, trimmed by length, age or size; consumer groups with an
//! offset and a pending list of deliveries and their runs.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::backend::memory::MemoryBackend;
use crate::contract::attempts::{Attempt, AttemptOutcome, MAX_RECORDS};
use crate::contract::topics::{DeadEvent, EventId, Received, Start};
use crate::{Error, Result};

/// Every topic of a memory backend.
#[derive(Default)]
pub(crate) struct Streams {
    pub(super) topics: Mutex<HashMap<String, MemTopic>>,
    /// Woken by every publish (blocked reads wait on it).
    pub(super) published: Notify,
    /// Ordered subscribers' owners by (topic, subscriber): consumer, until (ms).
    pub(super) owners: Mutex<HashMap<(String, String), (String, u64)>>,
    /// Subscribers made so far: a new one's epoch starts at this count times
    /// 2^32, so that one made anew does not take an old one's epoch.
    pub(super) made: AtomicU64,
}

/// A stream entry: `type`, `data` and, for a requeued dead letter, `to`.
pub(super) struct Entry {
    pub ty: String,
    pub data: String,
    pub to: Option<String>,
    /// Its place among the events ever appended to its topic (1 for the
    /// first). Events are appended at the end and trimmed from the start
    /// only, so the places of those held run without a gap: the events from
    /// one to the last are counted by a subtraction (see [`MemTopic::lag`]).
    pub n: u64,
}

impl Entry {
    /// Its memory, estimated: the fields' bytes and two integers of id.
    pub(super) fn size(&self) -> u64 {
        (self.ty.len() + self.data.len() + self.to.as_ref().map_or(0, String::len) + 16) as u64
    }
}

/// The id after `last` at `now` (ms), as Redis makes them.
pub(super) fn next_id(last: EventId, now: u64) -> EventId {
    if now > last.ms() {
        EventId::new(now, 0)
    } else {
        EventId::new(last.ms(), last.seq() + 1)
    }
}

#[derive(Default)]
pub(super) struct MemTopic {
    pub entries: BTreeMap<EventId, Entry>,
    pub(super) last: EventId,
    /// Events ever appended (the last one's [`Entry::n`]).
    pub added: u64,
    /// The sum of its events' [`Entry::size`], kept as they are appended
    /// and trimmed.
    pub bytes: u64,
    pub groups: BTreeMap<String, Group>,
}

#[derive(Default)]
pub(super) struct Group {
    pub offset: EventId,
    pub pending: BTreeMap<EventId, Pending>,
    /// The consumers that have read, claimed or renewed for it, with when
    /// they last did (ms of the backend's clock).
    pub consumers: BTreeMap<String, u64>,
    pub dead: VecDeque<DeadEvent>,
    pub(super) last_dead: EventId,
    /// Its epoch (see [`Delivery::epoch`](crate::contract::topics::Delivery::epoch)):
    /// set when it is made, one more at each rewind that moves it back.
    pub epoch: u64,
}

pub(super) struct Pending {
    /// The consumer that holds it.
    pub consumer: String,
    pub delivered_ms: u64,
    pub deliveries: u32,
    /// Its attempt records so far (the last MAX_RECORDS).
    pub runs: Vec<Attempt>,
}

impl Pending {
    pub(super) fn record(&mut self, a: Attempt) {
        self.runs.push(a);
        let over = self.runs.len().saturating_sub(MAX_RECORDS);
        self.runs.drain(..over);
    }

    /// Records a run, as topic_settle.lua's add_run: not twice for one
    /// number, but in place of a `lease_lost` record of its number.
    pub(super) fn record_run(&mut self, a: Attempt) {
        if let Some(last) = self.runs.last() {
            if last.number > a.number
                || (last.number == a.number && last.outcome != AttemptOutcome::LeaseLost)
            {
                return;
            }
            if last.number == a.number {
                self.runs.pop();
            }
        }
        self.record(a);
    }
}

impl MemTopic {
    pub(super) fn after(&self, offset: EventId) -> impl Iterator<Item = (&EventId, &Entry)> {
        self.entries.range((
            std::ops::Bound::Excluded(offset),
            std::ops::Bound::Unbounded,
        ))
    }

    pub(super) fn offset(&self, start: Start) -> EventId {
        start.offset().unwrap_or(self.last)
    }
}

pub(super) fn not_found(topic: &str, subscriber: &str) -> Error {
    Error::SubscriberNotFound {
        topic: topic.into(),
        subscriber: subscriber.into(),
    }
}

impl MemoryBackend {
    pub(super) fn topics(&self) -> MutexGuard<'_, HashMap<String, MemTopic>> {
        // plain maps: a panic elsewhere cannot leave them inconsistent in a way that matters
        self.streams()
            .topics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn with_group<T>(
        &self,
        topic: &str,
        subscriber: &str,
        f: impl FnOnce(&mut MemTopic, u64) -> T,
    ) -> Option<T> {
        let now = self.clock().now_ms();
        let out = {
            let mut all = self.topics();
            let t = all.get_mut(topic)?;
            if !t.groups.contains_key(subscriber) {
                return None;
            }
            f(t, now)
        };
        self.changed();
        Some(out)
    }
}

impl MemoryBackend {
    /// [`Topics::subscribe`](crate::contract::topics::Topics::subscribe), at once.
    pub(crate) fn subscribe_now(
        &self,
        topic: &str,
        subscriber: &str,
        start: Start,
    ) -> Result<bool> {
        let now = self.clock.now_ms();
        {
            let mut all = self.topics();
            if all
                .get(topic)
                .is_some_and(|t| t.groups.contains_key(subscriber))
            {
                return Ok(false);
            }
            let last = all.get(topic).map_or(EventId::ZERO, |t| t.last);
            let offset = start.offset().unwrap_or(last);
            // past the last event and over a minute past now (as on Redis,
            // and as a rewind): it would skip every event published until then
            if crate::contract::topics::too_far_ahead(offset, Some(last), now) {
                return Err(crate::contract::topics::start_too_late(start));
            }
            let made = self.streams().made.fetch_add(1, Ordering::Relaxed) + 1;
            let t = all.entry(topic.to_string()).or_default();
            t.groups.insert(
                subscriber.to_string(),
                Group {
                    offset,
                    epoch: made << 32,
                    ..Group::default()
                },
            );
        }
        self.changed();
        Ok(true)
    }
}

pub(super) fn group<'a>(t: &'a mut MemTopic, name: &str) -> &'a mut Group {
    t.groups.get_mut(name).expect("checked by with_group")
}

/// Event `id` as a delivery, its `deliveries`th, in the subscriber's `epoch`.
pub(super) fn received(id: EventId, e: &Entry, deliveries: u32, epoch: u64) -> Received {
    Received {
        id,
        event_type: Some(e.ty.clone()),
        data: Some(e.data.clone()),
        to: e.to.clone(),
        deliveries,
        epoch,
    }
}

impl Group {
    /// Whether `d` is still the delivery `consumer` holds (see
    /// [`Delivery`](crate::contract::topics::Delivery)): a settle of it applies.
    pub(super) fn holds(&self, consumer: &str, d: &crate::contract::topics::Delivery) -> bool {
        self.epoch == d.epoch
            && self
                .pending
                .get(&d.id)
                .is_some_and(|p| p.consumer == consumer && p.deliveries == d.count)
    }
}

impl MemTopic {
    /// Appends an event at `now` (ms); its id.
    pub(super) fn append(
        &mut self,
        now: u64,
        ty: String,
        data: String,
        to: Option<String>,
    ) -> EventId {
        let id = next_id(self.last, now);
        self.last = id;
        self.added += 1;
        let entry = Entry {
            ty,
            data,
            to,
            n: self.added,
        };
        self.bytes += entry.size();
        self.entries.insert(id, entry);
        id
    }

    /// Trims the events before `min`.
    pub(super) fn trim_before(&mut self, min: EventId) {
        let kept = self.entries.split_off(&min);
        let gone = std::mem::replace(&mut self.entries, kept);
        self.bytes -= gone.values().map(Entry::size).sum::<u64>();
    }

    /// Trims the oldest events beyond `max`.
    pub(super) fn trim_to(&mut self, max: u64) {
        while self.entries.len() as u64 > max {
            let Some((_, e)) = self.entries.pop_first() else {
                break;
            };
            self.bytes -= e.size();
        }
    }
}
