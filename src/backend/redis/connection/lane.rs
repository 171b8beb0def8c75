//! Lanes: up to two more connections to the same server, each written to and
//! read from by the calling task itself.
//!
//! A managed connection hands each command to its multiplexer, a task of its
//! own that writes it and sends the reply back: two wake-ups between tasks per
//! call, which on a multi-threaded runtime are often wake-ups between threads.
//! On this project's 2-core bench a `PING` took 65 µs that way and 37 µs when
//! the caller did the socket's work itself. So a call that finds a lane free
//! takes it, writes its command, reads the reply (with [`super::resp`]) and
//! puts the lane back; a call that finds every lane taken, or the next one
//! connecting or down, goes through the multiplexer as before, pipelined with
//! the other calls there. Calls one at a time always take the first lane; the
//! second opens once a call finds the first taken, so that a worker's fetch
//! and its settle, under way at once, each skip the task hops (and the `redis`
//! crate's slower reply parser): on the 2-core bench a worker's CPU per job
//! fell by about a fifth with it.
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
//! [`STALE`] goes to it rather than a lane. A call that finds it unused for
//! [`CHECK`] or longer (the client paused), or finds a lane closed by the
//! server (which says the multiplexer, idle as long, may be too), sends the
//! multiplexer a `PING` first, which a closed socket fails, and goes out on
//! the new socket the managed connection opens. A connection whose lanes
//! never open (TLS, RESP3: see [`Lanes::new`]) has no lane to tell it the
//! server closed its idle sockets: its calls all go to the multiplexer, and
//! one after a pause of [`SHORT_CHECK`] or longer (below the shortest
//! `timeout` a server takes) checks it first.
//!
//! A Sentinel connection keeps its lanes with each master it connects to (see
//! `sentinel::Master`), dropped with it when a failover replaces it. Its
//! multiplexer does not open a new socket by itself: a call whose `PING`
//! found it closed fails unsent (see [`not_sent`]), and the link sends it on
//! a new connection to the master.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionInfo, Pipeline, RedisFuture, RedisResult, Value};

use super::socket::Socket;

/// How many lanes a connection opens at most: a worker's fetch and its
/// settle, under way at once on one connection, each take one. The second
/// opens only once two calls were under way at once.
const LANES: usize = 2;

/// The first wait before opening a lane again after a failed attempt; it
/// doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long the multiplexer may go unused while calls take the lane: half the
/// shortest server `timeout` (one second), so calls one at a time keep it open.
const STALE: Duration = Duration::from_millis(500);

/// How long the multiplexer may go unused before a call checks it with a
/// `PING` first, when lanes open: longer than an idle worker's calls are
/// apart (a beat every third of a 30 s lease), so an idle worker sends no
/// extra command, while a client that paused longer than a server `timeout`
/// of this or more finds out before its call fails (a shorter one closes
/// the lanes too, which a call finds out without a command).
const CHECK: Duration = Duration::from_secs(15);

/// How long a socket nothing else tells the state of (a multiplexer without
/// lanes, a Cluster node's: see `cluster::Node`) may go unused before a call
/// checks it with a `PING` first: below the shortest `timeout` a server
/// takes (1 s), by a margin for the server's clock, which it reads once per
/// event loop turn. A client used within its `timeout` is never closed for
/// idling.
pub(super) const SHORT_CHECK: Duration = Duration::from_millis(800);

/// The lanes of one managed connection (shared by its clones): up to
/// [`LANES`] sockets, each taken by one call at a time.
pub(super) struct Lanes {
    /// Whether lanes open at all: not where a lane cannot speak for the
    /// managed connection (see [`Lanes::new`]); calls then all go to the
    /// multiplexer, checked after a pause as any call is.
    open: bool,
    info: ConnectionInfo,
    connection_timeout: Duration,
    response_timeout: Duration,
    /// The lanes, tried in order: a call goes on to the next only when this
    /// one is taken, so calls one at a time always take the first, and the
    /// next is opened only once two calls are under way at once.
    slots: [Mutex<Slot>; LANES],
    /// When the lanes were made, the zero of `multiplexer_used`.
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

impl Lanes {
    /// Lanes for `client`'s server. None is open yet: the first call opens
    /// the first. Where a lane cannot speak for the managed connection (TLS:
    /// the `redis` crate opens those streams itself; RESP3: its pushes need
    /// the multiplexer), none ever opens ([`opens`](Self::opens) is false),
    /// and a call after a pause of [`SHORT_CHECK`] still checks the multiplexer
    /// first.
    pub fn new(
        client: &redis::Client,
        connection_timeout: Duration,
        response_timeout: Duration,
    ) -> Arc<Lanes> {
        let info = client.get_connection_info().clone();
        Arc::new(Lanes {
            open: super::socket::speaks_for(&info),
            info,
            connection_timeout,
            response_timeout,
            slots: std::array::from_fn(|_| {
                Mutex::new(Slot::Down {
                    retry_at: Instant::now(),
                    backoff: MIN_BACKOFF,
                })
            }),
            born: Instant::now(),
            multiplexer_used: AtomicU64::new(0),
        })
    }

    /// Whether calls may take a lane (see [`new`](Self::new)).
    pub fn opens(&self) -> bool {
        self.open
    }

    fn slot(&self, lane: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.slots[lane].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where one call goes: the first lane, when it is free and the
    /// multiplexer was used within [`STALE`]; the next lane only when the one
    /// before is taken by a call; else the multiplexer (the call then
    /// pipelines with the others there), with a `PING` first when it went
    /// unused for [`CHECK`] ([`SHORT_CHECK`] without lanes) or the lane was
    /// found closed by the server. A down
    /// lane due for another attempt (or one not yet opened) starts one in the
    /// background.
    fn route(self: &Arc<Self>) -> Route {
        let unused = self.multiplexer_unused();
        if unused >= CHECK || (!self.open && unused >= SHORT_CHECK) {
            return Route::Checked;
        }
        if !self.open {
            return Route::Multiplexer;
        }
        let stale = unused >= STALE;
        for lane in 0..LANES {
            let mut slot = self.slot(lane);
            match std::mem::replace(&mut *slot, Slot::Busy) {
                Slot::Busy => continue,
                Slot::Idle(mut socket) => {
                    if socket.closed() {
                        *slot = Slot::Connecting;
                        drop(slot);
                        self.reopen(lane, MIN_BACKOFF);
                        return Route::Checked;
                    }
                    if stale {
                        *slot = Slot::Idle(socket);
                        return Route::Multiplexer;
                    }
                    return Route::Lane(Taken {
                        lanes: self.clone(),
                        lane,
                        socket: Some(socket),
                        clean: true,
                    });
                }
                Slot::Down { retry_at, backoff } if Instant::now() < retry_at => {
                    *slot = Slot::Down { retry_at, backoff };
                    return Route::Multiplexer;
                }
                Slot::Down { backoff, .. } => {
                    *slot = Slot::Connecting;
                    drop(slot);
                    self.reopen(lane, backoff);
                    return Route::Multiplexer;
                }
                Slot::Connecting => {
                    *slot = Slot::Connecting;
                    return Route::Multiplexer;
                }
            }
        }
        Route::Multiplexer
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

    /// `call`, on the multiplexer (marked used).
    fn track<'a, T: 'a>(&self, call: RedisFuture<'a, T>) -> RedisFuture<'a, T> {
        self.multiplexer_in_use();
        call
    }

    /// Opens lane `lane` in the background; on failure it stays down for
    /// `backoff`, and the next attempt waits twice as long.
    fn reopen(self: &Arc<Self>, lane: usize, backoff: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            *self.slot(lane) = Slot::Down {
                retry_at: Instant::now(),
                backoff,
            };
            return;
        };
        let mut opening = Opening {
            lanes: self.clone(),
            lane,
            backoff,
            opened: false,
        };
        runtime.spawn(async move {
            let lanes = opening.lanes.clone();
            match tokio::time::timeout(lanes.connection_timeout, Socket::open(&lanes.info)).await {
                Ok(Ok(socket)) => opening.opened(socket),
                Ok(Err(e)) => tracing::debug!(error = %e, "could not open the connection's lane"),
                Err(_) => tracing::debug!("the connection's lane timed out opening"),
            }
        });
    }
}

/// `cmd` through one of `lanes` when it takes one, else on `con`, the
/// multiplexer the lanes stand beside.
pub(super) fn command<'a, C: Multiplexer>(
    lanes: Option<&Arc<Lanes>>,
    con: &'a mut C,
    cmd: &'a Cmd,
) -> RedisFuture<'a, Value> {
    let Some(lanes) = lanes else {
        return con.req_packed_command(cmd);
    };
    match lanes.route() {
        Route::Lane(taken) => match taken.command(cmd) {
            Some(call) => Box::pin(call),
            None => lanes.track(con.req_packed_command(cmd)),
        },
        Route::Multiplexer => lanes.track(con.req_packed_command(cmd)),
        Route::Checked => lanes.track(Box::pin(async move {
            checked(con).await?;
            con.req_packed_command(cmd).await
        })),
    }
}

/// [`command`] for a pipeline's replies from `offset` on, at most `count`.
pub(super) fn pipeline<'a, C: Multiplexer>(
    lanes: Option<&Arc<Lanes>>,
    con: &'a mut C,
    pipeline: &'a Pipeline,
    offset: usize,
    count: usize,
) -> RedisFuture<'a, Vec<Value>> {
    let Some(lanes) = lanes else {
        return con.req_packed_commands(pipeline, offset, count);
    };
    match lanes.route() {
        Route::Lane(taken) => match taken.pipeline(pipeline, offset, count) {
            Some(call) => Box::pin(call),
            None => lanes.track(con.req_packed_commands(pipeline, offset, count)),
        },
        Route::Multiplexer => lanes.track(con.req_packed_commands(pipeline, offset, count)),
        Route::Checked => lanes.track(Box::pin(async move {
            checked(con).await?;
            con.req_packed_commands(pipeline, offset, count).await
        })),
    }
}

/// Commands already packed as RESP (`count` of them in `packed`), written
/// as they are when a lane takes them; the multiplexer is given
/// `pipeline()`, the same commands, instead. Every reply, a server's error
/// as a [`Value::ServerError`]. The caller's commands leave no state on
/// their connection (see [`keeps_state`]) and each has a reply.
pub(super) async fn packed<C: Multiplexer>(
    lanes: Option<&Arc<Lanes>>,
    con: &mut C,
    packed: &[u8],
    count: usize,
    pipeline: impl FnOnce() -> Pipeline,
) -> RedisResult<Vec<Value>> {
    let pipeline = || {
        let p = pipeline();
        debug_assert_eq!(p.len(), count, "a packed call's commands");
        debug_assert!(!p.is_transaction() && !p.cmd_iter().any(keeps_state));
        p
    };
    let Some(lanes) = lanes else {
        return con.req_packed_commands(&pipeline(), 0, count).await;
    };
    match lanes.route() {
        Route::Lane(taken) => {
            // (the tests' builds check each call's two forms against each other)
            debug_assert!(
                pipeline().get_packed_pipeline() == packed,
                "a call packed by hand and its pipeline differ"
            );
            taken.call(packed, count).await
        }
        Route::Multiplexer => {
            lanes.multiplexer_in_use();
            con.req_packed_commands(&pipeline(), 0, count).await
        }
        Route::Checked => {
            lanes.multiplexer_in_use();
            checked(con).await?;
            con.req_packed_commands(&pipeline(), 0, count).await
        }
    }
}

/// Where a call goes (see [`Lanes::route`]).
enum Route {
    Lane(Taken),
    Multiplexer,
    /// The multiplexer, after a `PING` ([`checked`]).
    Checked,
}

/// The multiplexer the lanes stand beside: a managed connection's, which
/// opens a new socket by itself after a call found its socket closed, or a
/// Sentinel master's, which does not (the link asks the Sentinels again).
pub(super) trait Multiplexer: ConnectionLike + Send {
    /// Whether a call made after one that found the socket closed goes out
    /// on a new socket.
    const HEALS: bool;
}

impl Multiplexer for redis::aio::ConnectionManager {
    const HEALS: bool = true;
}

impl Multiplexer for redis::aio::MultiplexedConnection {
    const HEALS: bool = false;
}

/// Sends the multiplexer `con` a `PING` when it may have been closed while
/// idle (see [`Lanes::route`]). A socket the server closed meanwhile fails it,
/// and the managed connection opens another for the call that follows; a
/// multiplexer that does not [heal](Multiplexer::HEALS) fails the call
/// without sending it, with an error [`not_sent`] tells (its caller sends it
/// on a new connection). A server that does not answer in time fails the
/// call without sending it; any other reply (`NOPERM`, `LOADING`) is the
/// call's to meet.
pub(super) async fn checked<C: Multiplexer>(con: &mut C) -> RedisResult<()> {
    match con.req_packed_command(&redis::cmd("PING")).await {
        Err(e) if e.is_timeout() => Err(e),
        Err(e) if !C::HEALS && e.is_connection_dropped() => Err(unsent(&e)),
        _ => Ok(()),
    }
}

/// The error of a call not sent because its socket was found closed
/// (`e`, the check's error), as [`not_sent`] tells.
pub(super) fn unsent(e: &redis::RedisError) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Io,
        "connection closed",
        format!("{NOT_SENT}: {e}"),
    ))
}

/// How the error of a call [`checked`] did not send begins its detail.
const NOT_SENT: &str = "the multiplexed socket was found closed before the call was sent";

/// Whether `e` says the call was not sent: the multiplexer's check found its
/// socket closed (see [`checked`]).
pub(super) fn not_sent(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Io && e.detail().is_some_and(|d| d.starts_with(NOT_SENT))
}

/// The lane, taken for one call. Dropped after a call that went through, it
/// is free again; after one that failed or was given up half-way, it is
/// closed and opened again.
pub(super) struct Taken {
    lanes: Arc<Lanes>,
    /// Which of them.
    lane: usize,
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
            let mut replies = self.call(&packed, 1).await?;
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
            let mut replies = self.call(&packed, pipeline.len()).await?;
            replies.drain(..offset);
            replies.truncate(count);
            Ok(replies)
        })
    }

    async fn call(mut self, packed: &[u8], replies: usize) -> RedisResult<Vec<Value>> {
        let timeout = self.lanes.response_timeout;
        let Some(socket) = self.socket.as_mut() else {
            return Err(std::io::Error::other("the lane has no socket").into());
        };
        self.clean = false;
        let out = tokio::time::timeout(timeout, socket.exchange(packed, replies))
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
    lanes: Arc<Lanes>,
    lane: usize,
    backoff: Duration,
    opened: bool,
}

impl Opening {
    fn opened(&mut self, socket: Socket) {
        *self.lanes.slot(self.lane) = Slot::Idle(Box::new(socket));
        self.opened = true;
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        if self.opened {
            return;
        }
        *self.lanes.slot(self.lane) = Slot::Down {
            retry_at: Instant::now() + self.backoff,
            backoff: (self.backoff * 2).min(MAX_BACKOFF),
        };
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let next = match self.socket.take() {
            Some(socket) if self.clean => Slot::Idle(socket),
            _ => Slot::Down {
                retry_at: Instant::now(),
                backoff: MIN_BACKOFF,
            },
        };
        *self.lanes.slot(self.lane) = next;
    }
}
