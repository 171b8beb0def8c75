//! The settle loop of a subscriber's held events: their outcomes in batches,
//! each naming the delivery it settles.

use super::*;

/// Acknowledges, schedules retries and dead-letters in batches: whatever
/// finished while the previous call was out goes in the next one.
pub(in crate::worker::subscriber) async fn settle_loop<B: Topics>(
    backend: B,
    names: Arc<Names>,
    mut rx: mpsc::UnboundedReceiver<Done>,
    (keep_dead, by): (Option<u64>, RunBy),
    lease: Duration,
    held: Arc<Held>,
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
        let mut done = vec![first];
        while done.len() < 10_000 {
            match rx.try_recv() {
                Ok(d) => done.push(d),
                Err(_) => break,
            }
        }
        let mut batch = EventSettle {
            by: Some(by.clone()),
            ..EventSettle::default()
        };
        let mut ids = Vec::with_capacity(done.len());
        {
            // not while a renewal of them is out, nor one after (see `Held`)
            let _renewing = held.renewing.lock().await;
            let mut h = lock(&held);
            for d in done {
                // the delivery its place says it settles (see `Slot`)
                let delivery = match h.get_mut(&d.id()) {
                    Some(slot) if slot.stale => {
                        // an outcome of a delivery a replay replaced:
                        // dropped, and the replay is held as its settle
                        // would have left it (see `settled`)
                        slot.stale = false;
                        if matches!(slot.run, Run::Again) {
                            slot.run = Run::Waiting;
                        }
                        continue;
                    }
                    Some(slot) => {
                        slot.settling = true;
                        slot.delivery
                    }
                    None => d.delivery(),
                };
                ids.push(delivery.id);
                match d {
                    Done::Ack(_) => batch.acks.push(delivery),
                    Done::Retry(_, delay, runs, count) => {
                        batch.retries.push((delivery, idle(delay), count));
                        batch.runs.extend(runs);
                    }
                    Done::Release(_) => batch.retries.push((
                        delivery,
                        lease,
                        Some(delivery.count.saturating_sub(1)),
                    )),
                    Done::Dead(ev, error, runs) => {
                        batch.dead.push((delivery, ev, error));
                        batch.runs.extend(runs);
                    }
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        let mut tries = 0;
        // no claim lands during this call, nor after it until its events are
        // out of the set (see `Held`)
        let _calls = loop {
            let calls = held.calls.lock().await;
            if tries > 0 {
                refresh(&held, &mut batch);
            }
            match backend
                .settle_events(&names.topic, &names.sub, &names.consumer, &batch, keep_dead)
                .await
            {
                Ok(()) => break calls,
                Err(e) => {
                    tries += 1;
                    if tries >= SETTLE_TRIES {
                        tracing::error!(topic = %names.topic, subscriber = %names.sub, error = %e, events = batch.acks.len() + batch.retries.len() + batch.dead.len(),
                            "could not settle events; they will be delivered again after the lease");
                        break calls;
                    }
                }
            }
            drop(calls);
            tokio::time::sleep(backoff(tries)).await;
        };
        held.settled(&ids);
    }
}

/// Before a settle call is tried again: an event that this worker's own
/// claim took again meanwhile (found held, its run ended: a new delivery
/// count) is settled as the delivery held now, which the backend applies;
/// one a read delivered anew (a rewind: its place says it runs again) keeps
/// the delivery its outcome came from, which the backend does not apply.
fn refresh(held: &Held, batch: &mut EventSettle) {
    let h = lock(held);
    let now = |d: &mut Delivery| {
        if let Some(slot) = h.get(&d.id).filter(|s| matches!(s.run, Run::Ended)) {
            *d = slot.delivery;
        }
    };
    batch.acks.iter_mut().for_each(now);
    batch.retries.iter_mut().for_each(|r| now(&mut r.0));
    batch.dead.iter_mut().for_each(|x| now(&mut x.0));
}
