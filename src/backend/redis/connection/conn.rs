//! One connection type over a single Redis and a Redis Cluster, and the clients
//! that open the extra connections (pub/sub, blocking reads).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use super::cluster::Cluster;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::lane::{self, Lanes};
use super::managed::{Managed, Reopen};
use super::refusals::{self, AskVia};
use super::sentinel::Link;
use crate::Result;

/// A connection to Redis: a managed connection to one server, a Redis
/// Cluster connection (which follows `MOVED`/`ASK` redirections and
/// failovers), or a connection to the master Redis Sentinel names (which asks
/// the Sentinels again when the master fails). A managed connection
/// reconnects by itself (after a broken socket, and after a `READONLY`: a
/// failover behind the server's address left it on a replica), and beside
/// its multiplexed socket keeps up to two
/// lanes: a call alone takes the first, one made while the first is taken the
/// second, and the calling task reads and writes that socket itself. So calls
/// under way at once are not ordered with each other; `WATCH`, `SELECT` and
/// other commands that leave state on their socket, and transactions, all go
/// to the multiplexed socket. A Sentinel connection keeps such lanes to its
/// master as well. Cheap to clone; clones share the connection.
///
/// [`RedisConfig::connect`](super::RedisConfig::connect) opens the right one for
/// its URL; [`Rsmq::from_connection`](crate::queue::Rsmq::from_connection) takes
/// one.
///
/// ```no_run
/// # async fn _demo() -> redjob::Result<()> {
/// use redjob::connection::RedisConfig;
///
/// let con = RedisConfig::from_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")
///     .connect()
///     .await?;
/// assert!(con.is_cluster());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Connection(Inner);

#[derive(Clone)]
enum Inner {
    /// With the lanes its calls take when one is free (see [`super::lane`]),
    /// both replaced after a `READONLY` (see [`super::managed`]).
    Managed(Arc<Managed>),
    /// With how it reaches the node of an `ASK` redirection (none for a
    /// connection of the caller's).
    Cluster(Cluster, Option<Arc<AskVia>>),
    /// A plain connection of its own (blocking reads on one server).
    Plain(MultiplexedConnection),
    /// The master Redis Sentinel names, looked up again when it fails.
    Sentinel(Arc<Link>),
}

impl Connection {
    pub(super) fn cluster(con: Cluster, via: Option<Arc<AskVia>>) -> Self {
        Connection(Inner::Cluster(con, via))
    }

    /// A managed connection with its lanes, both opened again with `reopen`
    /// when a reply says the server has become a replica.
    pub(super) fn managed(
        con: ConnectionManager,
        lane: Option<Arc<Lanes>>,
        reopen: Reopen,
    ) -> Self {
        Connection(Inner::Managed(Arc::new(Managed::new(
            con,
            lane,
            Some(reopen),
        ))))
    }

    pub(super) fn sentinel(link: Arc<Link>) -> Self {
        Connection(Inner::Sentinel(link))
    }

    /// Whether this is a Redis Cluster connection: its keys then carry the
    /// queue's hash tag (see "Redis Cluster" in [the scale-out chapter](crate::guide::scale_out)).
    pub fn is_cluster(&self) -> bool {
        matches!(self.0, Inner::Cluster(..))
    }

    /// Whether calls may take a lane, which writes a command packed by hand
    /// as it is (see [`packed`](Self::packed)): a managed connection's to one
    /// server, over TCP or a Unix socket, speaking RESP2.
    pub(crate) fn has_lanes(&self) -> bool {
        matches!(&self.0, Inner::Managed(m) if m.has_lanes())
    }

    /// Commands packed as RESP (`count` of them in `packed`): written as they
    /// are when a lane of a managed connection takes them, else `pipeline()`,
    /// the same commands, goes the usual way (`packed` is then not read: a
    /// caller on a connection without [lanes](Self::has_lanes) may pass it
    /// empty). Every reply, a server's error as a [`Value::ServerError`].
    /// For commands that leave no state on their connection, each with a
    /// reply; on a Cluster, commands of one slot.
    pub(crate) async fn packed(
        &mut self,
        packed: &[u8],
        count: usize,
        pipeline: impl FnOnce() -> Pipeline + Send,
    ) -> redis::RedisResult<Vec<Value>> {
        match &mut self.0 {
            Inner::Managed(m) => {
                let mut on = m.current();
                let reply = lane::packed(on.lane.as_ref(), &mut on.con, packed, count, pipeline);
                m.answered(on.generation, m.bounded(reply).await)
            }
            _ => self.req_packed_commands(&pipeline(), 0, count).await,
        }
    }

    /// Every key matching `pattern` whose type is `kind`: a `SCAN` of the
    /// server, or of each master of a Cluster. A key may come twice.
    pub(crate) async fn scan(&mut self, pattern: &str, kind: &str) -> Result<Vec<String>> {
        let scan = |cursor: u64| {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg(kind);
            cmd
        };
        let mut out = Vec::new();
        let Inner::Cluster(cluster, _) = &mut self.0 else {
            let mut cursor = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = scan(cursor).query_async(self).await?;
                out.extend(keys);
                match next {
                    0 => return Ok(out),
                    n => cursor = n,
                }
            }
        };
        let nodes = refusals::read(cluster, redis::cmd("CLUSTER").arg("NODES")).await?;
        let nodes: String = redis::from_redis_value(nodes)
            .map_err(|e| crate::Error::Protocol(format!("CLUSTER NODES: {e}")))?;
        for slot in masters(&nodes) {
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                slot,
                SlotAddr::Master,
            )));
            // a node that went away for a moment is scanned again whole (a
            // cursor is its process's own)
            let mut tries = 0;
            let keys = loop {
                match scan_node(cluster, &route, &scan).await {
                    Err(crate::Error::Redis(e))
                        if refusals::reads_again(&e) && tries < refusals::TRIES =>
                    {
                        tries += 1;
                        tokio::time::sleep(refusals::backoff(tries)).await;
                    }
                    keys => break keys?,
                }
            };
            out.extend(keys);
        }
        Ok(out)
    }
}

/// Every key a `SCAN` of the node at `route` returns.
async fn scan_node(
    cluster: &mut Cluster,
    route: &RoutingInfo,
    scan: &impl Fn(u64) -> Cmd,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        let reply = cluster.route_command(scan(cursor), route.clone()).await?;
        let (next, keys): (u64, Vec<String>) = redis::from_redis_value(reply)
            .map_err(|e| crate::Error::Protocol(format!("SCAN: {e}")))?;
        out.extend(keys);
        match next {
            0 => return Ok(out),
            n => cursor = n,
        }
    }
}

/// A slot of each master that serves any, from a `CLUSTER NODES` reply: a
/// route to the master by slot works whatever name the client knows it by.
fn masters(nodes: &str) -> Vec<u16> {
    nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.split(',').any(|f| f == "master") {
                return None;
            }
            // the slot ranges ("0-5460", "5461", "[…]" for one migrating)
            fields
                .get(8..)?
                .iter()
                .find_map(|r| r.split('-').next()?.parse().ok())
        })
        .collect()
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Inner::Managed(..) => "Connection(server)",
            Inner::Cluster(..) => "Connection(cluster)",
            Inner::Plain(_) => "Connection(plain)",
            Inner::Sentinel(_) => "Connection(sentinel)",
        })
    }
}

impl From<ConnectionManager> for Connection {
    fn from(con: ConnectionManager) -> Self {
        Connection(Inner::Managed(Arc::new(Managed::new(con, None, None))))
    }
}

impl From<ClusterConnection> for Connection {
    fn from(con: ClusterConnection) -> Self {
        Connection(Inner::Cluster(Cluster::Given(con), None))
    }
}

impl From<MultiplexedConnection> for Connection {
    fn from(con: MultiplexedConnection) -> Self {
        Connection(Inner::Plain(con))
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.0 {
            Inner::Managed(m) => Box::pin(async move {
                let mut on = m.current();
                let reply = m.bounded(lane::command(on.lane.as_ref(), &mut on.con, cmd));
                m.answered(on.generation, reply.await)
            }),
            Inner::Cluster(c, via) => Box::pin(refusals::command(c, via.as_ref(), cmd)),
            Inner::Plain(c) => c.req_packed_command(cmd),
            Inner::Sentinel(link) => Box::pin(link.call(move |mut master| async move {
                lane::command(master.lane.as_ref(), &mut master.con, cmd).await
            })),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.0 {
            Inner::Managed(m) => Box::pin(async move {
                let mut on = m.current();
                let lane = on.lane.as_ref();
                let reply = lane::pipeline(lane, &mut on.con, pipeline, offset, count);
                m.answered(on.generation, m.bounded(reply).await)
            }),
            Inner::Cluster(c, via) => {
                Box::pin(refusals::pipeline(c, via.as_ref(), pipeline, offset, count))
            }
            Inner::Plain(c) => c.req_packed_commands(pipeline, offset, count),
            Inner::Sentinel(link) => Box::pin(link.call(move |mut master| async move {
                let lane = master.lane.as_ref();
                lane::pipeline(lane, &mut master.con, pipeline, offset, count).await
            })),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.0 {
            Inner::Managed(m) => m.current().con.get_db(),
            Inner::Cluster(c, _) => c.get_db(),
            Inner::Plain(c) => c.get_db(),
            Inner::Sentinel(link) => link.db(),
        }
    }
}

/// What opens the extra connections: the server's client, the Cluster's client
/// and a client per seed node, or the Sentinel link.
#[derive(Clone)]
// one per backend, cloned rarely: its size does not matter
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    Server(redis::Client),
    Cluster {
        client: ClusterClient,
        /// The settings it was opened with (for connections with other timeouts).
        config: Box<super::RedisConfig>,
        seeds: Arc<[redis::Client]>,
        /// Which seed the next pub/sub connection goes to.
        turn: Arc<AtomicUsize>,
    },
    Sentinel {
        link: Arc<Link>,
        /// The settings it was opened with (for connections with other timeouts).
        config: Box<super::RedisConfig>,
    },
}

impl Target {
    /// A client of one server for pub/sub. On a Cluster, each call takes the
    /// next seed node: `PUBLISH` reaches every node of a Cluster, and a
    /// listener whose node failed reconnects to another. With Sentinel, the
    /// current master's.
    pub async fn pubsub(&self) -> Result<redis::Client> {
        Ok(match self {
            Target::Server(c) => c.clone(),
            Target::Cluster { seeds, turn, .. } => {
                seeds[turn.fetch_add(1, Ordering::Relaxed) % seeds.len()].clone()
            }
            Target::Sentinel { link, .. } => link.checked_master().await?.client,
        })
    }

    /// Told when the Sentinels replace the master (`None` without Sentinel):
    /// a connection that outlives the calls, such as a subscription, moves to
    /// the new one.
    pub fn replaced(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Target::Sentinel { link, .. } => Some(link.replaced()),
            _ => None,
        }
    }

    /// A connection of its own (for blocking reads, which hold up every later
    /// command on their connection) whose replies may take `response_timeout`.
    pub async fn dedicated(
        &self,
        connection_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Connection> {
        Ok(match self {
            Target::Server(c) => {
                let cfg = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connection_timeout))
                    .set_response_timeout(Some(response_timeout));
                c.get_multiplexed_async_connection_with_config(&cfg)
                    .await?
                    .into()
            }
            Target::Cluster { config, .. } | Target::Sentinel { config, .. } => {
                // a Cluster client's overall timeout is its builder's, and a
                // Sentinel link's connection has its own: a new one with these
                let config = super::RedisConfig {
                    connection_timeout,
                    response_timeout,
                    wait_for_replicas: None,
                    ..(**config).clone()
                };
                match config.target()? {
                    // no lanes (a blocking reader gains nothing by one), and no
                    // watcher of the Sentinels' announcements: the client's
                    // own link follows them, and a read from a master they
                    // replaced is taken again after its lease
                    Target::Sentinel { link, .. } => {
                        link.without_lanes();
                        link.without_watch();
                        link.master().await?;
                        Connection::sentinel(link)
                    }
                    _ => config.open().await?.1,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host-b master - 0 1 2 connected 5461-10922 [5461->-a1]
c3 127.0.0.1:7002@17002 master,fail - 0 1 3 disconnected
d4 127.0.0.1:7003@17003 slave a1 0 1 1 connected
e5 :7004@17004 master - 0 1 4 connected 10923
";
        assert_eq!(super::masters(nodes), [0, 5461, 10923]);
    }
}
