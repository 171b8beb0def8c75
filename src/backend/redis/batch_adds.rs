//! Jobs added to a batch while it runs, and cancelling a batch, on Redis.
//!
//! An addition is three steps across two slots. `batch_add.lua` grows the
//! batch's total (so it cannot complete before the added jobs finish), takes
//! their indexes from its `next` and keeps the jobs in its `:adds` hash;
//! then the adder sends them, one call per queue and priority, each with a
//! once mark (`<batch>:a<first index>`) in its queue, and forgets them (the
//! marks aged to go an hour later). A sweep mark recorded before the first
//! step (`a<batch> <token>`, the jobs kept under that token) lets a worker's
//! sweep send whatever an adder that stopped left kept: sending twice sends
//! once. The sweep drops the mark once it found the token's jobs (or an hour
//! after the token's time), so an adder slow to keep them is not missed.
//! Jobs over their queue's maxsize can never be sent: they leave the
//! batch's total, once per group however often that is tried, and a
//! sweep's resend sends no group that left it (its queue may take it later).

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::{BatchId, BatchRef, closed, no_batch, with_batch};
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
        validate::added_jobs(jobs)?;
        // recorded first: should this caller stop before the jobs are sent,
        // a sweep sends them
        let token = format!(
            "{}.{}",
            now_ms(),
            String::from_utf8_lossy(&crate::id::random_suffix())
        );
        let mark = format!("{id} {token}");
        self.marks(&["a".into(), mark.clone()]).await?;
        let k = self.namespace().batch(id.as_str());
        let mut cmd = scripts::eval(&scripts::BATCH_ADD, &[&k.hash, &k.adds]);
        cmd.arg(jobs.len()).arg(encode_added(jobs)).arg(&token);
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
            s => {
                self.send_added(id, &format!("{s} {token}"), s as u64, jobs, false)
                    .await
            }
        };
        match &sent {
            // a failed send leaves the jobs kept, and the mark for a sweep
            Err(e) if !matches!(e, Error::InvalidValue { .. }) => {}
            // the jobs are sent (or refused): a mark left is a sweep's to drop
            _ => {
                if let Err(e) = self.marks(&["z".into(), mark]).await {
                    tracing::debug!(batch = %id, error = %e, "dropping an addition's sweep mark failed; a sweep drops it");
                }
            }
        }
        sent
    }

    /// Sends the jobs added to batch `id` from index `start` on (kept as
    /// `field`), each group once, then forgets them: a group over its
    /// queue's maxsize leaves the batch's total instead (the first such
    /// error is returned once the others are sent). A `resend` (a sweep's,
    /// of jobs an adder left kept) sends no group that left the total
    /// already (its "u<first index>" in the batch's hash, see batch.lua),
    /// though its queue would take it now (its maxsize raised): it would run
    /// uncounted in the total, and its finish could complete the batch (and
    /// run a flow's parent) before the batch's other jobs finished.
    async fn send_added(
        &self,
        id: &BatchId,
        field: &str,
        start: u64,
        jobs: &[(String, SendMessage)],
        resend: bool,
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
        if resend {
            let k = self.namespace().batch(id.as_str());
            let fields: Vec<String> = groups.iter().map(|g| format!("u{}", g.2)).collect();
            let left: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(&k.hash)
                .arg(&fields)
                .query_async(&mut self.connection())
                .await?;
            let mut left = left.into_iter();
            groups.retain(|_| left.next().flatten().is_none());
        }
        let mut refused = None;
        for (queue, priority, first, bodies) in &groups {
            let mark = format!("{id}:a{first}");
            let refs: Vec<&[u8]> = bodies.iter().map(|b| &b[..]).collect();
            let sent =
                crate::contract::backend::creating(self, queue, &QueueOptions::default(), || {
                    self.send_marked(queue, &refs, *priority, &mark, None)
                })
                .await;
            match sent {
                Ok(_) => {}
                Err(Error::InvalidValue { reason, .. }) => {
                    tracing::error!(batch = %id, queue, %reason, "jobs added to a batch that cannot be sent leave it");
                    let n = bodies.len().to_string();
                    if let Some(r) = self.batch_call(id, "u", &[n, first.to_string()]).await? {
                        self.fire(id, r).await?;
                    }
                    refused.get_or_insert(Error::InvalidValue {
                        what: "job added to a batch",
                        reason,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        // sent: what is left is tidying, which a failure does not undo
        let k = self.namespace().batch(id.as_str());
        let forgot: redis::RedisResult<i64> = redis::cmd("HDEL")
            .arg(&k.adds)
            .arg(field)
            .query_async(&mut self.connection())
            .await;
        if let Err(e) = forgot {
            tracing::debug!(batch = %id, error = %e, "forgetting jobs added and sent failed; a sweep finds them sent");
            return refused.map_or(Ok(()), Err);
        }
        // their once marks are needed only while they may be sent again:
        // aged to go an hour from now (send.lua drops those over 7 days)
        let aged = now_ms().saturating_sub(7 * 24 * 3600 * 1000 - 3600 * 1000);
        for (queue, _, first, _) in &groups {
            let (mut con, q) = self.parts(queue);
            let r: redis::RedisResult<i64> = redis::cmd("ZADD")
                .arg(&q.once)
                .arg("XX")
                .arg(aged)
                .arg(format!("{id}:a{first}"))
                .query_async(&mut con)
                .await;
            if let Err(e) = r {
                tracing::debug!(batch = %id, queue, error = %e, "ageing an addition's once mark failed; it goes in 7 days");
            }
        }
        refused.map_or(Ok(()), Err)
    }

    /// Sends every addition to batch `id` still kept (its adder stopped
    /// before it was sent, or is slow: sending twice sends once); returns
    /// whether the jobs kept under `token` were among them.
    pub(super) async fn resend_added(&self, id: &BatchId, token: &str) -> Result<bool> {
        let k = self.namespace().batch(id.as_str());
        let mut cursor = 0u64;
        let mut seen = false;
        loop {
            let (next, pairs): (u64, Vec<(String, Vec<u8>)>) = redis::cmd("HSCAN")
                .arg(&k.adds)
                .arg(cursor)
                .arg("COUNT")
                .arg(100)
                .query_async(&mut self.connection())
                .await?;
            for (field, raw) in pairs {
                let (start, of) = field.split_once(' ').unwrap_or((&field, ""));
                seen |= of == token;
                match (start.parse::<u64>(), decode_added(&raw)) {
                    (Ok(start), Some(jobs)) => {
                        tracing::warn!(batch = %id, jobs = jobs.len(), "sending jobs added to a batch that their adder left unsent");
                        match self.send_added(id, &field, start, &jobs, true).await {
                            Ok(()) | Err(Error::InvalidValue { .. }) => {}
                            Err(e) => return Err(e),
                        }
                    }
                    _ => {
                        // never written so: nothing can send it
                        tracing::error!(batch = %id, field, "unreadable jobs added to a batch are dropped; the batch cannot complete");
                        let _: i64 = redis::cmd("HDEL")
                            .arg(&k.adds)
                            .arg(&field)
                            .query_async(&mut self.connection())
                            .await?;
                    }
                }
            }
            if next == 0 {
                return Ok(seen);
            }
            cursor = next;
        }
    }

    /// A sweep's turn at additions mark `raw` (`<batch id> <token>`): sends
    /// what is kept, then drops the mark once its token's jobs were found
    /// (or it is an hour old), else looks again 10 s later.
    pub(super) async fn sweep_added(&self, raw: &str) {
        let (id, token) = raw.split_once(' ').unwrap_or((raw, ""));
        let Ok(id) = id.parse::<BatchId>() else {
            let _ = self.marks(&["z".into(), raw.to_string()]).await;
            return;
        };
        let made = token
            .split('.')
            .next()
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0);
        let done = match self.resend_added(&id, token).await {
            Ok(seen) => seen || now_ms().saturating_sub(made) > 3600 * 1000,
            Err(e) => {
                tracing::warn!(batch = %id, error = %e, "sending jobs added to a batch failed; a sweep tries again");
                false
            }
        };
        let what = if done { "z" } else { "a" };
        if let Err(e) = self.marks(&[what.into(), raw.to_string()]).await {
            tracing::warn!(batch = %id, error = %e, "updating an addition's sweep mark failed");
        }
    }

    pub(super) async fn cancel_batch(&self, id: &BatchId) -> Result<bool> {
        // recorded first: should the flow's parent the cancel makes due not
        // be failed here, a sweep fails it (and lists the batch)
        self.marks(&["d".into(), id.to_string()]).await?;
        // workers learn it first (again when a cancel is retried), before the
        // batch says it: a list refused (Redis out of memory) leaves the batch
        // as it was, rather than saying it cancelled while its jobs run
        let Some(before) = self.batch_call::<String>(id, "r", &[]).await? else {
            self.marks(&["y".into(), id.to_string()]).await?;
            return Ok(false);
        };
        if before.status.completed_ms.is_none() {
            self.list_cancelled(id).await?;
        }
        let Some(r) = self.batch_call::<String>(id, "k", &[]).await? else {
            self.marks(&["y".into(), id.to_string()]).await?;
            return Ok(false);
        };
        if r.status.cancelled_at_ms.is_none() {
            // it completed between the read and the cancel, which left it
            // so: not cancelled, so not listed (workers would cancel a job
            // of it run again, a dead letter requeued, for a week)
            let _: i64 = redis::cmd("ZREM")
                .arg(self.namespace().cancelled_batches())
                .arg(id.as_str())
                .query_async(&mut self.connection())
                .await?;
        }
        let now = r.cancelled_now;
        match self.fire(id, r).await {
            Ok(()) => {
                self.marks(&["y".into(), id.to_string()]).await?;
            }
            Err(e) => {
                tracing::warn!(batch = %id, error = %e, "failing a cancelled flow's parent failed; a worker's sweep does it");
            }
        }
        Ok(now)
    }

    /// Lists batch `id` as cancelled for workers (`cancel_list.lua`).
    pub(super) async fn list_cancelled(&self, id: &BatchId) -> Result<()> {
        let key = self.namespace().cancelled_batches();
        let mut cmd = scripts::eval(&scripts::CANCEL_LIST, &[&key]);
        cmd.arg(id.as_str());
        scripts::run(&mut self.connection(), &scripts::CANCEL_LIST, &cmd).await?;
        Ok(())
    }

    pub(super) async fn cancelled_batches(&self, after: u64) -> Result<Vec<(BatchId, u64)>> {
        let rows: Vec<(String, u64)> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.namespace().cancelled_batches())
            .arg(format!("({after}"))
            .arg("+inf")
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(1000)
            .query_async(&mut self.connection())
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, at)| Some((id.parse().ok()?, at)))
            .collect())
    }
}

/// This machine's clock, Unix ms (for marks whose times need no more).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
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
