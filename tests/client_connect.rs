//! The first connection to Redis: a refusal that comes at once (a wrong
//! password, a database the server does not have, nothing listening) is
//! the error, naming its cause, at any connection timeout.

mod common;

use std::time::Duration;

use common::RedisServer;
use redjob::connection::RedisConfig;

/// `url`'s connection error with a connection timeout of `limit`, and how
/// long it took.
async fn refused(url: String, limit: Duration) -> (String, Duration) {
    let cfg = RedisConfig {
        connection_timeout: limit,
        response_timeout: limit,
        ..RedisConfig::from_url(url)
    };
    let started = std::time::Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(30), cfg.connect())
        .await
        .expect("an answer")
        .expect_err("refused");
    (e.to_string(), started.elapsed())
}

#[tokio::test]
async fn a_refusal_names_its_cause_within_a_short_connection_timeout() {
    let server = RedisServer::start_with(&["--requirepass", "pw"]);
    let port = server.port;
    let closed = RedisServer::free_port();
    let cases = [
        (format!("redis://:wrong@127.0.0.1:{port}"), "authentication"),
        (format!("redis://:pw@127.0.0.1:{port}/99"), "out of range"),
        (format!("redis://127.0.0.1:{closed}"), "refused"),
    ];
    for limit in [Duration::from_millis(500), Duration::from_secs(1)] {
        for (url, cause) in &cases {
            let (e, took) = refused(url.clone(), limit).await;
            assert!(
                e.to_ascii_lowercase().contains(cause),
                "at a {limit:?} connection timeout, {url}: {e}"
            );
            assert!(took < limit + Duration::from_millis(500), "{url}: {took:?}");
        }
    }
}
