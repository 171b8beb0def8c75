//! Settling events on Redis: acknowledgements, retries, dead letters and
//! attempt records in one topic_settle.lua call.

use crate::Result;
use crate::backend::redis::RedisBackend;
use crate::backend::redis::scripts::{self, eval, run};
use crate::contract::attempts::RunBy;
use crate::contract::topics::{Delivery, EventId, EventSettle};

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

impl RedisBackend {
    /// [`Topics::settle_events`](crate::contract::topics::Topics::settle_events).
    pub(super) async fn settle_batch(
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
}
