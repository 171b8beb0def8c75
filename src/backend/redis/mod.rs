//! The Redis backend: RSMQ's layout, one script call per batch.

mod listen;
mod poll;
pub(crate) mod replies;
pub(crate) mod scripts;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    Backend, DeadLetter, Fetched, Handed, MinuteStats, QueueStats, Settle, Settled, Token,
};
use crate::connection::{Connection, RedisConfig, Target};
use crate::keys::Namespace;
use crate::ops::{Tick, Ticked};
use crate::queue::{QueueOptions, Rsmq, SendMessage, Sent};
use crate::{Error, JobId, Result};
use scripts::{eval, run};

/// The wake-up connection's connect, subscribe and ping timeout.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the wake-up connection is pinged.
const LISTEN_PING_EVERY: Duration = Duration::from_secs(15);

/// Runs workers on Redis. Cheap to clone; clones share one multiplexed connection.
///
/// ```no_run
/// # async fn _demo() -> redjob::Result<()> {
/// let client = redjob::Client::connect("redis://127.0.0.1:6379").await?;
/// let backend = client.backend();
/// use redjob::backend::Backend;
/// let stats = backend.stats("emails").await?;
/// println!("{} processed", stats.processed);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisBackend {
    con: Connection,
    target: Target,
    ns: Namespace,
    rsmq: Rsmq,
    shared: Arc<Shared>,
}

/// What clones of a backend learn together.
#[derive(Default)]
struct Shared {
    /// Queues seen with jobs at a priority other than 0: their fetches pass every
    /// priority level's key.
    prioritized: Mutex<HashSet<String>>,
    /// Whether Redis has the scripts that run in pipelines (see [`scripts::run_pipeline`]).
    extend_loaded: AtomicBool,
    complete_loaded: AtomicBool,
    poll_loaded: AtomicBool,
    withdraw_loaded: AtomicBool,
    reclaim_loaded: AtomicBool,
    /// Connections of topic consumers' blocking reads, one per consumer and
    /// subscriber: a blocked read holds up every later command on its connection.
    readers: Mutex<HashMap<String, Connection>>,
    /// The server's `redis_version` once read: topics check it.
    version: std::sync::OnceLock<String>,
}

/// An `INFO` reply as text per server: a Cluster answers with each master's,
/// by address.
fn info_replies(info: redis::Value, what: &str) -> Result<Vec<String>> {
    Ok(match info {
        redis::Value::Map(nodes) => nodes
            .into_iter()
            .filter_map(|(_, v)| redis::from_redis_value(v).ok())
            .collect(),
        v => vec![redis::from_redis_value(v).map_err(|e| Error::Protocol(format!("{what}: {e}")))?],
    })
}

/// `major.minor` of a `redis_version` (`(0, 0)` when it is not one).
pub(crate) fn version_key(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("ns", &self.ns)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    pub(crate) fn new(con: Connection, target: Target, namespace: &str, realtime: bool) -> Self {
        RedisBackend {
            rsmq: Rsmq::from_connection(con.clone(), namespace, realtime),
            ns: Namespace::new(namespace, con.is_cluster()),
            con,
            target,
            shared: Arc::default(),
        }
    }

    /// Connects with these settings.
    pub async fn connect(redis: &RedisConfig, namespace: &str, realtime: bool) -> Result<Self> {
        let (target, con) = redis.open().await?;
        let mut backend = Self::new(con, target, namespace, realtime);
        if redis.wait_for_replicas.is_some() {
            backend = backend.waiting(redis.open().await?.1, redis, namespace, realtime);
        }
        Ok(backend)
    }

    /// Like [`connect`](Self::connect), but connects on first use: never fails for
    /// an unreachable Redis (only for a bad URL), so a worker can start first and
    /// wait for Redis, retrying with backoff.
    pub fn connect_lazy(redis: &RedisConfig, namespace: &str, realtime: bool) -> Result<Self> {
        let (target, con) = redis.open_lazy()?;
        let mut backend = Self::new(con, target, namespace, realtime);
        if redis.wait_for_replicas.is_some() {
            backend = backend.waiting(redis.open_lazy()?.1, redis, namespace, realtime);
        }
        Ok(backend)
    }

    /// Enqueues wait for replicas as `redis` says, on `sends`, a connection of
    /// their own: `WAIT` holds up its connection, and the workers' fetches and
    /// settles must not wait behind it.
    fn waiting(mut self, sends: Connection, redis: &RedisConfig, ns: &str, realtime: bool) -> Self {
        self.rsmq =
            Rsmq::from_connection(sends, ns, realtime).wait_for_replicas(redis.wait_for_replicas);
        self
    }

    /// The server's `redis_version` (`INFO server`), read once.
    pub(crate) async fn server_version(&self) -> Result<&str> {
        if let Some(v) = self.shared.version.get() {
            return Ok(v);
        }
        let info: redis::Value = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut self.con.clone())
            .await?;
        // the oldest node's version, so a Cluster mid-upgrade counts as the old one
        let v = info_replies(info, "INFO server")?
            .iter()
            .filter_map(|i| {
                i.lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
                    .map(|v| v.trim().to_string())
            })
            .min_by_key(|v| version_key(v))
            .unwrap_or_else(|| "unknown".into());
        Ok(self.shared.version.get_or_init(|| v))
    }

    /// The shared connection and the namespace.
    pub(crate) fn parts(&self) -> (Connection, &Namespace) {
        (self.con.clone(), &self.ns)
    }

    /// The connection for blocking reads named `name`, opened on first use with
    /// a response timeout above `block`.
    pub(crate) async fn reader(&self, name: &str, block: Duration) -> Result<Connection> {
        if let Some(c) = self.lock_readers().get(name) {
            return Ok(c.clone());
        }
        let con = self
            .target
            .dedicated(LISTEN_TIMEOUT, block + LISTEN_TIMEOUT)
            .await?;
        self.lock_readers().insert(name.to_string(), con.clone());
        Ok(con)
    }

    /// Forgets a blocking-read connection that failed.
    pub(crate) fn drop_reader(&self, name: &str) {
        self.lock_readers().remove(name);
    }

    fn lock_readers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Connection>> {
        // a map of connections cannot be left half-changed
        self.shared
            .readers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    fn lock_prioritized(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // a set of names cannot be left half-changed
        self.shared
            .prioritized
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Worker `worker`'s hand-off registration on `queue` (see fetch.lua): "v2"
    /// first, so that an earlier redjob's send, whose token this worker would
    /// not read, hands it nothing (see hand_off in lib.lua).
    fn registration(&self, queue: &str, worker: &str, lease: Duration) -> String {
        format!(
            "v2 {} {} {queue}",
            super::clamped_ms(lease),
            self.ns.handoff(worker)
        )
    }

    /// fetch.lua, with the worker's hand-off registration `reg` if any.
    async fn fetch_registering(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        reg: Option<&str>,
    ) -> Result<Fetched> {
        let k = self.ns.queue(queue);
        let mut levels = self.prioritized(queue);
        loop {
            let mut cmd = if levels {
                eval(&scripts::FETCH, &k.fetch_all())
            } else {
                eval(&scripts::FETCH, &k.fetch())
            };
            cmd.arg(max.max(1)).arg(super::clamped_ms(lease));
            if let Some(reg) = reg {
                cmd.arg(reg);
            }
            let v = run(&mut self.con.clone(), &scripts::FETCH, &cmd).await?;
            match replies::fetched(&v, max)? {
                Some(f) => return Ok(f),
                None if !levels => {
                    levels = true;
                    self.lock_prioritized().insert(queue.to_owned());
                }
                None => return Err(Error::Protocol("fetch asked for level keys twice".into())),
            }
        }
    }

    fn prioritized(&self, queue: &str) -> bool {
        self.lock_prioritized().contains(queue)
    }

    /// Runs calls of one script: alone in one round trip, or pipelined.
    async fn run_all(
        &self,
        script: &redis::Script,
        loaded: &AtomicBool,
        mut cmds: Vec<redis::Cmd>,
    ) -> Result<Vec<redis::Value>> {
        let mut con = self.con.clone();
        if cmds.len() == 1 {
            let cmd = cmds.pop().expect("one command");
            return Ok(vec![run(&mut con, script, &cmd).await?]);
        }
        let mut pipe = redis::pipe();
        for cmd in cmds {
            pipe.add_command(cmd);
        }
        scripts::run_pipeline(&mut con, &[(script, loaded)], &pipe).await
    }

    /// The RSMQ queue API on the same connection and namespace.
    pub fn rsmq(&self) -> &Rsmq {
        &self.rsmq
    }
}

/// The indexes of `items` grouped by priority, in order of first appearance.
fn by_priority<T>(items: &[T], priority: impl Fn(&T) -> i8) -> Vec<(i8, Vec<usize>)> {
    let mut groups: Vec<(i8, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = priority(item);
        match groups.iter_mut().find(|(q, _)| *q == p) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((p, vec![i])),
        }
    }
    groups
}

impl Backend for RedisBackend {
    async fn send(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        create: &QueueOptions,
    ) -> Result<Vec<Sent>> {
        super::send_creating(&self.rsmq, queue, msgs, create).await
    }

    async fn now_ms(&self) -> Result<u64> {
        self.rsmq.now_ms().await
    }

    async fn tick(
        &self,
        queue: &str,
        tick: &Tick<'_>,
        msg: &SendMessage,
        create: &QueueOptions,
    ) -> Result<Ticked> {
        super::creating(&self.rsmq, queue, create, || {
            self.rsmq.tick(queue, tick, msg)
        })
        .await
    }

    async fn beat(&self, id: &str, beat: &[u8], ttl: Duration) -> Result<()> {
        self.rsmq.beat(id, beat, ttl).await
    }

    async fn touch(&self, id: &str, _ttl: Duration, since: Duration) -> Result<bool> {
        self.rsmq.touch(id, since).await
    }

    async fn sizes(&self, queue: &str) -> Result<crate::inspect::StateCounts> {
        crate::inspect::Inspect::counts(self, queue).await
    }

    async fn stats(&self, queue: &str) -> Result<QueueStats> {
        crate::queue::validate::queue_name(queue)?;
        let k = self.ns.queue(queue);
        // by name: the hash holds the per-minute ring too (see complete.lua)
        let [processed, failed, retried, dead]: [Option<u64>; 4] = redis::cmd("HMGET")
            .arg(&k.stats)
            .arg(&["processed", "failed", "retried", "dead"])
            .query_async(&mut self.con.clone())
            .await?;
        Ok(QueueStats {
            processed: processed.unwrap_or(0),
            failed: failed.unwrap_or(0),
            retried: retried.unwrap_or(0),
            dead: dead.unwrap_or(0),
        })
    }

    async fn minutes(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        crate::queue::validate::queue_name(queue)?;
        let k = self.ns.queue(queue);
        let slots: Vec<String> = (0..super::MINUTES).map(|s| format!("m{s}")).collect();
        let (time, ring): ((u64, u64), Vec<Option<String>>) = redis::pipe()
            .cmd("TIME")
            .cmd("HMGET")
            .arg(&k.stats)
            .arg(&slots)
            .query_async(&mut self.con.clone())
            .await?;
        let now = time.0 * 1000 + time.1 / 1000;
        let ring = ring.iter().flatten().filter_map(|v| replies::minute(v));
        Ok(super::last_hour(now, ring.map(super::ring_minute)))
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        crate::queue::validate::queue_name(queue)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let k = self.ns.queue(queue);
        let mut con = self.con.clone();
        let ids: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(&k.dead)
            .arg(0)
            .arg(limit.min(i64::MAX as usize) - 1)
            .arg("WITHSCORES")
            .query_async(&mut con)
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&k.dead_hash);
        for (id, _) in &ids {
            let id = String::from_utf8_lossy(id);
            cmd.arg(&*id)
                .arg(format!("{id}:err"))
                .arg(format!("{id}:n"));
        }
        let vals: Vec<Option<Vec<u8>>> = cmd.query_async(&mut con).await?;
        ids.iter()
            .zip(vals.chunks(3))
            .map(|((id, died), v)| {
                let text = |i: usize| {
                    let b = v.get(i).and_then(|b| b.as_deref()).unwrap_or_default();
                    String::from_utf8_lossy(b).into_owned()
                };
                Ok(DeadLetter {
                    id: JobId::from_bytes(id)?,
                    body: v.first().cloned().flatten().unwrap_or_default(),
                    error: text(1),
                    attempts: text(2).parse().unwrap_or(0),
                    died_at_ms: *died as u64,
                })
            })
            .collect()
    }

    async fn fetch(&self, queue: &str, max: usize, lease: Duration) -> Result<Fetched> {
        self.fetch_registering(queue, max, lease, None).await
    }

    async fn fetch_waiting(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        worker: &str,
    ) -> Result<Fetched> {
        // a Cluster's PUBLISH cannot tell whether the worker listens (it counts
        // the node's own subscribers only), so no hand-offs there
        if self.ns.is_cluster() {
            return self.fetch(queue, max, lease).await;
        }
        let reg = self.registration(queue, worker, lease);
        self.fetch_registering(queue, max, lease, Some(&reg)).await
    }

    async fn withdraw_handoffs(
        &self,
        queues: &[String],
        worker: &str,
        lease: Duration,
    ) -> Result<()> {
        if self.ns.is_cluster() || queues.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for q in queues {
            let reg = self.registration(q, worker, lease);
            pipe.add_command(
                eval(&scripts::WITHDRAW, &[self.ns.queue(q).hash])
                    .arg(reg)
                    .clone(),
            );
        }
        let loaded = &self.shared.withdraw_loaded;
        scripts::run_pipeline(
            &mut self.con.clone(),
            &[(&scripts::WITHDRAW, loaded)],
            &pipe,
        )
        .await?;
        Ok(())
    }

    async fn extend(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> Result<Vec<Option<Token>>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.ns.queue(queue);
        let groups = by_priority(leases, |(_, t)| t.priority());
        let cmds: Vec<_> = groups
            .iter()
            .map(|(p, idx)| {
                let mut cmd = eval(&scripts::EXTEND, &[&k.level(*p), &k.leases]);
                cmd.arg(super::clamped_ms(lease));
                for &i in idx {
                    let (id, token) = &leases[i];
                    cmd.arg(id).arg(token.to_string());
                }
                cmd
            })
            .collect();
        let replies = self
            .run_all(&scripts::EXTEND, &self.shared.extend_loaded, cmds)
            .await?;
        let mut out = vec![None; leases.len()];
        for ((p, idx), v) in groups.iter().zip(&replies) {
            let tokens = replies::tokens(v)?;
            for (&i, t) in idx.iter().zip(tokens) {
                out[i] = t.map(|t| t.at_priority(*p));
            }
        }
        Ok(out)
    }

    async fn settle(&self, queue: &str, batch: &Settle) -> Result<Settled> {
        if batch.is_empty() {
            return Ok(Settled::default());
        }
        let k = self.ns.queue(queue);
        let parts = batch.by_priority();
        let cmds: Vec<_> = parts
            .iter()
            .map(|(p, part)| {
                let level = k.level(*p);
                let mut cmd = eval(
                    &scripts::COMPLETE,
                    &[
                        &level,
                        &k.hash,
                        &k.dead,
                        &k.dead_hash,
                        &k.stats,
                        &k.unique,
                        &k.leases,
                    ],
                );
                let (keep, max_age) = part.retention.limits();
                cmd.arg(part.acks.len())
                    .arg(part.reschedules.len())
                    .arg(part.dead.len())
                    .arg(*p)
                    .arg(keep)
                    .arg(max_age)
                    .arg(&k.realtime);
                for (id, token) in &part.acks {
                    cmd.arg(id).arg(token.to_string());
                }
                for r in &part.reschedules {
                    cmd.arg(r.id)
                        .arg(r.token.to_string())
                        .arg(super::clamped_ms(r.delay))
                        .arg(r.deliveries.min(crate::backend::MAX_COUNT))
                        .arg(if r.release { "l" } else { "r" })
                        .arg(r.error.as_deref().unwrap_or(""));
                }
                for d in &part.dead {
                    cmd.arg(d.id).arg(d.token.to_string()).arg(&d.error);
                }
                cmd
            })
            .collect();
        let replies = self
            .run_all(&scripts::COMPLETE, &self.shared.complete_loaded, cmds)
            .await?;
        let mut total = Settled::default();
        for v in &replies {
            let s = replies::settled(v)?;
            total.acked += s.acked;
            total.rescheduled += s.rescheduled;
            total.dead += s.dead;
            total.gone.extend(s.gone);
        }
        Ok(total)
    }

    async fn scores(&self, queue: &str, held: &[(JobId, Token)]) -> Result<Vec<Option<Token>>> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.ns.queue(queue);
        let groups = by_priority(held, |(_, t)| t.priority());
        let mut pipe = redis::pipe();
        for (p, idx) in &groups {
            pipe.cmd("ZMSCORE")
                .arg(k.level(*p))
                .arg(idx.iter().map(|&i| held[i].0).collect::<Vec<_>>());
        }
        let replies: Vec<Vec<Option<f64>>> = pipe.query_async(&mut self.con.clone()).await?;
        let mut out = vec![None; held.len()];
        for ((p, idx), scores) in groups.iter().zip(replies) {
            for (&i, s) in idx.iter().zip(scores) {
                out[i] = s.and_then(|s| Token::from_score(s, *p));
            }
        }
        Ok(out)
    }

    async fn warnings(&self) -> Result<Vec<String>> {
        let info: redis::Value = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.con.clone())
            .await?;
        let infos = info_replies(info, "INFO memory")?;
        let mut warnings = Vec::new();
        let version = self.server_version().await?;
        if version != "unknown" && version_key(version) < (6, 2) {
            warnings.push(format!(
                "this server is Redis {version}: redjob needs Redis 6.2 or newer (its scripts call ZMSCORE), and topics 7.0"
            ));
        }
        let mut policies: Vec<&str> = infos
            .iter()
            .filter_map(|i| {
                i.lines()
                    .find_map(|l| l.strip_prefix("maxmemory_policy:"))
                    .map(str::trim)
            })
            .filter(|p| *p != "noeviction")
            .collect();
        policies.sort_unstable();
        policies.dedup();
        warnings.extend(policies.into_iter().map(|p| format!(
                "Redis's maxmemory-policy is {p}: at maxmemory Redis may evict queued jobs without a trace; set it to noeviction"
        )));
        Ok(warnings)
    }

    async fn listen(
        &self,
        queues: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> Result<()> {
        let never = tokio_util::sync::CancellationToken::new();
        self.listen_on(queues, None, wake, subscribed, &never).await
    }

    fn real_time(&self) -> bool {
        true
    }

    async fn due_soon(&self, queues: &[String], within: Duration) -> Result<Vec<bool>> {
        self.poll_queues(queues, within).await
    }

    async fn listen_handoff(
        &self,
        queues: &[String],
        worker: &str,
        wake: &(dyn Fn(&str) + Send + Sync),
        handed: &(dyn Fn(Handed) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<()> {
        let on = (!self.ns.is_cluster()).then(|| (self.ns.handoff(worker), handed));
        self.listen_on(queues, on, wake, subscribed, stop).await
    }
}

#[cfg(test)]
mod tests {
    use super::version_key;

    #[test]
    fn versions_compare_by_major_and_minor() {
        assert_eq!(version_key("6.2.14"), (6, 2));
        assert_eq!(version_key("7.0.15"), (7, 0));
        assert!(version_key("6.0.20") < (6, 2));
        assert!(version_key("10.1") >= (7, 0));
        assert_eq!(version_key("unknown"), (0, 0));
    }
}
