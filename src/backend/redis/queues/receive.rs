//! Receiving messages: RSMQ's receive and pop, taking every due message, and
//! hiding one again.

use std::time::Duration;

use redis::Value;

use super::{RECEIVE_MAX, Rsmq};
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::queues::{Message, MessageId, validate};
use crate::{Error, JobId, Result};

impl Rsmq {
    /// Receives the oldest due message and hides it for `vt` (the queue's vt when
    /// `None`), as RSMQ's `receiveMessage`.
    pub async fn receive(&self, queue: &str, vt: Option<Duration>) -> Result<Option<Message>> {
        Ok(self.receive_batch(queue, 1, vt).await?.pop())
    }

    /// Receives up to `n` due messages in one atomic call, oldest first. Any `n`
    /// is accepted (`usize::MAX` means every due message).
    pub async fn receive_batch(
        &self,
        queue: &str,
        n: usize,
        vt: Option<Duration>,
    ) -> Result<Vec<Message>> {
        validate::queue_name(queue)?;
        let vt = vt.map(|d| validate::duration_ms("vt", d)).transpose()?;
        let k = self.ns.queue(queue);
        let mut cmd = scripts::eval(&scripts::RECEIVE, &[&k.zset, &k.hash, &k.unique]);
        cmd.arg(n.clamp(1, RECEIVE_MAX));
        match vt {
            Some(ms) => cmd.arg(ms),
            None => cmd.arg(""),
        };
        let v = scripts::run(&mut self.con.clone(), &scripts::RECEIVE, &cmd).await?;
        parse_messages(queue, &v)
    }

    /// Receives and deletes the oldest due message, as RSMQ's `popMessage`.
    pub async fn pop(&self, queue: &str) -> Result<Option<Message>> {
        validate::queue_name(queue)?;
        let k = self.ns.queue(queue);
        let mut cmd = scripts::eval(
            &scripts::POP,
            &[
                &k.zset, &k.hash, &k.unique, &k.keyed, &k.keys, &k.bout, &k.deps,
            ],
        );
        cmd.arg(1).arg(6);
        let v = scripts::run(&mut self.con.clone(), &scripts::POP, &cmd).await?;
        Ok(self.popped(queue, &v).await?.pop())
    }

    /// pop.lua's reply: the messages, the batch finishes it entered counted
    /// (a popped job counts as succeeded in its batch and in the flows that
    /// wait for it).
    async fn popped(&self, queue: &str, v: &Value) -> Result<Vec<Message>> {
        let Value::Array(items) = v else {
            return parse_messages(queue, v);
        };
        if items.first().map(scripts::int).transpose()? != Some(2) {
            return parse_messages(queue, v);
        }
        let n = items
            .get(1)
            .map(scripts::int)
            .transpose()?
            .unwrap_or(0)
            .max(0) as usize;
        let fin = items.get(2..2 + n).unwrap_or_default();
        let mut rest = vec![Value::Int(1)];
        rest.extend(items.get(2 + n..).unwrap_or_default().iter().cloned());
        let msgs = parse_messages(queue, &Value::Array(rest))?;
        self.count_removed(queue, fin).await;
        Ok(msgs)
    }

    /// Receives and deletes every due message, up to `limit`, in one atomic call:
    /// highest priority first, oldest first within one. Two consumers calling it
    /// at once never get the same message. Any `limit` is accepted
    /// (`usize::MAX` takes every due message; 0 returns nothing without a call).
    pub async fn pop_due(&self, queue: &str, limit: usize) -> Result<Vec<Message>> {
        validate::queue_name(queue)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let k = self.ns.queue(queue);
        let mut keys = k.all_levels_unique();
        keys.extend(k.keyed_keys());
        keys.push(k.bout.clone());
        keys.push(k.deps.clone());
        let mut cmd = scripts::eval(&scripts::POP, &keys);
        cmd.arg(limit.min(RECEIVE_MAX)).arg(keys.len() - 1);
        let v = scripts::run(&mut self.con.clone(), &scripts::POP, &cmd).await?;
        self.popped(queue, &v).await
    }

    /// Hides a message until now + `vt`, at whatever priority it has. Returns
    /// `false` when the message does not exist.
    pub async fn change_visibility(
        &self,
        queue: &str,
        id: &MessageId,
        vt: Duration,
    ) -> Result<bool> {
        validate::queue_name(queue)?;
        let ms = validate::duration_ms("vt", vt)?;
        let k = self.ns.queue(queue);
        let mut keys = k.with_leases(k.all_levels());
        keys.push(k.exact.clone());
        let mut cmd = scripts::eval(&scripts::VISIBILITY, &keys);
        cmd.arg(id).arg(ms);
        match scripts::int(&scripts::run(&mut self.con.clone(), &scripts::VISIBILITY, &cmd).await?)?
        {
            -1 => Err(Error::QueueNotFound { name: queue.into() }),
            n => Ok(n == 1),
        }
    }
}

pub(crate) fn parse_messages(queue: &str, v: &Value) -> Result<Vec<Message>> {
    let (code, mut r) = Reply::status(v)?;
    if code == -1 {
        return Err(Error::QueueNotFound { name: queue.into() });
    }
    let mut out = Vec::new();
    while !r.is_empty() {
        let id = JobId::from_bytes(r.bytes()?)?;
        let body = String::from_utf8_lossy(r.bytes()?).into_owned();
        let rc = r.int()?.max(0) as u64;
        let fr = r.int()?.max(0) as u64;
        out.push(Message {
            sent: id.sent_ms(),
            id,
            body,
            rc,
            fr,
        });
    }
    Ok(out)
}
