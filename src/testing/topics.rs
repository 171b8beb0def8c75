//! Topic subscribers on the kit: registered as on a worker, run by
//! [`TestKit::run_until_idle`], their events and dead letters readable at once.

use std::future::Future;
use std::sync::Arc;

use super::TestKit;
use crate::Result;
use crate::backend::memory::MemoryBackend;
use crate::contract::topics::{DeadEvent, EventId, SubscriberInfo};
use crate::job::JobError;
use crate::topic::{Event, EventContext, Subscription};
use crate::worker::WorkerBuilder;

/// Adds a subscriber's handler to a worker's builder.
type Register =
    Arc<dyn Fn(WorkerBuilder<MemoryBackend>) -> WorkerBuilder<MemoryBackend> + Send + Sync>;

/// A subscriber registered on the kit.
#[derive(Clone)]
pub(super) struct KitSubscriber {
    pub topic: &'static str,
    pub name: String,
    pub register: Register,
}

impl TestKit {
    /// Runs `handler` for events of type `E` as the subscriber `subscription`
    /// of `E`'s topic, as [`WorkerBuilder::subscribe`] does on a worker. The
    /// subscriber is created now (at the subscription's start, by default the
    /// topic's end), so it sees every event published after this call. An
    /// ordered subscriber retries in place, holding the event through the
    /// backoff: test it under tokio's paused clock, where that wait passes
    /// inside [`run_until_idle`](Self::run_until_idle).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use redjob::testing::TestKit;
    /// use redjob::topic::Event;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize, Event, Debug, PartialEq)]
    /// #[event(topic = "kit-orders")]
    /// struct OrderPlaced { id: u64 }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// let kit = TestKit::new().subscribe("billing", move |e: OrderPlaced, _ctx| {
    ///     let log = log.clone();
    ///     async move {
    ///         log.lock().unwrap().push(e.id);
    ///         Ok(())
    ///     }
    /// });
    /// kit.publish(&OrderPlaced { id: 1 }).await?;
    /// kit.publish(&OrderPlaced { id: 2 }).await?;
    ///
    /// let run = kit.run_until_idle().await?;
    /// assert_eq!(run.events, 2);
    /// assert_eq!(*seen.lock().unwrap(), [1, 2]);
    /// assert_eq!(kit.published::<OrderPlaced>(), [OrderPlaced { id: 1 }, OrderPlaced { id: 2 }]);
    /// assert_eq!(kit.subscriber("kit-orders", "billing").unwrap().lag, 0);
    /// # Ok(()) }
    /// ```
    pub fn subscribe<E, F, Fut>(mut self, subscription: impl Into<Subscription>, handler: F) -> Self
    where
        E: Event,
        F: Fn(E, EventContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), JobError>> + Send + 'static,
    {
        let sub = subscription.into();
        let topic = E::OPTIONS.topic;
        // a start refused (past the topic's events and over a minute past
        // now): the kit's next run says so
        match self.backend.subscribe_now(topic, &sub.name, sub.start) {
            Err(crate::Error::InvalidValue { what, reason }) => {
                self.invalid.get_or_insert((what, reason));
            }
            Err(e) => {
                self.invalid.get_or_insert(("subscribe", e.to_string()));
            }
            Ok(_) => {}
        }
        let name = sub.name.clone();
        let handler = Arc::new(handler);
        let register: Register = Arc::new(move |b: WorkerBuilder<MemoryBackend>| {
            let h = handler.clone();
            b.subscribe(sub.clone(), move |e: E, ctx| h(e, ctx))
        });
        self.subscribers.push(KitSubscriber {
            topic,
            name,
            register,
        });
        self
    }

    /// Publishes `event` to its type's topic (as
    /// [`Client::publish`](crate::Client::publish)); the kit's subscribers
    /// handle it at the next [`run_until_idle`](Self::run_until_idle) or
    /// [`advance`](Self::advance).
    pub async fn publish<E: Event>(&self, event: &E) -> Result<EventId> {
        self.client().publish(event).await
    }

    /// Every event of type `E` in its topic, oldest first, whoever published
    /// it (a test, a handler, a subscriber), handled or not. Events trimmed by
    /// the topic's retention are gone.
    pub fn published<E: Event>(&self) -> Vec<E> {
        self.backend
            .events_of(E::OPTIONS.topic)
            .into_iter()
            .filter(|(_, ty, _)| ty == E::NAME)
            .filter_map(|(_, _, data)| serde_json::from_str(&data).ok())
            .collect()
    }

    /// A subscriber of `topic` as [`Client::topic`](crate::Client::topic) lists
    /// it: its lag (events not read yet), its pending events (read, not
    /// settled: running, or waiting for a retry) and its dead letters. `None`
    /// when it does not exist.
    pub fn subscriber(&self, topic: &str, name: &str) -> Option<SubscriberInfo> {
        self.backend
            .topic_info_now(topic)?
            .subscribers
            .into_iter()
            .find(|s| s.name == name)
    }

    /// The subscriber's dead events (those that failed their last retry),
    /// oldest first, with their errors and runs.
    pub fn dead_events(&self, topic: &str, name: &str) -> Vec<DeadEvent> {
        self.backend.dead_events_of(topic, name)
    }
}
