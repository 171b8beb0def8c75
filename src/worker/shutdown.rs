//! A worker's run once started: it waits for the shutdown (the token, an
//! operator's stop, or a task that crashed), then stops in order: no new
//! jobs, the hand-offs read, the running jobs given their grace, the settles
//! drained, the worker out of the registry.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::control::{Controls, Stopped};
use super::settle::Event;
use super::{leases, registry};
use crate::Result;
use crate::contract::backend::Backend;

/// How long runs cancelled after the grace period get to stop.
const ABORT_WAIT: Duration = Duration::from_secs(5);

/// How long a stopping worker waits for its registry's beat under way before
/// it leaves the registry.
const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// Everything a worker's run started, stopped in order by
/// [`until_stopped`](Self::until_stopped).
///
/// Dropped instead (the worker's future dropped, or the run crashed), its
/// fields drop in order: the task sets first, which aborts their tasks, and
/// last the runs' abort, which cancels the running jobs: nothing is settled
/// and the leases run out, as after a process kill.
pub(super) struct Running {
    /// Its own set: at shutdown it hands over the jobs handed before, to be
    /// released, and is joined before the runs are counted out.
    pub listener: JoinSet<()>,
    /// Its own set and token: it samples once more after the drain.
    pub sampler: JoinSet<()>,
    /// Apart from the other tasks: its last beat must end before the worker
    /// leaves the registry.
    pub beats: JoinSet<()>,
    pub subscribers: JoinSet<()>,
    /// The tasks that end with the run, aborted at its end (the signal
    /// watcher, the poll, the tickers, the settings' follower...).
    pub infra: JoinSet<()>,
    pub settlers: JoinSet<()>,
    pub dispatchers: JoinSet<()>,
    /// Each settler's channel, told to drain once the runs are counted out.
    pub settler_txs: Vec<mpsc::UnboundedSender<Event>>,
    /// The jobs' runs.
    pub tracker: TaskTracker,
    /// The subscribers' read loops, which end before the runs are counted out.
    pub readers: TaskTracker,
    /// Cancelled once the runs are counted out: the subscribers drain.
    pub drained: CancellationToken,
    /// Cancelled for the sampler's last sample.
    pub sampled: CancellationToken,
    pub registry: Arc<registry::Registry>,
    /// A child of the shutdown token: what ends the tasks.
    pub stop: CancellationToken,
    /// Last: see above.
    pub abort_runs: leases::AbortRuns,
}

impl Running {
    /// Waits for the shutdown (`shutdown`, an operator's stop, a task that
    /// ended before either), then stops the run in order, within `grace` for
    /// the running jobs; a task that crashed is the error.
    pub async fn until_stopped<B: Backend>(
        mut self,
        backend: &B,
        shutdown: &CancellationToken,
        controls: &Arc<Controls>,
        readiness: &super::ready::Readiness,
        grace: Duration,
    ) -> Result<Stopped> {
        // a task that ends before shutdown crashed: shut down and report it
        // (tasks end by themselves only once `stop`, a child of `shutdown`, is
        // cancelled: checking `shutdown` first tells the two apart, and `stop`
        // once a task ended, as the shutdown can come on another thread
        // between the two looks)
        let shut_down = || {
            // a stop read meanwhile does not take its place
            controls.stopping(Stopped::Shutdown);
            None
        };
        let stop = &self.stop;
        let mut crashed = tokio::select! {
            biased;
            _ = shutdown.cancelled() => shut_down(),
            // an operator's stop ends the run as the token does
            _ = controls.stop.cancelled() => None,
            Some(r) = self.dispatchers.join_next() => ended("dispatcher", r, stop).or_else(shut_down),
            Some(r) = self.settlers.join_next() => ended("settler", r, stop).or_else(shut_down),
            Some(r) = self.subscribers.join_next() => ended("subscriber", r, stop).or_else(shut_down),
        };
        // a worker stopping before it was ready never becomes ready (a
        // dispatcher's first fetch may still land)
        readiness.stopped();
        self.stop.cancel();
        tracing::info!(running = self.tracker.len(), grace = ?grace, "shutting down: no new jobs");
        crashed = crashed.or(joined("dispatcher", &mut self.dispatchers).await);
        // the jobs handed before the listener stopped start (or are released)
        // before the runs are counted out
        let _ = self.listener.join_next().await;
        // subscribers' read loops end before the runs are counted out
        self.readers.wait().await;
        let tracker = &self.tracker;
        tracker.close();
        // the grace period, which a signal during the shutdown ends at once
        let over = async {
            tokio::select! {
                _ = tokio::time::sleep(grace) => "grace period over",
                _ = controls.hurry.cancelled() => "grace period ended by a signal",
            }
        };
        let over = tokio::select! {
            biased;
            _ = tracker.wait() => None,
            why = over => Some(why),
        };
        if let Some(why) = over {
            tracing::warn!(
                running = tracker.len(),
                "{why}: cancelling running jobs and releasing them"
            );
            self.abort_runs.cancel();
            // a run that ignores its token (a handler blocking its thread) is not
            // released: its settler leaves it leased until its lease ends
            let _ = tokio::time::timeout(ABORT_WAIT, tracker.wait()).await;
        }
        self.drained.cancel();
        for tx in std::mem::take(&mut self.settler_txs) {
            let _ = tx.send(Event::Drain);
        }
        crashed = crashed.or(joined("settler", &mut self.settlers).await);
        crashed = crashed.or(joined("subscriber", &mut self.subscribers).await);
        // the gauges' last sample, of what the worker left behind
        self.sampled.cancel();
        let _ = tokio::time::timeout(LEAVE_WAIT, self.sampler.join_next()).await;
        self.sampler.abort_all();
        self.infra.abort_all();
        // a beat under way (one right after a stop control was read, say)
        // ends first: aborted, its command may already be written and run
        // after the leave on another of the connection's lanes, which puts
        // the stopped worker back in the registry until its entry runs out
        let _ = tokio::time::timeout(LEAVE_WAIT, self.beats.join_next()).await;
        self.beats.abort_all();
        self.registry.leave(backend).await;
        match crashed {
            None => {
                let why = controls.reason();
                tracing::info!(reason = %why, "worker stopped");
                Ok(why)
            }
            Some(e) => {
                tracing::error!(error = %e, "worker stopped after a crash");
                Err(e)
            }
        }
    }
}

/// Waits for every task of `set`; a task that panicked is reported as an error.
async fn joined(what: &'static str, set: &mut JoinSet<()>) -> Option<crate::Error> {
    let mut first = None;
    while let Some(r) = set.join_next().await {
        if r.is_err() {
            first.get_or_insert(crash(what, r));
        }
    }
    first
}

/// A worker task that ended before the worker's run saw the shutdown: `None`
/// when it ended by itself and the worker's `stop` (a child of the shutdown
/// token) is cancelled now (it ended because of it), else the crash.
fn ended(
    what: &'static str,
    r: Result<(), tokio::task::JoinError>,
    stop: &CancellationToken,
) -> Option<crate::Error> {
    if r.is_ok() && stop.is_cancelled() {
        return None;
    }
    Some(crash(what, r))
}

/// The error for a worker task that ended when it should not have.
fn crash(what: &'static str, r: Result<(), tokio::task::JoinError>) -> crate::Error {
    let reason = match r {
        Ok(()) => "ended before shutdown".to_string(),
        Err(e) if e.is_panic() => {
            let p = e.into_panic();
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into())
        }
        Err(e) => e.to_string(),
    };
    tracing::error!(task = what, %reason, "a worker task crashed; shutting down");
    crate::Error::Crashed { task: what, reason }
}

#[cfg(test)]
mod tests {
    use super::ended;
    use tokio_util::sync::CancellationToken;

    /// A task that ended by itself is a crash until the worker's stop came,
    /// and no crash once it came (the worker's run may look at the task only
    /// after looking at the shutdown, which came between on another thread);
    /// a task that panicked is a crash either way.
    #[tokio::test]
    async fn a_task_that_ended_with_the_shutdown_is_no_crash() {
        let stop = CancellationToken::new();
        let crashed = |e: Option<crate::Error>| match e {
            Some(crate::Error::Crashed { task, reason }) => Some((task, reason)),
            other => panic!("{other:?}"),
        };
        let r = tokio::spawn(async {}).await;
        let (task, reason) = crashed(ended("dispatcher", r, &stop)).unwrap();
        assert_eq!(
            (task, reason.as_str()),
            ("dispatcher", "ended before shutdown")
        );
        stop.cancel();
        let r = tokio::spawn(async {}).await;
        assert!(ended("dispatcher", r, &stop).is_none());
        let r = tokio::spawn(async { panic!("boom") }).await;
        let (task, reason) = crashed(ended("settler", r, &stop)).unwrap();
        assert_eq!((task, reason.as_str()), ("settler", "boom"));
    }
}
