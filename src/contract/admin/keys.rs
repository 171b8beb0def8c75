//! What the concurrency keys of a queue hold: each key's places, its running
//! jobs and its blocked ones (see [`Keyed`](crate::queue::Keyed)).

/// One concurrency key of a queue, as [`Admin::keys`](super::Admin::keys)
/// and [`Admin::key_usage`](super::Admin::key_usage) read it.
///
/// ```
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::ops::Admin;
/// use redjob::queue::{Keyed, Queues, SendMessage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("billing", Default::default()).await?;
/// for body in ["a", "b", "c"] {
///     q.send("billing", SendMessage::new(body).keyed(Keyed::new("acct:7"))).await?;
/// }
/// let usage = q.key_usage("billing", "acct:7").await?;
/// assert_eq!((usage.per_key, usage.running, usage.holding, usage.blocked), (1, 0, 1, 2));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KeyUsage {
    /// The key.
    pub key: String,
    /// How many of its jobs may run at once (the last send's `per_key`; 0
    /// for a key the queue does not know).
    pub per_key: u32,
    /// Its jobs running now (leased; a running job deleted or cancelled
    /// counts until its lease ends).
    pub running: u64,
    /// Its jobs holding a place without running: due, delayed or waiting
    /// for a retry.
    pub holding: u64,
    /// Its jobs waiting for a place.
    pub blocked: u64,
    /// Until when a handler throttled the key (Unix ms; see
    /// [`JobError::rate_limited_key`](crate::JobError::rate_limited_key)):
    /// none of its jobs takes a place before. `None` when not throttled.
    pub throttled_until_ms: Option<u64>,
}

/// A page of a queue's concurrency keys, in no particular order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KeyPage {
    /// The keys.
    pub keys: Vec<KeyUsage>,
    /// Where the next page starts (pass it as `after`); `None` on the last.
    pub next: Option<String>,
}
