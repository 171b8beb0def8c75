//! Periodic ticks on Redis (`periodic.lua`): a worker's ticks of one queue
//! due together in one call.

use std::time::Duration;

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::admin::{Tick, Ticked, schedule_name};
use crate::contract::queues::{SendMessage, validate};
use crate::{Error, Result};

/// The most ticks one periodic.lua call takes (see [`Rsmq::tick_many`]).
pub(crate) const TICKS_PER_CALL: usize = 100;

impl Rsmq {
    /// periodic.lua: enqueues `msg` as the job of `tick`, once over all callers.
    pub(crate) async fn tick(
        &self,
        queue: &str,
        tick: &Tick<'_>,
        msg: &SendMessage,
    ) -> Result<Ticked> {
        let mut out = self.tick_many(queue, &[(*tick, msg)]).await?;
        out.pop()
            .unwrap_or_else(|| Err(Error::Protocol("periodic: no outcome".into())))
    }

    /// periodic.lua for several ticks of `queue`'s schedules: those sent at
    /// one priority and without a concurrency key in calls of up to
    /// [`TICKS_PER_CALL`], the others one a call; each tick's outcome, in
    /// order (an invalid queue or schedule name, priority or key, or a body
    /// too large, fails its own tick, as [`tick`](Self::tick) one after
    /// another would). Fails as a whole only when the queue does not exist
    /// (for the caller to create it), or Redis does.
    pub(crate) async fn tick_many(
        &self,
        queue: &str,
        ticks: &[(Tick<'_>, &SendMessage)],
    ) -> Result<Vec<Result<Ticked>>> {
        let mut out: Vec<Option<Result<Ticked>>> = ticks
            .iter()
            .map(|(tick, msg)| {
                validate::queue_name(queue)
                    // (a name ending in `:paused` would pause another)
                    .and_then(|()| schedule_name(tick.name))
                    .and_then(|()| validate::priority(msg.priority))
                    .and_then(|()| crate::contract::queues::check_keyed(msg))
                    .err()
                    .map(Err)
            })
            .collect();
        // the calls: the valid ticks' places, alike in priority and without a key
        let mut calls: Vec<Vec<usize>> = Vec::new();
        for (i, (_, msg)) in ticks.iter().enumerate() {
            if out[i].is_some() {
                continue;
            }
            let joins = calls.iter_mut().find(|c| {
                let (_, first) = &ticks[c[0]];
                msg.keyed.is_none()
                    && first.keyed.is_none()
                    && first.priority == msg.priority
                    && c.len() < TICKS_PER_CALL
            });
            match joins {
                Some(c) => c.push(i),
                None => calls.push(vec![i]),
            }
        }
        // side by side, as each schedule's own call was
        let replies =
            futures::future::join_all(calls.iter().map(|c| self.tick_call(queue, ticks, c))).await;
        for (call, outcomes) in calls.into_iter().zip(replies) {
            for (i, o) in call.into_iter().zip(outcomes?) {
                out[i] = Some(o);
            }
        }
        Ok(out
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(Error::Protocol("periodic: no outcome".into()))))
            .collect())
    }

    /// One periodic.lua call for the ticks at `at` of `ticks`.
    async fn tick_call(
        &self,
        queue: &str,
        ticks: &[(Tick<'_>, &SendMessage)],
        at: &[usize],
    ) -> Result<Vec<Result<Ticked>>> {
        let (mut con, ns, realtime) = self.ns_parts();
        let k = ns.queue(queue);
        let first = ticks[at[0]].1;
        let mut keys = vec![k.level(first.priority), k.hash.clone(), k.periodic.clone()];
        if first.keyed.is_some() {
            keys.extend(k.keyed_keys());
        }
        let mut cmd = scripts::eval(&scripts::PERIODIC, &keys);
        cmd.arg(&k.realtime)
            .arg(if realtime { "1" } else { "0" })
            .arg("0")
            .arg(first.priority)
            .arg(at.len());
        for &i in at {
            let (tick, msg) = &ticks[i];
            cmd.arg(tick.name)
                .arg(tick.at_ms)
                .arg(if tick.catch_up { "1" } else { "0" })
                .arg(tick.id(queue).as_str())
                .arg(&msg.body[..])
                .arg(tick.next_ms.map_or(String::new(), |n| n.to_string()));
        }
        if let Some(keyed) = &first.keyed {
            cmd.arg(&keyed.key).arg(keyed.per_key);
        }
        let v = scripts::run(&mut con, &scripts::PERIODIC, &cmd).await?;
        let (code, mut r) = Reply::status(&v)?;
        match code {
            1 => {}
            -1 => return Err(Error::QueueNotFound { name: queue.into() }),
            c => return Err(Error::Protocol(format!("periodic status {c}"))),
        }
        let now_ms = r.int()? as u64;
        let mut out = Vec::with_capacity(at.len());
        for _ in at {
            let (code, x, y) = (r.int()?, r.int()?, r.int()?);
            out.push(match code {
                1 => Ok(Ticked::Enqueued { now_ms }),
                0 => Ok(Ticked::Done { now_ms }),
                2 => Ok(Ticked::Paused { now_ms }),
                -2 => Err(Error::MessageTooLarge {
                    size: x as usize,
                    max: y as usize,
                }),
                -4 => Ok(Ticked::Early(Duration::from_millis(x.max(1) as u64))),
                c => Err(Error::Protocol(format!("periodic status {c}"))),
            });
        }
        Ok(out)
    }
}
