//! What a subscriber holds: the ordered subscriber's ownership, and the events
//! read or running, renewed while held and settled in batches.

use super::*;

/// An ordered subscriber's ownership by this worker: whether it holds it, when
/// it last renewed it, and the token its runs are cancelled with once it is lost.
pub(super) struct Ownership {
    owned: AtomicBool,
    renewed: Mutex<Instant>,
    runs: Mutex<CancellationToken>,
}

impl Ownership {
    pub(super) fn new(abort: &CancellationToken) -> Self {
        Ownership {
            owned: AtomicBool::new(false),
            renewed: Mutex::new(Instant::now()),
            runs: Mutex::new(abort.child_token()),
        }
    }

    pub(super) fn held(&self) -> bool {
        self.owned.load(Ordering::SeqCst)
    }

    /// Taken (or renewed): runs start under a fresh token.
    pub(super) fn taken(&self, abort: &CancellationToken) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if !self.owned.swap(true, Ordering::SeqCst) {
            *self.runs.lock().unwrap_or_else(|e| e.into_inner()) = abort.child_token();
        }
    }

    /// Renewed.
    pub(super) fn renewed(&self) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Lost (another worker took it, or it went unrenewed too long): what runs
    /// is cancelled, and nothing more starts.
    pub(super) fn lost(&self) {
        self.owned.store(false, Ordering::SeqCst);
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).cancel();
    }

    /// When it was last taken or renewed.
    pub(super) fn since_renewed(&self) -> Duration {
        self.renewed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    pub(super) fn token(&self) -> CancellationToken {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

pub(super) fn lock(held: &Mutex<HashSet<EventId>>) -> std::sync::MutexGuard<'_, HashSet<EventId>> {
    // a set of ids cannot be left half-changed
    held.lock().unwrap_or_else(|e| e.into_inner())
}

/// Acknowledges, schedules retries and dead-letters in batches: whatever
/// finished while the previous call was out goes in the next one.
pub(super) async fn settle_loop<B: Topics>(
    backend: B,
    names: Arc<Names>,
    mut rx: mpsc::UnboundedReceiver<Done>,
    (keep_dead, by): (Option<u64>, RunBy),
    lease: Duration,
    held: Arc<Mutex<HashSet<EventId>>>,
    finish: CancellationToken,
) {
    // a claim takes events idle for a lease: one due in `delay` is set idle for the rest
    let idle = |delay: Duration| lease.saturating_sub(delay);
    loop {
        // once the worker is drained, a run that never ended (its handler blocks
        // its thread) keeps its sender: settle what is queued and stop
        let first = tokio::select! {
            biased;
            d = rx.recv() => d,
            _ = finish.cancelled() => rx.try_recv().ok(),
        };
        let Some(first) = first else { return };
        let mut batch = EventSettle {
            by: Some(by.clone()),
            ..EventSettle::default()
        };
        let add = |d: Done, batch: &mut EventSettle| match d {
            Done::Ack(id) => batch.acks.push(id),
            Done::Retry(id, delay, runs, count) => {
                batch.retries.push((id, idle(delay), count));
                batch.runs.extend(runs);
            }
            Done::Release(id, count) => batch.retries.push((id, lease, Some(count))),
            Done::Dead(ev, error, runs) => {
                batch.dead.push((ev, error));
                batch.runs.extend(runs);
            }
        };
        add(first, &mut batch);
        while batch.acks.len() + batch.retries.len() + batch.dead.len() < 10_000 {
            match rx.try_recv() {
                Ok(d) => add(d, &mut batch),
                Err(_) => break,
            }
        }
        let mut tries = 0;
        loop {
            match backend
                .settle_events(&names.topic, &names.sub, &names.consumer, &batch, keep_dead)
                .await
            {
                Ok(()) => break,
                Err(e) => {
                    tries += 1;
                    if tries >= SETTLE_TRIES {
                        tracing::error!(topic = %names.topic, subscriber = %names.sub, error = %e, events = batch.acks.len() + batch.retries.len() + batch.dead.len(),
                            "could not settle events; they will be delivered again after the lease");
                        break;
                    }
                    tokio::time::sleep(backoff(tries)).await;
                }
            }
        }
        let mut h = lock(&held);
        let settled = batch.acks.iter().chain(batch.retries.iter().map(|r| &r.0));
        for id in settled.chain(batch.dead.iter().map(|d| &d.0.id)) {
            h.remove(id);
        }
    }
}

/// Restarts the idle time of running events, and renews the ownership of an
/// ordered subscriber (`owned`), every third of the lease.
pub(super) async fn renew_loop<B: Topics>(
    backend: B,
    names: Arc<Names>,
    held: Arc<Mutex<HashSet<EventId>>>,
    owned: Option<Arc<Ownership>>,
    lease: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(lease / 3) => {}
            _ = stop.cancelled() => return,
        }
        if let Some(owned) = owned.as_ref().filter(|o| o.held()) {
            match backend
                .own(&names.topic, &names.sub, &names.consumer, Some(lease))
                .await
            {
                Ok(true) => owned.renewed(),
                Ok(false) => {
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub,
                        "another worker took the ordered subscriber (this one's lease ran out): its run is cancelled");
                    owned.lost();
                }
                Err(e) => {
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub, error = %e, "renewing the ordered subscriber failed");
                    // stop well before the lease ends and a standby may take over
                    if owned.since_renewed() >= lease * 2 / 3 {
                        owned.lost();
                    }
                }
            }
        }
        let ids: Vec<EventId> = lock(&held).iter().copied().collect();
        if ids.is_empty() {
            continue;
        }
        match backend
            .renew(&names.topic, &names.sub, &names.consumer, &ids)
            .await
        {
            Ok(kept) => {
                for (id, kept) in ids.iter().zip(kept) {
                    if !kept && lock(&held).contains(id) {
                        tracing::warn!(topic = %names.topic, subscriber = %names.sub, event.id = %id,
                            "another consumer claimed this running event (its hold ran out): it may run twice");
                    }
                }
            }
            Err(e) => {
                tracing::warn!(topic = %names.topic, subscriber = %names.sub, error = %e, "renewing held events failed")
            }
        }
    }
}
