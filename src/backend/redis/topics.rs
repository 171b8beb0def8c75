//! [`Topics`] on Redis Streams: a topic is a stream, a subscriber a consumer
//! group (`topic_*.lua`; reads are `XREADGROUP` on a connection of their own).

use std::time::Duration;

use redis::Value;

use crate::backend::redis::RedisBackend;
use crate::backend::redis::connection::Connection;
use crate::backend::redis::scripts::{self, Reply, eval, run};
use crate::contract::attempts::RunBy;
use crate::contract::topics::{
    Claimed, DeadEvent, DeadEvents, Delivery, EventId, EventOptions, EventSettle, Received,
    Renewed, Start, SubscriberInfo, TopicInfo, Topics, WhenFull,
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

/// A stream entry's `type`, `data` and `to` (other fields are ignored).
fn fields(v: &Value) -> (Option<String>, Option<String>, Option<String>) {
    let (mut t, mut d, mut to) = (None, None, None);
    if let Value::Array(kv) = v {
        for pair in kv.chunks(2) {
            if let [Value::BulkString(k), Value::BulkString(val)] = pair {
                let val = std::str::from_utf8(val).ok().map(str::to_string);
                match k.as_slice() {
                    b"type" => t = val,
                    b"data" => d = val,
                    b"to" => to = val,
                    _ => {}
                }
            }
        }
    }
    (t, d, to)
}

/// Writes acknowledgements as `topic_settle.lua` reads them: their count of
/// arguments, then groups by epoch (one, but across a rewind), each the
/// epoch, then `k` and the ids of `k` first deliveries, or `-k` and `k`
/// pairs of a claimed delivery's id and count (checked against the pending
/// entry, see [`Delivery`]). A first delivery's acknowledgement is one
/// argument, as before deliveries were named.
fn ack_args(cmd: &mut redis::Cmd, acks: &[Delivery]) {
    /// An epoch's first deliveries, and its claimed ones with their counts.
    type Group = (Vec<EventId>, Vec<(EventId, u32)>);
    let mut groups: std::collections::BTreeMap<u64, Group> = std::collections::BTreeMap::new();
    for d in acks {
        let g = groups.entry(d.epoch).or_default();
        if d.count <= 1 {
            g.0.push(d.id);
        } else {
            g.1.push((d.id, d.count));
        }
    }
    let args: usize = groups
        .values()
        .map(|(first, claimed)| {
            let n = |k: usize, each: usize| if k == 0 { 0 } else { 2 + each * k };
            n(first.len(), 1) + n(claimed.len(), 2)
        })
        .sum();
    cmd.arg(args);
    for (epoch, (first, claimed)) in &groups {
        if !first.is_empty() {
            cmd.arg(epoch).arg(first.len());
            for id in first {
                cmd.arg(id.to_string());
            }
        }
        if !claimed.is_empty() {
            cmd.arg(epoch).arg(-(claimed.len() as i64));
            for (id, count) in claimed {
                cmd.arg(id.to_string()).arg(count);
            }
        }
    }
}

/// `XREADGROUP`'s reply: `[[stream, [[id, [field, value, ...]], ...]]]` on
/// RESP2, `{stream: [[id, [field, value, ...]], ...]}` on RESP3 (a
/// `?protocol=resp3` URL), or nil.
fn entries(v: &Value) -> Result<Vec<Received>> {
    let mut out = Vec::new();
    // each stream's list of entries, from either form
    let lists: Vec<&Value> = match v {
        Value::Array(streams) => streams
            .iter()
            .filter_map(|s| match s {
                Value::Array(parts) => parts.get(1),
                _ => None,
            })
            .collect(),
        Value::Map(streams) => streams.iter().map(|(_, list)| list).collect(),
        _ => return Ok(out),
    };
    for list in lists {
        let Value::Array(list) = list else { continue };
        for e in list {
            let Value::Array(e) = e else { continue };
            let Some(Value::BulkString(raw)) = e.first() else {
                continue;
            };
            let (event_type, data, to) = e.get(1).map(fields).unwrap_or_default();
            out.push(Received {
                id: id(raw)?,
                event_type,
                data,
                to,
                deliveries: 1,
                epoch: 0,
            });
        }
    }
    Ok(out)
}

/// Forgets a blocking read's connection when dropped (see [`RedisBackend::read`]).
struct CloseOnDrop<'a>(Option<(&'a RedisBackend, &'a str)>);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((b, name)) = self.0.take() {
            b.drop_reader(name);
        }
    }
}

fn is_nogroup(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.code() == Some("NOGROUP") || r.to_string().contains("NOGROUP"))
}

/// How often a backend's claims for one subscriber ask to remove its gone
/// consumers (one `XINFO CONSUMERS` in the claim's script).
const GONE_SWEEP_EVERY: Duration = Duration::from_secs(60);

impl RedisBackend {
    /// The idle time in ms after which a claim for `subscriber` of `stream`
    /// removes the subscriber's consumers that hold nothing (see
    /// topic_claim.lua): "0" but once every [`GONE_SWEEP_EVERY`].
    fn gone_sweep(&self, stream: &str, subscriber: &str, min_idle: Duration) -> String {
        let now = std::time::Instant::now();
        let mut swept = self.shared.swept.lock().unwrap_or_else(|e| e.into_inner());
        let key = format!("{stream} {subscriber}");
        if swept
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < GONE_SWEEP_EVERY)
        {
            return "0".into();
        }
        swept.insert(key, now);
        crate::contract::topics::gone_after_ms(min_idle).to_string()
    }

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
        crate::contract::topics::check_publish(events)?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        self.topics_supported().await?;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        if let ([(t, d)], None, WhenFull::TrimOldest) = (events, options.max_age, options.when_full)
        {
            // one event trimmed by length only: a plain XADD, one command
            let mut cmd = redis::cmd("XADD");
            cmd.arg(&k.stream);
            if let Some(max) = options.max_len {
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
        cmd.arg(options.max_len.map_or(String::new(), |n| n.to_string()))
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

    async fn subscribe(&self, topic: &str, subscriber: &str, start: Start) -> Result<bool> {
        match self.group(topic, subscriber, "create", start).await? {
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
        let groups = self.groups(topic).await?;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let mut keys = vec![k.stream.clone()];
        keys.extend(groups.iter().map(|g| k.dead(g)));
        keys.extend(groups.iter().map(|g| k.attempts(g)));
        keys.extend(groups.iter().map(|g| k.epoch(g)));
        // UNLINK: a large stream is freed in the background, not by blocking Redis
        let n: i64 = redis::cmd("UNLINK")
            .arg(&keys)
            .query_async(&mut con)
            .await?;
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
        let k = self.parts().1.topic(topic);
        let stream = &k.stream;
        let name = format!("{consumer}\n{subscriber}\n{topic}");
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(subscriber)
            .arg(consumer)
            .arg("COUNT")
            .arg(count.clamp(1, crate::contract::topics::MAX_TAKE));
        if !block.is_zero() {
            cmd.arg("BLOCK")
                .arg(crate::contract::backend::clamped_ms(block).max(1));
        }
        cmd.arg("STREAMS").arg(stream).arg(">");
        // the subscriber's epoch, read before the events in one pipeline: a
        // rewind after it changes it, so a settle of these then is not
        // applied (see Delivery::epoch)
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(k.epoch(subscriber)).add_command(cmd);
        let reply: Result<(Option<u64>, Value)> = if block.is_zero() {
            let (mut con, _) = self.parts();
            pipe.query_async(&mut con).await.map_err(Error::from)
        } else {
            let mut con = self.reader(&name, block).await?;
            // a read dropped while it waits (its worker gone) closes its
            // connection: Redis delivers a client that left nothing, where
            // the read would take the events published meanwhile for a
            // consumer that is gone (they would wait a lease for a claim)
            let mut closing = CloseOnDrop(Some((self, &name)));
            let r = pipe.query_async(&mut con).await.map_err(Error::from);
            closing.0 = None;
            r
        };
        match reply {
            Ok((epoch, v)) => {
                let mut got = entries(&v)?;
                for e in &mut got {
                    e.epoch = epoch.unwrap_or(0);
                }
                Ok(Some(got))
            }
            Err(e) if is_nogroup(&e) => Ok(None),
            Err(e) => {
                self.drop_reader(&name);
                Err(e)
            }
        }
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
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let mut cmd = eval(
            &scripts::TOPIC_CLAIM,
            &[&k.stream, &k.attempts(subscriber), &k.epoch(subscriber)],
        );
        cmd.arg(subscriber)
            .arg(consumer)
            .arg(crate::contract::backend::clamped_ms(min_idle))
            .arg(count.clamp(1, crate::contract::topics::MAX_TAKE))
            .arg(from.to_string())
            .arg(self.gone_sweep(&k.stream, subscriber, min_idle));
        let v = run(&mut con, &scripts::TOPIC_CLAIM, &cmd).await?;
        let (code, mut r) = Reply::status(&v)?;
        if code == -1 {
            return Ok(None);
        }
        let next = id(r.bytes()?)?;
        let epoch = r.int()?.max(0) as u64;
        let mut events = Vec::new();
        while !r.is_empty() {
            let eid = id(r.bytes()?)?;
            let deliveries = r.int()?.clamp(1, i64::from(u32::MAX)) as u32;
            let event_type = text(r.opt_bytes()?);
            let data = text(r.opt_bytes()?);
            let to = text(r.opt_bytes()?);
            events.push(Received {
                id: eid,
                event_type,
                data,
                to,
                deliveries,
                epoch,
            });
        }
        Ok(Some(Claimed { events, next }))
    }

    async fn renew(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        ids: &[EventId],
    ) -> Result<Vec<Renewed>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let mut cmd = eval(&scripts::TOPIC_RENEW, &[&k.stream]);
        cmd.arg(subscriber).arg(consumer);
        for i in ids {
            cmd.arg(i.to_string());
        }
        let v = run(&mut con, &scripts::TOPIC_RENEW, &cmd).await?;
        let Value::Array(items) = v else {
            return Err(Error::Protocol(format!("renew: {v:?}")));
        };
        items
            .iter()
            .map(|i| {
                scripts::int(i).map(|n| match n {
                    1 => Renewed::Held,
                    0 => Renewed::Claimed,
                    _ => Renewed::Gone,
                })
            })
            .collect()
    }

    async fn settle_events(
        &self,
        topic: &str,
        subscriber: &str,
        consumer: &str,
        batch: &EventSettle,
        keep_dead: Option<u64>,
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let dead = k.dead(subscriber);
        let mut cmd = eval(
            &scripts::TOPIC_SETTLE,
            &[
                &k.stream,
                &dead,
                &k.attempts(subscriber),
                &k.epoch(subscriber),
            ],
        );
        cmd.arg(subscriber)
            .arg(consumer)
            .arg(keep_dead.map_or(String::new(), |n| n.to_string()));
        ack_args(&mut cmd, &batch.acks);
        cmd.arg(batch.retries.len());
        for (d, idle, count) in &batch.retries {
            cmd.arg(d.id.to_string())
                .arg(d.count)
                .arg(d.epoch)
                .arg(crate::contract::backend::clamped_ms(*idle))
                .arg(count.map_or(String::new(), |n| n.to_string()));
        }
        cmd.arg(batch.dead.len());
        for (d, e, error) in &batch.dead {
            cmd.arg(d.id.to_string())
                .arg(d.count)
                .arg(d.epoch)
                .arg(e.event_type.as_deref().unwrap_or(""))
                .arg(e.data.as_deref().unwrap_or(""))
                .arg(error)
                .arg(e.deliveries);
        }
        cmd.arg(batch.by.as_ref().map_or(String::new(), RunBy::members))
            .arg(batch.runs.len());
        let now = std::time::Instant::now();
        for r in &batch.runs {
            let ago = |t: std::time::Instant| now.saturating_duration_since(t).as_millis() as u64;
            // the record from the outcome on: the script puts the times before it
            let mut a = r.attempt(now, 0, None);
            (a.started_ms, a.ended_ms) = (None, None);
            let line = a.line();
            let tail = line
                .strip_prefix(&format!("{{\"n\":{}", r.number))
                .and_then(|t| t.strip_suffix('}'))
                .unwrap_or(",\"outcome\":\"unknown\"");
            cmd.arg(r.id.to_string())
                .arg(r.number)
                .arg(ago(r.started))
                .arg(ago(r.ended))
                .arg(tail);
        }
        run(&mut con, &scripts::TOPIC_SETTLE, &cmd).await?;
        Ok(())
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
        let (mut con, ns) = self.parts();
        let keys = con.scan(&ns.topic_pattern(), "stream").await?;
        let mut out: Vec<String> = keys
            .iter()
            .filter_map(|k| ns.topic_of(k))
            .map(str::to_string)
            .collect();
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    async fn topic_info(&self, topic: &str) -> Result<Option<TopicInfo>> {
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

    async fn dead_events(
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

impl RedisBackend {
    /// topic_requeue.lua over the ids given, or over all dead letters 1000 at
    /// a time: those there when it starts (up to the newest's id then, or the
    /// id given), so that one dead-lettered meanwhile (one requeued here that
    /// failed again) is left for the next call, and the call ends however
    /// fast letters come.
    async fn dead_letters(
        &self,
        topic: &str,
        subscriber: &str,
        action: &str,
        which: DeadEvents<'_>,
    ) -> Result<i64> {
        const CHUNK: usize = 1000;
        let (mut con, ns) = self.parts();
        let k = ns.topic(topic);
        let dead = k.dead(subscriber);
        let mut total = 0;
        // oldest first, each once, as the memory backend takes them
        let ids = match which {
            DeadEvents::Ids(ids) => Some(ids),
            _ => None,
        };
        let ids = ids.map(|ids| {
            let mut ids = ids.to_vec();
            ids.sort_unstable();
            ids.dedup();
            ids
        });
        // (no ids: one call that checks the subscriber exists, as below)
        let mut chunks = ids
            .as_deref()
            .filter(|ids| !ids.is_empty())
            .map(|ids| ids.chunks(CHUNK));
        let cutoff = match which {
            DeadEvents::Ids(_) => None,
            DeadEvents::All => newest_id(&mut con, &dead).await?,
            DeadEvents::UpTo(id) => Some(id.to_string()),
        };
        loop {
            let mut cmd = eval(&scripts::TOPIC_REQUEUE, &[&k.stream, &dead]);
            cmd.arg(subscriber).arg(action);
            match chunks.as_mut() {
                Some(it) => {
                    let Some(chunk) = it.next() else { break };
                    cmd.arg("ids");
                    for i in chunk {
                        cmd.arg(i.to_string());
                    }
                }
                // the first call checks that the subscriber exists
                None => {
                    let n = if cutoff.is_some() { CHUNK } else { 0 };
                    cmd.arg("oldest")
                        .arg(n)
                        .arg(cutoff.as_deref().unwrap_or("-"));
                }
            }
            let n = scripts::int(&run(&mut con, &scripts::TOPIC_REQUEUE, &cmd).await?)?;
            if n < 0 {
                return Ok(n);
            }
            total += n;
            // none left up to the cutoff, or none there at the start
            if chunks.is_none() && (n == 0 || cutoff.is_none()) {
                break;
            }
        }
        Ok(total)
    }
}

/// The id of the newest entry of the stream `key`; `None` when it is empty.
async fn newest_id(con: &mut Connection, key: &str) -> Result<Option<String>> {
    let v: Value = redis::cmd("XREVRANGE")
        .arg(key)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(con)
        .await?;
    let Value::Array(rows) = v else {
        return Ok(None);
    };
    Ok(match rows.first() {
        Some(Value::Array(entry)) => match entry.first() {
            Some(Value::BulkString(id)) => Some(String::from_utf8_lossy(id).into_owned()),
            _ => None,
        },
        _ => None,
    })
}
