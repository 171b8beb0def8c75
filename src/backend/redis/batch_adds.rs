//! Jobs added to a batch while it runs, and cancelling a batch, on Redis.
//!
//! An addition is three steps across two slots. `batch_add.lua` grows the
//! batch's total (so it cannot complete before the added jobs finish), takes
//! their indexes from its `next` and keeps the jobs in its `:adds` hash;
//! then the adder sends them, one call per queue and priority, each with a
//! once mark (`<batch>:a<first index>`) in its queue, and forgets them. A
//! sweep mark recorded before the first step (`a<batch> <token>`) lets a
//! worker's sweep send whatever an adder that stopped left kept: sending
//! twice sends once. Jobs over their queue's maxsize can never be sent: they
//! leave the batch's total, once per group however often that is tried.

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::{BatchId, BatchRef, MAX_ADD, closed, no_batch, with_batch};
use crate::contract::queues::{QueueOptions, SendMessage, validate};
use crate::{Error, Result};

/// Jobs added, grouped by queue and priority in order of first index: the
/// queue, the priority, the group's first index and its bodies.
type Group = (String, i8, u64, Vec<Vec<u8>>);

impl Rsmq {
    pub(super) async fn add_to_batch(
        &self,
        id: &BatchId,
        jobs: &[(String, SendMessage)],
    ) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        if jobs.len() > MAX_ADD {
            return Err(Error::InvalidValue {
                what: "jobs added to a batch",
                reason: format!("{} in one call; at most {MAX_ADD}", jobs.len()),
            });
        }
        for (q, _) in jobs {
            validate::queue_name(q)?;
        }
        // recorded first: should this caller stop before the jobs are sent,
        // a sweep sends them
        let suffix = crate::id::random_suffix();
        let mark = format!("{id} {}", String::from_utf8_lossy(&suffix));
        self.marks(&["a".into(), mark.clone()]).await?;
        let k = self.namespace().batch(id.as_str());
        let mut cmd = scripts::eval(&scripts::BATCH_ADD, &[&k.hash, &k.adds]);
        cmd.arg(jobs.len()).arg(encode_added(jobs));
        let start =
            scripts::int(&scripts::run(&mut self.connection(), &scripts::BATCH_ADD, &cmd).await?)?;
        let sent = match start {
            -1 => Err(no_batch(id)),
            -2 => Err(closed(id, "it completed")),
            -3 => Err(closed(id, "it was cancelled")),
            s if s < 0 => Err(closed(
                id,
                "it was opened by an older redjob and its enqueue has not finished",
            )),
            s => self.send_added(id, s as u64, jobs).await,
        };
        match &sent {
            // a failed send leaves the jobs kept, and the mark for a sweep
            Err(e) if !matches!(e, Error::InvalidValue { .. }) => {}
            _ => {
                self.marks(&["z".into(), mark]).await?;
            }
        }
        sent
    }

    /// Sends the jobs added to batch `id` from index `start` on, each group
    /// once, then forgets them: a group over its queue's maxsize leaves the
    /// batch's total instead (the first such error is returned once the
    /// others are sent).
    async fn send_added(
        &self,
        id: &BatchId,
        start: u64,
        jobs: &[(String, SendMessage)],
    ) -> Result<()> {
        let mut groups: Vec<Group> = Vec::new();
        for (i, (queue, msg)) in jobs.iter().enumerate() {
            let index = start + i as u64;
            let body = with_batch(&msg.body, &BatchRef { batch: *id, index });
            match groups
                .iter_mut()
                .find(|(q, p, _, _)| q == queue && *p == msg.priority)
            {
                Some(g) => g.3.push(body),
                None => groups.push((queue.clone(), msg.priority, index, vec![body])),
            }
        }
        let mut refused = None;
        for (queue, priority, first, bodies) in groups {
            let mark = format!("{id}:a{first}");
            let refs: Vec<&[u8]> = bodies.iter().map(|b| &b[..]).collect();
            let sent =
                crate::contract::backend::creating(self, &queue, &QueueOptions::default(), || {
                    self.send_marked(&queue, &refs, priority, &mark, None)
                })
                .await;
            match sent {
                Ok(()) => {}
                Err(e @ Error::InvalidValue { .. }) => {
                    tracing::error!(batch = %id, queue, error = %e, "jobs added to a batch that cannot be sent leave it");
                    let n = bodies.len().to_string();
                    if let Some(r) = self.batch_call(id, "u", &[n, first.to_string()]).await? {
                        self.fire(id, r).await?;
                    }
                    refused.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        let k = self.namespace().batch(id.as_str());
        let _: i64 = redis::cmd("HDEL")
            .arg(&k.adds)
            .arg(start)
            .query_async(&mut self.connection())
            .await?;
        refused.map_or(Ok(()), Err)
    }

    /// Sends every addition to batch `id` still kept (its adder stopped
    /// before it was sent, or is slow: sending twice sends once).
    pub(super) async fn resend_added(&self, id: &BatchId) -> Result<()> {
        let k = self.namespace().batch(id.as_str());
        let mut cursor = 0u64;
        loop {
            let (next, pairs): (u64, Vec<(u64, Vec<u8>)>) = redis::cmd("HSCAN")
                .arg(&k.adds)
                .arg(cursor)
                .arg("COUNT")
                .arg(100)
                .query_async(&mut self.connection())
                .await?;
            for (start, raw) in pairs {
                match decode_added(&raw) {
                    Some(jobs) => {
                        tracing::warn!(batch = %id, jobs = jobs.len(), "sending jobs added to a batch that their adder left unsent");
                        match self.send_added(id, start, &jobs).await {
                            Ok(()) | Err(Error::InvalidValue { .. }) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    None => {
                        tracing::error!(batch = %id, start, "unreadable jobs added to a batch are dropped");
                    }
                }
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    pub(super) async fn cancel_batch(&self, id: &BatchId) -> Result<bool> {
        Ok(self
            .batch_call::<String>(id, "k", &[])
            .await?
            .is_some_and(|r| r.cancelled_now))
    }
}

/// Jobs added to a running batch, stored until they are sent (Redis keeps
/// them in the batch's slot, so a sweep sends them should their adder
/// stop): each `<queue> <priority> <length>\n<body>`.
pub(super) fn encode_added(jobs: &[(String, SendMessage)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (q, m) in jobs {
        out.extend_from_slice(format!("{q} {} {}\n", m.priority, m.body.len()).as_bytes());
        out.extend_from_slice(&m.body);
    }
    out
}

/// Reads [`encode_added`]'s form; `None` when it is not that.
pub(super) fn decode_added(mut raw: &[u8]) -> Option<Vec<(String, SendMessage)>> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        let nl = raw.iter().position(|&c| c == b'\n')?;
        let head = std::str::from_utf8(&raw[..nl]).ok()?;
        let mut words = head.split(' ');
        let queue = words.next()?.to_string();
        let priority: i8 = words.next()?.parse().ok()?;
        let len: usize = words.next()?.parse().ok()?;
        let body = raw.get(nl + 1..nl + 1 + len)?.to_vec();
        raw = &raw[nl + 1 + len..];
        out.push((
            queue,
            SendMessage {
                body,
                when: crate::contract::queues::When::QueueDelay,
                priority,
                unique: None,
                keyed: None,
            },
        ));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_jobs_read_back_as_stored() {
        let msg = |body: &[u8], priority| SendMessage {
            body: body.to_vec(),
            when: crate::contract::queues::When::QueueDelay,
            priority,
            unique: None,
            keyed: None,
        };
        let jobs = vec![
            ("a".to_string(), msg(b"{\"x\":\"1\\n2\"}", 3)),
            ("b".to_string(), msg(b"", -10)),
        ];
        let back = decode_added(&encode_added(&jobs)).unwrap();
        assert_eq!(back.len(), 2);
        for ((q, m), (bq, bm)) in jobs.iter().zip(&back) {
            assert_eq!((q, &m.body, m.priority), (bq, &bm.body, bm.priority));
        }
        assert!(decode_added(b"a 0 5\nab").is_none());
        assert!(decode_added(b"nonsense").is_none());
    }
}
