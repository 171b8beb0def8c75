//! [`Admin::overview`](crate::ops::Admin::overview) on Redis: the set of
//! queues (one `SMEMBERS`), then counts.lua in its overview mode for every
//! matching queue in one pipeline (one round trip). On a Cluster, where a
//! pipeline holds one slot, the calls go at once (256 in flight), each node's
//! written back to back on its connection.

use std::time::Duration;

use futures::StreamExt;
use redis::Value;

use crate::Result;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::replies;
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::admin::{Overview, OverviewQuery, QueueLine};
use crate::contract::stats::{last_hour, ring_minute};

/// Queues read at once on a Cluster.
const AT_ONCE: usize = 256;

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
        let minutes = if query.minutes { "minutes" } else { "" };
        let mut cmds = Vec::with_capacity(names.len());
        for name in &names {
            let k = ns.queue(name);
            let mut keys = k.inspection();
            keys.push(k.stats.clone());
            let mut cmd = scripts::eval(&scripts::COUNTS, &keys);
            cmd.arg("overview").arg(minutes);
            cmds.push(cmd);
        }
        let replies = if con.is_cluster() {
            // a Cluster pipeline holds one slot, and each queue is a slot of
            // its own: the calls go at once instead, and the connection
            // writes each node's back to back
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
        for (name, v) in names.iter().zip(&replies) {
            if let Some((line, now)) = line(name, v, query.minutes)? {
                lines.push(line);
                now_ms = now_ms.max(now);
            }
        }
        Ok(query.finish(lines, listing.skipped, now_ms))
    }
}

/// A queue's line from counts.lua's overview reply, with Redis's clock;
/// `None` for a queue deleted since the listing.
fn line(name: &str, v: &Value, minutes: bool) -> Result<Option<(QueueLine, u64)>> {
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
    let now = n(&mut r)?;
    let waited = r.int()?;
    l.latency = (waited >= 0).then(|| Duration::from_millis(waited as u64));
    l.paused = r.int()? == 1;
    l.stats.processed = n(&mut r)?;
    l.stats.failed = n(&mut r)?;
    l.stats.retried = n(&mut r)?;
    l.stats.dead = n(&mut r)?;
    if minutes {
        let mut ring = Vec::new();
        while !r.is_empty() {
            let slot = r.opt_bytes()?.and_then(|s| std::str::from_utf8(s).ok());
            if let Some(m) = slot.and_then(replies::minute) {
                ring.push(ring_minute(m));
            }
        }
        l.minutes = last_hour(now, ring);
    }
    if l.counts.ready == 0 {
        l.latency = None;
    }
    Ok(Some((l, now)))
}
