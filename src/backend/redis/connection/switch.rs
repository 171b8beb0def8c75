//! What a Sentinel link knows of failovers as they happen: the Sentinels
//! announce each new master on their `+switch-master` channel, and a link
//! deposes its connections to the old one at once. A master that stalled
//! while the Sentinels replaced it takes itself for the master when it wakes,
//! until they demote it seconds later, and throws away what it took
//! meanwhile; without this, calls answered by it would be acknowledged.

use std::sync::Mutex;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, RedisError, RedisResult};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Subscription;
use super::sentinel::Master;

/// The channel on which Sentinels announce a new master:
/// `<name> <old ip> <old port> <new ip> <new port>`.
const CHANNEL: &str = "+switch-master";
/// How often the watcher asks a Sentinel which master it names (an
/// announcement missed while it was not subscribed), and pings its
/// subscription (a half-open connection reports nothing). A master it names
/// that is not the link's current one deposes that one only when it does not
/// answer `ROLE` as a master.
const CHECK_EVERY: Duration = Duration::from_secs(15);
const MIN_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// A link's current master and the generations the Sentinels have replaced.
pub(super) struct Switch {
    pub current: Mutex<Option<Master>>,
    /// Connections of generations below this one reach a master the Sentinels
    /// have replaced: their replies are not taken.
    floor: watch::Sender<u64>,
}

impl Switch {
    pub fn new() -> Self {
        Switch {
            current: Mutex::new(None),
            floor: watch::Sender::new(0),
        }
    }

    pub fn current(&self) -> std::sync::MutexGuard<'_, Option<Master>> {
        // an Option cannot be left half-changed
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a connection of `generation` reaches a replaced master.
    pub fn deposed(&self, generation: u64) -> bool {
        generation < *self.floor.borrow()
    }

    /// Told when a master is replaced (the value: the lowest generation not
    /// replaced).
    pub fn replaced(&self) -> watch::Receiver<u64> {
        self.floor.subscribe()
    }

    /// The client of the current master when it is not `host:port`.
    fn elsewhere(&self, host: &str, port: u16) -> Option<redis::Client> {
        self.current()
            .as_ref()
            .filter(|m| !reaches(m.client.get_connection_info(), host, port))
            .map(|m| m.client.clone())
    }

    /// The Sentinels name `host:port` as the master. `announced`: they said so
    /// on their channel just now, so a lookup under way may have found the old
    /// one; else (their answer to a question) only a connection to another
    /// address is deposed.
    fn named(&self, host: &str, port: u16, announced: bool, next: u64) {
        let mut current = self.current();
        let replaced = match current.as_ref() {
            Some(m) => !reaches(m.client.get_connection_info(), host, port),
            None => announced,
        };
        if replaced {
            if let Some(m) = current.as_ref() {
                tracing::warn!(master = %format!("{host}:{port}"), generation = m.generation, "the Sentinels replaced the master: calls in flight to the old one are not acknowledged");
            }
            *current = None;
            self.floor.send_replace(next);
        }
    }
}

/// Whether the master `client` reaches says it is one (a Sentinel that names
/// another may lag behind a failover; one that stalled or was demoted does
/// not answer so).
async fn still_master(client: &redis::Client, timeout: Duration) -> bool {
    let asked = async {
        let mut con = client.get_multiplexed_async_connection().await?;
        redis::cmd("ROLE")
            .query_async::<Vec<redis::Value>>(&mut con)
            .await
    };
    matches!(
        tokio::time::timeout(timeout, asked).await,
        Ok(Ok(role)) if role.first() == Some(&redis::Value::BulkString(b"master".to_vec()))
    )
}

/// Whether `info` connects to `host:port`.
fn reaches(info: &ConnectionInfo, host: &str, port: u16) -> bool {
    match info.addr() {
        ConnectionAddr::Tcp(h, p)
        | ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => h == host && *p == port,
        _ => false,
    }
}

/// `<name> <old ip> <old port> <new ip> <new port>`: the new master, when the
/// announcement is of `service`.
fn announced<'a>(payload: &'a str, service: &str) -> Option<(&'a str, u16)> {
    let mut parts = payload.split(' ');
    if parts.next()? != service {
        return None;
    }
    let (_, _, host, port) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    Some((host, port.parse().ok()?))
}

/// Follows every Sentinel's announcements for `service` (the first to tell of
/// a new master deposes the old one) until `stop`. `next` gives a generation
/// number above every connection's so far.
pub(super) async fn watch(
    switch: std::sync::Weak<Switch>,
    sentinels: Vec<ConnectionInfo>,
    service: String,
    timeout: Duration,
    next: fn() -> u64,
    stop: CancellationToken,
) {
    let each = sentinels.iter().map(|info| async {
        let mut retry = MIN_RETRY;
        loop {
            let followed = follow(&switch, info, &service, timeout, next, &mut retry).await;
            if switch.upgrade().is_none() {
                return;
            }
            match followed {
                // an ACL user without these commands: failovers are found
                // through failed calls only
                // (no retry: the same refusal every time; the task stays, so
                // that it is not started again)
                Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => {
                    tracing::warn!(error = %e, "cannot follow this Sentinel's announcements of a new master (its user needs +subscribe, +ping, +sentinel|get-master-addr-by-name and the channel &+switch-master)");
                    return std::future::pending().await;
                }
                Err(e) => tracing::debug!(error = %e, "following a Sentinel's announcements failed; trying again"),
                Ok(()) => {}
            }
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(MAX_RETRY);
        }
    });
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = futures::future::join_all(each) => {}
    }
}

/// One Sentinel's announcements, until its connection fails.
async fn follow(
    switch: &std::sync::Weak<Switch>,
    info: &ConnectionInfo,
    service: &str,
    timeout: Duration,
    next: fn() -> u64,
    retry: &mut Duration,
) -> RedisResult<()> {
    let timed = |e: tokio::time::error::Elapsed| {
        RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, e))
    };
    let client = redis::Client::open(info.clone())?;
    let mut sub = tokio::time::timeout(timeout, Subscription::open(&client))
        .await
        .map_err(timed)??;
    tokio::time::timeout(timeout, sub.subscribe(CHANNEL))
        .await
        .map_err(timed)??;
    let mut con = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(timed)??;
    let mut check = tokio::time::interval(CHECK_EVERY);
    loop {
        tokio::select! {
            msg = sub.next() => {
                let msg = msg?;
                let payload = String::from_utf8_lossy(msg.get_payload_bytes());
                if let Some((host, port)) = announced(&payload, service) {
                    let Some(switch) = switch.upgrade() else { return Ok(()) };
                    switch.named(host, port, true, next());
                }
            }
            // at once, then every CHECK_EVERY: a switch announced while no
            // Sentinel was followed, and a subscription gone quiet
            _ = check.tick() => {
                let mut ask = redis::cmd("SENTINEL");
                ask.arg("get-master-addr-by-name").arg(service);
                let asked = ask.query_async::<Option<(String, u16)>>(&mut con);
                let addr = tokio::time::timeout(timeout, asked).await.map_err(timed)??;
                tokio::time::timeout(timeout, sub.ping()).await.map_err(timed)??;
                let Some(switch) = switch.upgrade() else { return Ok(()) };
                if let Some((host, port)) = addr
                    && let Some(client) = switch.elsewhere(&host, port)
                    && !still_master(&client, timeout).await
                {
                    switch.named(&host, port, false, next());
                }
                *retry = MIN_RETRY;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::announced;

    #[test]
    fn an_announcement_names_the_new_master_of_its_service() {
        let said = "jobs 127.0.0.1 6379 10.0.0.2 6380";
        assert_eq!(announced(said, "jobs"), Some(("10.0.0.2", 6380)));
        assert_eq!(announced(said, "other"), None);
        assert_eq!(announced("jobs 127.0.0.1 6379", "jobs"), None);
        assert_eq!(announced("jobs a 1 b port", "jobs"), None);
    }
}
