//! One task per subscriber a worker serves: reads its events in batches as
//! slots free up, claims events idle past the lease (a dead consumer's, or
//! failed ones whose backoff is over), runs the handlers on the worker's pool,
//! keeps running events held, and acknowledges in batches.

use std::collections::{HashMap, HashSet, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

use super::dispatch::{give_back, slots};
use super::execute::{SlotGuard, panic_message};
use super::metrics::{EventMetrics, sample_subscriber};
use super::{MAX_DELAY, Shared};
use crate::contract::attempts::{AttemptOutcome, MAX_RECORDS, RunBy};
use crate::contract::topics::{EventId, EventRun, EventSettle, Received, Topics};
use crate::job::Outcome as Wants;
use crate::topic::EventContext;
use crate::topic::subscription::Spec;

/// What a subscriber task needs from its worker.
pub(crate) struct Env {
    pub shared: Arc<Shared>,
    /// The consumer name: the worker's id.
    pub consumer: Arc<str>,
    pub stop: CancellationToken,
    pub abort: CancellationToken,
    /// Where handler runs are spawned (the worker waits for it on shutdown).
    pub tracker: TaskTracker,
    /// Held until the read loop ended: no run is spawned after.
    pub reading: TaskTrackerToken,
    /// Cancelled once the worker stopped waiting for runs (all ended, or the
    /// grace period and the abort wait are over): settle what finished and go.
    pub drained: CancellationToken,
}

/// Starts a subscriber's task (a plain function, so that the worker need not
/// know its backend implements [`Topics`]).
pub(crate) type Starter<B> = fn(B, Arc<Spec>, Env) -> BoxFuture<'static, ()>;

pub(crate) fn starter<B: Topics>(backend: B, spec: Arc<Spec>, env: Env) -> BoxFuture<'static, ()> {
    Box::pin(run(backend, spec, env))
}

/// Events read ahead of free slots (at least the worker's fetch size).
const READ_AHEAD: usize = 256;
/// The longest a read waits for an event while idle.
const IDLE_BLOCK: Duration = Duration::from_secs(1);
/// Settle attempts before a batch is given up (its events are then delivered again).
const SETTLE_TRIES: u32 = 8;

/// A read's or a claim's result.
enum Read {
    New(crate::Result<Option<Vec<Received>>>),
    Claimed(crate::Result<Option<crate::contract::topics::Claimed>>),
}

enum Done {
    /// Handled (or skipped), and whether it was delivered before (its attempt
    /// records, if any, are deleted).
    Ack(EventId, bool),
    /// Claimable again after this delay, with the runs of this delivery and,
    /// for an ordered subscriber's retries in place, the delivery count to
    /// set (the attempts made).
    Retry(EventId, Duration, Vec<EventRun>, Option<u32>),
    /// Not run (shutdown): claimable at once, its delivery count set back to this.
    Release(EventId, u32),
    /// Given up, with why and the runs of this delivery.
    Dead(Received, String, Vec<EventRun>),
}

struct Names {
    topic: Arc<str>,
    sub: Arc<str>,
    consumer: Arc<str>,
    /// By event type; empty when metrics are off.
    metrics: HashMap<String, EventMetrics>,
}

async fn run<B: Topics>(backend: B, spec: Arc<Spec>, env: Env) {
    let shared = env.shared.clone();
    let metrics = if shared.metrics {
        EventMetrics::for_events(
            &shared.embed.sink,
            &spec.topic,
            &spec.sub.name,
            spec.handlers.keys().copied(),
        )
    } else {
        HashMap::new()
    };
    let names = Arc::new(Names {
        topic: spec.topic.as_str().into(),
        sub: spec.sub.name.as_str().into(),
        consumer: env.consumer.clone(),
        metrics,
    });
    let lease = shared.lease;
    tracing::info!(topic = %names.topic, subscriber = %names.sub, events = ?spec.handlers.keys().collect::<Vec<_>>(), "serving subscriber");
    let held: Arc<Mutex<HashSet<EventId>>> = Arc::default();
    let (tx, rx) = mpsc::unbounded_channel();
    let keep_dead = shared.retention.max_count;
    let by = RunBy {
        worker: env.consumer.to_string(),
        host: crate::contract::admin::host_name(),
    };
    let acker = tokio::spawn(settle_loop(
        backend.clone(),
        names.clone(),
        rx,
        (keep_dead, by),
        lease,
        held.clone(),
        env.drained.clone(),
    ));
    let renew_stop = CancellationToken::new();
    // a dropped worker future (as a killed process) stops renewing and sampling
    let _stop_on_drop = renew_stop.clone().drop_guard();
    let sampler = shared.sample_every.map(|every| {
        tokio::spawn(sample_subscriber(
            backend.clone(),
            shared.embed.sink.clone(),
            names.topic.clone(),
            names.sub.clone(),
            every,
            renew_stop.clone(),
        ))
    });
    // an ordered subscriber is read by the consumer that owns it alone
    let owned = spec
        .sub
        .ordered
        .then(|| Arc::new(Ownership::new(&env.abort)));
    let renewer = tokio::spawn(renew_loop(
        backend.clone(),
        names.clone(),
        held.clone(),
        owned.clone(),
        lease,
        renew_stop.clone(),
    ));
    let limit = if spec.sub.ordered {
        Some(1)
    } else {
        spec.sub.concurrency
    };
    let local = limit.map(|n| Arc::new(super::limit::Limit::new(n)));
    // events are read ahead of free slots, in large batches (a read costs about
    // the same for 1 event as for 100); they are held, and renewed, meanwhile
    let read_ahead = limit
        .unwrap_or(usize::MAX)
        .min(READ_AHEAD.max(shared.fetch_max as usize));
    let claim_every = (lease / 4).min(IDLE_BLOCK);
    let mut next_claim = Instant::now();
    let mut cursor = EventId::ZERO;
    let mut failures = 0u32;
    let mut subscribed = false;
    let mut buf: VecDeque<Received> = VecDeque::new();
    // the next read runs in a task of its own once the buffer is half empty,
    // so that the handlers need not wait for its round trip
    let mut reading: Option<JoinHandle<Read>> = None;
    // a new owner first takes over every pending event, whatever its idle time
    let mut claim_idle = lease;
    while !env.stop.is_cancelled() {
        if !subscribed {
            match backend
                .subscribe(&names.topic, &names.sub, spec.sub.start)
                .await
            {
                Ok(_) => subscribed = true,
                Err(e) => {
                    failures += 1;
                    let wait = backoff(failures);
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub, error = %e, retry_in = ?wait, "cannot create the subscriber");
                    if stopped_during(wait, &env.stop).await {
                        break;
                    }
                    continue;
                }
            }
        }
        if shared.controls.is_quiet() {
            // an operator quieted the worker: what it read and did not start
            // goes back, and it reads nothing until resumed (an ordered
            // subscriber's ownership stays here meanwhile)
            if let Some(h) = reading.take() {
                buf.extend(finished(h.await));
            }
            release(&tx, buf.drain(..).collect());
            let mut quiet = shared.controls.quiet.subscribe();
            tokio::select! {
                _ = quiet.wait_for(|q| !*q) => {}
                _ = env.stop.cancelled() => break,
            }
            continue;
        }
        if let Some(owned) = owned.as_ref().filter(|o| !o.held()) {
            // not (or no longer) the owner: what it read goes back first
            if let Some(h) = reading.take() {
                buf.extend(finished(h.await));
            }
            release(&tx, buf.drain(..).collect());
            let wait = match backend
                .own(&names.topic, &names.sub, &names.consumer, Some(lease))
                .await
            {
                Ok(true) => {
                    tracing::info!(topic = %names.topic, subscriber = %names.sub, "this worker owns the ordered subscriber now");
                    owned.taken(&env.abort);
                    (cursor, next_claim, claim_idle) =
                        (EventId::ZERO, Instant::now(), Duration::ZERO);
                    failures = 0;
                    None
                }
                Ok(false) => Some((lease / 3).min(IDLE_BLOCK)),
                Err(e) => {
                    failures += 1;
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub, error = %e, "cannot take the ordered subscriber");
                    Some(backoff(failures))
                }
            };
            if let Some(wait) = wait {
                if stopped_during(wait, &env.stop).await {
                    break;
                }
                continue;
            }
        }
        if reading.is_none() && buf.len() <= read_ahead / 2 {
            let claiming = Instant::now() >= next_claim;
            // a read that finds nothing new waits for a publish (or the next claim)
            let block = if claiming {
                Duration::ZERO
            } else {
                next_claim
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(1), IDLE_BLOCK)
            };
            let count = read_ahead - buf.len();
            let (b, n, held) = (backend.clone(), names.clone(), held.clone());
            reading = Some(tokio::spawn(async move {
                // held (so renewed) as soon as they are read: the loop may take
                // a while to collect them
                let hold = |events: Vec<Received>| {
                    let mut h = lock(&held);
                    // a claim may return one this worker still holds (its
                    // renewal failed for a lease): that run settles it
                    events.into_iter().filter(|ev| h.insert(ev.id)).collect()
                };
                if claiming {
                    let r = b
                        .claim(&n.topic, &n.sub, &n.consumer, claim_idle, count, cursor)
                        .await;
                    Read::Claimed(r.map(|c| {
                        c.map(|mut c| {
                            c.events = hold(std::mem::take(&mut c.events));
                            c
                        })
                    }))
                } else {
                    let r = b.read(&n.topic, &n.sub, &n.consumer, count, block).await;
                    Read::New(r.map(|e| e.map(hold)))
                }
            }));
        }
        if let Some(h) = reading.take_if(|h| buf.is_empty() || h.is_finished()) {
            let got = match h.await {
                Ok(Read::Claimed(r)) => r.map(|c| {
                    c.map(|c| {
                        cursor = c.next;
                        if c.next == EventId::ZERO {
                            next_claim = Instant::now() + claim_every;
                            claim_idle = lease;
                        }
                        c.events
                    })
                }),
                Ok(Read::New(r)) => r,
                Err(e) => Err(crate::Error::Protocol(format!("the read task failed: {e}"))),
            };
            match got {
                Ok(Some(events)) => {
                    failures = 0;
                    buf.extend(events);
                }
                Ok(None) => {
                    failures += 1;
                    let wait = backoff(failures);
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub, start = ?spec.sub.start, retry_in = ?wait,
                        "the subscriber or its topic is gone (deleted): creating it again at its start");
                    subscribed = false;
                    if stopped_during(wait, &env.stop).await {
                        break;
                    }
                }
                Err(e) => {
                    failures += 1;
                    let wait = backoff(failures);
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub, error = %e, retry_in = ?wait, "reading events failed");
                    if stopped_during(wait, &env.stop).await {
                        break;
                    }
                }
            }
            continue;
        }
        let mut quiet = shared.controls.quiet.subscribe();
        let n = tokio::select! {
            n = slots(&shared, local.as_deref(), buf.len().min(u32::MAX as usize) as u32) => n,
            _ = env.stop.cancelled() => break,
            // what it read goes back at the top of the loop
            _ = quiet.wait_for(|q| *q) => continue,
        };
        if shared.controls.is_quiet() {
            give_back(&shared, local.as_deref(), n);
            continue;
        }
        // an ordered subscriber's owner that lost it meanwhile starts nothing more
        let start = match &owned {
            Some(o) if !o.held() => 0,
            _ => (n as usize).min(buf.len()),
        };
        give_back(&shared, local.as_deref(), n - start as u32);
        let abort = owned.as_ref().map(|o| o.token());
        for ev in buf.drain(..start) {
            spawn_run(&env, &spec, &names, &tx, local.clone(), abort.clone(), ev);
        }
    }
    // a read still out (it ends within a second): its events are released too
    if let Some(h) = reading.take() {
        buf.extend(finished(h.await));
    }
    // read but not started: another consumer may claim them at once
    release(&tx, buf.drain(..).collect());
    drop(env.reading);
    // every run is in the worker's tracker: wait for them (the worker cancels
    // them after its grace period, and gives up on a run that ignores that),
    // then flush the last acknowledgements
    let all_ended = tokio::select! {
        _ = env.tracker.wait() => true,
        _ = env.drained.cancelled() => false,
    };
    renew_stop.cancel();
    drop(tx);
    let _ = acker.await;
    let _ = renewer.await;
    if let Some(sampler) = sampler {
        let _ = sampler.await;
    }
    // after the last acknowledgements, so the next owner starts after them; not
    // while a run that ignored its cancellation may still go on (its lease ends it)
    if all_ended
        && owned.is_some_and(|o| o.held())
        && let Err(e) = backend
            .own(&names.topic, &names.sub, &names.consumer, None)
            .await
    {
        tracing::debug!(error = %e, "could not give up the ordered subscriber");
    }
    if let Err(e) = backend
        .leave(&names.topic, &names.sub, &names.consumer)
        .await
    {
        tracing::debug!(error = %e, "could not remove the consumer from its subscriber");
    }
}

/// The events of a read that ended (held by its task).
fn finished(r: Result<Read, tokio::task::JoinError>) -> Vec<Received> {
    match r {
        Ok(Read::New(Ok(Some(events)))) => events,
        Ok(Read::Claimed(Ok(Some(c)))) => c.events,
        _ => Vec::new(),
    }
}

/// Sleeps `wait`; whether the worker stopped meanwhile.
async fn stopped_during(wait: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(wait) => false,
        _ = stop.cancelled() => true,
    }
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64 << failures.min(8)).min(Duration::from_secs(2))
}

/// Events read but not started (shutdown): claimable by another consumer at once.
fn release(tx: &mpsc::UnboundedSender<Done>, events: Vec<Received>) {
    for ev in events {
        let _ = tx.send(Done::Release(ev.id, ev.deliveries.saturating_sub(1)));
    }
}

fn spawn_run(
    env: &Env,
    spec: &Arc<Spec>,
    names: &Arc<Names>,
    tx: &mpsc::UnboundedSender<Done>,
    local: Option<Arc<super::limit::Limit>>,
    abort: Option<CancellationToken>,
    ev: Received,
) {
    let slot = SlotGuard {
        shared: env.shared.clone(),
        queue_slots: local,
    };
    let (spec, names, tx) = (spec.clone(), names.clone(), tx.clone());
    // an ordered subscriber's runs are also cancelled when its worker loses it
    let abort = abort.unwrap_or_else(|| env.abort.clone());
    let (shared, stop) = (env.shared.clone(), env.stop.clone());
    env.tracker.spawn(async move {
        let done = handle(ev, &spec, &names, &shared, &stop, &abort).await;
        // held (and renewed) until the settle loop has settled it
        let _ = tx.send(done);
        drop(slot);
    });
}

/// An ordered subscriber's ownership by this worker: whether it holds it, when
/// it last renewed it, and the token its runs are cancelled with once it is lost.
struct Ownership {
    owned: AtomicBool,
    renewed: Mutex<Instant>,
    runs: Mutex<CancellationToken>,
}

impl Ownership {
    fn new(abort: &CancellationToken) -> Self {
        Ownership {
            owned: AtomicBool::new(false),
            renewed: Mutex::new(Instant::now()),
            runs: Mutex::new(abort.child_token()),
        }
    }

    fn held(&self) -> bool {
        self.owned.load(Ordering::SeqCst)
    }

    /// Taken (or renewed): runs start under a fresh token.
    fn taken(&self, abort: &CancellationToken) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        if !self.owned.swap(true, Ordering::SeqCst) {
            *self.runs.lock().unwrap_or_else(|e| e.into_inner()) = abort.child_token();
        }
    }

    /// Renewed.
    fn renewed(&self) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Lost (another worker took it, or it went unrenewed too long): what runs
    /// is cancelled, and nothing more starts.
    fn lost(&self) {
        self.owned.store(false, Ordering::SeqCst);
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).cancel();
    }

    /// When it was last taken or renewed.
    fn since_renewed(&self) -> Duration {
        self.renewed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    fn token(&self) -> CancellationToken {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn lock(held: &Mutex<HashSet<EventId>>) -> std::sync::MutexGuard<'_, HashSet<EventId>> {
    // a set of ids cannot be left half-changed
    held.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs one event (retrying in place when ordered) and says how it ended.
async fn handle(
    mut ev: Received,
    spec: &Spec,
    names: &Names,
    shared: &Shared,
    stop: &CancellationToken,
    abort: &CancellationToken,
) -> Done {
    if ev.to.as_deref().is_some_and(|to| *to != *names.sub) {
        // a dead letter requeued for another subscriber
        return Done::Ack(ev.id, ev.deliveries > 1);
    }
    let (Some(ty), Some(data)) = (ev.event_type.as_deref(), ev.data.as_deref()) else {
        let error = "not an event: the entry has no `type` or no `data` field (UTF-8)".to_string();
        tracing::error!(topic = %names.topic, subscriber = %names.sub, event.id = %ev.id, %error, "dead-lettered");
        return Done::Dead(ev, error, Vec::new());
    };
    let Some(handler) = spec.handlers.get(ty) else {
        tracing::debug!(topic = %names.topic, subscriber = %names.sub, event.id = %ev.id, event.type = %ty, "no handler for this event type in this subscriber: skipped");
        return Done::Ack(ev.id, ev.deliveries > 1);
    };
    let opts = handler.options();
    let max = opts.max_attempts.max(1);
    if ev.deliveries > max {
        let error = format!(
            "delivered {} times without finishing (max_attempts {max}): its runs never ended (the worker died each time?)",
            ev.deliveries
        );
        tracing::error!(topic = %names.topic, subscriber = %names.sub, event.id = %ev.id, %error, "dead-lettered");
        return Done::Dead(ev, error, Vec::new());
    }
    let mut attempt = ev.deliveries;
    // this delivery's runs (an ordered subscriber retries in place)
    let mut runs = Vec::new();
    loop {
        // the worker turned quiet: it goes back unstarted
        let running = if stop.is_cancelled() || shared.controls.is_quiet() {
            None
        } else if let Ok(p) = shared.running.try_acquire() {
            Some(p)
        } else {
            let mut quiet = shared.controls.quiet.subscribe();
            tokio::select! {
                biased;
                _ = stop.cancelled() => None,
                _ = quiet.wait_for(|q| *q) => None,
                p = shared.running.acquire() => p.ok(),
            }
        };
        let Some(_running) = running else {
            // shutdown (or quiet) before it ran: not an attempt
            if !runs.is_empty() {
                // an ordered subscriber's retry in place: the attempts made count
                return Done::Retry(ev.id, Duration::ZERO, runs, Some(attempt.saturating_sub(1)));
            }
            return Done::Release(ev.id, attempt.saturating_sub(1));
        };
        let span = tracing::info_span!("event", topic = %names.topic, subscriber = %names.sub,
            event.id = %ev.id, event.r#type = %ty, attempt);
        let cancel = abort.child_token();
        let ctx = EventContext::new(ev.id, names.topic.clone(), names.sub.clone(), attempt)
            .with_parts(shared.data.clone(), cancel.clone());
        let timeout = shared.job_timeout.unwrap_or(opts.timeout).min(MAX_DELAY);
        let m = names.metrics.get(ty);
        if let Some(m) = m {
            m.started.increment(1);
        }
        let began = std::time::Instant::now();
        let result = async {
            let fut = match handler.start(data, ctx) {
                Ok(f) => f,
                Err(error) => return Err((error, Wants::Fatal, AttemptOutcome::Error)),
            };
            let guarded = AssertUnwindSafe(fut).catch_unwind();
            let r = tokio::select! {
                r = tokio::time::timeout(timeout, guarded) => r,
                _ = cancel.cancelled() => return Err(("cancelled: the worker shut down".into(), Wants::RetryAfter(Duration::ZERO), AttemptOutcome::Cancelled)),
            };
            let r = match r {
                Err(_) => {
                    cancel.cancel();
                    return Err((format!("timed out after {timeout:?}"), Wants::Retry, AttemptOutcome::Timeout));
                }
                Ok(Err(p)) => {
                    let msg = panic_message(&*p);
                    return Err((format!("panicked: {msg}"), Wants::Retry, AttemptOutcome::Panic));
                }
                Ok(Ok(r)) => r,
            };
            r.map_err(|e| (e.chain(), e.outcome(), AttemptOutcome::Error))
        }
        .instrument(span.clone())
        .await;
        let ended = std::time::Instant::now();
        if let Some(m) = m {
            m.run.record(ended.duration_since(began).as_secs_f64());
        }
        let count = |c: fn(&EventMetrics) -> &metrics::Counter| {
            if let Some(m) = m {
                c(m).increment(1);
            }
        };
        let _e = span.enter();
        let (error, wants, outcome) = match result {
            Ok(()) => {
                count(|m| &m.succeeded);
                return Done::Ack(ev.id, ev.deliveries > 1);
            }
            Err(e) => e,
        };
        let outcome = if abort.is_cancelled() {
            AttemptOutcome::Cancelled
        } else {
            outcome
        };
        runs.push(EventRun::new(
            ev.id,
            attempt,
            began,
            ended,
            outcome,
            Some(error.clone()),
        ));
        // the backend keeps the last MAX_RECORDS
        if runs.len() > MAX_RECORDS {
            runs.remove(0);
        }
        // a dead letter says how often it ran, retries in place included
        ev.deliveries = ev.deliveries.max(attempt);
        if abort.is_cancelled() {
            count(|m| &m.cancelled);
            return Done::Retry(ev.id, Duration::ZERO, runs, Some(attempt));
        }
        let delay = match wants {
            Wants::Fatal => {
                count(|m| &m.dead);
                tracing::error!(%error, "event failed for good: dead-lettered");
                return Done::Dead(ev, error, runs);
            }
            _ if attempt >= max => {
                count(|m| &m.dead);
                tracing::error!(%error, "event failed on its last attempt: dead-lettered");
                return Done::Dead(ev, error, runs);
            }
            Wants::RetryAfter(d) => d,
            _ => shared.retry.delay(opts.backoff, attempt),
        };
        let delay = delay.min(shared.lease);
        count(|m| &m.retried);
        tracing::warn!(%error, retry_in = ?delay, "event failed; retrying");
        if !spec.sub.ordered {
            return Done::Retry(ev.id, delay, runs, None);
        }
        drop(_e);
        // ordered: the next event waits for this one, held (and renewed) meanwhile
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.cancelled() => return Done::Retry(ev.id, Duration::ZERO, runs, Some(attempt)),
        }
        attempt += 1;
    }
}

/// Acknowledges, schedules retries and dead-letters in batches: whatever
/// finished while the previous call was out goes in the next one.
async fn settle_loop<B: Topics>(
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
            Done::Ack(id, again) => {
                batch.acks.push(id);
                if again {
                    batch.redelivered.push(id);
                }
            }
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
async fn renew_loop<B: Topics>(
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
