//! A Redis Cluster: its `redis+cluster://` URLs, and its connection, whose
//! sockets to the nodes are checked after a pause.
//!
//! A node closes a client left idle longer than its `timeout` (none by
//! default; many hosted Redis set one), and the `redis` crate's Cluster
//! connection learns it only when a call fails there (`broken pipe`),
//! without telling whether the call went out. So each socket to a node
//! ([`Node`]) notes when a call last went out on it, and a call that finds
//! it unused for [`CHECK`] or longer sends it a `PING` first: a socket the
//! node closed fails it, and the call fails unsent (see
//! [`not_sent`](super::lane::not_sent)), which makes the Cluster connection
//! open another socket to the node, and redjob send the call again there
//! (see [`super::refusals`]); so does a socket that does not answer the
//! `PING` in time (gone silent: it is marked dead, below). Calls that find
//! the socket unused at once check it once: the first takes the check, the
//! others wait for it and go on after it. A call on a socket used within
//! [`CHECK`] goes out at once: it costs reading the clock and writing the
//! time.
//!
//! The Cluster connection also keeps a socket a call timed out on, and a
//! socket nothing answers on any more (a flow a NAT or a load balancer
//! forgot, a node gone without a reset) breaks only once the operating
//! system gives up on it, many minutes later: every call to the node timed
//! out until then. So a call that times out marks its socket dead, and the
//! calls after it fail unsent there, which makes the Cluster connection
//! open another socket to the node, and redjob send them on it. (For a
//! node's own timeout to be seen here, the Cluster client's overall bound
//! on a call is the connection and response timeouts together, longer
//! than a node's response timeout: see `RedisConfig::target`.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::{ClusterConnection, Connect};
use redis::cluster_routing::RoutingInfo;
use redis::{
    AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult, Value,
};

/// How long a socket to a node may go unused before a call checks it with a
/// `PING` first (see [`super::lane::SHORT_CHECK`]).
const CHECK: Duration = super::lane::SHORT_CHECK;

/// A socket to one node of a Cluster, checked after a pause, given up
/// after a timeout (see the module's documentation). Clones share it.
#[derive(Clone)]
pub(crate) struct Node {
    con: MultiplexedConnection,
    state: Arc<State>,
}

struct State {
    /// When a call last went out on it (or the check before it did), in
    /// milliseconds from [`epoch`].
    used: AtomicU64,
    /// A call timed out on it: calls no longer go out there.
    dead: AtomicBool,
    /// Held by the call checking the socket after a pause: calls that find
    /// it unused meanwhile wait for that check, then go on after it, rather
    /// than send a `PING` each.
    checking: tokio::sync::Mutex<()>,
}

/// The zero of [`State::used`].
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`].
fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Node {
    /// `None` when the socket was used within [`CHECK`] (it is marked used
    /// now), else the time to mark it used once a check found it open.
    fn stale(&self) -> Option<u64> {
        let now = now_ms();
        let last = self.state.used.load(Ordering::Relaxed);
        if now.saturating_sub(last) < CHECK.as_millis() as u64 {
            // (a store racing another's may move the time back a little:
            // a later call then checks sooner, never later)
            self.state.used.store(now, Ordering::Relaxed);
            return None;
        }
        Some(now)
    }

    /// The error of a call not sent on a socket a call timed out on.
    fn gone() -> redis::RedisError {
        let timed_out = std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "a call timed out on it earlier",
        );
        super::lane::unsent(&timed_out.into())
    }

    /// `call` on the socket, which is marked dead when it times out.
    async fn timed<T>(
        state: &State,
        call: impl std::future::Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        let reply = call.await;
        if let Err(e) = &reply
            && e.is_timeout()
        {
            state.dead.store(true, Ordering::Relaxed);
        }
        reply
    }

    /// Sends the `PING` of a call that found the socket unused for [`CHECK`]
    /// or longer (see [`super::lane::checked`]: a socket found closed fails
    /// the call unsent, and so does one that did not answer the check in
    /// time, which is marked dead: the call itself never went out, so it may
    /// go on a new socket); once it answered, marks the socket used as of
    /// `at`, when the check began.
    async fn check(&mut self, at: u64) -> RedisResult<()> {
        match Self::timed(&self.state, super::lane::checked(&mut self.con)).await {
            Ok(()) => {}
            Err(e) if e.is_timeout() => return Err(super::lane::unsent(&e)),
            Err(e) => return Err(e),
        }
        self.state.used.fetch_max(at, Ordering::Relaxed);
        Ok(())
    }

    /// Makes the socket ready for a call: fails it unsent on a dead socket;
    /// checks it after a pause (see [`stale`](Self::stale)), once for all the
    /// calls that find it unused at once: the first takes the check, the
    /// others wait for it and go on after it (or fail unsent, should it have
    /// found the socket silent).
    async fn ready(&mut self) -> RedisResult<()> {
        if self.state.dead.load(Ordering::Relaxed) {
            return Err(Self::gone());
        }
        if self.stale().is_none() {
            return Ok(());
        }
        let state = self.state.clone();
        let _check = state.checking.lock().await;
        if state.dead.load(Ordering::Relaxed) {
            return Err(Self::gone());
        }
        match self.stale() {
            // checked by the call that held it before
            None => Ok(()),
            Some(at) => self.check(at).await,
        }
    }
}

impl Connect for Node {
    fn connect_with_config<'a, T>(info: T, config: AsyncConnectionConfig) -> RedisFuture<'a, Self>
    where
        T: IntoConnectionInfo + Send + 'a,
    {
        Box::pin(async move {
            let con = MultiplexedConnection::connect_with_config(info, config).await?;
            Ok(Node {
                con,
                state: Arc::new(State {
                    used: AtomicU64::new(now_ms()),
                    dead: AtomicBool::new(false),
                    checking: tokio::sync::Mutex::new(()),
                }),
            })
        })
    }
}

impl ConnectionLike for Node {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.ready().await?;
            Self::timed(&self.state, self.con.req_packed_command(cmd)).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.ready().await?;
            let call = self.con.req_packed_commands(pipeline, offset, count);
            Self::timed(&self.state, call).await
        })
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }
}

/// A Cluster connection: redjob's, over [`Node`]s (connected now, or by its
/// first call), or one the caller made, used as it is.
#[derive(Clone)]
pub(crate) enum Cluster {
    Checked(ClusterConnection<Node>),
    /// Connected by the first call (a worker that may start before the
    /// Cluster does); each clone replaces itself with the connection then.
    Pending(Arc<Pending>),
    Given(ClusterConnection),
}

/// A Cluster connection not made yet.
pub(crate) struct Pending {
    client: ClusterClient,
    /// Bounds making it.
    limit: Duration,
    con: tokio::sync::OnceCell<ClusterConnection<Node>>,
}

impl Cluster {
    /// A connection to `client`'s Cluster, made now.
    pub async fn connect(client: &ClusterClient) -> RedisResult<Self> {
        Ok(Cluster::Checked(
            client.get_async_generic_connection::<Node>().await?,
        ))
    }

    /// A connection to `client`'s Cluster, made by the first call, within
    /// `limit` (a call whose attempt failed fails, and the next tries again).
    pub fn lazy(client: &ClusterClient, limit: Duration) -> Self {
        Cluster::Pending(Arc::new(Pending {
            client: client.clone(),
            limit,
            con: tokio::sync::OnceCell::new(),
        }))
    }

    /// Replaces a pending connection with the one made.
    async fn made(&mut self) -> RedisResult<()> {
        if let Cluster::Pending(p) = self {
            let con = p
                .con
                .get_or_try_init(|| {
                    super::within(p.limit, p.client.get_async_generic_connection::<Node>())
                })
                .await?
                .clone();
            *self = Cluster::Checked(con);
        }
        Ok(())
    }

    /// `cmd` to the node `route` names.
    pub async fn route_command(&mut self, cmd: Cmd, route: RoutingInfo) -> RedisResult<Value> {
        self.made().await?;
        match self {
            Cluster::Checked(c) => c.route_command(cmd, route).await,
            Cluster::Given(c) => c.route_command(cmd, route).await,
            Cluster::Pending(_) => unreachable!("made above"),
        }
    }
}

impl ConnectionLike for Cluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Cluster::Checked(c) => c.req_packed_command(cmd),
            Cluster::Given(c) => c.req_packed_command(cmd),
            Cluster::Pending(_) => Box::pin(async move {
                self.made().await?;
                self.req_packed_command(cmd).await
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Cluster::Checked(c) => c.req_packed_commands(pipeline, offset, count),
            Cluster::Given(c) => c.req_packed_commands(pipeline, offset, count),
            Cluster::Pending(_) => Box::pin(async move {
                self.made().await?;
                self.req_packed_commands(pipeline, offset, count).await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Cluster::Checked(c) => c.get_db(),
            Cluster::Given(c) => c.get_db(),
            // a Cluster has database 0 only
            Cluster::Pending(_) => 0,
        }
    }
}

/// The seed node URLs of a `redis+cluster://` or `rediss+cluster://` URL;
/// `None` for any other URL, `Some(Err(reason))` for a cluster URL without a
/// node or with a database other than 0 (a Cluster has only database 0).
pub(super) fn seeds(url: &str) -> Option<Result<Vec<String>, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return None,
    };
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let db = path.trim_start_matches('/');
    let db = &db[..db.find('?').unwrap_or(db.len())];
    if !db.is_empty() && db != "0" {
        return Some(Err(format!(
            "a Redis Cluster has only database 0, not {db}"
        )));
    }
    let query = path.find('?').map_or("", |q| &path[q..]);
    let seeds: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{user}{h}{query}"))
        .collect();
    if seeds.is_empty() {
        return Some(Err(
            "name at least one node: redis+cluster://host:port,host:port".into(),
        ));
    }
    Some(Ok(seeds))
}

#[cfg(test)]
mod tests {
    use super::seeds;

    #[test]
    fn cluster_urls_give_one_url_per_node() {
        assert_eq!(seeds("redis://127.0.0.1:6379"), None);
        assert_eq!(seeds("unix:///tmp/r.sock"), None);
        assert_eq!(seeds("not a url"), None);
        assert_eq!(
            seeds("redis+cluster://10.0.0.1:7000,10.0.0.2:7001"),
            Some(Ok(vec![
                "redis://10.0.0.1:7000".into(),
                "redis://10.0.0.2:7001".into()
            ]))
        );
        assert_eq!(
            seeds("rediss+cluster://app:p@ss@h1:7000, h2:7000/0?protocol=resp3"),
            Some(Ok(vec![
                "rediss://app:p@ss@h1:7000?protocol=resp3".into(),
                "rediss://app:p@ss@h2:7000?protocol=resp3".into()
            ]))
        );
        assert_eq!(
            seeds("REDIS+CLUSTER://h:1/"),
            Some(Ok(vec!["redis://h:1".into()]))
        );
        let bad = seeds("redis+cluster://h:1/3").unwrap().unwrap_err();
        assert!(bad.contains("only database 0"), "{bad}");
        let empty = seeds("redis+cluster://").unwrap().unwrap_err();
        assert!(empty.contains("at least one node"), "{empty}");
    }
}
