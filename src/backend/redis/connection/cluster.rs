//! `redis+cluster://` URLs, and calls to a Cluster sent again only when
//! they ran nothing.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisResult, Value};

/// The seed node URLs of a `redis+cluster://` or `rediss+cluster://` URL;
/// `None` for any other URL, `Some(Err(reason))` for a cluster URL without a
/// node or with a database other than 0 (a Cluster has only database 0).
pub(super) fn seeds(url: &str) -> Option<Result<Vec<String>, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "redis+cluster" => "redis",
        "rediss+cluster" => "rediss",
        _ => return None,
    };
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let db = path.trim_start_matches('/');
    let db = &db[..db.find('?').unwrap_or(db.len())];
    if !db.is_empty() && db != "0" {
        return Some(Err(format!(
            "a Redis Cluster has only database 0, not {db}"
        )));
    }
    let query = path.find('?').map_or("", |q| &path[q..]);
    let seeds: Vec<String> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|h| format!("{scheme}://{user}{h}{query}"))
        .collect();
    if seeds.is_empty() {
        return Some(Err(
            "name at least one node: redis+cluster://host:port,host:port".into(),
        ));
    }
    Some(Ok(seeds))
}

/// How many times a call a Cluster refused before it ran is sent again.
const TRIES: u32 = 12;

/// What a call a Cluster refused before it ran needs before it goes again.
#[derive(Debug, PartialEq)]
enum Again {
    /// To the node named (`MOVED`), after `ASKING` (`ASK`).
    To {
        host: String,
        port: u16,
        asking: bool,
    },
    /// A while (`TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`,
    /// `READONLY`, no connection to the node), then to the slot's master.
    Later,
}

/// Whether `e` says the call ran nothing, and what it needs to go again:
/// a redirection or a refusal from the node, or a call that never left
/// (the node refused the connection, or the client has none to it). Any
/// other error (a connection that broke or timed out with the call on
/// its way) may follow a call that ran: the caller gets it.
fn again(e: &RedisError) -> Option<Again> {
    use redis::ServerErrorKind as K;
    match e.kind() {
        ErrorKind::Server(K::Moved | K::Ask) => {
            let (addr, _) = e.redirect_node()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some(Again::To {
                host: host.to_string(),
                port: port.parse().ok()?,
                asking: e.kind() == ErrorKind::Server(K::Ask),
            })
        }
        ErrorKind::Server(
            K::TryAgain | K::ClusterDown | K::MasterDown | K::BusyLoading | K::ReadOnly,
        )
        | ErrorKind::ClusterConnectionNotFound => Some(Again::Later),
        _ if e.is_connection_refusal() => Some(Again::Later),
        _ => None,
    }
}

/// Whether the call never reached a node (no redirection or refusal from
/// one): a pipeline of several calls may go again then.
fn never_sent(e: &RedisError) -> bool {
    e.kind() == ErrorKind::ClusterConnectionNotFound || e.is_connection_refusal()
}

/// Commands without keys, which a node runs whatever its slots' state
/// (never refused with a redirection or `TRYAGAIN`).
const KEYLESS: &[&[u8]] = &[b"TIME", b"WAIT", b"PING", b"ASKING"];
/// Commands that only read.
const READS: &[&[u8]] = &[
    b"EXISTS",
    b"GET",
    b"HGET",
    b"HGETALL",
    b"HLEN",
    b"HMGET",
    b"LLEN",
    b"LRANGE",
    b"XLEN",
    b"XRANGE",
    b"XREVRANGE",
    b"ZCARD",
    b"ZRANGE",
    b"ZRANGEBYSCORE",
    b"ZSCORE",
    b"ZMSCORE",
];

/// Whether a pipeline a node refused (a redirection or a refusal that says
/// the refused command ran nothing) may be sent again whole: it has one
/// keyed command at most, the one refused (a send with the `TIME` before it
/// and the `WAIT` after it), or its commands only read.
fn goes_whole(pipeline: &Pipeline) -> bool {
    let names: Vec<Vec<u8>> = pipeline
        .cmd_iter()
        .map(|c| match c.args_iter().next() {
            Some(redis::Arg::Simple(n)) => n.to_ascii_uppercase(),
            _ => Vec::new(),
        })
        .collect();
    let keyless = |n: &Vec<u8>| KEYLESS.contains(&n.as_slice());
    names.iter().filter(|n| !keyless(n)).count() <= 1
        || names
            .iter()
            .all(|n| keyless(n) || READS.contains(&n.as_slice()))
}

/// The wait before the `tries`th try again: 10 ms, doubled each time, at
/// most 500 ms (about 3 s over [`TRIES`]).
fn backoff(tries: u32) -> Duration {
    Duration::from_millis((10u64 << tries.min(6)).min(500))
}

/// Sends `cmds` (their replies from `offset`, `count` of them) again as
/// `again` says.
async fn resend(
    c: &mut ClusterConnection,
    cmds: &Pipeline,
    offset: usize,
    count: usize,
    again: Again,
    tries: u32,
) -> RedisResult<Vec<Value>> {
    match again {
        Again::To { host, port, asking } => {
            let mut p = redis::pipe();
            if asking {
                p.cmd("ASKING");
            }
            for cmd in cmds.cmd_iter() {
                p.add_command(cmd.clone());
            }
            let skip = usize::from(asking);
            c.route_pipeline(
                p,
                offset + skip,
                count,
                SingleNodeRoutingInfo::ByAddress { host, port },
            )
            .await
        }
        Again::Later => {
            tokio::time::sleep(backoff(tries)).await;
            c.req_packed_commands(cmds, offset, count).await
        }
    }
}

/// Sends one command to a Cluster. The `redis` crate's Cluster client is
/// built not to send a call again by itself ([`RedisConfig::connect`]
/// sets its retries to 0): it did after any error, a connection that broke
/// after the call ran included, and sent a pipeline whole again when one of
/// its calls was refused, so a call could run twice. Here a call goes again
/// only when the Cluster refused it before it ran (see [`again`]), up to
/// [`TRIES`] times.
///
/// [`RedisConfig::connect`]: super::RedisConfig::connect
pub(super) async fn command(c: &mut ClusterConnection, cmd: &Cmd) -> RedisResult<Value> {
    let mut reply = c.req_packed_command(cmd).await;
    let mut tries = 0;
    while let Err(e) = &reply {
        let Some(again) = again(e).filter(|_| tries < TRIES) else {
            break;
        };
        tries += 1;
        let mut one = redis::pipe();
        one.add_command(cmd.clone());
        reply = resend(c, &one, 0, 1, again, tries).await.and_then(|mut v| {
            v.pop()
                .ok_or_else(|| std::io::Error::other("a command without its reply").into())
        });
    }
    reply
}

/// Sends a pipeline to a Cluster ([`command`]'s rules). Of a pipeline of
/// several keyed commands, those before the one refused may have run (the
/// slot moved in between), and the error does not say which it was: such
/// a pipeline goes again only when it never reached a node, or when its
/// commands only read (see [`goes_whole`]).
pub(super) async fn pipeline(
    c: &mut ClusterConnection,
    pipeline: &Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    let mut reply = c.req_packed_commands(pipeline, offset, count).await;
    let mut tries = 0;
    let whole = goes_whole(pipeline);
    while let Err(e) = &reply {
        let Some(again) = again(e).filter(|_| tries < TRIES && (whole || never_sent(e))) else {
            break;
        };
        tries += 1;
        reply = resend(c, pipeline, offset, count, again, tries).await;
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe(cmds: &[&str]) -> Pipeline {
        let mut p = redis::pipe();
        for c in cmds {
            p.cmd(c).arg("k");
        }
        p
    }

    #[test]
    fn a_pipeline_of_one_keyed_command_or_of_reads_goes_again_whole() {
        assert!(goes_whole(&pipe(&["EVALSHA"])));
        assert!(goes_whole(&pipe(&["time", "EVALSHA", "WAIT"])));
        assert!(goes_whole(&pipe(&["TIME", "ZRANGE", "zrange", "HMGET"])));
        assert!(!goes_whole(&pipe(&["EVALSHA", "EVALSHA"])));
        assert!(!goes_whole(&pipe(&["TIME", "EVALSHA", "ZRANGE"])));
        assert!(!goes_whole(&pipe(&["FCALL", "WAIT", "HSET"])));
    }

    #[test]
    fn only_refusals_before_a_call_ran_send_it_again() {
        let err = |resp: &[u8]| match redis::parse_redis_value(resp).unwrap() {
            Value::ServerError(e) => RedisError::from(e),
            v => panic!("{v:?}"),
        };
        assert_eq!(
            again(&err(b"-MOVED 3999 127.0.0.1:6381\r\n")),
            Some(Again::To {
                host: "127.0.0.1".into(),
                port: 6381,
                asking: false
            })
        );
        assert_eq!(
            again(&err(b"-ASK 3999 10.0.0.2:7000\r\n")),
            Some(Again::To {
                host: "10.0.0.2".into(),
                port: 7000,
                asking: true
            })
        );
        for later in [
            &b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"[..],
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-MASTERDOWN Link with MASTER is down\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-READONLY You can't write against a read only replica.\r\n",
        ] {
            assert_eq!(again(&err(later)), Some(Again::Later), "{later:?}");
        }
        assert_eq!(again(&err(b"-ERR something else\r\n")), None);
        assert_eq!(again(&err(b"-NOSCRIPT No matching script\r\n")), None);
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(again(&refused), Some(Again::Later));
        assert!(never_sent(&refused));
        // a connection that broke or timed out with the call on its way
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let e = RedisError::from(std::io::Error::from(kind));
            assert_eq!(again(&e), None, "{kind:?}");
            assert!(!never_sent(&e));
        }
    }

    #[test]
    fn cluster_urls_give_one_url_per_node() {
        assert_eq!(seeds("redis://127.0.0.1:6379"), None);
        assert_eq!(seeds("unix:///tmp/r.sock"), None);
        assert_eq!(seeds("not a url"), None);
        assert_eq!(
            seeds("redis+cluster://10.0.0.1:7000,10.0.0.2:7001"),
            Some(Ok(vec![
                "redis://10.0.0.1:7000".into(),
                "redis://10.0.0.2:7001".into()
            ]))
        );
        assert_eq!(
            seeds("rediss+cluster://app:p@ss@h1:7000, h2:7000/0?protocol=resp3"),
            Some(Ok(vec![
                "rediss://app:p@ss@h1:7000?protocol=resp3".into(),
                "rediss://app:p@ss@h2:7000?protocol=resp3".into()
            ]))
        );
        assert_eq!(
            seeds("REDIS+CLUSTER://h:1/"),
            Some(Ok(vec!["redis://h:1".into()]))
        );
        let bad = seeds("redis+cluster://h:1/3").unwrap().unwrap_err();
        assert!(bad.contains("only database 0"), "{bad}");
        let empty = seeds("redis+cluster://").unwrap().unwrap_err();
        assert!(empty.contains("at least one node"), "{empty}");
    }
}
