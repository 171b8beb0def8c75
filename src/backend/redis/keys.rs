//! Every Redis key name redjob uses is built here.
//!
//! RSMQ's keys are `ns:QUEUES`, `ns:q` and `ns:q:Q`. redjob's own extra keys sit
//! beside them as `ns:q:<suffix>`; RSMQ queue names cannot contain `:`, so no RSMQ
//! queue can collide with them.
//!
//! On a Redis Cluster every key of a queue carries the queue's name as its hash
//! tag instead: `ns:{q}`, `ns:{q}:Q`, `ns:{q}:<suffix>`, so that each queue is one
//! slot and every script's keys share it. Topics always do (`ns:t:{topic}…`);
//! the state across queues (`ns:QUEUES`, `ns:{@workers}`) is its own slot, never
//! touched in a script with a queue's keys.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The keys of one queue in RSMQ's layout.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys {
    /// `ns:q`: sorted set of message ids scored by visible-at milliseconds.
    pub zset: String,
    /// `ns:q:Q`: hash of attributes and message bodies.
    pub hash: String,
    /// `ns:rt:q`: the realtime PUBLISH channel (a channel, not a key).
    pub realtime: String,
    /// `ns:q:dead`: sorted set of dead-letter ids scored by time of death (ms).
    pub dead: String,
    /// `ns:q:dead:Q`: hash of dead letters: `<id>` body, `<id>:err`, `<id>:n`
    /// deliveries, and more (docs/layout.md lists every field).
    pub dead_hash: String,
    /// `ns:q:stats`: hash of counters `processed`, `failed`, `retried`, `dead`,
    /// the minute and hour rings (`m<n>`, `h<n>`) and the run-time histogram
    /// (`rt:<bucket>:<type>`).
    pub stats: String,
    /// `ns:q:unique`: hash of unique keys, `k:<key>` → `<id> <priority> <expires
    /// ms>` and `i:<id>` → `<key>` (see `unique.lua`).
    pub unique: String,
    /// `ns:q:periodic`: hash of periodic schedules' last ticks, `<name>` → Unix
    /// ms, with `<name>:next` (the tick after it) and `<name>:paused`.
    pub periodic: String,
    /// `ns:q:leases`: hash of the running leases counted by the second they end
    /// in, `<Unix s>` → leases (see `count_leases` in lib.lua).
    pub leases: String,
    /// `ns:q:exact`: sorted set of the messages whose ids mark a delay, scored by
    /// their exact due in µs (see `index_exact` in lib.lua).
    pub exact: String,
    /// `ns:q:starts`: sorted set of the starts a rate limit counts, member
    /// `<id> <token>`, scored by the lease's start (ms; see fetch.lua).
    pub starts: String,
    /// `ns:q:keyed`: sorted set (every score 0) of the keyed jobs waiting for
    /// a place of their concurrency key, `<key>\0<due><id>` (see
    /// `concurrency_keys` in lib.lua).
    pub keyed: String,
    /// `ns:q:keys`: hash of concurrency keys, `<key>` → `<per key> <holder
    /// id> ...`.
    pub keys: String,
    /// `ns:q:kwake`: sorted set of concurrency keys whose places free at a
    /// time (a deleted running job's lease end, a throttle's end), scored by
    /// it (ms).
    pub kwake: String,
    /// `ns:q:awaited`: sorted set of the jobs a caller awaits, scored by
    /// when the wait ends (ms): their settle, cancel or delete publishes
    /// their id on [`done`](Self::done).
    pub awaited: String,
    /// `ns:@done:q`: the channel a finished awaited job's id is published
    /// on (a channel, not a key; not under `ns:rt:`, where RSMQ clients may
    /// listen by pattern).
    pub done: String,
    /// `ns:q:history:ids`: list of finished jobs' ids, oldest first (see
    /// history.rs and `trim_history` in lib.lua).
    pub history: String,
    /// `ns:q:history`: sorted set of finished jobs' ids by finish time (ms),
    /// the history's index before the list; history.lua moves what is left
    /// of it into the list.
    pub history_legacy: String,
    /// `ns:q:history:Q`: hash of history entries, `<id>` → entry (its body
    /// at its end while kept), `~args`: up to when bodies are dropped,
    /// `~argsat` and `~base`: where in the list the first entry after that is
    /// (see `trim_history` in lib.lua), `~stale`: how many elements of the
    /// list stand for no entry (see `history_overwrites` in lib.lua).
    pub history_hash: String,
    /// `ns:q:bout`: sorted set of batch finishes a settle recorded and their
    /// batches have not counted yet, one member per batch and settle call,
    /// `<batch id> <index>a,<index>d<id>,...`, scored by when (ms; see
    /// batches.rs).
    pub bout: String,
    /// `ns:q:bres`: hash of results of batch jobs whose batches have not
    /// taken them yet, `<batch id> <index>` → the result (see batches.rs).
    pub bres: String,
    /// `ns:q:deps`: hash of jobs that flows wait for, `<id>` → `<batch id>
    /// <index>,...` (see dep.lua).
    pub deps: String,
    /// `ns:q:once`: sorted set of once marks, scored by when made (ms): a
    /// send with a mark that is there sends nothing (see send.lua).
    pub once: String,
}

/// The keys of one batch: `ns:@batch:<id>`, or `ns:{@batch:<id>}` on a
/// Cluster (one slot per batch). `@` cannot be in a queue name.
#[derive(Debug, Clone)]
pub(crate) struct BatchKeys {
    /// The hash of its counts, callbacks and state (see batch.lua).
    pub hash: String,
    /// `<hash>:done`: a bitmap of its jobs counted, by index.
    pub done: String,
    /// `<hash>:dead`: a list of its first 1,000 dead jobs, `<queue> <id>`.
    pub dead: String,
    /// `<hash>:adds`: its jobs added while it runs and not known to be sent
    /// (see batch_add.lua).
    pub adds: String,
}

/// `ns:` as RSMQ writes its `redisns`, and whether queue keys carry hash tags.
#[derive(Clone)]
pub(crate) struct Namespace {
    prefix: String,
    cluster: bool,
    /// The keys of the first [`MADE`] queues the per-job calls named
    /// ([`queue_shared`](Self::queue_shared)), shared by the namespace's clones:
    /// a queue has two dozen key names, and building them took about 2 µs of
    /// a producer's 46 µs of CPU a one-by-one send (BENCHMARKS.md, Speed II
    /// part 27).
    made: Arc<Mutex<HashMap<String, Arc<QueueKeys>>>>,
}

/// `text` with each character a Redis glob-style pattern (`SCAN`/`KEYS`
/// `MATCH`, `PSUBSCRIBE`) reads as special (`*`, `?`, `[`, `]`, `\`)
/// escaped by a `\`, so that the pattern matches it as it is: a namespace
/// such as `app[1]` put in a pattern unescaped matches `app1:…`, never its
/// own keys.
pub(crate) fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("prefix", &self.prefix)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// How many queues' keys a namespace keeps made: a client or worker serving
/// more builds the rest's each time, as before.
const MADE: usize = 64;

impl Namespace {
    /// RSMQ's exact layout, or on a Cluster (`cluster`) the hash-tagged one.
    pub fn new(ns: &str, cluster: bool) -> Self {
        Namespace {
            prefix: format!("{ns}:"),
            cluster,
            made: Arc::default(),
        }
    }

    /// Whether queue keys carry hash tags (a Redis Cluster).
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// `ns:QUEUES`, the set of queue names.
    pub fn queues(&self) -> String {
        format!("{}QUEUES", self.prefix)
    }

    /// A queue's keys: `ns:q…`, or `ns:{q}…` on a Cluster.
    pub fn queue(&self, name: &str) -> QueueKeys {
        self.make_queue(name)
    }

    /// [`queue`](Self::queue), kept made for the next call on the same
    /// queue: for the calls made per job (a send, a fetch, a renewal, a
    /// settle), of the first 64 queues a process makes them on; listings,
    /// inspections and admin calls build the names each time, so that they
    /// do not fill the 64 places.
    pub fn queue_shared(&self, name: &str) -> Arc<QueueKeys> {
        let made = || self.made.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = made().get(name) {
            return k.clone();
        }
        // built outside the lock: past 64 queues every call builds
        let keys = Arc::new(self.make_queue(name));
        let mut made = made();
        if made.len() < MADE {
            return made.entry(name.to_owned()).or_insert(keys).clone();
        }
        keys
    }

    fn make_queue(&self, name: &str) -> QueueKeys {
        let base = if self.cluster {
            format!("{}{{{name}}}", self.prefix)
        } else {
            format!("{}{name}", self.prefix)
        };
        QueueKeys {
            hash: format!("{base}:Q"),
            realtime: format!("{}rt:{name}", self.prefix),
            dead: format!("{base}:dead"),
            dead_hash: format!("{base}:dead:Q"),
            stats: format!("{base}:stats"),
            unique: format!("{base}:unique"),
            periodic: format!("{base}:periodic"),
            leases: format!("{base}:leases"),
            exact: format!("{base}:exact"),
            starts: format!("{base}:starts"),
            keyed: format!("{base}:keyed"),
            keys: format!("{base}:keys"),
            kwake: format!("{base}:kwake"),
            awaited: format!("{base}:awaited"),
            done: format!("{}@done:{name}", self.prefix),
            history: format!("{base}:history:ids"),
            history_legacy: format!("{base}:history"),
            history_hash: format!("{base}:history:Q"),
            bout: format!("{base}:bout"),
            bres: format!("{base}:bres"),
            deps: format!("{base}:deps"),
            once: format!("{base}:once"),
            zset: base,
        }
    }

    /// The `SCAN` pattern of every topic's stream: `ns:t:{*}` (a stream's
    /// other keys go on after the brace), the namespace escaped (see
    /// [`glob_escaped`]).
    pub fn topic_pattern(&self) -> String {
        format!("{}t:{{*}}", glob_escaped(&self.prefix))
    }

    /// The topic a key matching [`topic_pattern`](Self::topic_pattern) is the
    /// stream of.
    pub fn topic_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(&self.prefix)?
            .strip_prefix("t:{")?
            .strip_suffix('}')
    }

    /// `ns:@topics` (`ns:{@topics}` on a Cluster): the set of topic names,
    /// added to by every publish and subscribe and taken from by a topic's
    /// delete, so that a listing reads it and not every key (RSMQ never
    /// reads it; `@` cannot be in a queue name). Its member
    /// [`TOPICS_INDEXED`] says it holds every topic: one made by an older
    /// release, which kept no index, is added by the first listing that
    /// misses the mark (a `SCAN`, once).
    pub fn topic_index(&self) -> String {
        if self.cluster {
            format!("{}{{@topics}}", self.prefix)
        } else {
            format!("{}@topics", self.prefix)
        }
    }

    /// A topic's keys.
    pub fn topic(&self, name: &str) -> TopicKeys {
        TopicKeys {
            stream: format!("{}t:{{{name}}}", self.prefix),
        }
    }

    /// `ns:@handoff:<worker>`: the channel a worker takes jobs handed to it by
    /// sends on (a channel, not a key). Not under `ns:rt:`, where RSMQ clients
    /// may listen by pattern.
    pub fn handoff(&self, worker: &str) -> String {
        format!("{}@handoff:{worker}", self.prefix)
    }

    /// `ns:@settings`: the channel every worker hears a change of a queue's
    /// settings on (a channel, not a key).
    pub fn settings_channel(&self) -> String {
        format!("{}@settings", self.prefix)
    }

    /// A batch's keys.
    pub fn batch(&self, id: &str) -> BatchKeys {
        let hash = if self.cluster {
            format!("{}{{@batch:{id}}}", self.prefix)
        } else {
            format!("{}@batch:{id}", self.prefix)
        };
        BatchKeys {
            done: format!("{hash}:done"),
            dead: format!("{hash}:dead"),
            adds: format!("{hash}:adds"),
            hash,
        }
    }

    /// `ns:{@workers}:bmarks`: a sorted set of what a worker's sweep looks
    /// after, by when it is the sweep's to handle: queues that may hold
    /// batch finishes not counted yet (`q<queue>`, by when their mark runs
    /// out) and batches whose sealer may not have sent their due callbacks
    /// (`b<id>`; see marks.lua).
    pub fn batch_marks(&self) -> String {
        format!("{}{{@workers}}:bmarks", self.prefix)
    }

    /// `ns:@batches` (`ns:{@batches}` on a Cluster): a sorted set of every
    /// batch's id, scored by when it was opened (ms); the entries of
    /// batches past their retention go in pages and sweeps (see
    /// batch_index.rs).
    /// `ns:@cancelled`: batches cancelled in the last week, by when.
    pub fn cancelled_batches(&self) -> String {
        if self.cluster {
            format!("{}{{@cancelled}}", self.prefix)
        } else {
            format!("{}@cancelled", self.prefix)
        }
    }

    pub fn batches(&self) -> String {
        if self.cluster {
            format!("{}{{@batches}}", self.prefix)
        } else {
            format!("{}@batches", self.prefix)
        }
    }

    /// `ns:@meta`: a hash of what holds for the whole namespace (`layout`:
    /// the layout version its data is in, see `LAYOUT_VERSION`). `@` cannot
    /// be in a queue name.
    pub fn meta(&self) -> String {
        format!("{}@meta", self.prefix)
    }

    /// The live-worker registry: `ns:{@workers}`, a sorted set of worker ids
    /// scored by when their registration runs out (Unix ms), and
    /// `ns:{@workers}:info`, a hash of each one's last beat (JSON),
    /// `ns:{@workers}:serves`, what the workers of each build serve, and
    /// `ns:{@workers}:control`, a hash of worker id -> the control an operator
    /// set on it (`<quiet|stop> <ms> <who>`). `@` cannot be in a queue name;
    /// the braces keep them in one Cluster slot.
    pub fn workers(&self) -> [String; 5] {
        let base = format!("{}{{@workers}}", self.prefix);
        let info = format!("{base}:info");
        let serves = format!("{base}:serves");
        let control = format!("{base}:control");
        let settings = format!("{base}:settings");
        [base, info, serves, control, settings]
    }
}

/// The member of [`Namespace::topic_index`] that says the index holds every
/// topic (no topic name has an `@`).
pub(crate) const TOPICS_INDEXED: &str = "@indexed";

/// The keys of one topic. The braces put all of a topic's keys in one Cluster
/// slot; no queue key has them (queue names cannot hold `{`).
#[derive(Debug, Clone)]
pub(crate) struct TopicKeys {
    /// `ns:t:{topic}`: the stream of its events.
    pub stream: String,
}

impl TopicKeys {
    /// `ns:t:{topic}:dead:<subscriber>`: a stream of the subscriber's dead letters.
    pub fn dead(&self, subscriber: &str) -> String {
        format!("{}:dead:{subscriber}", self.stream)
    }

    /// `ns:t:{topic}:attempts:<subscriber>`: a hash of the attempt records of
    /// the subscriber's events that failed and wait for a retry (see
    /// topic_settle.lua).
    pub fn attempts(&self, subscriber: &str) -> String {
        format!("{}:attempts:{subscriber}", self.stream)
    }

    /// `ns:t:{topic}:epoch:<subscriber>`: the subscriber's epoch, an integer
    /// set when topic_group.lua makes it and made one more by each rewind
    /// that moves it back (see `Delivery::epoch`); missing reads as 0.
    pub fn epoch(&self, subscriber: &str) -> String {
        format!("{}:epoch:{subscriber}", self.stream)
    }

    /// `ns:t:{topic}:owner:<subscriber>`: the consumer that owns an ordered
    /// subscriber, expiring with its lease.
    pub fn owner(&self, subscriber: &str) -> String {
        format!("{}:owner:{subscriber}", self.stream)
    }
}

impl QueueKeys {
    /// The sorted set of the queue's messages at `priority`: RSMQ's `ns:q` for 0,
    /// `ns:q:p<priority>` (`ns:q:p5`, `ns:q:p-3`) for the others.
    pub fn level(&self, priority: i8) -> String {
        if priority == 0 {
            self.zset.clone()
        } else {
            format!("{}:p{priority}", self.zset)
        }
    }

    /// `ns:q`, `ns:q:Q`, then [`levels`](Self::levels): the keys of a script that
    /// reads every priority.
    pub fn all_levels(&self) -> Vec<String> {
        let mut keys = vec![self.zset.clone(), self.hash.clone()];
        keys.extend(self.levels());
        keys
    }

    /// `ns:q`, `ns:q:Q`, `ns:q:unique`, then [`levels`](Self::levels): the keys of
    /// a script that frees or takes unique keys at any priority.
    pub fn all_levels_unique(&self) -> Vec<String> {
        let mut keys = vec![self.zset.clone(), self.hash.clone(), self.unique.clone()];
        keys.extend(self.levels());
        keys
    }

    /// `ns:q`, `ns:q:Q`, `ns:q:dead`, `ns:q:dead:Q`, then [`levels`](Self::levels):
    /// the keys of an inspection, which reads every priority and the dead letters.
    pub fn all_levels_dead(&self) -> Vec<String> {
        let mut keys = vec![
            self.zset.clone(),
            self.hash.clone(),
            self.dead.clone(),
            self.dead_hash.clone(),
        ];
        keys.extend(self.levels());
        keys
    }

    /// `keys`, then `ns:q:leases`: the keys of a script that takes leases off
    /// the lease counts (a delete, a cancel, a purge, a change of visibility).
    pub fn with_leases(&self, mut keys: Vec<String>) -> Vec<String> {
        keys.push(self.leases.clone());
        keys
    }

    /// [`all_levels_dead`](Self::all_levels_dead), then `ns:q:leases`, the
    /// history's two keys and `ns:q:keyed`: the keys of an inspection
    /// (KEYS[25..28]).
    pub fn inspection(&self) -> Vec<String> {
        let mut keys = self.all_levels_dead();
        keys.push(self.leases.clone());
        keys.extend(self.history_keys());
        keys.push(self.keyed.clone());
        keys
    }

    /// `ns:q:keyed`, `ns:q:keys`: the keys of concurrency keys.
    pub fn keyed_keys(&self) -> [String; 2] {
        [self.keyed.clone(), self.keys.clone()]
    }

    /// [`keyed_keys`](Self::keyed_keys), then `ns:q:kwake`.
    pub fn keyed_wake_keys(&self) -> [String; 3] {
        [self.keyed.clone(), self.keys.clone(), self.kwake.clone()]
    }

    /// `ns:q:history:ids`, `ns:q:history:Q`.
    pub fn history_keys(&self) -> [String; 2] {
        [self.history.clone(), self.history_hash.clone()]
    }

    /// `ns:q`, `ns:q:Q`, `ns:q:leases`, `ns:q:exact`, `ns:q:starts`,
    /// `ns:q:keyed`, `ns:q:keys`, `ns:q:kwake`, `ns:q:unique`: a fetch's keys
    /// before the levels' ([`fetch_all`](Self::fetch_all)).
    pub fn fetch(&self) -> [&str; 9] {
        [
            &self.zset,
            &self.hash,
            &self.leases,
            &self.exact,
            &self.starts,
            &self.keyed,
            &self.keys,
            &self.kwake,
            &self.unique,
        ]
    }

    /// [`fetch`](Self::fetch), then [`levels`](Self::levels): the keys of a
    /// fetch over every priority.
    pub fn fetch_all(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.fetch().map(String::from).into();
        keys.extend(self.levels());
        keys
    }

    /// Every priority level's sorted set but 0's, highest priority first: the keys
    /// a fetch over all priorities takes after `ns:q` and `ns:q:Q`.
    pub fn levels(&self) -> Vec<String> {
        crate::contract::queues::priorities()
            .filter(|p| *p != 0)
            .map(|p| self.level(p))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_keys_are_the_queues_own_and_kept_for_64_queues() {
        for cluster in [false, true] {
            let ns = Namespace::new("rsmq", cluster);
            let first = ns.queue_shared("jobs");
            assert_eq!(format!("{:?}", *first), format!("{:?}", ns.queue("jobs")));
            // a clone shares what was made, either way
            assert!(Arc::ptr_eq(&first, &ns.clone().queue_shared("jobs")));
            let by_clone = ns.clone().queue_shared("mail");
            assert!(Arc::ptr_eq(&by_clone, &ns.queue_shared("mail")));
            for i in 0..100 {
                let name = format!("q{i}");
                let k = ns.queue_shared(&name);
                assert_eq!(format!("{k:?}"), format!("{:?}", ns.queue(&name)));
                // the 64th queue asked for (with "jobs" and "mail") is the
                // last one kept
                assert_eq!(Arc::ptr_eq(&k, &ns.queue_shared(&name)), i < 62, "{name}");
            }
            assert!(Arc::ptr_eq(&first, &ns.queue_shared("jobs")));
        }
    }

    #[test]
    fn rsmq_key_names() {
        let ns = Namespace::new("rsmq", false);
        let k = ns.queue("jobs");
        assert_eq!(k.zset, "rsmq:jobs");
        assert_eq!(k.hash, "rsmq:jobs:Q");
        assert_eq!(k.realtime, "rsmq:rt:jobs");
        // not under rt:, where RSMQ clients listen by pattern
        assert_eq!(k.done, "rsmq:@done:jobs");
        assert_eq!(ns.queues(), "rsmq:QUEUES");
        assert_eq!(k.periodic, "rsmq:jobs:periodic");
        assert_eq!(k.leases, "rsmq:jobs:leases");
        assert_eq!(k.exact, "rsmq:jobs:exact");
        assert_eq!(k.starts, "rsmq:jobs:starts");
        assert_eq!(
            (&k.keyed[..], &k.keys[..]),
            ("rsmq:jobs:keyed", "rsmq:jobs:keys")
        );
        assert_eq!(
            k.history_keys(),
            ["rsmq:jobs:history:ids", "rsmq:jobs:history:Q"]
        );
        assert_eq!(k.history_legacy, "rsmq:jobs:history");
        let t = ns.topic("orders");
        assert_eq!(t.stream, "rsmq:t:{orders}");
        assert_eq!(t.dead("billing"), "rsmq:t:{orders}:dead:billing");
        assert_eq!(t.attempts("billing"), "rsmq:t:{orders}:attempts:billing");
        assert_eq!(t.owner("billing"), "rsmq:t:{orders}:owner:billing");
        assert_eq!(ns.topic_pattern(), "rsmq:t:{*}");
        assert_eq!(ns.topic_index(), "rsmq:@topics");
        assert_eq!(Namespace::new("rsmq", true).topic_index(), "rsmq:{@topics}");
        assert_eq!(
            Namespace::new("a[1]*?\\b", false).topic_pattern(),
            "a\\[1\\]\\*\\?\\\\b:t:{*}"
        );
        assert_eq!(ns.topic_of(&t.stream), Some("orders"));
        assert_eq!(ns.topic_of(&t.dead("billing")), None);
        assert_eq!(ns.topic_of("other:t:{orders}"), None);
        assert_eq!(
            ns.workers(),
            [
                "rsmq:{@workers}".to_string(),
                "rsmq:{@workers}:info".into(),
                "rsmq:{@workers}:serves".into(),
                "rsmq:{@workers}:control".into(),
                "rsmq:{@workers}:settings".into()
            ]
        );
        assert_eq!(
            (
                k.dead.clone(),
                k.dead_hash.clone(),
                k.stats.clone(),
                k.unique.clone()
            ),
            (
                "rsmq:jobs:dead".into(),
                "rsmq:jobs:dead:Q".into(),
                "rsmq:jobs:stats".into(),
                "rsmq:jobs:unique".into()
            )
        );
        assert_eq!(
            (k.level(0), k.level(5), k.level(-3)),
            (
                "rsmq:jobs".into(),
                "rsmq:jobs:p5".into(),
                "rsmq:jobs:p-3".into()
            )
        );
        let levels = k.levels();
        assert_eq!(levels.len(), 20);
        assert_eq!(
            (
                &levels[0][..],
                &levels[9][..],
                &levels[10][..],
                &levels[19][..]
            ),
            (
                "rsmq:jobs:p10",
                "rsmq:jobs:p1",
                "rsmq:jobs:p-1",
                "rsmq:jobs:p-10"
            )
        );
    }

    /// The Cluster hash slot of `key` (CRC16 of its hash tag, or of the key).
    fn slot(key: &str) -> u16 {
        let tag = key
            .find('{')
            .and_then(|o| key[o + 1..].find('}').map(|c| &key[o + 1..o + 1 + c]))
            .filter(|t| !t.is_empty())
            .unwrap_or(key);
        crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384
    }

    #[test]
    fn on_a_cluster_each_queue_and_topic_is_one_slot() {
        // the slot function agrees with Redis's CLUSTER KEYSLOT
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("somekey"), 11058);
        let ns = Namespace::new("app", true);
        let k = ns.queue("mail.out");
        assert_eq!(k.zset, "app:{mail.out}");
        assert_eq!(k.hash, "app:{mail.out}:Q");
        assert_eq!(k.level(-3), "app:{mail.out}:p-3");
        for name in ["jobs", "mail.out", "q-1", "x_y"] {
            let k = ns.queue(name);
            // every key a queue's scripts or transactions take
            let mut keys = k.inspection();
            keys.extend([k.stats.clone(), k.unique.clone(), k.periodic.clone()]);
            keys.extend(k.fetch_all());
            assert!(
                keys.iter().all(|key| slot(key) == slot(&k.zset)),
                "{name}: {keys:?}"
            );
            let t = ns.topic(name);
            let topic = [
                t.stream.clone(),
                t.dead("sub"),
                t.owner("sub"),
                t.attempts("sub"),
            ];
            assert!(topic.iter().all(|key| slot(key) == slot(&t.stream)));
        }
        let [w, info, serves, control, settings] = ns.workers();
        assert_eq!(slot(&w), slot(&info));
        assert_eq!(slot(&w), slot(&serves));
        assert_eq!(slot(&w), slot(&control));
        assert_eq!(slot(&w), slot(&settings));
        // the queues spread: not all in one slot
        let slots: std::collections::HashSet<u16> = (0..12)
            .map(|i| slot(&ns.queue(&format!("q{i}")).zset))
            .collect();
        assert_eq!(slots.len(), 12);
        // RSMQ's layout is untouched without a Cluster
        assert_eq!(Namespace::new("app", false).queue("jobs").zset, "app:jobs");
    }
}
