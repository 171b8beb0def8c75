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

use std::collections::BTreeMap;

use redis::Value;

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::{
    BatchId, BatchSpec, BatchStatus, Callback, CallbackKind, OPEN_MS, callback_body,
};
use crate::contract::queues::{QueueOptions, validate};
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

/// How old a finish in `ns:q:bout` must be for a recovery to count it (a
/// fetch reports them once older than its lease, at least this).
const STALE_MS: u64 = 5_000;

/// How long a sweep puts off a mark whose sweep failed (a batch or queue
/// broken for good costs a sweep one try a minute, and keeps no other mark
/// from its turn).
const RETRY_MS: u64 = 60_000;

/// batch.lua's reply: the status, the callbacks due, whether this call
/// cancelled the batch, and how many finishes it applied were not counted
/// for their index was never given out.
pub(super) struct Reply {
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
    while i + 1 < items.len() {
        let kind = CallbackKind::from_code(&text(items.get(i)));
        if let (Some(kind), Some(Value::BulkString(stored))) = (kind, items.get(i + 1))
            && let Some(cb) = Callback::decode(kind, stored)
        {
            due.push(cb);
        }
        i += 2;
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

    /// Sends the callbacks `r` says are due, each once, then tells the batch.
    /// A callback that can never be sent (its body over its queue's
    /// maxsize) is dropped with an error logged, rather than retried forever.
    /// A flow's failed parent is dead-lettered or cancelled instead, and
    /// counted in its own flow when it is a child of one (and so on up a
    /// chain, by [`cascade`](Self::cascade)'s loop).
    pub(super) async fn fire(&self, id: &BatchId, r: Reply) -> Result<()> {
        let mut later = Entered::default();
        let fired = self.fire_step(id, r, &mut later).await;
        self.cascade(later).await;
        fired
    }

    /// Counts the finishes failed parents entered (`later`), and those the
    /// parents they fail in turn enter, in a loop: a chain failing whole
    /// is one turn a step, not one nested call a step (a chain at
    /// `Flow::MAX_DEPTH` nested 32 deep, near a 2 MB stack in a debug
    /// build). A count that fails is logged: the queue was marked first, so a
    /// sweep counts it.
    async fn cascade(&self, mut later: Entered) {
        loop {
            if let Some((queue, entered)) = later.finishes.pop() {
                if let Err(e) = self.settle_once(&queue, &entered, &mut later).await {
                    tracing::warn!(queue, error = %e, "counting a failed parent's finish failed; a worker's sweep counts it");
                }
            } else if let Some((id, r)) = later.fires.pop() {
                // its sweep mark goes once it fired (else a sweep fires it)
                let fired = self.fire_step(&id, r, &mut later).await;
                if let Err(e) = fired.and(self.marks(&["h".into(), id.to_string()]).await) {
                    tracing::warn!(batch = %id, error = %e, "firing a flow above a parent gone with its queue failed; a worker's sweep fires it");
                }
            } else {
                return;
            }
        }
    }

    /// [`fire`](Self::fire) without counting the finishes the parents it
    /// fails enter: added to `later`.
    async fn fire_step(&self, id: &BatchId, r: Reply, later: &mut Entered) -> Result<()> {
        if r.due.is_empty() {
            return Ok(());
        }
        let mut sent = Vec::new();
        for cb in &r.due {
            let mark = format!("{id}:{}", cb.kind.code());
            let queue = &cb.queue;
            let body = callback_body(&cb.body, &r.status);
            let send = if cb.kind == CallbackKind::Failed {
                let why = crate::contract::batches::failed_parent_why(&r.status);
                // a cancelled flow's parent is cancelled
                let mut cb = cb.clone();
                cb.cancel |= r.status.cancelled_at_ms.is_some();
                self.fail_parent(&cb, &r.status, &why, &mark, later).await
            } else if let Some(parent) = cb.id {
                // a flow's parent (its flow sealed, so it waited in its
                // queue) is sent only while it waits: its queue deleted
                // since is not created again, and the flow above it, if
                // any, learns it went
                match self
                    .send_marked(queue, &[&body], 0, &mark, Some(&parent))
                    .await
                {
                    Err(Error::QueueNotFound { .. }) => {
                        self.gone_parent(cb, &parent, later).await.map(|()| true)
                    }
                    sent => sent,
                }
            } else {
                let bodies: [&[u8]; 1] = [&body];
                crate::contract::backend::creating(self, queue, &QueueOptions::default(), || {
                    self.send_marked(queue, &bodies, 0, &mark, None)
                })
                .await
            };
            match send {
                Ok(true) => {}
                // a flow's parent its flow neither sends nor fails (a
                // caller cancelled it while it waited): its flow fired
                // the callback it waited on, so the cancel's marks age
                Ok(false) => {
                    if let (Some(parent), CallbackKind::Parent | CallbackKind::Failed) =
                        (cb.id, cb.kind)
                    {
                        self.age_cancel_marks(queue, id, &parent).await;
                    }
                }
                // a flow's parent that can never be sent is failed instead
                // (its flow above, if any, learns it)
                Err(e @ Error::InvalidValue { .. }) if cb.kind == CallbackKind::Parent => {
                    tracing::error!(batch = %id, queue, error = %e, "a flow's parent that cannot be enqueued is dead-lettered");
                    let why = format!(
                        "it cannot be enqueued: its body exceeds queue {queue:?}'s maxsize"
                    );
                    self.fail_parent(cb, &r.status, &why, &format!("{id}:x"), later)
                        .await?;
                }
                Err(e @ Error::InvalidValue { .. }) => {
                    tracing::error!(batch = %id, queue, kind = ?cb.kind, error = %e, "a batch callback that cannot be sent is dropped");
                }
                Err(e) => return Err(e),
            }
            sent.push(cb.kind.code().to_string());
        }
        self.batch_call(id, "f", &sent).await?;
        Ok(())
    }

    /// Sends `bodies` to `queue` at `priority` (after its delay) unless
    /// `mark` was sent there, the one with `id` when given (a flow's
    /// parent, sent only while it waits: one that no longer waits, though
    /// no mark says it was sent or failed, went with its queue deleted since,
    /// and is [`QueueNotFound`](Error::QueueNotFound) though its queue was
    /// created again); whether they were sent.
    pub(super) async fn send_marked(
        &self,
        queue: &str,
        bodies: &[&[u8]],
        priority: i8,
        mark: &str,
        id: Option<&crate::JobId>,
    ) -> Result<bool> {
        let (mut con, ns, realtime) = self.ns_parts();
        let k = ns.queue(queue);
        let suffixes = crate::id::send_suffixes(&vec![None; bodies.len()]);
        let level = k.level(priority);
        let mut cmd = scripts::eval(
            &scripts::SEND,
            &[&level, &k.hash, &k.leases, &k.exact, &k.once],
        );
        cmd.arg(&k.realtime)
            .arg(if realtime { "1" } else { "0" })
            .arg(bodies.iter().map(|b| b.len()).max().unwrap_or(0))
            .arg(priority);
        for (body, suffix) in bodies.iter().zip(&suffixes) {
            cmd.arg(id.map_or(&suffix[..], |id| id.as_str().as_bytes()))
                .arg("")
                .arg(*body);
        }
        cmd.arg(mark);
        let v = scripts::run(&mut con, &scripts::SEND, &cmd).await?;
        match &v {
            Value::Array(items) => match items.first().map(scripts::int).transpose()? {
                Some(-1 | -3) => Err(Error::QueueNotFound { name: queue.into() }),
                Some(-2) => Err(Error::InvalidValue {
                    what: "batch callback",
                    reason: format!("its body exceeds queue {queue:?}'s maxsize"),
                }),
                Some(0) => Ok(false),
                _ => Ok(true),
            },
            v => Err(Error::Protocol(format!("send reply {v:?}"))),
        }
    }

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

    pub(super) async fn marks(&self, args: &[String]) -> Result<Value> {
        let mut cmd = scripts::eval(&scripts::MARKS, &[self.namespace().batch_marks()]);
        cmd.arg(args);
        scripts::run(&mut self.connection(), &scripts::MARKS, &cmd).await
    }

    pub(super) async fn mark_batches(&self, queue: &str, until: std::time::Duration) -> Result<()> {
        validate::queue_name(queue)?;
        let ms = crate::contract::backend::clamped_ms(until).max(1000);
        self.marks(&["m".into(), queue.into(), ms.to_string()])
            .await?;
        Ok(())
    }

    pub(super) async fn sweep_batches(&self) -> Result<()> {
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

    pub(super) async fn open_batch(&self, spec: &BatchSpec) -> Result<()> {
        // recorded first: should its enqueuer never seal it (it died, or its
        // enqueue was dropped part way), a sweep cancels it an hour on
        self.marks(&["d".into(), spec.id.to_string(), OPEN_MS.to_string()])
            .await?;
        let k = self.namespace().batch(spec.id.as_str());
        let mut cmd = scripts::eval(&scripts::BATCH_OPEN, &[&k.hash]);
        cmd.arg(spec.description.as_deref().unwrap_or(""))
            .arg(spec.members);
        for cb in &spec.callbacks {
            validate::queue_name(&cb.queue)?;
            cmd.arg(cb.kind.code()).arg(cb.encode());
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

    pub(super) async fn settled_batches(&self, queue: &str, members: &[String]) -> Result<()> {
        let mut later = Entered::default();
        let settled = self.settle_once(queue, members, &mut later).await;
        self.cascade(later).await;
        settled
    }

    /// [`settled_batches`](Self::settled_batches) without counting the
    /// finishes the parents it fails enter: added to `later`.
    async fn settle_once(
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
    pub(super) async fn count_removed(&self, queue: &str, members: &[Value]) {
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
    pub(super) async fn recover_batches(&self, queue: &str) -> Result<bool> {
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
