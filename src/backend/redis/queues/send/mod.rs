//! Sending to a queue: plain sends (`send.lua`), unique ones (`unique.lua`) and
//! keyed ones (`send_keyed.lua`),
//! chunked and pipelined in one round trip.

mod call;
mod part;
mod pipeline;

pub(super) use call::{Call, Lone};

use std::sync::atomic::Ordering;

use super::{BATCH_BYTES, BATCH_MESSAGES, Rsmq};
use crate::backend::redis::scripts::Reply;
use crate::contract::queues::{MessageId, Queues, SendMessage, Sent, check_send, validate};
use crate::{Error, JobId, Result};

impl Rsmq {
    /// Sends one message; returns its id.
    pub async fn send(&self, queue: &str, msg: SendMessage) -> Result<MessageId> {
        Queues::send(self, queue, msg).await
    }

    /// Sends messages in one round trip: one script call per chunk of up to 1000
    /// messages (4 MiB) of one priority (a change of priority starts a chunk: send
    /// a batch sorted by priority), all chunks pipelined (a send of over 16
    /// chunks in pipelines of 16, one after another, each within the
    /// response timeout). Either every message is
    /// sent or, when the queue is missing or a body exceeds its maxsize, none is
    /// (the maxsize as a call of the send that stored its messages found it: a
    /// send whose queue's maxsize another client changes meanwhile is still
    /// sent whole).
    /// Returns the ids in the order of `msgs`; ids sort in that order too. A
    /// [unique](crate::queue::Unique) message whose key is held returns the queued
    /// message's id (see [`send_outcomes`](Self::send_outcomes) to tell).
    pub async fn send_batch(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<MessageId>> {
        Queues::send_batch(self, queue, msgs).await
    }

    /// [`send_batch`](Self::send_batch), telling for each message what the send
    /// did: added it, or found its [unique](crate::queue::Unique) key held and kept,
    /// moved or replaced the queued message. Unique messages are sent by another
    /// script than plain ones, in the same round trip: a switch between unique
    /// and plain messages also starts a chunk.
    pub async fn send_outcomes(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<Sent>> {
        validate::queue_name(queue)?;
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        if let [m] = msgs
            && let Some(sent) = self.send_lone(queue, m).await?
        {
            return Ok(vec![sent]);
        }
        let mut ttls = Vec::with_capacity(msgs.len());
        for m in msgs {
            ttls.push(check_send(m)?.unwrap_or(0));
        }
        let maxlen = msgs.iter().map(|m| m.body.len()).max().unwrap_or(0);
        let chunks = chunks_of(msgs);
        // a large send goes in parts of at most PIPELINE_CALLS calls, one
        // pipeline each, one after another: each part's reply comes within the
        // response timeout however large the whole (one pipeline of 100
        // calls to a busy Cluster took longer), and a part that fails leaves
        // those before it known as stored (PartlySent)
        if chunks.len() <= PIPELINE_CALLS {
            let (sent, unconfirmed) = self.send_part(queue, msgs, &ttls, maxlen, &chunks).await?;
            return unconfirmed.map_or(Ok(sent), Err);
        }
        let mut sent: Vec<Sent> = Vec::with_capacity(msgs.len());
        // a part stored but not confirmed by enough replicas: the others go
        // too, and the send says the fewest replicas any part reached (also
        // when a later part fails: PartlySent's not_replicated)
        let mut unconfirmed: Option<Error> = None;
        for calls in chunks.chunks(PIPELINE_CALLS) {
            let (start, end) = (calls[0].0, calls[calls.len() - 1].1);
            let calls: Vec<(usize, usize)> =
                calls.iter().map(|&(a, b)| (a - start, b - start)).collect();
            // the parts after the first stored messages go without the
            // maxsize check, which the first part's calls passed for the
            // whole send's largest body (a send is sent whole, see send_batch)
            let maxlen = if sent.is_empty() { maxlen } else { 0 };
            let part = &msgs[start..end];
            match self
                .send_part(queue, part, &ttls[start..end], maxlen, &calls)
                .await
            {
                Ok((these, not_replicated)) => {
                    sent.extend(these);
                    unconfirmed = fewest(unconfirmed, not_replicated);
                }
                // whatever came before it: its places are the whole send's
                Err(Error::PartlySent {
                    stored,
                    error,
                    not_replicated,
                    ..
                }) => {
                    let unconfirmed = fewest(unconfirmed, not_replicated.map(|e| *e));
                    return Err(partly(sent, start, stored, msgs.len(), *error, unconfirmed));
                }
                Err(e) if sent.is_empty() => return Err(e),
                Err(e) => {
                    return Err(partly(sent, start, Vec::new(), msgs.len(), e, unconfirmed));
                }
            }
        }
        unconfirmed.map_or(Ok(sent), Err)
    }

    /// The lone call's form for a queue (`queue_id`): lean while the
    /// handle's last send to it found no worker waiting.
    pub(super) fn lone_form(&self, queue_id: u64) -> Lone {
        if self.lean_queues[lean_slot(queue_id)].load(Ordering::Relaxed) == queue_id {
            Lone::Lean
        } else {
            Lone::HandOff
        }
    }

    /// Whether a send's pipeline starts with a `TIME` (see `run_calls`): a
    /// send with plain messages while the last plain send found a worker
    /// waiting, on one server.
    pub(super) fn time_first(&self, plain: bool) -> bool {
        plain && self.workers_wait.load(Ordering::Relaxed) && !self.ns.is_cluster()
    }

    /// Notes what a plain send's reply said of its queue (`queue_id`):
    /// whether a worker waited for it.
    pub(super) fn note_waited(&self, queue_id: u64, waited: bool) {
        if waited != self.workers_wait.load(Ordering::Relaxed) {
            self.workers_wait.store(waited, Ordering::Relaxed);
        }
        // the queue's slot: its id when no worker waited, and empty when one
        // did (another queue's id stays)
        let slot = &self.lean_queues[lean_slot(queue_id)];
        let held = slot.load(Ordering::Relaxed);
        if !waited && held != queue_id {
            slot.store(queue_id, Ordering::Relaxed);
        } else if waited && held == queue_id {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

/// Most calls of a send in one pipeline (see `send_outcomes`).
const PIPELINE_CALLS: usize = 16;

/// The calls of a send: (start, end) of each one's messages in `msgs`, up
/// to [`BATCH_MESSAGES`] messages and [`BATCH_BYTES`] each, all of one
/// priority and one kind (plain, unique or keyed).
fn chunks_of(msgs: &[SendMessage]) -> Vec<(usize, usize)> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, m) in msgs.iter().enumerate() {
        bytes += m.body.len();
        let end = i + 1;
        let switch = msgs
            .get(end)
            .is_some_and(|n| n.priority != m.priority || kind(n) != kind(m));
        if end - start < BATCH_MESSAGES && bytes < BATCH_BYTES && end < msgs.len() && !switch {
            continue;
        }
        chunks.push((start, end));
        (start, bytes) = (end, 0);
    }
    chunks
}

/// A send whose part starting at `start` failed with `error`, having stored
/// `stored` of its own (their places in the part) after the earlier parts'
/// `sent`, `unconfirmed` the [`Error::NotReplicated`] of the parts that
/// stored them: [`Error::PartlySent`].
fn partly(
    sent: Vec<Sent>,
    start: usize,
    stored: Vec<(usize, JobId)>,
    of: usize,
    error: Error,
    unconfirmed: Option<Error>,
) -> Error {
    let mut all: Vec<(usize, JobId)> = sent.into_iter().map(|s| s.id).enumerate().collect();
    all.extend(stored.into_iter().map(|(at, id)| (start + at, id)));
    Error::PartlySent {
        stored: all,
        of,
        error: Box::new(error),
        not_replicated: unconfirmed.map(Box::new),
    }
}

/// Of two [`Error::NotReplicated`], the one with the fewer replicas (the
/// send says the fewest any of its round trips reached).
fn fewest(a: Option<Error>, b: Option<Error>) -> Option<Error> {
    let replicas = |e: &Option<Error>| match e {
        Some(Error::NotReplicated { replicas, .. }) => Some(*replicas),
        _ => None,
    };
    match (replicas(&a), replicas(&b)) {
        (Some(x), Some(y)) if y < x => b,
        (Some(_), _) => a,
        (None, _) => b,
    }
}

/// What a send's reply with status `code` other than 1 (`r`, the rest of
/// the reply) says went wrong with `queue`.
pub(super) fn refused(code: i64, r: &mut Reply<'_>, queue: &str) -> Error {
    match code {
        -1 => Error::QueueNotFound { name: queue.into() },
        -2 => match (r.int(), r.int()) {
            (Ok(size), Ok(max)) => Error::MessageTooLarge {
                size: size as usize,
                max: max as usize,
            },
            (Err(e), _) | (_, Err(e)) => e,
        },
        c => Error::Protocol(format!("send status {c}")),
    }
}

/// Which script sends a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Unique,
    Keyed,
}

fn kind(m: &SendMessage) -> Kind {
    match (&m.unique, &m.keyed) {
        (Some(_), _) => Kind::Unique,
        (None, Some(_)) => Kind::Keyed,
        (None, None) => Kind::Plain,
    }
}

/// A queue's name as `Rsmq::lean_queues` keeps it: a hash, never 0. Two
/// names of one hash would only make a send to the second lean while a
/// worker waits on it, which the lean call wakes.
pub(super) fn queue_id(queue: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    queue.hash(&mut h);
    h.finish() | 1
}

/// The slot of `Rsmq::lean_queues` a queue's id takes.
fn lean_slot(queue_id: u64) -> usize {
    // (the id's lowest bit is always set)
    ((queue_id >> 1) % super::LEAN_SLOTS as u64) as usize
}
