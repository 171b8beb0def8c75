//! A Redis Cluster for tests: 3 masters and 3 replicas, local `redis-server`
//! processes on free loopback ports, joined with `redis-cli --cluster create`.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::RedisServer;

/// Six `redis-server` processes in one Cluster; all killed when dropped, and by
/// a watchdog when the test process exits (a shared Cluster is never dropped).
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    watchdog: std::process::Child,
    /// The proxy each node is reached through, in `nodes`' order (none
    /// unless started [behind proxies](Self::start_behind_proxies)).
    pub proxies: Vec<super::FreezingProxy>,
}

impl RedisCluster {
    /// Starts 6 nodes and joins them: 3 masters with a replica each. Waits until
    /// every node reports `cluster_state:ok` with all slots served and every
    /// master streams to its replica.
    pub fn start() -> Self {
        Self::start_with_node_timeout(5000)
    }

    /// [`start`](Self::start) with a master unreachable for `node_timeout_ms`
    /// failed over (short for failover tests; the default 5 s keeps a busy
    /// 2-core machine from failing over by mistake).
    pub fn start_with_node_timeout(node_timeout_ms: u64) -> Self {
        Self::start_nodes(node_timeout_ms, false)
    }

    /// [`start`](Self::start), each node announcing the port of a
    /// [`FreezingProxy`](super::FreezingProxy) to it (`cluster-announce-port`),
    /// so that the clients reach the nodes through the proxies.
    pub fn start_behind_proxies() -> Self {
        Self::start_nodes(5000, true)
    }

    fn start_nodes(node_timeout_ms: u64, proxied: bool) -> Self {
        let timeout = node_timeout_ms.to_string();
        let mut proxies = Vec::new();
        let nodes: Vec<RedisServer> = (0..6)
            .map(|_| {
                (0..5)
                    .find_map(|_| {
                        // the Cluster bus needs a port of its own
                        let bus = RedisServer::free_port().to_string();
                        let port = RedisServer::free_port();
                        let proxy = proxied.then(|| super::FreezingProxy::start(port));
                        let announced = proxy.as_ref().map(|p| p.port.to_string());
                        let mut announce = Vec::new();
                        if let Some(p) = &announced {
                            announce = vec![
                                "--cluster-announce-port",
                                p,
                                "--cluster-announce-bus-port",
                                &bus,
                            ];
                        }
                        let node = RedisServer::try_start(
                            port,
                            &[
                                &[
                                    "--cluster-enabled",
                                    "yes",
                                    "--cluster-config-file",
                                    "nodes.conf",
                                    "--cluster-port",
                                    &bus,
                                    "--cluster-node-timeout",
                                    &timeout,
                                    // a replica whose master is gone takes over however
                                    // long it was cut off (tests kill masters at any moment)
                                    "--cluster-replica-validity-factor",
                                    "0",
                                    // replicas sync at once, not after the default 5 s
                                    "--repl-diskless-sync-delay",
                                    "0",
                                ][..],
                                &announce,
                            ]
                            .concat(),
                        )?;
                        proxies.extend(proxy);
                        Some(node)
                    })
                    .expect("could not start a cluster node")
            })
            .collect();
        let ports: Vec<String> = nodes.iter().map(|n| n.port.to_string()).collect();
        let pids: Vec<String> = nodes.iter().map(|n| n.pid().to_string()).collect();
        let dirs: Vec<String> = nodes
            .iter()
            .map(|n| format!("'{}'", n.dir().display()))
            .collect();
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; kill -9 {} 2>/dev/null; rm -rf {}",
                std::process::id(),
                pids.join(" "),
                dirs.join(" ")
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh");
        let cluster = RedisCluster {
            nodes,
            watchdog,
            proxies,
        };
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for p in &ports {
            create.arg(format!("127.0.0.1:{p}"));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli must be on PATH (it comes with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !cluster.ports().iter().all(|&p| healthy(p)) {
            assert!(
                std::time::Instant::now() < deadline,
                "cluster not ok within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // every master streams to its replica
        while cluster.masters().len() != 3
            || !cluster.masters().iter().all(|(p, _)| {
                cli(*p, &["info", "replication"]).is_some_and(|i| {
                    i.lines()
                        .any(|l| l.starts_with("slave0:") && l.contains("state=online"))
                })
            })
        {
            assert!(
                std::time::Instant::now() < deadline,
                "replicas not in sync within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// One Cluster for every test of this process (each test takes its own
    /// namespace on it).
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        SHARED.get_or_init(RedisCluster::start)
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis+cluster://` with every node as a seed (through its proxy, when
    /// it has one).
    pub fn url(&self) -> String {
        let ports = match self.proxies.len() {
            0 => self.ports(),
            _ => self.proxies.iter().map(|p| p.port).collect(),
        };
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// The ports of the masters now, each with the slot ranges it serves.
    pub fn masters(&self) -> Vec<(u16, Vec<(u16, u16)>)> {
        for &p in &self.ports() {
            let Some(nodes) = cli(p, &["cluster", "nodes"]) else {
                continue;
            };
            return nodes
                .lines()
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    let flags = *f.get(2)?;
                    if !flags.split(',').any(|x| x == "master") || flags.contains("fail") {
                        return None;
                    }
                    let port = f[1].split('@').next()?.rsplit_once(':')?.1.parse().ok()?;
                    let slots = f[8..]
                        .iter()
                        .filter(|s| !s.starts_with('['))
                        .filter_map(|s| {
                            let (a, b) = s.split_once('-').unwrap_or((s, s));
                            Some((a.parse().ok()?, b.parse().ok()?))
                        })
                        .collect();
                    Some((port, slots))
                })
                .collect();
        }
        Vec::new()
    }

    /// The port of the master serving `key`'s slot.
    pub fn master_of(&self, key: &str) -> u16 {
        let slot: u16 = self
            .ports()
            .into_iter()
            .find_map(|p| cli(p, &["cluster", "keyslot", key])?.trim().parse().ok())
            .expect("CLUSTER KEYSLOT");
        self.masters()
            .into_iter()
            .find(|(_, ranges)| ranges.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .map(|(port, _)| port)
            .expect("a master serves every slot")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

/// `redis-cli -p port args…`'s output, if it ran.
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether the node on `port` sees the whole Cluster as ok.
fn healthy(port: u16) -> bool {
    cli(port, &["cluster", "info"]).is_some_and(|info| {
        info.contains("cluster_state:ok")
            && info.contains("cluster_slots_ok:16384")
            && info.contains("cluster_known_nodes:6")
    })
}
