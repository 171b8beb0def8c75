//! RSMQ-compatible message queues, usable on their own.
//!
//! [`Rsmq`] speaks RSMQ's Redis layout exactly, so queues are shared with RSMQ
//! clients in any language: create, list and delete queues, read and change their
//! attributes, send (alone or in batches), receive with a visibility timeout,
//! pop, change visibility and delete. Every timestamp comes from Redis `TIME`.
//!
//! ```no_run
//! use std::time::Duration;
//! use redjob::queue::{QueueOptions, Rsmq, SendMessage};
//!
//! # async fn _demo() -> redjob::Result<()> {
//! let rsmq = Rsmq::connect("redis://127.0.0.1:6379").await?;
//! rsmq.create_queue("emails", QueueOptions::default()).await?;
//! let id = rsmq.send("emails", SendMessage::new("hello")).await?;
//! if let Some(msg) = rsmq.receive("emails", Some(Duration::from_secs(60))).await? {
//!     assert_eq!(msg.id, id);
//!     rsmq.delete("emails", &msg.id).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! The operations are the [`Queues`] trait, which the in-memory backend
//! implements too; [`Rsmq`] is the Redis one.

pub use crate::backend::redis::queues::{Rsmq, RsmqConfig};
pub use crate::contract::queues::{
    Keyed, LAST_DUE_MS, MAX_AHEAD, MAX_CONCURRENCY_KEY, MAX_PER_KEY, MAX_PRIORITY, MAX_SECONDS,
    MAX_UNIQUE_KEY, MIN_PRIORITY, Message, MessageId, OnDuplicate, QueueAttributes, QueueListing,
    QueueOptions, QueueUpdate, Queues, SendMessage, SendOutcome, Sent, Unique, UniqueUntil, When,
};
