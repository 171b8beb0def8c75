//! The batch marks (`ns:{@workers}:bmarks`, marks.lua) and the sweep that
//! goes through those due: queues with finishes to count, batches never
//! sealed or with callbacks to send, flows above parents gone.

use redis::Value;

use super::text;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::BatchId;
use crate::contract::queues::validate;
use crate::{Error, Result};

/// How long a sweep puts off a mark whose sweep failed (a batch or queue
/// broken for good costs a sweep one try a minute, and keeps no other mark
/// from its turn).
const RETRY_MS: u64 = 60_000;

impl Rsmq {
    pub(crate) async fn marks(&self, args: &[String]) -> Result<Value> {
        let mut cmd = scripts::eval(&scripts::MARKS, &[self.namespace().batch_marks()]);
        cmd.arg(args);
        scripts::run(&mut self.connection(), &scripts::MARKS, &cmd).await
    }

    pub(crate) async fn mark_batches(&self, queue: &str, until: std::time::Duration) -> Result<()> {
        validate::queue_name(queue)?;
        let ms = crate::contract::backend::clamped_ms(until).max(1000);
        self.marks(&["m".into(), queue.into(), ms.to_string()])
            .await?;
        Ok(())
    }

    pub(crate) async fn sweep_batches(&self) -> Result<()> {
        // an idle sweep is one plain command: is anything due (by this
        // machine's clock; the script then goes by Redis's)
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let any: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.namespace().batch_marks())
            .arg("-inf")
            .arg(now)
            .arg("LIMIT")
            .arg(0)
            .arg(1)
            .query_async(&mut self.connection())
            .await?;
        if any.is_empty() {
            return Ok(());
        }
        let Value::Array(items) = self.marks(&["s".into()]).await? else {
            return Ok(());
        };
        // each mark apart: one whose sweep fails (a key of the wrong type, a
        // script error) is logged and looked at again RETRY_MS on, rather
        // than keeping every later mark from being swept
        let mut failed = 0usize;
        for pair in items.chunks(2) {
            let (member, score) = (text(pair.first()), text(pair.get(1)));
            let swept = self.sweep_mark(&member, &score).await;
            if let Err(e) = swept {
                failed += 1;
                tracing::warn!(mark = %member, error = %e, "sweeping a batch mark failed; a sweep tries again in a minute");
                let later = if let Some(queue) = member.strip_prefix('q') {
                    self.marks(&["m".into(), queue.into(), RETRY_MS.to_string()])
                        .await
                } else if let Some(raw) = member.strip_prefix('b') {
                    self.marks(&["d".into(), raw.into(), RETRY_MS.to_string()])
                        .await
                } else if let Some(raw) = member.strip_prefix('f') {
                    self.marks(&["g".into(), raw.into(), RETRY_MS.to_string()])
                        .await
                } else {
                    Ok(Value::Nil)
                };
                if let Err(e) = later {
                    tracing::warn!(mark = %member, error = %e, "putting off a batch mark whose sweep failed failed");
                }
            }
        }
        if failed > 0 {
            return Err(Error::Protocol(format!(
                "{failed} batch marks not swept; tried again in a minute"
            )));
        }
        Ok(())
    }

    /// A sweep's turn at one of `ns:{@workers}:bmarks`'s members, scored
    /// `score` (see marks.lua).
    async fn sweep_mark(&self, member: &str, score: &str) -> Result<()> {
        if let Some(queue) = member.strip_prefix('q') {
            if validate::queue_name(queue).is_ok() && !self.recover_batches(queue).await? {
                self.marks(&["x".into(), queue.to_string(), score.to_string()])
                    .await?;
            }
        } else if let Some(raw) = member.strip_prefix('b') {
            if let Ok(id) = raw.parse::<BatchId>()
                && let Some(r) = self.batch_call::<String>(&id, "q", &[]).await?
            {
                if !r.status.sealed && r.status.cancelled_at_ms.is_none() {
                    // its enqueuer stopped before it sealed it: cancelled,
                    // as an enqueue that fails part way cancels its own
                    tracing::warn!(batch = %id, "a batch its enqueuer never sealed is cancelled");
                    self.cancel_batch(&id).await?;
                } else {
                    // a cancel whose canceller stopped before it listed it
                    if r.status.cancelled_at_ms.is_some() && r.status.completed_ms.is_none() {
                        self.list_cancelled(&id).await?;
                    }
                    self.fire(&id, r).await?;
                }
            }
            self.marks(&["y".into(), raw.to_string()]).await?;
        } else if let Some(raw) = member.strip_prefix('a') {
            self.sweep_added(raw).await;
        } else if let Some(raw) = member.strip_prefix('f') {
            // a flow above a parent gone with its queue: what its count
            // made due is fired
            if let Ok(id) = raw.parse::<BatchId>()
                && let Some(r) = self.batch_call::<String>(&id, "q", &[]).await?
            {
                self.fire(&id, r).await?;
            }
            self.marks(&["h".into(), raw.to_string()]).await?;
        }
        Ok(())
    }
}
