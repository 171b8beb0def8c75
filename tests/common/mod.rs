//! Test helpers: a private `redis-server` per test, on a free loopback port.
#![allow(dead_code)]

pub mod cluster;
pub mod failover;
pub mod sentinel;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// A `redis-server` child process; killed when dropped.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: std::path::PathBuf,
    extra: Vec<String>,
    bin: std::path::PathBuf,
}

fn spawn(bin: &std::path::Path, port: u16, dir: &std::path::Path, extra: &[String]) -> Child {
    Command::new(bin)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/test installs redis-server, and scripts/servers the others)",
                bin.display()
            )
        })
}

/// A server binary besides Debian's redis-server, as `scripts/servers` installs
/// it (`valkey-server`, `redis-server-6.2`): `target/servers/<name>`, or the
/// path in the environment variable `var`.
pub fn server_binary(name: &str, var: &str) -> std::path::PathBuf {
    let path = std::env::var_os(var).map_or_else(
        || {
            // the workspace's target: the crate's own directory, or its
            // parent for the CLI's and the dashboard's tests
            let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let at = |dir: &std::path::Path| dir.join("target/servers").join(name);
            match here.parent() {
                Some(root) if !at(here).exists() && at(root).exists() => at(root),
                _ => at(here),
            }
        },
        Into::into,
    );
    assert!(
        path.exists(),
        "{} is missing: run scripts/servers (scripts/test does), or set {var}",
        path.display()
    );
    path
}

impl RedisServer {
    /// Starts a server with persistence off.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `--option value` arguments (later ones win).
    pub fn start_with(extra: &[&str]) -> Self {
        (0..5)
            .find_map(|_| Self::try_start(free_port(), extra))
            .expect("could not start redis-server")
    }

    /// Starts a server on `port` (e.g. one a client was pointed at before).
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        Self::try_start(port, extra).unwrap_or_else(|| panic!("redis-server on {port}"))
    }

    /// Starts a server on `port`, or `None` when it does not come up.
    pub fn try_start(port: u16, extra: &[&str]) -> Option<Self> {
        Self::try_start_binary("redis-server".as_ref(), port, extra)
    }

    /// Starts the server binary `bin` (Valkey, another Redis) with persistence
    /// off on a free port.
    pub fn start_binary(bin: &std::path::Path) -> Self {
        (0..5)
            .find_map(|_| Self::try_start_binary(bin, free_port(), &[]))
            .unwrap_or_else(|| panic!("could not start {}", bin.display()))
    }

    fn try_start_binary(bin: &std::path::Path, port: u16, extra: &[&str]) -> Option<Self> {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let dir = std::env::temp_dir().join(format!("redjob-test-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let child = spawn(bin, port, &dir, &extra);
        let mut server = RedisServer {
            child,
            port,
            dir,
            extra,
            bin: bin.into(),
        };
        // a failed server is killed and its directory removed on drop
        server.wait_ready(Duration::from_secs(10)).then_some(server)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's working directory (removed on drop).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// A free loopback port.
    pub fn free_port() -> u16 {
        free_port()
    }

    /// SIGKILLs the server: no shutdown, no final save.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port and directory (so an append-only
    /// file is replayed).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..50 {
            self.child = spawn(&self.bin, self.port, &self.dir, &self.extra);
            if self.wait_ready(Duration::from_secs(10)) {
                return;
            }
            // the port may linger for a moment
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart redis-server");
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::{Read, Write};
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                let mut buf = [0u8; 64];
                if s.write_all(b"PING\r\n").is_ok()
                    && matches!(s.read(&mut buf), Ok(n) if buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"))
                {
                    // another test's server may hold the port (two tests drew
                    // the same free one): ours still runs a moment later only
                    // if it bound the port itself
                    std::thread::sleep(Duration::from_millis(100));
                    return matches!(self.child.try_wait(), Ok(None));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A plain redis-rs connection for checks the API under test does not offer.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

/// A TCP proxy on a free loopback port to a server's port, whose open
/// connections can be frozen: once [`freeze`](Self::freeze) is called, each
/// holds its sockets and forwards nothing more (nor its end), as a flow that
/// a NAT or a load balancer forgot, or a host gone without a reset, while
/// connections made later go through. Its threads live as long as the test
/// process.
pub struct FreezingProxy {
    pub port: u16,
    epoch: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl FreezingProxy {
    /// A proxy to `127.0.0.1:to`.
    pub fn start(to: u16) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let epoch = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let frozen = epoch.clone();
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                let Ok(inbound) = inbound else { continue };
                let Ok(outbound) = std::net::TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let mine = frozen.load(Ordering::SeqCst);
                let (Ok(a), Ok(b)) = (inbound.try_clone(), outbound.try_clone()) else {
                    continue;
                };
                for (mut from, mut to) in [(inbound, b), (outbound, a)] {
                    let frozen = frozen.clone();
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let read = from.read(&mut buf);
                            if frozen.load(Ordering::SeqCst) != mine {
                                // hold both sockets, forward nothing
                                loop {
                                    std::thread::park();
                                }
                            }
                            match read {
                                Ok(n) if n > 0 && to.write_all(&buf[..n]).is_ok() => {}
                                _ => {
                                    let _ = to.shutdown(std::net::Shutdown::Write);
                                    return;
                                }
                            }
                        }
                    });
                }
            }
        });
        FreezingProxy { port, epoch }
    }

    /// Freezes the connections open now.
    pub fn freeze(&self) {
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Makes the Redis at `url` stall for `secs` seconds (`DEBUG SLEEP`: start it
/// with `--enable-debug-command yes`) from a task of its own, and returns once
/// the command is sent. The task's connection gives up on the reply before
/// the server wakes: a test reads the stall's end off the clock.
pub async fn stall(url: &str, secs: u32) -> redis::RedisResult<()> {
    let mut con = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    tokio::spawn(async move {
        let _ = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(secs)
            .query_async::<()>(&mut con)
            .await;
    });
    Ok(())
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Calls counted by `INFO commandstats`, by command name (lower case).
/// `CONFIG RESETSTAT`: the command counts [`command_calls`] reads start
/// from 0.
pub async fn reset_stats<C: redis::aio::ConnectionLike + Send>(con: &mut C) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(con)
        .await
        .unwrap();
}

pub async fn command_calls<C: redis::aio::ConnectionLike + Send>(
    con: &mut C,
) -> std::collections::HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(con)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .collect()
}

/// Closes every pub/sub connection of the server (`CLIENT KILL TYPE pubsub`);
/// how many there were.
pub async fn kill_subscribers<C: redis::aio::ConnectionLike + Send>(con: &mut C) -> u64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(con)
        .await
        .unwrap()
}

/// Polls `cond` every 10 ms until it holds or `limit` passes; returns whether it held.
pub async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// Like [`wait_until`] with an async condition.
pub async fn wait_for<F: std::future::Future<Output = bool>>(
    limit: Duration,
    mut cond: impl FnMut() -> F,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond().await
}

/// What handlers saw: one entry per run start.
#[derive(Default, Clone)]
pub struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<Run>>>);

/// One handler start.
#[derive(Debug, Clone)]
pub struct Run {
    pub id: redjob::JobId,
    pub key: u64,
    pub attempt: u32,
    /// tokio's clock, so paused-clock tests see virtual time.
    pub at: tokio::time::Instant,
}

impl Recorder {
    pub fn record(&self, ctx: &redjob::JobContext, key: u64) {
        self.0.lock().unwrap().push(Run {
            id: ctx.id(),
            key,
            attempt: ctx.attempt(),
            at: tokio::time::Instant::now(),
        });
    }

    pub fn runs(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Runs per key.
    pub fn counts(&self) -> std::collections::HashMap<u64, usize> {
        let mut m = std::collections::HashMap::new();
        for r in self.runs() {
            *m.entry(r.key).or_default() += 1;
        }
        m
    }
}

/// A worker running in a task.
pub struct Running {
    shutdown: tokio_util::sync::CancellationToken,
    handle: tokio::task::JoinHandle<redjob::Result<redjob::worker::Stopped>>,
}

impl Running {
    /// Whether the worker has exited (it should not, until stopped).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits (at most 30 s) for the worker to stop by itself, cleanly; why.
    pub async fn stopped(self) -> redjob::worker::Stopped {
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("the worker stops within 30 s")
            .unwrap()
            .unwrap()
    }

    /// Shuts the worker down and waits (at most 30 s) for a clean exit.
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

/// Starts a worker and waits (10 s at most) until it serves: every queue fetched
/// once and notifications subscribed.
pub async fn start_serving(worker: redjob::Worker) -> Running {
    let ready = worker.ready();
    let running = start(worker);
    tokio::time::timeout(Duration::from_secs(10), ready.wait())
        .await
        .expect("worker serving within 10 s")
        .expect("worker serving");
    running
}

/// Runs `worker` in a task.
pub fn start(worker: redjob::Worker) -> Running {
    let shutdown = worker.shutdown_token();
    Running {
        shutdown,
        handle: tokio::spawn(worker.run_until_stopped()),
    }
}

/// Publishes `n` events of type `placed` to `topic`, then has consumer `c1`
/// of `subscriber` read and dead-letter every event it is given (each with
/// the run that failed it): `n` new dead letters when it had nothing pending.
pub async fn dead_events<T: redjob::topic::Topics>(b: &T, topic: &str, subscriber: &str, n: usize) {
    use redjob::inspect::AttemptOutcome;
    use redjob::topic::{EventOptions, EventRun, EventSettle};
    let events = vec![("placed", "{}"); n];
    b.publish(topic, &events, &EventOptions::DEFAULT)
        .await
        .unwrap();
    let got = b
        .read(topic, subscriber, "c1", 100, Duration::ZERO)
        .await
        .unwrap()
        .unwrap_or_default();
    let now = std::time::Instant::now();
    let runs = got
        .iter()
        .map(|e| EventRun::new(e.id, 1, now, now, AttemptOutcome::Error, None))
        .collect();
    let batch = EventSettle {
        dead: got
            .into_iter()
            .map(|e| (e.delivery(), e, "declined".into()))
            .collect(),
        runs,
        ..Default::default()
    };
    b.settle_events(topic, subscriber, "c1", &batch, None)
        .await
        .unwrap();
}

/// A Redis backend on `server` (namespace "rsmq") with a queue "q", and its
/// queue layer.
pub async fn backend_with_queue(
    server: &RedisServer,
) -> (redjob::backend::redis::RedisBackend, redjob::queue::Rsmq) {
    let backend = redjob::backend::redis::RedisBackend::connect(
        &redjob::connection::RedisConfig::from_url(server.url()),
        "rsmq",
        false,
    )
    .await
    .unwrap();
    let rsmq = backend.rsmq().clone();
    rsmq.create_queue("q", redjob::queue::QueueOptions::default())
        .await
        .unwrap();
    (backend, rsmq)
}

/// The `FCALL`s the slow log holds, oldest first, each as its arguments'
/// text (`FCALL`, the function, the key count, the keys, the arguments).
/// The log keeps every command once `slowlog-log-slower-than` is 0.
pub async fn slow_fcalls(con: &mut redis::aio::MultiplexedConnection) -> Vec<Vec<String>> {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1000)
        .query_async(con)
        .await
        .expect("SLOWLOG GET");
    let mut calls = Vec::new();
    for entry in log.iter().rev() {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let Some(redis::Value::Array(args)) = fields.get(3) else {
            continue;
        };
        let text: Vec<String> = args
            .iter()
            .map(|a| match a {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => String::new(),
            })
            .collect();
        if text
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case("FCALL"))
        {
            calls.push(text);
        }
    }
    calls
}

/// Has the slow log keep every command (up to 10,000), from now on.
pub async fn log_every_command(con: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::pipe()
        .cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-max-len")
        .arg(10_000)
        .cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .cmd("SLOWLOG")
        .arg("RESET")
        .query_async(con)
        .await
        .unwrap();
}

/// The arguments of the script calls (`EVALSHA`, `EVAL`) the slow log holds,
/// each from the command's name on (a script's own commands are logged too,
/// by a client of its own: they are left out).
pub async fn slow_script_calls(con: &mut redis::aio::MultiplexedConnection) -> Vec<Vec<Vec<u8>>> {
    let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(10_000)
        .query_async(con)
        .await
        .expect("SLOWLOG GET");
    log.iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let Some(redis::Value::Array(args)) = fields.get(3) else {
                return None;
            };
            let args: Vec<Vec<u8>> = args
                .iter()
                .map(|a| match a {
                    redis::Value::BulkString(b) => b.clone(),
                    _ => Vec::new(),
                })
                .collect();
            let name = args.first()?;
            (name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL"))
                .then_some(args)
        })
        .collect()
}

/// The key counts of the send function's calls in the slow log, oldest
/// first (see `slow_fcalls`).
pub async fn send_calls(con: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    slow_fcalls(con)
        .await
        .into_iter()
        .filter(|c| c.len() > 2 && c[1].starts_with("redjob_send_"))
        .map(|c| c[2].clone())
        .collect()
}

/// A TCP proxy on a free loopback port to Redis's `port` that holds the
/// first piece a client sends holding `needle` (a command's bytes as sent,
/// such as `"$3\r\nset\r\n"`, settings.lua's mode of a change) until the
/// test lets it go: a test acts between a call's sending and its landing,
/// in that order every time. Everything else passes at once.
pub struct HoldingProxy {
    /// The proxy's port.
    pub port: u16,
    seen: std::sync::Arc<tokio::sync::Notify>,
    go: std::sync::Arc<tokio::sync::Notify>,
}

impl HoldingProxy {
    pub async fn start(port: u16, needle: &'static [u8]) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxied = listener.local_addr().unwrap().port();
        let seen = Arc::new(tokio::sync::Notify::new());
        let go = Arc::new(tokio::sync::Notify::new());
        let held = Arc::new(AtomicBool::new(false));
        let (s, g) = (seen.clone(), go.clone());
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                let (mut from_client, mut to_client) = inbound.into_split();
                let (mut from_server, mut to_server) = outbound.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                });
                let (seen, go, held) = (s.clone(), g.clone(), held.clone());
                tokio::spawn(async move {
                    // the last bytes sent, so that a needle split between two
                    // reads is found too
                    let mut tail: Vec<u8> = Vec::new();
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match from_client.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        tail.extend_from_slice(&buf[..n]);
                        if tail.windows(needle.len()).any(|w| w == needle)
                            && !held.swap(true, Ordering::SeqCst)
                        {
                            seen.notify_one();
                            go.notified().await;
                        }
                        let keep = tail.len().saturating_sub(needle.len());
                        tail.drain(..keep);
                        if to_server.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        HoldingProxy {
            port: proxied,
            seen,
            go,
        }
    }

    /// The proxy's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Waits (at most 20 s) until the proxy holds the piece with its needle.
    pub async fn held(&self) {
        tokio::time::timeout(Duration::from_secs(20), self.seen.notified())
            .await
            .expect("a call with the needle was sent within 20 s");
    }

    /// Lets the held piece go on to Redis.
    pub fn release(&self) {
        self.go.notify_one();
    }
}
