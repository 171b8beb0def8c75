//! The storage a worker runs on: [`Backend`], a small trait of atomic, batched
//! operations, and its two implementations side by side.
//!
//! [`RedisBackend`](redis::RedisBackend) is the product: RSMQ's layout, one
//! script call per batch. [`MemoryBackend`](memory::MemoryBackend) gives the
//! same semantics in this process, with a clock a test controls.
//! [`AnyBackend`](any::AnyBackend) is either. Each backend's folder has one file
//! per concept of the contract under the same name (`queues`, `leases`,
//! `inspect`, `admin`, `settings`, `live`, `topics`), so how Redis and memory
//! do one thing are neighbours.

pub mod any;
pub mod memory;
pub mod redis;

pub use crate::contract::attempts::{Ran, RunBy};
pub use crate::contract::backend::{Backend, FinishWatch, LAYOUT_VERSION};
pub use crate::contract::batches::{BatchRef, BatchSpec, Callback};
pub use crate::contract::leases::{
    DEFAULT_THROTTLES, DeadLetterEntry, Delivery, Fetched, Handed, Held, Reschedule, Settle,
    Settled, Throttle, Token,
};
pub use crate::contract::runtimes::{RUN_TIME_BUCKETS_MS, RunTimes};
pub use crate::contract::stats::{
    DeadLetter, HOURS, MINUTES, MinuteStats, QueueStats, last_hour, last_week,
};
