//! Flows' parents on Redis while they wait for their children
//! (`flow_wait.lua`), and when they never run (`flow_fail.lua`): failed by
//! their flow (a child died or was cancelled, or the parent cannot be sent),
//! or cancelled by a caller while they wait.

use redis::Value;

use crate::JobId;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::{
    BatchId, BatchRef, BatchStatus, Callback, CallbackKind, callback_body,
};
use crate::contract::queues::{QueueOptions, validate};
use crate::{Error, Result};

/// What `flow_fail.lua` does with a flow's parent.
struct Failing<'a> {
    id: &'a JobId,
    /// Its body, as its dead letter or history entry keeps it.
    body: &'a [u8],
    /// Entered in the history as cancelled rather than dead-lettered.
    cancel: bool,
    /// Its dead letter's error (the history's "flow: <why>"), or a caller's
    /// actor line.
    why: &'a str,
    /// The once mark that makes this happen once.
    mark: &'a str,
    /// Its own flow's finish, when it is a child of one.
    own: Option<String>,
    /// A caller's cancel while it waits: the once mark of its send.
    send_mark: Option<String>,
    /// Its flow was sealed, so it waited in its queue: one that no longer
    /// waits went with its queue (deleted since, maybe created again).
    sealed: bool,
}

impl Rsmq {
    /// Dead-letters or cancels a flow's parent (`flow_fail.lua`); the finishes
    /// it enters (in its own flow when it is a child of one, and in the
    /// flows that wait for it) go to `later`, for the caller's loop to
    /// count (see `Rsmq::cascade`). Its body carries
    /// its flow's `status` as a sent parent's does, so that a dead letter
    /// requeued still reads its children's results. False when its once mark
    /// was there (failed already, or cancelled by a caller while it waited),
    /// True too when its flow was sealed and its queue deleted since: it
    /// went with it (see [`gone_parent`](Self::gone_parent)).
    pub(super) async fn fail_parent(
        &self,
        cb: &Callback,
        status: &BatchStatus,
        why: &str,
        mark: &str,
        later: &mut super::batches::Entered,
    ) -> Result<bool> {
        let Some(id) = cb.id else {
            return Err(Error::InvalidValue {
                what: "flow parent",
                reason: "stored without its id".into(),
            });
        };
        let queue = &cb.queue;
        let body = callback_body(&cb.body, status);
        let f = Failing {
            id: &id,
            body: &body,
            cancel: cb.cancel,
            why,
            mark,
            own: own_finish(&cb.body, &id, cb.cancel),
            send_mark: None,
            sealed: status.sealed,
        };
        // a sweep counts the finishes it enters (its own flow's, those of
        // flows that wait for it) should this worker stop before it does
        self.mark_batches(queue, std::time::Duration::from_secs(10))
            .await?;
        // a sealed flow's parent waited in its queue since its flow was
        // enqueued (flow_wait made the queue): a queue deleted since is not
        // created again for its dead letter (as its send makes none, see
        // send_once), nor is it dead-lettered into the queue created again
        // since (it no longer waits there). One whose flow's enqueue stopped
        // before its seal may have no queue yet: made, for its record
        let entered = if status.sealed {
            match self.flow_fail(queue, &f).await {
                Err(Error::QueueNotFound { .. }) => {
                    self.gone_parent(cb, &id, later).await?;
                    return Ok(true);
                }
                entered => entered?,
            }
        } else {
            crate::contract::backend::creating(self, queue, &QueueOptions::default(), || {
                self.flow_fail(queue, &f)
            })
            .await?
        };
        let failed = entered.is_some();
        if let Some(entered) = entered.filter(|e| !e.is_empty()) {
            later.finishes.push((queue.clone(), entered));
        }
        Ok(failed)
    }

    /// A flow's parent `id` (its callback `cb`) gone with its deleted queue,
    /// its flow sealed (it waited there): neither sent nor dead-lettered,
    /// its queue not created again. It counts as cancelled, as a deleted job
    /// does, in its own flow when it is a child of one, so that the flow
    /// above fails by its policy, its reason naming the queue (it waited for
    /// ever). The finish is applied to that flow directly (the parent's
    /// queue holds no `ns:q:bout` any more; a finish counts once by its
    /// index, so applying it again is harmless), the flow marked first for a
    /// sweep to fire what it made due should this worker stop before
    /// [`cascade`](Self::cascade) fires it. Called before the fire that met
    /// the gone parent is told it fired, so a crash before the count fires
    /// again and counts it.
    pub(super) async fn gone_parent(
        &self,
        cb: &Callback,
        id: &JobId,
        later: &mut super::batches::Entered,
    ) -> Result<()> {
        let queue = &cb.queue;
        let Some(own) = BatchRef::of_body(&cb.body) else {
            tracing::warn!(queue, parent = %id, "a flow's parent went with its deleted queue: never run, its queue not created again");
            return Ok(());
        };
        tracing::warn!(queue, parent = %id, flow = %own.batch, "a flow's parent went with its deleted queue: never run, its queue not created again; counted as cancelled in the flow above it");
        self.marks(&["g".into(), own.batch.to_string()]).await?;
        let finish = format!("{}c{id}", own.index);
        if let Some(r) = self
            .batch_call(&own.batch, "a", &[finish, queue.clone()])
            .await?
        {
            later.fires.push((own.batch, r));
        }
        Ok(())
    }

    /// Ages the once marks a caller's cancel of `parent` entered (scored a
    /// century ahead, see flow_fail.lua) once its flow `batch` fired the
    /// callback they guard (its parent, or its failure: a flow fires one of
    /// them, once): scored now, the sends' trim of marks over 7 days old
    /// takes them, as a completed batch's keys go 7 days on. A mark scored
    /// earlier (an ordinary one) is left as it is. Best effort: a mark left
    /// a century ahead costs a few bytes.
    pub(super) async fn age_cancel_marks(&self, queue: &str, batch: &BatchId, parent: &JobId) {
        let (mut con, k) = self.parts(queue);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let aged: redis::RedisResult<i64> = redis::cmd("ZADD")
            .arg(&k.once)
            .arg("XX")
            .arg("LT")
            .arg(now)
            .arg(format!("{batch}:{}", CallbackKind::Failed.code()))
            .arg(now)
            .arg(format!("{batch}:{}", CallbackKind::Parent.code()))
            .query_async(&mut con)
            .await;
        if let Err(e) = aged {
            tracing::debug!(queue, %parent, error = %e, "ageing a cancelled parent's once marks failed; they stay");
        }
    }

    /// Cancels `id` when it is a flow's parent waiting for its children, as
    /// its flow would when a child failed with `cancel_on_failure`: entered
    /// in the history as cancelled by `by` (an actor line), its waiters and
    /// the flows above it told, and never sent (its send's once mark
    /// entered). Its children run on (`cancel_batch` cancels them). False
    /// when it does not wait (sent, failed, or no parent).
    pub(super) async fn cancel_waiting_parent(
        &self,
        queue: &str,
        id: &JobId,
        by: &str,
    ) -> Result<bool> {
        let (mut con, k) = self.parts(queue);
        let waiting: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(&k.hash)
            .arg(format!("{id}:w"))
            .query_async(&mut con)
            .await?;
        let Some(w) = waiting else {
            return Ok(false);
        };
        let Some(at) = w.iter().position(|&b| b == b'\n') else {
            return Err(Error::Protocol(format!(
                "flow parent {id}: its entry has no batch"
            )));
        };
        let (batch, body) = (String::from_utf8_lossy(&w[..at]).into_owned(), &w[at + 1..]);
        let mark = |kind: CallbackKind| format!("{batch}:{}", kind.code());
        let f = Failing {
            id,
            body,
            cancel: true,
            why: by,
            mark: &mark(CallbackKind::Failed),
            own: own_finish(body, id, true),
            send_mark: Some(mark(CallbackKind::Parent)),
            sealed: false,
        };
        self.mark_batches(queue, std::time::Duration::from_secs(10))
            .await?;
        let Some(entered) = self.flow_fail(queue, &f).await? else {
            return Ok(false);
        };
        self.count_failed(queue, entered).await;
        Ok(true)
    }

    /// Counts the finishes a failed parent entered, when this caller may (a
    /// producer's ACL may not let it): else a sweep counts them, the queue
    /// marked before.
    async fn count_failed(&self, queue: &str, entered: Vec<String>) {
        if !entered.is_empty()
            && let Err(e) = self.settled_batches(queue, &entered).await
        {
            tracing::warn!(queue, error = %e, "counting a failed parent's finish failed; a worker's sweep counts it");
        }
    }

    /// flow_fail.lua: the finishes it entered, or `None` when it did nothing
    /// (failed already, or a caller's cancel found the parent not waiting).
    async fn flow_fail(&self, queue: &str, f: &Failing<'_>) -> Result<Option<Vec<String>>> {
        let (mut con, k) = self.parts(queue);
        let mut cmd = scripts::eval(
            &scripts::FLOW_FAIL,
            &[
                &k.hash,
                &k.dead,
                &k.dead_hash,
                &k.history,
                &k.history_hash,
                &k.once,
                &k.awaited,
                &k.bout,
                &k.deps,
            ],
        );
        cmd.arg(f.id.as_str())
            .arg(f.body)
            .arg(if f.cancel { "c" } else { "d" })
            .arg(f.why)
            .arg(f.mark)
            .arg(crate::contract::history::History::default().encode())
            .arg(&k.realtime)
            .arg(f.own.as_deref().unwrap_or(""))
            .arg(f.send_mark.as_deref().unwrap_or(""))
            .arg(if f.sealed { "1" } else { "" });
        match scripts::run(&mut con, &scripts::FLOW_FAIL, &cmd).await? {
            Value::Array(items) => match items.first().map(scripts::int).transpose()? {
                // a sealed flow's parent that no longer waits went with its
                // queue, though the queue was created again since
                Some(-1 | -3) => Err(Error::QueueNotFound { name: queue.into() }),
                Some(0) => Ok(None),
                _ => Ok(Some(
                    items
                        .iter()
                        .skip(1)
                        .map(|v| super::batches::text(Some(v)))
                        .collect(),
                )),
            },
            v => Err(Error::Protocol(format!("flow_fail reply {v:?}"))),
        }
    }

    /// Records a flow's parent waiting for its children (`flow_wait.lua`).
    pub(super) async fn wait_flow(
        &self,
        queue: &str,
        id: &crate::JobId,
        batch: &BatchId,
        body: &[u8],
    ) -> Result<()> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let mut v = batch.as_str().as_bytes().to_vec();
        v.push(b'\n');
        v.extend_from_slice(body);
        let mut cmd = scripts::eval(&scripts::FLOW_WAIT, &[&k.hash]);
        cmd.arg(id.as_str()).arg(v);
        if scripts::int(&scripts::run(&mut con, &scripts::FLOW_WAIT, &cmd).await?)? < 0 {
            return Err(Error::QueueNotFound { name: queue.into() });
        }
        Ok(())
    }
}

/// A parent's finish in its own flow, when its body names one (a child of
/// a flow): "<batch id> <index>d<id>", or "c" when cancelled.
fn own_finish(body: &[u8], id: &JobId, cancel: bool) -> Option<String> {
    BatchRef::of_body(body).map(|r| {
        let how = if cancel { 'c' } else { 'd' };
        format!("{} {}{how}{id}", r.batch, r.index)
    })
}
