//! `redis+sentinel://` URLs: the Sentinels, the master's name and the
//! credentials, and the link to the master they name.

use redis::RedisError;

use super::Link;
use crate::backend::redis::connection::{RedisConfig, redacted};

/// The parts of a `redis+sentinel://` URL, as URLs the `redis` crate parses
/// (so it decodes the credentials).
#[derive(Debug, PartialEq)]
pub(crate) struct SentinelUrl {
    /// One `redis://` (or `rediss://`) URL per Sentinel, with the Sentinels'
    /// credentials.
    pub sentinels: Vec<String>,
    /// The master's name in Sentinel (`sentinel monitor <name> …`).
    pub service: String,
    /// A URL holding the master's credentials and database.
    pub master: String,
    /// Whether the master is reached over TLS (`rediss+sentinel://`).
    pub tls: bool,
}

/// The Sentinels and master name of a `redis+sentinel://` or
/// `rediss+sentinel://` URL:
/// `redis+sentinel://[user:password@]host:port,host:port/<master name>[/db][?sentinel_username=u&sentinel_password=p]`.
/// `None` for any other URL, `Some(Err(reason))` for one without a Sentinel or a
/// master name. A Sentinel without a port is on 26379.
pub(crate) fn parse(url: &str) -> Option<Result<SentinelUrl, String>> {
    let (scheme, rest) = url.split_once("://")?;
    let (scheme, tls) = match scheme.to_ascii_lowercase().as_str() {
        "redis+sentinel" => ("redis", false),
        "rediss+sentinel" => ("rediss", true),
        _ => return None,
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let mut path = path.split('/').filter(|p| !p.is_empty());
    let Some(service) = path.next() else {
        return Some(Err(
            "name the master Sentinel monitors: redis+sentinel://host:26379,host:26379/mymaster"
                .into(),
        ));
    };
    let db = path.next().unwrap_or("0");
    if db.parse::<u32>().is_err() || path.next().is_some() {
        return Some(Err(format!(
            "after the master's name comes only a database number, not {db:?}"
        )));
    }
    let mut sentinel_user = String::new();
    let mut sentinel_password = String::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_username", v)) => sentinel_user = v.into(),
            Some(("sentinel_password", v)) => sentinel_password = v.into(),
            _ => {
                // the option's name only: a misspelt password option holds a password
                let name = pair.split('=').next().unwrap_or_default();
                return Some(Err(format!(
                    "unknown option {name:?} (known: sentinel_username, sentinel_password)"
                )));
            }
        }
    }
    let sentinel_auth = match (sentinel_user.is_empty(), sentinel_password.is_empty()) {
        (true, true) => String::new(),
        _ => format!("{sentinel_user}:{sentinel_password}@"),
    };
    let hosts: Vec<&str> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    let Some(first) = hosts.first() else {
        return Some(Err(
            "name at least one Sentinel: redis+sentinel://host:26379,host:26379/mymaster".into(),
        ));
    };
    let with_port = |h: &str| {
        // `[::1]` and `host` have no port; `[::1]:1` and `host:1` have one
        let bare = h.ends_with(']') || !h.contains(':');
        if bare {
            format!("{h}:26379")
        } else {
            h.to_string()
        }
    };
    Some(Ok(SentinelUrl {
        sentinels: hosts
            .iter()
            .map(|h| format!("{scheme}://{sentinel_auth}{}", with_port(h)))
            .collect(),
        service: service.to_string(),
        master: format!("{scheme}://{user}{}/{db}", with_port(first)),
        tls,
    }))
}

impl SentinelUrl {
    /// The link to the master, with `cfg`'s timeouts and TLS root certificate.
    pub fn link(&self, cfg: &RedisConfig) -> crate::Result<Link> {
        let invalid = |e: RedisError| crate::Error::InvalidValue {
            what: "redis url",
            reason: format!("{}: {e}", redacted(&cfg.url)),
        };
        let master = cfg.client(&self.master)?;
        let master = master.get_connection_info().redis_settings();
        let sentinels = self
            .sentinels
            .iter()
            .map(|u| Ok(cfg.client(u)?.get_connection_info().clone()))
            .collect::<crate::Result<Vec<_>>>()?;
        let mut builder = redis::sentinel::SentinelClientBuilder::new(
            sentinels.iter().map(|s| s.addr().clone()),
            &self.service,
            redis::sentinel::SentinelServerType::Master,
        )
        .map_err(invalid)?
        .set_client_to_redis_db(master.db());
        if let Some(user) = master.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = master.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        let sentinel = sentinels[0].redis_settings();
        if let Some(user) = sentinel.username() {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = sentinel.password() {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if self.tls {
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            #[cfg(feature = "tls")]
            if let Some(pem) = &cfg.tls_root_cert {
                builder = builder.set_client_to_redis_certificates(redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                });
            }
        }
        Ok(Link::new(
            builder.build().map_err(invalid)?,
            master.db(),
            cfg.connection_timeout,
            cfg.response_timeout,
        )
        .announced_by(sentinels, &self.service))
    }
}

#[cfg(test)]
mod tests {
    use super::{SentinelUrl, parse};

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_master() {
        assert_eq!(parse("redis://127.0.0.1:6379"), None);
        assert_eq!(parse("redis+cluster://h:1"), None);
        assert_eq!(
            parse("redis+sentinel://10.0.0.1:26379,10.0.0.2/mymaster"),
            Some(Ok(SentinelUrl {
                sentinels: vec![
                    "redis://10.0.0.1:26379".into(),
                    "redis://10.0.0.2:26379".into()
                ],
                service: "mymaster".into(),
                master: "redis://10.0.0.1:26379/0".into(),
                tls: false,
            }))
        );
        assert_eq!(
            parse(
                "rediss+sentinel://app:p%40ss@[::1]:5000,[::2]/jobs/3?sentinel_username=s&sentinel_password=pw"
            ),
            Some(Ok(SentinelUrl {
                sentinels: vec![
                    "rediss://s:pw@[::1]:5000".into(),
                    "rediss://s:pw@[::2]:26379".into()
                ],
                service: "jobs".into(),
                master: "rediss://app:p%40ss@[::1]:5000/3".into(),
                tls: true,
            }))
        );
        let no_name = parse("redis+sentinel://h:1").unwrap().unwrap_err();
        assert!(no_name.contains("name the master"), "{no_name}");
        let no_host = parse("redis+sentinel:///m").unwrap().unwrap_err();
        assert!(no_host.contains("at least one Sentinel"), "{no_host}");
        let bad_db = parse("redis+sentinel://h/m/x").unwrap().unwrap_err();
        assert!(bad_db.contains("database number"), "{bad_db}");
        let option = parse("redis+sentinel://h/m?timeout=3")
            .unwrap()
            .unwrap_err();
        assert!(option.contains("unknown option"), "{option}");
    }
}
