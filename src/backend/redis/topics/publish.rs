//! Publishing on Redis: one `XADD`, or topic_publish.lua for a batch, an age
//! limit or a topic that refuses when full.

use redis::Value;

use super::id;
use crate::backend::redis::RedisBackend;
use crate::backend::redis::scripts::{self, Reply, eval, run};
use crate::contract::topics::{EventId, EventOptions, WhenFull};
use crate::{Error, Result};

impl RedisBackend {
    /// [`Topics::publish`](crate::contract::topics::Topics::publish).
    pub(super) async fn publish_events(
        &self,
        topic: &str,
        events: &[(&str, &str)],
        options: &EventOptions,
    ) -> Result<Vec<EventId>> {
        crate::contract::topics::check_publish(events)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        self.topics_supported().await?;
        // the topic's name on the index of topics, with the events (sent
        // first, on the same connection: one round trip), unless this client
        // added it within the last minute (`index::INDEX_AGAIN`): a publish
        // makes the topic only the first time or after a delete, and a
        // `SADD` with every event would cost Redis a command an event. A
        // failure of its own does not fail the events published
        if !self.indexed_lately(topic) {
            let (index, published) = futures::join!(
                self.index_topic(topic),
                self.publish_to_stream(topic, events, options)
            );
            match (&index, &published) {
                (Err(e), Ok(_)) => {
                    tracing::warn!(topic, error = %e, "could not add the topic to the index of topics: it is listed once a subscriber is made or an event published again");
                }
                (Ok(()), _) => self.indexed_now(topic),
                _ => {}
            }
            return published;
        }
        self.publish_to_stream(topic, events, options).await
    }

    /// Appends `events` to the topic's stream.
    async fn publish_to_stream(
        &self,
        topic: &str,
        events: &[(&str, &str)],
        options: &EventOptions,
    ) -> Result<Vec<EventId>> {
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        // a limit past what Redis counts in (a signed 64-bit integer: it
        // refuses more) is one no stream reaches: none
        let max_len = options.max_len.filter(|&n| i64::try_from(n).is_ok());
        if let ([(t, d)], None, WhenFull::TrimOldest) = (events, options.max_age, options.when_full)
        {
            // one event trimmed by length only: a plain XADD, one command
            let mut cmd = redis::cmd("XADD");
            cmd.arg(&k.stream);
            if let Some(max) = max_len {
                cmd.arg("MAXLEN").arg("~").arg(max);
            }
            cmd.arg("*").arg("type").arg(t).arg("data").arg(d);
            let raw: Value = cmd.query_async(&mut con).await?;
            return match raw {
                Value::BulkString(b) => Ok(vec![id(&b)?]),
                Value::SimpleString(s) => Ok(vec![s.parse()?]),
                v => Err(Error::Protocol(format!("XADD replied {v:?}"))),
            };
        }
        let mut cmd = eval(&scripts::TOPIC_PUBLISH, &[&k.stream]);
        cmd.arg(max_len.map_or(String::new(), |n| n.to_string()))
            .arg(match options.when_full {
                WhenFull::Refuse => "refuse",
                _ => "trim",
            })
            .arg(options.max_age.map_or(String::new(), |d| {
                crate::contract::backend::clamped_ms(d).to_string()
            }));
        for (t, d) in events {
            cmd.arg(t).arg(d);
        }
        let v = run(&mut con, &scripts::TOPIC_PUBLISH, &cmd).await?;
        let (code, mut r) = Reply::status(&v)?;
        if code == -1 {
            return Err(Error::TopicFull {
                topic: topic.into(),
                max_len: options.max_len.unwrap_or(0),
            });
        }
        let mut ids = Vec::with_capacity(events.len());
        while !r.is_empty() {
            ids.push(id(r.bytes()?)?);
        }
        Ok(ids)
    }
}
