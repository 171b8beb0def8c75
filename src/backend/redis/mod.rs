//! The Redis backend: RSMQ's layout, one script call per batch.

mod admin;
mod batch_adds;
mod batch_index;
mod batches;
mod complete;
pub(crate) mod connection;
mod convert;
mod functions;
mod inspect;
mod keys;
mod leases;
mod listen;
mod live;
mod overview;
mod packed;
mod parents;
mod periodic;
mod pipelines;
mod poll;
pub(crate) mod queues;
mod replies;
mod results;
mod scripts;
mod settings;
mod topics;
mod waiters;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use connection::{Connection, RedisConfig, Target};
use keys::Namespace;
use queues::Rsmq;

use crate::contract::admin::{Admin, admin_methods};
use crate::contract::inspect::{Inspect, inspect_methods};
use crate::{Error, Result};

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
    /// Whether Redis has the scripts that run in pipelines (see [`pipelines::run_pipeline`]).
    extend_loaded: AtomicBool,
    complete_loaded: AtomicBool,
    poll_loaded: AtomicBool,
    withdraw_loaded: AtomicBool,
    reclaim_loaded: AtomicBool,
    topic_info_loaded: AtomicBool,
    /// Connections of topic consumers' blocking reads, one per consumer and
    /// subscriber: a blocked read holds up every later command on its connection.
    readers: Mutex<HashMap<String, Connection>>,
    /// The server's `redis_version` once read: topics check it.
    version: std::sync::OnceLock<String>,
    /// When a claim last asked to remove a subscriber's gone consumers, by
    /// stream and subscriber (see `topics::read::GONE_SWEEP_EVERY`).
    swept: Mutex<HashMap<String, std::time::Instant>>,
    /// When the sweep last trimmed the index of batches, and where the next
    /// trim goes on from (see batch_index.rs).
    batch_index: Mutex<(Option<std::time::Instant>, batch_index::TrimCursor)>,
    /// Topics this client added to the index of topic names, and when (see
    /// `topics::index::INDEX_AGAIN`): a publish adds its topic again only
    /// that long after.
    indexed: Mutex<HashMap<String, std::time::Instant>>,
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
            rsmq: Rsmq::on_connection(con.clone(), namespace, realtime),
            ns: Namespace::new(namespace, con.is_cluster()),
            con,
            target,
            shared: Arc::default(),
        }
    }

    /// Connects with these settings.
    pub async fn connect(redis: &RedisConfig, namespace: &str, realtime: bool) -> Result<Self> {
        crate::contract::queues::validate::namespace(namespace)?;
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
        crate::contract::queues::validate::namespace(namespace)?;
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
            Rsmq::on_connection(sends, ns, realtime).wait_for_replicas(redis.wait_for_replicas);
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
            .dedicated(LISTEN_TIMEOUT, block.saturating_add(LISTEN_TIMEOUT))
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

    fn prioritized(&self, queue: &str) -> bool {
        self.lock_prioritized().contains(queue)
    }

    /// The RSMQ queue API on the same connection and namespace.
    pub fn rsmq(&self) -> &Rsmq {
        &self.rsmq
    }

    /// This backend, recording its actions in the queues' history as `by`
    /// (see [`Inspect::actor`]).
    pub fn acting_as(mut self, by: &str) -> Self {
        self.rsmq = self.rsmq.acting_as(by);
        self
    }
}

inspect_methods! {
    /// Inspection runs on the RSMQ handle ([`Rsmq`](crate::queue::Rsmq)'s [`Inspect`]).
    impl Inspect for RedisBackend, |self| self.rsmq();
}
admin_methods! { impl Admin for RedisBackend, |self| self.rsmq(); }

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
