//! The worker's entry in the live-worker registry: written when it starts,
//! refreshed at the heartbeat's pace (a third of the lease), removed when it
//! stops. One backend call per beat, whatever the number of jobs: a full beat
//! when what it says changed (jobs started or ended, a schedule ticked) and at
//! least every [`FULL_BEAT_EVERY`]; else a touch that only moves its end on
//! (one command on Redis instead of a script's eight). A touch reads nothing:
//! a notice (a control set on the worker, a change of the queues' settings)
//! and every (re)connection of the listener bring a full beat, which reads
//! the control and the settings' version, and while the listener is not
//! connected every beat is a full one. A beat lists the jobs that took a
//! running slot (each since then), counts those leased waiting for one
//! (prefetched), and lists the topic events running (see
//! `subscriber::RunningEvents`). A run (a job's or an event's) that starts or
//! ends, or a fetch that leases jobs, brings the next beat forward, to [`SOON`] after it and at least
//! [`MIN_GAP`] after the last beat: the list of running jobs trails by less
//! than a second, at a cost of at most two beats a second while runs come and
//! go, however many there are (at a few thousand jobs a second, nothing per
//! job; at one job a second, two beats a job).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::control::Controls;
use super::leases::Leases;
use super::periodic::Ticker;
use crate::contract::admin::{Beat, BeatReply, JobTypeInfo};
use crate::contract::backend::Backend;

/// How many beats an entry outlives its last one.
const BEATS_TO_EXPIRE: u32 = 3;

/// A worker beats in full at least this often, even when nothing changed: the
/// registry's keys outlive their last entry by five minutes (workers.lua), and
/// full beats also drop the entries of workers that died.
pub(crate) const FULL_BEAT_EVERY: Duration = Duration::from_secs(120);

/// How long a beat brought forward by a run waits for more changes to carry.
pub(crate) const SOON: Duration = Duration::from_millis(100);

/// The least time between two beats brought forward.
pub(crate) const MIN_GAP: Duration = Duration::from_millis(500);

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
    /// Told when a run starts or ends (see [`Leases::watched`]).
    pub changed: Arc<super::leases::Changes>,
    /// The topic events it runs.
    pub events: Arc<super::subscriber::RunningEvents>,
    /// What it serves, by digest (see `Backend::serve`).
    pub serves: Option<(String, Vec<u8>)>,
    /// The controls its beats read, and follow.
    pub controls: Arc<Controls>,
}

impl Registry {
    fn ttl(&self) -> Duration {
        self.every * BEATS_TO_EXPIRE
    }

    fn beat(&self) -> Beat {
        let now = Instant::now();
        // the jobs that took a running slot, and those leased that wait for one
        let mut running = Vec::new();
        let prefetched = self
            .leases
            .iter()
            .map(|(q, l)| l.running(q, now, &mut running))
            .sum();
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
            running,
            prefetched,
            events: self.events.listed(now.into_std()),
            // each schedule is in what it serves, its next tick stored once
            // it ticked: the beat names those that have not, with their next
            // tick alone
            schedules: self
                .tickers
                .iter()
                .filter(|t| t.unticked() || self.serves.is_none())
                .map(|t| match &self.serves {
                    Some(_) => t.next_only(),
                    None => t.listed(),
                })
                .collect(),
            serves: self.serves.as_ref().map(|(d, _)| d.clone()),
            quiet: self.controls.is_quiet(),
        }
    }

    /// Beats until `stop`.
    pub async fn run<B: Backend>(self: Arc<Self>, backend: B, stop: CancellationToken) {
        let mut failing = false;
        // the shape of the last full beat, when it, and every touch since, took
        let mut last: Option<(Vec<u8>, Instant)> = None;
        let mut beaten = Instant::now();
        // the last beat tried, taken or not: beats brought forward keep their
        // gap from it, also while the backend fails
        let mut tried;
        // what it serves: written with the first full beat, then every
        // FULL_BEAT_EVERY (the entry outlives the registry's last beat by
        // five minutes, as the beats do)
        let mut served: Option<Instant> = None;
        // a notice came (a control set on the worker, the queues' settings
        // changed, notices lost): a touch reads neither, a full beat does
        let mut read = false;
        loop {
            // a run that starts or ends from here on brings the next beat
            self.changed.look();
            let beat = self.beat();
            let now = Instant::now();
            tried = now;
            let shape = beat.shape().ok();
            // while the listener is not connected, notices go unheard: every
            // beat is a full one, which reads what they would have said
            let listening = self.controls.listening.load(Ordering::Relaxed);
            let touch = !std::mem::take(&mut read)
                && listening
                && match (&last, &shape) {
                    (Some((was, full)), Some(is)) => {
                        was == is && now.saturating_duration_since(*full) < FULL_BEAT_EVERY
                    }
                    _ => false,
                };
            let serve =
                served.is_none_or(|at| now.saturating_duration_since(at) >= FULL_BEAT_EVERY);
            let (r, full) = if touch {
                let since = now.saturating_duration_since(beaten);
                match backend.touch(&self.id, self.ttl(), since).await {
                    Ok(true) => (Ok(None), false),
                    // the entry is gone (a late beat, or a registry that
                    // expired): write it again at once, with what it serves
                    Ok(false) | Err(_) => (self.full(&backend, &beat, true).await.map(Some), true),
                }
            } else {
                (self.full(&backend, &beat, serve).await.map(Some), true)
            };
            // the control read with it: a change the worker follows shows in
            // a beat at once
            let followed = match &r {
                Ok(None) | Err(_) => false,
                Ok(Some(reply)) => {
                    // the queues' settings changed: the settings task reads
                    // them again
                    self.controls.settings.send_if_modified(|v| {
                        let changed = *v != reply.settings;
                        *v = reply.settings;
                        changed
                    });
                    self.controls.follow(&self.id, reply.control.as_ref())
                }
            };
            let r = r.map(drop);
            if full && r.is_ok() && (serve || touch) {
                served = Some(now);
            }
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
            if followed {
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.every) => {}
                // a control set on this worker, or the settings changed:
                // read them now
                _ = self.controls.poke.notified() => read = true,
                _ = self.changed.notified() => {
                    // a run started or ended: beat soon, carrying what else
                    // changes meanwhile, and not too often
                    let at = (Instant::now() + SOON).max(tried + MIN_GAP);
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        // a notice meanwhile: beat in full now
                        _ = self.controls.poke.notified() => read = true,
                        _ = stop.cancelled() => return,
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Writes `beat` whole, and what the worker serves when `serve`; the
    /// control set on the worker.
    async fn full<B: Backend>(
        &self,
        backend: &B,
        beat: &Beat,
        serve: bool,
    ) -> crate::Result<BeatReply> {
        if let (true, Some((digest, json))) = (serve, &self.serves) {
            backend.serve(digest, json).await?;
        }
        backend.beat(&self.id, &beat.encode()?, self.ttl()).await
    }

    /// Removes the entry (a stopped worker is gone from the list at once).
    pub async fn leave<B: Backend>(&self, backend: &B) {
        let r = tokio::time::timeout(
            Duration::from_secs(2),
            backend.beat(&self.id, b"", self.ttl()),
        )
        .await;
        if !matches!(r, Ok(Ok(_))) {
            tracing::debug!(worker = %self.id, "could not leave the live-worker registry; the entry runs out by itself");
        }
    }
}

/// The registry's entry of a job type declared with `options`.
pub(crate) fn job_type(name: &str, o: &crate::job::JobOptions) -> JobTypeInfo {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    JobTypeInfo {
        name: name.to_string(),
        queue: o.queue.to_string(),
        priority: o.priority,
        max_attempts: o.max_attempts,
        timeout_ms: ms(o.timeout),
        backoff_ms: ms(o.backoff),
        unique: o
            .unique
            .or(o.unique_for.map(|_| crate::queue::OnDuplicate::Keep))
            .map(|p| p.as_str().to_string()),
        unique_for_ms: o.unique_for.map(ms),
        unique_until: (o.unique_until == crate::queue::UniqueUntil::Start)
            .then(|| o.unique_until.as_str().to_string()),
        concurrency_key: o.concurrency_key.map(str::to_string),
        per_key: o.concurrency_key.map_or(0, |_| o.per_key),
    }
}
