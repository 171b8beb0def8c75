//! One queue's fields: its messages, dead letters and bookkeeping, and how it is made.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::contract::keyed::Keyed;
use crate::contract::settings;
use crate::contract::stats::{DeadLetter, HOURS, MINUTES, QueueStats};
use crate::{Error, JobId, Result};

/// One message.
pub(in crate::backend::memory) struct Msg {
    pub body: Vec<u8>,
    /// Visible-at in thousandths of a millisecond (Redis's float score, exactly).
    pub score: u64,
    pub rc: u64,
    pub fr: Option<u64>,
    /// Leased to a worker (fetched and not yet settled).
    pub lease: bool,
    /// Its priority: 0 is in `index` (RSMQ's sorted set), the others in `levels`.
    pub priority: i8,
    /// The last retried run's error.
    pub error: Option<String>,
    /// Its attempt records, as Redis keeps them in `<id>:a` (see attempts.rs).
    pub log: Option<String>,
    /// Released (its delivery not counted): that delivery's lease end, Unix ms.
    /// Its next lease ends later, so no two deliveries share a token (as
    /// `<id>:l` in Redis, see fetch.lua).
    pub released_lease: Option<u64>,
    /// Its concurrency key (see keys.rs).
    pub key: Option<String>,
    /// Waiting for a place of its key: in `keyed`, in no sorted set.
    pub waiting: bool,
    /// Sent with a delay: due exactly then (Unix µs), while its score is its
    /// send's (see exact.rs).
    pub exact_us: Option<u64>,
    /// When it entered the queue, as a sequence of the process's sends (see
    /// [`next_seq`]): the kit lists jobs in this order.
    pub seq: u64,
}

/// The next number of the sequence that orders the messages' entries into
/// any queue of this process (a send, a tick, a requeued dead letter), from
/// 1: a message's [`Msg::seq`].
pub(in crate::backend::memory) fn next_seq() -> u64 {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

/// A dead letter with the priority its job had, its attempt records, its
/// concurrency key and its unique key with when that expires (ms, 0: never).
pub type DeadEntry = (
    DeadLetter,
    i8,
    Option<String>,
    Option<Keyed>,
    Option<(String, u64)>,
);

/// One queue.
pub(in crate::backend::memory) struct MemQueue {
    pub vt: u64,
    pub delay: u64,
    pub maxsize: i64,
    pub created: u64,
    pub modified: u64,
    pub totalsent: u64,
    pub totalrecv: u64,
    /// (score, id) of the messages at priority 0, ordered as Redis orders a sorted
    /// set: RSMQ's sorted set, all that RSMQ's operations see.
    pub index: BTreeSet<(u64, JobId)>,
    /// The same for every other priority.
    pub levels: BTreeMap<i8, BTreeSet<(u64, JobId)>>,
    pub msgs: HashMap<JobId, Msg>,
    /// Dead letters as (time of death ms, id), and each one's letter, the
    /// priority it had and its attempt records.
    pub dead: BTreeSet<(u64, JobId)>,
    /// And its concurrency key, and the unique key its job held with when
    /// that expires (ms, 0: never), which a requeue takes again.
    pub dead_msgs: HashMap<JobId, DeadEntry>,
    /// Flows' parents waiting for their children: their batch and body (as
    /// the hash fields `<id>:w`, see flow_wait.lua).
    pub parents: HashMap<JobId, (crate::contract::batches::BatchId, Vec<u8>)>,
    /// Parents a caller cancelled while they waited: never sent nor failed
    /// by their flow (as the once marks flow_fail.lua enters on Redis), each
    /// kept until its flow fired the callback it guards.
    pub cancelled_parents: std::collections::HashSet<JobId>,
    /// The jobs flows wait for, and their places in those flows (as
    /// `ns:q:deps`, see dep.lua).
    pub deps: HashMap<JobId, Vec<crate::contract::batches::BatchRef>>,
    /// Workers lease nothing (see `pause.lua`).
    pub paused: bool,
    /// The settings stored for the queue (settings.lua's hash fields).
    pub settings: settings::Fields,
    /// Who stored each, and when (`<ms> <who>`).
    pub settings_by: settings::Fields,
    /// Finished jobs kept for a while.
    pub history: crate::backend::memory::history::MemHistory,
    /// Per job type, runs per run-time bucket (complete.lua's `rt:` fields).
    pub run_times: std::collections::BTreeMap<
        String,
        [u64; crate::contract::runtimes::RUN_TIME_BUCKETS_MS.len()],
    >,
    pub stats: QueueStats,
    /// The last hour's settled runs: `(minute, processed, failed)` at
    /// `minute % MINUTES`, as complete.lua keeps them.
    pub minutes: [(u64, u64, u64); MINUTES],
    /// The last week's ring by hour, as the minutes'.
    pub hours: Box<[(u64, u64, u64); HOURS]>,
    /// Unique keys: the key's holder and when the key expires (Unix ms, 0: never).
    pub unique: HashMap<String, (JobId, u64)>,
    /// The unique key each holder holds.
    pub unique_of: HashMap<JobId, String>,
    /// Periodic schedules' last ticks and the next after each (Unix ms) by name.
    pub periodic: HashMap<String, (u64, Option<u64>)>,
    /// The ids fetches leased (some since settled or run out: see
    /// [`in_flight`](Self::in_flight)).
    pub leased: std::collections::HashSet<JobId>,
    /// How many leases end in the second here (Unix s) whose jobs a receive
    /// or a pop took (an RSMQ-style read of a job whose lease ran out in
    /// that second): each still holds its place until the second has passed,
    /// as on Redis, where those reads (an RSMQ client's too) leave the lease
    /// counts as they are. A read takes only due jobs, so only the current
    /// second's count matters.
    pub taken_leases: (u64, usize),
    /// The starts a rate limit counts (Unix ms), oldest first.
    pub starts: std::collections::VecDeque<u64>,
    /// The exact dues of jobs sent with a delay, (Unix µs, id), as
    /// `ns:q:exact` on Redis: each message whose `exact_us` is set, and no
    /// other (see exact.rs).
    pub exact: BTreeSet<(u64, JobId)>,
    /// A fetch was held back by the global concurrency: a settle wakes the
    /// queue's workers (as "redjob:held" in Redis, see fetch.lua).
    pub held: bool,
    /// A handler's throttle holds the queue until then (Unix ms; 0: none).
    pub throttled_until: u64,
    /// Keyed jobs waiting for a place, per key, by (score, id) (see keys.rs).
    pub keyed: HashMap<String, BTreeSet<(u64, JobId)>>,
    /// Per concurrency key: its places and its holders.
    pub keys: HashMap<String, crate::backend::memory::keys::KeyEntry>,
    /// A keyed job took a freed place since the last wake-up: the queue's
    /// workers are woken.
    pub promoted: bool,
    /// Running keyed jobs deleted whose leases have not ended (see keys.rs).
    pub ghosts: usize,
    /// Keys a handler's throttle holds (see keys.rs).
    pub held_keys: usize,
    /// When a key's place frees by time (Unix ms: a ghost's lease end + 1, a
    /// throttle's end) with the key, the earliest first; an entry whose key
    /// moved on since is passed over (see keys.rs).
    pub key_events: BTreeSet<(u64, String)>,
    /// The time of the queue's latest send, fetch, settle or removal (Unix
    /// ms): what a key's throttle is compared with.
    pub now: u64,
}

impl MemQueue {
    pub fn new(vt: u64, delay: u64, maxsize: i64, now_s: u64) -> Self {
        MemQueue {
            vt,
            delay,
            maxsize,
            created: now_s,
            modified: now_s,
            totalsent: 0,
            totalrecv: 0,
            index: BTreeSet::new(),
            levels: BTreeMap::new(),
            msgs: HashMap::new(),
            dead: BTreeSet::new(),
            settings: Default::default(),
            settings_by: Default::default(),
            history: Default::default(),
            run_times: Default::default(),
            dead_msgs: HashMap::new(),
            parents: HashMap::new(),
            cancelled_parents: Default::default(),
            deps: HashMap::new(),
            paused: false,
            stats: QueueStats::default(),
            minutes: [(0, 0, 0); MINUTES],
            hours: Box::new([(0, 0, 0); HOURS]),
            unique: HashMap::new(),
            unique_of: HashMap::new(),
            periodic: HashMap::new(),
            leased: Default::default(),
            taken_leases: (0, 0),
            starts: Default::default(),
            exact: BTreeSet::new(),
            held: false,
            throttled_until: 0,
            keyed: HashMap::new(),
            keys: HashMap::new(),
            promoted: false,
            ghosts: 0,
            held_keys: 0,
            key_events: BTreeSet::new(),
            now: 0,
        }
    }
}

impl MemQueue {
    /// A message of `maxlen` bytes fits the queue's `maxsize`.
    pub(in crate::backend::memory) fn check_size(&self, maxlen: usize) -> Result<()> {
        if self.maxsize != -1 && maxlen as i64 > self.maxsize {
            return Err(Error::MessageTooLarge {
                size: maxlen,
                max: self.maxsize as usize,
            });
        }
        Ok(())
    }
}
