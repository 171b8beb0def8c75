//! The index of batches on Redis (`ns:@batches`, `ns:{@batches}` on a
//! Cluster): a sorted set of every batch's id, scored by when it was opened
//! (ms), which pages of [`Backend::batches`](crate::backend::Backend::batches)
//! read newest first.
//!
//! A batch's keys expire a week after it completed (or was cancelled), its
//! entry in the index does not: an entry is of a batch past its retention
//! once its hash is gone. A page skips those, reading further (up to
//! [`LIST_SKIPS`] of them a call, counted by entry) so that it comes back
//! short only when the index holds nothing older or it read past that
//! many, and drops them from the index (a page asked again goes on past
//! the rest); the workers' sweep drops those over a week old, a bounded
//! number a minute ([`Rsmq::trim_batch_index`]). The index is one slot and
//! each batch another, so no script reads them together: the batches are
//! looked up (by `EXISTS` for a trim, by `batch.lua`'s read for a page) in
//! one pipeline a read on a single Redis and side by side on a Cluster
//! (whose pipelines hold one slot).

use futures::StreamExt;

use crate::backend::redis::RedisBackend;
use crate::backend::redis::batches::{KEEP_MS, reply};
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::{pipelines, scripts};
use crate::contract::batches::{BatchId, BatchStatus};
use crate::{Error, Result};

/// How many index entries a trim reads at once.
const TRIM_AT_ONCE: usize = 100;

/// How many reads of the index one trim makes at most.
const TRIM_READS: usize = 10;

/// How many index entries of batches past their retention a page reads past
/// at most, beyond the page's own.
const LIST_SKIPS: usize = 1_000;

/// How often a backend's sweeps trim the index (the first sweep does).
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// How many `EXISTS` (or reads of batches) go at once on a Cluster.
const AT_ONCE: usize = 64;

/// Where a trim of the index goes on from: the score of the last entry it
/// read, and how many entries of that score it read and left (kept), which
/// come first at that score in the next read (`None`: from the oldest).
pub(super) type TrimCursor = Option<(u64, usize)>;

/// The reply of a `ZRANGE … WITHSCORES`: members and their scores (a
/// double in RESP3, a string in RESP2).
fn with_scores(v: redis::Value) -> Result<Vec<(String, u64)>> {
    let pairs: Vec<(String, f64)> =
        redis::from_redis_value(v).map_err(|e| Error::Protocol(format!("batch index: {e}")))?;
    Ok(pairs.into_iter().map(|(m, s)| (m, s as u64)).collect())
}

impl RedisBackend {
    /// The sweep's trim of the index ([`Rsmq::trim_batch_index`]), once
    /// every [`TRIM_EVERY`] for the clones of this backend, going on where
    /// the last one stopped.
    pub(super) async fn trim_batch_index(&self) -> Result<()> {
        let from = {
            let mut last = self.shared.batch_index.lock().unwrap();
            if last.0.is_some_and(|at| at.elapsed() < TRIM_EVERY) {
                return Ok(());
            }
            last.0 = Some(std::time::Instant::now());
            last.1
        };
        let next = self.rsmq.trim_batch_index(from).await?;
        self.shared.batch_index.lock().unwrap().1 = next;
        Ok(())
    }
}

impl Rsmq {
    /// Whether each id's batch still has its keys (an id that is none is
    /// gone).
    async fn batches_kept(&self, ids: &[String]) -> Result<Vec<bool>> {
        let keys: Vec<Option<String>> = ids
            .iter()
            .map(|raw| {
                raw.parse::<BatchId>()
                    .ok()
                    .map(|id| self.namespace().batch(id.as_str()).hash)
            })
            .collect();
        let named: Vec<&String> = keys.iter().flatten().collect();
        let found: Vec<bool> = if named.is_empty() {
            Vec::new()
        } else if self.namespace().is_cluster() {
            let con = self.connection();
            let named: Vec<String> = named.into_iter().cloned().collect();
            futures::stream::iter(named.into_iter().map(|k| {
                let mut con = con.clone();
                async move {
                    redis::cmd("EXISTS")
                        .arg(k)
                        .query_async::<bool>(&mut con)
                        .await
                }
            }))
            .buffered(AT_ONCE)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<redis::RedisResult<_>>()?
        } else {
            let mut pipe = redis::pipe();
            for k in named {
                pipe.cmd("EXISTS").arg(k);
            }
            pipe.query_async(&mut self.connection()).await?
        };
        let mut found = found.into_iter();
        Ok(keys
            .iter()
            .map(|k| k.is_some() && found.next().unwrap_or(false))
            .collect())
    }

    /// How each batch stands (`None`: no batch id, or past its retention):
    /// `batch.lua`'s reads in one pipeline on a single Redis, side by side
    /// on a Cluster.
    async fn statuses_of(&self, ids: &[Option<BatchId>]) -> Result<Vec<Option<BatchStatus>>> {
        let named: Vec<&BatchId> = ids.iter().flatten().collect();
        let found: Vec<Option<BatchStatus>> = if named.is_empty() {
            Vec::new()
        } else if self.namespace().is_cluster() {
            let named: Vec<BatchId> = named.into_iter().cloned().collect();
            futures::stream::iter(
                named
                    .into_iter()
                    .map(|id| async move { self.status_of_batch(&id).await }),
            )
            .buffered(AT_ONCE)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_>>()?
        } else {
            let mut pipe = redis::pipe();
            for id in &named {
                let k = self.namespace().batch(id.as_str());
                let mut cmd = scripts::eval(&scripts::BATCH, &[&k.hash, &k.done, &k.dead, &k.adds]);
                cmd.arg("r").arg(KEEP_MS);
                pipe.add_command(cmd);
            }
            // taken as loaded: a read that meets NOSCRIPT (it ran nothing)
            // is sent again once the script is loaded
            let loaded = std::sync::atomic::AtomicBool::new(true);
            let replies = pipelines::run_pipeline(
                &mut self.connection(),
                &[(&scripts::BATCH, &loaded)],
                pipe,
            )
            .await?;
            if replies.len() != named.len() {
                return Err(Error::Protocol(format!(
                    "{} replies to {} reads of batches",
                    replies.len(),
                    named.len()
                )));
            }
            named
                .iter()
                .zip(&replies)
                .map(|(id, v)| Ok(reply(id, v)?.map(|r| r.status)))
                .collect::<Result<_>>()?
        };
        let mut found = found.into_iter();
        Ok(ids
            .iter()
            .map(|id| id.as_ref().and_then(|_| found.next().flatten()))
            .collect())
    }

    /// Removes `gone` from the index.
    async fn unindex(&self, gone: &[String]) -> Result<()> {
        if gone.is_empty() {
            return Ok(());
        }
        let _: i64 = redis::cmd("ZREM")
            .arg(self.namespace().batches())
            .arg(gone)
            .query_async(&mut self.connection())
            .await?;
        Ok(())
    }

    /// Drops from the index the entries over a week old (by this machine's
    /// clock: a batch opened since cannot be past its retention) whose
    /// batches are gone: up to [`TRIM_READS`] reads of [`TRIM_AT_ONCE`]
    /// entries from `from`, the oldest first. Returns where the next trim
    /// goes on from: batches that run on for over a week keep their entries,
    /// and a trim goes past them rather than reading them again and again.
    pub(super) async fn trim_batch_index(&self, mut from: TrimCursor) -> Result<TrimCursor> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let Some(before) = now.checked_sub(KEEP_MS) else {
            return Ok(None);
        };
        for _ in 0..TRIM_READS {
            // from the last score read, past its entries read and kept (the
            // others left the index), as a page goes on past those it listed
            let (min, offset) = from.map_or(("-inf".to_string(), 0), |(s, n)| (s.to_string(), n));
            let v: redis::Value = redis::cmd("ZRANGEBYSCORE")
                .arg(self.namespace().batches())
                .arg(min)
                .arg(before)
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(offset)
                .arg(TRIM_AT_ONCE)
                .query_async(&mut self.connection())
                .await?;
            let rows = with_scores(v)?;
            let ids: Vec<String> = rows.iter().map(|(m, _)| m.clone()).collect();
            let kept = self.batches_kept(&ids).await?;
            // the next read skips the entries kept at the last score; one
            // another worker's trim removes meanwhile makes it skip one it
            // did not read, which that worker's trim or the next round reads
            for ((_, score), k) in rows.iter().zip(&kept) {
                if !*k {
                    continue;
                }
                from = match from {
                    Some((at, n)) if at == *score => Some((at, n + 1)),
                    _ => Some((*score, 1)),
                };
            }
            let gone: Vec<String> = ids
                .into_iter()
                .zip(&kept)
                .filter(|(_, k)| !**k)
                .map(|(m, _)| m)
                .collect();
            self.unindex(&gone).await?;
            if rows.len() < TRIM_AT_ONCE {
                // the end: the next trim starts from the oldest again
                return Ok(None);
            }
        }
        Ok(from)
    }

    pub(super) async fn list_batches(
        &self,
        before_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<BatchStatus>> {
        let limit = crate::contract::batches::check_limit(limit)?;
        let mut max = before_ms.map_or("+inf".to_string(), |ms| format!("({ms}"));
        // the entries of the last score read that are listed: the next read
        // of that score starts past them
        let (mut at, mut listed_at) = (None, 0usize);
        // entries of batches past their retention read past: the page ends
        // at the first beyond LIST_SKIPS
        let mut skipped = 0;
        let mut out = Vec::with_capacity(limit);
        while out.len() < limit {
            let want = limit - out.len();
            // ZRANGE BYSCORE REV (6.2): a worker's ACL allows ZRANGE
            let v: redis::Value = redis::cmd("ZRANGE")
                .arg(self.namespace().batches())
                .arg(&max)
                .arg("-inf")
                .arg("BYSCORE")
                .arg("REV")
                .arg("LIMIT")
                .arg(listed_at)
                .arg(want)
                .arg("WITHSCORES")
                .query_async(&mut self.connection())
                .await?;
            let rows = with_scores(v)?;
            let exhausted = rows.len() < want;
            let ids: Vec<Option<BatchId>> = rows.iter().map(|(raw, _)| raw.parse().ok()).collect();
            let statuses = self.statuses_of(&ids).await?;
            let (mut gone, mut cut) = (Vec::new(), false);
            for ((raw, score), status) in rows.into_iter().zip(statuses) {
                if status.is_none() && skipped == LIST_SKIPS {
                    // the page ends here: a later one goes on from it
                    cut = true;
                    break;
                }
                if at != Some(score) {
                    (at, listed_at) = (Some(score), 0);
                }
                match status {
                    Some(s) => {
                        out.push(s);
                        listed_at += 1;
                    }
                    None => {
                        skipped += 1;
                        gone.push(raw);
                    }
                }
            }
            self.unindex(&gone).await?;
            match at {
                Some(score) if !exhausted && !cut => max = score.to_string(),
                _ => break,
            }
        }
        Ok(out)
    }
}
