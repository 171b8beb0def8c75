//! Inspecting topics on Redis: a topic's state (topic_info.lua) and a
//! subscriber's dead letters.

use futures::StreamExt;
use redis::Value;

use super::id;
use crate::Result;
use crate::backend::redis::connection::Connection;
use crate::backend::redis::scripts::{self, Reply, eval, run};
use crate::backend::redis::{RedisBackend, pipelines};
use crate::contract::topics::{DeadEvent, SubscriberInfo, TopicInfo};

/// Topics one topic_info.lua call reads on a single server (the calls of a
/// longer list go in one pipeline).
const PER_CALL: usize = 50;
/// Topics read at once on a Cluster.
const AT_ONCE: usize = 256;

/// A topic read by topic_info.lua, its subscribers' dead letters not counted
/// yet; `None` for a topic that does not exist.
fn parse_info(v: &Value) -> Result<Option<TopicInfo>> {
    let (code, mut r) = Reply::status(v)?;
    if code == 0 {
        return Ok(None);
    }
    let length = r.int()?.max(0) as u64;
    let published = r.int()?.max(0) as u64;
    let first = r.opt_bytes()?.map(id).transpose()?;
    let last = r.opt_bytes()?.map(id).transpose()?;
    let memory = r.int()?.max(0) as u64;
    let mut subscribers = Vec::new();
    while !r.is_empty() {
        let name = String::from_utf8_lossy(r.bytes()?).into_owned();
        let offset = id(r.bytes()?)?;
        let pending = r.int()?.max(0) as u64;
        let lag = r.int()?.max(0) as u64;
        let lag_exact = r.int()? != 0;
        let consumers = r.int()?.max(0) as u64;
        subscribers.push(SubscriberInfo {
            name,
            offset,
            pending,
            lag,
            lag_exact,
            consumers,
            dead: 0,
        });
    }
    subscribers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Some(TopicInfo {
        length,
        published,
        first,
        last,
        memory,
        subscribers,
    }))
}

/// The per-topic replies of one topic_info.lua call over `asked` topics:
/// the first ones, one at least (the script stops at its bound of
/// subscribers read).
fn read_of(reply: Value, asked: usize) -> Result<Vec<Value>> {
    match reply {
        Value::Array(items) if !items.is_empty() && items.len() <= asked => Ok(items),
        v => Err(crate::Error::Protocol(format!(
            "topic_info.lua read none of {asked} topics, or more: {v:?}"
        ))),
    }
}

/// The per-topic replies of topic_info.lua calls, in order.
fn per_topic(replies: &[Value], topics: usize) -> Result<Vec<&Value>> {
    let each: Vec<&Value> = replies
        .iter()
        .flat_map(|v| match v {
            Value::Array(items) => items.as_slice(),
            _ => &[],
        })
        .collect();
    if each.len() != topics {
        return Err(crate::Error::Protocol(format!(
            "topic_info.lua read {} of {topics} topics",
            each.len()
        )));
    }
    Ok(each)
}

impl RedisBackend {
    /// [`Topics::topic_info`](crate::contract::topics::Topics::topic_info):
    /// [`infos_of_topics`](Self::infos_of_topics) of one.
    pub(super) async fn info_of_topic(&self, topic: &str) -> Result<Option<TopicInfo>> {
        let mut one = self.infos_of_topics(&[topic.to_string()]).await?;
        Ok(one.pop().flatten())
    }

    /// [`Topics::topic_infos`](crate::contract::topics::Topics::topic_infos):
    /// on one server, topic_info.lua over 50 topics a call, the calls in one
    /// pipeline (a call reads the subscribers of 100 at most, bar its first
    /// topic's, and the topics it left are asked for in a further pipeline),
    /// then an `XLEN` of each subscriber's dead letters in a last one (two
    /// round trips when the topics have 100 subscribers a call or fewer,
    /// whatever how many topics); on a Cluster,
    /// where a call's keys hold one slot, each topic in its two round trips,
    /// 256 topics at once.
    pub(super) async fn infos_of_topics(
        &self,
        topics: &[String],
    ) -> Result<Vec<Option<TopicInfo>>> {
        self.topics_supported().await?;
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let (con, ns) = self.parts();
        if con.is_cluster() {
            // (made first: a lazy map of them fails the `Send` check of the
            // caller's future)
            let reads: Vec<_> = topics
                .iter()
                .map(|topic| self.info_on_cluster(con.clone(), topic.clone()))
                .collect();
            return futures::stream::iter(reads)
                .buffered(AT_ONCE)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect();
        }
        let mut con = con;
        let loaded = [(&*scripts::TOPIC_INFO, &self.shared.topic_info_loaded)];
        // each topic's reply, by its index in `topics`
        let mut read: Vec<Option<Value>> = vec![None; topics.len()];
        let mut left: Vec<usize> = (0..topics.len()).collect();
        while !left.is_empty() {
            let mut pipe = redis::pipe();
            for page in left.chunks(PER_CALL) {
                let keys: Vec<String> = page.iter().map(|&i| ns.topic(&topics[i]).stream).collect();
                pipe.add_command(eval(&scripts::TOPIC_INFO, &keys));
            }
            let replies = pipelines::run_pipeline(&mut con, &loaded, pipe).await?;
            let pages = left.chunks(PER_CALL).count();
            if replies.len() != pages {
                return Err(crate::Error::Protocol(format!(
                    "{} replies to {pages} topic_info.lua calls",
                    replies.len()
                )));
            }
            let mut next = Vec::new();
            for (page, reply) in left.chunks(PER_CALL).zip(replies) {
                let items = read_of(reply, page.len())?;
                let done = items.len();
                for (&i, v) in page.iter().zip(items) {
                    read[i] = Some(v);
                }
                next.extend_from_slice(&page[done..]);
            }
            left = next;
        }
        let mut infos = read
            .iter()
            .map(|v| parse_info(v.as_ref().unwrap_or(&Value::Nil)))
            .collect::<Result<Vec<_>>>()?;
        // the dead letters of every subscriber read, in one pipeline
        let mut pipe = redis::pipe();
        for (topic, info) in topics.iter().zip(&infos) {
            let k = ns.topic(topic);
            for s in info.iter().flat_map(|t| &t.subscribers) {
                pipe.cmd("XLEN").arg(k.dead(&s.name));
            }
        }
        if !pipe.is_empty() {
            let lens = pipelines::run_pipeline(&mut con, &[], pipe).await?;
            dead_counts(infos.iter_mut().flatten(), &lens)?;
        }
        Ok(infos)
    }

    /// [`Topics::topic_info_for`](crate::contract::topics::Topics::topic_info_for):
    /// topic_info.lua naming the subscriber, and its dead letters' `XLEN`, in
    /// one pipeline (a topic's keys hold one slot).
    pub(super) async fn info_for_subscriber(
        &self,
        topic: &str,
        subscriber: &str,
    ) -> Result<Option<TopicInfo>> {
        self.topics_supported().await?;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let mut call = eval(&scripts::TOPIC_INFO, &[&k.stream]);
        call.arg(subscriber);
        let mut pipe = redis::pipe();
        pipe.add_command(call);
        pipe.cmd("XLEN").arg(k.dead(subscriber));
        let loaded = [(&*scripts::TOPIC_INFO, &self.shared.topic_info_loaded)];
        let replies = pipelines::run_pipeline(&mut con, &loaded, pipe).await?;
        let (Some(call), Some(len)) = (replies.first(), replies.get(1)) else {
            return Err(crate::Error::Protocol(format!(
                "{} replies to a topic's read",
                replies.len()
            )));
        };
        let mut info = match per_topic(std::slice::from_ref(call), 1)?.first() {
            Some(v) => parse_info(v)?,
            None => None,
        };
        if let Some(t) = info.as_mut() {
            // (another subscriber's row would be a script out of step)
            t.subscribers.retain(|s| s.name == subscriber);
            let lens = vec![len.clone(); t.subscribers.len()];
            dead_counts(std::iter::once(t), &lens)?;
        }
        Ok(info)
    }

    /// One topic on a Cluster: topic_info.lua, then its subscribers' dead
    /// letters' lengths in one pipeline (a topic's keys hold one slot).
    async fn info_on_cluster(
        &self,
        mut con: Connection,
        topic: String,
    ) -> Result<Option<TopicInfo>> {
        let k = self.parts().1.topic(&topic);
        let cmd = eval(&scripts::TOPIC_INFO, &[&k.stream]);
        let v = run(&mut con, &scripts::TOPIC_INFO, &cmd).await?;
        let mut info = match per_topic(std::slice::from_ref(&v), 1)?.first() {
            Some(v) => parse_info(v)?,
            None => None,
        };
        if let Some(t) = info.as_mut().filter(|t| !t.subscribers.is_empty()) {
            let mut pipe = redis::pipe();
            for s in &t.subscribers {
                pipe.cmd("XLEN").arg(k.dead(&s.name));
            }
            let lens = pipelines::run_pipeline(&mut con, &[], pipe).await?;
            dead_counts(std::iter::once(t), &lens)?;
        }
        Ok(info)
    }

    /// [`Topics::dead_events`](crate::contract::topics::Topics::dead_events).
    pub(super) async fn list_dead_events(
        &self,
        topic: &str,
        subscriber: &str,
        limit: usize,
    ) -> Result<Vec<DeadEvent>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (mut con, ns) = self.parts();
        let dead = ns.topic(topic).dead(subscriber);
        let v: Value = redis::cmd("XREVRANGE")
            .arg(&dead)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(limit.min(crate::contract::inspect::MAX_PAGE))
            .query_async(&mut con)
            .await?;
        let mut out = Vec::new();
        let Value::Array(list) = v else {
            return Ok(out);
        };
        for e in list {
            let Value::Array(e) = e else { continue };
            let (Some(Value::BulkString(at)), Some(Value::Array(kv))) = (e.first(), e.get(1))
            else {
                continue;
            };
            let dead_id = id(at)?;
            let mut d = DeadEvent {
                dead_id,
                at_ms: dead_id.ms(),
                ..DeadEvent::default()
            };
            for pair in kv.chunks(2) {
                if let [Value::BulkString(k), Value::BulkString(v)] = pair {
                    let v = String::from_utf8_lossy(v).into_owned();
                    match k.as_slice() {
                        b"id" => d.id = v.parse().unwrap_or_default(),
                        b"type" => d.event_type = v,
                        b"data" => d.data = v,
                        b"error" => d.error = v,
                        b"deliveries" => d.deliveries = v.parse().unwrap_or(0),
                        b"attempts" => d.runs = crate::contract::attempts::parse(v.as_bytes()),
                        _ => {}
                    }
                }
            }
            out.push(d);
        }
        Ok(out)
    }
}

/// Sets the dead letters of the subscribers of `topics` from `lens`, the
/// `XLEN`s of their dead letters in the same order.
fn dead_counts<'a>(
    topics: impl IntoIterator<Item = &'a mut TopicInfo>,
    lens: &[Value],
) -> Result<()> {
    let subscribers: Vec<&mut SubscriberInfo> = topics
        .into_iter()
        .flat_map(|t| t.subscribers.iter_mut())
        .collect();
    if subscribers.len() != lens.len() {
        return Err(crate::Error::Protocol(format!(
            "{} dead letters' lengths for {} subscribers",
            lens.len(),
            subscribers.len()
        )));
    }
    for (s, n) in subscribers.into_iter().zip(lens) {
        s.dead = scripts::int(n)?.max(0) as u64;
    }
    Ok(())
}
