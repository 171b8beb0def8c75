//! [`Admin::overview`](crate::ops::Admin::overview) on Redis: the set of
//! queues (one `SMEMBERS`), then counts.lua in its overview mode over every
//! matching queue, 100 queues a call, and the rings of their counters asked
//! for by one `HMGET` a queue, all in one pipeline (one round trip). On a
//! Cluster, where a call's keys and a pipeline hold one slot, a call reads
//! one queue and the calls go at once (256 in flight), each queue's `HMGET`
//! beside its call, each node's written back to back on its connection.

use std::time::Duration;

use futures::StreamExt;
use redis::Value;

use crate::Result;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::backend::redis::{pipelines, replies};
use crate::contract::admin::{Overview, OverviewQuery, QueueLine};
use crate::contract::stats::{HOURS, MINUTES, last_hour, last_week, ring_hour, ring_minute};

/// Calls in flight at once on a Cluster.
const AT_ONCE: usize = 256;
/// Queues one call reads on a single server (29 keys each).
const PER_CALL: usize = 100;

/// The fields of a queue's counters that hold the rings asked for: the
/// minutes' slots, then the hours'.
fn ring_fields(minutes: bool, hours: bool) -> Vec<String> {
    let mut f = Vec::new();
    if minutes {
        f.extend((0..MINUTES).map(|s| format!("m{s}")));
    }
    if hours {
        f.extend((0..HOURS).map(|s| format!("h{s}")));
    }
    f
}

impl Rsmq {
    pub(crate) async fn read_overview(&self, query: &OverviewQuery) -> Result<Overview> {
        let listing = self.queue_listing().await?;
        let names: Vec<String> = listing
            .names
            .into_iter()
            .filter(|n| query.wants(n))
            .collect();
        let (mut con, ns, _) = self.ns_parts();
        if names.is_empty() {
            let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut con).await?;
            return Ok(query.finish(Vec::new(), listing.skipped, s * 1000 + us / 1000));
        }
        // on one server, a call reads many queues (its fixed cost, lib.lua's
        // functions, is then paid once per batch); on a Cluster, where a
        // call's keys hold one slot, one queue each
        let per_call = if con.is_cluster() { 1 } else { PER_CALL };
        let mut cmds = Vec::new();
        for batch in names.chunks(per_call) {
            let mut keys = Vec::with_capacity(batch.len() * 29);
            for name in batch {
                let k = ns.queue(name);
                keys.extend(k.inspection());
                keys.push(k.stats.clone());
            }
            let mut cmd = scripts::eval(&scripts::COUNTS, &keys);
            cmd.arg("overview");
            cmds.push(cmd);
        }
        // the rings, by a plain HMGET a queue beside the calls: read inside a
        // script, each slot's value would pass through Lua on its way
        // (BENCHMARKS.md, Speed II part 19)
        let fields = ring_fields(query.minutes, query.hours);
        let rings: Vec<redis::Cmd> = if fields.is_empty() {
            Vec::new()
        } else {
            names
                .iter()
                .map(|name| {
                    let mut cmd = redis::cmd("HMGET");
                    cmd.arg(ns.queue(name).stats).arg(&fields);
                    cmd
                })
                .collect()
        };
        let (replies, ring_replies) = if con.is_cluster() {
            // a Cluster pipeline holds one slot: the calls go at once
            // instead, each queue's ring read beside its call, and the
            // connection writes each node's back to back
            let mut rings = rings.into_iter();
            let calls: Vec<_> = cmds
                .into_iter()
                .map(|cmd| {
                    let mut con = con.clone();
                    let ring = rings.next();
                    async move {
                        let mut ring_con = con.clone();
                        let read_ring = async move {
                            match ring {
                                Some(cmd) => {
                                    Ok(Some(cmd.query_async::<Value>(&mut ring_con).await?))
                                }
                                None => Ok::<_, crate::Error>(None),
                            }
                        };
                        futures::try_join!(
                            scripts::run(&mut con, &scripts::COUNTS, &cmd),
                            read_ring
                        )
                    }
                })
                .collect();
            let done = futures::stream::iter(calls)
                .buffered(AT_ONCE)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<(Value, Option<Value>)>>>()?;
            let (replies, rings): (Vec<Value>, Vec<Option<Value>>) = done.into_iter().unzip();
            (replies, rings.into_iter().flatten().collect::<Vec<Value>>())
        } else {
            let calls = cmds.len();
            let mut pipe = redis::pipe();
            for cmd in cmds.into_iter().chain(rings) {
                pipe.add_command(cmd);
            }
            let mut all =
                pipelines::run_pipeline(&mut con, &[(&scripts::COUNTS, &self.counts_loaded)], pipe)
                    .await?;
            let rings = all.split_off(calls.min(all.len()));
            (all, rings)
        };
        if !fields.is_empty() && ring_replies.len() != names.len() {
            return Err(crate::Error::Protocol(format!(
                "the overview read the rings of {} of {} queues",
                ring_replies.len(),
                names.len()
            )));
        }
        let mut lines = Vec::with_capacity(names.len());
        let mut now_ms = 0;
        let each = replies.iter().flat_map(|v| match v {
            Value::Array(queues) => queues.as_slice(),
            _ => &[],
        });
        let mut read = 0;
        for (i, (name, v)) in names.iter().zip(each).enumerate() {
            read += 1;
            let ring = ring_replies.get(i);
            if let Some((line, now)) = line(name, v, ring, query.minutes, query.hours)? {
                lines.push(line);
                now_ms = now_ms.max(now);
            }
        }
        if read != names.len() {
            return Err(crate::Error::Protocol(format!(
                "the overview read {read} of {} queues",
                names.len()
            )));
        }
        Ok(query.finish(lines, listing.skipped, now_ms))
    }

    /// One queue's overview line with Redis's clock, read in one call (the
    /// counts and the clock at once).
    pub(crate) async fn queue_line(&self, queue: &str) -> Result<(QueueLine, u64)> {
        let (mut con, ns, _) = self.ns_parts();
        let k = ns.queue(queue);
        let mut keys = k.inspection();
        keys.push(k.stats.clone());
        let mut cmd = scripts::eval(&scripts::COUNTS, &keys);
        cmd.arg("overview");
        let v = scripts::run(&mut con, &scripts::COUNTS, &cmd).await?;
        let first = match &v {
            Value::Array(queues) => queues.first(),
            _ => None,
        };
        first
            .map(|v| line(queue, v, None, false, false))
            .transpose()?
            .flatten()
            .ok_or_else(|| crate::Error::QueueNotFound { name: queue.into() })
    }
}

/// A queue's line from counts.lua's overview reply, with Redis's clock, and
/// the `HMGET` of its rings' slots (the minutes', then the hours', as asked);
/// `None` for a queue deleted since the listing.
fn line(
    name: &str,
    v: &Value,
    ring: Option<&Value>,
    minutes: bool,
    hours: bool,
) -> Result<Option<(QueueLine, u64)>> {
    let (code, mut r) = Reply::status(v)?;
    if code < 0 {
        return Ok(None);
    }
    let mut l = QueueLine::new(name);
    let n = |r: &mut Reply<'_>| r.int().map(|v| v.max(0) as u64);
    l.counts.ready = n(&mut r)?;
    l.counts.scheduled = n(&mut r)?;
    l.counts.in_flight = n(&mut r)?;
    l.counts.dead = n(&mut r)?;
    l.counts.blocked = n(&mut r)?;
    let now = n(&mut r)?;
    let waited = r.int()?;
    l.latency = (waited >= 0).then(|| Duration::from_millis(waited as u64));
    l.paused = r.int()? == 1;
    l.stats.processed = n(&mut r)?;
    l.stats.failed = n(&mut r)?;
    l.stats.retried = n(&mut r)?;
    l.stats.dead = n(&mut r)?;
    // the rings' slots: the minutes', then the hours'
    let slots: &[Value] = match ring {
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(crate::Error::Protocol(format!(
                "expected the rings' slots, got {other:?}"
            )));
        }
        None => &[],
    };
    let mut s = Reply::of(slots);
    let mut ring = |n: usize| -> Result<Vec<(u64, u64, u64)>> {
        let mut out = Vec::new();
        for _ in 0..n {
            let slot = s.opt_bytes()?.and_then(|s| std::str::from_utf8(s).ok());
            out.extend(slot.and_then(replies::minute));
        }
        Ok(out)
    };
    if minutes {
        l.minutes = last_hour(now, ring(MINUTES)?.into_iter().map(ring_minute));
    }
    if hours {
        l.hours = last_week(now, ring(HOURS)?.into_iter().map(ring_hour));
    }
    if l.counts.ready == 0 {
        l.latency = None;
    }
    Ok(Some((l, now)))
}
