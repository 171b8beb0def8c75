//! The server `--url` names, for the errors of reaching it: one that did not
//! answer in time, or answered in another protocol, is named (`host:port`,
//! never the password) where the error said only "timed out" or showed the
//! parser's complaint.

use std::sync::OnceLock;
use std::time::Duration;

use redjob::connection::RedisConfig;

/// The server and the time it is given.
struct Server {
    /// `host:port`, as [`address`] gives it.
    addr: String,
    /// The time to connect.
    connect: Duration,
    /// The time to answer a call.
    respond: Duration,
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// The server the errors name: the one `cfg` reaches, with its timeouts.
pub fn set(cfg: &RedisConfig) {
    let _ = SERVER.set(Server {
        addr: address(&cfg.url),
        connect: cfg.connection_timeout,
        respond: cfg.response_timeout,
    });
}

/// Where a Redis URL points, without its scheme, user, password, database
/// or options: `host:port` (Redis's port when it names none), a cluster's
/// `host:port` list, or a Unix socket's path.
pub fn address(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    // the user and password end at the last `@` before the query that
    // follows the first `@` (a password may hold a `/`, `?` or `@` left
    // unencoded), the host at the first `/` after it; a Unix socket has no
    // host, only its path
    let start = match rest.find('@').filter(|_| !rest.starts_with('/')) {
        Some(first) => {
            let end = rest[first..].find('?').map_or(rest.len(), |q| first + q);
            rest[..end].rfind('@').map_or(0, |at| at + 1)
        }
        None => 0,
    };
    let end = start + rest[start..].find(['/', '?']).unwrap_or(rest.len() - start);
    let host = &rest[start..end];
    if host.is_empty() {
        // a Unix socket: its path (`redis+unix:///run/redis.sock`)
        let path = &rest[end..];
        return path[..path.find('?').unwrap_or(path.len())].into();
    }
    let plain = matches!(scheme.to_ascii_lowercase().as_str(), "redis" | "rediss");
    let has_port = host.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
    if plain && !has_port {
        format!("{host}:6379")
    } else {
        host.into()
    }
}

/// What to say of `e` when the server did not answer in time or does not
/// speak the Redis protocol; `None` for any other error.
pub fn explained(e: &redjob::Error) -> Option<String> {
    let (error, connecting) = match e {
        redjob::Error::Redis(error) => (error, false),
        redjob::Error::Connect { error, .. } => (error, true),
        _ => return None,
    };
    let server = SERVER.get()?;
    let addr = &server.addr;
    if error.is_timeout() {
        let within = |d| redjob::ops::duration_text(d);
        return Some(if connecting {
            format!(
                "cannot connect to redis at {addr}: it did not answer within {}",
                within(server.connect)
            )
        } else {
            format!(
                "redis at {addr} did not answer within {}",
                within(server.respond)
            )
        });
    }
    // the protocol parser's error (a reply that does not convert is a
    // Parse error too, without this start)
    let unparsed = error.kind() == redis::ErrorKind::Parse
        && error.detail().is_some_and(|d| d.starts_with("Parse error"));
    unparsed.then(|| format!("the server at {addr} does not speak the Redis protocol"))
}

#[cfg(test)]
mod tests {
    use super::address;

    #[test]
    fn an_address_is_host_and_port_without_user_or_password() {
        for (url, addr) in [
            ("redis://127.0.0.1:6390", "127.0.0.1:6390"),
            ("redis://:s3cret@10.0.0.1:6390/2", "10.0.0.1:6390"),
            ("redis://app:s3cr/et-pw@10.0.0.1:6390/2", "10.0.0.1:6390"),
            ("redis://:pa?ss@10.0.0.1:6390/2", "10.0.0.1:6390"),
            ("redis+unix:///run/app@1.sock", "/run/app@1.sock"),
            (
                "rediss://ops:p@ss@cache.example:6380/0?x=1",
                "cache.example:6380",
            ),
            ("redis://cache.example", "cache.example:6379"),
            ("redis://[::1]", "[::1]:6379"),
            ("redis://[::1]:7000", "[::1]:7000"),
            ("redis+cluster://u:pw@a:7000,b:7001", "a:7000,b:7001"),
            ("redis+unix:///run/redis.sock?db=1", "/run/redis.sock"),
        ] {
            assert_eq!(address(url), addr, "{url}");
        }
    }
}
