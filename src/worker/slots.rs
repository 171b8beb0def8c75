//! Running slots: a dispatcher (or a subscriber) takes the worker's free slots
//! and its queue's places before it leases, gives back what it did not use,
//! and waits while the slots free are held for jobs leased before.

use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::limit::Limit;

/// Takes one permit (waiting), then as many more as are free, up to `max`.
/// The permits are forgotten; [`SlotGuard`](super::execute::SlotGuard) or the caller adds them back.
/// With `settle` (the worker's slots), when few are free it first lets jobs
/// just started finish.
async fn take(sem: &Semaphore, max: u32, settle: bool) -> u32 {
    let Ok(first) = sem.acquire().await else {
        return 0;
    };
    first.forget();
    if settle && sem.available_permits() < (max as usize) / 2 {
        // jobs just started may finish at once: let them, and fetch a fuller batch
        Requeue(false).await;
    }
    let mut n = 1;
    while n < max {
        match sem.try_acquire() {
            Ok(p) => {
                p.forget();
                n += 1;
            }
            Err(_) => break,
        }
    }
    n
}

/// Yields once by waking itself: the task goes to the back of its thread's run
/// queue, behind the jobs just spawned there, where another thread may take
/// it. Not `tokio::task::yield_now`, which holds the wake until its thread has
/// nothing else to run: a handler that blocks that thread held the dispatcher
/// (and so every other job of its queue) until it ended.
struct Requeue(bool);

impl std::future::Future for Requeue {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// How [`running_slot`] found a running slot that may be free.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Freed {
    /// The jobs leased before took their slots, or went back without: look
    /// again.
    Taken,
    /// A running job gave its slot back.
    Ended,
}

/// How often a dispatcher looks again while the free running slots are held
/// for jobs leased before whose tasks have yet to run.
const START_RECHECK: Duration = Duration::from_millis(1);

/// Waits while no running slot is free for a job leased now (see
/// [`Shared::running_free`]); `None` at `stop`. When the free running permits
/// are all held for jobs leased before whose tasks have yet to run, it waits
/// until they take them or go back ([`Freed::Taken`]), looking every
/// [`START_RECHECK`]: never for a permit, which it would get at once, and
/// lease a job beside them that then waits behind them. On a busy machine a
/// task may wait for its first run longer than any one pause. A sleep, not a
/// yield or a notice from the job's task: either parks this task on a thread
/// behind the job, and a handler that blocks its thread held the dispatcher
/// (and so a shutdown's grace period) until it ended. Else it waits for a
/// running job to end ([`Freed::Ended`]).
pub(super) async fn running_slot(
    running: &Semaphore,
    unstarted: &AtomicUsize,
    stop: &CancellationToken,
) -> Option<Freed> {
    if running.available_permits() > 0 {
        while running.available_permits() > 0 && super::running_free(running, unstarted) == 0 {
            tokio::select! {
                _ = tokio::time::sleep(START_RECHECK) => {}
                _ = stop.cancelled() => return None,
            }
        }
        return Some(Freed::Taken);
    }
    tokio::select! {
        p = running.acquire() => drop(p),
        _ = stop.cancelled() => return None,
    }
    Some(Freed::Ended)
}

/// Free slots of the worker and of `local` (a queue's or a subscriber's limit),
/// at least one (waiting for it), at most `max`.
pub(super) async fn slots(shared: &Shared, local: Option<&Limit>, max: u32) -> u32 {
    match local {
        None => take(&shared.slots, max, true).await,
        Some(q) => {
            // the worker's first, then as many of the limit's as are free
            // (all of them when no limit binds: nothing to give back)
            let g = take(&shared.slots, max, true).await;
            let mut n = 0;
            while n < g {
                match q.sem().try_acquire() {
                    Ok(p) => {
                        p.forget();
                        n += 1;
                    }
                    Err(_) => break,
                }
            }
            if n > 0 {
                if g > n {
                    shared.give_slots((g - n) as usize);
                }
                return n;
            }
            // the limit binds: wait for its places, then the worker's
            shared.give_slots(g as usize);
            let n = take(q.sem(), max, false).await;
            let g = take(&shared.slots, n, true).await;
            q.release((n - g) as usize);
            g
        }
    }
}

/// Returns `n` slots to the worker and to `local`.
pub(super) fn give_back(shared: &Shared, local: Option<&Limit>, n: u32) {
    if n > 0 {
        // the queue's places first: a dispatcher the worker's slots wake
        // sees both free
        if let Some(q) = local {
            q.release(n as usize);
        }
        shared.give_slots(n as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::{Freed, running_slot};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::sync::Semaphore;
    use tokio_util::sync::CancellationToken;

    /// A worker of 2 running slots leased 2 long jobs whose tasks have yet to
    /// run: their slots are not free, so it must not lease a third (which
    /// would wait a whole run here while another worker idles) until one
    /// takes its slot or goes back. The check before this fix slept once for
    /// them, then waited for a free permit, which it got at once.
    #[tokio::test]
    async fn slots_held_for_jobs_yet_to_run_are_waited_for_not_leased() {
        let running = Semaphore::new(2);
        let unstarted = AtomicUsize::new(2);
        let stop = CancellationToken::new();
        let mut wait = Box::pin(running_slot(&running, &unstarted, &stop));
        let early = tokio::time::timeout(Duration::from_millis(100), &mut wait).await;
        assert!(
            early.is_err(),
            "returned {early:?} while both slots were held"
        );
        // one goes back without its slot: a slot is free, look again
        unstarted.fetch_sub(1, Ordering::AcqRel);
        let found = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert_eq!(found.unwrap(), Some(Freed::Taken));
        // the other takes its slot, as does a third job: none free until one ends
        let a = running.try_acquire().unwrap();
        unstarted.fetch_sub(1, Ordering::AcqRel);
        let b = running.try_acquire().unwrap();
        let mut wait = Box::pin(running_slot(&running, &unstarted, &stop));
        let early = tokio::time::timeout(Duration::from_millis(100), &mut wait).await;
        assert!(early.is_err(), "returned {early:?} while both jobs ran");
        drop(a);
        let found = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert_eq!(found.unwrap(), Some(Freed::Ended));
        drop(b);
        // at shutdown it returns none, held or not
        unstarted.store(3, Ordering::Release);
        let wait = running_slot(&running, &unstarted, &stop);
        stop.cancel();
        let found = tokio::time::timeout(Duration::from_secs(5), wait).await;
        assert_eq!(found.unwrap(), None);
    }
}
