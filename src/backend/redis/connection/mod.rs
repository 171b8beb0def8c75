//! Redis connections: one server, a Redis Cluster, or the master Sentinel
//! names (public at `redjob::connection`).

mod cluster;
mod conn;
mod lane;
mod managed;
mod refusals;
mod resp;
mod sentinel;
mod socket;
mod subscription;
mod switch;

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

pub use conn::Connection;
pub(crate) use conn::Target;
pub(crate) use refusals::name as command_name;
pub(crate) use subscription::Subscription;

use crate::{Error, Result};

/// How to reach Redis: the URL and the timeouts that bound every call.
///
/// Any URL the `redis` crate accepts: `redis://host:port/db`,
/// `redis://user:password@host:port`, `unix:///path`, and `rediss://` (TLS) when
/// redjob's `tls` feature is on. A Redis Cluster is
/// `redis+cluster://[user:password@]host:port,host:port,…` (or
/// `rediss+cluster://`): any of its nodes, which redjob asks for the rest. A
/// master managed by Redis Sentinel is
/// `redis+sentinel://[user:password@]host:port,host:port/<master name>[/db]`
/// (or `rediss+sentinel://`): the Sentinels (port 26379 when left out), which
/// redjob asks for the master, and asks again after a failover. Credentials in
/// front are the master's; Sentinels that want their own take
/// `?sentinel_username=…&sentinel_password=…`.
///
/// ```
/// use std::time::Duration;
/// use redjob::connection::RedisConfig;
///
/// let cfg = RedisConfig {
///     response_timeout: Duration::from_secs(2),
///     ..RedisConfig::from_url("redis://app:secret@127.0.0.1:6380/0")
/// };
/// assert_eq!(cfg.connection_timeout, Duration::from_secs(5));
/// // printed, it hides the password (as errors do)
/// assert!(format!("{cfg:?}").contains("redis://app:***@127.0.0.1:6380/0"));
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    /// The Redis URL. Defaults to `redis://127.0.0.1:6379`. `{:?}` shows it
    /// with its password replaced by `***`.
    pub url: String,
    /// How long to wait for a connection. Defaults to 5 s.
    pub connection_timeout: Duration,
    /// How long to wait for a reply before a call fails. Defaults to 5 s.
    pub response_timeout: Duration,
    /// PEM root certificate(s) to trust for `rediss://` instead of the system's
    /// (a private CA). Needs the `tls` feature. Defaults to `None`.
    pub tls_root_cert: Option<Vec<u8>>,
    /// Make each enqueue wait until this many replicas have it (`WAIT`), so that
    /// a failover cannot lose it. Defaults to `None`: an enqueue returns once the
    /// master has the job, and Redis replicates it a moment later.
    pub wait_for_replicas: Option<WaitForReplicas>,
}

/// An enqueue's durability: after writing, wait until `replicas` replicas
/// acknowledge the write (Redis `WAIT`), at most `timeout`.
///
/// Redis replicates asynchronously: a master that dies right after an enqueue
/// returned may take the job with it when its replica takes over. With this, an
/// enqueue returns only once the job is on `replicas` replicas as well, or fails
/// with [`Error::NotReplicated`] (the job *is* on the master then; a batch
/// refused part way, [`Error::PartlySent`], says it in its `not_replicated`,
/// which tells whether the round trips that stored its jobs were
/// confirmed). It costs a
/// round trip from the master to its replicas per enqueue call; a batch waits
/// once. `WAIT` holds the connection it runs on until the replicas answer, so
/// the client's enqueues get a connection of their own, and wait behind each
/// other (when the replicas are down, each one its `timeout`). Periodic ticks
/// and topic publishes do not wait.
///
/// ```
/// use std::time::Duration;
/// use redjob::connection::{RedisConfig, WaitForReplicas};
///
/// let cfg = RedisConfig {
///     wait_for_replicas: Some(WaitForReplicas { replicas: 1, timeout: Duration::from_millis(500) }),
///     ..RedisConfig::from_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")
/// };
/// # let _ = cfg;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitForReplicas {
    /// How many replicas must have the write.
    pub replicas: u32,
    /// How long to wait for them; keep it below the response timeout.
    pub timeout: Duration,
}

/// The URL with its password (and a Sentinel's, or a socket's `pass`)
/// replaced by `***`, so that a config logged or in a panic's message does
/// not show it.
impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let RedisConfig {
            url,
            connection_timeout,
            response_timeout,
            tls_root_cert,
            wait_for_replicas,
        } = self;
        f.debug_struct("RedisConfig")
            .field("url", &redacted(url))
            .field("connection_timeout", connection_timeout)
            .field("response_timeout", response_timeout)
            .field("tls_root_cert", tls_root_cert)
            .field("wait_for_replicas", wait_for_replicas)
            .finish()
    }
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig::from_url("redis://127.0.0.1:6379")
    }
}

impl RedisConfig {
    /// The default timeouts with this URL.
    pub fn from_url(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            connection_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            tls_root_cert: None,
            wait_for_replicas: None,
        }
    }

    /// Opens a connection that reconnects by itself after failures: a managed
    /// connection to one server, or a Cluster connection.
    pub async fn connect(&self) -> Result<Connection> {
        Ok(self.open().await?.1)
    }

    /// The client (for extra connections such as pub/sub) and a connection.
    pub(crate) async fn open(&self) -> Result<(Target, Connection)> {
        // name the URL, without its password
        let failed = |error| Error::Connect {
            url: redacted(&self.url),
            error,
        };
        let target = self.target()?;
        let con = match &target {
            Target::Server(client) => Connection::managed(
                // the manager tries again after a failure (a refused
                // connection while Redis starts), within the connection's
                // time: a stalled server's unanswered AUTH was tried 4 times
                within(
                    self.connection_timeout,
                    ConnectionManager::new_with_config(client.clone(), self.manager_config()),
                )
                .await
                .map_err(failed)?,
                self.lane(client),
                self.reopen(client),
            ),
            Target::Cluster { client, seeds, .. } => Connection::cluster(
                cluster::Cluster::connect(client).await.map_err(failed)?,
                Some(self.ask_via(seeds)),
            ),
            Target::Sentinel { link, .. } => {
                // bounded as a server's connection is: a lookup that met an
                // announcement of a new master looks again (see `Link::master`)
                within(self.connection_timeout, link.master())
                    .await
                    .map_err(failed)?;
                Connection::sentinel(link.clone())
            }
        };
        Ok((target, con))
    }

    /// Like [`open`](Self::open), connecting on first use instead of now: for a
    /// worker that may start before Redis does.
    pub(crate) fn open_lazy(&self) -> Result<(Target, Connection)> {
        let target = self.target()?;
        let con = match &target {
            Target::Server(client) => Connection::managed(
                ConnectionManager::new_lazy_with_config(client.clone(), self.manager_config())?,
                self.lane(client),
                self.reopen(client),
            ),
            Target::Cluster { client, seeds, .. } => Connection::cluster(
                cluster::Cluster::lazy(
                    client,
                    self.connection_timeout
                        .saturating_add(self.response_timeout),
                ),
                Some(self.ask_via(seeds)),
            ),
            Target::Sentinel { link, .. } => Connection::sentinel(link.clone()),
        };
        Ok((target, con))
    }

    fn target(&self) -> Result<Target> {
        use crate::contract::queues::validate::MAX_DELAY;
        if let Some(w) = self.wait_for_replicas
            && w.timeout > MAX_DELAY
        {
            return Err(Error::InvalidValue {
                what: "wait_for_replicas",
                reason: format!("its timeout ({:?}) is over {MAX_DELAY:?}", w.timeout),
            });
        }
        if let Some(w) = self.wait_for_replicas
            && w.timeout >= self.response_timeout
        {
            return Err(Error::InvalidValue {
                what: "wait_for_replicas",
                reason: format!(
                    "its timeout ({:?}) must be below the response timeout ({:?}), or every wait that runs out fails as a timeout",
                    w.timeout, self.response_timeout
                ),
            });
        }
        if let Some(parsed) = sentinel::parse(&self.url) {
            let parsed = parsed.map_err(|reason| Error::InvalidValue {
                what: "redis url",
                reason: format!("{}: {reason}", redacted(&self.url)),
            })?;
            return Ok(Target::Sentinel {
                link: std::sync::Arc::new(parsed.link(self)?),
                config: Box::new(self.clone()),
            });
        }
        let Some(seeds) = cluster::seeds(&self.url) else {
            return Ok(Target::Server(self.client(&self.url)?));
        };
        let seeds = seeds.map_err(|reason| Error::InvalidValue {
            what: "redis url",
            reason: format!("{}: {reason}", redacted(&self.url)),
        })?;
        let clients = seeds
            .iter()
            .map(|s| self.client(s))
            .collect::<Result<Vec<_>>>()?;
        #[cfg_attr(not(feature = "tls"), allow(unused_mut))]
        let mut builder = redis::cluster::ClusterClient::builder(
            clients.iter().map(|c| c.get_connection_info().clone()),
        )
        .connection_timeout(self.connection_timeout)
        .response_timeout(self.response_timeout)
        // a call's bound, as a managed connection's (and longer than a
        // node's response timeout, which the node's socket must see to be
        // given up: see cluster.rs)
        .overall_response_timeout(Some(
            self.connection_timeout
                .saturating_add(self.response_timeout),
        ))
        // calls go again only when they ran nothing (see refusals.rs)
        .retries(0);
        #[cfg(feature = "tls")]
        if let Some(pem) = &self.tls_root_cert {
            builder = builder.certs(redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            });
        }
        let client = builder.build().map_err(|e| Error::InvalidValue {
            what: "redis url",
            reason: format!("{}: {e}", redacted(&self.url)),
        })?;
        Ok(Target::Cluster {
            client,
            config: Box::new(self.clone()),
            seeds: clients.into(),
            turn: Default::default(),
        })
    }

    /// How a Cluster connection reaches the node of an `ASK` redirection:
    /// as the first seed, at the node's address.
    fn ask_via(&self, seeds: &[redis::Client]) -> std::sync::Arc<refusals::AskVia> {
        std::sync::Arc::new(refusals::AskVia {
            info: seeds[0].get_connection_info().clone(),
            connection_timeout: self.connection_timeout,
            response_timeout: self.response_timeout,
        })
    }

    fn client(&self, url: &str) -> Result<redis::Client> {
        #[cfg(feature = "tls")]
        {
            // rustls needs one process-wide crypto provider; another may be installed already.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        if let Some(e) = tls_needed(url, cfg!(feature = "tls")) {
            return Err(e);
        }
        let invalid = |e: redis::RedisError| Error::InvalidValue {
            what: "redis url",
            reason: format!("{}: {e}", redacted(url)),
        };
        // no CLIENT SETINFO when connecting: the ACL rules docs/scale-out.md
        // documents grant only what redjob sends, and Redis 7.2 and later (and
        // Valkey) log each refusal of it in their ACL LOG (a Cluster's command
        // connections, which the redis crate makes from the seeds' address and
        // credentials alone, still send it)
        let info = redis::IntoConnectionInfo::into_connection_info(url).map_err(invalid)?;
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(settings);
        Ok(match &self.tls_root_cert {
            None => redis::Client::open(info).map_err(invalid)?,
            #[cfg(feature = "tls")]
            Some(pem) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            )
            .map_err(invalid)?,
            #[cfg(not(feature = "tls"))]
            Some(_) => {
                return Err(Error::InvalidValue {
                    what: "tls_root_cert",
                    reason: TLS_OFF.into(),
                });
            }
        })
    }

    fn lane(&self, client: &redis::Client) -> Option<std::sync::Arc<lane::Lanes>> {
        Some(lane::Lanes::new(
            client,
            self.connection_timeout,
            self.response_timeout,
        ))
    }

    /// What opens a managed connection to `client`'s server and its lanes
    /// again, after a `READONLY` (see [`managed`]).
    fn reopen(&self, client: &redis::Client) -> managed::Reopen {
        managed::Reopen {
            client: client.clone(),
            config: self.manager_config(),
            connection_timeout: self.connection_timeout,
            response_timeout: self.response_timeout,
        }
    }

    fn manager_config(&self) -> ConnectionManagerConfig {
        // reconnects with exponential backoff (100 ms doubling up to 5 s) on each
        // request that finds the connection broken; a call waits for that at
        // most the connection and response timeouts together (see
        // `Managed::bounded`), and the reconnection goes on in the background
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_min_delay(std::time::Duration::from_millis(100))
            .set_max_delay(std::time::Duration::from_secs(5))
            .set_number_of_retries(connect_retries(self.connection_timeout))
    }
}

/// How many times a managed connection tries again to connect after a
/// failed attempt: 3, or as many as its waits between attempts (100 ms
/// doubling, each up to twice that with the jitter) fit in half of `limit`,
/// the connection timeout. An attempt refused at once (a wrong password, a
/// database the server does not have, nothing listening) then fails with
/// its own error within the timeout, rather than as a timeout: at 1 s the
/// fourth attempt came after about 1.2 s, and the first connection failed
/// with "no connection within 1s" whatever the cause.
fn connect_retries(limit: Duration) -> usize {
    (0..=3usize)
        .rev()
        .find(|&n| Duration::from_millis(200 * ((1 << n) - 1)) <= limit / 2)
        .unwrap_or(0)
}

/// `connecting`, failing as a timeout after `limit`.
async fn within<T>(
    limit: Duration,
    connecting: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match tokio::time::timeout(limit, connecting).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no connection within {limit:?}"),
        )
        .into()),
    }
}

const TLS_OFF: &str = "TLS needs redjob's `tls` feature: in Cargo.toml, \
     redjob = { version = \"0.1\", features = [\"tls\"] }";

/// The error for a `rediss://` URL in a build without TLS.
fn tls_needed(url: &str, tls_on: bool) -> Option<Error> {
    let tls_url = url
        .get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"));
    (tls_url && !tls_on).then(|| Error::InvalidValue {
        what: "redis url",
        reason: format!("{}: {TLS_OFF}", redacted(url)),
    })
}

/// `url` with its password (if any) and a `sentinel_password=` option's value
/// replaced by `***`.
pub(crate) fn redacted(url: &str) -> String {
    // (a Unix socket's password is its query's `pass`)
    let url = &hide_option(&hide_option(url, "sentinel_password="), "pass=");
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.into();
    };
    let rest = &url[start..];
    // no host: a Unix socket's path, whose password is an option
    if rest.starts_with('/') {
        return url.into();
    }
    // the user and password end at the last `@` before the query that
    // follows the first `@`: a password with a `/`, `?`, `#` or `@` left
    // unencoded (a URL that does not parse, whose error names it) is hidden
    // whole
    let Some(first) = rest.find('@') else {
        return url.into();
    };
    let end = rest[first..].find('?').map_or(rest.len(), |q| first + q);
    let authority = &rest[..end];
    let Some(at) = authority.rfind('@') else {
        return url.into();
    };
    let Some(colon) = authority[..at].find(':') else {
        return url.into();
    };
    format!(
        "{}{}***{}",
        &url[..start],
        &authority[..=colon],
        &url[start + at..]
    )
}

/// `url` with the value of each `option` (`name=`) in its query hidden.
fn hide_option(url: &str, option: &str) -> String {
    let Some((head, query)) = url.split_once('?') else {
        return url.into();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.strip_prefix(option) {
            Some(_) => format!("{option}***"),
            None => pair.to_string(),
        })
        .collect();
    format!("{head}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden_and_the_rest_kept() {
        assert_eq!(
            redacted("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(
            redacted("redis://app:s3cret@10.0.0.1:6380/2"),
            "redis://app:***@10.0.0.1:6380/2"
        );
        assert_eq!(redacted("rediss://:p@ss@h:1"), "rediss://:***@h:1");
        assert_eq!(redacted("redis://user@h"), "redis://user@h");
        assert_eq!(redacted("unix:///tmp/r.sock"), "unix:///tmp/r.sock");
        assert_eq!(redacted("not a url"), "not a url");
        // a password with a `/` left unencoded: the URL does not parse, and
        // its error names it
        assert_eq!(
            redacted("redis://app:s3cr/et-pw@127.0.0.1:1/0"),
            "redis://app:***@127.0.0.1:1/0"
        );
        assert_eq!(redacted("redis://:pa?ss@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(
            redacted("redis://:pa#s@s@h:6379/0?protocol=resp3"),
            "redis://:***@h:6379/0?protocol=resp3"
        );
        assert_eq!(
            redacted("redis+unix:///run/r.sock?db=1&pass=s3cret&user=u"),
            "redis+unix:///run/r.sock?db=1&pass=***&user=u"
        );
        assert_eq!(
            redacted("redis+unix:///run/app:x@1.sock"),
            "redis+unix:///run/app:x@1.sock"
        );
        assert_eq!(
            redacted("redis+sentinel://u:pw@h1,h2/m?sentinel_username=s&sentinel_password=spw"),
            "redis+sentinel://u:***@h1,h2/m?sentinel_username=s&sentinel_password=***"
        );
    }

    #[test]
    fn the_waits_between_connection_attempts_fit_in_half_the_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(connect_retries(Duration::from_secs(5)), 3);
        assert_eq!(connect_retries(Duration::MAX), 3);
        assert_eq!(connect_retries(ms(1200)), 2);
        assert_eq!(connect_retries(ms(1000)), 1);
        assert_eq!(connect_retries(ms(400)), 1);
        assert_eq!(connect_retries(ms(399)), 0);
        assert_eq!(connect_retries(Duration::ZERO), 0);
    }

    #[test]
    fn rediss_without_the_tls_feature_says_how_to_turn_it_on() {
        let e = tls_needed("rediss://u:pw@h:6380", false)
            .unwrap()
            .to_string();
        assert!(e.contains("redjob's `tls` feature"), "{e}");
        assert!(e.contains(r#"features = ["tls"]"#), "{e}");
        assert!(e.contains("rediss://u:***@h:6380"), "{e}");
        assert!(!e.contains("pw"), "{e}");
        assert!(tls_needed("rediss://h", true).is_none());
        assert!(tls_needed("redis://h", false).is_none());
    }
}
