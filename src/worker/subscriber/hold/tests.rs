//! The subscriber's renewals, claims and settles in each other's midst, on a
//! memory backend whose calls of one kind wait at a gate.

use std::time::SystemTime;

use tokio::sync::{Notify, Semaphore};

use super::*;
use crate::backend::memory::{Clock, MemoryBackend};
use crate::contract::topics::{EventOptions, Start};
use crate::worker::subscriber::listed::RunningEvents;

/// Where a [`Gated`] backend's calls wait.
#[derive(Clone, Copy, PartialEq)]
enum At {
    /// A renewal, before it is done.
    Renewal,
    /// A settle, before it is done (a stalled call).
    Settle,
    /// A settle's reply, once it is done.
    SettleReply,
    /// No gate: a settle's first reply is lost (it is done, and fails).
    SettleLost,
    /// No gate: a settle's first call fails undone (as a broken connection).
    SettleFails,
}

/// A memory backend whose calls of one kind wait at a gate (as a round
/// trip to Redis is out): what the others do meanwhile shows.
#[derive(Clone)]
struct Gated {
    inner: MemoryBackend,
    at: At,
    /// Told when a call reached the gate.
    reached: Arc<Notify>,
    gate: Arc<Semaphore>,
    /// Whether a settle's reply was lost already (`At::SettleLost`).
    lost: Arc<AtomicBool>,
}

impl Gated {
    fn new(inner: MemoryBackend, at: At) -> Self {
        let gate = Arc::new(Semaphore::new(0));
        Gated {
            inner,
            at,
            reached: Arc::default(),
            gate,
            lost: Arc::default(),
        }
    }

    async fn at_gate(&self, at: At) {
        if self.at == at {
            self.reached.notify_one();
            self.gate.acquire().await.expect("open").forget();
        }
    }
}

macro_rules! gated {
    ($self:ident, Topics :: renew ( $($a:ident),* ) .await) => {{
        $self.at_gate(At::Renewal).await;
        Topics::renew(&$self.inner, $($a),*).await
    }};
    ($self:ident, Topics :: settle_events ( $($a:ident),* ) .await) => {{
        if $self.at == At::SettleFails && !$self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::Error::Protocol("the connection broke".into()));
        }
        $self.at_gate(At::Settle).await;
        let r = Topics::settle_events(&$self.inner, $($a),*).await;
        $self.at_gate(At::SettleReply).await;
        if $self.at == At::SettleLost && !$self.lost.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::Error::Protocol("the reply was lost".into()));
        }
        r
    }};
    ($self:ident, $T:ident :: $m:ident ( $($a:ident),* ) $($aw:tt)*) => {
        $T::$m(&$self.inner, $($a),*) $($aw)*
    };
}

/// A backend at `at` with one event of topic `t` read by subscriber `s`'s
/// consumer `w`, and its clock.
async fn one_read(at: At) -> (Gated, Clock, Delivery) {
    let clock = Clock::frozen_at(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let b = Gated::new(MemoryBackend::with_clock(clock.clone()), at);
    b.subscribe("t", "s", Start::End).await.unwrap();
    b.publish("t", &[("ty", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    let got = b.read("t", "s", "w", 10, Duration::ZERO).await.unwrap();
    let d = got.expect("subscribed")[0].delivery();
    (b, clock, d)
}

/// Delivery `d` of [`one_read`]'s event, as a read returns it.
fn received(d: Delivery) -> Received {
    Received {
        id: d.id,
        event_type: Some("ty".into()),
        data: Some("{}".into()),
        to: None,
        deliveries: d.count,
        epoch: d.epoch,
    }
}

fn by() -> (Option<u64>, RunBy) {
    let by = RunBy {
        worker: "w".into(),
        host: "h".into(),
    };
    (None, by)
}

crate::contract::topics::topics_methods! { impl Topics for Gated, |self| via gated!; }

fn names() -> Arc<Names> {
    Arc::new(Names {
        topic: "t".into(),
        sub: "s".into(),
        consumer: "w".into(),
        metrics: HashMap::new(),
        skipped: None,
        undecodable: None,
        listed: (Arc::new(RunningEvents::new(Vec::new(), Arc::default())), 0),
    })
}

/// A hold that does not run out within a test.
fn far() -> Instant {
    Instant::now() + Duration::from_secs(3600)
}

/// A subscriber's settle loop (and its renewal loop, when `renew`) on `b`,
/// with `ids` held.
struct Loops {
    held: Arc<Held>,
    tx: mpsc::UnboundedSender<Done>,
    stop: CancellationToken,
    renewer: Option<tokio::task::JoinHandle<()>>,
    settler: tokio::task::JoinHandle<()>,
}

impl Loops {
    fn start(b: &Gated, held_now: &[Delivery], lease: Duration, renew: bool) -> Self {
        let held: Arc<Held> = Arc::default();
        lock(&held).extend(held_now.iter().map(|d| (d.id, Slot::new(*d, far()))));
        let stop = CancellationToken::new();
        let (tx, rx) = mpsc::unbounded_channel();
        let renewer = renew.then(|| {
            let loop_ = renew_loop(b.clone(), names(), held.clone(), None, lease, stop.clone());
            tokio::spawn(loop_)
        });
        let finish = CancellationToken::new();
        let loop_ = settle_loop(b.clone(), names(), rx, by(), lease, held.clone(), finish);
        let settler = tokio::spawn(loop_);
        Loops {
            held,
            tx,
            stop,
            renewer,
            settler,
        }
    }

    /// Waits (up to a second) until nothing is held.
    async fn until_settled(&self) -> bool {
        for _ in 0..100 {
            if lock(&self.held).is_empty() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        lock(&self.held).is_empty()
    }

    /// Stops both loops and waits for them.
    async fn end(self) {
        self.stop.cancel();
        drop(self.tx);
        if let Some(r) = self.renewer {
            r.await.unwrap();
        }
        self.settler.await.unwrap();
    }
}

/// A retry settled while a renewal of the same event is out (it read the
/// events held before the settle) comes after its backoff, not after a
/// whole lease: the renewal's restart of its idle time does not land
/// after the settle's. The old code let the settle pass the renewal, whose
/// XCLAIM then set the retry's idle time back to 0.
#[tokio::test(start_paused = true)]
async fn a_retry_settled_during_a_renewal_comes_after_its_backoff() {
    let (b, clock, d) = one_read(At::Renewal).await;
    let id = d.id;
    let lease = Duration::from_secs(30);
    let loops = Loops::start(&b, &[d], lease, true);
    // the renewal read the events held, and is out
    b.reached.notified().await;
    // the run failed meanwhile: retry in a second
    let backoff = Duration::from_secs(1);
    let retry = Done::Retry(d, backoff, Vec::new(), None);
    loops.tx.send(retry).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // the renewal's reply comes, then everything settles
    b.gate.add_permits(1);
    assert!(loops.until_settled().await, "the retry was settled");
    loops.end().await;
    // its backoff is over: another consumer's claim (of events idle for a
    // lease) takes it
    clock.advance(backoff + Duration::from_millis(10));
    let claimed = b
        .claim("t", "s", "other", lease, 10, EventId::ZERO)
        .await
        .unwrap()
        .expect("subscribed");
    let ids: Vec<EventId> = claimed.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, [id], "the retry is due after its backoff");
}

/// A retry due at once (a run cancelled, or a handler's `retry_after`
/// zero), claimed by the worker's own claim between its settle's landing
/// and its reply, runs again: the old code took the claim's event for one
/// still running (held until the settle's reply), and dropped it unrun,
/// left to wait a lease for another claim, a delivery more counted.
#[tokio::test(start_paused = true)]
async fn a_retry_claimed_while_its_settle_replies_runs_again() {
    let (b, _clock, d) = one_read(At::SettleReply).await;
    let id = d.id;
    let lease = Duration::from_secs(30);
    let loops = Loops::start(&b, &[d], lease, false);
    let held = loops.held.clone();
    let retry = Done::Retry(d, Duration::ZERO, Vec::new(), None);
    loops.tx.send(retry).unwrap();
    // the settle landed; its reply is on its way
    b.reached.notified().await;
    let claiming = {
        let (b, held) = (b.clone(), held.clone());
        tokio::spawn(
            async move { claim(&b, &names(), &held, (lease, lease), 10, EventId::ZERO).await },
        )
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    b.gate.add_permits(1);
    let claimed = claiming.await.unwrap().unwrap().expect("subscribed");
    let ids: Vec<EventId> = claimed.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, [id], "the claim takes the retry, to run it");
    assert!(lock(&held).contains_key(&id), "held, as it runs again");
    loops.end().await;
}

/// A settle call that stalls (a slow Redis: up to the response timeout, for
/// each of its tries) does not hold back the renewals of the events still
/// running, which no other consumer claims then while they run. The old code
/// renewed them only once the settle's call returned: past two thirds of the
/// lease, another consumer took them, and they ran twice.
#[tokio::test(start_paused = true)]
async fn a_stalled_settle_does_not_hold_back_the_running_events_renewals() {
    let (b, clock, done) = one_read(At::Settle).await;
    b.publish("t", &[("ty", "{}")], &EventOptions::DEFAULT)
        .await
        .unwrap();
    let got = b.read("t", "s", "w", 10, Duration::ZERO).await.unwrap();
    let running = got.expect("subscribed")[0].delivery();
    let lease = Duration::from_secs(3);
    let loops = Loops::start(&b, &[done, running], lease, true);
    loops.tx.send(Done::Ack(done)).unwrap();
    // the settle call is out, and stalls for a lease and more
    b.reached.notified().await;
    for _ in 0..8 {
        clock.advance(lease / 6);
        tokio::time::sleep(lease / 6).await;
    }
    let claimed = b
        .claim("t", "s", "other", lease, 10, EventId::ZERO)
        .await
        .unwrap()
        .expect("subscribed");
    let ids: Vec<EventId> = claimed.events.iter().map(|e| e.id).collect();
    assert!(
        !ids.contains(&running.id),
        "another consumer claimed the running event: {ids:?}"
    );
    b.gate.add_permits(1);
    loops.end().await;
}

/// A retry whose settle call failed, and which this worker's own claim took
/// again before the call's next try (the event a new delivery count), is
/// settled on that try as the delivery held then: it comes after its
/// backoff. The review found the try sent the delivery read before, which
/// the backend refused (another count), so the retry came a lease late.
#[tokio::test(start_paused = true)]
async fn a_retry_claimed_between_its_settles_tries_is_settled_as_claimed() {
    let (b, clock, d) = one_read(At::SettleFails).await;
    let id = d.id;
    let lease = Duration::from_secs(30);
    let loops = Loops::start(&b, &[d], lease, false);
    let backoff = Duration::from_secs(5);
    let ev = received(d);
    // its run started and ended in a retry
    loops.held.started([ev].iter());
    let retry = Done::Retry(d, backoff, Vec::new(), None);
    assert!(loops.held.ended(id, retry, &loops.tx).is_none());
    // the first try failed; before the next one, this worker's claim takes
    // the event again (its place held: the run under way's delivery)
    tokio::time::sleep(Duration::from_millis(20)).await;
    let claimed = claim(
        &b,
        &names(),
        &loops.held,
        (Duration::ZERO, lease),
        10,
        EventId::ZERO,
    )
    .await
    .unwrap()
    .expect("subscribed");
    assert!(claimed.events.is_empty(), "held here: not run again");
    assert!(loops.until_settled().await, "the retry was settled");
    loops.end().await;
    clock.advance(backoff + Duration::from_millis(10));
    let claimed = b
        .claim("t", "s", "other", lease, 10, EventId::ZERO)
        .await
        .unwrap()
        .expect("subscribed");
    let ids: Vec<EventId> = claimed.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, [id], "the retry is due after its backoff");
}

/// Log lines, as a `tracing_subscriber::fmt` writer.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A settle tried again after its reply was lost (it had landed: the event
/// is acknowledged) does not meet a renewal between its tries: nothing is
/// said of an event that was settled. The old code let the renewal in
/// between, which found the event no longer held and warned that another
/// consumer claimed it.
#[tokio::test(start_paused = true)]
async fn a_settle_tried_again_meets_no_renewal_of_its_events() {
    let lines = Lines::default();
    let writer = lines.clone();
    let logs = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // this test's runtime has one thread: its tasks log through it too
    let _log = tracing::subscriber::set_default(logs);
    let (b, _clock, d) = one_read(At::SettleLost).await;
    // renewals every 100 ms, in the 200 ms before the settle's second try
    let lease = Duration::from_millis(300);
    let loops = Loops::start(&b, &[d], lease, true);
    loops.tx.send(Done::Ack(d)).unwrap();
    assert!(loops.until_settled().await, "the ack was settled");
    loops.end().await;
    let text = lines.text();
    assert!(
        !text.contains("another consumer claimed") && !text.contains("no longer pending"),
        "a renewal met the settled event: {text}"
    );
}

/// A replay (a rewind's read of an event whose run ended, before its
/// settle) that started before that settle's call was done stays held: its
/// renewals go on, and no claim takes it for one unheld (found by a review:
/// the settle dropped it once `started` had made it running).
#[test]
fn a_replay_started_before_its_old_runs_settle_is_done_stays_held() {
    let held = Held::default();
    let id = EventId::new(1_700_000_000_000, 7);
    let ev = |deliveries| Received {
        id,
        event_type: None,
        data: Some("x".into()),
        to: None,
        deliveries,
        epoch: 0,
    };
    let (tx, _rx) = mpsc::unbounded_channel();
    let done = || Done::Ack(ev(1).delivery());
    assert_eq!(held.hold_read(vec![ev(1)], far()).len(), 1);
    held.started([ev(1)].iter());
    assert!(
        held.ended(id, done(), &tx).is_none(),
        "no replay yet: its outcome settles"
    );
    // the settle call is out when a rewind's read delivers it again
    let again = held.hold_read(vec![ev(1)], far());
    assert_eq!(again.len(), 1, "an ended run's event runs again");
    held.started(again.iter());
    held.settled(&[id]);
    assert!(
        lock(&held).contains_key(&id),
        "the replay is held while it runs"
    );
    assert!(held.ended(id, done(), &tx).is_none());
    held.settled(&[id]);
    assert!(!lock(&held).contains_key(&id), "its own settle drops it");
}

/// A subscriber's settle loop, started once an event's run ended with its
/// ack queued and a rewind's read delivered the event anew (held again):
/// the backend, the held map, the loop's channel and task, and the event's
/// new delivery.
struct Rewound {
    b: Gated,
    held: Arc<Held>,
    tx: mpsc::UnboundedSender<Done>,
    settler: tokio::task::JoinHandle<()>,
    old: Delivery,
    again: Received,
}

impl Rewound {
    async fn start() -> Self {
        let (b, _clock, d) = one_read(At::SettleLost).await;
        let ev = received;
        let held: Arc<Held> = Arc::default();
        let (tx, rx) = mpsc::unbounded_channel();
        assert_eq!(held.hold_read(vec![ev(d)], far()).len(), 1);
        held.started([ev(d)].iter());
        // the run ends: its ack is queued, the settle loop not yet at it
        assert!(held.ended(d.id, Done::Ack(d), &tx).is_none());
        b.rewind("t", "s", Start::Beginning).await.unwrap();
        let again = b.read("t", "s", "w", 10, Duration::ZERO).await.unwrap();
        let mut again = held.hold_read(again.expect("subscribed"), far());
        assert_eq!(again.len(), 1, "the ended run's event runs again");
        let finish = CancellationToken::new();
        let lease = Duration::from_secs(30);
        let loop_ = settle_loop(b.clone(), names(), rx, by(), lease, held.clone(), finish);
        let settler = tokio::spawn(loop_);
        tokio::time::sleep(Duration::from_millis(100)).await;
        let again = again.remove(0);
        Rewound {
            b,
            held,
            tx,
            settler,
            old: d,
            again,
        }
    }

    async fn end(self) {
        drop(self.tx);
        self.settler.await.unwrap();
    }
}

/// An ended run's outcome still queued for the settle loop when a rewind's
/// read delivers its event anew is dropped, not settled: the event's place
/// names the new delivery by then, so the old outcome would settle the
/// replay (an acknowledgement would take it, unrun).
#[tokio::test(start_paused = true)]
async fn an_outcome_queued_when_a_rewind_delivers_its_event_anew_is_dropped() {
    let r = Rewound::start().await;
    let found = r.b.renew("t", "s", "w", &[r.old.id]).await.unwrap();
    assert_eq!(found, [Renewed::Held], "the old run's ack took the replay");
    r.end().await;
}

/// A replay whose old run's outcome was dropped (see above) and which is
/// then released unstarted (the worker turned quiet, or stops) leaves the
/// held map once its release is settled: the review found it kept as a
/// waiting event, renewed for as long as the worker lived and never run.
#[tokio::test(start_paused = true)]
async fn a_replay_released_unstarted_after_its_old_outcome_was_dropped_is_not_held() {
    let r = Rewound::start().await;
    // released before it started
    r.tx.send(Done::Release(r.again.delivery())).unwrap();
    let mut gone = false;
    for _ in 0..100 {
        if lock(&r.held).is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(gone, "the released replay is still held");
    r.end().await;
}
