//! Managing queues: creating, listing and deleting them, and their attributes.

use redis::{AsyncCommands, Value};

use super::{Rsmq, settings_changed};
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::queues::{QueueAttributes, QueueListing, QueueOptions, QueueUpdate, validate};
use crate::{Error, Result};

impl Rsmq {
    /// Creates a queue. Fails with [`Error::QueueExists`] when it exists.
    pub async fn create_queue(&self, name: &str, opts: QueueOptions) -> Result<()> {
        validate::queue_name(name)?;
        validate::seconds("vt", opts.vt)?;
        validate::seconds("delay", opts.delay)?;
        validate::maxsize(opts.maxsize)?;
        let k = self.ns.queue(name);
        // with the keys a queue of the name deleted by an RSMQ client left
        // (see create.lua)
        let mut keys = vec![k.hash.clone(), k.unique.clone()];
        keys.extend(k.levels());
        let mut cmd = scripts::eval(&scripts::CREATE, &keys);
        cmd.arg(opts.vt)
            .arg(opts.delay)
            .arg(opts.maxsize)
            .arg(&k.realtime);
        let mut con = self.con.clone();
        let created = scripts::int(&scripts::run(&mut con, &scripts::CREATE, &cmd).await?)? == 1;
        // after the queue, and for an existing one too: a create whose SADD
        // failed is listed by the next create's (on a Cluster `ns:QUEUES` is in
        // another slot, so it cannot go in the script)
        let _: i64 = con.sadd(self.ns.queues(), name).await?;
        if !created {
            return Err(Error::QueueExists { name: name.into() });
        }
        Ok(())
    }

    /// The names of all queues in the namespace. An entry of `ns:QUEUES` that
    /// is no valid queue name is left out, with a warning (see
    /// [`queue_listing`](Self::queue_listing)).
    pub async fn list_queues(&self) -> Result<Vec<String>> {
        Ok(self.queue_listing().await?.names)
    }

    /// The names of all queues in the namespace, and apart the entries of
    /// `ns:QUEUES` that are no valid queue names: another RSMQ port with
    /// looser rules, or a stray `SADD`, can put them there, and every queue
    /// operation refuses them, so a listing that read each queue would fail.
    /// An entry that is not even UTF-8 is one of them, named lossily (its
    /// bad bytes as U+FFFD). Each call that finds such entries logs a warning
    /// naming them.
    pub async fn queue_listing(&self) -> Result<QueueListing> {
        let mut con = self.con.clone();
        // bytes: one member that is no UTF-8 must not fail the whole read
        let all: Vec<Vec<u8>> = con.smembers(self.ns.queues()).await?;
        let (mut names, mut skipped) = (Vec::new(), Vec::new());
        for raw in all {
            match String::from_utf8(raw) {
                Ok(name) if validate::queue_name(&name).is_ok() => names.push(name),
                Ok(name) => skipped.push(name),
                Err(e) => skipped.push(String::from_utf8_lossy(e.as_bytes()).into_owned()),
            }
        }
        if !skipped.is_empty() {
            tracing::warn!(
                key = %self.ns.queues(),
                skipped = ?skipped,
                "skipped {} entries of the set of queue names that are not valid queue names: {skipped:?}",
                skipped.len()
            );
        }
        Ok(QueueListing { names, skipped })
    }

    /// Deletes a queue, its messages, and redjob's own keys of it: its dead
    /// letters (`ns:q:dead`, `ns:q:dead:Q`), counters (`ns:q:stats`) and the
    /// jobs at priorities other than 0 (`ns:q:p<n>`), all in one transaction. A queue created again under the name starts from zero.
    ///
    /// An RSMQ client's `deleteQueue` knows only RSMQ's keys and leaves redjob's,
    /// so a queue it re-creates would show the old dead letters and counts. To
    /// purge them, call this: it removes redjob's keys even when the queue itself
    /// is gone already (and then returns [`Error::QueueNotFound`]).
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        validate::queue_name(name)?;
        let k = self.ns.queue(name);
        let mut con = self.con.clone();
        let mut pipe = redis::pipe();
        // UNLINK: a queue's large sets and hashes are freed in the background
        // (a DEL of 200,000 jobs held Redis for about a second)
        pipe.atomic().unlink(&k.hash).unlink(&k.zset).unlink(
            [
                &k.dead,
                &k.dead_hash,
                &k.stats,
                &k.unique,
                &k.periodic,
                &k.leases,
                &k.exact,
                &k.starts,
                &k.keyed,
                &k.keys,
                &k.kwake,
                &k.awaited,
                &k.bout,
                &k.bres,
                &k.deps,
                &k.once,
                &k.history_legacy,
            ]
            .into_iter()
            .cloned()
            .chain(k.history_keys())
            .chain(k.levels())
            .collect::<Vec<_>>(),
        );
        // on a Cluster `ns:QUEUES` is in another slot: it goes after the queue
        // (a failure between them leaves a name whose queue is gone, which
        // RSMQ clients and redjob treat as missing; deleting again clears it)
        let cluster = self.ns.is_cluster();
        if !cluster {
            pipe.srem(self.ns.queues(), name);
        }
        let deleted: Vec<i64> = pipe.query_async(&mut con).await?;
        if cluster {
            let _: i64 = con.srem(self.ns.queues(), name).await?;
        }
        let removed = deleted.first().copied().unwrap_or(0);
        if removed == 0 {
            return Err(Error::QueueNotFound { name: name.into() });
        }
        // the queue's settings went with it: every worker reads them again
        // now, so that one serving it stores its builder's limits before it
        // leases a job of the queue created again (without the notice it does
        // once a fetch finds the queue missing, or at its next recheck). The
        // delete stands whatever this does.
        if let Err(e) = settings_changed(&mut con, &self.ns).await {
            tracing::warn!(queue = %name, error = %e, "could not tell the workers the queue's settings went with it; they read them again when they find it missing");
        }
        Ok(())
    }

    /// A queue's attributes and message counts.
    ///
    /// Every field is read as the npm rsmq client reads it (`parseInt`): a
    /// fractional `vt` or `delay` stored by another client (PyRSMQ stores `1.5`)
    /// is reported in whole seconds, truncated. Sends and receives still use the
    /// exact stored value (a `delay` of `2.5` delays by 2.5 s).
    pub async fn attributes(&self, name: &str) -> Result<QueueAttributes> {
        validate::queue_name(name)?;
        let k = self.ns.queue(name);
        let cmd = scripts::eval(&scripts::ATTRIBUTES, &[&k.zset, &k.hash]);
        let v = scripts::run(&mut self.con.clone(), &scripts::ATTRIBUTES, &cmd).await?;
        parse_attributes(name, &v)
    }

    /// Changes a queue's attributes; returns them as they are afterwards.
    pub async fn set_attributes(&self, name: &str, update: QueueUpdate) -> Result<QueueAttributes> {
        validate::queue_name(name)?;
        let k = self.ns.queue(name);
        let mut cmd = scripts::eval(&scripts::SET_ATTRIBUTES, &[&k.hash]);
        if update == QueueUpdate::default() {
            return Err(Error::InvalidValue {
                what: "queue update",
                reason: "no attribute supplied".into(),
            });
        }
        if let Some(vt) = update.vt {
            validate::seconds("vt", vt)?;
            cmd.arg("vt").arg(vt);
        }
        if let Some(delay) = update.delay {
            validate::seconds("delay", delay)?;
            cmd.arg("delay").arg(delay);
        }
        if let Some(maxsize) = update.maxsize {
            validate::maxsize(maxsize)?;
            cmd.arg("maxsize").arg(maxsize);
        }
        let v = scripts::run(&mut self.con.clone(), &scripts::SET_ATTRIBUTES, &cmd).await?;
        if scripts::int(&v)? == 0 {
            return Err(Error::QueueNotFound { name: name.into() });
        }
        self.attributes(name).await
    }
}

/// attributes.lua's reply: `{1, vt, delay, maxsize, totalrecv, totalsent, created,
/// modified, msgs, hiddenmsgs}` or `{-1}` for a missing queue.
pub(crate) fn parse_attributes(name: &str, v: &Value) -> Result<QueueAttributes> {
    let (code, mut r) = Reply::status(v)?;
    if code == -1 {
        return Err(Error::QueueNotFound { name: name.into() });
    }
    let mut a = [0i64; 9];
    for (i, x) in a.iter_mut().enumerate() {
        // the hash's fields as any RSMQ client wrote them; then the two counts
        *x = if i < 7 { r.rsmq_int()? } else { r.int()? };
    }
    let u = |i: usize| a[i].max(0) as u64;
    Ok(QueueAttributes {
        vt: u(0),
        delay: u(1),
        maxsize: a[2],
        totalrecv: u(3),
        totalsent: u(4),
        created: u(5),
        modified: u(6),
        msgs: u(7),
        hiddenmsgs: u(8),
    })
}
