//! [`Topics`]: what a backend does for topics, in a few batched operations.

use std::future::Future;
use std::time::{Duration, Instant};

mod publish;
mod rewind;
mod types;

use crate::Result;
use crate::contract::attempts::{Attempt, AttemptOutcome, RunBy};
pub(crate) use publish::check_publish;
pub use publish::{MAX_PUBLISH, MAX_PUBLISH_BYTES};
pub use rewind::RewindPlan;
pub(crate) use types::name as check_name;
pub use types::{
    DeadEvent, DeadEventCount, DeadEvents, EventId, EventOptions, LAG_COUNTED, Start,
    SubscriberInfo, TopicInfo, WhenFull,
};

/// An event as a subscriber's consumer receives it: the stream entry's id and
/// its `type` and `data` fields (`None` where an entry written by another
/// client lacks one, or holds bytes that are not UTF-8).
///
/// ```
/// use redjob::topic::{EventId, Received};
/// let r = Received { id: EventId::new(1, 0), event_type: Some("x".into()), data: None, to: None, deliveries: 1, epoch: 0 };
/// assert_eq!(r.delivery().count, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Its id.
    pub id: EventId,
    /// Its `type` field.
    pub event_type: Option<String>,
    /// Its `data` field.
    pub data: Option<String>,
    /// Its `to` field: the one subscriber a requeued dead letter is for (the
    /// others acknowledge it unread); `None` for a published event.
    pub to: Option<String>,
    /// How often it was delivered to the subscriber, this time included.
    pub deliveries: u32,
    /// The subscriber's epoch when it was delivered (see [`Delivery::epoch`]).
    pub epoch: u64,
}

impl Received {
    /// This delivery of it, as a settle names it.
    pub fn delivery(&self) -> Delivery {
        Delivery {
            id: self.id,
            count: self.deliveries,
            epoch: self.epoch,
        }
    }
}

/// One delivery of an event to a consumer, as [`Topics::settle_events`] names
/// the events it settles. A late outcome of a delivery that a read made anew
/// after a rewind (Redis then makes it a new delivery with a count of 1, as
/// the first one had) is not applied to the new one: it neither acknowledges
/// nor retries nor buries it. A retry or dead letter is applied only while the
/// event's pending entry is still this delivery (one another consumer claimed
/// since, its count up and its consumer changed, is left to that consumer); an
/// acknowledgement is applied whoever holds the event now, since the event
/// was handled (checking a first delivery's pending entry would cost Redis
/// more than the acknowledgement itself), but a claimed delivery's (a count
/// over 1) not once a read delivered the event anew (a claim may carry an
/// event across a rewind).
///
/// ```
/// use redjob::topic::{Delivery, EventId, Received};
/// let r = Received { id: EventId::new(1, 0), event_type: None, data: None, to: None, deliveries: 2, epoch: 7 };
/// assert_eq!(r.delivery(), Delivery { id: EventId::new(1, 0), count: 2, epoch: 7 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Delivery {
    /// The event.
    pub id: EventId,
    /// Its delivery count as delivered ([`Received::deliveries`]).
    pub count: u32,
    /// The subscriber's epoch then: a number that changes when the subscriber
    /// is rewound to before the last event it took (which may deliver events
    /// anew) or is made anew, read with the delivery (on Redis, the key
    /// `ns:t:{T}:epoch:<subscriber>`, read before the `XREADGROUP` and, when
    /// a rewind changed it meanwhile, told per event by
    /// `topic_read_epoch.lua`). A settle
    /// made once it changed is not applied (the event stays pending: a
    /// replay settles it, or a claim takes it after a lease), as the entry may
    /// be a new delivery by then; rewinds are rare, so is that.
    pub epoch: u64,
}

/// Events a claim took over, and where the next claim's scan starts.
///
/// ```
/// use redjob::topic::{Claimed, EventId};
/// let c = Claimed { events: vec![], next: EventId::ZERO };
/// assert!(c.events.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The events, now held by the claiming consumer.
    pub events: Vec<Received>,
    /// Where the next scan of the pending list starts; `0-0` once it went round.
    pub next: EventId,
}

/// What a renewal found of one event (see [`Topics::renew`]).
///
/// ```
/// use redjob::topic::Renewed;
/// let r = [Renewed::Held, Renewed::Claimed, Renewed::Gone];
/// assert_eq!(r.iter().filter(|r| **r != Renewed::Held).count(), 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Renewed {
    /// Still held by the consumer: its idle time starts over.
    Held,
    /// Held by another consumer, which claimed it (its hold here ran out).
    Claimed,
    /// Held by no consumer of the subscriber: the subscriber (or its topic)
    /// was removed, or made anew, or another client acknowledged the event.
    Gone,
}

/// What a consumer reports about finished events, in one call.
///
/// ```
/// use redjob::topic::{Delivery, EventId, EventSettle};
/// let mut s = EventSettle::default();
/// s.acks.push(Delivery { id: EventId::new(1, 0), count: 1, epoch: 0 });
/// assert!(!s.is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct EventSettle {
    /// Handled: acknowledged, gone from the pending list with their attempt
    /// records (if any).
    pub acks: Vec<Delivery>,
    /// Failed or released, with the idle time to give each (a claim that takes
    /// events idle for `L` takes it again after `L` minus this; `L`: at once)
    /// and, for a release that did not run it, the delivery count to set back
    /// (so that it does not count as an attempt).
    pub retries: Vec<(Delivery, Duration, Option<u32>)>,
    /// Given up: moved to the subscriber's dead letters with the reason (the
    /// letter takes the event's type, data and deliveries from the
    /// [`Received`]).
    pub dead: Vec<(Delivery, Received, String)>,
    /// The runs that ended in a retry or a dead letter, oldest first: each is
    /// added to its event's attempt records (the last
    /// [`MAX_RECORDS`](crate::inspect::MAX_RECORDS)), which a dead letter keeps
    /// ([`DeadEvent::runs`]) and an acknowledgement deletes. A run of an event
    /// the call does not settle (it passed to another consumer) is skipped.
    pub runs: Vec<EventRun>,
    /// Who ran them.
    pub by: Option<RunBy>,
}

/// One run of an event, as a settle records it ([`EventSettle::runs`]). Its
/// start and end are instants of the worker's clock: the backend turns them
/// into its own time when the call is made.
///
/// ```
/// use std::time::Instant;
/// use redjob::inspect::AttemptOutcome;
/// use redjob::topic::{EventId, EventRun};
///
/// let now = Instant::now();
/// let run = EventRun::new(EventId::new(1, 0), 2, now, now, AttemptOutcome::Timeout, Some("timed out".into()));
/// assert_eq!(run.number, 2);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventRun {
    /// The event.
    pub id: EventId,
    /// The attempt's number: its delivery count (an ordered subscriber's
    /// retries in place count on from there).
    pub number: u32,
    /// When the handler started.
    pub started: Instant,
    /// When it ended.
    pub ended: Instant,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// Its error, if any (the backend bounds it to
    /// [`MAX_ERROR`](crate::inspect::MAX_ERROR) bytes).
    pub error: Option<String>,
}

impl EventRun {
    /// A run of event `id`, attempt `number`, from `started` to `ended`.
    pub fn new(
        id: EventId,
        number: u32,
        started: Instant,
        ended: Instant,
        outcome: AttemptOutcome,
        error: Option<String>,
    ) -> Self {
        EventRun {
            id,
            number,
            started,
            ended,
            outcome,
            error,
        }
    }

    /// Its attempt record at `now_ms` (backend time, Unix ms, taken when
    /// `now` was), by `by`.
    pub(crate) fn attempt(&self, now: Instant, now_ms: u64, by: Option<&RunBy>) -> Attempt {
        let ms =
            |t: Instant| now_ms.saturating_sub(now.saturating_duration_since(t).as_millis() as u64);
        let mut a = Attempt::settled(self.number, None, self.error.as_deref(), by);
        a.outcome = self.outcome;
        a.started_ms = Some(ms(self.started));
        a.ended_ms = Some(ms(self.ended));
        a
    }
}

impl EventSettle {
    /// Whether there is nothing to report.
    pub fn is_empty(&self) -> bool {
        self.acks.is_empty() && self.retries.is_empty() && self.dead.is_empty()
    }
}

/// Topics on a backend: publish, consumer groups with their offsets, claims of
/// idle events, and inspection. Implemented by the Redis backend (on Redis
/// Streams), the memory backend and [`AnyBackend`](crate::backend::any::AnyBackend).
/// Names are checked by the caller ([`Client`](crate::Client) and the worker).
pub trait Topics: Clone + Send + Sync + 'static {
    /// Appends `(type, data)` events to `topic` in one call, applying `options`'
    /// retention; returns their ids in order. Over a `Refuse` limit nothing is
    /// written and the call fails with [`Error::TopicFull`](crate::Error::TopicFull).
    /// More than [`MAX_PUBLISH`] events or [`MAX_PUBLISH_BYTES`] are refused
    /// with [`Error::InvalidValue`](crate::Error::InvalidValue) before
    /// anything is written: one call must answer within the response timeout.
    fn publish(
        &self,
        topic: &str,
        events: &[(&str, &str)],
        options: &EventOptions,
    ) -> impl Future<Output = Result<Vec<EventId>>> + Send;

    /// Creates `subscriber` on `topic` (and the topic, empty, if missing) at
    /// `start`; an existing subscriber keeps its offset. Returns whether it was created.
    /// A start later than the topic's newest event and over a minute past the
    /// backend's clock is [`Error::InvalidValue`](crate::Error::InvalidValue),
    /// as for [`rewind`](Self::rewind).
    fn subscribe(
        &self,
        topic: &str,
        subscriber: &str,
        start: Start,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Moves an existing subscriber's offset to `to` (a replay, or a skip
    /// ahead). Events it holds stay pending. A point later than the topic's
    /// newest event and over a minute past the backend's clock is
    /// [`Error::InvalidValue`](crate::Error::InvalidValue): it would skip
    /// every event published until then.
    fn rewind(
        &self,
        topic: &str,
        subscriber: &str,
        to: Start,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Moves an existing subscriber's offset forward to `upto`, the last
    /// event it skips (a skip to the end as it was counted: the events after
    /// `upto` are its next), and never back: a subscriber that took `upto`
    /// already (it read on since the count) stays where it is. Returns
    /// whether it moved; [`Error::SubscriberNotFound`](crate::Error::SubscriberNotFound)
    /// when it does not exist.
    fn skip_to(
        &self,
        topic: &str,
        subscriber: &str,
        upto: EventId,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes a subscriber, its pending list and its dead letters. Returns
    /// whether it existed.
    fn unsubscribe(
        &self,
        topic: &str,
        subscriber: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Deletes a topic with its subscribers and their dead letters. Returns
    /// whether it existed.
    fn delete_topic(&self, topic: &str) -> impl Future<Output = Result<bool>> + Send;

    /// Takes up to `count` events (1 to [`MAX_TAKE`]; more is taken as
    /// `MAX_TAKE`) after the subscriber's offset for `consumer`, waiting up to
    /// `block` for one when there are none. `None` when the subscriber (or
    /// its topic) does not exist.
    fn read(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> impl Future<Output = Result<Option<Vec<Received>>>> + Send;

    /// Takes over up to `count` (1 to [`MAX_TAKE`]) of the subscriber's events idle for at least
    /// `min_idle`, scanning its pending list from `from`: at most `count` × 10
    /// entries of it (as `XAUTOCLAIM` does), so that a call costs the same
    /// however many events are pending; [`Claimed::next`] is where the next
    /// scan goes on. `None` when the subscriber does not exist.
    ///
    /// A claim also removes the subscriber's consumers that hold nothing and
    /// have been idle for 100 times `min_idle` (10 s at least): a killed
    /// worker's, or one that stopped holding events that were claimed since
    /// (a serving worker reads or claims at least every second; one removed
    /// while it was quiet is made again by its next read). On Redis a
    /// backend asks for that once a minute per subscriber, as it takes one
    /// `XINFO CONSUMERS`.
    fn claim(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        min_idle: Duration,
        count: usize,
        from: EventId,
    ) -> impl Future<Output = Result<Option<Claimed>>> + Send;

    /// Restarts the idle time of events `consumer` holds; per id, whether it
    /// still held it, or who does ([`Renewed`]: every one [`Renewed::Gone`]
    /// when the subscriber or its topic does not exist).
    fn renew(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        ids: &[EventId],
    ) -> impl Future<Output = Result<Vec<Renewed>>> + Send;

    /// Acknowledges, schedules retries of and dead-letters finished events.
    /// Each applies only to the [`Delivery`] it names: none to one a read
    /// delivered anew after a rewind; a retry or dead letter only while
    /// `consumer` still holds it (one another consumer claimed meanwhile is
    /// left to it), while an acknowledgement applies whoever holds it now
    /// (the event was handled).
    /// `keep_dead` bounds the subscriber's dead letters (`None`: no bound).
    fn settle_events(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        batch: &EventSettle,
        keep_dead: Option<u64>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Takes (`lease` = `Some`) or gives up (`None`) the subscriber's ownership
    /// for `consumer`: an ordered subscriber's events are read by its owner
    /// alone. A take succeeds when no other consumer owns it (or its lease ran
    /// out), and then lasts `lease`; taking it again renews it. Returns whether
    /// `consumer` owns it now.
    fn own(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        lease: Option<Duration>,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Removes `consumer` from the subscriber if it holds no events (a worker
    /// that stops cleanly).
    fn leave(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The names of the topics that exist, sorted.
    fn topic_names(&self) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// The topic's length, ids, memory and subscribers; `None` when it does not exist.
    fn topic_info(&self, topic: &str) -> impl Future<Output = Result<Option<TopicInfo>>> + Send;

    /// [`topic_info`](Self::topic_info) with `subscriber` alone among its
    /// subscribers (none when the topic has no subscriber of that name): the
    /// others' lags are not counted (on Redis, one round trip). `None` when
    /// the topic does not exist. Defaults to [`topic_info`](Self::topic_info),
    /// the others left out.
    fn topic_info_for(
        &self,
        topic: &str,
        subscriber: &str,
    ) -> impl Future<Output = Result<Option<TopicInfo>>> + Send {
        async move {
            let mut info = self.topic_info(topic).await?;
            if let Some(t) = info.as_mut() {
                t.subscribers.retain(|s| s.name == subscriber);
            }
            Ok(info)
        }
    }

    /// [`topic_info`](Self::topic_info) of each of `topics`, in their order
    /// (`None` for one that does not exist): a page of a topic list, read
    /// together. On one Redis server two round trips whatever the number of
    /// topics (topic_info.lua over 50 topics a call, the calls pipelined, then
    /// one pipeline of the subscribers' dead letters' lengths); on a Cluster,
    /// each topic's two at once. The work is the topics asked for, never the
    /// others. Defaults to [`topic_info`](Self::topic_info) of one topic after
    /// another.
    fn topic_infos(
        &self,
        topics: &[String],
    ) -> impl Future<Output = Result<Vec<Option<TopicInfo>>>> + Send {
        async move {
            let mut out = Vec::with_capacity(topics.len());
            for topic in topics {
                out.push(self.topic_info(topic).await?);
            }
            Ok(out)
        }
    }

    /// The subscriber's newest `limit` dead letters (at most
    /// [`MAX_PAGE`](crate::inspect::MAX_PAGE)), newest first.
    fn dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<DeadEvent>>> + Send;

    /// Requeues the subscriber's dead letters that `which` selects, oldest
    /// first:
    /// each is appended to the topic again, with its `type` and `data`, a new
    /// id and a `to` field naming the subscriber, which alone handles it (the
    /// others acknowledge it unread). The topic's retention is not applied (its
    /// next publish applies it). [`All`](DeadEvents::All) means those there
    /// when it starts (on Redis, up to the newest's id then, a batch at a
    /// time): one dead-lettered meanwhile, such as one requeued here that
    /// failed again, is left, so each is taken at most once. Returns how many were
    /// requeued; fails with
    /// [`Error::SubscriberNotFound`](crate::Error::SubscriberNotFound) when the
    /// subscriber does not exist.
    fn requeue_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        which: DeadEvents<'_>,
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Deletes the subscriber's dead letters that `which` selects
    /// ([`All`](DeadEvents::All): those there when it starts, as for a
    /// requeue); returns how many there were.
    fn delete_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        which: DeadEvents<'_>,
    ) -> impl Future<Output = Result<u64>> + Send;
}

/// The error of a rewind to a point past the topic's newest event and past
/// now.
/// Whether an offset is too far ahead to move or make a subscriber there:
/// past the topic's newest event `last` (when known) and over a minute past
/// `now_ms` (the minute: a client's clock a little ahead asking for "now"),
/// so that it would skip every event published until then. topic_group.lua
/// applies the same rule on Redis.
pub(crate) fn too_far_ahead(offset: EventId, last: Option<EventId>, now_ms: u64) -> bool {
    last.is_none_or(|last| offset > last) && offset.ms() > now_ms.saturating_add(60_000)
}

pub(crate) fn rewind_too_late(to: Start) -> crate::Error {
    too_late("rewind", to)
}

/// The error for a subscriber made at a start past the topic's newest event
/// and over a minute past now: as a [rewind](rewind_too_late) there, it would
/// skip every event published until then.
pub(crate) fn start_too_late(to: Start) -> crate::Error {
    too_late("subscriber start", to)
}

fn too_late(what: &'static str, to: Start) -> crate::Error {
    crate::Error::InvalidValue {
        what,
        reason: format!(
            "{to:?} is later than the topic's newest event and over a minute past now: it would skip every event published until then (use Start::End to skip to the end)"
        ),
    }
}

/// The most events one [`read`](Topics::read) or [`claim`](Topics::claim)
/// takes: a larger `count` takes this many (a subscriber reads again for the
/// rest).
///
/// ```
/// assert_eq!(redjob::topic::MAX_TAKE, 1000);
/// ```
pub const MAX_TAKE: usize = 1000;

/// How long a consumer that holds nothing has been idle when a claim with
/// `min_idle` removes it (see [`Topics::claim`]), in ms.
pub(crate) fn gone_after_ms(min_idle: Duration) -> u64 {
    crate::contract::backend::clamped_ms(min_idle.saturating_mul(100).max(Duration::from_secs(10)))
}

/// [`Topics`]'s methods, for [`forward!`](crate::contract::forward::forward):
/// `topics_methods! { impl Topics for Type, |self| ...; }`.
macro_rules! topics_methods {
    ($($head:tt)*) => {
        $crate::contract::forward::forward! {
            $($head)*
            async fn publish(topic: &str, events: &[(&str, &str)], options: &$crate::contract::topics::EventOptions) -> $crate::Result<Vec<$crate::contract::topics::EventId>>;
            async fn subscribe(topic: &str, subscriber: &str, start: $crate::contract::topics::Start) -> $crate::Result<bool>;
            async fn rewind(topic: &str, subscriber: &str, to: $crate::contract::topics::Start) -> $crate::Result<()>;
            async fn skip_to(topic: &str, subscriber: &str, upto: $crate::contract::topics::EventId) -> $crate::Result<bool>;
            async fn unsubscribe(topic: &str, subscriber: &str) -> $crate::Result<bool>;
            async fn delete_topic(topic: &str) -> $crate::Result<bool>;
            async fn read(topic: &str, subscriber: &str, consumer: &str, count: usize, block: std::time::Duration) -> $crate::Result<Option<Vec<$crate::contract::topics::Received>>>;
            async fn claim(topic: &str, subscriber: &str, consumer: &str, min_idle: std::time::Duration, count: usize, from: $crate::contract::topics::EventId) -> $crate::Result<Option<$crate::contract::topics::Claimed>>;
            async fn renew(topic: &str, subscriber: &str, consumer: &str, ids: &[$crate::contract::topics::EventId]) -> $crate::Result<Vec<$crate::contract::topics::Renewed>>;
            async fn settle_events(topic: &str, subscriber: &str, consumer: &str, batch: &$crate::contract::topics::EventSettle, keep_dead: Option<u64>) -> $crate::Result<()>;
            async fn own(topic: &str, subscriber: &str, consumer: &str, lease: Option<std::time::Duration>) -> $crate::Result<bool>;
            async fn leave(topic: &str, subscriber: &str, consumer: &str) -> $crate::Result<()>;
            async fn topic_names() -> $crate::Result<Vec<String>>;
            async fn topic_info(topic: &str) -> $crate::Result<Option<$crate::contract::topics::TopicInfo>>;
            async fn topic_info_for(topic: &str, subscriber: &str) -> $crate::Result<Option<$crate::contract::topics::TopicInfo>>;
            async fn topic_infos(topics: &[String]) -> $crate::Result<Vec<Option<$crate::contract::topics::TopicInfo>>>;
            async fn dead_events(topic: &str, subscriber: &str, limit: usize) -> $crate::Result<Vec<$crate::contract::topics::DeadEvent>>;
            async fn requeue_dead_events(topic: &str, subscriber: &str, which: $crate::contract::topics::DeadEvents<'_>) -> $crate::Result<u64>;
            async fn delete_dead_events(topic: &str, subscriber: &str, which: $crate::contract::topics::DeadEvents<'_>) -> $crate::Result<u64>;
        }
    };
}
pub(crate) use topics_methods;
