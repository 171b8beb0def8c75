//! The send's calls in one pipeline, with a `TIME` first and a `WAIT` last
//! as the handle needs them.

use std::sync::atomic::AtomicBool;

use super::{Call, Kind, kind};
use crate::backend::redis::connection::WaitForReplicas;
use crate::backend::redis::pipelines;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::queues::{SendMessage, validate};
use crate::{Error, Result};

impl Rsmq {
    /// The send's calls (`chunks` of `msgs`) in one pipeline, with a `TIME`
    /// first and a `WAIT` last as this handle needs them.
    pub(super) async fn run_calls(
        &self,
        con: &mut crate::backend::redis::connection::Connection,
        call: &Call<'_>,
        chunks: &[(usize, usize)],
        msgs: &[SendMessage],
    ) -> Result<Vec<redis::Value>> {
        // a lone unique call passes its own priority's sorted set alone, and is
        // called again with every level when a key is held at another; calls of
        // a larger send pass every level at once, so that none is re-run after
        // the later ones (the last send of a key must win)
        let all_levels = chunks.len() > 1;
        let mut pipe = redis::pipe();
        let plain = msgs.iter().any(|m| kind(m) == Kind::Plain);
        let time = self.time_first(plain);
        if time {
            // a TIME first, its reply dropped: the sender's connection then
            // waits in Redis's list of replies to write before the send's
            // PUBLISH puts the waiting worker's connection there, and Redis
            // writes the last client it listed first: the hand-off (or the
            // wake-up) goes out before the reply to the send, rather than after
            // a write that wakes the sender (BENCHMARKS.md, Speed II part 14).
            // Only while the last plain send found a worker waiting (its
            // reply says so): a send to a queue no worker waits on gains
            // nothing by it. Unique and keyed sends, whose replies do not
            // say, go without. A Cluster's sends hand off nothing, and would
            // route the TIME to a node of its own.
            pipe.cmd("TIME");
        }
        for &(start, end) in chunks {
            pipe.add_command(call.cmd(start, end, all_levels));
        }
        let mut used: Vec<(&redis::Script, &AtomicBool)> = Vec::new();
        if plain && !call.function {
            used.push((&scripts::SEND, &self.send_loaded));
        }
        if msgs.iter().any(|m| kind(m) == Kind::Unique) {
            used.push((&scripts::UNIQUE, &self.unique_loaded));
        }
        if msgs.iter().any(|m| kind(m) == Kind::Keyed) {
            used.push((&scripts::SEND_KEYED, &self.keyed_loaded));
        }
        if let Some(wait) = self.wait {
            add_wait(&mut pipe, wait);
        }
        let mut replies = pipelines::run_pipeline_replies(con, &used, pipe).await?;
        let failed = |v: &redis::Value| matches!(v, redis::Value::ServerError(_));
        if replies.iter().any(failed) {
            // a call refused while others went through (Redis out of memory,
            // say) is the send's to report (PartlySent); any other error
            // fails the whole, as before
            let first = usize::from(time);
            let last = first + chunks.len();
            let calls = replies.get(first..last).unwrap_or_default();
            let some_went = calls.len() > 1 && calls.iter().any(|v| !failed(v));
            let others_failed = replies
                .iter()
                .enumerate()
                .any(|(i, v)| (i < first || i >= last) && failed(v));
            if !some_went || others_failed {
                return match redis::Value::Array(replies).extract_error() {
                    Err(e) => Err(e.into()),
                    Ok(v) => Err(Error::Protocol(format!("a send's replies: {v:?}"))),
                };
            }
        }
        if time {
            // the TIME's reply
            replies.remove(0);
        }
        Ok(replies)
    }
}

/// Appends `WAIT` to a pipeline of writes: in the same pipeline, it runs on the
/// connection (and the master) that took them, even when a broken connection
/// makes the client send the pipeline again.
pub(super) fn add_wait(pipe: &mut redis::Pipeline, wait: WaitForReplicas) {
    // at least 1 ms (0 would wait for ever), at most MAX_DELAY (Redis
    // refuses a timeout past its clock's range: after the send's writes)
    let ms = validate::whole_ms(wait.timeout.min(validate::MAX_DELAY)).max(1);
    pipe.cmd("WAIT").arg(wait.replicas).arg(ms);
}

/// Checks the reply of [`add_wait`]'s `WAIT`.
pub(super) fn check_wait(reply: Option<redis::Value>, wait: WaitForReplicas) -> Result<()> {
    let acked = match reply {
        Some(redis::Value::Int(n)) => u32::try_from(n).unwrap_or(0),
        v => return Err(Error::Protocol(format!("WAIT replied {v:?}"))),
    };
    if acked < wait.replicas {
        return Err(Error::NotReplicated {
            replicas: acked,
            wanted: wait.replicas,
        });
    }
    Ok(())
}
