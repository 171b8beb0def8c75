//! The RSMQ handle: queues in RSMQ's Redis layout, and [`Queues`] on it.

mod delete;
mod lone;
mod manage;
mod notify;
mod receive;
mod send;

// the replies' parsers, for the property tests in replies.rs
#[cfg(test)]
pub(crate) use manage::parse_attributes;
pub(crate) use notify::{settings_changed, tell_gone};
#[cfg(test)]
pub(crate) use receive::parse_messages;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

use super::keys::Namespace;
use crate::contract::queues::{Queues, queues_methods};
// for the doc links of `from_connection` (the code that used it moved out)
#[cfg(doc)]
use crate::Error;

use crate::Result;
use crate::backend::redis::connection::{Connection, RedisConfig, WaitForReplicas};

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
}

/// Calls `Rsmq`'s own method of the same name: `inherent!(self,
/// Queues::method(args) .await)`.
macro_rules! inherent {
    ($self:ident, $T:ident :: $m:ident ( $($a:ident),* ) $($aw:tt)*) => {
        Rsmq::$m($self, $($a),*) $($aw)*
    };
}

queues_methods! { impl Queues for Rsmq, |self| via inherent!; }
