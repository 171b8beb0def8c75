//! Calls to a Redis Cluster, sent again only when the Cluster refused them
//! before they ran, or when they only read.
//!
//! The `redis` crate's Cluster client sends a call again after any error (a
//! connection that broke after the call ran included) and a pipeline whole
//! when one of its calls is refused, so a call could run twice. redjob
//! builds that client with `retries(0)` (see `RedisConfig::connect`) and
//! sends a call again here, up to [`TRIES`] times, only after a refusal that
//! says it ran nothing, or, for a call that only reads (which may run twice
//! without harm), after its node could not be reached or its connection
//! dropped (see [`reads_again`]). A call that went out on no socket (a
//! socket to a node, unused a while, found closed by a `PING` first: see
//! [`super::cluster`]) goes again whatever it does, a pipeline whole.
//!
//! A call's tries together take at most the connection and response timeouts
//! (as a managed connection's call, see `Managed::bounded`): a node that went
//! silent makes each try after a redirection wait for a connection to it, and
//! twelve of them waited about twelve connection timeouts. Once the bound has
//! passed the call fails as a timeout naming the last refusal.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::cluster::Cluster;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, Pipeline, RedisError, RedisResult, Value,
};

/// How many times a call a Cluster refused before it ran (or a read) is sent
/// again.
pub(super) const TRIES: u32 = 12;

/// What an `ASK` redirection's node is reached with: the seed's settings
/// (credentials, TLS) with the node's address, and the client's timeouts.
/// The crate's client reaches only the nodes its slot map names, which a
/// master a slot is migrating to before it serves any is not.
#[derive(Debug)]
pub(crate) struct AskVia {
    pub info: ConnectionInfo,
    pub connection_timeout: Duration,
    pub response_timeout: Duration,
}

/// What a call the Cluster refused before it ran needs before it goes again.
#[derive(Debug, PartialEq)]
enum Again {
    /// To the node named (`ASK`: its slot migrates there), after `ASKING`.
    Ask { host: String, port: u16 },
    /// A while (`MOVED`: the client rebuilds its slot map; `TRYAGAIN`,
    /// `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY`; for a call that
    /// only reads, no connection to the node or one that dropped), then to
    /// the slot's master.
    Later,
}

/// Whether `e` says the call ran nothing, and what it needs to go again: a
/// redirection or a refusal from the node. Any other error (a connection
/// that broke or timed out with the call on its way) may follow a call
/// that ran: the caller gets it, unless the call only reads (see
/// [`reads_again`]).
fn again(e: &RedisError) -> Option<Again> {
    use redis::ServerErrorKind as K;
    match e.kind() {
        ErrorKind::Server(K::Ask) => Some(
            e.redirect_node()
                .and_then(|(addr, _)| addr.rsplit_once(':'))
                .and_then(|(host, port)| {
                    Some(Again::Ask {
                        // an IPv6 address in brackets
                        host: host
                            .trim_start_matches('[')
                            .trim_end_matches(']')
                            .to_string(),
                        port: port.parse().ok()?,
                    })
                })
                .unwrap_or(Again::Later),
        ),
        ErrorKind::Server(
            K::Moved | K::TryAgain | K::ClusterDown | K::MasterDown | K::BusyLoading | K::ReadOnly,
        ) => Some(Again::Later),
        _ => None,
    }
}

/// Whether `e` says the call found no node to go to (no connection to it,
/// or the node refused one). The client also fails calls it had written
/// with such an error when it cannot rebuild its slot map (no node
/// answers), so only a call that writes nothing goes again after it.
fn no_node(e: &RedisError) -> bool {
    e.kind() == ErrorKind::ClusterConnectionNotFound || e.is_connection_refusal()
}

/// Whether a call that only reads goes again after `e`: a refusal, no
/// node to go to, or a connection that dropped (a read run twice does no
/// harm); not after a timeout (the node is slow: a call again would add to
/// its load).
pub(super) fn reads_again(e: &RedisError) -> bool {
    again(e).is_some() || no_node(e) || e.is_connection_dropped()
}

/// Sends `cmd`, which only reads, again while [`reads_again`] says so.
pub(super) async fn read(c: &mut Cluster, cmd: &Cmd) -> RedisResult<Value> {
    let mut tries = 0;
    loop {
        match c.req_packed_command(cmd).await {
            Err(e) if reads_again(&e) && tries < TRIES => {
                tries += 1;
                tokio::time::sleep(backoff(tries)).await;
            }
            reply => return reply,
        }
    }
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
    b"SMEMBERS",
    b"XLEN",
    b"XRANGE",
    b"XREVRANGE",
    b"ZCARD",
    b"ZRANGE",
    b"ZRANGEBYSCORE",
    b"ZSCORE",
    b"ZMSCORE",
];

/// A command's name, upper case (empty for a command without one).
pub(crate) fn name(cmd: &Cmd) -> Vec<u8> {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(n)) => n.to_ascii_uppercase(),
        _ => Vec::new(),
    }
}

fn keyless(cmd: &Cmd) -> bool {
    KEYLESS.contains(&name(cmd).as_slice())
}

/// Whether a pipeline the Cluster refused may go again whole: it has one
/// keyed command at most, the one refused (a send with the `TIME` before
/// it and the `WAIT` after it), or its commands only read. Of several
/// keyed writes, those before the one refused may have run (its slot moved
/// in between), and the error does not say which was refused. Never a
/// transaction.
fn goes_whole(pipeline: &Pipeline) -> bool {
    !pipeline.is_transaction() && (keyed(pipeline) <= 1 || reads(pipeline))
}

/// How many of a pipeline's commands have keys.
fn keyed(pipeline: &Pipeline) -> usize {
    pipeline.cmd_iter().filter(|c| !keyless(c)).count()
}

/// Whether a pipeline's commands only read (or have no keys).
fn reads(pipeline: &Pipeline) -> bool {
    pipeline
        .cmd_iter()
        .all(|c| keyless(c) || READS.contains(&name(c).as_slice()))
}

/// What a refused call (`cmds`) does: goes again as [`again`] says, or not
/// at all. An `ASK` is followed for one keyed command only: the source
/// answers it for keys it no longer has, and on the target a command after
/// `ASKING` runs on keys not moved yet as if they were missing (of several
/// reads, those would read nothing); others wait for the migration's end.
/// After [`no_node`] or a dropped connection, only a call that writes
/// nothing goes again (see [`reads_again`]); after an error that says it
/// was not sent, any call.
fn next(e: &RedisError, cmds: &Pipeline) -> Option<Again> {
    if super::lane::not_sent(e) {
        return Some(Again::Later);
    }
    match again(e) {
        Some(Again::Ask { .. }) if keyed(cmds) > 1 => Some(Again::Later),
        Some(a) => Some(a),
        None if reads(cmds) && reads_again(e) => Some(Again::Later),
        None => None,
    }
}

/// The wait before the `tries`th try again: 10 ms, doubled each time, at
/// most 500 ms (about 3.6 s over [`TRIES`]).
pub(super) fn backoff(tries: u32) -> Duration {
    Duration::from_millis((10u64 << tries.saturating_sub(1).min(6)).min(500))
}

/// Until when a call's tries may go on, and how long that is: the
/// connection and response timeouts together from now (`None` without
/// `via`: a connection the caller made keeps its own timeouts; nor when the
/// timeouts reach past what the clock can count, as a blocking read's do).
fn deadline(via: Option<&AskVia>) -> Option<(tokio::time::Instant, Duration)> {
    let v = via?;
    let limit = v.connection_timeout.checked_add(v.response_timeout)?;
    Some((tokio::time::Instant::now().checked_add(limit)?, limit))
}

/// `resend`, failing as a timeout once `deadline` passes; `last` is the
/// refusal it follows, named in that error.
async fn again_until<T>(
    deadline: Option<(tokio::time::Instant, Duration)>,
    last: &RedisError,
    resend: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    let Some((at, limit)) = deadline else {
        return resend.await;
    };
    match tokio::time::timeout_at(at, resend).await {
        Ok(reply) => reply,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no answer from the Redis Cluster within {limit:?} (the connection and response timeouts); the last try was refused: {last}"
            ),
        )
        .into()),
    }
}

/// Sends `cmds` (their replies from `offset`, `count` of them) again as
/// `again` says; an `ASK` to its node by `via` (without it, as `Later`).
async fn resend(
    c: &mut Cluster,
    via: Option<&AskVia>,
    cmds: &Pipeline,
    (offset, count): (usize, usize),
    again: Again,
    tries: u32,
) -> RedisResult<Vec<Value>> {
    match (again, via) {
        (Again::Ask { host, port }, Some(via)) => ask(via, host, port, cmds, offset, count).await,
        _ => {
            tokio::time::sleep(backoff(tries)).await;
            c.req_packed_commands(cmds, offset, count).await
        }
    }
}

/// Sends `cmds` to the node at `host:port`, on a connection of its own,
/// each keyed command after an `ASKING` (which lasts one command).
async fn ask(
    via: &AskVia,
    host: String,
    port: u16,
    cmds: &Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    let addr = match via.info.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host, port),
    };
    let client = redis::Client::open(via.info.clone().set_addr(addr))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(via.connection_timeout))
        .set_response_timeout(Some(via.response_timeout));
    let mut con = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let mut p = redis::pipe();
    let mut at = Vec::with_capacity(cmds.len());
    for cmd in cmds.cmd_iter() {
        if !keyless(cmd) {
            p.cmd("ASKING");
        }
        at.push(p.len());
        p.add_command(cmd.clone());
    }
    let replies = con.req_packed_commands(&p, 0, p.len()).await?;
    // an ASKING refused (an ACL rule without it) is the call's error
    for (i, v) in replies.iter().enumerate() {
        if let Value::ServerError(e) = v
            && !at.contains(&i)
        {
            return Err(e.clone().into());
        }
    }
    let mut mine = Vec::with_capacity(count);
    for &i in at.iter().skip(offset).take(count) {
        let v = replies
            .get(i)
            .cloned()
            .ok_or_else(|| RedisError::from(std::io::Error::other("a reply missing")))?;
        // refused again (the migration ended meanwhile): tried again as
        // the first try was
        if let Value::ServerError(e) = &v {
            let e = RedisError::from(e.clone());
            if again(&e).is_some() {
                return Err(e);
            }
        }
        mine.push(v);
    }
    Ok(mine)
}

/// Sends one command to a Cluster, again while the Cluster refuses it
/// before it runs (see the module's documentation).
pub(super) async fn command(
    c: &mut Cluster,
    via: Option<&Arc<AskVia>>,
    cmd: &Cmd,
) -> RedisResult<Value> {
    let deadline = deadline(via.map(|v| &**v));
    let mut reply = c.req_packed_command(cmd).await;
    let mut tries = 0;
    let mut one = redis::pipe();
    while let Err(e) = &reply {
        if one.is_empty() {
            one.add_command(cmd.clone());
        }
        let Some(again) = next(e, &one).filter(|_| tries < TRIES) else {
            break;
        };
        tries += 1;
        let sent = resend(c, via.map(|v| &**v), &one, (0, 1), again, tries);
        reply = again_until(deadline, e, sent).await.and_then(|mut v| {
            v.pop()
                .ok_or_else(|| std::io::Error::other("a command without its reply").into())
        });
    }
    reply
}

/// Sends a pipeline to a Cluster, again while the Cluster refuses it before
/// it runs when it may go again whole (see [`goes_whole`]), or while it
/// was not sent at all.
pub(super) async fn pipeline(
    c: &mut Cluster,
    via: Option<&Arc<AskVia>>,
    pipeline: &Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    let deadline = deadline(via.map(|v| &**v));
    let mut reply = c.req_packed_commands(pipeline, offset, count).await;
    let whole = goes_whole(pipeline);
    let mut tries = 0;
    while let Err(e) = &reply {
        if !whole && !super::lane::not_sent(e) {
            break;
        }
        let Some(again) = next(e, pipeline).filter(|_| tries < TRIES) else {
            break;
        };
        tries += 1;
        let via = via.map(|v| &**v);
        let sent = resend(c, via, pipeline, (offset, count), again, tries);
        reply = again_until(deadline, e, sent).await;
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
        let mut atomic = pipe(&["ZRANGE", "HMGET"]);
        atomic.atomic();
        assert!(!goes_whole(&atomic));
    }

    #[test]
    fn only_refusals_before_a_call_ran_send_it_again() {
        let err = |resp: &[u8]| match redis::parse_redis_value(resp).unwrap() {
            Value::ServerError(e) => RedisError::from(e),
            v => panic!("{v:?}"),
        };
        assert_eq!(
            again(&err(b"-ASK 3999 10.0.0.2:7000\r\n")),
            Some(Again::Ask {
                host: "10.0.0.2".into(),
                port: 7000,
            })
        );
        for later in [
            &b"-MOVED 3999 127.0.0.1:6381\r\n"[..],
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            b"-CLUSTERDOWN The cluster is down\r\n",
            b"-MASTERDOWN Link with MASTER is down\r\n",
            b"-LOADING Redis is loading the dataset in memory\r\n",
            b"-READONLY You can't write against a read only replica.\r\n",
        ] {
            assert_eq!(again(&err(later)), Some(Again::Later), "{later:?}");
        }
        assert_eq!(again(&err(b"-ERR something else\r\n")), None);
        assert_eq!(again(&err(b"-NOSCRIPT No matching script\r\n")), None);
        assert_eq!(
            again(&err(b"-ASK 3999 [::1]:7000\r\n")),
            Some(Again::Ask {
                host: "::1".into(),
                port: 7000,
            })
        );
        // no node: a read goes again, a write not (the client fails calls
        // it had written so when it cannot rebuild its slot map)
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(again(&refused), None);
        assert_eq!(
            next(&refused, &pipe(&["TIME", "ZRANGE", "HMGET"])),
            Some(Again::Later)
        );
        assert_eq!(next(&refused, &pipe(&["EVALSHA"])), None);
        // an ASK is followed for one keyed command; several wait
        let ask = err(b"-ASK 3999 10.0.0.2:7000\r\n");
        assert!(matches!(
            next(&ask, &pipe(&["TIME", "EVALSHA", "WAIT"])),
            Some(Again::Ask { .. })
        ));
        assert_eq!(
            next(&ask, &pipe(&["ZMSCORE", "ZMSCORE"])),
            Some(Again::Later)
        );
        // a connection that broke or timed out with the call on its way
        for kind in [
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::BrokenPipe,
            std::io::ErrorKind::TimedOut,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let e = RedisError::from(std::io::Error::from(kind));
            assert_eq!(again(&e), None, "{kind:?}");
            // a write does not go again; a read goes again unless the node
            // was only slow
            assert_eq!(next(&e, &pipe(&["TIME", "EVALSHA"])), None, "{kind:?}");
            let read = next(&e, &pipe(&["TIME", "ZRANGE", "HMGET"]));
            let slow = kind == std::io::ErrorKind::TimedOut;
            assert_eq!(read.is_some(), !slow, "{kind:?}");
        }
    }

    #[test]
    fn a_call_found_unsent_goes_again_whatever_it_does() {
        // a socket a `PING` found closed before the call went out on it
        let closed = RedisError::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        let unsent = crate::backend::redis::connection::lane::unsent(&closed);
        assert!(
            unsent.is_connection_dropped(),
            "the node's socket is replaced"
        );
        for cmds in [
            pipe(&["EVALSHA"]),
            pipe(&["TIME", "EVALSHA", "WAIT"]),
            pipe(&["EVALSHA", "EVALSHA"]),
            pipe(&["ZRANGE"]),
        ] {
            assert_eq!(next(&unsent, &cmds), Some(Again::Later));
        }
        // the same error from a call that went out does not
        assert_eq!(next(&closed, &pipe(&["EVALSHA"])), None);
    }

    #[test]
    fn the_waits_double_from_10_ms_to_half_a_second() {
        let waits: Vec<u64> = (1..=TRIES).map(|t| backoff(t).as_millis() as u64).collect();
        assert_eq!(waits[..7], [10, 20, 40, 80, 160, 320, 500]);
        assert!(waits[7..].iter().all(|&w| w == 500));
        assert_eq!(waits.iter().sum::<u64>(), 3630);
    }
}
