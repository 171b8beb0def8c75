//! `redis+sentinel://` URLs (in `url`), and a connection that follows the
//! master Sentinel names through failovers.

mod url;

pub(super) use url::parse;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};
use tokio::time::Instant;

use super::lane::Lanes;
use super::managed::{Replies, readonly};
use super::switch::Switch;

/// A connection to the master that Sentinel names. When a command fails in a
/// way that says the master is gone (the connection broke or timed out, or the
/// server has become a read-only replica), the connection is dropped and the
/// next command asks the Sentinels again. The failed command itself is not
/// repeated: it may have run. When the Sentinels announce a new master, the
/// connection to the old one is forgotten at once and replies still to come
/// on it are refused (see [`super::switch`]). A call, the lookup it may wait
/// for included, fails as a timeout once the connection and response timeouts
/// together have passed (see [`Link::call`]).
pub(crate) struct Link {
    sentinel: tokio::sync::Mutex<Lookup>,
    switch: Arc<Switch>,
    /// The Sentinels and the master's name, followed for announcements once
    /// the link is first used (in a runtime), until it is dropped.
    announcers: Option<(Vec<redis::ConnectionInfo>, String)>,
    /// Set for a link that follows no announcements (see `without_watch`).
    unwatched: std::sync::atomic::AtomicBool,
    /// The task following them (started again when the runtime that ran it
    /// ended), and its stop, given when the link is dropped.
    watcher: Mutex<Option<(tokio::task::JoinHandle<()>, tokio_util::sync::DropGuard)>>,
    /// Bounds one lookup: asking the Sentinels, checking the master, connecting.
    connection_timeout: Duration,
    response_timeout: Duration,
    /// Whether a master's connection comes with lanes (see `without_lanes`).
    lanes: std::sync::atomic::AtomicBool,
    config: redis::AsyncConnectionConfig,
    db: i64,
}

struct Lookup {
    client: SentinelClient,
    /// The wait after the next failed lookup (100 ms doubling up to 2 s).
    delay: Duration,
    /// A lookup that failed: callers get its error until then.
    failed: Option<(Instant, RedisError)>,
}

/// The master's client and a connection to it; `generation` tells connections
/// to different masters (or to one master before and after a break) apart.
#[derive(Clone)]
pub(crate) struct Master {
    pub generation: u64,
    pub client: redis::Client,
    pub con: MultiplexedConnection,
    /// The lanes of `con` (see [`super::lane`]: they open when the master's
    /// URL allows them, and check `con` after a pause either way); `None`
    /// for a blocking reader's link.
    pub(super) lane: Option<Arc<Lanes>>,
}

const MIN_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(2);

impl Link {
    pub fn new(
        client: SentinelClient,
        db: i64,
        connection_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        Link {
            sentinel: tokio::sync::Mutex::new(Lookup {
                client,
                delay: MIN_DELAY,
                failed: None,
            }),
            switch: Arc::new(Switch::new()),
            announcers: None,
            unwatched: std::sync::atomic::AtomicBool::new(false),
            watcher: Mutex::new(None),
            connection_timeout,
            response_timeout,
            lanes: std::sync::atomic::AtomicBool::new(true),
            config: redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(connection_timeout))
                .set_response_timeout(Some(response_timeout)),
            db,
        }
    }

    /// Follows `sentinels`' announcements of a new master for `service`.
    fn announced_by(mut self, sentinels: Vec<redis::ConnectionInfo>, service: &str) -> Self {
        self.announcers = Some((sentinels, service.to_string()));
        self
    }

    pub fn db(&self) -> i64 {
        self.db
    }

    fn cached(&self) -> Option<Master> {
        self.switch.current().clone()
    }

    /// Told when the Sentinels replace the master.
    pub fn replaced(&self) -> tokio::sync::watch::Receiver<u64> {
        self.switch.replaced()
    }

    /// Follows the Sentinels' announcements no more: a link of its own for
    /// one blocking reader, whose client's main link follows them (a read from
    /// a replaced master is taken again after its lease).
    pub fn without_watch(&self) {
        let mut watcher = self.watcher.lock().unwrap_or_else(|e| e.into_inner());
        *watcher = None;
        drop(watcher);
        self.unwatched
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Starts following the Sentinels' announcements, unless a task does
    /// (the one a runtime that has ended ran is gone with it).
    fn watch(&self) {
        let Some((sentinels, service)) = &self.announcers else {
            return;
        };
        if self.unwatched.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut watcher = self.watcher.lock().unwrap_or_else(|e| e.into_inner());
        if watcher
            .as_ref()
            .is_some_and(|(task, _)| !task.is_finished())
        {
            return;
        }
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(super::switch::watch(
            Arc::downgrade(&self.switch),
            sentinels.clone(),
            service.clone(),
            self.connection_timeout,
            next_generation,
            stop.clone(),
        ));
        *watcher = Some((task, stop.drop_guard()));
    }

    /// The current master, asking the Sentinels when there is none.
    pub async fn master(&self) -> RedisResult<Master> {
        if let Some(m) = self.cached() {
            return Ok(m);
        }
        self.watch();
        let mut lookup = self.sentinel.lock().await;
        // another caller may have found it while this one waited
        if let Some(m) = self.cached() {
            return Ok(m);
        }
        if let Some((until, e)) = &lookup.failed
            && Instant::now() < *until
        {
            return Err(e.clone());
        }
        // a master the Sentinels replaced while they were asked: ask again
        // (an announcement comes from each Sentinel, seconds apart)
        for _ in 0..3 {
            if let Some(found) = self.look_up(&mut lookup).await.transpose() {
                return found;
            }
        }
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the Sentinels announced a new master during each of three lookups: nothing was sent",
        )))
    }

    /// Asks the Sentinels for the master and connects to it; `None` when the
    /// Sentinels announced a new master meanwhile (the one found may be the
    /// old one).
    async fn look_up(&self, lookup: &mut Lookup) -> RedisResult<Option<Master>> {
        // numbered before the Sentinels are asked: a master they replace
        // meanwhile deposes this one too
        let generation = next_generation();
        let found = tokio::time::timeout(self.connection_timeout, async {
            let client = lookup.client.async_get_client().await?;
            let con = client
                .get_multiplexed_async_connection_with_config(&self.config)
                .await?;
            Ok::<_, RedisError>((client, con))
        })
        .await
        .unwrap_or_else(|_| {
            Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no master from Redis Sentinel within the connection timeout",
            )))
        });
        match found {
            Ok((client, con)) => {
                let mut current = self.switch.current();
                // checked under the lock an announcement takes
                if self.switch.deposed(generation) {
                    return Ok(None);
                }
                lookup.delay = MIN_DELAY;
                lookup.failed = None;
                let lane = Some(Lanes::new(
                    &client,
                    self.connection_timeout,
                    self.response_timeout,
                ))
                .filter(|_| self.lanes.load(std::sync::atomic::Ordering::Relaxed));
                let master = Master {
                    generation,
                    client,
                    con,
                    lane,
                };
                *current = Some(master.clone());
                Ok(Some(master))
            }
            Err(e) => {
                lookup.failed = Some((Instant::now() + lookup.delay, e.clone()));
                lookup.delay = (lookup.delay * 2).min(MAX_DELAY);
                Err(e)
            }
        }
    }

    /// `call` on the master (looked up first when there is none), its reply
    /// taken as [`answered`](Self::answered) takes it, failing as a timeout
    /// once the connection and response timeouts together have passed, as a
    /// call on one server does (see `Managed::bounded`): a lookup is bounded
    /// by the connection timeout, but one that meets the Sentinels announcing
    /// a new master looks again (three lookups at most), and a call may wait
    /// for another's lookup first. A master found whose call the bound cuts
    /// short is forgotten, as after a response timeout: the next call asks
    /// the Sentinels again. A call the master's connection did not send,
    /// having found its socket closed (the master's `timeout` closed it while
    /// idle, see [`super::lane`]), goes once more, on the connection the
    /// Sentinels' answer opens.
    pub async fn call<T: Replies, F>(&self, call: impl Fn(Master) -> F) -> RedisResult<T>
    where
        F: std::future::Future<Output = RedisResult<T>>,
    {
        let limit = self
            .connection_timeout
            .saturating_add(self.response_timeout);
        let on = std::sync::atomic::AtomicU64::new(0);
        let once = async || {
            let master = self.master().await?;
            let generation = master.generation;
            on.store(generation, std::sync::atomic::Ordering::Relaxed);
            let reply = call(master).await;
            self.answered(generation, reply)
        };
        let bounded = async {
            match once().await {
                // (forgotten by `answered`: the next master is a new one)
                Err(e) if super::lane::not_sent(&e) => once().await,
                reply => reply,
            }
        };
        match tokio::time::timeout(limit, bounded).await {
            Ok(reply) => reply,
            Err(_) => {
                // (generations start at 1: 0 is none found yet)
                match on.load(std::sync::atomic::Ordering::Relaxed) {
                    0 => {}
                    generation => self.lost(generation),
                }
                Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer from the master Redis Sentinel names within {limit:?} (the connection and response timeouts)"
                    ),
                )
                .into())
            }
        }
    }

    /// Forgets the connection of `generation` (not a newer one).
    fn lost(&self, generation: u64) {
        let mut current = self.switch.current();
        if current.as_ref().is_some_and(|m| m.generation == generation) {
            *current = None;
        }
    }

    /// `reply` from the connection of `generation`, which is forgotten when the
    /// reply says the master is gone: an error, or a server's error among the
    /// replies (a single command's and a pipeline's come as values), such as
    /// `READONLY` from a master demoted while a lane reconnected to it.
    /// A reply on a connection to a master the Sentinels have replaced is
    /// refused: that master throws away what it took once they demote it.
    pub fn answered<T: Replies>(&self, generation: u64, reply: RedisResult<T>) -> RedisResult<T> {
        if self.switch.deposed(generation) {
            self.lost(generation);
            return Err(replaced());
        }
        let lost = match &reply {
            Err(e) => lost_master(e),
            Ok(values) => values.says(lost_master),
        };
        if lost {
            self.lost(generation);
        }
        reply
    }

    /// Opens no lanes to the masters from now on, and drops the current
    /// master's (a connection for blocking reads, which gain nothing by one).
    pub fn without_lanes(&self) {
        self.lanes
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let mut current = self.switch.current();
        if let Some(m) = current.as_mut() {
            m.lane = None;
        }
    }

    /// The master, checked with a `PING` (for a connection that outlives the
    /// commands, such as a subscription).
    pub async fn checked_master(&self) -> RedisResult<Master> {
        let mut master = self.master().await?;
        if let Err(e) = redis::cmd("PING").query_async::<()>(&mut master.con).await {
            self.lost(master.generation);
            if !lost_master(&e) {
                return Err(e);
            }
            master = self.master().await?;
        }
        Ok(master)
    }
}

/// A generation number above every connection's so far.
fn next_generation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static GENERATION: AtomicU64 = AtomicU64::new(1);
    GENERATION.fetch_add(1, Ordering::Relaxed)
}

/// The error of a call whose master the Sentinels replaced while it was made:
/// it may have run there, and is lost with that master's writes.
fn replaced() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the Sentinels replaced the master during this call: it may have run there, and that master's writes are thrown away",
    ))
}

/// Whether `e` says the connection no longer reaches a master.
fn lost_master(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.kind() == ErrorKind::Server(ServerErrorKind::MasterDown)
        || readonly(e)
}

#[cfg(test)]
mod tests {
    use super::{Replies, lost_master};

    #[test]
    fn a_reply_from_a_demoted_master_says_it_is_lost() {
        let reply = |raw: &[u8]| redis::parse_redis_value(raw).unwrap();
        let readonly = reply(b"-READONLY You can't write against a read only replica.\r\n");
        // a script's write on a replica, as Redis 6.2 reports it
        let wrapped = reply(
            b"-ERR Error running script: @user_script:1: READONLY You can't write against a read only replica.\r\n",
        );
        let other = reply(b"-ERR wrong number of arguments for 'get' command\r\n");
        let ok = reply(b"+OK\r\n");
        assert!(readonly.says(lost_master));
        assert!(wrapped.says(lost_master));
        assert!(reply(b"-MASTERDOWN Link with MASTER is down\r\n").says(lost_master));
        assert!(!other.says(lost_master));
        assert!(!ok.says(lost_master));
        assert!(vec![ok.clone(), readonly].says(lost_master));
        assert!(!vec![ok, other].says(lost_master));
    }
}
