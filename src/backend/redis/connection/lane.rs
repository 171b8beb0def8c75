//! A lane: a second connection to the same server that the calling task
//! writes to and reads from itself.
//!
//! A managed connection hands each command to its multiplexer, a task of its
//! own that writes it and sends the reply back: two wake-ups between tasks per
//! call, which on a multi-threaded runtime are often wake-ups between threads.
//! On this project's 2-core bench a `PING` took 65 µs that way and 37 µs when
//! the caller did the socket's work itself. So a call that finds the lane free
//! takes it, writes its command, reads the reply (with the `redis` crate's
//! parser) and puts the lane back; a call that finds it taken, connecting or
//! down goes through the multiplexer as before. Concurrent calls thus still
//! pipeline on the managed connection, and one at a time never waits on a task
//! hop.
//!
//! A lane whose call failed, timed out or was dropped half-way is closed (its
//! socket may hold a reply nobody reads) and opened again in the background;
//! one found closed by the server when taken is not used. Transactions,
//! commands without a reply and those that leave state on their connection
//! (`WATCH`, `SELECT`, subscriptions, client settings: see [`keeps_state`])
//! always go through the multiplexer. Calls under way at once are therefore
//! not ordered with each other, as they were on the multiplexer alone; one
//! call after another is.
//!
//! A server closes a connection left idle longer than its `timeout` (none by
//! default), and the multiplexer learns it only when a call fails there. So
//! calls one at a time do not leave it idle: one that finds it unused for
//! [`STALE`] goes to it rather than the lane. A call that finds it unused for
//! [`CHECK`] or longer (the client paused), or finds the lane closed by the
//! server (which says the multiplexer, idle as long, may be too), sends the
//! multiplexer a `PING` first, which a closed socket fails, and goes out on
//! the new socket the managed connection opens.
//!
//! A Sentinel connection keeps a lane with each master it connects to (see
//! `sentinel::Master`), dropped with it when a failover replaces it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, Pipeline, ProtocolVersion, RedisFuture, RedisResult, Value,
};

use super::socket::Socket;

/// The first wait before opening a lane again after a failed attempt; it
/// doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long the multiplexer may go unused while calls take the lane: half the
/// shortest server `timeout` (one second), so calls one at a time keep it open.
const STALE: Duration = Duration::from_millis(500);

/// How long the multiplexer may go unused before a call checks it with a
/// `PING` first: longer than an idle worker's calls are apart (a beat every
/// third of a 30 s lease), so an idle worker sends no extra command, while a
/// client that paused longer than a server `timeout` of this or more finds
/// out before its call fails.
const CHECK: Duration = Duration::from_secs(15);

/// The lane of one managed connection (shared by its clones).
pub(super) struct Lane {
    info: ConnectionInfo,
    connection_timeout: Duration,
    response_timeout: Duration,
    slot: Mutex<Slot>,
    /// Calls under way on the connection, through the lane or the multiplexer.
    in_flight: AtomicUsize,
    /// When the lane was made, the zero of `multiplexer_used`.
    born: Instant,
    /// When a call last went to the multiplexer, in milliseconds from `born`.
    multiplexer_used: AtomicU64,
}

enum Slot {
    Idle(Box<Socket>),
    /// A call has it.
    Busy,
    Connecting,
    /// Closed; open it again once `retry_at` has passed.
    Down {
        retry_at: Instant,
        backoff: Duration,
    },
}

impl Lane {
    /// A lane for `client`'s server, or `None` where a lane cannot speak for the
    /// managed connection: TLS (the `redis` crate opens those streams itself)
    /// and RESP3 (its pushes need the multiplexer).
    pub fn new(
        client: &redis::Client,
        connection_timeout: Duration,
        response_timeout: Duration,
    ) -> Option<Arc<Lane>> {
        let info = client.get_connection_info().clone();
        let plain = matches!(
            info.addr(),
            ConnectionAddr::Tcp(..) | ConnectionAddr::Unix(_)
        );
        let resp2 = matches!(info.redis_settings().protocol(), ProtocolVersion::RESP2);
        (plain && resp2).then(|| {
            Arc::new(Lane {
                info,
                connection_timeout,
                response_timeout,
                slot: Mutex::new(Slot::Down {
                    retry_at: Instant::now(),
                    backoff: MIN_BACKOFF,
                }),
                in_flight: AtomicUsize::new(0),
                born: Instant::now(),
                multiplexer_used: AtomicU64::new(0),
            })
        })
    }

    /// Where one call goes: the lane when no other call is under way on the
    /// connection and the multiplexer was used within [`STALE`]; else the
    /// multiplexer (this call then pipelines with the others there), with a
    /// `PING` first when it went unused for [`CHECK`] or the lane was found
    /// closed by the server. A down lane due for another attempt starts one
    /// in the background.
    fn route(self: &Arc<Self>) -> Route {
        let unused = self.multiplexer_unused();
        if unused >= CHECK {
            return Route::Checked;
        }
        let stale = unused >= STALE;
        if self.in_flight.load(Ordering::Relaxed) != 0 {
            return Route::Multiplexer;
        }
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *slot, Slot::Busy) {
            Slot::Idle(mut socket) => {
                if socket.closed() {
                    *slot = Slot::Connecting;
                    drop(slot);
                    self.reopen(MIN_BACKOFF);
                    return Route::Checked;
                }
                if stale {
                    *slot = Slot::Idle(socket);
                    return Route::Multiplexer;
                }
                self.in_flight.fetch_add(1, Ordering::Relaxed);
                Route::Lane(Taken {
                    lane: self.clone(),
                    socket: Some(socket),
                    clean: true,
                })
            }
            Slot::Down { retry_at, backoff } => {
                if Instant::now() < retry_at {
                    *slot = Slot::Down { retry_at, backoff };
                    return Route::Multiplexer;
                }
                *slot = Slot::Connecting;
                drop(slot);
                self.reopen(backoff);
                Route::Multiplexer
            }
            other => {
                *slot = other;
                Route::Multiplexer
            }
        }
    }

    /// How long the multiplexer has gone unused; from [`STALE`] on, marked
    /// used (the call it is asked for goes there).
    fn multiplexer_unused(&self) -> Duration {
        let now = self.age_ms();
        let last = self.multiplexer_used.load(Ordering::Relaxed);
        let unused = Duration::from_millis(now.saturating_sub(last));
        if unused >= STALE {
            self.multiplexer_used.store(now, Ordering::Relaxed);
        }
        unused
    }

    /// Marks the multiplexer used now.
    fn multiplexer_in_use(&self) {
        self.multiplexer_used
            .store(self.age_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since the lane was made.
    fn age_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// `call` (on the multiplexer), counted as under way until it ends.
    fn track<'a, T: 'a>(self: &Arc<Self>, call: RedisFuture<'a, T>) -> RedisFuture<'a, T> {
        self.multiplexer_in_use();
        let busy = Busy::new(self.clone());
        Box::pin(async move {
            let _busy = busy;
            call.await
        })
    }

    /// Opens the lane in the background; on failure it stays down for
    /// `backoff`, and the next attempt waits twice as long.
    fn reopen(self: &Arc<Self>, backoff: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Down {
                retry_at: Instant::now(),
                backoff,
            };
            return;
        };
        let mut opening = Opening {
            lane: self.clone(),
            backoff,
            opened: false,
        };
        runtime.spawn(async move {
            let lane = opening.lane.clone();
            match tokio::time::timeout(lane.connection_timeout, Socket::open(&lane.info)).await {
                Ok(Ok(socket)) => opening.opened(socket),
                Ok(Err(e)) => tracing::debug!(error = %e, "could not open the connection's lane"),
                Err(_) => tracing::debug!("the connection's lane timed out opening"),
            }
        });
    }
}

/// `cmd` through `lane` when it takes it, else on `con`, the multiplexer the
/// lane stands beside (counted as under way there).
pub(super) fn command<'a, C: ConnectionLike + Send>(
    lane: Option<&Arc<Lane>>,
    con: &'a mut C,
    cmd: &'a Cmd,
) -> RedisFuture<'a, Value> {
    let Some(lane) = lane else {
        return con.req_packed_command(cmd);
    };
    match lane.route() {
        Route::Lane(taken) => match taken.command(cmd) {
            Some(call) => Box::pin(call),
            None => lane.track(con.req_packed_command(cmd)),
        },
        Route::Multiplexer => lane.track(con.req_packed_command(cmd)),
        Route::Checked => lane.track(Box::pin(async move {
            checked(con).await?;
            con.req_packed_command(cmd).await
        })),
    }
}

/// [`command`] for a pipeline's replies from `offset` on, at most `count`.
pub(super) fn pipeline<'a, C: ConnectionLike + Send>(
    lane: Option<&Arc<Lane>>,
    con: &'a mut C,
    pipeline: &'a Pipeline,
    offset: usize,
    count: usize,
) -> RedisFuture<'a, Vec<Value>> {
    let Some(lane) = lane else {
        return con.req_packed_commands(pipeline, offset, count);
    };
    match lane.route() {
        Route::Lane(taken) => match taken.pipeline(pipeline, offset, count) {
            Some(call) => Box::pin(call),
            None => lane.track(con.req_packed_commands(pipeline, offset, count)),
        },
        Route::Multiplexer => lane.track(con.req_packed_commands(pipeline, offset, count)),
        Route::Checked => lane.track(Box::pin(async move {
            checked(con).await?;
            con.req_packed_commands(pipeline, offset, count).await
        })),
    }
}

/// Where a call goes (see [`Lane::route`]).
enum Route {
    Lane(Taken),
    Multiplexer,
    /// The multiplexer, after a `PING` ([`checked`]).
    Checked,
}

/// Sends the multiplexer `con` a `PING` when it may have been closed while
/// idle (see [`Lane::route`]). A socket the server closed meanwhile fails it,
/// and the managed connection opens another for the call that follows. A server that does not answer in time fails the
/// call without sending it; any other reply (`NOPERM`, `LOADING`) is the
/// call's to meet.
async fn checked<C: ConnectionLike + Send>(con: &mut C) -> RedisResult<()> {
    match con.req_packed_command(&redis::cmd("PING")).await {
        Err(e) if e.is_timeout() => Err(e),
        _ => Ok(()),
    }
}

/// The lane, taken for one call. Dropped after a call that went through, it
/// is free again; after one that failed or was given up half-way, it is
/// closed and opened again.
pub(super) struct Taken {
    lane: Arc<Lane>,
    socket: Option<Box<Socket>>,
    /// No reply is owed on the socket.
    clean: bool,
}

impl Taken {
    /// A single command, as the multiplexer answers it (a server error is an
    /// `Ok(Value::ServerError)`), or `None` to leave it to the multiplexer.
    pub fn command(
        self,
        cmd: &Cmd,
    ) -> Option<impl Future<Output = RedisResult<Value>> + Send + '_> {
        if cmd.is_no_response() || keeps_state(cmd) {
            return None;
        }
        Some(async move {
            let packed = cmd.get_packed_command();
            let mut replies = self.call(packed, 1).await?;
            Ok(replies.pop().unwrap_or(Value::Nil))
        })
    }

    /// A pipeline that is not a transaction: its replies from `offset` on, at
    /// most `count`; `None` to leave it to the multiplexer.
    pub fn pipeline(
        self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> Option<impl Future<Output = RedisResult<Vec<Value>>> + Send + '_> {
        if pipeline.is_transaction()
            || pipeline.is_empty()
            || offset + count > pipeline.len()
            || pipeline.cmd_iter().any(keeps_state)
        {
            return None;
        }
        Some(async move {
            let packed = pipeline.get_packed_pipeline();
            let mut replies = self.call(packed, pipeline.len()).await?;
            replies.drain(..offset);
            replies.truncate(count);
            Ok(replies)
        })
    }

    async fn call(mut self, packed: Vec<u8>, replies: usize) -> RedisResult<Vec<Value>> {
        let timeout = self.lane.response_timeout;
        let Some(socket) = self.socket.as_mut() else {
            return Err(std::io::Error::other("the lane has no socket").into());
        };
        self.clean = false;
        let out = tokio::time::timeout(timeout, socket.exchange(&packed, replies))
            .await
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
        // more than the replies counted (a command answering twice) leaves the
        // socket out of step: closed
        self.clean = !socket.leftover();
        Ok(out)
    }
}

/// Whether `cmd` leaves state on its connection that a later call relies on
/// (a `WATCH` for the `EXEC` after it, a database, a subscription, a client
/// setting): the multiplexer then runs it, and the calls that follow it there.
fn keeps_state(cmd: &Cmd) -> bool {
    const STATEFUL: [&[u8]; 20] = [
        b"WATCH",
        b"UNWATCH",
        b"MULTI",
        b"EXEC",
        b"DISCARD",
        b"SELECT",
        b"SWAPDB",
        b"AUTH",
        b"HELLO",
        b"RESET",
        b"SUBSCRIBE",
        b"PSUBSCRIBE",
        b"SSUBSCRIBE",
        b"UNSUBSCRIBE",
        b"PUNSUBSCRIBE",
        b"SUNSUBSCRIBE",
        b"MONITOR",
        b"READONLY",
        b"READWRITE",
        b"ASKING",
    ];
    // CLIENT's subcommands that leave nothing behind
    const CLIENT_READS: [&[u8]; 5] = [b"ID", b"INFO", b"LIST", b"GETNAME", b"KILL"];
    let mut args = cmd.args_iter().filter_map(|a| match a {
        redis::Arg::Simple(a) => Some(a),
        _ => None,
    });
    let Some(name) = args.next() else {
        return false;
    };
    if name.eq_ignore_ascii_case(b"CLIENT") {
        return !args
            .next()
            .is_some_and(|sub| CLIENT_READS.iter().any(|r| sub.eq_ignore_ascii_case(r)));
    }
    STATEFUL.iter().any(|s| name.eq_ignore_ascii_case(s))
}

/// A lane being opened; dropped before it is (the attempt failed, or its task
/// was dropped with its runtime), the lane is down for `backoff`, and the next
/// attempt waits twice as long.
struct Opening {
    lane: Arc<Lane>,
    backoff: Duration,
    opened: bool,
}

impl Opening {
    fn opened(&mut self, socket: Socket) {
        *self.lane.slot.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Idle(Box::new(socket));
        self.opened = true;
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if self.opened {
            return;
        }
        *self.lane.slot.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Down {
            retry_at: Instant::now() + self.backoff,
            backoff: (self.backoff * 2).min(MAX_BACKOFF),
        };
    }
}

/// One call under way on the multiplexer.
struct Busy(Arc<Lane>);

impl Busy {
    fn new(lane: Arc<Lane>) -> Busy {
        lane.in_flight.fetch_add(1, Ordering::Relaxed);
        Busy(lane)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.lane.in_flight.fetch_sub(1, Ordering::Relaxed);
        let next = match self.socket.take() {
            Some(socket) if self.clean => Slot::Idle(socket),
            _ => Slot::Down {
                retry_at: Instant::now(),
                backoff: MIN_BACKOFF,
            },
        };
        *self.lane.slot.lock().unwrap_or_else(|p| p.into_inner()) = next;
    }
}
