//! `redjob web` and access: beyond loopback it refuses to serve without a
//! token (unless `--no-auth`); with a token (from `REDJOB_WEB_TOKEN` or a
//! file, never an argument) a request without it gets 401 and one with it
//! 200, its Basic user name recorded as who acted.

#[path = "../../tests/common/mod.rs"]
mod common;
mod run;

use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use common::RedisServer;
use redjob::Client;
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::queue::{QueueOptions, Queues};
use run::cli;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// `redjob web` with `args` and `env`; its address, once it listens.
async fn web(url: &str, args: &[&str], env: &[(&str, &str)]) -> (tokio::process::Child, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_redjob"));
    cmd.args(["--url", url, "web"])
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("REDJOB_WEB_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("it says where it listens")
        .unwrap()
        .unwrap();
    assert!(first.contains("(token required)"), "{first}");
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("{first}"))
        .to_string();
    (child, addr)
}

/// One HTTP/1.1 request to `addr` with `headers`: the whole answer.
async fn request(addr: &str, method: &str, path: &str, headers: &[String], body: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req += &format!("{h}\r\n");
    }
    if !body.is_empty() {
        req += &format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        );
    }
    req += "\r\n";
    req += body;
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    out
}

fn basic(user: &str, password: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {b}")
}

#[tokio::test]
async fn beyond_loopback_the_dashboard_needs_a_token_or_no_auth() {
    let server = RedisServer::start();
    // refused before it binds: nothing listens on the network
    let r = cli(&server.url(), &["web", "--bind", "0.0.0.0:0"]).await;
    r.failed("refusing to serve the dashboard on 0.0.0.0:0 without a token");
    // a token file that is not there is an error too
    let r = cli(
        &server.url(),
        &[
            "web",
            "--bind",
            "127.0.0.1:0",
            "--token-file",
            "/nonexistent/token",
        ],
    )
    .await;
    r.failed("--token-file /nonexistent/token");
}

#[tokio::test]
async fn with_a_token_a_request_without_it_gets_401_and_with_it_200() {
    let server = RedisServer::start();
    let url = server.url();
    let client = Client::connect(&url).await.unwrap();
    client
        .queues()
        .create_queue("mail", QueueOptions::default())
        .await
        .unwrap();
    for source in ["env", "file"] {
        let dir = std::env::temp_dir().join(format!("redjob-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let path = file.to_string_lossy().into_owned();
        let (mut child, addr) = match source {
            "env" => {
                web(
                    &url,
                    &["--bind", "127.0.0.1:0"],
                    &[("REDJOB_WEB_TOKEN", "s3cret")],
                )
                .await
            }
            _ => web(&url, &["--bind", "127.0.0.1:0", "--token-file", &path], &[]).await,
        };
        let none = request(&addr, "GET", "/", &[], "").await;
        assert!(none.starts_with("HTTP/1.1 401"), "{source}: {none}");
        assert!(
            none.to_ascii_lowercase()
                .contains("www-authenticate: basic"),
            "{none}"
        );
        let wrong = request(&addr, "GET", "/", &[basic("alice", "guess")], "").await;
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
        let ok = request(&addr, "GET", "/", &[basic("alice", "s3cret")], "").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{source}: {ok}");
        let bearer = request(
            &addr,
            "GET",
            "/queues/mail",
            &["Authorization: Bearer s3cret".into()],
            "",
        )
        .await;
        assert!(bearer.starts_with("HTTP/1.1 200"), "{bearer}");

        // an action names the Basic user in the queue's history
        let page = request(
            &addr,
            "GET",
            "/queues/mail",
            &[basic("alice", "s3cret")],
            "",
        )
        .await;
        let cookie = page
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: redjob_csrf="))
            .and_then(|v| v.split(';').next())
            .unwrap_or_else(|| panic!("a CSRF cookie: {page}"))
            .to_string();
        let headers = [
            basic("alice", "s3cret"),
            format!("Cookie: redjob_csrf={cookie}"),
        ];
        let paused = request(
            &addr,
            "POST",
            "/queues/mail/pause",
            &headers,
            &format!("csrf={cookie}"),
        )
        .await;
        assert!(paused.starts_with("HTTP/1.1 303"), "{paused}");
        let events = client.history_events("mail").await.unwrap();
        let last = events.first().expect("the pause is recorded");
        assert_eq!(last.by.as_deref(), Some("dashboard alice"), "{events:?}");
        client.resume("mail").await.unwrap();

        child.start_kill().unwrap();
        let _ = child.wait().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
