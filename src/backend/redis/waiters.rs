//! Flows that wait for jobs enqueued earlier (`Flow::after`, `dep.lua`): a
//! job still to finish registers each flow that waits for it in its queue's
//! `ns:q:deps` (at most `MAX_WAITERS`), and the settle, cancel or failure
//! that finishes it enters a finish for each; one that finished already
//! counts at once.

use redis::Value;

use crate::backend::redis::batches::text;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::{BatchId, BatchRef};
use crate::contract::queues::validate;
use crate::{Error, Result};

impl Rsmq {
    pub(super) async fn flow_after(
        &self,
        queue: &str,
        id: &crate::JobId,
        r: &BatchRef,
    ) -> Result<()> {
        validate::queue_name(queue)?;
        // a sweep counts a finish entered here should this caller stop first
        self.mark_batches(queue, std::time::Duration::from_secs(10))
            .await?;
        let (mut con, k) = self.parts(queue);
        let mut stale: Vec<String> = Vec::new();
        let items = loop {
            let mut cmd = scripts::eval(
                &scripts::DEP,
                &[
                    &k.hash,
                    &k.dead,
                    &k.history,
                    &k.history_hash,
                    &k.deps,
                    &k.bout,
                    &k.bres,
                ],
            );
            cmd.arg(id.as_str())
                .arg(r.batch.as_str())
                .arg(r.index)
                .arg(crate::contract::history::History::default().encode())
                .arg(crate::contract::batches::MAX_WAITERS)
                .arg(&stale);
            let Value::Array(items) = scripts::run(&mut con, &scripts::DEP, &cmd).await? else {
                return Err(Error::Protocol("dep reply".into()));
            };
            let full = items.first().map(scripts::int).transpose()? == Some(-2);
            if !full || !stale.is_empty() {
                break items;
            }
            // no room: once more without the flows that wait no more
            stale = self.waiting_no_more(&k.deps, id).await?;
            if stale.is_empty() {
                break items;
            }
        };
        match items.first().map(scripts::int).transpose()? {
            Some(-1) => Err(Error::QueueNotFound { name: queue.into() }),
            Some(-2) => Err(crate::contract::batches::too_many_waiters(queue, id)),
            Some(0) | None => Err(crate::contract::batches::no_job(queue, id)),
            Some(1) => Ok(()),
            Some(_) => {
                let member = text(items.get(1));
                if let Err(e) = self.settled_batches(queue, &[member]).await {
                    tracing::warn!(queue, error = %e, "counting a finished job a flow waits for failed; a later fetch counts it");
                }
                Ok(())
            }
        }
    }

    /// The batches registered as waiting for job `id` in `deps` (its
    /// queue's `ns:q:deps`, see `dep.lua`) that wait no more: cancelled, or
    /// gone. At most [`MAX_WAITERS`](crate::contract::batches::MAX_WAITERS)
    /// are read, when a flow found no room.
    async fn waiting_no_more(&self, deps: &str, id: &crate::JobId) -> Result<Vec<String>> {
        let mut con = self.connection();
        let head: Option<String> = redis::cmd("HGET")
            .arg(deps)
            .arg(id.as_str())
            .query_async(&mut con)
            .await?;
        let Some(head) = head else {
            return Ok(Vec::new());
        };
        let entries: Vec<String> = if head.contains(' ') {
            head.split(',').map(str::to_string).collect()
        } else {
            let n: u64 = head.parse().unwrap_or(0);
            let n = n.min(crate::contract::batches::MAX_WAITERS);
            if n == 0 {
                return Ok(Vec::new());
            }
            let fields: Vec<String> = (1..=n).map(|i| format!("{id}:{i}")).collect();
            let got: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(deps)
                .arg(&fields)
                .query_async(&mut con)
                .await?;
            got.into_iter().flatten().collect()
        };
        let mut batches: Vec<&str> = entries
            .iter()
            .filter_map(|e| e.split_once(' ').map(|(b, _)| b))
            .collect();
        batches.sort_unstable();
        batches.dedup();
        let mut stale = Vec::new();
        for b in batches {
            let waits = match b.parse::<BatchId>() {
                Ok(bid) => self
                    .status_of_batch(&bid)
                    .await?
                    .is_some_and(|s| s.cancelled_at_ms.is_none()),
                Err(_) => false,
            };
            if !waits {
                stale.push(b.to_string());
            }
        }
        Ok(stale)
    }
}
