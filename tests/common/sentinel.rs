//! A master, its replica and three Sentinels for tests: local `redis-server`
//! processes on free loopback ports.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::RedisServer;
use super::cluster::cli;

/// The name the Sentinels know the master by.
pub const MASTER: &str = "jobs";

/// One `redis-server --sentinel` process; killed when dropped.
pub struct Sentinel {
    child: Child,
    pub port: u16,
    dir: std::path::PathBuf,
}

impl Sentinel {
    /// Starts a Sentinel on a free port watching `master_port` (quorum 2, a
    /// master unreachable for 1 s is down), or `None` when it does not come up.
    fn try_start(master_port: u16) -> Option<Self> {
        let port = RedisServer::free_port();
        let dir =
            std::env::temp_dir().join(format!("redjob-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER} 1000\n\
                 sentinel failover-timeout {MASTER} 5000\n",
                dir.display()
            ),
        )
        .expect("write sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be on PATH (bash .ci/run installs it)");
        let mut sentinel = Sentinel { child, port, dir };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = sentinel.child.try_wait() {
                return None;
            }
            if cli(port, &["ping"]).is_some_and(|p| p.trim() == "PONG") {
                return Some(sentinel);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        sentinel.kill();
        None
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master, one replica and three Sentinels that see both and each other.
pub struct SentinelSet {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<Sentinel>,
    watchdog: Child,
}

impl SentinelSet {
    /// Starts them and waits until the replica streams from the master and
    /// every Sentinel knows the replica and the two other Sentinels.
    pub fn start() -> Self {
        let master = RedisServer::start_with(&["--repl-diskless-sync-delay", "0"]);
        let replica = RedisServer::start_with(&[
            "--replicaof",
            "127.0.0.1",
            &master.port.to_string(),
            "--repl-diskless-sync-delay",
            "0",
        ]);
        let sentinels: Vec<Sentinel> = (0..3)
            .map(|_| {
                (0..5)
                    .find_map(|_| Sentinel::try_start(master.port))
                    .expect("could not start a Sentinel")
            })
            .collect();
        let pids: Vec<String> = [master.pid(), replica.pid()]
            .into_iter()
            .chain(sentinels.iter().map(Sentinel::pid))
            .map(|p| p.to_string())
            .collect();
        // the test process may end without dropping a set (a panic in another
        // thread, a shared set): kill them when it is gone
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "while kill -0 {} 2>/dev/null; do sleep 1; done; kill -9 {} 2>/dev/null",
                std::process::id(),
                pids.join(" "),
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh");
        let set = SentinelSet {
            master,
            replica,
            sentinels,
            watchdog,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !set.ready() {
            assert!(
                std::time::Instant::now() < deadline,
                "the Sentinels did not see the master, its replica and each other within 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        set
    }

    fn ready(&self) -> bool {
        let streaming = cli(self.master.port, &["info", "replication"]).is_some_and(|i| {
            i.lines()
                .any(|l| l.starts_with("slave0:") && l.contains("state=online"))
        });
        streaming
            && self.sentinels.iter().all(|s| {
                cli(s.port, &["sentinel", "master", MASTER]).is_some_and(|m| {
                    let m: Vec<&str> = m.lines().collect();
                    let field = |name: &str| {
                        m.iter()
                            .position(|l| *l == name)
                            .and_then(|i| m.get(i + 1).copied())
                    };
                    field("num-slaves") == Some("1") && field("num-other-sentinels") == Some("2")
                })
            })
    }

    /// `redis+sentinel://` naming the three Sentinels and the master.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// The master's port as the first Sentinel that answers names it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let addr = cli(s.port, &["sentinel", "get-master-addr-by-name", MASTER])?;
            addr.lines().nth(1)?.trim().parse().ok()
        })
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}
