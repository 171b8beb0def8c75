//! The worker's entry in the live-worker registry: written when it starts,
//! refreshed at the heartbeat's pace (a third of the lease), removed when it
//! stops. One backend call per beat, whatever the number of jobs: a full beat
//! when what it says changed (jobs started or ended, a schedule ticked) and at
//! least every [`FULL_BEAT_EVERY`]; else a touch that only moves its end on
//! (one command on Redis instead of a script's eight).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::leases::Leases;
use super::periodic::Ticker;
use crate::contract::admin::Beat;
use crate::contract::backend::Backend;

/// How many beats an entry outlives its last one.
const BEATS_TO_EXPIRE: u32 = 3;

/// A worker beats in full at least this often, even when nothing changed: the
/// registry's keys outlive their last entry by five minutes (workers.lua), and
/// full beats also drop the entries of workers that died.
pub(crate) const FULL_BEAT_EVERY: Duration = Duration::from_secs(120);

/// What a worker tells the registry.
pub(crate) struct Registry {
    pub id: String,
    pub host: String,
    pub queues: Vec<String>,
    pub concurrency: usize,
    pub leases: Vec<(Arc<str>, Arc<Leases>)>,
    pub tickers: Vec<Arc<Ticker>>,
    pub every: Duration,
    pub started: Instant,
}

impl Registry {
    fn ttl(&self) -> Duration {
        self.every * BEATS_TO_EXPIRE
    }

    fn beat(&self) -> Beat {
        let now = Instant::now();
        Beat {
            id: self.id.clone(),
            host: self.host.clone(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            queues: self.queues.clone(),
            concurrency: self.concurrency,
            ttl_ms: self.ttl().as_millis() as u64,
            up_ms: now.saturating_duration_since(self.started).as_millis() as u64,
            at_ms: None,
            running: self
                .leases
                .iter()
                .flat_map(|(q, l)| l.running(q, now))
                .collect(),
            schedules: self.tickers.iter().map(|t| t.listed()).collect(),
        }
    }

    /// Beats until `stop`.
    pub async fn run<B: Backend>(self: Arc<Self>, backend: B, stop: CancellationToken) {
        let mut failing = false;
        // the shape of the last full beat, when it, and every touch since, took
        let mut last: Option<(Vec<u8>, Instant)> = None;
        let mut beaten = Instant::now();
        loop {
            let beat = self.beat();
            let now = Instant::now();
            let shape = beat.shape().ok();
            let touch = match (&last, &shape) {
                (Some((was, full)), Some(is)) => {
                    was == is && now.saturating_duration_since(*full) < FULL_BEAT_EVERY
                }
                _ => false,
            };
            let (r, full) = if touch {
                let since = now.saturating_duration_since(beaten);
                match backend.touch(&self.id, self.ttl(), since).await {
                    Ok(true) => (Ok(()), false),
                    // the entry is gone (a late beat, or a registry that
                    // expired): write it again at once
                    Ok(false) => (self.full(&backend, &beat).await, true),
                    Err(_) => (self.full(&backend, &beat).await, true),
                }
            } else {
                (self.full(&backend, &beat).await, true)
            };
            match r {
                Ok(()) => {
                    beaten = now;
                    if full {
                        last = shape.map(|s| (s, now));
                    }
                }
                // unknown whether it took: beat in full next time
                Err(_) => last = None,
            }
            match r {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(worker = %self.id, "registered again in the live-worker registry");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(worker = %self.id, error = %e, "cannot update the live-worker registry; retrying at each heartbeat");
                }
                Err(_) => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(self.every) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Writes `beat` whole.
    async fn full<B: Backend>(&self, backend: &B, beat: &Beat) -> crate::Result<()> {
        backend.beat(&self.id, &beat.encode()?, self.ttl()).await
    }

    /// Removes the entry (a stopped worker is gone from the list at once).
    pub async fn leave<B: Backend>(&self, backend: &B) {
        let r = tokio::time::timeout(
            Duration::from_secs(2),
            backend.beat(&self.id, b"", self.ttl()),
        )
        .await;
        if !matches!(r, Ok(Ok(()))) {
            tracing::debug!(worker = %self.id, "could not leave the live-worker registry; the entry runs out by itself");
        }
    }
}
