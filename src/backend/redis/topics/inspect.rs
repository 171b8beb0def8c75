//! Inspecting topics on Redis: a topic's state (topic_info.lua) and a
//! subscriber's dead letters.

use redis::Value;

use super::id;
use crate::Result;
use crate::backend::redis::RedisBackend;
use crate::backend::redis::scripts::{self, Reply, eval, run};
use crate::contract::topics::{DeadEvent, SubscriberInfo, TopicInfo};

impl RedisBackend {
    /// [`Topics::topic_info`](crate::contract::topics::Topics::topic_info).
    pub(super) async fn info_of_topic(&self, topic: &str) -> Result<Option<TopicInfo>> {
        self.topics_supported().await?;
        let groups = self.groups(topic).await?;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let mut keys = vec![k.stream.clone()];
        keys.extend(groups.iter().map(|g| k.dead(g)));
        let mut cmd = eval(&scripts::TOPIC_INFO, &keys);
        cmd.arg(&groups);
        let v = run(&mut con, &scripts::TOPIC_INFO, &cmd).await?;
        let (code, mut r) = Reply::status(&v)?;
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
            let dead = r.int()?.max(0) as u64;
            subscribers.push(SubscriberInfo {
                name,
                offset,
                pending,
                lag,
                lag_exact,
                consumers,
                dead,
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
