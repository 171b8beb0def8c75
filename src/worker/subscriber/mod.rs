//! One task per subscriber a worker serves: reads its events in batches as
//! slots free up, claims events idle past the lease (a dead consumer's, or
//! failed ones whose backoff is over), runs the handlers on the worker's pool,
//! keeps running events held, and acknowledges in batches.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

mod event;
mod hold;
mod listed;

use event::spawn_run;
use hold::{Held, Ownership, claim, renew_loop, settle_loop, watchdog};
pub(crate) use listed::{RunningEvents, Served};

use super::execute::{SlotGuard, panic_message};
use super::metrics::{EventMetrics, sample_subscriber};
use super::slots::{give_back, slots};
use super::{MAX_DELAY, Shared};
use crate::contract::attempts::{AttemptOutcome, MAX_RECORDS, RunBy};
use crate::contract::topics::{Delivery, EventId, EventRun, EventSettle, Received, Start, Topics};
use crate::job::Outcome as Wants;
use crate::topic::EventContext;
use crate::topic::subscription::Spec;

/// How long a stopping subscriber waits for its gauges' last sample.
const SAMPLE_WAIT: Duration = Duration::from_secs(2);

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
    /// Where its running events are listed for the registry, as subscriber
    /// `index`.
    pub events: Arc<RunningEvents>,
    pub index: usize,
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

/// How a delivery ended. The settle loop settles the delivery the event's
/// place names (see `hold::Slot`); the one here is for an event no longer
/// held.
enum Done {
    /// Handled (or skipped).
    Ack(Delivery),
    /// Claimable again after this delay, with the runs of this delivery and,
    /// for an ordered subscriber's retries in place, the delivery count to
    /// set (the attempts made).
    Retry(Delivery, Duration, Vec<EventRun>, Option<u32>),
    /// Not run (shutdown): claimable at once, its delivery count set back by one.
    Release(Delivery),
    /// Given up, with why and the runs of this delivery.
    Dead(Received, String, Vec<EventRun>),
}

impl Done {
    fn delivery(&self) -> Delivery {
        match self {
            Done::Ack(d) | Done::Retry(d, ..) | Done::Release(d) => *d,
            Done::Dead(ev, ..) => ev.delivery(),
        }
    }

    fn id(&self) -> EventId {
        self.delivery().id
    }
}

struct Names {
    topic: Arc<str>,
    sub: Arc<str>,
    consumer: Arc<str>,
    /// By event type; empty when metrics are off.
    metrics: HashMap<String, EventMetrics>,
    /// Events of types without a handler here; `None` when metrics are off.
    skipped: Option<metrics::Counter>,
    /// Dead-lettered entries that are not events (no type or no data), as
    /// `event="(undecodable)"`; `None` when metrics are off.
    undecodable: Option<metrics::Counter>,
    /// Where its running events are listed, and its index there.
    listed: (Arc<RunningEvents>, usize),
}

async fn run<B: Topics>(backend: B, spec: Arc<Spec>, env: Env) {
    let shared = env.shared.clone();
    let metrics = if shared.metrics {
        EventMetrics::for_events(
            &shared.sink,
            &spec.topic,
            &spec.sub.name,
            spec.handlers.keys().copied(),
        )
    } else {
        HashMap::new()
    };
    let skipped = shared.metrics.then(|| {
        let labels = [
            ("topic", spec.topic.clone()),
            ("subscriber", spec.sub.name.clone()),
        ];
        shared
            .sink
            .with(|| metrics::counter!(crate::worker::metrics::EVENTS_SKIPPED, &labels))
    });
    let undecodable = shared
        .metrics
        .then(|| EventMetrics::undecodable(&shared.sink, &spec.topic, &spec.sub.name));
    let names = Arc::new(Names {
        topic: spec.topic.as_str().into(),
        sub: spec.sub.name.as_str().into(),
        consumer: env.consumer.clone(),
        metrics,
        skipped,
        undecodable,
        listed: (env.events.clone(), env.index),
    });
    let lease = shared.lease;
    tracing::info!(topic = %names.topic, subscriber = %names.sub, events = ?spec.handlers.keys().collect::<Vec<_>>(), "serving subscriber");
    let held: Arc<Held> = Arc::default();
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
    // a dropped worker future (as a killed process) stops renewing, and reading
    let _stop_on_drop = renew_stop.clone().drop_guard();
    // stopped after the last acknowledgements, it samples once more; in a set
    // of its own, so that a dropped worker future (as a killed process) stops
    // it at once, with no sample more
    let sampled = CancellationToken::new();
    let mut sampler = JoinSet::new();
    if let Some(every) = shared.sample_every {
        sampler.spawn(sample_subscriber(
            backend.clone(),
            shared.sink.clone(),
            names.topic.clone(),
            names.sub.clone(),
            every,
            sampled.clone(),
        ));
    }
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
    let watcher = tokio::spawn(watchdog(
        held.clone(),
        names.clone(),
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
    // a subscription's own concurrency bounds its events running and read
    // ahead together: it reads only what its running events leave of it (an
    // ordered subscriber, which no other worker reads meanwhile, reads one
    // ahead of the one it runs)
    let bounded = local.clone().filter(|_| !spec.sub.ordered);
    let claim_every = (lease / 4).min(IDLE_BLOCK);
    let mut next_claim = Instant::now();
    let mut cursor = EventId::ZERO;
    let mut failures = 0u32;
    let mut subscribed = false;
    // the newest event read or claimed here: a subscriber starting at the end
    // that is found gone (deleted, or on a Redis that came back empty) is
    // made again after it, so that the events of its topic made anew, which
    // a publish may have made before this worker found the subscriber gone,
    // are taken
    let mut newest: Option<EventId> = None;
    let mut buf: VecDeque<Received> = VecDeque::new();
    // the next read runs in a task of its own once the buffer is half empty,
    // so that the handlers need not wait for its round trip
    let mut reading: Option<JoinHandle<Read>> = None;
    // a new owner first takes over every pending event, whatever its idle time
    let mut claim_idle = lease;
    while !env.stop.is_cancelled() {
        if !subscribed {
            let start = match (spec.sub.start, newest) {
                (Start::End, Some(id)) => Start::At(id.after()),
                (start, _) => start,
            };
            let made = match backend.subscribe(&names.topic, &names.sub, start).await {
                // a Redis whose clock is now far behind the ids it gave
                // before refuses that start: the end, as first
                Err(crate::Error::InvalidValue { .. }) if start != spec.sub.start => {
                    newest = None;
                    backend
                        .subscribe(&names.topic, &names.sub, spec.sub.start)
                        .await
                }
                made => made,
            };
            match made {
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
                refresh(&mut buf, &held);
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
                refresh(&mut buf, &held);
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
        let room = bounded
            .as_ref()
            .map_or(usize::MAX, |l| l.sem().available_permits());
        let count = read_ahead
            .saturating_sub(buf.len())
            .min(room.saturating_sub(buf.len()));
        if reading.is_none() && buf.len() <= read_ahead / 2 && count > 0 {
            let claiming = Instant::now() >= next_claim;
            // a read that finds nothing new waits for a publish (or the next claim)
            let block = if claiming {
                Duration::ZERO
            } else {
                next_claim
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_millis(1), IDLE_BLOCK)
            };
            let (b, n, held) = (backend.clone(), names.clone(), held.clone());
            // cancelled when the worker's future is dropped (a clean stop
            // waits for the read first)
            let gone = renew_stop.clone();
            reading = Some(tokio::spawn(async move {
                // held (so renewed) as soon as they are read: the loop may take
                // a while to collect them
                let read = async {
                    if claiming {
                        Read::Claimed(
                            claim(&b, &n, &held, (claim_idle, lease), count, cursor).await,
                        )
                    } else {
                        let r = b.read(&n.topic, &n.sub, &n.consumer, count, block).await;
                        // held a lease from when it answered (it may have
                        // waited up to `block` for them)
                        let until = Instant::now() + lease;
                        Read::New(r.map(|e| e.map(|e| held.hold_read(e, until))))
                    }
                };
                // a dropped worker (as a killed process) ends its read at once:
                // left to run, a blocked read would take the events published
                // meanwhile for a consumer that is gone, and they would wait a
                // lease for a claim (a read dropped while it waits takes none)
                tokio::select! {
                    r = read => r,
                    _ = gone.cancelled() => Read::New(Ok(Some(Vec::new()))),
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
                    newest = events.iter().map(|e| e.id).chain(newest).max();
                    buf.extend(events);
                    refresh(&mut buf, &held);
                }
                Ok(None) => {
                    failures += 1;
                    let wait = backoff(failures);
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub, start = ?spec.sub.start, after = ?newest, retry_in = ?wait,
                        "the subscriber or its topic is gone (deleted): creating it again at its start (one at the end: after the newest event taken here)");
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
            // events started ahead of a free slot: twice the concurrency at
            // most (a job's prefetch is for quick jobs, not for events); with
            // none read (its concurrency all running), it waits for a run to end
            n = slots(&shared, local.as_deref(), buf.len().min(shared.concurrency.saturating_mul(2).max(1)).min(u32::MAX as usize) as u32) => n,
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
        held.started(buf.iter().take(start));
        for ev in buf.drain(..start) {
            let run = (local.clone(), abort.clone(), held.clone());
            spawn_run(&env, &spec, &names, &tx, run, ev);
        }
    }
    // a read still out (it ends within a second): its events are released too
    if let Some(h) = reading.take() {
        buf.extend(finished(h.await));
        refresh(&mut buf, &held);
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
    let _ = watcher.await;
    // the gauges' last sample, after the last acknowledgements
    sampled.cancel();
    // a stalled Redis does not hold the stop up (as the queues' sampler)
    if tokio::time::timeout(SAMPLE_WAIT, sampler.join_next())
        .await
        .is_err()
    {
        sampler.abort_all();
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

/// Puts the new deliveries of events in `buf` (a rewind replayed them before
/// they started: their counts start over) in their places; one no longer
/// there (released meanwhile) is left to its release.
fn refresh(buf: &mut VecDeque<Received>, held: &Held) {
    for ev in held.fresh() {
        if let Some(b) = buf.iter_mut().find(|b| b.id == ev.id) {
            *b = ev;
        }
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
        let _ = tx.send(Done::Release(ev.delivery()));
    }
}
