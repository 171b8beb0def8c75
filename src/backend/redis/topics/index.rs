//! The index of topic names on Redis (`ns:@topics`, see
//! [`Namespace::topic_index`](crate::backend::redis::keys::Namespace::topic_index)):
//! added to by publishes and subscribes, read by a listing, filled once
//! from a `SCAN` in a namespace an older release made topics in.

use futures::StreamExt;
use redis::Value;

use crate::backend::redis::RedisBackend;
use crate::backend::redis::pipelines;
use crate::{Error, Result};

/// How long after adding a topic to the index a publish of this client adds
/// it again: a topic deleted meanwhile and made again by this client's
/// publish (another client's delete: this client's own forgets the topic at
/// once) is listed within this, or at once by a subscribe.
pub(crate) const INDEX_AGAIN: std::time::Duration = std::time::Duration::from_secs(60);

/// The most topics a client remembers adding: past it, it forgets them all
/// (and adds each again with its next publish).
const INDEXED_KEPT: usize = 10_000;

impl RedisBackend {
    /// Whether this client added `topic` to the index within [`INDEX_AGAIN`].
    pub(super) fn indexed_lately(&self, topic: &str) -> bool {
        let indexed = self
            .shared
            .indexed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        indexed
            .get(topic)
            .is_some_and(|at| at.elapsed() < INDEX_AGAIN)
    }

    /// Notes that this client added `topic` to the index just now.
    pub(super) fn indexed_now(&self, topic: &str) {
        let mut indexed = self
            .shared
            .indexed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if indexed.len() >= INDEXED_KEPT && !indexed.contains_key(topic) {
            indexed.clear();
        }
        indexed.insert(topic.to_owned(), std::time::Instant::now());
    }

    /// Forgets that this client added `topic` (its delete took it off).
    pub(super) fn index_forget(&self, topic: &str) {
        let mut indexed = self
            .shared
            .indexed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        indexed.remove(topic);
    }

    /// Adds `topic` to the namespace's index of topic names
    /// ([`Namespace::topic_index`](crate::backend::redis::keys::Namespace::topic_index)).
    pub(super) async fn index_topic(&self, topic: &str) -> Result<()> {
        let (mut con, ns) = self.parts();
        let _: i64 = redis::cmd("SADD")
            .arg(ns.topic_index())
            .arg(topic)
            .query_async(&mut con)
            .await?;
        Ok(())
    }

    /// [`Topics::topic_names`](crate::contract::topics::Topics::topic_names): the members of the index of topic names, one
    /// `SMEMBERS` however many keys the namespace holds. An index without
    /// its mark of being complete (a namespace an older release made topics
    /// in, which kept none) is filled first from a `SCAN` of the keys, once:
    /// the mark goes in with the names found.
    pub(super) async fn indexed_topic_names(&self) -> Result<Vec<String>> {
        use crate::backend::redis::keys::TOPICS_INDEXED;
        let (mut con, ns) = self.parts();
        let index = ns.topic_index();
        // bytes: a member that is no UTF-8 must not fail the whole read
        let members: Vec<Vec<u8>> = redis::cmd("SMEMBERS")
            .arg(&index)
            .query_async(&mut con)
            .await?;
        let complete = members.iter().any(|m| m == TOPICS_INDEXED.as_bytes());
        let mut out: Vec<String> = members
            .into_iter()
            .filter(|m| m != TOPICS_INDEXED.as_bytes())
            .filter_map(|m| String::from_utf8(m).ok())
            .collect();
        if !complete {
            let keys = con.scan(&ns.topic_pattern(), "stream").await?;
            let found: Vec<String> = keys
                .iter()
                .filter_map(|k| ns.topic_of(k))
                .map(str::to_string)
                .collect();
            // the names, then the mark (a listing that stops between them
            // walks the keys again next time); a listing that cannot write
            // them (a read-only ACL user, Redis out of memory) lists what it
            // found all the same
            let mut filled: Result<()> = Ok(());
            for part in found.chunks(1000) {
                filled = redis::cmd("SADD")
                    .arg(&index)
                    .arg(part)
                    .query_async::<i64>(&mut con)
                    .await
                    .map(drop)
                    .map_err(Error::from);
                if filled.is_err() {
                    break;
                }
            }
            if filled.is_ok() {
                filled = redis::cmd("SADD")
                    .arg(&index)
                    .arg(TOPICS_INDEXED)
                    .query_async::<i64>(&mut con)
                    .await
                    .map(drop)
                    .map_err(Error::from);
            }
            if let Err(e) = filled {
                tracing::warn!(key = %index, error = %e, "could not fill the index of topics: the next listing walks the keys again");
            }
            out.extend(found);
        }
        out.sort_unstable();
        out.dedup();
        self.existing_topics(out).await
    }

    /// `names` whose stream exists: an `EXISTS` of each, pipelined on one
    /// server (on a Cluster, where a call's keys hold one slot, 256 at
    /// once). An index can name a topic gone without a delete of redjob's
    /// (a `DEL`, a master restarted without persistence, a publish racing a
    /// delete of its topic), which a listing leaves out, as it left out
    /// before the index.
    async fn existing_topics(&self, names: Vec<String>) -> Result<Vec<String>> {
        if names.is_empty() {
            return Ok(names);
        }
        let (con, ns) = self.parts();
        let found: Vec<bool> = if con.is_cluster() {
            let reads: Vec<_> = names
                .iter()
                .map(|t| {
                    let mut con = con.clone();
                    let stream = ns.topic(t).stream;
                    async move {
                        redis::cmd("EXISTS")
                            .arg(stream)
                            .query_async::<bool>(&mut con)
                            .await
                            .map_err(Error::from)
                    }
                })
                .collect();
            futures::stream::iter(reads)
                .buffered(256)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<_>>()?
        } else {
            let mut con = con;
            let mut pipe = redis::pipe();
            for t in &names {
                pipe.cmd("EXISTS").arg(ns.topic(t).stream);
            }
            let replies = pipelines::run_pipeline(&mut con, &[], pipe).await?;
            replies.iter().map(|v| matches!(v, Value::Int(1))).collect()
        };
        if found.len() != names.len() {
            return Err(Error::Protocol(format!(
                "{} replies to {} EXISTS",
                found.len(),
                names.len()
            )));
        }
        Ok(names
            .into_iter()
            .zip(found)
            .filter_map(|(t, there)| there.then_some(t))
            .collect())
    }
}
