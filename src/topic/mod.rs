//! Topics: publish an event once, and every subscriber handles it, each at its
//! own offset, which it can rewind to replay what the topic still holds.
//!
//! Jobs go to one worker; events go to every subscriber. On Redis a topic is a
//! stream and a subscriber a consumer group, so any Redis client can publish and
//! consume (see the entry format in [the topics chapter](crate::guide::topics)). An event type is a serde type with
//! `#[derive(Event)]`; a worker registers a handler per subscriber:
//!
//! ```
//! use redjob::topic::{Event, Start};
//! use redjob::{Client, Worker};
//! use redjob::backend::memory::MemoryBackend;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, Event)]
//! #[event(name = "order_placed", topic = "orders", max_len = 100000)]
//! struct OrderPlaced {
//!     order: u64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> redjob::Result<()> {
//! let backend = MemoryBackend::new();
//! let client = Client::memory(backend.clone());
//! // a subscriber reads from where it was created: create it before publishing
//! client.subscribe("orders", "billing", Start::Beginning).await?;
//! let id = client.publish(&OrderPlaced { order: 7 }).await?;
//!
//! let worker = Worker::builder(backend)
//!     .subscribe("billing", |e: OrderPlaced, ctx| async move {
//!         println!("bill order {} (event {})", e.order, ctx.id());
//!         Ok(())
//!     })
//!     .build()?;
//! # let stop = worker.shutdown_token();
//! # let run = tokio::spawn(worker.run());
//! # while client.topic("orders").await?.unwrap().subscribers[0].pending > 0
//! #     || client.topic("orders").await?.unwrap().subscribers[0].lag > 0 {
//! #     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! # }
//! # stop.cancel();
//! # run.await.unwrap()?;
//! let info = client.topic("orders").await?.expect("the topic exists");
//! assert_eq!(info.last, Some(id));
//! # Ok(()) }
//! ```
//!
//! **Delivery** is at least once. An event is acknowledged after its handler
//! returns `Ok`; one whose consumer died is claimed by another after the
//! worker's lease; a failed one is retried after its backoff, and after its
//! `max_attempts` deliveries it goes to the subscriber's dead letters
//! ([`Client::dead_events`](crate::Client::dead_events)) with the error.
//!
//! **Order**: a subscriber takes events in topic order. With several in flight
//! (the worker's concurrency) they run concurrently and may finish in any
//! order, and a retried event runs after later ones. [`Subscription::ordered`]
//! runs one event of the subscriber at a time across all its worker processes
//! (one owns it, the others stand by), retrying a failed event in place before
//! taking the next: in topic order.

mod context;
pub(crate) mod subscription;

pub use context::EventContext;
pub use subscription::Subscription;

pub use crate::contract::topics::{
    Claimed, DeadEvent, DeadEventCount, DeadEvents, Delivery, EventId, EventOptions, EventRun,
    EventSettle, LAG_COUNTED, MAX_PUBLISH, MAX_PUBLISH_BYTES, MAX_TAKE, Received, Renewed,
    RewindPlan, Start, SubscriberInfo, TopicInfo, Topics, WhenFull,
};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Derives [`Event`] for a serde type. Attributes, all optional:
/// `#[event(name = "...", topic = "...", max_len = N, unbounded, max_age = "7d",
/// when_full = "refuse", max_attempts = N, timeout = "30s", backoff = "1s")]`;
/// see [`EventOptions`] for their defaults. `name` defaults to the bare type name.
pub use redjob_macros::Event;

/// An event type: its name (the stream entry's `type` field) and options.
/// Implemented by `#[derive(Event)]`.
///
/// ```
/// use redjob::topic::Event;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize, Event)]
/// #[event(topic = "users", max_age = "7d", when_full = "refuse", max_len = 1000)]
/// struct SignedUp { user: u64 }
///
/// assert_eq!(SignedUp::NAME, "SignedUp");
/// assert_eq!(SignedUp::OPTIONS.topic, "users");
/// assert_eq!(SignedUp::OPTIONS.max_len, Some(1000));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an event type",
    label = "add `#[derive(redjob::topic::Event)]` to `{Self}`"
)]
pub trait Event: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The name stored in each entry's `type` field.
    const NAME: &'static str;
    /// Topic, retention and handler limits from `#[event(...)]`.
    const OPTIONS: EventOptions;
}
