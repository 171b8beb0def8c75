//! `rediss://` URLs against a TLS-only redis-server with a private CA (feature `tls`).
#![cfg(feature = "tls")]

mod common;

use std::process::Command;

use common::RedisServer;
use redjob::client::ClientConfig;
use redjob::queue::Queues;
use redjob::{Client, Job, JobContext, JobError};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Job)]
#[job(name = "tls_ping")]
struct Ping;

impl Job for Ping {
    async fn perform(&self, _: &JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A CA and a server certificate for 127.0.0.1 signed by it, made with openssl.
fn make_certs(dir: &std::path::Path) {
    let run = |args: &[&str]| {
        let ok = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl on PATH");
        assert!(
            ok.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=redjob test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    ]);
}

/// A Redis serving TLS (on the port returned) with certificates of its own
/// in a fresh directory named `name` (returned), and plain TCP on its usual
/// port; `extra` are more arguments for it.
fn tls_server(name: &str, extra: &[&str]) -> (std::path::PathBuf, RedisServer, u16) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    make_certs(&dir);
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let port = tls_port.to_string();
    let (cert, key, ca) = (p("server.pem"), p("server.key"), p("ca.pem"));
    let mut args = vec![
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ];
    args.extend_from_slice(extra);
    let server = RedisServer::start_with(&args);
    (dir, server, tls_port)
}

#[tokio::test]
async fn rediss_with_a_private_ca() {
    let (dir, server, tls_port) = tls_server("redjob-tls", &[]);
    let mut cfg = ClientConfig::from_url(format!("rediss://127.0.0.1:{tls_port}"));
    cfg.redis.tls_root_cert = Some(std::fs::read(dir.join("ca.pem")).unwrap());
    let client = Client::from_config(cfg).await.unwrap();
    client.enqueue(&Ping).await.unwrap();
    // the plain port sees what went through TLS
    let plain = Client::connect(&server.url()).await.unwrap();
    assert_eq!(plain.queues().attributes("default").await.unwrap().msgs, 1);
    // without the CA, the server's certificate is not trusted
    let untrusted = Client::connect(&format!("rediss://127.0.0.1:{tls_port}")).await;
    assert!(untrusted.is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TLS connection has no lanes; a call after a pause of 15 s or more
/// checks its multiplexed connection with a `PING` first all the same
/// (docs/scale-out.md, "TLS, passwords and timeouts"), so a call after the
/// server closed it while idle (its `timeout`, a proxy's) goes through, and
/// so do the calls made at once with it.
#[tokio::test]
async fn a_call_after_a_pause_goes_through_when_the_server_closed_the_idle_connection() {
    let (dir, _server, tls_port) = tls_server("redjob-tls-idle", &["--timeout", "2"]);
    let mut cfg = ClientConfig::from_url(format!("rediss://127.0.0.1:{tls_port}"));
    cfg.redis.tls_root_cert = Some(std::fs::read(dir.join("ca.pem")).unwrap());
    let client = Client::from_config(cfg).await.unwrap();
    client.enqueue(&Ping).await.unwrap();
    // the server closes the idle connection after 2 s; a call after 15 s
    // idle checks the connection first
    tokio::time::sleep(std::time::Duration::from_millis(15_500)).await;
    // calls made at once with the first go through too
    let after = futures::future::join_all((0..8).map(|_| client.enqueue(&Ping))).await;
    assert!(after.iter().all(|r| r.is_ok()), "{after:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server whose `timeout` (1 s) is shorter than the pause after which a
/// call checks its TLS connection first (15 s): a call after a pause of 3 s,
/// alone or with others at once, goes through all the same.
#[tokio::test]
async fn a_call_after_a_pause_past_a_short_server_timeout_goes_through() {
    let (dir, _server, tls_port) = tls_server("redjob-tls-short", &["--timeout", "1"]);
    let mut cfg = ClientConfig::from_url(format!("rediss://127.0.0.1:{tls_port}"));
    cfg.redis.tls_root_cert = Some(std::fs::read(dir.join("ca.pem")).unwrap());
    let client = Client::from_config(cfg).await.unwrap();
    client.enqueue(&Ping).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let alone = client.enqueue(&Ping).await.map(|_| ());
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let at_once = futures::future::join_all((0..8).map(|_| client.enqueue(&Ping))).await;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(alone.is_ok(), "{alone:?}");
    assert!(at_once.iter().all(|r| r.is_ok()), "{at_once:?}");
}
