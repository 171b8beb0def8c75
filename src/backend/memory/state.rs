//! The in-memory queues: RSMQ's data model, with scores in thousandths of a ms.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::contract::attempts;
use crate::contract::keyed::Keyed;
use crate::contract::leases::Retention;
use crate::contract::leases::is_lease;
use crate::contract::settings;
use crate::contract::stats::{DeadLetter, HOURS, MINUTES, QueueStats};
use crate::id::{sorted_random_suffixes, suffixes_above};
use crate::{Error, JobId, Result};

/// One message.
pub(super) struct Msg {
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
pub(super) fn next_seq() -> u64 {
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
pub(super) struct MemQueue {
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
    pub history: super::history::MemHistory,
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
    pub keys: HashMap<String, super::keys::KeyEntry>,
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

    /// The leases in flight at `now` (Unix ms): leased by a fetch and not
    /// settled, moved or run out (the ids that are not are forgotten), and
    /// those whose jobs a receive or a pop took in this second (see
    /// [`taken_leases`](Self::taken_leases)).
    pub fn in_flight(&mut self, now: u64) -> usize {
        let msgs = &self.msgs;
        self.leased.retain(|id| {
            // counted until the second it ends in has passed, as Redis's lease
            // counts are (see lease_counts in lib.lua)
            msgs.get(id)
                .is_some_and(|m| m.lease && is_lease(m.score) && m.score / 1_000_000 >= now / 1000)
        });
        if self.taken_leases.0 < now / 1000 {
            self.taken_leases = (0, 0);
        }
        self.leased.len() + self.taken_leases.1
    }

    /// A receive or a pop at `now` (Unix ms) takes job `id`: a lease it still
    /// carries (one that ran out in this second) keeps its place until the
    /// second has passed (see [`taken_leases`](Self::taken_leases)).
    pub fn lease_taken(&mut self, id: &JobId, now: u64) {
        if self.leased.remove(id)
            && let Some(m) = self.msgs.get(id)
            && m.lease
            && is_lease(m.score)
        {
            let second = m.score / 1_000_000;
            if second < now / 1000 {
                return;
            }
            if self.taken_leases.0 == second {
                self.taken_leases.1 += 1;
            } else {
                self.taken_leases = (second, 1);
            }
        }
    }

    /// When the first place held by a lease in flight frees (Unix ms): when
    /// the second its lease ends in has passed, if any.
    pub fn first_place_frees(&self) -> Option<u64> {
        self.leased
            .iter()
            .filter_map(|id| self.msgs.get(id))
            .map(|m| m.score / 1_000_000)
            .chain((self.taken_leases.1 > 0).then_some(self.taken_leases.0))
            .map(|s| (s + 1) * 1000)
            .min()
    }

    /// The starts in the rate window of `period` ms up to `now` (Unix ms);
    /// those before it are forgotten.
    pub fn starts_within(&mut self, now: u64, period: u64) -> usize {
        while self
            .starts
            .front()
            .is_some_and(|t| t.saturating_add(period) <= now)
        {
            self.starts.pop_front();
        }
        self.starts.len()
    }

    /// Until when the rate limit stored with the queue holds its jobs back
    /// at `now` (Unix ms): when its window is full, the oldest start in it
    /// plus the period (when a fetch may start the next job, as fetch.lua
    /// says); `None` while a job may start. Read only, unlike
    /// [`starts_within`](Self::starts_within).
    pub fn rate_held_until(&self, now: u64) -> Option<u64> {
        if self.starts.is_empty() {
            return None;
        }
        let rate = settings::QueueSettings::decode(&self.settings, &[])
            .in_force()
            .rate_limit;
        if !rate.is_limited() {
            return None;
        }
        let period = rate.period.as_millis() as u64;
        let past = self
            .starts
            .iter()
            .take_while(|t| t.saturating_add(period) <= now)
            .count();
        (self.starts.len() - past >= rate.max as usize)
            .then(|| self.starts[past].saturating_add(period))
    }

    /// Adds a settle call's runs to the minute of `now` (Unix ms).
    pub fn count_minute(&mut self, now: u64, processed: u64, failed: u64) {
        if processed + failed == 0 {
            return;
        }
        let add = |slot: &mut (u64, u64, u64), at: u64| {
            if slot.0 != at {
                *slot = (at, 0, 0);
            }
            slot.1 += processed;
            slot.2 += failed;
        };
        let m = now / 60_000;
        add(&mut self.minutes[(m % MINUTES as u64) as usize], m);
        let h = now / 3_600_000;
        add(&mut self.hours[(h % HOURS as u64) as usize], h);
    }

    /// Up to `n` ids at priority 0 due at `now` (Unix ms), oldest first.
    pub fn due(&self, now: u64, n: usize) -> Vec<(u64, JobId)> {
        self.index
            .range(..=(due_score(now), MAX_ID))
            .take(n)
            .copied()
            .collect()
    }

    /// Up to `n` ids of any priority due at `now` (Unix ms), highest priority
    /// first, then oldest first; each with its score and priority.
    pub fn due_all(&self, now: u64, n: usize) -> Vec<(u64, JobId, i8)> {
        self.take(&[(0, due_score(now))], n)
    }

    /// Up to `n` ids a fetch at `now` (Unix ms) leases, highest priority first;
    /// within one, oldest due first (a lease that ran out is due from its end).
    /// Each with its score and priority.
    pub fn fetchable(&self, now: u64, n: usize) -> Vec<(u64, JobId, i8)> {
        self.take(&[(0, due_score(now))], n)
    }

    /// Up to `n` ids within the score `ranges` (inclusive), level by level from
    /// the highest priority, each level's ranges in turn.
    fn take(&self, ranges: &[(u64, u64)], n: usize) -> Vec<(u64, JobId, i8)> {
        let mut out = Vec::new();
        for p in crate::contract::queues::priorities() {
            let Some(set) = self.set(p) else { continue };
            for &(lo, hi) in ranges {
                let left = n - out.len();
                if left == 0 {
                    return out;
                }
                out.extend(
                    set.range((lo, JobId::MIN)..=(hi, MAX_ID))
                        .take(left)
                        .map(|(s, id)| (*s, *id, p)),
                );
            }
        }
        out
    }

    /// When the earliest job of any priority becomes due (a delayed message, a
    /// retry, or a lease that may run out), Unix ms.
    pub fn next_due_ms(&self) -> Option<u64> {
        // a lease is scored at its end
        self.first_score().map(|k| k / 1000)
    }

    /// The sorted sets of every priority.
    pub fn sets(&self) -> impl Iterator<Item = &BTreeSet<(u64, JobId)>> {
        std::iter::once(&self.index).chain(self.levels.values())
    }

    /// Every (score, id) of every priority.
    pub fn all(&self) -> impl Iterator<Item = &(u64, JobId)> {
        self.index.iter().chain(self.levels.values().flatten())
    }

    /// The lowest score of any priority.
    pub fn first_score(&self) -> Option<u64> {
        self.index
            .first()
            .into_iter()
            .chain(self.levels.values().filter_map(|s| s.first()))
            .map(|(s, _)| *s)
            .min()
    }

    pub fn set(&self, p: i8) -> Option<&BTreeSet<(u64, JobId)>> {
        if p == 0 {
            Some(&self.index)
        } else {
            self.levels.get(&p)
        }
    }

    fn set_mut(&mut self, p: i8) -> &mut BTreeSet<(u64, JobId)> {
        if p == 0 {
            &mut self.index
        } else {
            self.levels.entry(p).or_default()
        }
    }

    pub fn rescore(&mut self, id: JobId, score: u64) {
        let Some(m) = self.msgs.get_mut(&id).filter(|m| !m.waiting) else {
            return;
        };
        let (old, p) = (m.score, m.priority);
        m.score = score;
        // due by its new score alone (see exact.rs)
        Self::unmark_exact(&mut self.exact, m, id);
        let set = self.set_mut(p);
        set.remove(&(old, id));
        set.insert((score, id));
    }

    /// Takes a message out of the queue, freeing the unique key it held and
    /// its concurrency key's place (or its wait).
    pub fn remove(&mut self, id: &JobId) -> Option<Msg> {
        let m = self.detach(id)?;
        if let Some(key) = &m.key {
            self.key_left(id, key, m.score, m.waiting);
        }
        if let Some(key) = self.unique_of.remove(id)
            && self
                .unique
                .get(&key)
                .is_some_and(|(holder, _)| holder == id)
        {
            self.unique.remove(&key);
        }
        Some(m)
    }

    fn detach(&mut self, id: &JobId) -> Option<Msg> {
        self.leased.remove(id);
        let m = self.msgs.remove(id)?;
        if let Some(e) = m.exact_us {
            self.exact.remove(&(e, *id));
        }
        if !m.waiting {
            self.set_mut(m.priority).remove(&(m.score, *id));
        }
        Some(m)
    }

    /// The message holding unique `key` at `now` (ms), if the key is held: its
    /// holder still exists and the key has not expired.
    pub fn unique_holder(&self, key: &str, now: u64) -> Option<JobId> {
        let (id, expires) = self.unique.get(key)?;
        (self.msgs.contains_key(id) && (*expires == 0 || now < *expires)).then_some(*id)
    }

    /// Moves a message to the dead letters at `now` (ms), with the record of
    /// its last attempt.
    pub fn kill(&mut self, id: &JobId, error: String, attempts: u32, now: u64, record: &str) {
        let keyed = self.keyed_of(id);
        let unique = self.unique_of.get(id).and_then(|key| {
            let (holder, expires) = self.unique.get(key)?;
            (holder == id).then(|| (key.clone(), *expires))
        });
        let Some(m) = self.remove(id) else { return };
        let log = attempts::append(m.log.as_deref(), record);
        let letter = DeadLetter {
            id: *id,
            body: m.body,
            error,
            attempts,
            died_at_ms: now,
        };
        self.dead.insert((now, *id));
        self.dead_msgs
            .insert(*id, (letter, m.priority, Some(log), keyed, unique));
    }

    /// A flow's parent whose child failed, never sent: dead-lettered with
    /// `why` as its error (`cancel`: entered in the history as cancelled
    /// instead) at `now` (ms), as flow_fail.lua does.
    pub fn fail_parent(&mut self, id: JobId, body: &[u8], cancel: bool, why: &str, now: u64) {
        use crate::contract::history::Finish;
        self.parents.remove(&id);
        if !cancel && !self.dead_msgs.contains_key(&id) {
            let letter = DeadLetter {
                id,
                body: body.to_vec(),
                error: why.to_string(),
                attempts: 0,
                died_at_ms: now,
            };
            self.dead.insert((now, id));
            self.dead_msgs.insert(id, (letter, 0, None, None, None));
        }
        let how = if cancel {
            Finish::Cancelled
        } else {
            Finish::Dead
        };
        self.enter_failed(id, body, how, &format!("flow: {why}"), now);
    }

    /// Drops the oldest dead letters beyond `retention` at `now` (ms), at most
    /// `budget`, as complete.lua does.
    pub fn trim_dead(&mut self, now: u64, retention: Retention, budget: usize) {
        let (keep, max_age) = retention.limits();
        for _ in 0..budget {
            let Some(&(died, old)) = self.dead.first() else {
                break;
            };
            let too_old = max_age > 0 && died < now.saturating_sub(max_age);
            let too_many = keep > 0 && self.dead.len() as u64 > keep;
            if !(too_old || too_many) {
                break;
            }
            self.drop_dead(&old);
        }
    }

    /// Deletes a dead letter; whether it was there.
    pub fn drop_dead(&mut self, id: &JobId) -> bool {
        match self.dead_msgs.remove(id) {
            Some((d, ..)) => self.dead.remove(&(d.died_at_ms, *id)),
            None => false,
        }
    }

    /// Gives unique `key` to `id` until `expires` (0: while it exists).
    pub fn hold_unique(&mut self, key: &str, id: JobId, expires: u64) {
        if let Some((old, _)) = self.unique.insert(key.into(), (id, expires))
            && old != id
        {
            self.unique_of.remove(&old);
        }
        self.unique_of.insert(id, key.into());
    }

    /// Moves a message to another priority level, keeping its score.
    pub fn move_to(&mut self, id: JobId, priority: i8) {
        let Some(m) = self.msgs.get_mut(&id) else {
            return;
        };
        let (old, score) = (m.priority, m.score);
        m.priority = priority;
        self.set_mut(old).remove(&(score, id));
        self.set_mut(priority).insert((score, id));
    }

    /// Enters a message at `score` and `priority`, with the next entry's
    /// sequence (a dead letter requeued enters again, after every job that
    /// waits), replacing one with its id.
    pub fn insert(&mut self, id: JobId, body: Vec<u8>, score: u64, priority: i8) {
        self.detach(&id);
        self.msgs.insert(
            id,
            Msg {
                body,
                score,
                rc: 0,
                fr: None,
                lease: false,
                priority,
                error: None,
                log: None,
                released_lease: None,
                key: None,
                waiting: false,
                exact_us: None,
                seq: next_seq(),
            },
        );
        self.set_mut(priority).insert((score, id));
    }

    /// The fencing check: the message exists at the token's priority with exactly
    /// its score.
    pub fn holds(&self, id: &JobId, token: crate::contract::leases::Token) -> bool {
        self.msgs
            .get(id)
            .is_some_and(|m| m.score == token.score() && m.priority == token.priority())
    }
}

/// The highest score due at `now` (Unix ms): every score of its ms (as
/// `due_max` in lib.lua; no earlier redjob left leases in memory).
pub(super) fn due_score(now: u64) -> u64 {
    last_of_ms(now)
}

/// The highest score in the ms `ms`: a score is due in its ms, whatever
/// delivery count its thousandths carry (as fetch.lua's `due_max`).
pub(super) fn last_of_ms(ms: u64) -> u64 {
    ms_score(ms).saturating_add(999)
}

/// The score of a time in Unix ms. Times past the largest score (about 584,000
/// years from 1970) get the largest whole-ms score: Redis stores them as floats,
/// where they never become due either.
pub(super) fn ms_score(ms: u64) -> u64 {
    ms.min(u64::MAX / 1000) * 1000
}

/// The largest id, for range bounds.
pub(super) const MAX_ID: JobId = JobId::MAX;

/// Everything the backend stores.
#[derive(Default)]
pub(super) struct State {
    pub queues: BTreeMap<String, MemQueue>,
    pub ids: IdSource,
    /// The live-worker registry: id → (runs out at, Unix ms; last beat, JSON;
    /// when that was written, Unix ms).
    pub workers: BTreeMap<String, (u64, Vec<u8>, u64)>,
    /// Paused periodic schedules by (queue, name): when (Unix ms) and by whom.
    /// The queue need not exist yet (a schedule's first tick creates it).
    pub paused_schedules: HashMap<(String, String), (u64, String)>,
    /// The control set on each live worker (see `Admin::control_worker`).
    pub worker_controls: HashMap<String, crate::contract::admin::Control>,
    /// The version of the queues' settings, which every change of them
    /// increments (see `Admin::set_settings`); beats return it.
    pub settings_version: u64,
    /// What the workers of one build serve, by digest (see `Backend::serve`).
    pub serves: HashMap<String, Vec<u8>>,
    /// Every batch (see batches.rs).
    pub batches: super::batches::Batches,
    /// When each batch's retention began (it completed or was cancelled),
    /// Unix ms, the earliest first: the workers' sweep drops those past it.
    pub batch_ends: BTreeSet<(u64, crate::contract::batches::BatchId)>,
    /// When each open batch is checked for a seal (an hour after it was
    /// opened, Unix ms), the earliest first: the workers' sweep cancels one
    /// its enqueuer never sealed, as marks.lua's mark does on Redis.
    pub batch_opens: BTreeSet<(u64, crate::contract::batches::BatchId)>,
    /// The batches cancelled, by the score they were listed with (strictly
    /// increasing), as `ns:@cancelled` on Redis.
    pub cancel_list: Vec<(u64, crate::contract::batches::BatchId)>,
}

/// Hands out message ids; remembers the largest, by any queue's send.
#[derive(Default)]
pub(super) struct IdSource {
    last: Option<JobId>,
}

impl IdSource {
    /// Ids for the `n` messages of one send call at `now_us`, as Redis's send
    /// gives them: one prefix (the time) and ascending suffixes. Redis's `TIME`
    /// moves on between calls, so a later call's ids sort after an earlier one's;
    /// this clock may not (paused, or within one microsecond), so a call in the
    /// microsecond of the last continues above the last id's suffix. The prefix
    /// stays the time, so a message's `sent` is exact.
    pub fn next(&mut self, now_us: u64, n: usize) -> Vec<JobId> {
        let last = self
            .last
            .and_then(|id| Some((id.prefix_us()?, id.suffix())))
            .filter(|(us, _)| *us >= now_us);
        let (us, suffixes) = match last {
            Some((us, suffix)) => match suffixes_above(&suffix, n) {
                Some(s) => (us, s),
                // no room left in this microsecond: take the next
                None => (us + 1, sorted_random_suffixes(n)),
            },
            None => (now_us, sorted_random_suffixes(n)),
        };
        let ids: Vec<_> = suffixes.iter().map(|s| JobId::make(us, s)).collect();
        if let Some(id) = ids.last() {
            self.last = Some(*id);
        }
        ids
    }
}

impl MemQueue {
    /// A message of `maxlen` bytes fits the queue's `maxsize`.
    pub(super) fn check_size(&self, maxlen: usize) -> Result<()> {
        if self.maxsize != -1 && maxlen as i64 > self.maxsize {
            return Err(Error::MessageTooLarge {
                size: maxlen,
                max: self.maxsize as usize,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_keys_leave_with_their_holder_unless_taken_over() {
        let mut q = MemQueue::new(30, 0, -1, 0);
        let (a, b) = (JobId::make(1, &[b'a'; 22]), JobId::make(2, &[b'b'; 22]));
        q.insert(a, b"a".to_vec(), 1000, 0);
        q.hold_unique("k", a, 0);
        assert_eq!(q.unique_holder("k", 5), Some(a));
        q.remove(&a);
        assert!(q.unique.is_empty() && q.unique_of.is_empty());
        // a key with a ttl: expired, then taken over by b; a leaving keeps it b's
        q.insert(a, b"a".to_vec(), 1000, 0);
        q.hold_unique("k", a, 10);
        assert_eq!(q.unique_holder("k", 10), None);
        q.insert(b, b"b".to_vec(), 1000, 3);
        q.hold_unique("k", b, 0);
        q.remove(&a);
        assert_eq!(q.unique_holder("k", 20), Some(b));
        assert_eq!(q.unique_of.len(), 1);
    }
}
