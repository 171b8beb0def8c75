//! A call through Redis Sentinel is bounded by the connection and response
//! timeouts together, however the Sentinels behave while it looks for the
//! master: here a fake Sentinel announces a new master at the end of every
//! lookup, so that each lookup finds a master already replaced and looks
//! again (three lookups at most), each within the timeouts. The master itself is a real Redis.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::RedisServer;
use redjob::connection::RedisConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, broadcast};

/// The master's name the fake Sentinel knows.
const SERVICE: &str = "jobs";

/// A Sentinel speaking just enough RESP2 for the `redis` crate's lookups and
/// redjob's watcher: `SENTINEL MASTERS`, `SENTINEL get-master-addr-by-name`,
/// `SUBSCRIBE +switch-master`, `PING`, `ROLE`, and `+OK` to anything else.
struct FakeSentinel {
    port: u16,
    /// While set, a `SENTINEL MASTERS` answers after `slow`, announces a new
    /// master on `+switch-master` just before it does, and closes its
    /// connection after; a new connection's first `CLIENT SETINFO` answers after
    /// twice `slow`, its `ROLE` after `slow`.
    announcing: Arc<AtomicBool>,
    announce: broadcast::Sender<()>,
}

impl FakeSentinel {
    async fn start(master: u16, slow: Duration) -> FakeSentinel {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let announcing = Arc::new(AtomicBool::new(false));
        let (announce, _) = broadcast::channel(64);
        let (on, tx) = (announcing.clone(), announce.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, master, slow, on.clone(), tx.clone()));
            }
        });
        FakeSentinel {
            port,
            announcing,
            announce,
        }
    }

    fn url(&self) -> String {
        format!("redis+sentinel://127.0.0.1:{}/{SERVICE}", self.port)
    }
}

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

/// A Sentinel's `ROLE`: the masters it watches.
fn role() -> String {
    format!("*2\r\n{}{}", bulk("sentinel"), array(&[bulk(SERVICE)]))
}

fn array(items: &[String]) -> String {
    format!("*{}\r\n{}", items.len(), items.concat())
}

/// The next command on `buf` (a RESP array of bulk strings), taken off it;
/// `None` until a whole one has come.
fn command(buf: &mut Vec<u8>) -> Option<Vec<String>> {
    fn line(buf: &[u8], at: usize) -> Option<(&str, usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((std::str::from_utf8(&buf[at..end]).ok()?, end + 2))
    }
    let (head, mut at) = line(buf, 0)?;
    let n: usize = head.strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, start) = line(buf, at)?;
        let len: usize = len.strip_prefix('$')?.parse().ok()?;
        if buf.len() < start + len + 2 {
            return None;
        }
        args.push(String::from_utf8_lossy(&buf[start..start + len]).into_owned());
        at = start + len + 2;
    }
    buf.drain(..at);
    Some(args)
}

async fn serve(
    socket: TcpStream,
    master: u16,
    slow: Duration,
    announcing: Arc<AtomicBool>,
    announce: broadcast::Sender<()>,
) {
    let (mut read, write) = socket.into_split();
    let write = Arc::new(Mutex::new(write));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut subscribed = false;
    loop {
        let Some(args) = command(&mut buf) else {
            match read.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let name = args[0].to_ascii_lowercase();
        // a lookup's connection is closed after it while announcing: the
        // next lookup connects again, slowly
        let mut close = false;
        let sub = args.get(1).map(|s| s.to_ascii_lowercase());
        let reply = match (name.as_str(), sub.as_deref()) {
            ("client", _) | ("role", _) if announcing.load(Ordering::SeqCst) => {
                let first = args.get(2).is_some_and(|a| a == "LIB-NAME");
                if name == "role" || first {
                    tokio::time::sleep(if first { slow * 2 } else { slow }).await;
                }
                if name == "client" {
                    "+OK\r\n".to_string()
                } else {
                    role()
                }
            }
            ("sentinel", Some("masters")) => {
                if announcing.load(Ordering::SeqCst) {
                    close = true;
                    tokio::time::sleep(slow).await;
                    let _ = announce.send(());
                    // the watcher reads the announcement before the lookup
                    // has checked the master it found
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                let info = [
                    "name",
                    SERVICE,
                    "ip",
                    "127.0.0.1",
                    "port",
                    &master.to_string(),
                    "flags",
                    "master",
                ]
                .map(bulk);
                array(&[array(&info)])
            }
            ("sentinel", Some("get-master-addr-by-name")) => {
                array(&[bulk("127.0.0.1"), bulk(&master.to_string())])
            }
            ("subscribe", _) => {
                subscribed = true;
                let mut told = announce.subscribe();
                let (out, port) = (write.clone(), master);
                tokio::spawn(async move {
                    while told.recv().await.is_ok() {
                        // another name for the same address: the master found
                        // is deposed, and the lookup under way finds one
                        // replaced meanwhile
                        let said = format!("{SERVICE} 127.0.0.1 {port} localhost {port}");
                        let msg = array(&[bulk("message"), bulk("+switch-master"), bulk(&said)]);
                        if out.lock().await.write_all(msg.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
                format!("*3\r\n{}{}:1\r\n", bulk("subscribe"), bulk(&args[1]))
            }
            ("role", _) => role(),
            ("ping", _) if subscribed => array(&[bulk("pong"), bulk("")]),
            ("ping", _) => "+PONG\r\n".to_string(),
            _ => "+OK\r\n".to_string(),
        };
        if write
            .lock()
            .await
            .write_all(reply.as_bytes())
            .await
            .is_err()
            || close
        {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_every_lookup_meets_an_announcement_fails_within_the_timeouts() {
    let master = RedisServer::start();
    // each step of a lookup is answered within the `redis` crate's bounds
    // on a Sentinel's (0.5 s a reply, 1 s to connect), a lookup within the
    // connection timeout (2 s): the first 0.4 s (the connection kept), the
    // next two 1.45 s (connected again). Together 3.3 s, past the connection
    // and response timeouts together (2.3 s)
    let sentinel = FakeSentinel::start(master.port, Duration::from_millis(350)).await;
    let mut con = RedisConfig {
        connection_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_millis(300),
        ..RedisConfig::from_url(sentinel.url())
    }
    .connect()
    .await
    .unwrap();
    // a quiet Sentinel: the master is found
    let pong: String = redis::cmd("PING").query_async(&mut con).await.unwrap();
    assert_eq!(pong, "PONG");

    // from now on every lookup ends with an announcement; one now deposes
    // the master found
    sentinel.announcing.store(true, Ordering::SeqCst);
    let mut waited = 0;
    while sentinel.announce.receiver_count() == 0 && waited < 100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    assert!(
        sentinel.announce.receiver_count() > 0,
        "the client never subscribed to the Sentinel's announcements"
    );
    let _ = sentinel.announce.send(());
    // the watcher deposes it as it reads the announcement
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started = std::time::Instant::now();
    let called = redis::cmd("PING").query_async::<String>(&mut con).await;
    let took = started.elapsed();
    let e = called.expect_err("every lookup met an announcement: no master was found");
    assert!(
        e.to_string()
            .contains("the connection and response timeouts"),
        "not the bound's timeout after {took:?}: {e}"
    );
    assert!(
        took < Duration::from_millis(3000),
        "the call took {took:?}, past its 2.3 s bound"
    );
}
