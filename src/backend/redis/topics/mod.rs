//! [`Topics`] on Redis Streams: a topic is a stream, a subscriber a consumer
//! group (`topic_*.lua`; reads are `XREADGROUP` on a connection of their own).
//! Publishing in publish.rs, reads, claims and renewals in read.rs,
//! settles in settle.rs, inspection in inspect.rs, the index of topic names
//! in index.rs, dead letters' requeue and deletion in dead.rs; making, moving and removing subscribers here.

mod dead;
mod index;
mod inspect;
mod publish;
mod read;
mod settle;

use std::time::Duration;

use redis::Value;

use crate::backend::redis::RedisBackend;
use crate::backend::redis::scripts::{self, eval, run};
use crate::contract::topics::{
    Claimed, DeadEvent, DeadEvents, EventId, EventOptions, EventSettle, Received, Renewed, Start,
    TopicInfo, Topics,
};
use crate::{Error, Result};

fn id(b: &[u8]) -> Result<EventId> {
    std::str::from_utf8(b)
        .map_err(|_| Error::Protocol(format!("event id not UTF-8: {b:?}")))?
        .parse()
}

fn text(b: Option<&[u8]>) -> Option<String> {
    b.and_then(|b| std::str::from_utf8(b).ok())
        .map(str::to_string)
}

fn not_found(topic: &str, subscriber: &str) -> Error {
    Error::SubscriberNotFound {
        topic: topic.into(),
        subscriber: subscriber.into(),
    }
}

fn is_nogroup(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.code() == Some("NOGROUP") || r.to_string().contains("NOGROUP"))
}

impl RedisBackend {
    /// Refuses topics on a server older than Redis 7.0 with a clear error (they
    /// need its consumer-group lag, `entries-added` and `ENTRIESREAD`). Reads
    /// the server's version once per backend.
    async fn topics_supported(&self) -> Result<()> {
        let version = self.server_version().await?;
        if version == "unknown" || crate::backend::redis::version_key(version) >= (7, 0) {
            Ok(())
        } else {
            Err(Error::ServerTooOld {
                feature: "topics",
                needs: "7.0",
                found: version.to_string(),
            })
        }
    }

    /// topic_group.lua: 1 created or moved, 0 existed, -1 missing.
    async fn group(&self, topic: &str, subscriber: &str, mode: &str, at: Start) -> Result<i64> {
        self.topics_supported().await?;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let offset = at.offset().map_or("$".to_string(), |o| o.to_string());
        let mut cmd = eval(&scripts::TOPIC_GROUP, &[&k.stream, &k.epoch(subscriber)]);
        cmd.arg(subscriber).arg(mode).arg(offset);
        scripts::int(&run(&mut con, &scripts::TOPIC_GROUP, &cmd).await?)
    }

    /// The names of the topic's consumer groups.
    async fn groups(&self, topic: &str) -> Result<Vec<String>> {
        let (mut con, ns) = self.parts();
        let stream = ns.topic(topic).stream;
        let exists: bool = redis::cmd("EXISTS")
            .arg(&stream)
            .query_async(&mut con)
            .await?;
        if !exists {
            return Ok(Vec::new());
        }
        let v: Value = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&stream)
            .query_async(&mut con)
            .await?;
        let mut out = Vec::new();
        if let Value::Array(groups) = v {
            for g in groups {
                let kv: Vec<Value> = match g {
                    Value::Array(kv) => kv,
                    Value::Map(m) => m.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                    _ => continue,
                };
                for pair in kv.chunks(2) {
                    if let [Value::BulkString(k), Value::BulkString(v)] = pair
                        && k == b"name"
                    {
                        out.push(String::from_utf8_lossy(v).into_owned());
                    }
                }
            }
        }
        Ok(out)
    }
}

impl Topics for RedisBackend {
    async fn publish(
        &self,
        topic: &str,
        events: &[(&str, &str)],
        options: &EventOptions,
    ) -> Result<Vec<EventId>> {
        self.publish_events(topic, events, options).await
    }

    async fn subscribe(&self, topic: &str, subscriber: &str, start: Start) -> Result<bool> {
        let made = self.group(topic, subscriber, "create", start).await?;
        // after the stream is made, and for a subscriber that existed too:
        // a topic an older release made (or whose entry a publish racing a
        // delete lost) is listed once a worker subscribes to it again
        // (a failure of its own, Redis out of memory say, fails no subscribe:
        // the topic is listed once a later one or a publish adds it)
        if made != -2
            && let Err(e) = self.index_topic(topic).await
        {
            tracing::warn!(topic, error = %e, "could not add the topic to the index of topics: it is listed once a subscriber is made or an event published again");
        }
        match made {
            -2 => Err(crate::contract::topics::start_too_late(start)),
            made => Ok(made == 1),
        }
    }

    async fn rewind(&self, topic: &str, subscriber: &str, to: Start) -> Result<()> {
        match self.group(topic, subscriber, "move", to).await? {
            -1 => Err(not_found(topic, subscriber)),
            -2 => Err(crate::contract::topics::rewind_too_late(to)),
            _ => Ok(()),
        }
    }

    async fn skip_to(&self, topic: &str, subscriber: &str, upto: EventId) -> Result<bool> {
        let to = Start::At(upto.after());
        match self.group(topic, subscriber, "forward", to).await? {
            -1 => Err(not_found(topic, subscriber)),
            -2 => Err(crate::contract::topics::rewind_too_late(to)),
            moved => Ok(moved == 1),
        }
    }

    async fn unsubscribe(&self, topic: &str, subscriber: &str) -> Result<bool> {
        if !self.groups(topic).await?.iter().any(|g| g == subscriber) {
            return Ok(false);
        }
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        // UNLINK: a large stream of dead letters is freed in the background
        let (_, gone): ((), i64) = redis::pipe()
            .cmd("UNLINK")
            .arg(k.dead(subscriber))
            .arg(k.attempts(subscriber))
            .arg(k.epoch(subscriber))
            .cmd("XGROUP")
            .arg("DESTROY")
            .arg(&k.stream)
            .arg(subscriber)
            .query_async(&mut con)
            .await?;
        Ok(gone == 1)
    }

    async fn delete_topic(&self, topic: &str) -> Result<bool> {
        // a publish of this client after the delete adds the topic again
        self.index_forget(topic);
        let groups = self.groups(topic).await?;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let mut keys = vec![k.stream.clone()];
        keys.extend(groups.iter().map(|g| k.dead(g)));
        keys.extend(groups.iter().map(|g| k.attempts(g)));
        keys.extend(groups.iter().map(|g| k.epoch(g)));
        // UNLINK: a large stream is freed in the background, not by blocking
        // Redis; and its name off the index, in one transaction on one
        // server (on a Cluster the index is in another slot: after it)
        let cluster = ns.is_cluster();
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("UNLINK").arg(&keys);
        if !cluster {
            pipe.cmd("SREM").arg(ns.topic_index()).arg(topic).ignore();
        }
        let (n,): (i64,) = pipe.query_async(&mut con).await?;
        if cluster {
            let _: i64 = redis::cmd("SREM")
                .arg(ns.topic_index())
                .arg(topic)
                .query_async(&mut con)
                .await?;
        }
        self.index_forget(topic);
        Ok(n > 0)
    }

    async fn read(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        count: usize,
        block: Duration,
    ) -> Result<Option<Vec<Received>>> {
        self.read_events(topic, subscriber, consumer, count, block)
            .await
    }

    async fn claim(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        min_idle: Duration,
        count: usize,
        from: EventId,
    ) -> Result<Option<Claimed>> {
        self.claim_events(topic, subscriber, consumer, min_idle, count, from)
            .await
    }

    async fn renew(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        ids: &[EventId],
    ) -> Result<Vec<Renewed>> {
        self.renew_events(topic, subscriber, consumer, ids).await
    }

    async fn settle_events(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        batch: &EventSettle,
        keep_dead: Option<u64>,
    ) -> Result<()> {
        self.settle_batch(topic, subscriber, consumer, batch, keep_dead)
            .await
    }

    async fn own(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        lease: Option<Duration>,
    ) -> Result<bool> {
        let (mut con, ns) = self.parts();
        let owner = ns.topic(topic).owner(subscriber);
        let mut cmd = eval(&scripts::TOPIC_OWN, &[&owner]);
        cmd.arg(consumer)
            .arg(lease.map_or(0, |l| crate::contract::backend::clamped_ms(l).max(1)));
        Ok(scripts::int(&run(&mut con, &scripts::TOPIC_OWN, &cmd).await?)? == 1)
    }

    async fn leave(&self, topic: &str, subscriber: &str, consumer: &str) -> Result<()> {
        let (mut con, ns) = self.parts();
        let stream = ns.topic(topic).stream;
        // only a consumer that holds nothing goes: DELCONSUMER drops its pending list
        let pending: Result<Value> = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(subscriber)
            .arg("-")
            .arg("+")
            .arg(1)
            .arg(consumer)
            .query_async(&mut con)
            .await
            .map_err(Error::from);
        match pending {
            Ok(Value::Array(v)) if v.is_empty() => {
                let _: i64 = redis::cmd("XGROUP")
                    .arg("DELCONSUMER")
                    .arg(&stream)
                    .arg(subscriber)
                    .arg(consumer)
                    .query_async(&mut con)
                    .await?;
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) if is_nogroup(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn topic_names(&self) -> Result<Vec<String>> {
        self.indexed_topic_names().await
    }

    async fn topic_info(&self, topic: &str) -> Result<Option<TopicInfo>> {
        self.info_of_topic(topic).await
    }

    async fn topic_info_for(&self, topic: &str, subscriber: &str) -> Result<Option<TopicInfo>> {
        self.info_for_subscriber(topic, subscriber).await
    }

    async fn topic_infos(&self, topics: &[String]) -> Result<Vec<Option<TopicInfo>>> {
        self.infos_of_topics(topics).await
    }

    async fn dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        limit: usize,
    ) -> Result<Vec<DeadEvent>> {
        self.list_dead_events(topic, subscriber, limit).await
    }

    async fn requeue_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        which: DeadEvents<'_>,
    ) -> Result<u64> {
        let n = self
            .dead_letters(topic, subscriber, "requeue", which)
            .await?;
        u64::try_from(n).map_err(|_| not_found(topic, subscriber))
    }

    async fn delete_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        which: DeadEvents<'_>,
    ) -> Result<u64> {
        Ok(self
            .dead_letters(topic, subscriber, "delete", which)
            .await?
            .max(0) as u64)
    }
}
