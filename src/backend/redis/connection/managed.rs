//! A managed connection to one server, opened again whole when the server
//! turns out to be a replica, or went silent.
//!
//! The `redis` crate's `ConnectionManager` reconnects after an I/O error
//! only. Behind one address that follows the master (a managed Redis's
//! primary endpoint, a TCP proxy, a DNS name), a failover leaves the open
//! sockets on the old master, now a replica that answers every write with
//! `READONLY`, and none of them ever breaks. So a call that meets `READONLY`
//! drops the multiplexer and its lanes (see [`super::lane`]): the next call
//! connects again, to whatever the address leads to now. The call itself
//! fails, and is not sent again: a pipeline may have run in part on the old
//! master before it was demoted. A call that timed out does the same: a
//! socket nothing answers on (a flow a NAT or a load balancer forgot, a
//! host gone without a reset) breaks only once the operating system gives
//! up on it, many minutes later, and every call the multiplexer took until
//! then timed out; a server that was only slow costs a new connection.
//!
//! A call waits at most the connection timeout and the response timeout
//! together (see [`Managed::bounded`]): when the socket broke, the manager
//! connects again in the background, trying an unanswered `AUTH` up to four
//! times; the call fails as a timeout naming the server once that bound has
//! passed, and a later call finds the connection the attempt made.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, RedisResult, Value};

use super::lane::Lanes;

/// A managed connection and its lanes, replaced by new ones when a reply
/// says the server has become a replica. Shared by a connection's clones.
pub(super) struct Managed {
    /// The connection calls go out on now.
    current: Mutex<Current>,
    /// How new ones are opened; `None` for a manager the caller made, which
    /// is kept whatever it answers.
    reopen: Option<Reopen>,
    /// How long one call may take, connecting again included, and the
    /// server it names when it takes longer (`None` for a manager the caller
    /// made, whose timeouts are its own).
    bound: Option<(Duration, String)>,
}

/// The connection calls go out on now; `generation` tells it apart from the
/// ones it replaced.
#[derive(Clone)]
pub(super) struct Current {
    /// 0 for the first, one more for each that replaced another.
    pub generation: u64,
    /// The multiplexer, which reconnects by itself after an I/O error.
    pub con: ConnectionManager,
    /// The lanes beside `con` (which open when its server's URL allows
    /// them, and check `con` after a pause either way); `None` for a manager
    /// the caller made.
    pub lane: Option<Arc<Lanes>>,
}

/// What opens a managed connection and its lanes again.
pub(super) struct Reopen {
    /// The server's client (its address, credentials and database).
    pub client: redis::Client,
    /// The multiplexer's timeouts and reconnection backoff.
    pub config: ConnectionManagerConfig,
    /// How long a lane may take to connect.
    pub connection_timeout: Duration,
    /// How long a lane's call may wait for its reply.
    pub response_timeout: Duration,
}

impl Managed {
    /// `con` with its lanes, opened again with `reopen` after a `READONLY`.
    pub fn new(con: ConnectionManager, lane: Option<Arc<Lanes>>, reopen: Option<Reopen>) -> Self {
        let bound = reopen.as_ref().map(|r| {
            (
                r.connection_timeout.saturating_add(r.response_timeout),
                r.client.get_connection_info().addr().to_string(),
            )
        });
        Managed {
            bound,
            current: Mutex::new(Current {
                generation: 0,
                con,
                lane,
            }),
            reopen,
        }
    }

    /// The current connection, locked.
    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        // a swap of whole values cannot be left half-done
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection a call goes out on.
    pub fn current(&self) -> Current {
        self.lock().clone()
    }

    /// Whether calls may take a lane (the same for every connection opened
    /// again: it depends on the URL alone).
    pub fn has_lanes(&self) -> bool {
        self.lock().lane.as_ref().is_some_and(|l| l.opens())
    }

    /// `call`, failing as a timeout naming the server once the connection
    /// and response timeouts together have passed. The manager's own bounds
    /// hold each attempt to connect and each reply, but a call that finds the
    /// socket broken waits for the whole reconnection, up to four attempts
    /// with backoff between them (as many as the backoff fits in half the
    /// connection timeout, see `connect_retries`; an unanswered `AUTH` waits
    /// out the connection timeout each time). The reconnection goes on in
    /// the background; a call given up is dropped, as one that times out.
    pub async fn bounded<T>(
        &self,
        call: impl std::future::Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        let Some((limit, server)) = &self.bound else {
            return call.await;
        };
        match tokio::time::timeout(*limit, call).await {
            Ok(reply) => reply,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer from the Redis server at {server} within {limit:?} (the connection and response timeouts)"
                ),
            )
            .into()),
        }
    }

    /// `reply` from the connection of `generation`, which is replaced by a
    /// new one, connected on first use, when the reply is a `READONLY` or
    /// holds one (a pipeline's or a single command's server error comes as
    /// a value): the server it reached is a replica now; or when the call
    /// timed out: its socket may be one nothing answers on any more.
    pub fn answered<T: Replies>(&self, generation: u64, reply: RedisResult<T>) -> RedisResult<T> {
        let why = match &reply {
            Err(e) if e.is_timeout() => Some(Replaced::Silent),
            Err(e) if readonly(e) => Some(Replaced::Replica),
            Err(_) => None,
            Ok(values) => values.says(readonly).then_some(Replaced::Replica),
        };
        if let Some(why) = why {
            self.replace(generation, why);
        }
        reply
    }

    /// Replaces the connection of `generation` (not a newer one: calls under
    /// way on it at once replace it once, and warn once).
    fn replace(&self, generation: u64, why: Replaced) {
        let Some(reopen) = &self.reopen else {
            return;
        };
        let mut current = self.lock();
        if current.generation != generation {
            return;
        }
        match ConnectionManager::new_lazy_with_config(reopen.client.clone(), reopen.config.clone())
        {
            Ok(con) => {
                match why {
                    Replaced::Replica => tracing::warn!(
                        "the Redis server answered READONLY: it is a replica now (a failover behind its address); connecting again"
                    ),
                    Replaced::Silent => tracing::warn!(
                        "a call to the Redis server timed out: connecting again (its socket may be one nothing answers on any more)"
                    ),
                }
                *current = Current {
                    generation: generation + 1,
                    con,
                    lane: Some(Lanes::new(
                        &reopen.client,
                        reopen.connection_timeout,
                        reopen.response_timeout,
                    )),
                };
            }
            Err(e) => tracing::warn!(
                error = %e,
                "the Redis server's connection is to be replaced ({why:?}), and no new connection could be made"
            ),
        }
    }
}

/// Why a managed connection is replaced.
#[derive(Debug, Clone, Copy)]
enum Replaced {
    /// A reply said the server is a replica now.
    Replica,
    /// A call timed out.
    Silent,
}

/// A connection's replies, read for a server error of one kind.
pub(crate) trait Replies {
    /// Whether a server's error among them is one `kind` tells.
    fn says(&self, kind: fn(&RedisError) -> bool) -> bool;
}

impl Replies for Value {
    fn says(&self, kind: fn(&RedisError) -> bool) -> bool {
        matches!(self, Value::ServerError(_))
            && self.clone().extract_error().is_err_and(|e| kind(&e))
    }
}

impl Replies for Vec<Value> {
    fn says(&self, kind: fn(&RedisError) -> bool) -> bool {
        self.iter().any(|v| v.says(kind))
    }
}

/// Whether `e` is a write a replica refused: `READONLY`, or a script's write
/// as Redis 6.2 reports it (`READONLY` wrapped in `ERR`).
pub(super) fn readonly(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        || e.to_string().contains("READONLY You can't write")
}

#[cfg(test)]
mod tests {
    use super::Replies;

    #[test]
    fn a_readonly_reply_is_found_in_either_form() {
        let reply = |raw: &[u8]| redis::parse_redis_value(raw).unwrap();
        let readonly = reply(b"-READONLY You can't write against a read only replica.\r\n");
        let wrapped = reply(
            b"-ERR Error running script: @user_script:1: READONLY You can't write against a read only replica.\r\n",
        );
        let masterdown = reply(b"-MASTERDOWN Link with MASTER is down\r\n");
        let ok = reply(b"+OK\r\n");
        assert!(readonly.says(super::readonly));
        assert!(wrapped.says(super::readonly));
        assert!(!masterdown.says(super::readonly));
        assert!(!ok.says(super::readonly));
        assert!(vec![ok.clone(), readonly].says(super::readonly));
        assert!(!vec![ok, masterdown].says(super::readonly));
        let err = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(super::readonly(&err));
    }
}
