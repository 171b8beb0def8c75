//! One type for either backend, so application code (a handler that enqueues a
//! follow-up, say) does not depend on which one runs it.

use std::time::{SystemTime, UNIX_EPOCH};

use super::memory::MemoryBackend;
use super::redis::RedisBackend;
use crate::contract::admin::{Admin, admin_methods};
use crate::contract::backend::{Backend, backend_methods};
use crate::contract::inspect::{Inspect, inspect_methods};
use crate::contract::queues::{Queues, queues_methods};
use crate::contract::topics::{Topics, topics_methods};

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
    /// This backend, recording its actions in the queues' history as `by`
    /// (see [`Inspect::actor`]).
    pub fn acting_as(self, by: &str) -> Self {
        match self {
            AnyBackend::Redis(r) => AnyBackend::Redis(Box::new(r.acting_as(by))),
            AnyBackend::Memory(m) => AnyBackend::Memory(m.acting_as(by)),
        }
    }

    /// The Redis backend, if that is what this is.
    pub fn as_redis(&self) -> Option<&RedisBackend> {
        match self {
            AnyBackend::Redis(r) => Some(r),
            AnyBackend::Memory(_) => None,
        }
    }

    /// The time a client checks a due time against without a round trip: the
    /// memory backend's clock, or this machine's (Redis's `TIME` still decides
    /// when the job runs).
    pub(crate) fn local_now_ms(&self) -> u64 {
        self.local_now_us() / 1000
    }

    /// The same time in Unix µs: what an inline run's id is made of.
    pub(crate) fn local_now_us(&self) -> u64 {
        match self {
            AnyBackend::Memory(m) => m.clock().now_us(),
            AnyBackend::Redis(_) => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
        }
    }

    /// A fresh id made on the client (a batch's, a flow parent's, an inline
    /// run's): now by [`local_now_us`](Self::local_now_us), and random; on
    /// the memory backend from its own ids, which ascend in the order they
    /// are made even within one microsecond of its clock (paused, in a test).
    pub(crate) fn fresh_id(&self) -> crate::JobId {
        match self {
            AnyBackend::Memory(m) => m.next_id(),
            AnyBackend::Redis(_) => {
                crate::JobId::make(self.local_now_us(), &crate::id::random_suffix())
            }
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

/// Calls a trait method on the backend inside: `on!(self, Trait::method(args)
/// .await)`. The Redis backend's queue API, inspection and administration are
/// its [`Rsmq`](crate::queue::Rsmq)'s.
macro_rules! on {
    ($self:ident, $T:ident :: $m:ident ( $($a:ident),* ) $($aw:tt)*) => {
        match $self {
            AnyBackend::Redis(b) => $T::$m(on!(@inner $T b), $($a),*) $($aw)*,
            AnyBackend::Memory(b) => $T::$m(b, $($a),*) $($aw)*,
        }
    };
    (@inner Queues $b:ident) => { $b.rsmq() };
    (@inner Inspect $b:ident) => { $b.rsmq() };
    (@inner Admin $b:ident) => { $b.rsmq() };
    (@inner $T:ident $b:ident) => { $b.as_ref() };
}

backend_methods! { impl Backend for AnyBackend, |self| via on!; }
queues_methods! { impl Queues for AnyBackend, |self| via on!; }
inspect_methods! { impl Inspect for AnyBackend, |self| via on!; }
admin_methods! { impl Admin for AnyBackend, |self| via on!; }
topics_methods! { impl Topics for AnyBackend, |self| via on!; }
