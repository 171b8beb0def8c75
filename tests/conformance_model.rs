//! Model test: random sequences of queue and worker operations run against a real
//! Redis and the memory backend side by side must give the same observable
//! results (ids mapped by send order, times by slot). Sends go at random
//! priorities (some out of range): fetches report each job's priority; RSMQ's
//! receive and attributes see priority 0 alone, delete and change visibility
//! find a message at any priority, alike on both. Unique sends (two keys, each
//! policy) must meet, keep, move or replace the same jobs on both. Inspection
//! (counts, peek, one job, every page of a state) and cancel must see and do the
//! same on both, and so must a dead-letter retention stored with the queue,
//! which the next settles' trims follow over their own. Keyed sends (three
//! keys of one or two places), throttles of a queue or a key, and a stored
//! global concurrency and rate limit are in the mix: what is blocked, what a
//! fetch leases and what a list of blocked jobs shows must match.
//!
//! Redis takes its time from `TIME`, which cannot be faked, so both backends run on
//! real time cut into slots of `U`: all operations of a slot run within its first
//! half, and every delay, visibility timeout and lease is a whole number of slots
//! plus half a slot. A due time therefore always falls in the quiet second half of
//! a slot, and both backends agree on what is due whatever the milliseconds. A
//! case whose operations overran their half slot (a loaded machine) is rejected,
//! not failed, and proptest draws another.
//!
//! Which due message is older is not compared: two messages made due in the same
//! quiet half by operations of different slots are ordered by where in their
//! slots those operations ran, which differs between the backends on a loaded
//! machine. So receives and fetches take every due message and are compared as
//! sets (the conformance suite checks FIFO order on each backend).
//!
//! The order of ids is compared, though: it is what orders messages of equal
//! score. A send step makes one to three send calls back to back, each of one
//! message or a batch of two to five (sharing a delay or each with its own), and
//! shows where each new id sorts among all ids sent so far. Redis's `TIME` moves
//! on between calls, so a later call's ids sort after an earlier call's. The
//! memory backend runs on a clock that stands still within a step (set to Redis's
//! `TIME` read at the step's start), as a paused tokio clock does in tests: its
//! back-to-back calls share one microsecond and must still sort in call order.
//! Its scores of a step are thus a little earlier than Redis's; `hiddenmsgs`
//! counts from the start of the current second, so no step runs where a second
//! could start between the two (see [`near_second`]).

mod common;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::aio::MultiplexedConnection;
use redjob::Client;
use redjob::backend::any::AnyBackend;
use redjob::backend::memory::{Clock, MemoryBackend};
use redjob::backend::{
    Backend, BatchRef, BatchSpec, Callback, DeadLetterEntry, Reschedule, Settle, Throttle, Token,
};
use redjob::inspect::{Cancelled, Inspect, JobInfo, JobState, StateCounts};
use redjob::ops::{
    Admin, BatchId, CallbackKind, Concurrency, DeadOrder, DeadQuery, OverviewQuery, QueueSettings,
    RateLimit, Retention, Spread, Tick, Ticked,
};
use redjob::queue::{Keyed, OnDuplicate, QueueOptions, Queues, SendMessage, Unique};
use redjob::{Error, JobId};
use tokio::time::Instant;

use common::RedisServer;

/// One slot of time.
const U: Duration = Duration::from_millis(50);

/// More than any case sends: "every due message".
const ALL: usize = 1000;

/// `k` slots and a half.
fn slots(k: u8) -> Duration {
    U * u32::from(k) + U / 2
}

#[derive(Debug, Clone)]
enum Op {
    /// Send calls back to back; each sends its messages at one priority, each
    /// after its delay in slots (and a half), or at once with `None`.
    Send {
        calls: Vec<(i8, Vec<Option<u8>>)>,
    },
    /// One message unique by key `k<key>` with policy `policy` (keep, replace
    /// delay, replace), after its delay as in `Send`.
    SendUnique {
        key: u8,
        policy: u8,
        priority: i8,
        delay: Option<u8>,
    },
    /// A delivery's run starts, freeing its job's unique key
    /// (`Backend::unique_started`, as for a job unique until its start): a
    /// later unique send of that key then adds a job.
    UniqueStarted {
        d: Index,
    },
    /// Every due message, hidden for `vt` slots and a half.
    Receive {
        vt: u8,
    },
    /// Every due message of any priority, taken off the queue.
    PopDue,
    /// Visible again after `vt` slots and a half, or at once with `None`.
    ChangeVisibility {
        msg: Index,
        vt: Option<u8>,
    },
    Delete {
        msg: Index,
    },
    DeleteBatch {
        a: Index,
        b: Index,
    },
    /// Every due job, leased for `lease` slots and a half.
    Fetch {
        lease: u8,
    },
    Extend {
        d: Index,
        lease: u8,
    },
    Ack {
        d: Index,
    },
    Retry {
        d: Index,
        delay: u8,
    },
    Dead {
        d: Index,
    },
    Advance {
        slots: u8,
    },
    Attributes,
    /// Jobs by state.
    Counts,
    /// Whether a job is ready to have waited (how long depends on where in
    /// their slots operations ran, so it is not compared).
    Latency,
    /// The last hour's settled runs summed, beside the counters.
    Minutes,
    /// The queue's line of the overview, with its last hour summed (whether
    /// a job waits, not how long, as for `Latency`).
    Overview,
    /// The history's events (operations and who took them), newest first:
    /// what, how many, who.
    Events,
    /// Every job of a state, page by page (`page` rows each).
    List {
        state: u8,
        page: u8,
    },
    /// The next jobs that would run.
    Peek,
    /// One job by id.
    Job {
        msg: Index,
    },
    Cancel {
        msg: Index,
    },
    /// Make a scheduled job due now.
    RunNow {
        msg: Index,
    },
    /// Pause (or resume) the queue.
    Pause {
        on: bool,
    },
    /// Store the queue's dead-letter retention: keep at most `keep` (no
    /// limit with `None`), in force over the settles' own 3.
    Settings {
        keep: Option<u8>,
    },
    /// Store the queue's concurrency per worker (no limit with `None`); the
    /// retention stored before stays.
    Concurrency {
        per_worker: Option<u8>,
    },
    /// Requeue one dead letter (named twice), due after `delay` slots.
    RequeueDead {
        msg: Index,
        delay: Option<u8>,
    },
    DeleteDead {
        msg: Index,
    },
    PurgeDead,
    PurgeQueue,
    /// The tick of periodic schedule `s<name>` due half a slot into the slot
    /// `k` before the current one (0: this slot's, still early), as a catch-up
    /// or not.
    Tick {
        name: u8,
        k: u8,
        catch_up: bool,
        priority: i8,
    },
    /// Ticks as [`Op::Tick`]'s, of one priority, due together in one
    /// `tick_many` call (a schedule may come twice): Redis ticks them in one
    /// script call, the memory backend one after another.
    TickMany {
        ticks: Vec<(u8, u8, bool)>,
        priority: i8,
    },
    /// Every dead letter, newest first, `page` rows a page.
    DeadNewest {
        page: u8,
    },
    /// One message of concurrency key `c<key>` with `per` places, after its
    /// delay as in `Send`.
    SendKeyed {
        key: u8,
        per: u8,
        delay: Option<u8>,
    },
    /// A delivery throttled for `delay` slots and a half: its key alone
    /// (a job without one: its queue) or its queue.
    Throttle {
        d: Index,
        delay: u8,
        key: bool,
    },
    /// Store the queue's global concurrency and rate limit (`rate` starts in
    /// any 2.5 slots), each none with `None`.
    Limits {
        global: Option<u8>,
        rate: Option<u8>,
    },
    /// A batch of `n` messages (0: an empty one), with an on-complete and an
    /// on-death callback into the queue's callback queue, or when `flow` a
    /// flow's parent (waiting there meanwhile, dead-lettered or cancelled
    /// when a message dies); sealed unless `open`.
    SendBatched {
        n: u8,
        open: bool,
        flow: bool,
    },
    /// A batch's status, and the callbacks sent so far.
    BatchStatus {
        b: Index,
    },
    /// A flow whose parent waits for a message sent earlier (whatever
    /// became of it).
    WaitFor {
        msg: Index,
    },
    /// Cancel a batch: whether this cancelled it.
    CancelBatch {
        b: Index,
    },
}

const STATES: [JobState; 6] = [
    JobState::Ready,
    JobState::Scheduled,
    JobState::InFlight,
    JobState::Dead,
    JobState::Finished,
    JobState::Blocked,
];

/// A message's delay in slots, or none.
fn delay() -> impl Strategy<Value = Option<u8>> {
    prop::option::weighted(0.6, 0..=2u8)
}

/// One send call: a single message, or a batch of 2 to 5 with one delay or one
/// delay per message.
fn send_call() -> impl Strategy<Value = Vec<Option<u8>>> {
    prop_oneof![
        (1..=5usize, delay()).prop_map(|(n, d)| vec![d; n]),
        prop::collection::vec(delay(), 2..=5),
    ]
}

/// A send call's priority: mostly 0 (RSMQ's sorted set), sometimes another level,
/// rarely one out of range (refused).
fn priority() -> impl Strategy<Value = i8> {
    prop_oneof![
        6 => Just(0i8),
        2 => Just(3i8),
        1 => Just(-2i8),
        1 => Just(10i8),
        1 => Just(11i8),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => prop::collection::vec((priority(), send_call()), 1..=3).prop_map(|calls| Op::Send { calls }),
        4 => (0..=1u8, 0..=2u8, priority(), delay())
            .prop_map(|(key, policy, priority, delay)| Op::SendUnique { key, policy, priority, delay }),
        2 => (0..=2u8).prop_map(|vt| Op::Receive { vt }),
        1 => Just(Op::PopDue),
        1 => (any::<Index>(), prop::option::of(0..=2u8))
            .prop_map(|(msg, vt)| Op::ChangeVisibility { msg, vt }),
        1 => any::<Index>().prop_map(|msg| Op::Delete { msg }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Op::DeleteBatch { a, b }),
        3 => (0..=2u8).prop_map(|lease| Op::Fetch { lease }),
        1 => (any::<Index>(), 0..=2u8).prop_map(|(d, lease)| Op::Extend { d, lease }),
        2 => any::<Index>().prop_map(|d| Op::Ack { d }),
        1 => any::<Index>().prop_map(|d| Op::UniqueStarted { d }),
        1 => (any::<Index>(), 0..=1u8).prop_map(|(d, delay)| Op::Retry { d, delay }),
        3 => any::<Index>().prop_map(|d| Op::Dead { d }),
        3 => (1..=2u8).prop_map(|slots| Op::Advance { slots }),
        1 => Just(Op::Attributes),
        1 => Just(Op::Counts),
        1 => prop_oneof![Just(Op::Latency), Just(Op::Minutes)],
        1 => prop_oneof![Just(Op::Overview), Just(Op::Events)],
        1 => (0..6u8, 1..=3u8).prop_map(|(state, page)| Op::List { state, page }),
        1 => Just(Op::Peek),
        1 => any::<Index>().prop_map(|msg| Op::Job { msg }),
        1 => any::<Index>().prop_map(|msg| Op::Cancel { msg }),
        2 => any::<Index>().prop_map(|msg| Op::RunNow { msg }),
        1 => any::<bool>().prop_map(|on| Op::Pause { on }),
        2 => prop::option::of(1..=2u8).prop_map(|keep| Op::Settings { keep }),
        1 => prop::option::of(1..=3u8).prop_map(|per_worker| Op::Concurrency { per_worker }),
        3 => (any::<Index>(), prop::option::of(0..=1u8)).prop_map(|(msg, delay)| Op::RequeueDead { msg, delay }),
        1 => any::<Index>().prop_map(|msg| Op::DeleteDead { msg }),
        1 => prop_oneof![Just(Op::PurgeDead), Just(Op::PurgeQueue)],
        1 => (1..=3u8).prop_map(|page| Op::DeadNewest { page }),
        3 => (0..2u8, 0..=2u8, any::<bool>(), priority())
            .prop_map(|(name, k, catch_up, priority)| Op::Tick { name, k, catch_up, priority }),
        2 => (prop::collection::vec((0..3u8, 0..=2u8, any::<bool>()), 1..=4), priority())
            .prop_map(|(ticks, priority)| Op::TickMany { ticks, priority }),
        4 => (0..=2u8, 1..=2u8, delay()).prop_map(|(key, per, delay)| Op::SendKeyed { key, per, delay }),
        1 => (any::<Index>(), 0..=1u8, any::<bool>()).prop_map(|(d, delay, key)| Op::Throttle { d, delay, key }),
        1 => (prop::option::of(1..=3u8), prop::option::of(1..=3u8))
            .prop_map(|(global, rate)| Op::Limits { global, rate }),
        3 => (0..=3u8, prop::bool::weighted(0.2), any::<bool>())
            .prop_map(|(n, open, flow)| Op::SendBatched { n, open, flow }),
        2 => any::<Index>().prop_map(|b| Op::BatchStatus { b }),
        2 => any::<Index>().prop_map(|msg| Op::WaitFor { msg }),
        1 => any::<Index>().prop_map(|b| Op::CancelBatch { b }),
    ]
}

/// What an operation showed, with ids replaced by their send order.
#[derive(Debug, PartialEq)]
enum Seen {
    Err(String),
    /// Where each new id sorts among all ids sent so far (their send order when
    /// ids sort in send order).
    Sent(Vec<usize>),
    /// A unique send's outcome and the send order of the job it added or met.
    Unique(String, usize),
    Messages(Vec<(usize, u64, String)>),
    /// (send order, attempt, priority)
    Deliveries(Vec<(usize, u32, i8)>),
    Extended(Option<u32>),
    Flag(bool),
    Count(u64),
    /// Settings read back: the dead letters kept (0: none stored or no
    /// limit), the concurrency per worker (0: none stored or no limit), and
    /// who stored the concurrency
    Stored(u64, u32, String),
    /// acked, rescheduled, dead, and how many were gone
    Settled(u64, u64, u64, usize),
    /// The global concurrency and rate in force (0: none).
    Limits(u32, u32),
    /// dead-lettered, then how many dead letters the queue kept
    Killed(u64, u64),
    Attributes {
        msgs: u64,
        hidden: u64,
        recv: u64,
        sent: u64,
    },
    Counts(StateCounts),
    /// Processed and failed over the last hour's minutes, then as counted.
    Minutes(u64, u64, u64, u64),
    /// An overview line: counts, whether a job waits, paused, counters
    /// (processed, failed, retried, dead), the hour's processed and failed.
    Overview(StateCounts, bool, bool, [u64; 4], u64, u64),
    /// History events as (what, count, who).
    Events(Vec<(String, u64, Option<String>)>),
    /// Jobs as (send order, state, priority, attempts, body, last error), sorted
    /// (which due job is older is not compared, see the top).
    Jobs(Vec<JobSeen>),
    Cancelled(Cancelled),
    /// What run now found the job doing.
    RanNow(Option<JobState>),
    /// A tick's outcome; the send order of the job it enqueued.
    Ticked(&'static str, Option<usize>),
    /// Each tick's outcome of a `tick_many` call, in order.
    TickedMany(Vec<Seen>),
    /// A batch's total, succeeded, dead, sealed, completed, cancelled, then
    /// the callbacks sent so far.
    Batch(u64, u64, u64, bool, bool, bool, u64),
    /// What a flow's batch and parent show.
    Flow(String),
    None,
}

/// A job as both sides must show it: index, state, priority, deliveries,
/// body, last error, then how it finished and its attempts' numbers and
/// outcomes (the history).
type JobSeen = (
    usize,
    String,
    i8,
    u32,
    String,
    Option<String>,
    Option<&'static str>,
    Vec<(u32, &'static str)>,
    Option<(String, u32)>,
);

/// One backend under test and the ids and deliveries it handed out, in order.
struct Side {
    backend: AnyBackend,
    queue: String,
    ids: Vec<JobId>,
    deliveries: Vec<(JobId, Token)>,
    /// Redis's time (Unix ms) at the case's start: where ticks count from.
    start_ms: u64,
    /// The current slot.
    slot: u32,
    /// The batches sent, and the batch of each job sent in one.
    batches: Vec<BatchId>,
    refs: HashMap<JobId, BatchRef>,
    /// The flows' parents sent.
    parents: Vec<JobId>,
}

fn err(e: Error) -> Seen {
    let s = format!("{e:?}");
    Seen::Err(
        s.split([' ', '(', '{'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    )
}

impl Side {
    fn seen(&self, j: &JobInfo) -> JobSeen {
        (
            self.index(&j.id),
            j.state.as_str().to_owned(),
            j.priority,
            j.attempts,
            String::from_utf8_lossy(&j.body).into_owned(),
            j.last_error.clone(),
            j.finished.as_ref().map(|f| f.how.as_str()),
            j.runs
                .iter()
                .map(|r| (r.number, r.outcome.as_str()))
                .collect(),
            j.key.as_ref().map(|k| (k.key.clone(), k.per_key)),
        )
    }

    /// When a tick `k` slots back is due: half a slot into its slot.
    fn tick_at(&self, k: u8) -> u64 {
        let slot = self.slot.saturating_sub(u32::from(k));
        self.start_ms + (U * slot + U / 2).as_millis() as u64
    }

    /// A tick's outcome; an enqueued job takes the next send order.
    fn ticked(&mut self, q: &str, tick: &Tick<'_>, r: Result<Ticked, Error>) -> Seen {
        match r {
            Ok(Ticked::Enqueued { .. }) => {
                self.ids.push(tick.id(q));
                Seen::Ticked("enqueued", Some(self.ids.len() - 1))
            }
            Ok(Ticked::Done { .. }) => Seen::Ticked("done", None),
            Ok(Ticked::Early(_)) => Seen::Ticked("early", None),
            Ok(other) => Seen::Err(format!("{other:?}")),
            Err(e) => err(e),
        }
    }

    fn jobs(&self, jobs: &[JobInfo]) -> Seen {
        let mut seen: Vec<_> = jobs.iter().map(|j| self.seen(j)).collect();
        seen.sort();
        Seen::Jobs(seen)
    }

    /// One of the queue's dead letters, oldest first.
    async fn pick_dead(&self, i: &Index) -> Option<JobId> {
        let order = DeadOrder::OldestFirst;
        let page = self.backend.dead_page(&self.queue, order, None, ALL).await;
        let jobs = page.ok()?.jobs;
        pick_index(jobs.len(), i).map(|k| jobs[k].id)
    }

    fn index(&self, id: &JobId) -> usize {
        self.ids
            .iter()
            .position(|i| i == id)
            .expect("an id this side sent")
    }

    async fn run(&mut self, op: &Op) -> Seen {
        let q = self.queue.clone();
        let b = self.backend.clone();
        match op {
            Op::Send { calls } => {
                let first = self.ids.len();
                for (priority, delays) in calls {
                    let msgs: Vec<_> = delays
                        .iter()
                        .enumerate()
                        .map(|(i, delay)| {
                            let m = SendMessage::new(format!("m{}", self.ids.len() + i))
                                .priority(*priority);
                            match delay {
                                Some(k) => m.delay(slots(*k)),
                                None => m,
                            }
                        })
                        .collect();
                    match Queues::send_batch(&b, &q, &msgs).await {
                        Ok(ids) => self.ids.extend(ids),
                        Err(e) => return err(e),
                    }
                }
                let mut sorted = self.ids.clone();
                sorted.sort_unstable();
                Seen::Sent(
                    self.ids[first..]
                        .iter()
                        .map(|id| sorted.partition_point(|s| s < id))
                        .collect(),
                )
            }
            Op::SendUnique {
                key,
                policy,
                priority,
                delay,
            } => {
                let policy = [
                    OnDuplicate::Keep,
                    OnDuplicate::ReplaceDelay,
                    OnDuplicate::Replace,
                ][usize::from(*policy)];
                let mut m = SendMessage::new(format!("m{}", self.ids.len()))
                    .priority(*priority)
                    .unique(Unique::new(format!("k{key}")).on_duplicate(policy));
                if let Some(k) = delay {
                    m = m.delay(slots(*k));
                }
                match b.send_outcomes(&q, &[m]).await {
                    Ok(sent) => {
                        if sent[0].outcome.is_added() {
                            self.ids.push(sent[0].id);
                        }
                        Seen::Unique(format!("{:?}", sent[0].outcome), self.index(&sent[0].id))
                    }
                    Err(e) => err(e),
                }
            }
            Op::Receive { .. } | Op::PopDue => {
                let got = match op {
                    Op::Receive { vt } => b.receive_batch(&q, ALL, Some(slots(*vt))).await,
                    _ => b.pop_due(&q, ALL).await,
                };
                match got {
                    Ok(ms) => {
                        let mut seen: Vec<_> = ms
                            .iter()
                            .map(|m| (self.index(&m.id), m.rc, m.body.clone()))
                            .collect();
                        seen.sort();
                        Seen::Messages(seen)
                    }
                    Err(e) => err(e),
                }
            }
            Op::ChangeVisibility { msg, vt } => {
                let Some(id) = pick(&self.ids, msg) else {
                    return Seen::None;
                };
                let vt = vt.map_or(Duration::ZERO, slots);
                b.change_visibility(&q, &id, vt)
                    .await
                    .map_or_else(err, Seen::Flag)
            }
            Op::Delete { msg } => {
                let Some(id) = pick(&self.ids, msg) else {
                    return Seen::None;
                };
                b.delete(&q, &id).await.map_or_else(err, Seen::Flag)
            }
            Op::DeleteBatch { a, b: second } => {
                let ids: Vec<_> = [a, second]
                    .into_iter()
                    .filter_map(|i| pick(&self.ids, i))
                    .collect();
                b.delete_batch(&q, &ids).await.map_or_else(err, Seen::Count)
            }
            Op::Fetch { lease } => match b.fetch(&q, ALL, slots(*lease)).await {
                Ok(f) => {
                    let mut jobs: Vec<_> = f
                        .jobs
                        .iter()
                        .map(|d| (self.index(&d.id), d.id, d.token))
                        .collect();
                    // in send order, so that delivery numbers match across backends
                    jobs.sort_by_key(|j| j.0);
                    let mut seen = Vec::new();
                    for (i, id, token) in jobs {
                        seen.push((i, token.attempt(), token.priority()));
                        self.deliveries.push((id, token));
                    }
                    Seen::Deliveries(seen)
                }
                Err(e) => err(e),
            },
            Op::Extend { d, lease } => {
                let Some(k) = pick_index(self.deliveries.len(), d) else {
                    return Seen::None;
                };
                match b.extend(&q, &[self.deliveries[k]], slots(*lease)).await {
                    Ok(tokens) => {
                        let new = tokens.into_iter().next().flatten();
                        if let Some(t) = new {
                            self.deliveries[k].1 = t;
                        }
                        Seen::Extended(new.map(Token::attempt))
                    }
                    Err(e) => err(e),
                }
            }
            Op::UniqueStarted { d } => {
                let Some(k) = pick_index(self.deliveries.len(), d) else {
                    return Seen::None;
                };
                let id = self.deliveries[k].0;
                b.unique_started(&q, &id)
                    .await
                    .map_or_else(err, |()| Seen::Flag(true))
            }
            Op::Ack { d } | Op::Retry { d, .. } | Op::Dead { d } => {
                let Some(k) = pick_index(self.deliveries.len(), d) else {
                    return Seen::None;
                };
                let (id, token) = self.deliveries[k];
                // a small retention, so that trimming is in the mix
                let mut batch = Settle {
                    retention: Retention {
                        max_count: Some(3),
                        max_age: None,
                    },
                    ..Settle::default()
                };
                match op {
                    Op::Ack { .. } => batch.acks.push((id, token)),
                    Op::Retry { delay, .. } => batch.reschedules.push(Reschedule {
                        id,
                        token,
                        delay: slots(*delay),
                        deliveries: token.attempt(),
                        release: false,
                        error: Some(format!("retried delivery {k}")),
                    }),
                    _ => batch.dead.push(DeadLetterEntry {
                        id,
                        token,
                        error: format!("failed delivery {k}"),
                    }),
                }
                if let Some(r) = self.refs.get(&id) {
                    batch.batched.push((id, *r));
                    // a batch's job returns a result, which its batch keeps
                    if matches!(op, Op::Ack { .. }) {
                        batch.results.push((id, format!("{k}").into_bytes()));
                    }
                }
                let settled = b.settle(&q, &batch).await;
                if let Ok(s) = &settled
                    && let Err(e) = b.batch_settled(&q, &s.batched).await
                {
                    return err(e);
                }
                match settled {
                    // a dead letter also shows how many the retention left
                    Ok(s) if s.dead > 0 => match b.counts(&q).await {
                        Ok(c) => Seen::Killed(s.dead, c.dead),
                        Err(e) => err(e),
                    },
                    Ok(s) => Seen::Settled(s.acked, s.rescheduled, s.dead, s.gone.len()),
                    Err(e) => err(e),
                }
            }
            Op::SendBatched { n, open, flow } => {
                let case = self.queue.trim_start_matches("model");
                let id: BatchId = format!("{case:0>10}{:0>22}", self.batches.len())
                    .parse()
                    .expect("a batch id");
                let cb = format!("{q}cb");
                let parent: JobId = format!("{case:0>10}p{:0>21}", self.batches.len())
                    .parse()
                    .expect("a job id");
                let callback = |kind, body: &[u8], id, cancel| {
                    let mut c = Callback::new(kind, &cb, body.to_vec());
                    c.id = id;
                    c.cancel = cancel;
                    c
                };
                let callbacks = if *flow {
                    let cancel = self.batches.len() % 2 == 1;
                    vec![
                        callback(
                            CallbackKind::Parent,
                            br#"{"type":"parent"}"#,
                            Some(parent),
                            false,
                        ),
                        callback(
                            CallbackKind::Failed,
                            br#"{"type":"parent"}"#,
                            Some(parent),
                            cancel,
                        ),
                    ]
                } else {
                    vec![
                        callback(CallbackKind::Complete, br#"{"type":"done"}"#, None, false),
                        callback(CallbackKind::Death, br#"{"type":"died"}"#, None, false),
                    ]
                };
                let spec = BatchSpec {
                    id,
                    callbacks,
                    description: None,
                    members: u64::from(*n),
                };
                if let Err(e) = b.batch_open(&spec).await {
                    return err(e);
                }
                self.batches.push(id);
                if *flow {
                    self.parents.push(parent);
                    let waited = wait_for_parent(&b, &cb, &parent, &id).await;
                    if let Err(e) = waited {
                        return err(e);
                    }
                }
                let first = self.ids.len();
                let msgs: Vec<_> = (0..u64::from(*n))
                    .map(|index| {
                        let r = BatchRef { batch: id, index };
                        SendMessage::new(format!(
                            r#"{{"m":"m{}","batch":"{}"}}"#,
                            first + index as usize,
                            r.encode()
                        ))
                    })
                    .collect();
                if !msgs.is_empty() {
                    match Queues::send_batch(&b, &q, &msgs).await {
                        Ok(ids) => {
                            for (index, sent) in ids.iter().enumerate() {
                                let r = BatchRef {
                                    batch: id,
                                    index: index as u64,
                                };
                                self.refs.insert(*sent, r);
                            }
                            self.ids.extend(ids);
                        }
                        Err(e) => return err(e),
                    }
                }
                if !*open && let Err(e) = b.batch_seal(&id, u64::from(*n)).await {
                    return err(e);
                }
                let mut sorted = self.ids.clone();
                sorted.sort_unstable();
                Seen::Sent(
                    self.ids[first..]
                        .iter()
                        .map(|id| sorted.partition_point(|s| s < id))
                        .collect(),
                )
            }
            Op::WaitFor { msg } => {
                let Some(k) = pick_index(self.ids.len(), msg) else {
                    return Seen::None;
                };
                let case = self.queue.trim_start_matches("model");
                let id: BatchId = format!("{case:0>10}{:0>22}", self.batches.len())
                    .parse()
                    .expect("a batch id");
                let parent: JobId = format!("{case:0>10}p{:0>21}", self.batches.len())
                    .parse()
                    .expect("a job id");
                let cb = format!("{q}cb");
                let body = br#"{"type":"parent"}"#.to_vec();
                let mut spec = BatchSpec {
                    id,
                    callbacks: vec![
                        Callback::new(CallbackKind::Parent, &cb, body.clone()),
                        Callback::new(CallbackKind::Failed, &cb, body),
                    ],
                    description: None,
                    members: 1,
                };
                for c in &mut spec.callbacks {
                    c.id = Some(parent);
                }
                if let Err(e) = b.batch_open(&spec).await {
                    return err(e);
                }
                self.batches.push(id);
                self.parents.push(parent);
                if let Err(e) = wait_for_parent(&b, &cb, &parent, &id).await {
                    return err(e);
                }
                let r = BatchRef {
                    batch: id,
                    index: 0,
                };
                let after = b.flow_after(&q, &self.ids[k], &r).await;
                if let Err(e) = b.batch_seal(&id, 1).await {
                    return err(e);
                }
                match after {
                    Ok(()) => Seen::Count(1),
                    Err(e) => err(e),
                }
            }
            Op::CancelBatch { b: i } => {
                let Some(k) = pick_index(self.batches.len(), i) else {
                    return Seen::None;
                };
                match b.batch_cancel(&self.batches[k]).await {
                    Ok(now) => Seen::Flag(now),
                    Err(e) => err(e),
                }
            }
            Op::BatchStatus { b: i } => {
                let Some(k) = pick_index(self.batches.len(), i) else {
                    return Seen::None;
                };
                match b.batch_status(&self.batches[k]).await {
                    Ok(Some(s)) => {
                        let called = Queues::attributes(&b, &format!("{q}cb"))
                            .await
                            .map_or(0, |a| a.msgs);
                        Seen::Batch(
                            s.total,
                            s.succeeded,
                            s.dead,
                            s.sealed,
                            s.completed_ms.is_some(),
                            s.cancelled_at_ms.is_some(),
                            called,
                        )
                    }
                    Ok(None) => Seen::None,
                    Err(e) => err(e),
                }
            }
            Op::SendKeyed { key, per, delay } => {
                let keyed = Keyed::new(format!("c{key}")).per_key(u32::from(*per));
                let mut m = SendMessage::new(format!("m{}", self.ids.len())).keyed(keyed);
                if let Some(k) = delay {
                    m = m.delay(slots(*k));
                }
                match Queues::send_batch(&b, &q, &[m]).await {
                    Ok(ids) => {
                        self.ids.extend(ids);
                        let mut sorted = self.ids.clone();
                        sorted.sort_unstable();
                        let last = self.ids[self.ids.len() - 1];
                        Seen::Sent(vec![sorted.partition_point(|s| *s < last)])
                    }
                    Err(e) => err(e),
                }
            }
            Op::Throttle { d, delay, key } => {
                let Some(k) = pick_index(self.deliveries.len(), d) else {
                    return Seen::None;
                };
                let (id, token) = self.deliveries[k];
                let batch = Settle {
                    throttles: vec![Throttle {
                        id,
                        token,
                        deliveries: token.attempt().saturating_sub(1),
                        delay: slots(*delay),
                        error: format!("throttled delivery {k}"),
                        key: *key,
                    }],
                    ..Settle::default()
                };
                match b.settle(&q, &batch).await {
                    Ok(s) => Seen::Settled(s.acked, s.rescheduled, s.dead, s.gone.len()),
                    Err(e) => err(e),
                }
            }
            Op::Limits { global, rate } => {
                let c = global.map_or(Concurrency::UNLIMITED, |n| {
                    Concurrency::global(u32::from(n))
                });
                let r = rate.map_or(RateLimit::NONE, |n| RateLimit::new(u32::from(n), slots(2)));
                if let Err(e) = b.set_settings(&q, &QueueSettings::concurrency(c)).await {
                    return err(e);
                }
                match b.set_settings(&q, &QueueSettings::rate_limit(r)).await {
                    Ok(s) => {
                        let f = s.in_force();
                        Seen::Limits(f.concurrency.global.unwrap_or_default(), f.rate_limit.max)
                    }
                    Err(e) => err(e),
                }
            }
            Op::Advance { .. } => Seen::None,
            Op::Attributes => match b.attributes(&q).await {
                Ok(a) => Seen::Attributes {
                    msgs: a.msgs,
                    hidden: a.hiddenmsgs,
                    recv: a.totalrecv,
                    sent: a.totalsent,
                },
                Err(e) => err(e),
            },
            Op::Counts => b.counts(&q).await.map_or_else(err, Seen::Counts),
            Op::Latency => b
                .latency(&q)
                .await
                .map_or_else(err, |l| Seen::Flag(l.is_some())),
            Op::Minutes => match (b.minutes(&q).await, b.stats(&q).await) {
                (Ok(hour), Ok(stats)) => Seen::Minutes(
                    hour.iter().map(|m| m.processed).sum(),
                    hour.iter().map(|m| m.failed).sum(),
                    stats.processed,
                    stats.failed,
                ),
                (Err(e), _) | (_, Err(e)) => err(e),
            },
            Op::Overview => {
                let query = OverviewQuery::default().filter(q.clone()).with_minutes();
                match b.overview(&query).await {
                    Ok(o) => match o.lines.iter().find(|l| l.name == q) {
                        Some(l) => Seen::Overview(
                            l.counts,
                            l.latency.is_some(),
                            l.paused,
                            [
                                l.stats.processed,
                                l.stats.failed,
                                l.stats.retried,
                                l.stats.dead,
                            ],
                            l.minutes.iter().map(|m| m.processed).sum(),
                            l.minutes.iter().map(|m| m.failed).sum(),
                        ),
                        None => Seen::Err("not in the overview".into()),
                    },
                    Err(e) => err(e),
                }
            }
            Op::Events => b.history_events(&q).await.map_or_else(err, |events| {
                Seen::Events(
                    events
                        .into_iter()
                        .map(|e| (e.what, e.count, e.by))
                        .collect(),
                )
            }),
            Op::List { state, page } => {
                let state = STATES[usize::from(*state)];
                let mut all = Vec::new();
                let mut after = None;
                loop {
                    match b.list(&q, state, after.as_ref(), usize::from(*page)).await {
                        Ok(p) => {
                            all.extend(p.jobs);
                            match p.next {
                                Some(c) => after = Some(c),
                                None => break,
                            }
                        }
                        Err(e) => return err(e),
                    }
                }
                let seen = self.jobs(&all);
                if let Seen::Jobs(j) = &seen {
                    let mut ids: Vec<usize> = j.iter().map(|j| j.0).collect();
                    ids.dedup();
                    assert_eq!(ids.len(), j.len(), "a job listed twice: {j:?}");
                }
                seen
            }
            Op::Peek => match b.peek(&q, ALL).await {
                Ok(jobs) => self.jobs(&jobs),
                Err(e) => err(e),
            },
            Op::Job { msg } => {
                let Some(id) = pick(&self.ids, msg) else {
                    return Seen::None;
                };
                match b.job(&q, &id).await {
                    Ok(j) => self.jobs(&j.into_iter().collect::<Vec<_>>()),
                    Err(e) => err(e),
                }
            }
            Op::Cancel { msg } => {
                let Some(id) = pick(&self.ids, msg) else {
                    return Seen::None;
                };
                b.cancel(&q, &id).await.map_or_else(err, Seen::Cancelled)
            }
            Op::RunNow { msg } => {
                let Some(id) = pick(&self.ids, msg) else {
                    return Seen::None;
                };
                b.run_now(&q, &id).await.map_or_else(err, Seen::RanNow)
            }
            Op::Pause { on } => {
                let r = if *on {
                    b.pause(&q).await
                } else {
                    b.resume(&q).await
                };
                match r {
                    Ok(()) => b.is_paused(&q).await.map_or_else(err, Seen::Flag),
                    Err(e) => err(e),
                }
            }
            Op::Settings { keep } => {
                let dead = Retention {
                    max_count: keep.map(u64::from),
                    max_age: None,
                };
                match b.set_settings(&q, &QueueSettings::dead_letters(dead)).await {
                    // what is stored, read back: the count kept (0: no limit)
                    Ok(s) => {
                        Seen::Count(s.dead_letters.and_then(|r| r.max_count).unwrap_or_default())
                    }
                    Err(e) => err(e),
                }
            }
            Op::Concurrency { per_worker } => {
                let c = per_worker.map_or(Concurrency::UNLIMITED, |n| {
                    Concurrency::per_worker(u32::from(n))
                });
                match b.set_settings(&q, &QueueSettings::concurrency(c)).await {
                    Ok(s) => Seen::Stored(
                        s.dead_letters.and_then(|r| r.max_count).unwrap_or_default(),
                        s.in_force().concurrency.per_worker.unwrap_or_default(),
                        s.set_by.concurrency.map(|c| c.by).unwrap_or_default(),
                    ),
                    Err(e) => err(e),
                }
            }
            Op::RequeueDead { msg, delay } => {
                let Some(id) = self.pick_dead(msg).await else {
                    return Seen::None;
                };
                let spread = Spread {
                    first: delay.map_or(Duration::ZERO, slots),
                    every: Duration::ZERO,
                };
                match b.requeue_dead(&q, &[id, id], spread).await {
                    // what came back: its state, priority and attempts
                    Ok(1) => match b.job(&q, &id).await {
                        Ok(j) => self.jobs(&j.into_iter().collect::<Vec<_>>()),
                        Err(e) => err(e),
                    },
                    Ok(n) => Seen::Count(n),
                    Err(e) => err(e),
                }
            }
            Op::DeleteDead { msg } => {
                let Some(id) = self.pick_dead(msg).await else {
                    return Seen::None;
                };
                b.delete_dead(&q, &[id]).await.map_or_else(err, Seen::Count)
            }
            Op::PurgeDead => b.purge_dead(&q).await.map_or_else(err, Seen::Count),
            Op::PurgeQueue => b.purge_queue(&q).await.map_or_else(err, Seen::Count),
            Op::Tick {
                name,
                k,
                catch_up,
                priority,
            } => {
                let name = format!("s{name}");
                let tick = Tick {
                    name: &name,
                    at_ms: self.tick_at(*k),
                    catch_up: *catch_up,
                    next_ms: None,
                };
                let msg = SendMessage::new(r#"{"type":"tick","args":{}}"#).priority(*priority);
                let r = b.tick(&q, &tick, &msg, &QueueOptions::default()).await;
                self.ticked(&q, &tick, r)
            }
            Op::TickMany { ticks, priority } => {
                let names: Vec<String> = ticks.iter().map(|(n, ..)| format!("s{n}")).collect();
                let msg = SendMessage::new(r#"{"type":"tick","args":{}}"#).priority(*priority);
                let ticks: Vec<(Tick<'_>, &SendMessage)> = ticks
                    .iter()
                    .zip(&names)
                    .map(|((_, k, catch_up), name)| {
                        let tick = Tick {
                            name,
                            at_ms: self.tick_at(*k),
                            catch_up: *catch_up,
                            next_ms: None,
                        };
                        (tick, &msg)
                    })
                    .collect();
                match b.tick_many(&q, &ticks, &QueueOptions::default()).await {
                    Ok(all) if all.len() == ticks.len() => Seen::TickedMany(
                        ticks
                            .iter()
                            .zip(all)
                            .map(|((tick, _), r)| self.ticked(&q, tick, r))
                            .collect(),
                    ),
                    Ok(all) => Seen::Err(format!("{} outcomes of {}", all.len(), ticks.len())),
                    Err(e) => err(e),
                }
            }
            Op::DeadNewest { page } => {
                let newest = DeadQuery::default().newest_first();
                let (mut all, mut after) = (Vec::new(), None);
                loop {
                    let n = usize::from(*page);
                    match b.dead_matching(&q, &newest, after.as_ref(), n).await {
                        Ok(p) => {
                            all.extend(p.jobs);
                            match p.next {
                                Some(c) => after = Some(c),
                                None => break,
                            }
                        }
                        Err(e) => return err(e),
                    }
                }
                self.jobs(&all)
            }
        }
    }

    /// What is left at the end: counters and dead letters.
    async fn summary(&self) -> (String, Vec<(usize, u32, String)>, Vec<Seen>) {
        let stats = self.backend.stats(&self.queue).await.unwrap();
        let dead = self.backend.dead_letters(&self.queue, 1000).await.unwrap();
        let mut dead: Vec<_> = dead
            .iter()
            .map(|d| (self.index(&d.id), d.attempts, d.error.clone()))
            .collect();
        dead.sort();
        // every batch's counts, and the callbacks sent
        let mut batches = Vec::new();
        for id in &self.batches {
            let s = self.backend.batch_status(id).await.unwrap();
            batches.push(s.map_or(Seen::None, |s| {
                Seen::Batch(
                    s.total,
                    s.succeeded,
                    s.dead,
                    s.sealed,
                    s.completed_ms.is_some(),
                    s.cancelled_at_ms.is_some(),
                    0,
                )
            }));
        }
        let called = Queues::attributes(&self.backend, &format!("{}cb", self.queue))
            .await
            .map_or(0, |a| a.msgs);
        batches.push(Seen::Count(called));
        // the results each batch keeps, and each flow's parent
        for id in &self.batches {
            let results = self.backend.batch_results(id, 0, 10).await;
            let first = self.backend.batch_status(id).await.unwrap();
            batches.push(Seen::Flow(format!(
                "{:?} {:?}",
                results.map(|r| r
                    .into_iter()
                    .map(|(i, v)| (i, String::from_utf8_lossy(&v).into_owned()))
                    .collect::<Vec<_>>()),
                first.map(|s| (
                    s.first_failure.is_some(),
                    s.parent_job().map(|(q, _)| q.to_string())
                ))
            )));
        }
        let cb = format!("{}cb", self.queue);
        for p in &self.parents {
            let job = self.backend.job(&cb, p).await;
            batches.push(Seen::Flow(format!(
                "{:?}",
                job.map(|j| j.map(|j| {
                    // ids differ between the sides: the words of 32
                    let why = j.last_error.map(|e| {
                        e.split(' ')
                            .map(|w| if w.len() == 32 { "<id>" } else { w })
                            .collect::<Vec<_>>()
                            .join(" ")
                    });
                    (j.state, j.finished.map(|f| f.how), why)
                }))
            )));
        }
        (format!("{stats:?}"), dead, batches)
    }
}

/// Records `parent` as waiting in queue `cb` for batch `id`, the queue
/// created first when missing.
async fn wait_for_parent(
    b: &AnyBackend,
    cb: &str,
    parent: &JobId,
    id: &BatchId,
) -> Result<(), Error> {
    match Queues::create_queue(b, cb, QueueOptions::default()).await {
        Ok(()) | Err(Error::QueueExists { .. }) => {}
        Err(e) => return Err(e),
    }
    b.flow_wait(cb, parent, id, br#"{"type":"parent"}"#).await
}

fn pick_index(len: usize, i: &Index) -> Option<usize> {
    (len > 0).then(|| i.index(len))
}

fn pick(ids: &[JobId], i: &Index) -> Option<JobId> {
    pick_index(ids.len(), i).map(|k| ids[k])
}

/// The host clock (Redis's `TIME` on this machine) in Unix microseconds.
fn host_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// How long a step may run before it risks [`near_second`].
const STEP: Duration = Duration::from_millis(3);

/// Whether a second starts between `from` and `to` (µs) plus any delay a step
/// can set (none, or 0 to 2 slots and a half), with a millisecond to spare. A
/// step's scores differ between the backends by where in the step each ran
/// (memory at its start, Redis a little later); `hiddenmsgs` counts scores from
/// the start of the current second, so a second starting between them could
/// count a message hidden on one backend only.
fn near_second(from: u64, to: u64) -> bool {
    [Duration::ZERO, slots(0), slots(1), slots(2)]
        .iter()
        .map(|d| d.as_micros() as u64)
        .any(|d| (from + d) / 1_000_000 != (to + d + 1000) / 1_000_000)
}

/// Waits (a few milliseconds at most) until the host clock is just past the
/// start of a millisecond, so no two operations share one: scores are whole
/// milliseconds, and two operations in one millisecond can make equal scores (a
/// retry landing on its delivery's old token, say) on one backend and not on the
/// other. A millisecond whose step could end [`near_second`] is skipped.
fn next_millisecond() {
    loop {
        let target = (host_us() / 1000 + 1) * 1000 + 20;
        while host_us() < target {
            std::hint::spin_loop();
        }
        if !near_second(target, target + STEP.as_micros() as u64) {
            return;
        }
    }
}

/// Redis's `TIME` in Unix microseconds.
async fn redis_now_us(con: &mut MultiplexedConnection) -> Result<u64, TestCaseError> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(con)
        .await
        .map_err(|e| TestCaseError::fail(format!("TIME: {e}")))?;
    Ok(secs * 1_000_000 + micros)
}

/// Runs `ops` on both backends, slot by slot; `Err(reject)` when a slot overran.
async fn check(
    redis: &Client,
    con: &mut MultiplexedConnection,
    case: usize,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let queue = format!("model{case}");
    let opts = QueueOptions {
        vt: 30,
        delay: 0,
        maxsize: 65536,
    };
    // moved to Redis's TIME at the start of each step, standing still within it
    let clock = Clock::frozen_at(SystemTime::now());
    let memory = MemoryBackend::with_clock(clock.clone());
    let mut sides = [
        Side {
            backend: redis.backend(),
            queue: queue.clone(),
            ids: Vec::new(),
            deliveries: Vec::new(),
            start_ms: 0,
            slot: 0,
            batches: Vec::new(),
            parents: Vec::new(),
            refs: HashMap::new(),
        },
        Side {
            backend: memory.into(),
            queue,
            ids: Vec::new(),
            deliveries: Vec::new(),
            start_ms: 0,
            slot: 0,
            batches: Vec::new(),
            parents: Vec::new(),
            refs: HashMap::new(),
        },
    ];
    for side in &sides {
        side.backend
            .create_queue(&side.queue, opts)
            .await
            .map_err(|e| TestCaseError::fail(format!("create: {e}")))?;
    }
    let start_ms = redis_now_us(con).await? / 1000;
    for side in &mut sides {
        side.start_ms = start_ms;
    }
    let start = Instant::now();
    let mut slot = 0u32;
    for (step, op) in ops.iter().enumerate() {
        if let Op::Advance { slots } = op {
            slot += u32::from(*slots);
            for side in &mut sides {
                side.slot = slot;
            }
            tokio::time::sleep_until(start + U * slot).await;
            continue;
        }
        next_millisecond();
        let now = redis_now_us(con).await?;
        clock.advance_exact(Duration::from_micros(now.saturating_sub(clock.now_us())));
        let r = sides[0].run(op).await;
        let m = sides[1].run(op).await;
        if start.elapsed() >= U * slot + U / 2 - Duration::from_millis(3) {
            return Err(TestCaseError::reject("a slot's operations overran"));
        }
        if near_second(now, host_us()) {
            return Err(TestCaseError::reject("a step ran into a new second"));
        }
        prop_assert_eq!(r, m, "step {} {:?} of {:?}", step, op, ops);
    }
    let (r, m) = (sides[0].summary().await, sides[1].summary().await);
    prop_assert_eq!(r, m, "stats and dead letters after {:?}", ops);
    Ok(())
}

#[test]
fn redis_and_memory_agree_on_random_operation_sequences() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let redis = rt.block_on(Client::connect(&server.url())).unwrap();
    let con = rt.block_on(server.raw());
    let cases = 256;
    let mut runner = TestRunner::new(Config {
        cases,
        max_global_rejects: 4 * cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::cell::Cell::new(0usize);
    let ran = std::cell::Cell::new(0usize);
    let result = runner.run(&prop::collection::vec(op(), 1..24), |ops| {
        case.set(case.get() + 1);
        let r = rt.block_on(check(&redis, &mut con.clone(), case.get(), &ops));
        if r.is_ok() {
            ran.set(ran.get() + 1);
        }
        r
    });
    println!(
        "model test: {} cases agreed, {} drawn in all",
        ran.get(),
        case.get()
    );
    result.unwrap();
    assert!(ran.get() >= cases as usize, "ran {} cases", ran.get());
}
