//! Deleting messages, one or many, as RSMQ's `deleteMessage`.

use redis::Value;

use super::{BATCH_MESSAGES, Rsmq, tell_gone};
use crate::backend::redis::scripts;
use crate::contract::queues::{MessageId, validate};
use crate::{Error, Result};

impl Rsmq {
    /// Deletes a message, at whatever priority it has. Returns `true` only when
    /// both its entry and its body were removed, as RSMQ's `deleteMessage`.
    pub async fn delete(&self, queue: &str, id: &MessageId) -> Result<bool> {
        let (members, fields) = self
            .delete_ids(queue, std::slice::from_ref(id), "one")
            .await?;
        Ok(members == 1 && fields > 0)
    }

    /// Deletes messages in one call. Returns how many were in the queue.
    pub async fn delete_batch(&self, queue: &str, ids: &[MessageId]) -> Result<u64> {
        // an id given twice is one job (delete.lua would count its lease off
        // twice)
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        let ids: Vec<MessageId> = ids.iter().copied().filter(|id| seen.insert(*id)).collect();
        let mut n = 0;
        let chunks: Vec<&[MessageId]> = ids.chunks(BATCH_MESSAGES).collect();
        for (i, chunk) in chunks.iter().enumerate() {
            // the last call records the batch's one history event
            let mark = if i + 1 == chunks.len() {
                n.to_string()
            } else {
                "-".to_string()
            };
            n += self.delete_ids(queue, chunk, &mark).await?.0;
        }
        Ok(n)
    }

    async fn delete_ids(&self, queue: &str, ids: &[MessageId], mark: &str) -> Result<(u64, u64)> {
        validate::queue_name(queue)?;
        if ids.is_empty() {
            return Ok((0, 0));
        }
        let k = self.ns.queue(queue);
        let mut keys = k.with_leases(k.all_levels_unique());
        keys.extend(k.history_keys());
        keys.extend(k.keyed_wake_keys());
        keys.push(k.awaited.clone());
        keys.push(k.bout.clone());
        keys.push(k.deps.clone());
        let mut cmd = scripts::eval(&scripts::DELETE, &keys);
        cmd.arg(crate::contract::history::History::default().encode())
            .arg(mark)
            .arg(&*self.actor)
            .arg(&k.realtime)
            .arg(ids);
        let v = scripts::run(&mut self.con.clone(), &scripts::DELETE, &cmd).await?;
        let Value::Array(items) = &v else {
            return Err(Error::Protocol(format!("delete reply {v:?}")));
        };
        let (deleted, other, ran) = match items.as_slice() {
            [a, b, c, ..] => (
                scripts::int(a)?.max(0) as u64,
                scripts::int(b)?.max(0) as u64,
                scripts::int(c)?,
            ),
            _ => return Err(Error::Protocol(format!("delete reply {v:?}"))),
        };
        // jobs of batches, or jobs flows wait for: counted cancelled now
        self.count_removed(queue, items.get(3..).unwrap_or_default())
            .await;
        // running jobs' workers stop them now (an RSMQ-style delete of a
        // message it received costs nothing more)
        if ran > 0 {
            tell_gone(&mut self.con.clone(), &self.ns, queue).await;
        }
        Ok((deleted, other))
    }
}
