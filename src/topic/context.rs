//! What a running event handler knows about its event.

use std::sync::Arc;
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use super::EventId;
use crate::Result;
use crate::job::data::Data;

/// The context of one event handler run: the event's id, topic and subscriber,
/// which delivery this is, and a token that fires on timeout or when the worker
/// gives up on the run.
///
/// ```
/// use redjob::topic::{EventContext, EventId};
///
/// struct Db;
/// let ctx = EventContext::new(EventId::new(1_700_000_000_000, 0), "orders", "billing", 1)
///     .with_data(Db);
/// assert_eq!(ctx.topic(), "orders");
/// assert_eq!(ctx.attempt(), 1);
/// assert!(ctx.data::<Db>().is_ok());
/// assert!(!ctx.cancellation().is_cancelled());
/// ```
#[derive(Debug, Clone)]
pub struct EventContext {
    id: EventId,
    topic: Arc<str>,
    subscriber: Arc<str>,
    attempt: u32,
    cancel: CancellationToken,
    data: Data,
}

impl EventContext {
    /// A context with a fresh cancellation token (for tests of a handler).
    pub fn new(
        id: EventId,
        topic: impl Into<Arc<str>>,
        subscriber: impl Into<Arc<str>>,
        attempt: u32,
    ) -> Self {
        EventContext {
            id,
            topic: topic.into(),
            subscriber: subscriber.into(),
            attempt,
            cancel: CancellationToken::new(),
            data: Data::default(),
        }
    }

    /// Adds a shared value for [`EventContext::data`].
    pub fn with_data<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.data = self.data.with(value);
        self
    }

    pub(crate) fn with_parts(mut self, data: Data, cancel: CancellationToken) -> Self {
        self.data = data;
        self.cancel = cancel;
        self
    }

    /// The event's id.
    pub fn id(&self) -> EventId {
        self.id
    }

    /// When it was published (from its id).
    pub fn published_at(&self) -> SystemTime {
        self.id.time()
    }

    /// Its topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The subscriber handling it.
    pub fn subscriber(&self) -> &str {
        &self.subscriber
    }

    /// Which delivery to this subscriber this is, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The worker's shared value of type `T` (from `.data(value)`, also one
    /// given as `Arc<T>`: see [`JobContext::data`](crate::JobContext::data)); a
    /// missing one turned into a [`JobError`](crate::JobError) with `?`
    /// dead-letters the event at once, naming the type and the types held.
    pub fn data<T: Send + Sync + 'static>(&self) -> Result<&T> {
        self.data.require::<T>()
    }

    /// Fires when the run should stop: timeout, or shutdown past the grace period.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }
}
