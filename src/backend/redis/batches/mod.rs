//! Batches on Redis (`batch_open.lua`, `batch.lua`, `bout.lua`).
//!
//! A batch's keys are one slot of their own (`ns:{@batch:<id>}` on a
//! Cluster), and its jobs settle in their queues' slots, so a job's finish is
//! counted in two steps. The settle (`complete.lua`) enters it in its queue's
//! `ns:q:bout`, atomically with the ack or dead letter; then the settling
//! worker applies it to its batch (`batch.lua`, which counts each job once by
//! its index, so applying twice is harmless), sends the callbacks that fell
//! due (each with a once mark in its queue's `ns:q:once`, so sending twice
//! sends once), and forgets the finishes (`bout.lua`). A worker that dies
//! between the steps leaves them in `ns:q:bout`: the queue's next fetch
//! reports them once they are older than its lease (at least 5 s) and the
//! fetching worker applies them
//! ([`Backend::batch_recover`](crate::backend::Backend::batch_recover)).
//! An idle queue is fetched from rarely: a worker marks a queue
//! (`ns:{@workers}:bmarks`) before it settles batch jobs there, and every
//! worker's sweep counts the finishes of queues marked over a lease ago
//! ([`Backend::batch_sweep`](crate::backend::Backend::batch_sweep)). A
//! mark whose sweep fails is logged and put off a minute, the others swept
//! all the same.

mod finishes;
mod fire;
mod sweep;

use redis::Value;

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::{BatchId, BatchSpec, BatchStatus, Callback, CallbackKind, OPEN_MS};
use crate::contract::queues::validate;
use crate::{Error, Result};

/// What flows' failed (or gone) parents left for [`Rsmq::cascade`]'s loop,
/// not done by the call that failed them: the finishes they entered in
/// their queues (`ns:q:bout`), by queue, still to be counted in their
/// flows; and the flows a parent gone with its deleted queue was counted
/// in directly (see `Rsmq::gone_parent`), with what that count made due,
/// still to be fired.
#[derive(Default)]
pub(super) struct Entered {
    pub(super) finishes: Vec<(String, Vec<String>)>,
    pub(super) fires: Vec<(BatchId, Reply)>,
}

/// How long a completed batch is kept (7 days).
pub(crate) const KEEP_MS: u64 = 7 * 24 * 3600 * 1000;

/// batch.lua's reply: the status, the callbacks due, whether this call
/// cancelled the batch, and how many finishes it applied were not counted
/// for their index was never given out.
pub(crate) struct Reply {
    pub(super) status: BatchStatus,
    due: Vec<Callback>,
    pub(super) cancelled_now: bool,
    foreign: u64,
}

pub(super) fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::Int(i)) => i.to_string(),
        _ => String::new(),
    }
}

pub(super) fn reply(id: &BatchId, v: &Value) -> Result<Option<Reply>> {
    let Value::Array(items) = v else {
        return Err(Error::Protocol(format!("batch reply {v:?}")));
    };
    if items.is_empty() {
        return Ok(None);
    }
    let num = |i: usize| text(items.get(i)).parse::<u64>().unwrap_or(0);
    let desc = text(items.get(7));
    let why = text(items.get(8));
    let parent = text(items.get(9));
    let status = BatchStatus {
        id: id.to_string(),
        total: num(0),
        succeeded: num(1),
        dead: num(2),
        cancelled: num(3),
        sealed: text(items.get(4)) == "1",
        created_ms: num(5),
        completed_ms: text(items.get(6)).parse().ok(),
        description: (!desc.is_empty()).then_some(desc),
        first_failure: (!why.is_empty()).then_some(why),
        parent: (!parent.is_empty()).then_some(parent),
        cancelled_at_ms: text(items.get(10)).parse().ok(),
    };
    let cancelled_now = text(items.get(11)) == "1";
    let foreign = num(12);
    let mut due = Vec::new();
    let mut i = 13;
    while i + 2 < items.len() {
        let kind = CallbackKind::from_code(&text(items.get(i)));
        if let (Some(kind), Some(Value::BulkString(stored))) = (kind, items.get(i + 1))
            && let Some(cb) = Callback::decode(kind, stored)
        {
            // one stored outside -10..=10 (by hand, or a redjob that took
            // any at open) is sent at 0, where a fetch reads it
            let priority = text(items.get(i + 2))
                .parse()
                .ok()
                .filter(|p| validate::priority(*p).is_ok())
                .unwrap_or(0);
            due.push(cb.at_priority(priority));
        }
        i += 3;
    }
    Ok(Some(Reply {
        status,
        due,
        cancelled_now,
        foreign,
    }))
}

impl Rsmq {
    pub(super) async fn batch_call<A: redis::ToRedisArgs + Sync>(
        &self,
        id: &BatchId,
        what: &str,
        args: &[A],
    ) -> Result<Option<Reply>> {
        let k = self.namespace().batch(id.as_str());
        let mut cmd = scripts::eval(&scripts::BATCH, &[&k.hash, &k.done, &k.dead, &k.adds]);
        cmd.arg(what).arg(KEEP_MS).arg(args);
        let v = scripts::run(&mut self.connection(), &scripts::BATCH, &cmd).await?;
        reply(id, &v)
    }

    pub(super) async fn open_batch(&self, spec: &BatchSpec) -> Result<()> {
        // refused before anything is stored: a callback's queue, and its
        // priority as an enqueue's (one outside -10..=10 would be sent into
        // a priority set no fetch reads)
        for cb in &spec.callbacks {
            validate::queue_name(&cb.queue)?;
            validate::priority(cb.priority)?;
        }
        // recorded first: should its enqueuer never seal it (it died, or its
        // enqueue was dropped part way), a sweep cancels it an hour on
        self.marks(&["d".into(), spec.id.to_string(), OPEN_MS.to_string()])
            .await?;
        let k = self.namespace().batch(spec.id.as_str());
        let mut cmd = scripts::eval(&scripts::BATCH_OPEN, &[&k.hash]);
        cmd.arg(spec.description.as_deref().unwrap_or(""))
            .arg(spec.members);
        for cb in &spec.callbacks {
            cmd.arg(cb.kind.code()).arg(cb.encode()).arg(cb.priority);
        }
        let mut con = self.connection();
        let created = scripts::int(&scripts::run(&mut con, &scripts::BATCH_OPEN, &cmd).await?)?;
        if created == 0 {
            return Err(Error::InvalidValue {
                what: "batch id",
                reason: format!("batch {} exists already", spec.id),
            });
        }
        let _: i64 = redis::cmd("ZADD")
            .arg(self.namespace().batches())
            .arg(created)
            .arg(spec.id.as_str())
            .query_async(&mut con)
            .await?;
        Ok(())
    }

    pub(super) async fn seal_batch(&self, id: &BatchId, total: u64) -> Result<()> {
        // recorded first: should the callbacks the seal makes due not be
        // sent here (a failure, a lost reply, a crash), a sweep sends them
        self.marks(&["d".into(), id.to_string()]).await?;
        let Some(r) = self.batch_call(id, "s", &[total.to_string()]).await? else {
            self.marks(&["y".into(), id.to_string()]).await?;
            return Err(Error::InvalidValue {
                what: "batch id",
                reason: format!("no batch {id}"),
            });
        };
        let cancelled = r.status.cancelled_at_ms.is_some();
        match self.fire(id, r).await {
            Ok(()) => {
                self.marks(&["y".into(), id.to_string()]).await?;
            }
            Err(e) => {
                tracing::warn!(batch = %id, error = %e, "sending a sealed batch's callbacks failed; a worker's sweep sends them");
            }
        }
        if cancelled {
            return Err(crate::contract::batches::cancelled_open(id));
        }
        Ok(())
    }

    pub(super) async fn status_of_batch(&self, id: &BatchId) -> Result<Option<BatchStatus>> {
        Ok(self
            .batch_call::<String>(id, "r", &[])
            .await?
            .map(|r| r.status))
    }

    pub(super) async fn results_of_batch(
        &self,
        id: &BatchId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let limit = crate::contract::batches::check_limit(limit)?;
        let k = self.namespace().batch(id.as_str());
        let idx: Vec<u64> = (from..from.saturating_add(limit as u64)).collect();
        let mut fields: Vec<String> = idx.iter().map(|i| format!("r{i}")).collect();
        fields.push("created".into());
        let mut got: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
            .arg(&k.hash)
            .arg(&fields)
            .query_async(&mut self.connection())
            .await?;
        if got.pop().flatten().is_none() {
            return Err(crate::contract::batches::no_batch(id));
        }
        Ok(idx
            .into_iter()
            .zip(got)
            .filter_map(|(i, v)| Some((i, v?)))
            .collect())
    }

    pub(super) async fn dead_of_batch(
        &self,
        id: &BatchId,
        limit: usize,
    ) -> Result<Vec<(String, crate::JobId)>> {
        let limit = crate::contract::batches::check_limit(limit)?;
        let k = self.namespace().batch(id.as_str());
        let rows: Vec<String> = redis::cmd("LRANGE")
            .arg(&k.dead)
            .arg(0)
            .arg(limit - 1)
            .query_async(&mut self.connection())
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let (q, j) = r.split_once(' ')?;
                Some((q.to_string(), j.parse().ok()?))
            })
            .collect())
    }
}
