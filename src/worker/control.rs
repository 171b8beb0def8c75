//! The controls an operator sets on this worker through the backend
//! ([`Admin::control_worker`](crate::ops::Admin::control_worker)), as the
//! registry's beats read them, and why
//! [`Worker::run_until_stopped`](super::Worker::run_until_stopped) returned.

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::contract::admin::{Control, WorkerControl};

/// Why [`Worker::run_until_stopped`](super::Worker::run_until_stopped)
/// returned (when it did not fail).
///
/// ```
/// use redjob::Worker;
/// use redjob::backend::memory::MemoryBackend;
/// use redjob::worker::Stopped;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let worker = Worker::builder(MemoryBackend::new())
///     .queue("mail")
///     .handle_signals(false)
///     .build()?;
/// worker.shutdown_token().cancel(); // as the app does at its own shutdown
/// match worker.run_until_stopped().await? {
///     Stopped::Requested { by, .. } => println!("stopped by {by}; the app goes on"),
///     Stopped::Signal { name } => println!("{name}: the app exits too"),
///     other => assert_eq!(other, Stopped::Shutdown),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stopped {
    /// Its shutdown token was cancelled ([`Worker::shutdown_token`](super::Worker::shutdown_token),
    /// [`WorkerBuilder::shutdown`](super::WorkerBuilder::shutdown)).
    Shutdown,
    /// ctrl-c or SIGTERM came (when it handles signals, see
    /// [`WorkerBuilder::handle_signals`](super::WorkerBuilder::handle_signals)).
    Signal {
        /// `ctrl-c` or `SIGTERM`.
        name: &'static str,
    },
    /// An operator stopped it through the backend
    /// ([`Admin::stop_worker`](crate::ops::Admin::stop_worker), `redjob
    /// workers stop`, the dashboard): the application's process goes on.
    Requested {
        /// Who (`api`, `cli alice`, `dashboard bob`).
        by: String,
        /// When, Unix ms (backend time).
        at_ms: u64,
    },
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Shutdown => f.write_str("shut down by its token"),
            Stopped::Signal { name } => write!(f, "shut down by {name}"),
            Stopped::Requested { by, at_ms } => {
                write!(f, "stopped by {by} (at {at_ms}, Unix ms)")
            }
        }
    }
}

/// What the registry read of this worker's control, shared with the tasks
/// that follow it.
pub(crate) struct Controls {
    /// Quiet: take no work (dispatchers, hand-offs, subscribers wait).
    pub quiet: watch::Sender<bool>,
    /// `quiet`'s value, read without its lock (each job start reads it).
    quiet_now: AtomicBool,
    /// Cancelled when an operator stops the worker (the application's token
    /// stays as it is).
    pub stop: CancellationToken,
    /// A control's notice came, or the settings' (or notices may have been
    /// lost): the registry beats in full at once to read them.
    pub poke: Notify,
    /// The version of the queues' settings its last full beat heard: a
    /// change has the settings task read them again.
    pub settings: watch::Sender<u64>,
    /// Whether the listener is connected (so notices are heard): while not,
    /// the registry beats in full every time.
    pub listening: AtomicBool,
    /// Why the worker stops, once known.
    reason: Mutex<Option<Stopped>>,
    /// Cancelled by a signal during the shutdown (a second ctrl-c): the
    /// grace period ends at once.
    pub hurry: CancellationToken,
}

impl Controls {
    pub fn new() -> Self {
        Controls {
            quiet: watch::channel(false).0,
            quiet_now: AtomicBool::new(false),
            stop: CancellationToken::new(),
            poke: Notify::new(),
            settings: watch::channel(0).0,
            listening: AtomicBool::new(false),
            reason: Mutex::new(None),
            hurry: CancellationToken::new(),
        }
    }

    /// Whether the worker is quiet now.
    pub fn is_quiet(&self) -> bool {
        self.quiet_now.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Records why the worker stops, unless a reason came first.
    pub fn stopping(&self, why: Stopped) {
        self.reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert(why);
    }

    /// Why it stopped: the first reason recorded, else its token.
    pub fn reason(&self) -> Stopped {
        self.reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or(Stopped::Shutdown)
    }

    /// Follows the control read with a beat (`None`: none is set); whether
    /// that changed what the worker says of itself (so it beats again soon).
    /// A stop quiets too, and is cancelled first: nothing takes work in
    /// between.
    pub fn follow(&self, worker: &str, control: Option<&Control>) -> bool {
        if let Some(c) = control.filter(|c| c.what == WorkerControl::Stop)
            && !self.stop.is_cancelled()
        {
            tracing::info!(worker, by = %c.by, "stop requested: shutting down");
            self.stopping(Stopped::Requested {
                by: c.by.clone(),
                at_ms: c.at_ms,
            });
            self.stop.cancel();
        }
        let quiet = control.is_some();
        let changed = self.quiet.send_if_modified(|q| {
            // set before the watchers are told
            self.quiet_now
                .store(quiet, std::sync::atomic::Ordering::Release);
            let was = std::mem::replace(q, quiet);
            was != quiet
        });
        match control {
            Some(c) if changed && c.what == WorkerControl::Quiet => {
                tracing::info!(worker, by = %c.by, "quiet: taking no work until resumed")
            }
            None if changed => tracing::info!(worker, "resumed: taking work again"),
            _ => {}
        }
        changed
    }
}
