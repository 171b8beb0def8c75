//! What a subscriber holds: the ordered subscriber's ownership, and the events
//! read or running, renewed while held and settled in batches.

use super::*;
use crate::contract::topics::{Claimed, Delivery, Renewed};

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

/// The events a subscriber read or runs, renewed until settled.
#[derive(Default)]
pub(super) struct Held {
    /// Each held event's place: its run (see [`Run`]), and whether a settle
    /// call is settling it (from before its first try until it is out of the
    /// map): renewals leave those to it. A renewal of one landing after its
    /// settle would restart its idle time (a retry would come after a whole
    /// lease, not its backoff; an acknowledged event would be reported
    /// gone), also between the tries of a settle whose reply was lost. One
    /// map, so that a run's start and end take one lock each.
    ids: Mutex<HashMap<EventId, Slot>>,
    /// Held around each renewal call (from its reading of `ids` on), and
    /// while a settle marks its events settling: a settle waits for a
    /// renewal of its events that is out, never a renewal for a settle (one
    /// that stalls, up to the response timeout and its tries, would hold the
    /// running events' renewals back past their lease, and another consumer
    /// would claim them while they run).
    renewing: tokio::sync::Mutex<()>,
    /// Held around each claim (until its events are in `ids`) and each settle
    /// call (until its events are out of `ids`): a claim landing between a
    /// settle's call and its events' leaving `ids` would take a retry due at
    /// once for one still running, and leave it unrun for a lease.
    calls: tokio::sync::Mutex<()>,
    /// Events a read delivered again (a rewind replays them) while the copy
    /// read before waits unstarted: the read loop puts these in its place.
    fresh: Mutex<Vec<Received>>,
}

/// A held event's place (see [`Held`]).
pub(super) struct Slot {
    run: Run,
    settling: bool,
    /// The delivery its next outcome settles: the one read or claimed last
    /// (a claim of one held already is of its run under way, which settles
    /// it; a read's is a replay's, see [`Run`]).
    delivery: Delivery,
    /// Its ended run's outcome, not yet in a settle call, is of a delivery a
    /// read replaced since (a rewind replays it): it is dropped, not settled
    /// (see [`Held::hold_read`]).
    stale: bool,
    /// Cancelled once a renewal finds its event claimed by another consumer
    /// (this worker's hold ran out): the run under way stops, as a job's run
    /// whose lease was lost, rather than run beside the claimer's. Each run
    /// takes a fresh one ([`Held::run_token`]). Cancelled too when its hold
    /// runs out on this worker's clock ([`watchdog`]).
    lost: CancellationToken,
    /// When its hold runs out on this worker's clock: a lease after the read
    /// or claim that delivered it, or the last renewal that found it held,
    /// was sent (a blocking read: when it answered). Another consumer may
    /// claim it from then on.
    until: Instant,
}

impl Slot {
    pub(super) fn new(delivery: Delivery, until: Instant) -> Self {
        Slot {
            run: Run::Waiting,
            settling: false,
            delivery,
            stale: false,
            lost: CancellationToken::new(),
            until,
        }
    }
}

/// Where the run of a held event is, for a read that delivers it again (a
/// rewind passed it): Redis (and the memory backend) then make its pending
/// entry a new delivery, with a count of 1, which the run under way must
/// not settle, or the replay is lost.
#[derive(Default)]
enum Run {
    /// Read or claimed, not started.
    #[default]
    Waiting,
    /// Its handler runs, with the delivery a read made again meanwhile: run
    /// once this run ended, in its place (its outcome is not settled).
    Running(Option<Box<Received>>),
    /// Its run ended and its outcome waits to be settled.
    Ended,
    /// As `Ended`, but a read delivered it again since: it stays held (the
    /// read loop runs it) when the ended run's outcome is settled.
    Again,
}

impl Held {
    /// `events` read or claimed, held from now on; but those held already:
    /// a claim may return one this worker still holds (its renewal failed for
    /// a lease), which that run settles.
    /// Each is held until `until` unless renewed (see [`Slot::until`]).
    pub(super) fn hold(&self, events: Vec<Received>, until: Instant) -> Vec<Received> {
        let mut h = lock(self);
        events
            .into_iter()
            .filter(|ev| match newly(&mut h, ev, until) {
                None => true,
                Some(slot) => {
                    // its run under way settles the delivery claimed
                    slot.delivery = ev.delivery();
                    slot.until = slot.until.max(until);
                    false
                }
            })
            .collect()
    }

    /// `events` a read took, held from now on. One held already was
    /// delivered again by a rewind (a new delivery, its count started over):
    /// if it runs, it runs again once that run ended (see [`Held::ended`]);
    /// if it ended, it runs again (its outcome, not yet settled, is dropped
    /// if no settle call took it yet; one out names the old delivery, which
    /// the backend does not apply to the new one); if it waits unstarted,
    /// the new delivery takes its place ([`Held::fresh`]).
    /// Each is held until `until` unless renewed (see [`Slot::until`]).
    pub(super) fn hold_read(&self, events: Vec<Received>, until: Instant) -> Vec<Received> {
        let mut h = lock(self);
        let mut fresh = Vec::new();
        let events = events
            .into_iter()
            .filter_map(|ev| {
                let Some(slot) = newly(&mut h, &ev, until) else {
                    return Some(ev);
                };
                // what settles it from now on is the new delivery
                slot.delivery = ev.delivery();
                slot.until = slot.until.max(until);
                match &mut slot.run {
                    Run::Running(again) => {
                        *again = Some(Box::new(ev));
                        None
                    }
                    r @ Run::Ended => {
                        *r = Run::Again;
                        slot.stale = !slot.settling;
                        Some(ev)
                    }
                    Run::Again | Run::Waiting => {
                        fresh.push(ev);
                        None
                    }
                }
            })
            .collect();
        if !fresh.is_empty() {
            self.fresh
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(fresh);
        }
        events
    }

    /// The new deliveries of events read before that wait unstarted (see
    /// [`Held::hold_read`]).
    pub(super) fn fresh(&self) -> Vec<Received> {
        std::mem::take(&mut *self.fresh.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The runs of `events` start (one lock for a read's worth of them).
    pub(super) fn started<'a>(&self, events: impl Iterator<Item = &'a Received>) {
        let mut h = lock(self);
        for ev in events {
            if let Some(slot) = h.get_mut(&ev.id) {
                slot.run = Run::Running(None);
            }
        }
    }

    /// The token a run of event `id` starting now stops on: cancelled once
    /// a renewal finds the event claimed by another consumer (see
    /// [`Slot::lost`]).
    /// One whose hold ran out already is cancelled from the start.
    pub(super) fn run_token(&self, id: EventId) -> CancellationToken {
        let token = CancellationToken::new();
        if let Some(slot) = lock(self).get_mut(&id) {
            if slot.until <= Instant::now() {
                token.cancel();
            }
            slot.lost = token.clone();
        }
        token
    }

    /// A settle call of `ids` is done: they are no longer held; but those a
    /// read delivered again since their run ended (a rewind replays them:
    /// they run again), waiting to start or started already (renewed from
    /// now on).
    pub(super) fn settled(&self, ids: &[EventId]) {
        let mut h = lock(self);
        for id in ids {
            if let Some(slot) = h.get_mut(id) {
                match slot.run {
                    Run::Again => (slot.run, slot.settling) = (Run::Waiting, false),
                    Run::Running(_) => slot.settling = false,
                    Run::Waiting | Run::Ended => {
                        h.remove(id);
                    }
                }
            }
        }
    }

    /// Event `id`'s run ended with `done`: the delivery a read made of it
    /// meanwhile (a rewind replays it), to run now in place of settling
    /// `done`; `None` when there is none: `done` is sent to the settle loop,
    /// under the lock, so that a read that finds the run ended finds its
    /// outcome queued.
    pub(super) fn ended(
        &self,
        id: EventId,
        done: Done,
        tx: &mpsc::UnboundedSender<Done>,
    ) -> Option<Received> {
        let mut h = lock(self);
        if let Some(slot) = h.get_mut(&id) {
            match &mut slot.run {
                Run::Running(again) if again.is_some() => return again.take().map(|ev| *ev),
                run => *run = Run::Ended,
            }
        }
        let _ = tx.send(done);
        None
    }
}

/// Claims up to `count` events idle for `min_idle` from `from` on (see
/// [`Topics::claim`]), held at once.
pub(super) async fn claim<B: Topics>(
    b: &B,
    n: &Names,
    held: &Held,
    (min_idle, lease): (Duration, Duration),
    count: usize,
    from: EventId,
) -> crate::Result<Option<Claimed>> {
    // not while a settle is out (see `Held`): a retry due at once that it
    // claimed before the settle took it out of the set would be taken for
    // one still running, and left unrun
    let _calls = held.calls.lock().await;
    let sent = Instant::now();
    let r = b
        .claim(&n.topic, &n.sub, &n.consumer, min_idle, count, from)
        .await;
    r.map(|c| {
        c.map(|mut c| {
            c.events = held.hold(std::mem::take(&mut c.events), sent + lease);
            c
        })
    })
}

pub(super) fn lock(held: &Held) -> std::sync::MutexGuard<'_, HashMap<EventId, Slot>> {
    // a map of places cannot be left half-changed
    held.ids.lock().unwrap_or_else(|e| e.into_inner())
}

/// Holds `ev` from now on (`None`), or the place of it held already.
fn newly<'a>(
    h: &'a mut HashMap<EventId, Slot>,
    ev: &Received,
    until: Instant,
) -> Option<&'a mut Slot> {
    match h.entry(ev.id) {
        std::collections::hash_map::Entry::Vacant(v) => {
            v.insert(Slot::new(ev.delivery(), until));
            None
        }
        std::collections::hash_map::Entry::Occupied(o) => Some(o.into_mut()),
    }
}

/// Restarts the idle time of running events, and renews the ownership of an
/// ordered subscriber (`owned`), every third of the lease.
pub(super) async fn renew_loop<B: Topics>(
    backend: B,
    names: Arc<Names>,
    held: Arc<Held>,
    owned: Option<Arc<Ownership>>,
    lease: Duration,
    stop: CancellationToken,
) {
    // what a renewal said of events found not held, so that it is said once
    let mut told: HashMap<EventId, Renewed> = HashMap::new();
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
        // no settle of these lands during the renewal (see `Held`)
        let _renewing = held.renewing.lock().await;
        let ids: Vec<EventId> = {
            let h = lock(&held);
            told.retain(|id, _| h.contains_key(id));
            h.iter()
                .filter(|(_, slot)| !slot.settling)
                .map(|(id, _)| *id)
                .collect()
        };
        if ids.is_empty() {
            continue;
        }
        let sent = Instant::now();
        match backend
            .renew(&names.topic, &names.sub, &names.consumer, &ids)
            .await
        {
            Ok(found) => {
                {
                    // held a lease from when the renewal was sent; and one
                    // pending for no consumer (its subscriber removed) runs
                    // on, as nobody else can claim it
                    let mut h = lock(&held);
                    for (id, found) in ids.iter().zip(&found) {
                        if let (Some(slot), Renewed::Held | Renewed::Gone) = (h.get_mut(id), found)
                        {
                            slot.until = slot.until.max(sent + lease);
                        }
                    }
                }
                let mut gone = 0;
                for (id, found) in ids.iter().zip(found) {
                    // each said once (not every third of the lease until the run ends)
                    if found == Renewed::Held {
                        told.remove(id);
                        continue;
                    }
                    if found == Renewed::Claimed
                        && let Some(slot) = lock(&held).get(id)
                    {
                        // it runs there now: not here beside it
                        slot.lost.cancel();
                    }
                    if told.insert(*id, found) == Some(found) {
                        continue;
                    }
                    match found {
                        Renewed::Claimed => {
                            tracing::warn!(topic = %names.topic, subscriber = %names.sub, event.id = %id,
                            "another consumer claimed this running event (its hold here ran out): its run here is cancelled, its outcome left to that consumer")
                        }
                        _ => gone += 1,
                    }
                }
                if gone > 0 {
                    tracing::info!(topic = %names.topic, subscriber = %names.sub, events = gone,
                        "running events are no longer pending in their subscriber (it was removed or made anew, or another client acknowledged them): their runs go on, their outcomes are not recorded");
                }
            }
            Err(e) => {
                tracing::warn!(topic = %names.topic, subscriber = %names.sub, error = %e, "renewing held events failed")
            }
        }
    }
}

/// Cancels the runs whose hold ran out on this worker's clock without a
/// renewal (Redis unreachable or stalled for it, see [`Slot::until`]):
/// another consumer may claim and run their events now, so they do not run
/// on here beside it (as a job's run whose lease ran out). Their outcomes
/// go to the settle loop as usual, which applies them only to a delivery
/// this consumer still holds.
pub(super) async fn watchdog(
    held: Arc<Held>,
    names: Arc<Names>,
    lease: Duration,
    stop: CancellationToken,
) {
    loop {
        let now = Instant::now();
        let mut nearest = now + lease / 3;
        {
            let h = lock(&held);
            for (id, slot) in h.iter() {
                if !matches!(slot.run, Run::Running(_)) || slot.lost.is_cancelled() {
                    continue;
                }
                if slot.until <= now {
                    tracing::warn!(topic = %names.topic, subscriber = %names.sub, event.id = %id,
                        "the hold on this running event ran out without a renewal (backend unreachable?): its run is cancelled, another consumer may claim it");
                    slot.lost.cancel();
                } else {
                    nearest = nearest.min(slot.until);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep_until(nearest) => {}
            _ = stop.cancelled() => return,
        }
    }
}

mod settle;
#[cfg(test)]
mod tests;

pub(super) use settle::settle_loop;
