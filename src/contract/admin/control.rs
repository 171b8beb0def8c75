//! Controls an operator sets on one live worker through the backend (no
//! connection to the worker itself): quiet it, resume it, stop it.
//!
//! A control is stored beside the live-worker registry, keyed by the worker's
//! id, with when and by whom it was set; the backend wakes the worker to read
//! it at once when it changes (on Redis a message on the worker's own
//! hand-off channel, on a Cluster too), and the worker reads it with every
//! full beat (at least every two minutes, at each reconnection of its
//! listener, and at every beat while its listener is not connected). A
//! control lives as long as the worker's entry: a stopped or dead worker's is
//! gone with it, and a worker whose entry was lost (it could not
//! beat for a whole lease, or the registry was flushed) registers again with
//! none.

use serde::Serialize;

/// What an operator asks of a live worker ([`Admin::control_worker`](super::Admin::control_worker)).
///
/// ```
/// use redjob::ops::WorkerControl;
///
/// assert_eq!("quiet".parse::<WorkerControl>(), Ok(WorkerControl::Quiet));
/// assert_eq!(WorkerControl::Stop.as_str(), "stop");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WorkerControl {
    /// Stop taking work: no fetch, no hand-off (a job handed on the way is
    /// put back unstarted, no attempt counted), no topic event read; what it
    /// runs finishes, and what it holds without running it (prefetched jobs,
    /// events read ahead) goes back unstarted. Its periodic schedules go on
    /// ticking (a tick only enqueues, once over every worker). An ordered
    /// subscriber it owns stays its own (no other worker takes it over until
    /// it is resumed or stopped). Undone by a resume.
    Quiet,
    /// Shut down gracefully, as its shutdown token would: stop taking work,
    /// let runs finish within the grace period, release the rest, leave the
    /// registry; [`Worker::run`](crate::Worker::run) returns
    /// [`Stopped::Requested`](crate::worker::Stopped::Requested). The
    /// application's process goes on. A stop is final: a quiet or resume set
    /// after it leaves it in place.
    Stop,
}

impl WorkerControl {
    /// Its stored (and CLI) name: `quiet` or `stop`.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerControl::Quiet => "quiet",
            WorkerControl::Stop => "stop",
        }
    }
}

impl std::fmt::Display for WorkerControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for WorkerControl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "quiet" => Ok(WorkerControl::Quiet),
            "stop" => Ok(WorkerControl::Stop),
            _ => Err(format!("`{s}` is not a worker control (quiet or stop)")),
        }
    }
}

/// A control in force on a worker: what, when and by whom it was set.
///
/// ```
/// use redjob::ops::{Admin, WorkerControl};
/// use redjob::backend::memory::MemoryBackend;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let q = MemoryBackend::new();
/// for w in q.workers().await? {
///     if let Some(c) = w.control.filter(|c| c.what == WorkerControl::Quiet) {
///         println!("{} quiet since {} (by {})", w.id, c.at_ms, c.by);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Control {
    /// What was asked.
    pub what: WorkerControl,
    /// When, Unix ms (backend time).
    pub at_ms: u64,
    /// Who (`api`, `cli alice`, `dashboard bob`).
    pub by: String,
}

/// What a worker's beat hears back ([`Backend::beat`](crate::backend::Backend::beat)):
/// the control an operator set on it, and the version of the queues'
/// settings, which every [`Admin::set_settings`](super::Admin::set_settings)
/// changes (the worker then reads its queues' settings again).
///
/// ```
/// use redjob::ops::BeatReply;
///
/// let reply = BeatReply::new(None, 7);
/// assert_eq!((reply.control, reply.settings), (None, 7));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BeatReply {
    /// The control set on the worker, if any.
    pub control: Option<Control>,
    /// The settings' version (0 when none was ever changed, or it was
    /// forgotten: any change of it counts).
    pub settings: u64,
}

impl BeatReply {
    /// A reply (for a [`Backend`](crate::backend::Backend) of another crate).
    pub fn new(control: Option<Control>, settings: u64) -> Self {
        BeatReply { control, settings }
    }
}

impl Control {
    /// A control: what, when (Unix ms) and by whom (for a [`Backend`](crate::backend::Backend)
    /// of another crate, whose beats return it).
    pub fn new(what: WorkerControl, at_ms: u64, by: impl Into<String>) -> Self {
        Control {
            what,
            at_ms,
            by: by.into(),
        }
    }

    /// Reads the stored form, `<what> <ms> <who>`; `None` for another form
    /// (a later version's control, which this worker ignores, or none).
    pub(crate) fn parse(v: &[u8]) -> Option<Control> {
        let v = std::str::from_utf8(v).ok()?;
        let (what, rest) = v.split_once(' ')?;
        let (at, by) = rest.split_once(' ')?;
        Some(Control {
            what: what.parse().ok()?,
            at_ms: at.parse().ok()?,
            by: by.to_string(),
        })
    }

    /// The stored form (see [`parse`](Self::parse)).
    pub(crate) fn stored(&self) -> String {
        format!("{} {} {}", self.what, self.at_ms, self.by)
    }
}

/// Checks a worker id given to a control: not empty, at most 256 bytes
/// (workers' ids are UUIDs).
pub(crate) fn check_id(id: &str) -> crate::Result<()> {
    if id.is_empty() || id.len() > 256 {
        return Err(crate::Error::InvalidValue {
            what: "worker id",
            reason: "must be 1 to 256 bytes".into(),
        });
    }
    Ok(())
}

/// The wake-up name a backend's listener passes to a worker whose control
/// changed (`@` is in no queue name).
pub(crate) fn wake_name(worker: &str) -> String {
    format!("@control:{worker}")
}

/// The wake-up name a backend's listener passes to every worker when a
/// queue's settings changed.
pub(crate) const SETTINGS_WAKE: &str = "@settings";

/// The wake-up name a backend's listener passes to every worker when running
/// jobs of `queue` may have been cancelled or deleted: a worker holding jobs
/// of it renews their leases now, which finds those gone and stops their runs.
pub(crate) fn gone_wake(queue: &str) -> String {
    format!("{GONE_WAKE}{queue}")
}

/// The prefix of [`gone_wake`]'s names.
pub(crate) const GONE_WAKE: &str = "@gone:";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_reads_back() {
        let c = Control {
            what: WorkerControl::Stop,
            at_ms: 17,
            by: "cli ops alice".into(),
        };
        assert_eq!(Control::parse(c.stored().as_bytes()), Some(c));
        assert_eq!(Control::parse(b"drain 1 x"), None);
        assert_eq!(Control::parse(b"quiet x y"), None);
    }
}
