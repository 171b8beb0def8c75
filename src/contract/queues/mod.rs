//! The RSMQ operations as a trait, so the Redis and the in-memory backends offer
//! the same queue API (and one conformance suite checks both).

use std::future::Future;
use std::time::Duration;

mod keyed;
mod types;
mod unique;
pub(crate) mod validate;

pub use crate::contract::keyed::{Keyed, MAX_CONCURRENCY_KEY, MAX_PER_KEY};
pub(crate) use keyed::check_message as check_keyed;
pub use types::{
    Message, MessageId, QueueAttributes, QueueListing, QueueOptions, QueueUpdate, SendMessage, When,
};
pub use unique::{MAX_UNIQUE_KEY, OnDuplicate, SendOutcome, Sent, Unique, UniqueUntil};
pub(crate) use validate::priorities;
pub use validate::{LAST_DUE_MS, MAX_AHEAD, MAX_DELAY, MAX_PRIORITY, MAX_SECONDS, MIN_PRIORITY};

use crate::{Error, Result};

/// Checks a message before a send, in one order on every backend: its
/// priority, its concurrency key, its delay or due time, its unique key.
/// Returns its unique key's ttl in ms (`None`: not unique).
pub(crate) fn check_send(m: &SendMessage) -> Result<Option<u64>> {
    validate::priority(m.priority)?;
    check_keyed(m)?;
    match m.when {
        When::After(d) => _ = validate::delay_ms(d)?,
        When::AtUnixMs(at) => validate::at_ms(at)?,
        When::QueueDelay => {}
    }
    m.unique.as_ref().map(|u| u.check()).transpose()
}

/// Whether `body` is over a queue's `maxsize` as RSMQ measures a message:
/// by its length as a JavaScript string (UTF-16 code units), which for UTF-8
/// text is at most its bytes. So a body within `maxsize` bytes is within it
/// (the bytes alone are looked at); a longer one is counted: each character
/// one unit, or two past U+FFFF (an RSMQ client that stored 30,000 CJK
/// characters, 90 KB, kept within a maxsize of 65,536 by its rule).
pub(crate) fn over_maxsize(body: &[u8], max: usize) -> bool {
    if body.len() <= max {
        return false;
    }
    // a character's first byte (not 10xxxxxx), one more for a 4-byte one
    let units = body
        .iter()
        .map(|b| usize::from(b & 0xC0 != 0x80) + usize::from(*b >= 0xF0))
        .sum::<usize>();
    units > max
}

/// RSMQ's queue operations. [`Rsmq`](crate::queue::Rsmq) speaks them to Redis;
/// [`MemoryBackend`](crate::backend::memory::MemoryBackend) keeps them in memory with
/// the same semantics. See [`Rsmq`](crate::queue::Rsmq)'s methods for what each does.
///
/// ```
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::queue::{QueueOptions, Queues, SendMessage};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("jobs", QueueOptions::default()).await?;
/// let id = q.send("jobs", SendMessage::new("hi")).await?;
/// assert_eq!(q.receive("jobs", None).await?.unwrap().id, id);
/// # Ok(()) }
/// ```
pub trait Queues: Sync {
    /// Creates a queue ([`Error::QueueExists`] when it exists).
    fn create_queue(
        &self,
        name: &str,
        opts: QueueOptions,
    ) -> impl Future<Output = Result<()>> + Send;
    /// The names of all queues (on Redis without the entries of `ns:QUEUES`
    /// that are no valid queue names, see [`queue_listing`](Self::queue_listing)).
    fn list_queues(&self) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// The names of all queues, and apart the entries of the set of names that
    /// are no valid queue names, which every queue operation refuses (on Redis
    /// another RSMQ port or a stray `SADD` can put them in `ns:QUEUES`; each
    /// call that finds some logs a warning naming them). For listings that say
    /// what they skipped.
    fn queue_listing(&self) -> impl Future<Output = Result<QueueListing>> + Send {
        async move {
            Ok(QueueListing {
                names: self.list_queues().await?,
                skipped: Vec::new(),
            })
        }
    }
    /// Deletes a queue, its messages, its dead letters and counters (see
    /// [`Rsmq::delete_queue`](crate::queue::Rsmq::delete_queue) for keys left by RSMQ clients),
    /// and its schedules' pauses, these even when the queue does not exist
    /// (which is [`Error::QueueNotFound`](crate::Error::QueueNotFound)).
    fn delete_queue(&self, name: &str) -> impl Future<Output = Result<()>> + Send;
    /// A queue's attributes and counts.
    fn attributes(&self, name: &str) -> impl Future<Output = Result<QueueAttributes>> + Send;
    /// Changes attributes; returns them as they are afterwards.
    fn set_attributes(
        &self,
        name: &str,
        update: QueueUpdate,
    ) -> impl Future<Output = Result<QueueAttributes>> + Send;
    /// Sends messages, all or nothing; returns for each its id and what the send
    /// did (added it, or found its [unique](crate::queue::Unique) key held). New ids
    /// sort in send order, within a call and across calls (a later call's after
    /// an earlier one's, on the memory backend even when its clock stands still).
    fn send_outcomes(
        &self,
        queue: &str,
        msgs: &[SendMessage],
    ) -> impl Future<Output = Result<Vec<Sent>>> + Send;
    /// Receives up to `n` due messages, hiding each for `vt` (the queue's when
    /// `None`). Like RSMQ, it sees messages at priority 0 only (RSMQ's sorted set).
    fn receive_batch(
        &self,
        queue: &str,
        n: usize,
        vt: Option<Duration>,
    ) -> impl Future<Output = Result<Vec<Message>>> + Send;
    /// Receives and deletes the oldest due message at priority 0.
    fn pop(&self, queue: &str) -> impl Future<Output = Result<Option<Message>>> + Send;
    /// Receives and deletes every due message (up to `limit`) of any priority in
    /// one atomic call, highest priority first, oldest first within one.
    fn pop_due(
        &self,
        queue: &str,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Message>>> + Send;
    /// Hides a message (at any priority) until now + `vt`; `false` when it does not exist.
    fn change_visibility(
        &self,
        queue: &str,
        id: &MessageId,
        vt: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// Deletes a message (at any priority); `true` when it existed. A flow's
    /// parent waiting for its children is no message yet: `false` (cancel
    /// it with [`Inspect::cancel`](crate::inspect::Inspect::cancel)).
    fn delete(&self, queue: &str, id: &MessageId) -> impl Future<Output = Result<bool>> + Send;
    /// Deletes messages; returns how many existed.
    fn delete_batch(
        &self,
        queue: &str,
        ids: &[MessageId],
    ) -> impl Future<Output = Result<u64>> + Send;

    /// Sends messages, all or nothing; returns their ids in order (a unique
    /// message whose key is held: the queued message's).
    fn send_batch(
        &self,
        queue: &str,
        msgs: &[SendMessage],
    ) -> impl Future<Output = Result<Vec<MessageId>>> + Send {
        async move {
            Ok(self
                .send_outcomes(queue, msgs)
                .await?
                .into_iter()
                .map(|s| s.id)
                .collect())
        }
    }

    /// Sends one message.
    fn send(
        &self,
        queue: &str,
        msg: SendMessage,
    ) -> impl Future<Output = Result<MessageId>> + Send {
        async move {
            let ids = self.send_batch(queue, std::slice::from_ref(&msg)).await?;
            ids.into_iter()
                .next()
                .ok_or_else(|| Error::Protocol("send returned no id".into()))
        }
    }

    /// Receives the oldest due message.
    fn receive(
        &self,
        queue: &str,
        vt: Option<Duration>,
    ) -> impl Future<Output = Result<Option<Message>>> + Send {
        async move { Ok(self.receive_batch(queue, 1, vt).await?.pop()) }
    }
}

/// [`Queues`]'s methods, for [`forward!`](crate::contract::forward::forward):
/// `queues_methods! { impl Queues for Type, |self| ...; }`.
macro_rules! queues_methods {
    ($($head:tt)*) => {
        $crate::contract::forward::forward! {
            $($head)*
            async fn create_queue(name: &str, opts: $crate::contract::queues::QueueOptions) -> $crate::Result<()>;
            async fn list_queues() -> $crate::Result<Vec<String>>;
            async fn queue_listing() -> $crate::Result<$crate::contract::queues::QueueListing>;
            async fn delete_queue(name: &str) -> $crate::Result<()>;
            async fn attributes(name: &str) -> $crate::Result<$crate::contract::queues::QueueAttributes>;
            async fn set_attributes(name: &str, update: $crate::contract::queues::QueueUpdate) -> $crate::Result<$crate::contract::queues::QueueAttributes>;
            async fn send_outcomes(queue: &str, msgs: &[$crate::contract::queues::SendMessage]) -> $crate::Result<Vec<$crate::contract::queues::Sent>>;
            async fn receive_batch(queue: &str, n: usize, vt: Option<std::time::Duration>) -> $crate::Result<Vec<$crate::contract::queues::Message>>;
            async fn pop_due(queue: &str, limit: usize) -> $crate::Result<Vec<$crate::contract::queues::Message>>;
            async fn pop(queue: &str) -> $crate::Result<Option<$crate::contract::queues::Message>>;
            async fn change_visibility(queue: &str, id: &$crate::contract::queues::MessageId, vt: std::time::Duration) -> $crate::Result<bool>;
            async fn delete(queue: &str, id: &$crate::contract::queues::MessageId) -> $crate::Result<bool>;
            async fn delete_batch(queue: &str, ids: &[$crate::contract::queues::MessageId]) -> $crate::Result<u64>;
        }
    };
}
pub(crate) use queues_methods;

#[cfg(test)]
mod tests {
    #[test]
    fn maxsize_counts_as_rsmq_does() {
        use super::over_maxsize;
        assert!(!over_maxsize(b"abcd", 4));
        assert!(over_maxsize(b"abcde", 4));
        // 3 bytes, one unit each
        let cjk = "日".repeat(4);
        assert!(!over_maxsize(cjk.as_bytes(), 4));
        assert!(over_maxsize(cjk.as_bytes(), 3));
        // 4 bytes, two units (a surrogate pair)
        let emoji = "😀".repeat(2);
        assert!(!over_maxsize(emoji.as_bytes(), 4));
        assert!(over_maxsize(emoji.as_bytes(), 3));
    }
}
