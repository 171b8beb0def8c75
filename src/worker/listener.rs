//! What reaches the worker between its fetches: the notification channel
//! (wake-ups, jobs handed to it, controls), the fallback poll, the hand-off
//! registrations it withdraws when full, and the backend's warnings.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::dispatch::Dispatcher;
use crate::contract::backend::Backend;

/// How long the listener gets at shutdown to stop taking hand-offs and hand
/// over the jobs handed before (a healthy Redis takes well under a
/// millisecond).
const LISTENER_STOP_WAIT: Duration = Duration::from_millis(1500);

/// Logs what about the backend can lose or delay jobs (e.g. an eviction policy).
pub(super) async fn warn_about_backend<B: Backend>(backend: B) {
    match backend.warnings().await {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!("{w}");
            }
        }
        Err(e) => tracing::debug!(error = %e, "could not check the backend's settings"),
    }
}

/// The fallback poll of all the worker's queues, one call every `every`: wakes
/// the dispatchers of queues with a job due (or a lease ending) before the next
/// poll, all of them when the call fails. Sends wake dispatchers at once; this
/// catches what sends no wake-up (an RSMQ client's send without `realtime`, a
/// retry or a lost lease of another worker).
pub(super) async fn poll<B: Backend>(
    backend: B,
    queues: Vec<String>,
    wakes: HashMap<String, Arc<Notify>>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.cancelled() => return,
        }
        let due = tokio::select! {
            r = backend.due_soon(&queues, every) => r,
            _ = stop.cancelled() => return,
        };
        let due = due.unwrap_or_else(|e| {
            tracing::debug!(error = %e, "polling the queues failed; each fetches");
            vec![true; queues.len()]
        });
        for (q, due) in queues.iter().zip(due) {
            if let Some(n) = wakes.get(q).filter(|_| due) {
                n.notify_one();
            }
        }
    }
}

/// Where the notification channel's news goes, by queue.
pub(super) struct Wakes {
    /// The worker's id, which sends hand jobs to.
    pub worker: Arc<str>,
    pub wakes: HashMap<String, Arc<Notify>>,
    /// Each queue's dispatcher takes the jobs handed to this worker.
    pub handoffs: HashMap<String, Handoff>,
    /// Each queue's settler, told to renew its leases now when running jobs
    /// of the queue may have been cancelled.
    pub renews: HashMap<String, tokio::sync::mpsc::UnboundedSender<super::settle::Event>>,
    /// The queues' stored settings, read again once the connection breaks.
    pub follow: Arc<super::settings::Follow>,
}

/// Takes a job handed to this worker (see [`Dispatcher::take_handed`]).
pub(super) type Handoff = Arc<dyn Fn(crate::contract::leases::Handed) + Send + Sync>;

/// Wakes dispatchers on new jobs and passes them the jobs handed to this worker;
/// reconnects with backoff when the channel fails.
pub(super) async fn listen<B: Backend>(
    backend: B,
    queues: Vec<String>,
    to: Wakes,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let Wakes {
        worker,
        wakes,
        handoffs,
        renews,
        follow,
    } = to;
    let control = crate::contract::admin::control_wake(&worker);
    let wake = |q: &str| {
        if let Some(n) = wakes.get(q) {
            n.notify_one();
        } else if let Some(tx) = q
            .strip_prefix(crate::contract::admin::GONE_WAKE)
            .and_then(|q| renews.get(q))
        {
            // an operator cancelled or deleted running jobs of the queue:
            // the runs of those held here stop now, not at the next renewal
            let _ = tx.send(super::settle::Event::Renew);
        } else if q == control || q == crate::contract::admin::SETTINGS_WAKE {
            // a control set on this worker, or the queues' settings changed:
            // the registry beats in full now, which reads them
            shared.controls.poke.notify_one();
        }
    };
    let handed = |h: crate::contract::leases::Handed| {
        let id = h.delivery.id;
        match handoffs.get(h.queue.as_str()) {
            Some(take) => take(h),
            None => {
                tracing::warn!(queue = %h.queue, job.id = %id, "a job of a queue this worker does not serve was handed to it: it runs once its lease is over")
            }
        }
    };
    // notices from here on are heard; those before may have been lost: the
    // registry reads the control and the settings' version now
    let subscribed = || {
        shared.readiness.subscribed();
        shared.controls.listening.store(true, Ordering::Relaxed);
        shared.controls.poke.notify_one();
    };
    let mut backoff = Duration::from_millis(100);
    loop {
        let started = tokio::time::Instant::now();
        // at `stop` it hands over (to be released) what was handed before, and
        // returns; a connection that stalls while connecting or pinging is
        // dropped
        let r = tokio::select! {
            r = backend.listen_handoff(&queues, &worker, &wake, &handed, &subscribed, &stop) => r,
            _ = async {
                stop.cancelled().await;
                tokio::time::sleep(LISTENER_STOP_WAIT).await;
            } => return,
        };
        // notices go unheard until it subscribes again
        shared.controls.listening.store(false, Ordering::Relaxed);
        if stop.is_cancelled() {
            return;
        }
        if started.elapsed() > Duration::from_secs(30) {
            // it worked for a while: the next failure starts over
            backoff = Duration::from_millis(100);
        }
        if let Err(e) = r {
            tracing::warn!(error = %e, retry_in = ?backoff, "job notifications lost; polling until they are back");
        }
        // Redis may have restarted empty (and a producer's send created a
        // queue again without the settings stored with it, or any notice of
        // that been lost): each dispatcher reads (and stores) its queue's
        // settings again before it leases
        for q in &queues {
            follow.forget(q);
        }
        for n in wakes.values() {
            n.notify_one();
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.cancelled() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Withdraws the worker's hand-off registrations whenever a job takes its last
/// running slot, or the worker turns quiet: a send would hand the next job to a
/// worker that must release it. A queue's dispatcher registers again with its
/// next fetch.
pub(super) async fn withdraw_when_full<B: Backend>(
    backend: B,
    shared: Arc<Shared>,
    dispatchers: Vec<Arc<Dispatcher<B>>>,
    stop: CancellationToken,
) {
    let mut quiet = shared.controls.quiet.subscribe();
    loop {
        tokio::select! {
            _ = shared.filled.notified() => {}
            r = quiet.changed() => if r.is_err() { return },
            _ = stop.cancelled() => return,
        }
        if shared.running.available_permits() > 0 && !shared.controls.is_quiet() {
            continue;
        }
        let queues: Vec<String> = dispatchers
            .iter()
            .filter(|d| {
                d.registered.store(0, std::sync::atomic::Ordering::Relaxed);
                d.in_place.swap(false, std::sync::atomic::Ordering::Relaxed)
            })
            .map(|d| d.env.queue.to_string())
            .collect();
        if queues.is_empty() {
            continue;
        }
        if let Err(e) = backend
            .withdraw_handoffs(&queues, &dispatchers[0].worker, shared.lease)
            .await
        {
            tracing::debug!(error = %e, "could not withdraw hand-off registrations: a job handed meanwhile is released");
        }
    }
}
