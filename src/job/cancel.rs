//! A run's cancellation, its token made only when asked for.
//!
//! Each run has a [`CancellationToken`] for its handler
//! ([`JobContext::cancellation`](crate::JobContext::cancellation)), which the
//! worker's lease table must be able to fire. Made for every run, cloned into
//! the table and the context and checked on the way, a token cost about five
//! locks of its mutex a job (7 % of the worker's CPU on the 2-core bench),
//! though most handlers never look at it. So a run carries this instead: a
//! flag the worker fires and checks without a lock, and the token, made the
//! first time the handler asks, already cancelled when the flag was fired
//! before. The worker waits on a token of its own (made when it first
//! waits): a handler may cancel its token itself, to stop tasks it shares it
//! with, and that is no cancellation of the run.
//!
//! It also says when the run took its running slot ([`RunCancel::start`]):
//! the lease table's entry shares it with the run, so the worker registry
//! lists a run as running (not prefetched) with no write to the table.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// A run's cancellation: fired by the worker, read by the handler through
/// its token.
#[derive(Debug, Default)]
pub(crate) struct RunCancel {
    fired: AtomicBool,
    /// The handler's.
    token: OnceLock<CancellationToken>,
    /// The worker's, to wait for the flag.
    worker: OnceLock<CancellationToken>,
    /// When the run took its running slot: µs after it was leased, plus
    /// one; 0 while it waits for one (prefetched) or never took one.
    started: AtomicU64,
}

impl RunCancel {
    /// One whose token is `token` (fired when it is cancelled, and firing it).
    pub fn with(token: CancellationToken) -> Self {
        RunCancel {
            fired: AtomicBool::new(false),
            token: OnceLock::from(token),
            worker: OnceLock::new(),
            started: AtomicU64::new(0),
        }
    }

    /// The run took its running slot, `after` it was leased (written once a
    /// run, read by the worker registry's beats). SeqCst, as the load of
    /// the registry's pending flag after it: either the registry's next
    /// read sees it, or the run's notice wakes the registry (see
    /// `worker::leases::Changes`).
    pub fn start(&self, after: Duration) {
        let us = u64::try_from(after.as_micros()).unwrap_or(u64::MAX - 1);
        self.started.store(us.saturating_add(1), Ordering::SeqCst);
    }

    /// How long after it was leased the run took its running slot; `None`
    /// while it has not.
    pub fn started(&self) -> Option<Duration> {
        match self.started.load(Ordering::SeqCst) {
            0 => None,
            us => Some(Duration::from_micros(us - 1)),
        }
    }

    /// Fires it: the tokens made are cancelled; one made later is made
    /// cancelled.
    pub fn cancel(&self) {
        self.fired.store(true, Ordering::SeqCst);
        // either this sees a token, or its making sees the flag (or both)
        fence(Ordering::SeqCst);
        for t in [self.token.get(), self.worker.get()].into_iter().flatten() {
            t.cancel();
        }
    }

    /// Whether it was fired (by the worker: a handler cancelling its own
    /// token does not fire it).
    pub fn is_cancelled(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// The handler's token, made now if it was not yet.
    pub fn token(&self) -> &CancellationToken {
        self.made(&self.token)
    }

    /// `slot`'s token, made now (cancelled when the flag was fired).
    fn made<'a>(&self, slot: &'a OnceLock<CancellationToken>) -> &'a CancellationToken {
        let t = slot.get_or_init(CancellationToken::new);
        fence(Ordering::SeqCst);
        if self.fired.load(Ordering::SeqCst) {
            t.cancel();
        }
        t
    }

    /// Waits until it is fired.
    pub async fn cancelled(&self) {
        self.made(&self.worker).cancelled().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::RunCancel;

    #[test]
    fn a_token_made_after_the_cancel_is_cancelled_and_one_made_before_is_fired() {
        let late = RunCancel::default();
        assert!(!late.is_cancelled());
        late.cancel();
        assert!(late.is_cancelled());
        assert!(late.token().is_cancelled());

        let early = RunCancel::default();
        let token = early.token().clone();
        assert!(!token.is_cancelled());
        early.cancel();
        assert!(token.is_cancelled());

        // the handler cancelling its own token is no cancellation of the run
        let own = RunCancel::default();
        own.token().cancel();
        assert!(!own.is_cancelled());
        own.cancel();
        assert!(own.is_cancelled());
    }

    #[test]
    fn a_cancel_racing_the_tokens_making_is_never_lost() {
        for _ in 0..2_000 {
            let c = Arc::new(RunCancel::default());
            let firing = {
                let c = c.clone();
                std::thread::spawn(move || c.cancel())
            };
            let token = c.token().clone();
            firing.join().unwrap();
            assert!(token.is_cancelled(), "the cancel reached the token");
        }
    }

    #[tokio::test]
    async fn the_worker_waits_for_its_fire_not_for_the_handlers_own_cancel() {
        let c = Arc::new(RunCancel::default());
        c.token().cancel();
        let quick = tokio::time::timeout(std::time::Duration::from_millis(50), c.cancelled());
        assert!(quick.await.is_err(), "the handler's cancel woke the worker");
        c.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), c.cancelled())
            .await
            .expect("fired");
    }

    #[tokio::test]
    async fn cancelled_returns_once_fired() {
        let c = Arc::new(RunCancel::default());
        let waiting = {
            let c = c.clone();
            tokio::spawn(async move { c.cancelled().await })
        };
        tokio::task::yield_now().await;
        c.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap();
    }
}
