//! [`Admin::overview`](crate::ops::Admin::overview) on Redis: the set of
//! queues (one `SMEMBERS`), then counts.lua in its overview mode over every
//! matching queue, 25 to 100 queues a call (fewer when it reads their rings),
//! the calls in one pipeline (one round
//! trip). On a Cluster, where a call's keys and a pipeline hold one slot, a
//! call reads one queue and the calls go at once (256 in flight), each node's
//! written back to back on its connection.

use std::time::Duration;

use futures::StreamExt;
use redis::Value;

use crate::Result;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::replies;
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::admin::{Overview, OverviewQuery, QueueLine};
use crate::contract::stats::{HOURS, MINUTES, last_hour, last_week, ring_hour, ring_minute};

/// Calls in flight at once on a Cluster.
const AT_ONCE: usize = 256;
/// Queues one call reads on a single server (29 keys each), by the rings
/// it reads of each queue's counters (none, the minutes' 61 fields, the
/// hours' 169): each call then holds Redis for about as long, a few ms at
/// most once the counters hold a week (BENCHMARKS.md, Speed II part 19).
fn per_call(rings: &str) -> usize {
    match rings {
        "" => 100,
        "minutes" => 50,
        _ => 25,
    }
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
        let rings = match (query.minutes, query.hours) {
            (true, true) => "both",
            (true, false) => "minutes",
            (false, true) => "hours",
            (false, false) => "",
        };
        // on one server, a call reads many queues (its fixed cost, lib.lua's
        // functions, is then paid once per batch); on a Cluster, where a
        // call's keys hold one slot, one queue each
        let per_call = if con.is_cluster() { 1 } else { per_call(rings) };
        let mut cmds = Vec::new();
        for batch in names.chunks(per_call) {
            let mut keys = Vec::with_capacity(batch.len() * 29);
            for name in batch {
                let k = ns.queue(name);
                keys.extend(k.inspection());
                keys.push(k.stats.clone());
            }
            let mut cmd = scripts::eval(&scripts::COUNTS, &keys);
            cmd.arg("overview").arg(rings);
            cmds.push(cmd);
        }
        let replies = if con.is_cluster() {
            // a Cluster pipeline holds one slot: the calls go at once
            // instead, and the connection writes each node's back to back
            let calls: Vec<_> = cmds
                .into_iter()
                .map(|cmd| {
                    let mut con = con.clone();
                    async move { scripts::run(&mut con, &scripts::COUNTS, &cmd).await }
                })
                .collect();
            futures::stream::iter(calls)
                .buffered(AT_ONCE)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<Value>>>()?
        } else {
            let mut pipe = redis::pipe();
            for cmd in cmds {
                pipe.add_command(cmd);
            }
            scripts::run_pipeline(&mut con, &[(&scripts::COUNTS, &self.counts_loaded)], &pipe)
                .await?
        };
        let mut lines = Vec::with_capacity(names.len());
        let mut now_ms = 0;
        let each = replies.iter().flat_map(|v| match v {
            Value::Array(queues) => queues.as_slice(),
            _ => &[],
        });
        let mut read = 0;
        for (name, v) in names.iter().zip(each) {
            read += 1;
            if let Some((line, now)) = line(name, v, query.minutes, query.hours)? {
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
        cmd.arg("overview").arg("");
        let v = scripts::run(&mut con, &scripts::COUNTS, &cmd).await?;
        let first = match &v {
            Value::Array(queues) => queues.first(),
            _ => None,
        };
        first
            .map(|v| line(queue, v, false, false))
            .transpose()?
            .flatten()
            .ok_or_else(|| crate::Error::QueueNotFound { name: queue.into() })
    }
}

/// A queue's line from counts.lua's overview reply, with Redis's clock;
/// `None` for a queue deleted since the listing.
fn line(name: &str, v: &Value, minutes: bool, hours: bool) -> Result<Option<(QueueLine, u64)>> {
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
    let mut ring = |n: usize| -> Result<Vec<(u64, u64, u64)>> {
        let mut out = Vec::new();
        for _ in 0..n {
            let slot = r.opt_bytes()?.and_then(|s| std::str::from_utf8(s).ok());
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
