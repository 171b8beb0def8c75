//! Every Redis key name redjob uses is built here.
//!
//! RSMQ's keys are `ns:QUEUES`, `ns:q` and `ns:q:Q`. redjob's own extra keys sit
//! beside them as `ns:q:<suffix>`; RSMQ queue names cannot contain `:`, so no RSMQ
//! queue can collide with them.

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
    /// `ns:q:dead:Q`: hash of dead letters: `<id>` body, `<id>:err`, `<id>:n` attempts.
    pub dead_hash: String,
    /// `ns:q:stats`: hash of counters `processed`, `failed`, `retried`, `dead`.
    pub stats: String,
    /// `ns:q:unique`: hash of unique keys, `k:<key>` → `<id> <priority> <expires
    /// ms>` and `i:<id>` → `<key>` (see `unique.lua`).
    pub unique: String,
    /// `ns:q:periodic`: hash of periodic schedules' last ticks, `<name>` → Unix ms.
    pub periodic: String,
}

/// `ns:` as RSMQ writes its `redisns`.
#[derive(Debug, Clone)]
pub(crate) struct Namespace {
    prefix: String,
}

impl Namespace {
    pub fn new(ns: &str) -> Self {
        Namespace {
            prefix: format!("{ns}:"),
        }
    }

    /// `ns:QUEUES`, the set of queue names.
    pub fn queues(&self) -> String {
        format!("{}QUEUES", self.prefix)
    }

    pub fn queue(&self, name: &str) -> QueueKeys {
        QueueKeys {
            zset: format!("{}{name}", self.prefix),
            hash: format!("{}{name}:Q", self.prefix),
            realtime: format!("{}rt:{name}", self.prefix),
            dead: format!("{}{name}:dead", self.prefix),
            dead_hash: format!("{}{name}:dead:Q", self.prefix),
            stats: format!("{}{name}:stats", self.prefix),
            unique: format!("{}{name}:unique", self.prefix),
            periodic: format!("{}{name}:periodic", self.prefix),
        }
    }

    /// The `SCAN` pattern of every topic's stream: `ns:t:{*}` (a stream's
    /// other keys go on after the brace).
    pub fn topic_pattern(&self) -> String {
        format!("{}t:{{*}}", self.prefix)
    }

    /// The topic a key matching [`topic_pattern`](Self::topic_pattern) is the
    /// stream of.
    pub fn topic_of<'k>(&self, key: &'k str) -> Option<&'k str> {
        key.strip_prefix(&self.prefix)?
            .strip_prefix("t:{")?
            .strip_suffix('}')
    }

    /// A topic's keys.
    pub fn topic(&self, name: &str) -> TopicKeys {
        TopicKeys {
            stream: format!("{}t:{{{name}}}", self.prefix),
        }
    }

    /// The live-worker registry: `ns:{@workers}`, a sorted set of worker ids
    /// scored by when their registration runs out (Unix ms), and
    /// `ns:{@workers}:info`, a hash of each one's last beat (JSON). `@` cannot
    /// be in a queue name; the braces keep both in one Cluster slot.
    pub fn workers(&self) -> [String; 2] {
        let base = format!("{}{{@workers}}", self.prefix);
        let info = format!("{base}:info");
        [base, info]
    }
}

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

    /// Every priority level's sorted set but 0's, highest priority first: the keys
    /// a fetch over all priorities takes after `ns:q` and `ns:q:Q`.
    pub fn levels(&self) -> Vec<String> {
        crate::queue::priorities()
            .filter(|p| *p != 0)
            .map(|p| self.level(p))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsmq_key_names() {
        let ns = Namespace::new("rsmq");
        let k = ns.queue("jobs");
        assert_eq!(k.zset, "rsmq:jobs");
        assert_eq!(k.hash, "rsmq:jobs:Q");
        assert_eq!(k.realtime, "rsmq:rt:jobs");
        assert_eq!(ns.queues(), "rsmq:QUEUES");
        assert_eq!(k.periodic, "rsmq:jobs:periodic");
        let t = ns.topic("orders");
        assert_eq!(t.stream, "rsmq:t:{orders}");
        assert_eq!(t.dead("billing"), "rsmq:t:{orders}:dead:billing");
        assert_eq!(t.owner("billing"), "rsmq:t:{orders}:owner:billing");
        assert_eq!(ns.topic_pattern(), "rsmq:t:{*}");
        assert_eq!(ns.topic_of(&t.stream), Some("orders"));
        assert_eq!(ns.topic_of(&t.dead("billing")), None);
        assert_eq!(ns.topic_of("other:t:{orders}"), None);
        assert_eq!(
            ns.workers(),
            ["rsmq:{@workers}".to_string(), "rsmq:{@workers}:info".into()]
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
}
