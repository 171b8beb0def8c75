//! Messages that run at most N at a time per key, across the fleet.

use crate::{Error, Result};

/// The longest concurrency key, in bytes.
pub const MAX_CONCURRENCY_KEY: usize = 256;

/// The most jobs of one key that may run at once ([`Keyed::per_key`]).
pub const MAX_PER_KEY: u32 = 1000;

/// Runs a sent message at most [`per_key`](Self::per_key) at a time with the
/// others of its key, across every worker of the queue, in order of due time
/// within the key; messages of other keys run meanwhile.
///
/// A queue keeps up to `per_key` messages of a key where workers (and RSMQ
/// clients) see them, and the key's others apart, outside RSMQ's sorted set:
/// when one of those leaves (acked, dead-lettered, deleted, cancelled) or goes
/// back to wait for a retry, the next due one of its key takes its place. So
/// however many messages wait behind one key, a fetch reads only what may run.
/// A message without a key (an RSMQ client's, or one sent without) is not
/// held back by any key. The holders of a key keep their places while they
/// wait for a retry only while no message of the key is due before them.
///
/// `per_key` is the send's: the last send of a key sets it for the key.
///
/// ```
/// use redjob::queue::{Keyed, SendMessage};
///
/// let msg = SendMessage::new("charge card").keyed(Keyed::new("account:42"));
/// let keyed = msg.keyed.unwrap();
/// assert_eq!((&keyed.key[..], keyed.per_key), ("account:42", 1));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Keyed {
    /// The key: 1 to [`MAX_CONCURRENCY_KEY`] bytes, no NUL byte.
    pub key: String,
    /// How many of the key's messages may run at once, 1 to [`MAX_PER_KEY`].
    /// Defaults to 1: one at a time.
    pub per_key: u32,
}

impl Keyed {
    /// Keyed by `key`, one at a time.
    pub fn new(key: impl Into<String>) -> Self {
        Keyed {
            key: key.into(),
            per_key: 1,
        }
    }

    /// How many of the key's messages may run at once. Defaults to 1.
    pub fn per_key(mut self, n: u32) -> Self {
        self.per_key = n;
        self
    }

    /// As dead letters and the history keep it: `<per key> <key>`.
    pub(crate) fn encode(&self) -> String {
        format!("{} {}", self.per_key, self.key)
    }

    /// [`encode`](Self::encode)'s text read back; `None` when it is not one.
    pub(crate) fn decode(text: &[u8]) -> Option<Keyed> {
        let text = std::str::from_utf8(text).ok()?;
        let (per, key) = text.split_once(' ')?;
        let per_key = per.parse::<u32>().ok()?.clamp(1, MAX_PER_KEY);
        (!key.is_empty()).then(|| Keyed {
            key: key.to_string(),
            per_key,
        })
    }

    /// Checks the key and `per_key`.
    pub(crate) fn check(&self) -> Result<()> {
        if self.key.is_empty() || self.key.len() > MAX_CONCURRENCY_KEY {
            return Err(Error::InvalidValue {
                what: "concurrency key",
                reason: format!(
                    "{} bytes: a key takes 1 to {MAX_CONCURRENCY_KEY}",
                    self.key.len()
                ),
            });
        }
        if self.key.contains('\0') {
            return Err(Error::InvalidValue {
                what: "concurrency key",
                reason: "it contains a NUL byte".into(),
            });
        }
        if self.per_key == 0 || self.per_key > MAX_PER_KEY {
            return Err(Error::InvalidValue {
                what: "per_key",
                reason: format!("{}: it takes 1 to {MAX_PER_KEY}", self.per_key),
            });
        }
        Ok(())
    }
}
