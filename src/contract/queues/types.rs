//! The values the queue layer takes and returns.

use std::time::Duration;

use crate::JobId;

/// The id of an RSMQ message; the same type as [`JobId`].
pub type MessageId = JobId;

/// A received message, with RSMQ's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message id.
    pub id: MessageId,
    /// The body. RSMQ bodies are text; bytes that are not UTF-8 are replaced with U+FFFD.
    pub body: String,
    /// Receive count: how often the message has been received (`rc`).
    pub rc: u64,
    /// First receive time in Unix milliseconds (`fr`).
    pub fr: u64,
    /// Sent time in Unix milliseconds, from the id's prefix (`sent`).
    pub sent: u64,
}

/// The set of queue names (`ns:QUEUES`) as [`queue_listing`](super::Queues::queue_listing)
/// reads it: the valid names, and apart the entries no queue can have.
///
/// ```
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::queue::{QueueOptions, Queues};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("jobs", QueueOptions::default()).await?;
/// let listing = q.queue_listing().await?;
/// assert_eq!((listing.names, listing.skipped.len()), (vec!["jobs".to_string()], 0));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueListing {
    /// The queue names, in no particular order.
    pub names: Vec<String>,
    /// Entries that are not valid queue names (put there by an RSMQ port with
    /// looser name rules, or by hand), left out of `names`: no queue operation
    /// takes them. One that is not UTF-8 is here lossily, its bad bytes as
    /// U+FFFD. Empty on the memory backend.
    pub skipped: Vec<String>,
}

/// Attributes for a new queue, as RSMQ's `createQueue` takes them.
///
/// ```
/// use redjob::queue::QueueOptions;
///
/// let opts = QueueOptions { vt: 60, ..QueueOptions::default() };
/// assert_eq!((opts.delay, opts.maxsize), (0, 65536));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueOptions {
    /// Visibility timeout in seconds, 0..=9999999. Defaults to 30.
    pub vt: u64,
    /// Delay before a new message is visible, in seconds, 0..=9999999. Defaults to 0.
    pub delay: u64,
    /// Largest body in bytes, 1024..=65536, or -1 for no limit. Defaults to 65536.
    pub maxsize: i64,
}

impl Default for QueueOptions {
    fn default() -> Self {
        QueueOptions {
            vt: 30,
            delay: 0,
            maxsize: 65536,
        }
    }
}

/// Changes to a queue's attributes; `None` leaves a value as it is.
///
/// ```
/// use redjob::queue::QueueUpdate;
///
/// let update = QueueUpdate { vt: Some(120), ..Default::default() };
/// assert!(update.delay.is_none());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueUpdate {
    /// New visibility timeout in seconds.
    pub vt: Option<u64>,
    /// New delay in seconds.
    pub delay: Option<u64>,
    /// New maxsize in bytes, or -1.
    pub maxsize: Option<i64>,
}

/// A queue's attributes and counts, as RSMQ's `getQueueAttributes` returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueAttributes {
    /// Visibility timeout in seconds.
    pub vt: u64,
    /// Delay for new messages in seconds.
    pub delay: u64,
    /// Largest body in bytes, or -1.
    pub maxsize: i64,
    /// Messages received in total.
    pub totalrecv: u64,
    /// Messages sent in total.
    pub totalsent: u64,
    /// Creation time, Unix seconds.
    pub created: u64,
    /// Last attribute change, Unix seconds.
    pub modified: u64,
    /// Messages in the queue.
    pub msgs: u64,
    /// Messages not visible now (received or delayed).
    pub hiddenmsgs: u64,
}

/// One message for [`Rsmq::send_batch`](crate::queue::Rsmq::send_batch) and the options of a send.
///
/// ```
/// use std::time::Duration;
/// use redjob::queue::SendMessage;
///
/// let msg = SendMessage::new("hello").delay(Duration::from_millis(1500)).priority(5);
/// assert_eq!((&msg.body[..], msg.priority), (&b"hello"[..], 5));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMessage {
    /// The body.
    pub body: Vec<u8>,
    /// When the message becomes visible.
    pub when: When,
    /// Its priority, [`MIN_PRIORITY`](super::MIN_PRIORITY)..=[`MAX_PRIORITY`](super::MAX_PRIORITY).
    /// A message at any priority but 0 is kept apart from RSMQ's sorted set, where
    /// RSMQ clients (and [`Rsmq::receive`](crate::queue::Rsmq::receive)) do not see it;
    /// workers serve every priority.
    pub priority: i8,
    /// Unique in its queue by a key (see [`Unique`](super::Unique)). Defaults to `None`.
    pub unique: Option<super::Unique>,
    /// Runs at most N at a time with the messages of its key (see
    /// [`Keyed`](super::Keyed)). Defaults to `None`: no key.
    pub keyed: Option<super::Keyed>,
}

/// When a sent message becomes visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum When {
    /// After the queue's `delay` attribute (RSMQ's default).
    #[default]
    QueueDelay,
    /// After this delay (rounded up to a whole millisecond, at most [`MAX_AHEAD`](super::MAX_AHEAD),
    /// 50 years: more than RSMQ's own 9999999 s, which RSMQ clients read alike).
    After(Duration),
    /// At this time (Unix milliseconds); a time in the past means now, one past
    /// [`LAST_DUE_MS`](super::LAST_DUE_MS) (the year 2096) is refused.
    AtUnixMs(u64),
}

impl SendMessage {
    /// A message with this body and the queue's delay.
    pub fn new(body: impl Into<Vec<u8>>) -> Self {
        SendMessage {
            body: body.into(),
            when: When::QueueDelay,
            priority: 0,
            unique: None,
            keyed: None,
        }
    }

    /// Makes the message unique in its queue by a key. Defaults to not unique.
    pub fn unique(mut self, unique: super::Unique) -> Self {
        self.unique = Some(unique);
        self
    }

    /// Runs at most N at a time with the messages of its key. Defaults to no key.
    pub fn keyed(mut self, keyed: super::Keyed) -> Self {
        self.keyed = Some(keyed);
        self
    }

    /// Runs before due messages of lower priority. Defaults to 0.
    pub fn priority(mut self, priority: i8) -> Self {
        self.priority = priority;
        self
    }

    /// Becomes visible after `d` instead of the queue's delay. Defaults to the queue's delay.
    pub fn delay(mut self, d: Duration) -> Self {
        self.when = When::After(d);
        self
    }

    /// Becomes visible at `unix_ms`. Defaults to the queue's delay.
    pub fn at_unix_ms(mut self, unix_ms: u64) -> Self {
        self.when = When::AtUnixMs(unix_ms);
        self
    }
}
