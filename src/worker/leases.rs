//! The deliveries a worker holds on one queue: leased (waiting for a running
//! slot, prefetched, or started: see [`RunCancel::start`]), or finished with a
//! settle still to land. Shared by the queue's dispatcher (which adds them, and merges a
//! re-delivery of a job it still holds into the held one) and its settler (which
//! renews, settles and gives them up).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::hooks::CancelReason;
use super::settle::Outcome;
use crate::JobId;
use crate::contract::attempts::AttemptOutcome;
use crate::contract::leases::Token;
use crate::id::IdHash;
use crate::job::cancel::RunCancel;

/// One held delivery.
pub(crate) struct Held {
    /// The job's score in the backend, as far as this worker knows.
    pub token: Token,
    /// The deliveries this run holds: its own and each re-delivery merged into
    /// it (see [`Admit::Merged`]). A release gives them all back. A merge
    /// into a run whose lease was lost counts from 1 again: the lost
    /// deliveries stay counted, as those of a run that crashed its worker.
    pub deliveries: u32,
    /// The lease ends no later than this on the worker's clock (measured from when
    /// the call that set it was sent, so never later than the backend's).
    pub deadline: Instant,
    /// A renewal whose reply was lost may have replaced `token` in the backend
    /// (it may run much later, as a stalled Redis does once it resumes): when
    /// `token`'s lease was measured from (the send of the call that set it, as
    /// `deadline`) and when that renewal was sent. Cleared once the current
    /// score is known again.
    pub uncertain: Option<Uncertain>,
    /// A renewal whose reply was lost, not landed when the score was read:
    /// it may land still (a stalled Redis that resumes may serve the read,
    /// sent on another lane, before it). A renewal that finds `token` gone
    /// reads the score again rather than give the run up at once, and so
    /// does a settle refused (see renew.rs's `adopt_late`). Cleared by a
    /// renewal that lands.
    pub late: Option<Uncertain>,
    /// Cancels the run.
    pub cancel: Arc<RunCancel>,
    /// This worker's number for the run, so a finish is matched to its own run.
    pub run: u64,
    /// The run has not ended: it is started (its `cancel` says since when),
    /// or waits for a running slot (prefetched). Either way the delivery is
    /// renewed, watched and settled alike.
    pub running: bool,
    /// The run ended with this; the settle has not landed yet.
    pub outcome: Option<Outcome>,
    /// When the run started and ended (Unix ms, backend time as the worker
    /// reckons it) and how, for its attempt record.
    pub ran: Option<(u64, u64, AttemptOutcome)>,
    /// When this worker leased it (listed in the worker registry).
    pub since: Instant,
    /// The job type: read from the envelope's head when admitted (and taken
    /// back should the envelope not decode), else once the run decoded it.
    pub job: Option<&'static str>,
    /// The lease was lost or ran out while the run still goes: its token is
    /// cancelled, it is neither renewed nor settled, and it is forgotten when the
    /// run ends (unless a re-delivery to this worker was merged into it meanwhile).
    pub lost: bool,
    /// Why it was lost (set with `lost`), told to the hooks when the run ends.
    pub reason: Option<CancelReason>,
    /// The batch its envelope names: its finish is counted there.
    pub batch: Option<crate::contract::batches::BatchRef>,
    /// A succeeded run's body as delivered, for its history entry (see
    /// [`Settle::ack_bodies`](crate::contract::leases::Settle::ack_bodies)):
    /// taken by the first settle call that carries the ack.
    pub body: Option<Vec<u8>>,
}

/// A renewal whose reply was lost (see [`Held::uncertain`]).
#[derive(Clone, Copy)]
pub(crate) struct Uncertain {
    /// When the held token's lease was measured from.
    pub origin: Instant,
    /// When the renewal was sent.
    pub sent: Instant,
}

impl Held {
    /// Renewed by the heartbeat: held, and its token known.
    pub fn renewable(&self) -> bool {
        !self.lost && self.uncertain.is_none()
    }
}

/// Held deliveries by job id: at most one per job, so one worker never runs a job
/// twice at once.
#[derive(Default)]
pub(crate) struct Leases {
    table: Mutex<Table>,
    runs: std::sync::atomic::AtomicU64,
    /// Told when a run takes its running slot or ends: the worker registry
    /// beats soon after (see registry.rs), so that its list of running jobs
    /// is fresh.
    changed: Option<Arc<Changes>>,
}

/// Runs starting or ending, told to the worker registry. Only the first change
/// since the registry last looked notifies it: a busy worker's runs then write
/// nothing here between two beats, where a notify at each start and end wrote
/// to a line both of its threads touch, twice a job.
#[derive(Default)]
pub(crate) struct Changes {
    notify: Notify,
    /// A change came since [`Changes::look`].
    pending: std::sync::atomic::AtomicBool,
}

impl Changes {
    /// A run started or ended (after the lease table, or the run's
    /// [`RunCancel::start`], says so). The load is SeqCst, as the store of a
    /// start before it and the store in [`Changes::look`]: either the
    /// registry's read after its look sees the start, or this sees the look
    /// and notifies.
    pub fn tell(&self) {
        use std::sync::atomic::Ordering;
        if !self.pending.load(Ordering::SeqCst) && !self.pending.swap(true, Ordering::AcqRel) {
            self.notify.notify_one();
        }
    }

    /// The registry is about to read the runs: a change after this notifies
    /// again (the table's lock orders the read and the change).
    pub fn look(&self) {
        self.pending
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Ready once a change came since the last [`Changes::look`] (or the one
    /// before, when the registry was busy as it came).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }
}

#[derive(Default)]
pub(crate) struct Table {
    pub held: HashMap<JobId, Held, IdHash>,
    /// Held deliveries with an outcome to settle (so a flush need not scan all).
    pub done: HashSet<JobId, IdHash>,
    /// The worker's runs were cancelled ([`Leases::cancel_runs`]): a run
    /// admitted after is cancelled from the start.
    pub aborted: bool,
    /// Runs whose lease a renewal found gone, while one read of their scores
    /// tells why (see renew.rs's `report_lost`): a run that ends meanwhile
    /// takes its entry, and waits for the reason (see [`Lost::why`]).
    pub classifying: HashMap<JobId, Classifying, IdHash>,
}

/// Why a lease a renewal found gone was lost, told once read (`None` until
/// then).
pub(crate) type Classifying = tokio::sync::watch::Receiver<Option<CancelReason>>;

/// Why a run's end is not settled (see [`Leases::finish`]).
pub(crate) struct Lost {
    why: CancelReason,
    /// The run's lease was found gone and why is still being read.
    told: Option<Classifying>,
}

impl Lost {
    /// Why, when known already; else itself, to wait for it with
    /// [`why`](Self::why).
    pub fn known(self) -> Result<CancelReason, Lost> {
        match self.told.as_ref().map(|told| *told.borrow()) {
            None => Ok(self.why),
            Some(Some(why)) => Ok(why),
            Some(None) => Err(self),
        }
    }

    /// Why the run's end is not settled: when its lease was found gone and
    /// the reason is still being read, once read (a deleted job is not
    /// reported as a lost lease, which runs again). The read is bounded
    /// (renew.rs); should its reader go away, a lost lease.
    pub async fn why(self) -> CancelReason {
        let Some(mut told) = self.told else {
            return self.why;
        };
        match told.wait_for(Option::is_some).await {
            Ok(why) => (*why).unwrap_or(self.why),
            Err(_) => self.why,
        }
    }
}

/// Cancels a worker's runs: its `abort` token, then the run of every delivery
/// each queue's [`Leases`] holds. Dropped (however the worker's `run` ends,
/// or when its future is dropped), it does the same: the runs' tasks outlive
/// the worker's future.
pub(crate) struct AbortRuns {
    abort: CancellationToken,
    leases: Mutex<Vec<Arc<Leases>>>,
}

impl AbortRuns {
    pub fn new(abort: CancellationToken) -> Self {
        AbortRuns {
            abort,
            leases: Mutex::default(),
        }
    }

    /// Adds a queue's leases, made with this `abort`.
    pub fn watch(&self, leases: Arc<Leases>) {
        self.leases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(leases);
    }

    pub fn cancel(&self) {
        self.abort.cancel();
        for leases in self.leases.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            leases.cancel_runs();
        }
    }
}

impl Drop for AbortRuns {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// What the dispatcher should do with a fresh delivery.
pub(crate) enum Admit {
    /// A new run with this number and token.
    Start { run: u64, cancel: Arc<RunCancel> },
    /// This worker already holds the job (its lease expired before a renewal, or
    /// someone made it visible again): the held run goes on under the new lease;
    /// `finished` when it already ended and only its settle is left.
    Merged { finished: bool },
}

impl Leases {
    /// Leases that tell `changed` when a run starts or ends. Their runs are
    /// cancelled by [`cancel_runs`](Self::cancel_runs) (from the worker's
    /// [`AbortRuns`]); each run's token stands alone rather than as a child
    /// of the worker's abort token, which would lock it when made and dropped,
    /// once a job.
    pub fn watched(changed: Arc<Changes>) -> Self {
        Leases {
            changed: Some(changed),
            ..Leases::default()
        }
    }

    /// Cancels every run held here; called once the worker's `abort` is
    /// cancelled (runs admitted later see it cancelled).
    pub fn cancel_runs(&self) {
        let mut t = self.lock();
        t.aborted = true;
        for h in t.held.values() {
            h.cancel.cancel();
        }
    }

    /// Tells the registry that a run started or ended, or (once a fetch)
    /// that jobs were leased.
    pub fn changed(&self) {
        if let Some(c) = &self.changed {
            c.tell();
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Table> {
        // the table stays consistent across a panic in a holder: carry on
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a delivery leased by a fetch; `deadline` is when the fetch was sent
    /// plus the lease, `now` when its reply came; `job` its job type when
    /// known before its run decodes it.
    pub fn admit(
        &self,
        id: JobId,
        token: Token,
        deadline: Instant,
        now: Instant,
        batch: Option<crate::contract::batches::BatchRef>,
        job: Option<&'static str>,
    ) -> Admit {
        let mut t = self.lock();
        let Table {
            held,
            done,
            aborted,
            ..
        } = &mut *t;
        if let Some(h) = held.get_mut(&id) {
            // a retry or release that landed (its reply lost) made the job due
            // again: this is a new delivery, not the held one
            let rescheduled = matches!(
                h.outcome,
                Some(Outcome::Retry { .. } | Outcome::Release { .. } | Outcome::Throttle { .. })
            );
            if !rescheduled {
                h.token = token;
                // a run whose lease was lost (cancelled, not ended yet): its
                // deliveries ran the handler and count, as every delivery
                // whose lease ran out does; a release gives back only those
                // merged from here
                h.deliveries = if h.lost {
                    1
                } else {
                    h.deliveries.saturating_add(1)
                };
                h.deadline = deadline;
                h.uncertain = None;
                h.late = None;
                h.lost = false;
                h.reason = None;
                return Admit::Merged {
                    finished: h.outcome.is_some(),
                };
            }
            done.remove(&id);
        }
        let run = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // checked under the table's lock, which cancel_runs takes: no run
        // misses both
        let cancel = Arc::new(RunCancel::default());
        if *aborted {
            cancel.cancel();
        }
        held.insert(
            id,
            Held {
                token,
                deliveries: 1,
                deadline,
                uncertain: None,
                late: None,
                cancel: cancel.clone(),
                run,
                running: true,
                outcome: None,
                ran: None,
                lost: false,
                reason: None,
                since: now,
                job,
                batch,
                body: None,
            },
        );
        // leased, not started: the registry hears of it when it takes its
        // running slot (see `started`) or ends, and once a fetch (its count
        // of prefetched jobs, see `Dispatcher::start`)
        drop(t);
        Admit::Start { run, cancel }
    }

    /// Records the job type of run `run` of `id`, for the worker registry and
    /// its run-time histogram (`None`: its envelope did not decode after all).
    pub fn named(&self, id: JobId, run: u64, job: Option<&'static str>) {
        if let Some(h) = self.lock().held.get_mut(&id).filter(|h| h.run == run) {
            h.job = job;
        }
    }

    /// The run of `cancel` took its running slot, `after` its lease began
    /// (its `since` here): written to the run's own [`RunCancel`], without the
    /// table's lock, and told to the registry.
    pub fn started(&self, cancel: &RunCancel, after: std::time::Duration) {
        cancel.start(after);
        self.changed();
    }

    /// The runs going on (those that took a running slot), as the worker
    /// registry lists them, each since its start; and how many more are
    /// held waiting for a slot (prefetched).
    pub fn running(
        &self,
        queue: &str,
        now: Instant,
        into: &mut Vec<crate::contract::admin::BeatJob>,
    ) -> usize {
        let mut waiting = 0;
        for (id, h) in self
            .lock()
            .held
            .iter()
            .filter(|(_, h)| h.running && !h.lost)
        {
            let Some(after) = h.cancel.started() else {
                waiting += 1;
                continue;
            };
            into.push(crate::contract::admin::BeatJob {
                queue: queue.to_string(),
                id: id.to_string(),
                job: h.job.map(str::to_string),
                for_ms: now.saturating_duration_since(h.since + after).as_millis() as u64,
            });
        }
        waiting
    }

    /// Records how run `run` of `id` ended, to be settled (with a succeeded
    /// run's `body`, for its history entry); or, when there is nothing to
    /// settle (its lease was lost or ran out, its job deleted, or it was
    /// given up at shutdown), why.
    pub fn finish(
        &self,
        id: JobId,
        run: u64,
        outcome: Outcome,
        ran: (u64, u64, AttemptOutcome),
        body: Option<Vec<u8>>,
    ) -> Result<(), Lost> {
        self.finish_counted(id, run, outcome, ran, body, |_, _| {})
    }

    /// [`finish`](Self::finish), with `recount` given the outcome and the
    /// delivery count of the token it will be settled with, under the table's
    /// lock, before it is recorded: a re-delivery merged into the run (see
    /// [`Admit::Merged`]) counts in the settle's deliveries, so the choice of
    /// a retry or a dead letter is made with it. No later merge changes that
    /// count: a delivery of a job whose retry awaits its settle starts a new
    /// run (see [`admit`](Self::admit)).
    pub fn finish_counted(
        &self,
        id: JobId,
        run: u64,
        mut outcome: Outcome,
        ran: (u64, u64, AttemptOutcome),
        body: Option<Vec<u8>>,
        recount: impl FnOnce(&mut Outcome, u32),
    ) -> Result<(), Lost> {
        let mut t = self.lock();
        match t.held.get_mut(&id) {
            Some(h) if h.run == run && h.lost => {
                let why = h.reason.unwrap_or(CancelReason::LeaseLost);
                t.held.remove(&id);
                let told = t.classifying.remove(&id);
                Err(Lost { why, told })
            }
            Some(h) if h.run == run => {
                recount(&mut outcome, h.token.attempt());
                h.running = false;
                h.outcome = Some(outcome);
                h.ran = Some(ran);
                h.body = body;
                t.done.insert(id);
                drop(t);
                self.changed();
                Ok(())
            }
            _ => Err(Lost {
                why: CancelReason::LeaseLost,
                told: None,
            }),
        }
    }

    /// Gives up a held delivery: stops renewing and settling it, and keeps a
    /// running one only until its run ends, so a re-delivery never starts a
    /// second run beside it. Its run is cancelled when `cancel` (else the
    /// caller cancels it).
    pub fn give_up(t: &mut Table, id: &JobId, why: CancelReason, cancel: bool) {
        t.done.remove(id);
        match t.held.get_mut(id) {
            Some(h) if h.running => {
                if cancel {
                    h.cancel.cancel();
                }
                h.lost = true;
                h.reason = Some(why);
            }
            Some(_) => {
                t.held.remove(id);
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::{Admit, Leases};
    use crate::contract::leases::Token;

    /// Whether `changes` has a notice ready (without waiting for one).
    async fn ready(changes: &super::Changes) -> bool {
        let notified = changes.notified();
        tokio::pin!(notified);
        futures::poll!(notified).is_ready()
    }

    #[tokio::test]
    async fn changes_notify_once_until_looked_at_and_again_after() {
        let changes = std::sync::Arc::new(super::Changes::default());
        let leases = Leases::watched(changes.clone());
        assert!(!ready(&changes).await, "nothing changed yet");
        let Admit::Start { run, cancel } = admit(&leases, "0000000000aaaaaaaaaaaaaaaaaaaaaa")
        else {
            panic!("a new run")
        };
        let Admit::Start { cancel: b, .. } = admit(&leases, "0000000000bbbbbbbbbbbbbbbbbbbbbb")
        else {
            panic!("a new run")
        };
        assert!(!ready(&changes).await, "leased, not started: no notice");
        let listed = |leases: &Leases| {
            let mut jobs = Vec::new();
            let waiting = leases.running("q", Instant::now(), &mut jobs);
            (jobs.len(), waiting)
        };
        assert_eq!(listed(&leases), (0, 2), "two prefetched, none running");
        leases.started(&cancel, std::time::Duration::ZERO);
        leases.started(&b, std::time::Duration::ZERO);
        assert!(ready(&changes).await, "a run started");
        assert!(!ready(&changes).await, "two starts, one notice");
        assert_eq!(listed(&leases), (2, 0), "both running");
        let ran = (0, 0, crate::contract::attempts::AttemptOutcome::Ok);
        let id = "0000000000aaaaaaaaaaaaaaaaaaaaaa".parse().unwrap();
        let ack = super::Outcome::Ack { result: None };
        assert!(leases.finish(id, run, ack, ran, None).is_ok());
        assert!(!ready(&changes).await, "not looked at since: no notice");
        changes.look();
        let Admit::Start { cancel, .. } = admit(&leases, "0000000000cccccccccccccccccccccc") else {
            panic!("a new run")
        };
        leases.started(&cancel, std::time::Duration::ZERO);
        assert!(ready(&changes).await, "a start after the look is told");
    }

    fn admit(leases: &Leases, id: &str) -> Admit {
        let now = Instant::now();
        let id = id.parse().unwrap();
        leases.admit(id, Token::new(1, 1), now, now, None, None)
    }

    #[test]
    fn runs_held_and_runs_admitted_after_cancel_runs_are_cancelled() {
        let leases = Leases::default();
        let Admit::Start { cancel: before, .. } =
            admit(&leases, "0000000000aaaaaaaaaaaaaaaaaaaaaa")
        else {
            panic!("a new run")
        };
        assert!(!before.is_cancelled());
        leases.cancel_runs();
        assert!(before.is_cancelled(), "a held run is cancelled");
        let Admit::Start { cancel: after, .. } = admit(&leases, "0000000000bbbbbbbbbbbbbbbbbbbbbb")
        else {
            panic!("a new run")
        };
        assert!(
            after.is_cancelled(),
            "a run admitted after starts cancelled"
        );
        assert!(after.token().is_cancelled());
    }
}
