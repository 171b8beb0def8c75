//! The RSMQ handle: queues in RSMQ's Redis layout, and [`Queues`] on it.

mod lone;
mod send;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use redis::{AsyncCommands, Value};

use super::keys::Namespace;
use crate::contract::queues::{
    Message, MessageId, QueueAttributes, QueueListing, QueueOptions, QueueUpdate, Queues,
    queues_methods, validate,
};

use crate::backend::redis::connection::{Connection, RedisConfig, WaitForReplicas};
use crate::backend::redis::scripts::{self, Reply};
use crate::{Error, JobId, Result};

/// Most messages per script call of a batch send (Lua's `unpack` has limits).
const BATCH_MESSAGES: usize = 1000;
/// Most body bytes per script call of a batch send.
const BATCH_BYTES: usize = 4 << 20;
/// Queues a handle keeps as sent to with no worker waiting (see
/// `Rsmq::lean_queues`), a slot each by their names' hashes.
const LEAN_SLOTS: usize = 8;
/// Most messages one receive asks the script for: Lua prints integers of 15 digits
/// or more in exponent form, which ZRANGEBYSCORE's LIMIT refuses. No queue holds
/// more, so a larger `n` (even `usize::MAX`) means the same.
const RECEIVE_MAX: usize = 1_000_000_000;

/// Settings of an [`Rsmq`] handle.
///
/// ```
/// use redjob::queue::RsmqConfig;
///
/// let cfg = RsmqConfig { realtime: true, ..RsmqConfig::from_url("redis://127.0.0.1:6379") };
/// assert_eq!(cfg.namespace, "rsmq");
/// ```
#[derive(Debug, Clone)]
pub struct RsmqConfig {
    /// Where Redis is.
    pub redis: RedisConfig,
    /// Key prefix, as RSMQ's `ns` option. Defaults to `rsmq`. 1 to 200 bytes,
    /// without whitespace, control characters or braces (connecting refuses
    /// others). Namespaces on one Redis must not be one another followed by
    /// `:` (`app` beside `app:eu`): their keys can meet.
    pub namespace: String,
    /// PUBLISH the queue length on `ns:rt:q` after each send, as RSMQ's `realtime`
    /// option. Defaults to `false`; a send then publishes only when a redjob worker
    /// waits for the queue (it wakes the worker).
    pub realtime: bool,
}

impl RsmqConfig {
    /// The defaults with this Redis URL.
    pub fn from_url(url: impl Into<String>) -> Self {
        RsmqConfig {
            redis: RedisConfig::from_url(url),
            namespace: "rsmq".into(),
            realtime: false,
        }
    }
}

/// A handle on RSMQ queues in one Redis namespace. Cheap to clone.
#[derive(Clone)]
pub struct Rsmq {
    con: Connection,
    send_loaded: Arc<AtomicBool>,
    /// Whether sends call the send's function (see functions.rs).
    send_fn: Arc<crate::backend::redis::functions::Loaded>,
    unique_loaded: Arc<AtomicBool>,
    keyed_loaded: Arc<AtomicBool>,
    /// Whether the last plain send found a worker waiting for its queue (true
    /// before the first): the next send with plain messages then starts with a
    /// `TIME` (see `send_outcomes`). One flag for every queue: a producer that
    /// alternates between a queue with waiting workers and one without sends
    /// some of its sends to the first without it, which costs only their
    /// hand-off's head start.
    workers_wait: Arc<AtomicBool>,
    /// Queues (hashes of their names; 0: none) whose last plain send from
    /// this handle found no worker waiting: a lone send to one makes
    /// send.lua's lean call, without the lease counts (and without reading
    /// the hand-off's flags). A slot per queue by its hash, so a handle that
    /// sends to a few queues in turn keeps each (two queues of one slot
    /// take turns in it, and their sends pass the lease counts).
    lean_queues: Arc<[AtomicU64; LEAN_SLOTS]>,
    /// Whether Redis has counts.lua, which an overview pipelines.
    pub(crate) counts_loaded: Arc<AtomicBool>,
    ns: Namespace,
    realtime: bool,
    /// Whether each send waits for replicas (see [`WaitForReplicas`]).
    wait: Option<WaitForReplicas>,
    /// Who its actions are recorded as (see [`Inspect::actor`](crate::inspect::Inspect::actor)).
    pub(crate) actor: Arc<str>,
}

impl std::fmt::Debug for Rsmq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rsmq")
            .field("ns", &self.ns)
            .field("realtime", &self.realtime)
            .finish_non_exhaustive()
    }
}

impl Rsmq {
    /// Connects with the default settings (namespace `rsmq`, no realtime).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::with_config(RsmqConfig::from_url(url)).await
    }

    /// Connects with these settings.
    pub async fn with_config(cfg: RsmqConfig) -> Result<Self> {
        crate::contract::queues::validate::namespace(&cfg.namespace)?;
        let con = cfg.redis.connect().await?;
        Ok(Self::on_connection(con, &cfg.namespace, cfg.realtime)
            .wait_for_replicas(cfg.redis.wait_for_replicas))
    }

    /// Uses an open connection: a [`Connection`] from
    /// [`RedisConfig::connect`], or a redis-rs `ConnectionManager` or Cluster
    /// connection. On a Cluster the queues' keys carry hash tags; build a
    /// Cluster client of your own with `.retries(0)`, so that its calls go
    /// again only when the Cluster refused them before they ran (redjob does
    /// that itself, see "Redis Cluster" in the scale-out chapter). Fails with
    /// [`Error::InvalidValue`] for a namespace of no bytes or over 200, or
    /// with whitespace, a control character or a brace.
    ///
    /// ```no_run
    /// # async fn _demo(con: redjob::connection::Connection) -> redjob::Result<()> {
    /// use redjob::queue::Rsmq;
    ///
    /// let rsmq = Rsmq::from_connection(con, "rsmq", false)?;
    /// # let _ = rsmq; Ok(()) }
    /// ```
    pub fn from_connection(
        con: impl Into<Connection>,
        namespace: &str,
        realtime: bool,
    ) -> Result<Self> {
        crate::contract::queues::validate::namespace(namespace)?;
        Ok(Self::on_connection(con, namespace, realtime))
    }

    /// [`from_connection`](Self::from_connection) with a namespace already
    /// checked.
    pub(crate) fn on_connection(
        con: impl Into<Connection>,
        namespace: &str,
        realtime: bool,
    ) -> Self {
        let con = con.into();
        Rsmq {
            ns: Namespace::new(namespace, con.is_cluster()),
            con,
            send_loaded: Arc::default(),
            send_fn: Arc::default(),
            unique_loaded: Arc::default(),
            keyed_loaded: Arc::default(),
            workers_wait: Arc::new(AtomicBool::new(true)),
            lean_queues: Arc::default(),
            counts_loaded: Arc::default(),
            realtime,
            wait: None,
            actor: "api".into(),
        }
    }

    /// This handle, recording its actions in the queues' history as `by`
    /// (see [`Inspect::actor`](crate::inspect::Inspect::actor); one line, at
    /// most 200 bytes kept).
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
    /// use redjob::inspect::Inspect;
    /// use redjob::queue::Rsmq;
    ///
    /// let rsmq = Rsmq::connect("redis://127.0.0.1:6379").await?.acting_as("cron cleanup");
    /// assert_eq!(rsmq.actor(), "cron cleanup");
    /// # Ok(()) }
    /// ```
    pub fn acting_as(mut self, by: &str) -> Self {
        self.actor = crate::contract::history::actor_line(by).into();
        self
    }

    /// Makes each send wait for replicas (see [`WaitForReplicas`]); `None` (the
    /// default) does not wait. A timeout over
    /// [`MAX_DELAY`](crate::worker::MAX_DELAY) waits that long.
    ///
    /// ```no_run
    /// # async fn _demo(con: redjob::connection::Connection) -> redjob::Result<()> {
    /// use std::time::Duration;
    /// use redjob::connection::WaitForReplicas;
    /// use redjob::queue::Rsmq;
    ///
    /// let rsmq = Rsmq::from_connection(con, "rsmq", false)?.wait_for_replicas(Some(WaitForReplicas {
    ///     replicas: 1,
    ///     timeout: Duration::from_millis(500),
    /// }));
    /// # let _ = rsmq; Ok(()) }
    /// ```
    pub fn wait_for_replicas(mut self, wait: Option<WaitForReplicas>) -> Self {
        self.wait = wait;
        self
    }

    /// The connection and the keys of `queue`, for the other Redis-side modules.
    pub(crate) fn parts(
        &self,
        queue: &str,
    ) -> (Connection, crate::backend::redis::keys::QueueKeys) {
        (self.con.clone(), self.ns.queue(queue))
    }

    /// The connection and the namespace's key names.
    /// The connection, for a script of keys of several queues or none.
    pub(crate) fn connection(&self) -> Connection {
        self.con.clone()
    }

    /// The key names.
    pub(crate) fn namespace(&self) -> &crate::backend::redis::keys::Namespace {
        &self.ns
    }

    pub(crate) fn ns_parts(&self) -> (Connection, &crate::backend::redis::keys::Namespace, bool) {
        (self.con.clone(), &self.ns, self.realtime)
    }

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

/// Tells every worker that queues' settings changed (see
/// `RedisBackend::settings_changed`): the version moves on and a notice goes
/// out on `ns:@settings`.
pub(crate) async fn settings_changed(con: &mut Connection, ns: &Namespace) -> Result<()> {
    let [_, _, _, _, settings] = ns.workers();
    let _: i64 = redis::cmd("HINCRBY")
        .arg(&settings)
        .arg("v")
        .arg(1)
        .query_async(con)
        .await?;
    // a command of its own: no key, so a Cluster takes it on any node
    let _: i64 = redis::cmd("PUBLISH")
        .arg(ns.settings_channel())
        .arg("")
        .query_async(con)
        .await?;
    Ok(())
}

/// Tells every worker that running jobs of `queue` may have been cancelled
/// or deleted (`gone <queue>` on `ns:@settings`): one holding jobs of the
/// queue renews their leases now, which finds those gone and stops their
/// runs, rather than at its next renewal. The action stands whatever this
/// does: a worker that misses it learns at that renewal.
pub(crate) async fn tell_gone(con: &mut Connection, ns: &Namespace, queue: &str) {
    let told: redis::RedisResult<i64> = redis::cmd("PUBLISH")
        .arg(ns.settings_channel())
        .arg(format!("gone {queue}"))
        .query_async(con)
        .await;
    if let Err(e) = told {
        tracing::debug!(queue = %queue, error = %e, "could not tell the workers of jobs removed while they ran");
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

/// Calls `Rsmq`'s own method of the same name: `inherent!(self,
/// Queues::method(args) .await)`.
macro_rules! inherent {
    ($self:ident, $T:ident :: $m:ident ( $($a:ident),* ) $($aw:tt)*) => {
        Rsmq::$m($self, $($a),*) $($aw)*
    };
}

queues_methods! { impl Queues for Rsmq, |self| via inherent!; }
