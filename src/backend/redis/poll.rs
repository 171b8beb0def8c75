//! The worker's fallback poll: all its queues in one round trip, one command per
//! queue.

use std::time::Duration;

use super::RedisBackend;
use super::scripts::{self, eval};
use crate::contract::leases::LEGACY_LEASED_MS;
use crate::{Error, Result};

impl RedisBackend {
    /// Whether each queue has a job due, or a lease ending, within `within`.
    ///
    /// A queue without priorities costs one `ZRANGE … 0 0 WITHSCORES`: its lowest
    /// score is its earliest due job or lease end (a lease is scored at its
    /// end). A queue with priorities runs `poll.lua` over its levels.
    pub(super) async fn poll_queues(
        &self,
        queues: &[String],
        within: Duration,
    ) -> Result<Vec<bool>> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let window = crate::contract::backend::clamped_ms(within);
        let mut pipe = redis::pipe();
        pipe.cmd("TIME");
        // read once: a dispatcher may learn of priorities while the poll runs,
        // and the replies must be read as the commands were sent
        let prioritized: Vec<bool> = queues.iter().map(|q| self.prioritized(q)).collect();
        for (q, &p) in queues.iter().zip(&prioritized) {
            let k = self.ns.queue(q);
            if p {
                let mut cmd = eval(&scripts::POLL, &k.all_levels());
                cmd.arg(window);
                pipe.add_command(cmd);
            } else {
                pipe.cmd("ZRANGE")
                    .arg(&k.zset)
                    .arg(0)
                    .arg(0)
                    .arg("WITHSCORES");
            }
        }
        let mut con = self.con.clone();
        let poll = [(&*scripts::POLL, &self.shared.poll_loaded)];
        let uses: &[_] = if prioritized.contains(&true) {
            &poll
        } else {
            &[]
        };
        let mut replies = crate::backend::redis::pipelines::run_pipeline(&mut con, uses, pipe)
            .await?
            .into_iter();
        let bad = |e: redis::ParsingError| Error::Protocol(format!("poll reply: {e}"));
        let (secs, us): (u64, u64) = replies
            .next()
            .map(redis::from_redis_value)
            .transpose()
            .map_err(bad)?
            .ok_or_else(|| Error::Protocol("poll: no TIME reply".into()))?;
        let soon = (secs * 1000 + us / 1000).saturating_add(window);
        let legacy = LEGACY_LEASED_MS as f64;
        let mut out = Vec::with_capacity(queues.len());
        // the lowest score is the earliest due time or lease end (a lease is
        // scored at its end)
        for (&p, v) in prioritized.iter().zip(replies) {
            if p {
                out.push(scripts::int(&v)? == 1);
                continue;
            }
            let lowest: Vec<(String, f64)> = redis::from_redis_value(v).map_err(bad)?;
            out.push(match lowest.first() {
                None => false,
                Some((_, s)) if *s >= legacy && soon < LEGACY_LEASED_MS => {
                    *s - legacy <= soon as f64
                }
                Some((_, s)) => *s < (soon + 1) as f64,
            });
        }
        Ok(out)
    }
}
