//! Messages unique in their queue by a key.

use std::time::Duration;

use super::MessageId;
use crate::{Error, Result};

/// The longest unique key, in bytes.
pub const MAX_UNIQUE_KEY: usize = 512;

/// Makes a sent message unique in its queue: while a message sent with the same
/// key is still in the queue (waiting, scheduled, leased, or waiting for a retry),
/// another send with the key is a duplicate and follows
/// [`on_duplicate`](Self::on_duplicate) instead of adding a message. The key is
/// free again once that message leaves the queue (acked, dead-lettered, deleted,
/// popped), or once its [`ttl`](Self::ttl) runs out.
///
/// ```
/// use std::time::Duration;
/// use redjob::queue::{OnDuplicate, SendMessage, Unique};
///
/// let msg = SendMessage::new("refresh 42")
///     .delay(Duration::from_secs(10))
///     .unique(Unique::new("refresh:42").on_duplicate(OnDuplicate::ReplaceDelay));
/// assert_eq!(msg.unique.unwrap().key, "refresh:42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    /// The key: 1 to [`MAX_UNIQUE_KEY`] bytes, unique within the queue.
    pub key: String,
    /// What a duplicate send does. Defaults to [`OnDuplicate::Keep`].
    pub on_duplicate: OnDuplicate,
    /// How long the key is held at most, from the send that took it (or last
    /// changed its message). Defaults to `None`: until the message leaves the queue.
    pub ttl: Option<Duration>,
}

impl Unique {
    /// Unique by `key`, keeping the first message, for as long as it is queued.
    pub fn new(key: impl Into<String>) -> Self {
        Unique {
            key: key.into(),
            on_duplicate: OnDuplicate::Keep,
            ttl: None,
        }
    }

    /// What a duplicate send does. Defaults to [`OnDuplicate::Keep`].
    pub fn on_duplicate(mut self, policy: OnDuplicate) -> Self {
        self.on_duplicate = policy;
        self
    }

    /// Holds the key at most this long (in whole milliseconds: a part of one
    /// rounds up). Defaults to until the message leaves the queue.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Checks the key and the ttl; returns the ttl in ms (0 for none).
    pub(crate) fn check(&self) -> Result<u64> {
        if self.key.is_empty() || self.key.len() > MAX_UNIQUE_KEY {
            return Err(Error::InvalidValue {
                what: "unique key",
                reason: format!(
                    "{} bytes: a key takes 1 to {MAX_UNIQUE_KEY}",
                    self.key.len()
                ),
            });
        }
        match self.ttl {
            None => Ok(0),
            Some(d) if d < Duration::from_millis(1) => Err(Error::InvalidValue {
                what: "unique ttl",
                reason: "it must be at least 1 ms; leave it out to hold the key until the message leaves".into(),
            }),
            Some(d) if d > super::MAX_AHEAD => Err(Error::InvalidValue {
                what: "unique ttl",
                reason: format!("{d:?} is more than 50 years (redjob::queue::MAX_AHEAD)"),
            }),
            Some(d) => Ok(super::validate::whole_ms(d)),
        }
    }
}

/// What a send does when its [`Unique`] key is held by a message still in the
/// queue. A replacing policy changes only a message that was never delivered: a
/// message that is running, or waiting for a retry, is kept as it is (the send's
/// outcome is then [`SendOutcome::Duplicate`]).
///
/// ```
/// use redjob::queue::OnDuplicate;
///
/// assert_eq!(OnDuplicate::default(), OnDuplicate::Keep);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnDuplicate {
    /// Changes nothing; the send returns the queued message's id.
    #[default]
    Keep,
    /// Moves the queued message's due time to the new send's (earlier or later);
    /// its body and priority stay.
    ReplaceDelay,
    /// Replaces the queued message's due time, body and priority with the new
    /// send's (a debounce: the last send wins), keeping its id.
    Replace,
}

impl OnDuplicate {
    /// The policy as `#[job(unique = "...")]` spells it: `keep`,
    /// `replace_delay` or `replace`.
    ///
    /// ```
    /// use redjob::queue::OnDuplicate;
    ///
    /// assert_eq!(OnDuplicate::ReplaceDelay.as_str(), "replace_delay");
    /// assert_eq!("replace".parse::<OnDuplicate>().ok(), Some(OnDuplicate::Replace));
    /// assert!("merge".parse::<OnDuplicate>().is_err());
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            OnDuplicate::Keep => "keep",
            OnDuplicate::ReplaceDelay => "replace_delay",
            OnDuplicate::Replace => "replace",
        }
    }

    /// The policy's letter in the unique send script.
    pub(crate) fn code(self) -> &'static str {
        match self {
            OnDuplicate::Keep => "k",
            OnDuplicate::ReplaceDelay => "d",
            OnDuplicate::Replace => "r",
        }
    }
}

impl std::str::FromStr for OnDuplicate {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        [
            OnDuplicate::Keep,
            OnDuplicate::ReplaceDelay,
            OnDuplicate::Replace,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
        .ok_or_else(|| crate::Error::InvalidValue {
            what: "unique policy",
            reason: format!("{s:?}: keep, replace_delay or replace"),
        })
    }
}

/// How long a unique job holds its key: until it is done (the default), or
/// only until its first run starts. A job type chooses with
/// `#[job(unique_until = "start")]`, one enqueue with
/// [`EnqueueOptions::unique_until`](crate::client::EnqueueOptions::unique_until).
///
/// With [`Start`](Self::Start), a worker frees the key as a delivery of the job
/// starts its run, before the handler is called: an enqueue of the key from the
/// handler (a job that schedules its own next run), or while the job runs or
/// waits for a retry, makes a new job. Until a run starts, the key is held as
/// with [`Done`](Self::Done): a duplicate enqueue meets the waiting job. A
/// job enqueued so carries `"unique_until":"start"` as its envelope's last
/// member, which the worker reads as the run starts.
///
/// ```
/// use redjob::queue::UniqueUntil;
///
/// assert_eq!(UniqueUntil::default(), UniqueUntil::Done);
/// assert_eq!(UniqueUntil::Start.as_str(), "start");
/// assert_eq!("done".parse::<UniqueUntil>().ok(), Some(UniqueUntil::Done));
/// assert!("executed".parse::<UniqueUntil>().is_err());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UniqueUntil {
    /// The key is held while the job waits, is scheduled, runs or waits for a
    /// retry, and freed when it succeeds, is dead-lettered, deleted or popped
    /// (or its lifetime, `unique_for`, runs out).
    #[default]
    Done,
    /// The key is held while the job waits or is scheduled, and freed when a
    /// delivery of it starts running (or when it leaves the queue before that,
    /// or its lifetime runs out).
    Start,
}

impl UniqueUntil {
    /// As `#[job(unique_until = "...")]` spells it: `done` or `start`.
    pub fn as_str(self) -> &'static str {
        match self {
            UniqueUntil::Done => "done",
            UniqueUntil::Start => "start",
        }
    }
}

impl std::str::FromStr for UniqueUntil {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        [UniqueUntil::Done, UniqueUntil::Start]
            .into_iter()
            .find(|u| u.as_str() == s)
            .ok_or_else(|| crate::Error::InvalidValue {
                what: "unique until",
                reason: format!("{s:?}: done or start"),
            })
    }
}

/// A message sent by [`Rsmq::send_outcomes`](crate::queue::Rsmq::send_outcomes): its id,
/// and what the send did.
///
/// ```
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::queue::{QueueOptions, Queues, SendMessage, SendOutcome, Unique};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// q.create_queue("reports", QueueOptions::default()).await?;
/// let msg = SendMessage::new("daily").unique(Unique::new("daily-report"));
/// let sent = q.send_outcomes("reports", &[msg.clone(), msg]).await?;
/// assert_eq!(sent[1].outcome, SendOutcome::Duplicate);
/// assert_eq!(sent[0].id, sent[1].id);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Sent {
    /// The message's id: the new message's, or the queued duplicate's.
    pub id: MessageId,
    /// What happened.
    pub outcome: SendOutcome,
}

impl Sent {
    pub(crate) fn added(id: MessageId) -> Self {
        Sent {
            id,
            outcome: SendOutcome::Added,
        }
    }
}

/// What a send did.
///
/// ```
/// use redjob::queue::SendOutcome;
///
/// assert!(SendOutcome::Added.is_added());
/// assert!(!SendOutcome::Duplicate.is_added());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SendOutcome {
    /// A new message was added.
    Added,
    /// Its unique key was held: the queued message was kept unchanged.
    Duplicate,
    /// Its unique key was held: the queued message's due time was moved
    /// ([`OnDuplicate::ReplaceDelay`]).
    Moved,
    /// Its unique key was held: the queued message was replaced
    /// ([`OnDuplicate::Replace`]).
    Replaced,
}

impl SendOutcome {
    /// A new message was added.
    pub fn is_added(self) -> bool {
        self == SendOutcome::Added
    }

    pub(crate) fn from_code(code: i64) -> Result<Self> {
        Ok(match code {
            0 => SendOutcome::Added,
            1 => SendOutcome::Duplicate,
            2 => SendOutcome::Moved,
            3 => SendOutcome::Replaced,
            c => return Err(Error::Protocol(format!("unique send outcome {c}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_ttls_are_checked() {
        assert_eq!(Unique::new("a").check().unwrap(), 0);
        assert_eq!(
            Unique::new("a")
                .ttl(Duration::from_secs(2))
                .check()
                .unwrap(),
            2000
        );
        for bad in [
            Unique::new(""),
            Unique::new("x".repeat(MAX_UNIQUE_KEY + 1)),
            Unique::new("a").ttl(Duration::ZERO),
            Unique::new("a").ttl(Duration::from_secs(u64::MAX)),
        ] {
            assert!(
                matches!(bad.check(), Err(Error::InvalidValue { .. })),
                "{bad:?}"
            );
        }
        assert!(Unique::new("x".repeat(MAX_UNIQUE_KEY)).check().is_ok());
        // a part of a millisecond rounds up (it was cut: held shorter than asked)
        let ttl = Unique::new("a").ttl(Duration::from_micros(1500)).check();
        assert_eq!(ttl.unwrap(), 2);
    }
}
