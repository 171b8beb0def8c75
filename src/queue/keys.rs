//! Every Redis key name redjob uses is built here.

/// The keys of one queue in RSMQ's layout.
#[derive(Debug, Clone)]
pub(crate) struct QueueKeys {
    /// `ns:q`: sorted set of message ids scored by visible-at milliseconds.
    pub zset: String,
    /// `ns:q:Q`: hash of attributes and message bodies.
    pub hash: String,
    /// `ns:rt:q`: the realtime PUBLISH channel (a channel, not a key).
    pub realtime: String,
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
        }
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
    }
}
