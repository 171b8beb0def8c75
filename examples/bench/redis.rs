//! A private redis-server for one run, and what Redis says it did.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child on a free loopback port (or a given `REDIS_URL`).
pub struct Server {
    child: Option<Child>,
    pub url: String,
    dir: Option<std::path::PathBuf>,
}

impl Server {
    /// `REDIS_URL` when set (the bench then assumes it may flush nothing: it uses
    /// its own queue names), else a fresh private server.
    pub fn start() -> Server {
        if let Ok(url) = std::env::var("REDIS_URL") {
            return Server {
                child: None,
                url,
                dir: None,
            };
        }
        Server::start_with(&[])
    }

    /// A fresh private server with extra `--option value` arguments (whatever
    /// `REDIS_URL` says).
    pub fn start_with(extra: &[&str]) -> Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = std::env::temp_dir().join(format!("redjob-bench-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (bash .ci/run installs it)");
        let url = format!("redis://127.0.0.1:{port}");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child: Some(child),
            url,
            dir: Some(dir),
        }
    }

    pub async fn con(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("connect to redis")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Commands Redis ran (including those inside scripts) and the top-level calls
/// among them (script calls and connection setup: each at most one round trip).
#[derive(Debug, Default, Clone, Copy)]
pub struct Cost {
    pub commands: u64,
    pub calls: u64,
    /// A script's or function's (`EVALSHA`, `FCALL`) mean time inside Redis
    /// per call (µs), their inner commands included.
    pub script_us: f64,
}

/// Commands the bench itself sends, not counted.
const OWN: &[&str] = &["config|resetstat", "info", "config", "flushall"];
/// Commands a client sends at top level; scripts call none of these.
const TOP: &[&str] = &[
    "evalsha",
    "eval",
    "script|load",
    "fcall",
    "function|load",
    "hello",
    "ping",
    "client|setinfo",
    "subscribe",
    "select",
];

pub async fn reset(con: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(con)
        .await
        .unwrap();
}

pub async fn cost(con: &mut redis::aio::MultiplexedConnection) -> Cost {
    let info = info(con, "commandstats").await;
    let mut c = Cost::default();
    let (mut script_calls, mut script_usec) = (0u64, 0.0f64);
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, stats)) = rest.split_once(':') else {
            continue;
        };
        let calls: u64 = stats
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if OWN.contains(&name) {
            continue;
        }
        if name == "evalsha" || name == "fcall" {
            script_calls += calls;
            script_usec += stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("usec="))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
        if std::env::var_os("BENCH_VERBOSE").is_some() {
            eprintln!("  {name}: {stats}");
        }
        c.commands += calls;
        if TOP.contains(&name) {
            c.calls += calls;
        }
    }
    if script_calls > 0 {
        c.script_us = script_usec / script_calls as f64;
    }
    c
}

/// One section of `INFO`.
async fn info(con: &mut redis::aio::MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .unwrap()
}

/// A numeric `name:value` line of an `INFO` text (0 when absent).
fn field(info: &str, name: &str) -> f64 {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A numeric field of an `INFO` section (0 when absent).
pub async fn info_field(
    con: &mut redis::aio::MultiplexedConnection,
    section: &str,
    name: &str,
) -> f64 {
    field(&info(con, section).await, name)
}

pub async fn used_memory(con: &mut redis::aio::MultiplexedConnection) -> i64 {
    field(&info(con, "memory").await, "used_memory") as i64
}

/// Redis's own CPU time so far (user + system), in µs.
pub async fn cpu_us(con: &mut redis::aio::MultiplexedConnection) -> f64 {
    let cpu = info(con, "cpu").await;
    (field(&cpu, "used_cpu_user") + field(&cpu, "used_cpu_sys")) * 1e6
}
