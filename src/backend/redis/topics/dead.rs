//! Requeuing and deleting a subscriber's dead letters on Redis
//! (topic_requeue.lua), a chunk at a time.

use redis::Value;

use crate::Result;
use crate::backend::redis::RedisBackend;
use crate::backend::redis::connection::Connection;
use crate::backend::redis::scripts::{self, eval, run};
use crate::contract::topics::DeadEvents;

impl RedisBackend {
    /// topic_requeue.lua over the ids given, or over all dead letters 1000 at
    /// a time: those there when it starts (up to the newest's id then, or the
    /// id given), so that one dead-lettered meanwhile (one requeued here that
    /// failed again) is left for the next call, and the call ends however
    /// fast letters come.
    pub(super) async fn dead_letters(
        &self,
        topic: &str,
        subscriber: &str,
        action: &str,
        which: DeadEvents<'_>,
    ) -> Result<i64> {
        const CHUNK: usize = 1000;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let dead = k.dead(subscriber);
        let mut total = 0;
        // oldest first, each once, as the memory backend takes them
        let ids = match which {
            DeadEvents::Ids(ids) => Some(ids),
            _ => None,
        };
        let ids = ids.map(|ids| {
            let mut ids = ids.to_vec();
            ids.sort_unstable();
            ids.dedup();
            ids
        });
        // (no ids: one call that checks the subscriber exists, as below)
        let mut chunks = ids
            .as_deref()
            .filter(|ids| !ids.is_empty())
            .map(|ids| ids.chunks(CHUNK));
        let cutoff = match which {
            DeadEvents::Ids(_) => None,
            DeadEvents::All => newest_id(&mut con, &dead).await?,
            DeadEvents::UpTo(id) => Some(id.to_string()),
        };
        loop {
            let mut cmd = eval(&scripts::TOPIC_REQUEUE, &[&k.stream, &dead]);
            cmd.arg(subscriber).arg(action);
            match chunks.as_mut() {
                Some(it) => {
                    let Some(chunk) = it.next() else { break };
                    cmd.arg("ids");
                    for i in chunk {
                        cmd.arg(i.to_string());
                    }
                }
                // the first call checks that the subscriber exists
                None => {
                    let n = if cutoff.is_some() { CHUNK } else { 0 };
                    cmd.arg("oldest")
                        .arg(n)
                        .arg(cutoff.as_deref().unwrap_or("-"));
                }
            }
            let n = scripts::int(&run(&mut con, &scripts::TOPIC_REQUEUE, &cmd).await?)?;
            if n < 0 {
                return Ok(n);
            }
            total += n;
            // none left up to the cutoff, or none there at the start
            if chunks.is_none() && (n == 0 || cutoff.is_none()) {
                break;
            }
        }
        Ok(total)
    }
}

/// The id of the newest entry of the stream `key`; `None` when it is empty.
async fn newest_id(con: &mut Connection, key: &str) -> Result<Option<String>> {
    let v: Value = redis::cmd("XREVRANGE")
        .arg(key)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(con)
        .await?;
    let Value::Array(rows) = v else {
        return Ok(None);
    };
    Ok(match rows.first() {
        Some(Value::Array(entry)) => match entry.first() {
            Some(Value::BulkString(id)) => Some(String::from_utf8_lossy(id).into_owned()),
            _ => None,
        },
        _ => None,
    })
}
