//! A batch's callbacks that fell due, sent each once (a flow's failed parent
//! dead-lettered or cancelled instead), and the chains of flows their
//! failures count in, in one loop.

use super::{Entered, Reply};
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts;
use crate::contract::batches::{BatchId, CallbackKind, callback_body};
use crate::contract::queues::QueueOptions;
use crate::{Error, Result};
use redis::Value;

impl Rsmq {
    /// Sends the callbacks `r` says are due, each once, then tells the batch.
    /// A callback that can never be sent (its body over its queue's
    /// maxsize) is dropped with an error logged, rather than retried forever.
    /// A flow's failed parent is dead-lettered or cancelled instead, and
    /// counted in its own flow when it is a child of one (and so on up a
    /// chain, by [`cascade`](Self::cascade)'s loop).
    pub(crate) async fn fire(&self, id: &BatchId, r: Reply) -> Result<()> {
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
    pub(super) async fn cascade(&self, mut later: Entered) {
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
    pub(super) async fn fire_step(
        &self,
        id: &BatchId,
        r: Reply,
        later: &mut Entered,
    ) -> Result<()> {
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
                    self.send_marked(queue, &bodies, cb.priority, &mark, None)
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
    pub(crate) async fn send_marked(
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
}
