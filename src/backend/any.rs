//! One type for either backend, so application code (a handler that enqueues a
//! follow-up, say) does not depend on which one runs it.

use std::time::Duration;

use super::memory::MemoryBackend;
use super::redis::RedisBackend;
use super::{
    Backend, DeadLetter, Fetched, Handed, MinuteStats, QueueStats, Settle, Settled, Token,
};
use crate::inspect::{Cancelled, Cursor, Inspect, JobInfo, JobState, Page, StateCounts};
use crate::ops::{Admin, DeadOrder, DeadQuery, Spread, Tick, Ticked, Ticks, WorkerInfo};
use crate::queue::{
    Message, MessageId, QueueAttributes, QueueListing, QueueOptions, QueueUpdate, Queues,
    SendMessage, Sent,
};
use crate::topic::{
    Claimed, DeadEvent, EventId, EventOptions, EventSettle, Received, Start, TopicInfo, Topics,
};
use crate::{JobId, Result};

/// Redis or memory: what a [`Client`](crate::Client) and, by default, a
/// [`Worker`](crate::Worker) run on.
///
/// ```
/// use redjob::backend::any::AnyBackend;
/// use redjob::backend::memory::MemoryBackend;
///
/// let backend: AnyBackend = MemoryBackend::new().into();
/// assert!(backend.as_memory().is_some());
/// ```
#[derive(Clone, Debug)]
pub enum AnyBackend {
    /// Redis, in RSMQ's layout.
    Redis(Box<RedisBackend>),
    /// In this process's memory.
    Memory(MemoryBackend),
}

impl AnyBackend {
    /// The Redis backend, if that is what this is.
    pub fn as_redis(&self) -> Option<&RedisBackend> {
        match self {
            AnyBackend::Redis(r) => Some(r),
            AnyBackend::Memory(_) => None,
        }
    }

    /// The memory backend, if that is what this is.
    pub fn as_memory(&self) -> Option<&MemoryBackend> {
        match self {
            AnyBackend::Memory(m) => Some(m),
            AnyBackend::Redis(_) => None,
        }
    }
}

impl From<RedisBackend> for AnyBackend {
    fn from(b: RedisBackend) -> Self {
        AnyBackend::Redis(Box::new(b))
    }
}

impl From<MemoryBackend> for AnyBackend {
    fn from(b: MemoryBackend) -> Self {
        AnyBackend::Memory(b)
    }
}

/// Forwards a call to the backend inside: `on!(self, Trait::method(args))`. The
/// Redis backend's queue API is its [`Rsmq`](crate::queue::Rsmq).
macro_rules! on {
    ($self:ident, Queues :: $m:ident ( $($arg:expr),* )) => {
        match $self {
            AnyBackend::Redis(b) => Queues::$m(b.rsmq(), $($arg),*).await,
            AnyBackend::Memory(b) => Queues::$m(b, $($arg),*).await,
        }
    };
    ($self:ident, Inspect :: $m:ident ( $($arg:expr),* )) => {
        match $self {
            AnyBackend::Redis(b) => Inspect::$m(b.rsmq(), $($arg),*).await,
            AnyBackend::Memory(b) => Inspect::$m(b, $($arg),*).await,
        }
    };
    ($self:ident, Admin :: $m:ident ( $($arg:expr),* )) => {
        match $self {
            AnyBackend::Redis(b) => Admin::$m(b.rsmq(), $($arg),*).await,
            AnyBackend::Memory(b) => Admin::$m(b, $($arg),*).await,
        }
    };
    ($self:ident, Topics :: $m:ident ( $($arg:expr),* )) => {
        match $self {
            AnyBackend::Redis(b) => Topics::$m(b.as_ref(), $($arg),*).await,
            AnyBackend::Memory(b) => Topics::$m(b, $($arg),*).await,
        }
    };
    ($self:ident, Backend :: $m:ident ( $($arg:expr),* )) => {
        match $self {
            AnyBackend::Redis(b) => Backend::$m(b.as_ref(), $($arg),*).await,
            AnyBackend::Memory(b) => Backend::$m(b, $($arg),*).await,
        }
    };
}

impl Backend for AnyBackend {
    async fn send(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        create: &QueueOptions,
    ) -> Result<Vec<Sent>> {
        on!(self, Backend::send(queue, msgs, create))
    }
    async fn fetch(&self, queue: &str, max: usize, lease: Duration) -> Result<Fetched> {
        on!(self, Backend::fetch(queue, max, lease))
    }
    async fn fetch_waiting(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        worker: &str,
    ) -> Result<Fetched> {
        on!(self, Backend::fetch_waiting(queue, max, lease, worker))
    }
    async fn withdraw_handoffs(
        &self,
        queues: &[String],
        worker: &str,
        lease: Duration,
    ) -> Result<()> {
        on!(self, Backend::withdraw_handoffs(queues, worker, lease))
    }
    async fn extend(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> Result<Vec<Option<Token>>> {
        on!(self, Backend::extend(queue, leases, lease))
    }
    async fn settle(&self, queue: &str, batch: &Settle) -> Result<Settled> {
        on!(self, Backend::settle(queue, batch))
    }
    async fn sizes(&self, queue: &str) -> Result<crate::inspect::StateCounts> {
        on!(self, Backend::sizes(queue))
    }

    async fn stats(&self, queue: &str) -> Result<QueueStats> {
        on!(self, Backend::stats(queue))
    }
    async fn minutes(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        on!(self, Backend::minutes(queue))
    }
    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        on!(self, Backend::dead_letters(queue, limit))
    }
    async fn scores(&self, queue: &str, held: &[(JobId, Token)]) -> Result<Vec<Option<Token>>> {
        on!(self, Backend::scores(queue, held))
    }

    async fn warnings(&self) -> Result<Vec<String>> {
        on!(self, Backend::warnings())
    }

    async fn listen(
        &self,
        queues: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> Result<()> {
        on!(self, Backend::listen(queues, wake, subscribed))
    }

    fn real_time(&self) -> bool {
        match self {
            AnyBackend::Redis(b) => b.real_time(),
            AnyBackend::Memory(b) => b.real_time(),
        }
    }

    async fn due_soon(&self, queues: &[String], within: Duration) -> Result<Vec<bool>> {
        on!(self, Backend::due_soon(queues, within))
    }

    async fn listen_handoff(
        &self,
        queues: &[String],
        worker: &str,
        wake: &(dyn Fn(&str) + Send + Sync),
        handed: &(dyn Fn(Handed) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<()> {
        on!(
            self,
            Backend::listen_handoff(queues, worker, wake, handed, subscribed, stop)
        )
    }

    async fn now_ms(&self) -> Result<u64> {
        on!(self, Backend::now_ms())
    }

    async fn tick(
        &self,
        queue: &str,
        tick: &Tick<'_>,
        msg: &SendMessage,
        create: &QueueOptions,
    ) -> Result<Ticked> {
        on!(self, Backend::tick(queue, tick, msg, create))
    }

    async fn beat(&self, id: &str, beat: &[u8], ttl: Duration) -> Result<()> {
        on!(self, Backend::beat(id, beat, ttl))
    }

    async fn touch(&self, id: &str, ttl: Duration, since: Duration) -> Result<bool> {
        on!(self, Backend::touch(id, ttl, since))
    }
}

impl Queues for AnyBackend {
    async fn create_queue(&self, name: &str, opts: QueueOptions) -> Result<()> {
        on!(self, Queues::create_queue(name, opts))
    }
    async fn list_queues(&self) -> Result<Vec<String>> {
        on!(self, Queues::list_queues())
    }
    async fn queue_listing(&self) -> Result<QueueListing> {
        on!(self, Queues::queue_listing())
    }
    async fn delete_queue(&self, name: &str) -> Result<()> {
        on!(self, Queues::delete_queue(name))
    }
    async fn attributes(&self, name: &str) -> Result<QueueAttributes> {
        on!(self, Queues::attributes(name))
    }
    async fn set_attributes(&self, name: &str, update: QueueUpdate) -> Result<QueueAttributes> {
        on!(self, Queues::set_attributes(name, update))
    }
    async fn send_outcomes(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<Sent>> {
        on!(self, Queues::send_outcomes(queue, msgs))
    }
    async fn receive_batch(
        &self,
        queue: &str,
        n: usize,
        vt: Option<Duration>,
    ) -> Result<Vec<Message>> {
        on!(self, Queues::receive_batch(queue, n, vt))
    }
    async fn pop_due(&self, queue: &str, limit: usize) -> Result<Vec<Message>> {
        on!(self, Queues::pop_due(queue, limit))
    }
    async fn pop(&self, queue: &str) -> Result<Option<Message>> {
        on!(self, Queues::pop(queue))
    }
    async fn change_visibility(&self, queue: &str, id: &MessageId, vt: Duration) -> Result<bool> {
        on!(self, Queues::change_visibility(queue, id, vt))
    }
    async fn delete(&self, queue: &str, id: &MessageId) -> Result<bool> {
        on!(self, Queues::delete(queue, id))
    }
    async fn delete_batch(&self, queue: &str, ids: &[MessageId]) -> Result<u64> {
        on!(self, Queues::delete_batch(queue, ids))
    }
}

impl Inspect for AnyBackend {
    async fn counts(&self, queue: &str) -> Result<StateCounts> {
        on!(self, Inspect::counts(queue))
    }
    async fn latency(&self, queue: &str) -> Result<Option<std::time::Duration>> {
        on!(self, Inspect::latency(queue))
    }
    async fn peek(&self, queue: &str, n: usize) -> Result<Vec<JobInfo>> {
        on!(self, Inspect::peek(queue, n))
    }
    async fn job(&self, queue: &str, id: &JobId) -> Result<Option<JobInfo>> {
        on!(self, Inspect::job(queue, id))
    }
    async fn list(
        &self,
        queue: &str,
        state: JobState,
        after: Option<&Cursor>,
        n: usize,
    ) -> Result<Page> {
        on!(self, Inspect::list(queue, state, after, n))
    }
    async fn cancel(&self, queue: &str, id: &JobId) -> Result<Cancelled> {
        on!(self, Inspect::cancel(queue, id))
    }
}

impl Admin for AnyBackend {
    async fn pause(&self, queue: &str) -> Result<()> {
        on!(self, Admin::pause(queue))
    }
    async fn resume(&self, queue: &str) -> Result<()> {
        on!(self, Admin::resume(queue))
    }
    async fn is_paused(&self, queue: &str) -> Result<bool> {
        on!(self, Admin::is_paused(queue))
    }
    async fn purge_queue(&self, queue: &str) -> Result<u64> {
        on!(self, Admin::purge_queue(queue))
    }
    async fn run_now(&self, queue: &str, id: &JobId) -> Result<Option<JobState>> {
        on!(self, Admin::run_now(queue, id))
    }
    async fn dead_page(
        &self,
        queue: &str,
        order: DeadOrder,
        after: Option<&Cursor>,
        n: usize,
    ) -> Result<Page> {
        on!(self, Admin::dead_page(queue, order, after, n))
    }
    async fn requeue_dead(&self, queue: &str, ids: &[JobId], spread: Spread) -> Result<u64> {
        on!(self, Admin::requeue_dead(queue, ids, spread))
    }
    async fn delete_dead(&self, queue: &str, ids: &[JobId]) -> Result<u64> {
        on!(self, Admin::delete_dead(queue, ids))
    }
    async fn purge_dead(&self, queue: &str) -> Result<u64> {
        on!(self, Admin::purge_dead(queue))
    }
    async fn requeue_dead_matching(
        &self,
        queue: &str,
        query: &DeadQuery,
        per_second: Option<u32>,
    ) -> Result<u64> {
        on!(self, Admin::requeue_dead_matching(queue, query, per_second))
    }
    async fn delete_dead_matching(&self, queue: &str, query: &DeadQuery) -> Result<u64> {
        on!(self, Admin::delete_dead_matching(queue, query))
    }
    async fn workers(&self) -> Result<Vec<WorkerInfo>> {
        on!(self, Admin::workers())
    }
    async fn ticks(&self, queue: &str, names: &[&str]) -> Result<Vec<Ticks>> {
        on!(self, Admin::ticks(queue, names))
    }
}

impl Topics for AnyBackend {
    async fn publish(
        &self,
        topic: &str,
        events: &[(&str, &str)],
        options: &EventOptions,
    ) -> Result<Vec<EventId>> {
        on!(self, Topics::publish(topic, events, options))
    }
    async fn subscribe(&self, topic: &str, subscriber: &str, start: Start) -> Result<bool> {
        on!(self, Topics::subscribe(topic, subscriber, start))
    }
    async fn rewind(&self, topic: &str, subscriber: &str, to: Start) -> Result<()> {
        on!(self, Topics::rewind(topic, subscriber, to))
    }
    async fn unsubscribe(&self, topic: &str, subscriber: &str) -> Result<bool> {
        on!(self, Topics::unsubscribe(topic, subscriber))
    }
    async fn delete_topic(&self, topic: &str) -> Result<bool> {
        on!(self, Topics::delete_topic(topic))
    }
    async fn read(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Option<Vec<Received>>> {
        on!(
            self,
            Topics::read(topic, subscriber, consumer, count, block)
        )
    }
    async fn claim(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        min_idle: Duration,
        count: usize,
        from: EventId,
    ) -> Result<Option<Claimed>> {
        on!(
            self,
            Topics::claim(topic, subscriber, consumer, min_idle, count, from)
        )
    }
    async fn renew(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        ids: &[EventId],
    ) -> Result<Vec<bool>> {
        on!(self, Topics::renew(topic, subscriber, consumer, ids))
    }
    async fn settle_events(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        batch: &EventSettle,
        keep_dead: Option<u64>,
    ) -> Result<()> {
        on!(
            self,
            Topics::settle_events(topic, subscriber, consumer, batch, keep_dead)
        )
    }
    async fn own(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        lease: Option<Duration>,
    ) -> Result<bool> {
        on!(self, Topics::own(topic, subscriber, consumer, lease))
    }
    async fn leave(&self, topic: &str, subscriber: &str, consumer: &str) -> Result<()> {
        on!(self, Topics::leave(topic, subscriber, consumer))
    }
    async fn topic_names(&self) -> Result<Vec<String>> {
        on!(self, Topics::topic_names())
    }
    async fn topic_info(&self, topic: &str) -> Result<Option<TopicInfo>> {
        on!(self, Topics::topic_info(topic))
    }
    async fn dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        limit: usize,
    ) -> Result<Vec<DeadEvent>> {
        on!(self, Topics::dead_events(topic, subscriber, limit))
    }
    async fn requeue_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        ids: Option<&[EventId]>,
    ) -> Result<u64> {
        on!(self, Topics::requeue_dead_events(topic, subscriber, ids))
    }
    async fn delete_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        ids: Option<&[EventId]>,
    ) -> Result<u64> {
        on!(self, Topics::delete_dead_events(topic, subscriber, ids))
    }
}
