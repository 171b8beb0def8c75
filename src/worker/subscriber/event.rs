//! One event's run: its handler on the worker's pool, with its timeout,
//! cancellation and retries, and how it ended.

use super::*;

pub(super) fn spawn_run(
    env: &Env,
    spec: &Arc<Spec>,
    names: &Arc<Names>,
    tx: &mpsc::UnboundedSender<Done>,
    (local, abort, held): (
        Option<Arc<crate::worker::limit::Limit>>,
        Option<CancellationToken>,
        Arc<Held>,
    ),
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
        let mut ev = ev;
        loop {
            let id = ev.id;
            let lost = held.run_token(id);
            let done = handle(ev, &spec, &names, &shared, &stop, (&abort, &lost)).await;
            // a rewind replayed it while it ran (a new delivery): it runs
            // again, and this run's outcome, of the delivery replaced, goes;
            // else the outcome goes to the settle loop (held, and renewed,
            // until settled)
            match held.ended(id, done, &tx) {
                Some(again) => ev = again,
                None => break,
            }
        }
        drop(slot);
    });
}

/// Runs one event (retrying in place when ordered) and says how it ended.
async fn handle(
    mut ev: Received,
    spec: &Spec,
    names: &Names,
    shared: &Shared,
    stop: &CancellationToken,
    (abort, lost): (&CancellationToken, &CancellationToken),
) -> Done {
    // the delivery run, as delivered (an ordered subscriber's retries in
    // place count on in `attempt`)
    let delivery = ev.delivery();
    if ev.to.as_deref().is_some_and(|to| *to != *names.sub) {
        // a dead letter requeued for another subscriber
        return Done::Ack(delivery);
    }
    // an empty type names no event type: that of a requeued dead letter that
    // had none
    let ty = ev.event_type.as_deref().filter(|t| !t.is_empty());
    let (Some(ty), Some(data)) = (ty, ev.data.as_deref()) else {
        let error =
            "not an event: the entry has no `type` (or an empty one) or no `data` field (UTF-8)"
                .to_string();
        tracing::error!(topic = %names.topic, subscriber = %names.sub, event.id = %ev.id, %error, "dead-lettered");
        if let Some(c) = &names.undecodable {
            c.increment(1);
        }
        return Done::Dead(ev, error, Vec::new());
    };
    let Some(handler) = spec.handlers.get(ty) else {
        tracing::debug!(topic = %names.topic, subscriber = %names.sub, event.id = %ev.id, event.type = %ty, "no handler for this event type in this subscriber: skipped");
        if let Some(c) = &names.skipped {
            c.increment(1);
        }
        return Done::Ack(delivery);
    };
    let opts = handler.options();
    let max = opts.max_attempts.max(1);
    if ev.deliveries > max {
        let error = format!(
            "delivered {} times without finishing (max_attempts {max}): its runs never ended (the worker died each time?)",
            ev.deliveries
        );
        tracing::error!(topic = %names.topic, subscriber = %names.sub, event.id = %ev.id, %error, "dead-lettered");
        if let Some(m) = names.metrics.get(ty) {
            m.dead.increment(1);
        }
        return Done::Dead(ev, error, Vec::new());
    }
    let mut attempt = ev.deliveries;
    // this delivery's runs (an ordered subscriber retries in place)
    let mut runs = Vec::new();
    loop {
        // the worker turned quiet, or (between an ordered subscriber's
        // retries in place) it lost the subscriber or another consumer
        // claimed the event: it goes back unstarted
        let running = if stop.is_cancelled()
            || shared.controls.is_quiet()
            || abort.is_cancelled()
            || lost.is_cancelled()
        {
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
                return Done::Retry(
                    delivery,
                    Duration::ZERO,
                    runs,
                    Some(attempt.saturating_sub(1)),
                );
            }
            return Done::Release(delivery);
        };
        let span = tracing::info_span!("event", topic = %names.topic, subscriber = %names.sub,
            event.id = %ev.id, event.r#type = %ty, attempt);
        let cancel = abort.child_token();
        let ctx = EventContext::new(ev.id, names.topic.clone(), names.sub.clone(), attempt)
            .with_parts(shared.data.clone(), cancel.clone());
        let timeout = shared.job_timeout.unwrap_or(opts.timeout).min(MAX_DELAY);
        let m = names.metrics.get(ty);
        // data that does not decode never runs: dead, neither started nor
        // timed (as a job whose arguments do not decode)
        let fut = match span.in_scope(|| handler.start(data, ctx)) {
            Ok(f) => shared.sink.recording(f),
            Err(error) => {
                let now = std::time::Instant::now();
                let run = EventRun::new(
                    ev.id,
                    attempt,
                    now,
                    now,
                    AttemptOutcome::Error,
                    Some(error.clone()),
                );
                runs.push(run);
                if runs.len() > MAX_RECORDS {
                    runs.remove(0);
                }
                ev.deliveries = ev.deliveries.max(attempt);
                if let Some(m) = m {
                    m.dead.increment(1);
                }
                span.in_scope(|| tracing::error!(%error, "event failed for good: dead-lettered"));
                return Done::Dead(ev, error, runs);
            }
        };
        if let Some(m) = m {
            m.started.increment(1);
        }
        let began = std::time::Instant::now();
        // listed by the registry's beats until this iteration ends (given
        // back before the running slot, declared before it)
        let _listed = names.listed.0.start(names.listed.1, ty, ev.id, began);
        let result = async {
            let guarded = AssertUnwindSafe(fut).catch_unwind();
            let r = tokio::select! {
                r = tokio::time::timeout(timeout, guarded) => r,
                // the worker's abort: the handler may cancel its own token
                // (a child of it) to stop tasks it shares it with
                _ = abort.cancelled() => return Err(("cancelled: the worker shut down".into(), Wants::RetryAfter(Duration::ZERO), AttemptOutcome::Released)),
                // another consumer claimed it (this worker's hold ran out): it
                // runs there, not here beside it (whatever the handler
                // spawned learns of it through the token)
                _ = lost.cancelled() => {
                    cancel.cancel();
                    return Err(("cancelled: another consumer claimed it (this worker's hold ran out)".into(), Wants::RetryAfter(Duration::ZERO), AttemptOutcome::Released));
                }
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
                return Done::Ack(delivery);
            }
            Err(e) => e,
        };
        // cut short by the worker (shutdown past the grace period, or its
        // ordered subscriber lost): recorded, not counted, as a job's release
        let outcome = if abort.is_cancelled() || lost.is_cancelled() {
            AttemptOutcome::Released
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
        if abort.is_cancelled() || lost.is_cancelled() {
            count(|m| &m.cancelled);
            // its delivery count given back: the attempts made before it in
            // place (an ordered subscriber's) still count
            return Done::Retry(
                delivery,
                Duration::ZERO,
                runs,
                Some(attempt.saturating_sub(1)),
            );
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
            return Done::Retry(delivery, delay, runs, None);
        }
        drop(_e);
        // ordered: the next event waits for this one, held (and renewed) meanwhile
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.cancelled() => return Done::Retry(delivery, Duration::ZERO, runs, Some(attempt)),
            _ = abort.cancelled() => return Done::Retry(delivery, Duration::ZERO, runs, Some(attempt)),
            _ = lost.cancelled() => return Done::Retry(delivery, Duration::ZERO, runs, Some(attempt)),
        }
        attempt += 1;
    }
}
