//! Telling an app or a test when a worker is serving.

use tokio::sync::watch;

use crate::{Error, Result};

/// Tells when a worker serves its queues: each queue fetched once and job
/// notifications subscribed, so a job enqueued from then on is picked up at once.
/// Take it with [`Worker::ready`](crate::Worker::ready) before running the worker.
///
/// ```
/// use redjob::Worker;
/// use redjob::backend::memory::MemoryBackend;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> redjob::Result<()> {
/// let worker = Worker::builder(MemoryBackend::new())
///     .queue("emails")
///     .handle_signals(false)
///     .build()?;
/// let ready = worker.ready();
/// let stop = worker.shutdown_token();
/// let running = tokio::spawn(worker.run());
/// ready.wait().await?; // serving: start producing
/// assert!(ready.is_ready());
/// stop.cancel();
/// running.await.expect("worker task")?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Ready {
    rx: watch::Receiver<State>,
}

#[derive(Clone, Copy, Debug, Default)]
struct State {
    queues: usize,
    fetched: usize,
    subscribed: bool,
    /// Reached once; stays true.
    ready: bool,
    stopped: bool,
}

impl Ready {
    /// True once the worker has served (it stays true after the worker stops).
    pub fn is_ready(&self) -> bool {
        self.rx.borrow().ready
    }

    /// Waits until the worker serves. Fails with [`Error::ShuttingDown`] when the
    /// worker began to stop (or was never run and dropped) before it was
    /// ready: a worker shut down before it runs is never ready. While
    /// the backend is unreachable the worker retries, and this waits: bound it
    /// with `tokio::time::timeout` if needed.
    pub async fn wait(&self) -> Result<()> {
        let mut rx = self.rx.clone();
        let state = rx
            .wait_for(|s| s.ready || s.stopped)
            .await
            .map(|s| *s)
            .unwrap_or(State {
                stopped: true,
                ..State::default()
            });
        if state.ready {
            Ok(())
        } else {
            Err(Error::ShuttingDown)
        }
    }
}

/// The worker's side of [`Ready`].
#[derive(Debug)]
pub(crate) struct Readiness {
    tx: watch::Sender<State>,
}

impl Readiness {
    pub fn new(queues: usize) -> Self {
        Readiness {
            tx: watch::Sender::new(State {
                queues,
                ..State::default()
            }),
        }
    }

    pub fn handle(&self) -> Ready {
        Ready {
            rx: self.tx.subscribe(),
        }
    }

    /// A queue's first fetch succeeded (call once per queue).
    pub fn fetched(&self) {
        self.update(|s| s.fetched += 1);
    }

    /// Notifications are in effect.
    pub fn subscribed(&self) {
        if !self.tx.borrow().subscribed {
            self.update(|s| s.subscribed = true);
        }
    }

    /// The worker stopped.
    pub fn stopped(&self) {
        self.update(|s| s.stopped = true);
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        self.tx.send_modify(|s| {
            f(s);
            s.ready |= !s.stopped && s.subscribed && s.fetched >= s.queues;
        });
    }
}
