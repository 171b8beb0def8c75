//! A worker's heartbeat as stored in the registry: what it runs and
//! serves, its durations relative to the beat; and how it is read back as a
//! [`WorkerInfo`].

use serde::{Deserialize, Serialize};

use super::workers::{BeatSchedule, RunningEvent, RunningJob, Serves, WorkerInfo, merged};
use crate::Result;

/// The JSON a heartbeat stores. Durations are relative to the beat, which the
/// backend stamps with its own clock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Beat {
    pub id: String,
    pub host: String,
    pub pid: u32,
    pub version: String,
    pub queues: Vec<String>,
    pub concurrency: usize,
    /// How long the entry lives after this beat.
    pub ttl_ms: u64,
    /// How long the worker has been up at this beat.
    pub up_ms: u64,
    /// When the beat was written (Unix ms), which the backend stamps: touches
    /// since moved its end on without writing it again, so its durations count
    /// from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
    /// The jobs that hold a running slot.
    #[serde(default)]
    pub running: Vec<BeatJob>,
    /// How many more jobs are leased and wait for a running slot.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefetched: usize,
    /// The topic events that hold a running slot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<BeatEvent>,
    /// Schedules whose next tick the worker knows and the backend does not
    /// (none has ticked yet); those of what it serves (see [`Serves`]) are
    /// the rest. A worker of an earlier release lists all its schedules here.
    #[serde(default)]
    pub schedules: Vec<BeatSchedule>,
    /// The digest of what it serves (see [`Serves`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serves: Option<String>,
    /// Quiet: takes no work (see [`WorkerControl::Quiet`](super::WorkerControl::Quiet)).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quiet: bool,
}

/// A running job in a [`Beat`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BeatJob {
    pub queue: String,
    pub id: String,
    #[serde(default)]
    pub job: Option<String>,
    /// How long it has been running at this beat (leased, from a worker of
    /// an earlier release).
    pub for_ms: u64,
}

/// A running topic event in a [`Beat`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BeatEvent {
    pub topic: String,
    pub subscriber: String,
    pub id: String,
    pub event: String,
    /// How long it has been running at this beat.
    pub for_ms: u64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Beat {
    /// The listed form of this beat, stored at `at_ms` (else its own
    /// [`at_ms`](Beat::at_ms); without either, at its last beat) to run out at
    /// `expires_at_ms`.
    pub fn info(
        self,
        expires_at_ms: u64,
        at_ms: Option<u64>,
        serves: Option<Serves>,
        control: Option<super::Control>,
    ) -> WorkerInfo {
        let serves = serves.unwrap_or_default();
        let beat = expires_at_ms.saturating_sub(self.ttl_ms);
        // what the beat's durations count from
        let written = at_ms.or(self.at_ms).unwrap_or(beat);
        WorkerInfo {
            id: self.id,
            host: self.host,
            pid: self.pid,
            version: self.version,
            queues: self.queues,
            concurrency: self.concurrency,
            started_at_ms: written.saturating_sub(self.up_ms),
            last_beat_ms: beat,
            expires_at_ms,
            running: self
                .running
                .into_iter()
                .map(|j| RunningJob {
                    queue: j.queue,
                    id: j.id,
                    job: j.job,
                    started_at_ms: written.saturating_sub(j.for_ms),
                })
                .collect(),
            events: self
                .events
                .into_iter()
                .map(|e| RunningEvent {
                    topic: e.topic,
                    subscriber: e.subscriber,
                    id: e.id,
                    event: e.event,
                    started_at_ms: written.saturating_sub(e.for_ms),
                })
                .collect(),
            prefetched: self.prefetched,
            schedules: merged(self.schedules, serves.schedules),
            job_types: serves.job_types,
            subscribers: serves.subscribers,
            unknown_jobs_retry_for_ms: serves.unknown_ms,
            control,
            quiet: self.quiet,
        }
    }

    /// Decodes a stored beat (see [`Beat::info`]) with what it serves, looked
    /// up by its digest in `served` (digest, JSON), and the control set on it
    /// (its stored form); `None` for a beat this version cannot read.
    pub fn decode(
        json: &[u8],
        expires_at_ms: u64,
        at_ms: Option<u64>,
        served: &std::collections::HashMap<String, Vec<u8>>,
        control: Option<&[u8]>,
    ) -> Option<WorkerInfo> {
        let beat = serde_json::from_slice::<Beat>(json).ok()?;
        let serves = beat
            .serves
            .as_ref()
            .and_then(|d| served.get(d))
            .and_then(|j| serde_json::from_slice::<Serves>(j).ok());
        let control = control.and_then(super::Control::parse);
        Some(beat.info(expires_at_ms, at_ms, serves, control))
    }

    /// The beat without its durations, which every beat changes: a worker whose
    /// shape is unchanged moves its entry on instead of writing it again.
    pub fn shape(&self) -> Result<Vec<u8>> {
        let mut b = self.clone();
        b.up_ms = 0;
        for j in &mut b.running {
            j.for_ms = 0;
        }
        for e in &mut b.events {
            e.for_ms = 0;
        }
        b.encode()
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(self)?)
    }
}
