//! Sending to a queue: plain sends (`send.lua`) and unique ones (`unique.lua`),
//! chunked and pipelined in one round trip.

use std::sync::atomic::AtomicBool;

use super::validate;
use super::{BATCH_BYTES, BATCH_MESSAGES, MessageId, Rsmq, SendMessage, SendOutcome, Sent, When};
use crate::backend::redis::scripts::{self, Reply};
use crate::id::sorted_random_suffixes;
use crate::{Error, JobId, Result};

impl Rsmq {
    /// Sends one message; returns its id.
    pub async fn send(&self, queue: &str, msg: SendMessage) -> Result<MessageId> {
        let ids = self.send_batch(queue, std::slice::from_ref(&msg)).await?;
        ids.into_iter()
            .next()
            .ok_or_else(|| Error::Protocol("send returned no id".into()))
    }

    /// Sends messages in one round trip: one script call per chunk of up to 1000
    /// messages (4 MiB) of one priority (a change of priority starts a chunk: send
    /// a batch sorted by priority), all chunks pipelined. Either every message is
    /// sent or, when the queue is missing or a body exceeds its maxsize, none is.
    /// Returns the ids in the order of `msgs`; ids sort in that order too. A
    /// [unique](super::Unique) message whose key is held returns the queued
    /// message's id (see [`send_outcomes`](Self::send_outcomes) to tell).
    pub async fn send_batch(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<MessageId>> {
        Ok(self
            .send_outcomes(queue, msgs)
            .await?
            .into_iter()
            .map(|s| s.id)
            .collect())
    }

    /// [`send_batch`](Self::send_batch), telling for each message what the send
    /// did: added it, or found its [unique](super::Unique) key held and kept,
    /// moved or replaced the queued message. Unique messages are sent by another
    /// script than plain ones, in the same round trip: a switch between unique
    /// and plain messages also starts a chunk.
    pub async fn send_outcomes(&self, queue: &str, msgs: &[SendMessage]) -> Result<Vec<Sent>> {
        validate::queue_name(queue)?;
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        let mut ttls = Vec::with_capacity(msgs.len());
        for m in msgs {
            validate::priority(m.priority)?;
            if let When::After(d) = m.when {
                validate::delay_ms(d)?;
            }
            if let Some(u) = &m.unique {
                ttls.push(u.check()?);
            }
        }
        let k = self.ns.queue(queue);
        let always = if self.realtime { "1" } else { "0" };
        let maxlen = msgs.iter().map(|m| m.body.len()).max().unwrap_or(0);
        let mut pipe = redis::pipe();
        // ascending suffixes within each call, so that a batch's ids (one prefix of
        // Redis microseconds per call) sort in send order
        let mut suffixes: Vec<[u8; 22]> = Vec::with_capacity(msgs.len());
        // (messages, unique) per call
        let mut chunks = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        let mut ttls = ttls.into_iter();
        for (i, m) in msgs.iter().enumerate() {
            bytes += m.body.len();
            let end = i + 1;
            let unique = m.unique.is_some();
            // a call sends at one priority, either plain or unique messages
            let switch = msgs
                .get(end)
                .is_some_and(|n| n.priority != m.priority || n.unique.is_some() != unique);
            if end - start < BATCH_MESSAGES && bytes < BATCH_BYTES && end < msgs.len() && !switch {
                continue;
            }
            let mut cmd = if unique {
                scripts::eval(&scripts::UNIQUE, &k.all_levels_unique())
            } else {
                scripts::eval(&scripts::SEND, &[&k.level(m.priority), &k.hash])
            };
            cmd.arg(&k.realtime).arg(always).arg(maxlen).arg(m.priority);
            let first = suffixes.len();
            suffixes.extend(sorted_random_suffixes(end - start));
            for (m, suffix) in msgs[start..end].iter().zip(&suffixes[first..]) {
                cmd.arg(&suffix[..]);
                match m.when {
                    When::QueueDelay => cmd.arg(""),
                    When::After(d) => cmd.arg(format!("d{}", d.as_millis())),
                    When::AtUnixMs(ms) => cmd.arg(format!("a{ms}")),
                };
                cmd.arg(&m.body[..]);
                if let Some(u) = &m.unique {
                    cmd.arg(&u.key)
                        .arg(u.on_duplicate.code())
                        .arg(ttls.next().unwrap_or(0));
                }
            }
            pipe.add_command(cmd);
            chunks.push((end - start, unique));
            (start, bytes) = (end, 0);
        }
        let uses_unique = chunks.iter().any(|c| c.1);
        let uses_send = chunks.iter().any(|c| !c.1);
        let mut used: Vec<(&redis::Script, &AtomicBool)> = Vec::new();
        if uses_send {
            used.push((&scripts::SEND, &self.send_loaded));
        }
        if uses_unique {
            used.push((&scripts::UNIQUE, &self.unique_loaded));
        }
        let replies = scripts::run_pipeline(&mut self.con.clone(), &used, &pipe).await?;
        let mut sent = Vec::with_capacity(msgs.len());
        let mut suffixes = suffixes.iter();
        for (v, (n, unique)) in replies.iter().zip(chunks) {
            let (code, mut r) = Reply::status(v)?;
            match code {
                1 => {
                    let prefix = r.bytes()?;
                    for suffix in suffixes.by_ref().take(n) {
                        let new = JobId::from_parts(prefix, suffix)?;
                        if !unique {
                            sent.push(Sent::added(new));
                            continue;
                        }
                        let outcome = SendOutcome::from_code(r.int()?)?;
                        let held = r.bytes()?;
                        let id = if outcome.is_added() {
                            new
                        } else {
                            std::str::from_utf8(held)
                                .map_err(|_| Error::Protocol(format!("unique send id {held:?}")))?
                                .parse()?
                        };
                        sent.push(Sent { id, outcome });
                    }
                }
                -1 => return Err(Error::QueueNotFound { name: queue.into() }),
                -2 => {
                    let size = r.int()? as usize;
                    let max = r.int()? as usize;
                    return Err(Error::MessageTooLarge { size, max });
                }
                c => return Err(Error::Protocol(format!("send status {c}"))),
            }
        }
        if sent.len() != msgs.len() {
            return Err(Error::Protocol(format!(
                "send returned {} ids for {} messages",
                sent.len(),
                msgs.len()
            )));
        }
        Ok(sent)
    }
}
