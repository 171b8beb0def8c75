//! Taking events on Redis: reads (`XREADGROUP`, blocking ones on a
//! connection of their own), claims (topic_claim.lua) and renewals
//! (topic_renew.lua).

use std::time::Duration;

use redis::Value;

use super::{id, is_nogroup, text};
use crate::backend::redis::RedisBackend;
use crate::backend::redis::scripts::{self, Reply, eval, run};
use crate::contract::topics::{Claimed, EventId, Received, Renewed};
use crate::{Error, Result};

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

/// Forgets a blocking read's connection when dropped (see [`RedisBackend::read_events`]).
struct CloseOnDrop<'a>(Option<(&'a RedisBackend, &'a str)>);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((b, name)) = self.0.take() {
            b.drop_reader(name);
        }
    }
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

    /// [`Topics::read`](crate::contract::topics::Topics::read).
    pub(super) async fn read_events(
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
        // applied (see Delivery::epoch); and read again after them: a rewind
        // while the read waited (or ran) changed it, and
        // topic_read_epoch.lua tells which epoch the events belong to
        let mut pipe = redis::pipe();
        pipe.cmd("GET")
            .arg(k.epoch(subscriber))
            .add_command(cmd)
            .cmd("GET")
            .arg(k.epoch(subscriber));
        let reply: Result<(Option<u64>, Value, Option<u64>)> = if block.is_zero() {
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
            Ok((before, v, after)) => {
                let mut got = entries(&v)?;
                let before = before.unwrap_or(0);
                for e in &mut got {
                    e.epoch = before;
                }
                if after.unwrap_or(0) != before && !got.is_empty() {
                    self.read_epoch(&k, subscriber, consumer, &mut got).await;
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

    /// Tags the events of a read during which the subscriber's epoch
    /// changed with the epoch each belongs to (topic_read_epoch.lua): the
    /// epoch of now for those that no read of it can deliver anew, the one
    /// read first (already on them) for the others. On an error they keep
    /// the one read first (their outcomes are then not applied: they run
    /// again after a lease).
    async fn read_epoch(
        &self,
        k: &crate::backend::redis::keys::TopicKeys,
        subscriber: &str,
        consumer: &str,
        got: &mut [Received],
    ) {
        let (mut con, _) = self.parts();
        let mut cmd = eval(
            &scripts::TOPIC_READ_EPOCH,
            &[&k.stream, &k.epoch(subscriber)],
        );
        cmd.arg(subscriber).arg(consumer);
        for e in got.iter() {
            cmd.arg(e.id.to_string());
        }
        let Ok(Value::Array(v)) = run(&mut con, &scripts::TOPIC_READ_EPOCH, &cmd).await else {
            return;
        };
        let Some(Ok(now)) = v.first().map(scripts::int) else {
            return;
        };
        for (e, mine) in got.iter_mut().zip(&v[1..]) {
            if scripts::int(mine).is_ok_and(|m| m == 1) {
                e.epoch = now.max(0) as u64;
            }
        }
    }

    /// [`Topics::claim`](crate::contract::topics::Topics::claim).
    pub(super) async fn claim_events(
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

    /// [`Topics::renew`](crate::contract::topics::Topics::renew).
    pub(super) async fn renew_events(
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
}
