//! A server that does not answer, or is not Redis: the error names the
//! server (`host:port`, never the password) and says what went wrong, where
//! it said "redis error: timed out" and "Incompatible type - Parse error …
//! Unexpected `84`".

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use common::RedisServer;
use run::cli;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `signal` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let done = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(done.success(), "kill {signal} {pid}");
}

/// A server stopped with SIGSTOP, continued when dropped (a failed
/// assertion included).
struct Stopped(u32);

impl Stopped {
    fn new(server: &RedisServer) -> Self {
        signal(server.pid(), "-STOP");
        Stopped(server.pid())
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

/// A Redis that stalls (SIGSTOP) fails the command after the response
/// timeout (5 s) with an error naming it and the timeout.
#[tokio::test]
async fn a_redis_that_does_not_answer_is_named_with_the_time_it_was_given() {
    let server = RedisServer::start();
    let url = server.url();
    let addr = url.trim_start_matches("redis://").to_string();
    cli(&url, &["queues"]).await.ok();
    let stopped = Stopped::new(&server);
    let r = cli(&url, &["dead", "list", "mail", "--json"]).await;
    drop(stopped);
    assert_eq!(r.code, 1, "{} {}", r.out, r.err);
    let v: Value = serde_json::from_str(r.err.trim()).unwrap_or_else(|e| panic!("{e}: {}", r.err));
    assert_eq!(
        v["error"],
        format!("redis at {addr} did not answer within 5s"),
        "{v}"
    );
    // awake again, it answers
    cli(&url, &["queues"]).await.ok();
}

/// A server that answers in another protocol (HTTP here) is said not to
/// speak Redis's, named without the URL's password.
#[tokio::test]
async fn a_server_that_is_not_redis_is_named_as_such() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let http = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            });
        }
    });
    let plain = format!("redis://{addr}");
    let with_password = format!("redis://ops:s3cret@{addr}/0");
    for (url, args) in [
        (&plain, &["queues"][..]),
        (&with_password, &["dead", "list", "mail"][..]),
    ] {
        let r = cli(url, args).await;
        assert_eq!(r.code, 1, "{url} {} {}", r.out, r.err);
        assert_eq!(
            r.err.trim(),
            format!("error: the server at {addr} does not speak the Redis protocol"),
            "{url}"
        );
        assert!(!r.err.contains("s3cret"), "{}", r.err);
    }
    http.abort();
}
