//! A client's settings printed with `{:?}` (a log line, a panic's message)
//! name where Redis is, never its password.

use redjob::client::ClientConfig;
use redjob::connection::RedisConfig;

/// The URLs of one server, a Cluster and Sentinels, each with a password of
/// its own, and the host each names.
const URLS: [(&str, &str); 5] = [
    ("redis://app:s3cr3t-one@10.1.2.3:6380/2", "10.1.2.3:6380"),
    ("redis://:s3cr3t-one@10.1.2.3:6380", "10.1.2.3:6380"),
    (
        "redis+cluster://app:s3cr3t-one@10.1.2.3:7000,10.1.2.4:7000",
        "10.1.2.3:7000,10.1.2.4:7000",
    ),
    (
        "redis+sentinel://app:s3cr3t-one@10.1.2.3:26379,10.1.2.4/jobs?sentinel_username=s&sentinel_password=s3cr3t-two",
        "10.1.2.3:26379,10.1.2.4/jobs",
    ),
    ("unix:///run/redis.sock?pass=s3cr3t-one", "/run/redis.sock"),
];

#[test]
fn a_configs_debug_output_names_the_server_without_its_password() {
    for (url, host) in URLS {
        let redis = RedisConfig::from_url(url);
        let client = ClientConfig {
            redis: redis.clone(),
            ..ClientConfig::from_url(url)
        };
        for shown in [
            format!("{redis:?}"),
            format!("{redis:#?}"),
            format!("{client:?}"),
        ] {
            assert!(!shown.contains("s3cr3t"), "{url}: {shown}");
            assert!(shown.contains(host), "{url}: {shown}");
            assert!(shown.contains("***"), "{url}: {shown}");
            // the rest as before
            assert!(shown.contains("response_timeout"), "{shown}");
        }
    }
    // a URL without a password is shown whole
    let plain = format!("{:?}", RedisConfig::from_url("redis://10.1.2.3:6380/1"));
    assert!(plain.contains("\"redis://10.1.2.3:6380/1\""), "{plain}");
}
