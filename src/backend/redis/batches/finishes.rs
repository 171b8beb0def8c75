//! Counting finishes in their batches: those a settle, a cancel or a delete
//! entered in their queue's `ns:q:bout`, and those a worker left uncounted.

use std::collections::BTreeMap;

use redis::Value;

use super::{Entered, text};
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::BatchId;
use crate::{Error, Result};

/// How old a finish in `ns:q:bout` must be for a recovery to count it (a
/// fetch reports them once older than its lease, at least this).
const STALE_MS: u64 = 5_000;

impl Rsmq {
    /// Applies finishes of `queue` (`<batch id> <index><how>,...`, as
    /// complete.lua enters them) to their batches and fires what fell due,
    /// each batch apart: returns the finishes of the batches that failed
    /// (to be kept for a later try). The finishes the flows' parents it
    /// fails enter go to `later`.
    async fn apply<'m>(
        &self,
        queue: &str,
        members: &'m [String],
        later: &mut Entered,
    ) -> Vec<&'m String> {
        // the results some finishes keep apart ("<index>r", in ns:q:bres)
        let fields: Vec<String> = members
            .iter()
            .filter_map(|m| m.split_once(' '))
            .flat_map(|(b, parts)| {
                parts
                    .split(',')
                    .filter_map(|p| p.strip_suffix('r'))
                    .filter(|i| !i.is_empty() && i.bytes().all(|c| c.is_ascii_digit()))
                    .map(move |i| format!("{b} {i}"))
            })
            .collect();
        let mut results: std::collections::HashMap<String, Vec<u8>> = Default::default();
        if !fields.is_empty() {
            let (mut con, k) = self.parts(queue);
            let got: redis::RedisResult<Vec<Option<Vec<u8>>>> = redis::cmd("HMGET")
                .arg(&k.bres)
                .arg(&fields)
                .query_async(&mut con)
                .await;
            match got {
                Ok(vals) => results.extend(
                    fields
                        .into_iter()
                        .zip(vals)
                        .filter_map(|(f, v)| Some((f, v?))),
                ),
                Err(e) => {
                    tracing::warn!(queue, error = %e, "reading batch results failed; kept for a later try");
                    return members.iter().collect();
                }
            }
        }
        // by batch: its finishes, the results its "r" finishes carry (in
        // order), and the members they came from
        type Group<'m> = (String, Vec<Vec<u8>>, Vec<&'m String>);
        let mut by_batch: BTreeMap<BatchId, Group<'m>> = BTreeMap::new();
        for m in members {
            let Some((b, parts)) = m.split_once(' ') else {
                continue;
            };
            let Ok(id) = b.parse::<BatchId>() else {
                continue;
            };
            let (all, res, of) = by_batch.entry(id).or_default();
            for part in parts.split(',') {
                if !all.is_empty() {
                    all.push(',');
                }
                match part.strip_suffix('r') {
                    Some(i) if !i.is_empty() && i.bytes().all(|c| c.is_ascii_digit()) => {
                        match results.remove(&format!("{b} {i}")) {
                            Some(r) => {
                                all.push_str(part);
                                res.push(r);
                            }
                            None => {
                                all.push_str(i);
                                all.push('a');
                            }
                        }
                    }
                    _ => all.push_str(part),
                }
            }
            of.push(m);
        }
        let mut failed = Vec::new();
        for (id, (parts, res, of)) in by_batch {
            let mut args = vec![parts.into_bytes(), queue.as_bytes().to_vec()];
            args.extend(res);
            let done = match self.batch_call(&id, "a", &args).await {
                Ok(Some(r)) => {
                    if r.foreign > 0 {
                        tracing::warn!(batch = %id, queue, finishes = r.foreign, "finishes of jobs naming an index their batch never gave out are not counted");
                    }
                    self.fire_step(&id, r, later).await
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = done {
                tracing::warn!(batch = %id, queue, error = %e, "counting a batch's finishes failed; kept for a later try");
                failed.extend(of);
            }
        }
        failed
    }

    /// bout.lua: whether finishes are left after the call, and those read.
    async fn bout(&self, queue: &str, what: &str, args: &[String]) -> Result<(bool, Vec<String>)> {
        let (mut con, k) = self.parts(queue);
        let mut cmd = scripts::eval(&scripts::BOUT, &[&k.hash, &k.bout, &k.bres]);
        cmd.arg(what).arg(args);
        match scripts::run(&mut con, &scripts::BOUT, &cmd).await? {
            Value::Array(items) => {
                let left = text(items.first()) == "1";
                Ok((left, items.iter().skip(1).map(|v| text(Some(v))).collect()))
            }
            v => Err(Error::Protocol(format!("bout reply {v:?}"))),
        }
    }

    pub(crate) async fn settled_batches(&self, queue: &str, members: &[String]) -> Result<()> {
        let mut later = Entered::default();
        let settled = self.settle_once(queue, members, &mut later).await;
        self.cascade(later).await;
        settled
    }

    /// [`settled_batches`](Self::settled_batches) without counting the
    /// finishes the parents it fails enter: added to `later`.
    pub(super) async fn settle_once(
        &self,
        queue: &str,
        members: &[String],
        later: &mut Entered,
    ) -> Result<()> {
        if members.is_empty() {
            return Ok(());
        }
        let failed = self.apply(queue, members, later).await;
        let done: Vec<String> = members
            .iter()
            .filter(|m| !failed.contains(m))
            .cloned()
            .collect();
        if !done.is_empty() {
            self.bout(queue, "d", &done).await?;
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Error::Protocol(format!(
                "{} batch finishes of queue {queue:?} not counted yet; kept for a later try",
                failed.len()
            )))
        }
    }

    /// Counts the finishes a cancel or a delete entered (its reply's
    /// `members`), the queue marked first: should the count not come, a
    /// sweep (or a later fetch) makes it.
    pub(crate) async fn count_removed(&self, queue: &str, members: &[Value]) {
        let members: Vec<String> = members
            .iter()
            .filter_map(|v| match v {
                Value::BulkString(m) => Some(String::from_utf8_lossy(m).into_owned()),
                _ => None,
            })
            .collect();
        if members.is_empty() {
            return;
        }
        let marked = self
            .mark_batches(queue, std::time::Duration::from_secs(10))
            .await;
        if let Err(e) = marked.and(self.settled_batches(queue, &members).await) {
            tracing::warn!(queue, error = %e, "counting removed jobs in their batches failed; a sweep or a later fetch counts them");
        }
    }

    /// Counts `queue`'s finishes entered over `STALE_MS` ago; returns
    /// whether any finish is left.
    pub(crate) async fn recover_batches(&self, queue: &str) -> Result<bool> {
        let (left, old) = self.bout(queue, "r", &[STALE_MS.to_string()]).await?;
        if old.is_empty() {
            return Ok(left);
        }
        tracing::warn!(
            queue,
            finishes = old.len(),
            "counting batch finishes a worker left uncounted"
        );
        let mut later = Entered::default();
        let failed = self.apply(queue, &old, &mut later).await;
        let done: Vec<String> = old
            .iter()
            .filter(|m| !failed.contains(m))
            .cloned()
            .collect();
        let left = if done.is_empty() {
            Ok(true)
        } else {
            self.bout(queue, "d", &done).await.map(|(left, _)| left)
        };
        self.cascade(later).await;
        left
    }
}
