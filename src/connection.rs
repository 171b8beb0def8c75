//! Opening Redis connections from URLs.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::{Error, Result};

/// How to reach Redis: the URL and the timeouts that bound every call.
///
/// Any URL the `redis` crate accepts: `redis://host:port/db`,
/// `redis://user:password@host:port`, `unix:///path`, and `rediss://` (TLS) when
/// redjob's `tls` feature is on.
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
/// ```
#[derive(Debug, Clone)]
pub struct RedisConfig {
    /// The Redis URL. Defaults to `redis://127.0.0.1:6379`.
    pub url: String,
    /// How long to wait for a connection. Defaults to 5 s.
    pub connection_timeout: Duration,
    /// How long to wait for a reply before a call fails. Defaults to 5 s.
    pub response_timeout: Duration,
    /// PEM root certificate(s) to trust for `rediss://` instead of the system's
    /// (a private CA). Needs the `tls` feature. Defaults to `None`.
    pub tls_root_cert: Option<Vec<u8>>,
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
        }
    }

    /// Opens a managed connection that reconnects by itself after failures.
    pub async fn connect(&self) -> Result<ConnectionManager> {
        Ok(self.open().await?.1)
    }

    /// The client (for extra connections such as pub/sub) and a managed connection.
    pub(crate) async fn open(&self) -> Result<(redis::Client, ConnectionManager)> {
        let client = self.client()?;
        let con = ConnectionManager::new_with_config(client.clone(), self.manager_config())
            .await
            // name the URL, without its password
            .map_err(|error| Error::Connect {
                url: redacted(&self.url),
                error,
            })?;
        Ok((client, con))
    }

    /// Like [`open`](Self::open), connecting on first use instead of now: for a
    /// worker that may start before Redis does.
    pub(crate) fn open_lazy(&self) -> Result<(redis::Client, ConnectionManager)> {
        let client = self.client()?;
        let con = ConnectionManager::new_lazy_with_config(client.clone(), self.manager_config())?;
        Ok((client, con))
    }

    fn client(&self) -> Result<redis::Client> {
        #[cfg(feature = "tls")]
        {
            // rustls needs one process-wide crypto provider; another may be installed already.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        if let Some(e) = tls_needed(&self.url, cfg!(feature = "tls")) {
            return Err(e);
        }
        let invalid = |e: redis::RedisError| Error::InvalidValue {
            what: "redis url",
            reason: format!("{}: {e}", redacted(&self.url)),
        };
        Ok(match &self.tls_root_cert {
            None => redis::Client::open(self.url.as_str()).map_err(invalid)?,
            #[cfg(feature = "tls")]
            Some(pem) => redis::Client::build_with_tls(
                self.url.as_str(),
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

    fn manager_config(&self) -> ConnectionManagerConfig {
        // reconnects with exponential backoff (100 ms doubling up to 5 s) on each
        // request that finds the connection broken
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connection_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_min_delay(std::time::Duration::from_millis(100))
            .set_max_delay(std::time::Duration::from_secs(5))
            .set_number_of_retries(3)
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

/// `url` with its password (if any) replaced by `***`.
pub(crate) fn redacted(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.into();
    };
    let rest = &url[start..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
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
