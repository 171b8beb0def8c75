//! The Redis backend: RSMQ's layout, one script call per batch.

pub(crate) mod replies;
pub(crate) mod scripts;

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::ConnectionManager;

use super::{Backend, DeadLetter, Fetched, QueueStats, Settle, Settled, Token};
use crate::connection::RedisConfig;
use crate::keys::Namespace;
use crate::queue::{QueueOptions, Rsmq, SendMessage};
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
    con: ConnectionManager,
    client: redis::Client,
    ns: Namespace,
    rsmq: Rsmq,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("ns", &self.ns)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    pub(crate) fn new(
        con: ConnectionManager,
        client: redis::Client,
        namespace: &str,
        realtime: bool,
    ) -> Self {
        RedisBackend {
            rsmq: Rsmq::from_connection(con.clone(), namespace, realtime),
            con,
            client,
            ns: Namespace::new(namespace),
        }
    }

    /// Connects with these settings.
    pub async fn connect(redis: &RedisConfig, namespace: &str, realtime: bool) -> Result<Self> {
        let (client, con) = redis.open().await?;
        Ok(Self::new(con, client, namespace, realtime))
    }

    /// Like [`connect`](Self::connect), but connects on first use: never fails for
    /// an unreachable Redis (only for a bad URL), so a worker can start first and
    /// wait for Redis, retrying with backoff.
    pub fn connect_lazy(redis: &RedisConfig, namespace: &str, realtime: bool) -> Result<Self> {
        let (client, con) = redis.open_lazy()?;
        Ok(Self::new(con, client, namespace, realtime))
    }

    /// The RSMQ queue API on the same connection and namespace.
    pub fn rsmq(&self) -> &Rsmq {
        &self.rsmq
    }
}

impl Backend for RedisBackend {
    async fn send(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        create: &QueueOptions,
    ) -> Result<Vec<JobId>> {
        super::send_creating(&self.rsmq, queue, msgs, create).await
    }

    async fn stats(&self, queue: &str) -> Result<QueueStats> {
        crate::queue::validate::queue_name(queue)?;
        let k = self.ns.queue(queue);
        let map: HashMap<String, u64> = redis::cmd("HGETALL")
            .arg(&k.stats)
            .query_async(&mut self.con.clone())
            .await?;
        let get = |f: &str| map.get(f).copied().unwrap_or(0);
        Ok(QueueStats {
            processed: get("processed"),
            failed: get("failed"),
            retried: get("retried"),
            dead: get("dead"),
        })
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
        let k = self.ns.queue(queue);
        let mut cmd = eval(&scripts::FETCH, &[&k.zset, &k.hash]);
        cmd.arg(max.max(1)).arg(super::clamped_ms(lease));
        let v = run(&mut self.con.clone(), &scripts::FETCH, &cmd).await?;
        replies::fetched(&v, max)
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
        let mut cmd = eval(&scripts::EXTEND, &[&k.zset]);
        cmd.arg(super::clamped_ms(lease));
        for (id, token) in leases {
            cmd.arg(id).arg(token.to_string());
        }
        let v = run(&mut self.con.clone(), &scripts::EXTEND, &cmd).await?;
        replies::tokens(&v)
    }

    async fn settle(&self, queue: &str, batch: &Settle) -> Result<Settled> {
        if batch.is_empty() {
            return Ok(Settled::default());
        }
        let k = self.ns.queue(queue);
        let mut cmd = eval(
            &scripts::COMPLETE,
            &[&k.zset, &k.hash, &k.dead, &k.dead_hash, &k.stats],
        );
        cmd.arg(batch.acks.len())
            .arg(batch.reschedules.len())
            .arg(batch.dead.len());
        for (id, token) in &batch.acks {
            cmd.arg(id).arg(token.to_string());
        }
        for r in &batch.reschedules {
            cmd.arg(r.id)
                .arg(r.token.to_string())
                .arg(super::clamped_ms(r.delay))
                .arg(r.deliveries.min(999))
                .arg(if r.release { "l" } else { "r" });
        }
        for d in &batch.dead {
            cmd.arg(d.id).arg(d.token.to_string()).arg(&d.error);
        }
        let v = run(&mut self.con.clone(), &scripts::COMPLETE, &cmd).await?;
        replies::settled(&v)
    }

    async fn scores(&self, queue: &str, ids: &[JobId]) -> Result<Vec<Option<Token>>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.ns.queue(queue);
        let scores: Vec<Option<f64>> = redis::cmd("ZMSCORE")
            .arg(&k.zset)
            .arg(ids)
            .query_async(&mut self.con.clone())
            .await?;
        Ok(scores
            .into_iter()
            .map(|s| s.and_then(Token::from_score))
            .collect())
    }

    async fn warnings(&self) -> Result<Vec<String>> {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.con.clone())
            .await?;
        let policy = info
            .lines()
            .find_map(|l| l.strip_prefix("maxmemory_policy:"))
            .map(str::trim);
        Ok(match policy {
            Some(p) if p != "noeviction" => vec![format!(
                "Redis's maxmemory-policy is {p}: at maxmemory Redis may evict queued jobs without a trace; set it to noeviction"
            )],
            _ => Vec::new(),
        })
    }

    async fn listen(
        &self,
        queues: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> Result<()> {
        let channels: HashMap<String, &str> = queues
            .iter()
            .map(|q| (self.ns.queue(q).realtime, q.as_str()))
            .collect();
        let timed_out = || Error::Protocol("notification connection timed out".into());
        let pubsub = tokio::time::timeout(LISTEN_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| timed_out())??;
        let (mut sink, mut stream) = pubsub.split();
        for ch in channels.keys() {
            tokio::time::timeout(LISTEN_TIMEOUT, sink.subscribe(ch))
                .await
                .map_err(|_| timed_out())??;
        }
        subscribed();
        // anything sent before the subscription took effect
        for q in queues {
            wake(q);
        }
        // a half-open connection delivers nothing and reports nothing: ping it
        let mut ping = tokio::time::interval(LISTEN_PING_EVERY);
        ping.tick().await;
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(msg) => {
                        if let Some(q) = channels.get(msg.get_channel_name()) {
                            wake(q);
                        }
                    }
                    None => break,
                },
                _ = ping.tick() => {
                    tokio::time::timeout(LISTEN_TIMEOUT, sink.ping::<redis::Value>())
                        .await
                        .map_err(|_| timed_out())??;
                }
            }
        }
        Err(Error::Protocol("notification connection closed".into()))
    }
}
