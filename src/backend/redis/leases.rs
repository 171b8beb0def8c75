//! [`Backend`] on Redis: sends, fetches and hand-offs, lease renewals, settles,
//! counters, wake-ups and heartbeats, each one script call per batch.

use super::complete::{complete_cmd, complete_packed};
use super::replies::Again;
use super::scripts::{self, eval, run};
use super::{RedisBackend, info_replies, version_key};
use super::{pipelines, replies};
use crate::contract::admin::{Tick, Ticked};
use crate::contract::backend::Backend;
use crate::contract::leases::{Fetched, Handed, Settle, Settled, Token};
use crate::contract::queues::{QueueOptions, SendMessage, Sent};
use crate::contract::settings::QueueSettings;
use crate::contract::stats::{DeadLetter, MinuteStats, QueueStats};
use crate::{Error, JobId, Result};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The indexes of `items` grouped by priority, in order of first appearance.
fn by_priority<T>(items: &[T], priority: impl Fn(&T) -> i8) -> Vec<(i8, Vec<usize>)> {
    let mut groups: Vec<(i8, Vec<usize>)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = priority(item);
        match groups.iter_mut().find(|(q, _)| *q == p) {
            Some((_, idx)) => idx.push(i),
            None => groups.push((p, vec![i])),
        }
    }
    groups
}

impl RedisBackend {
    /// Worker `worker`'s hand-off registration on `queue` (see fetch.lua): "v3"
    /// first, so that an earlier redjob's send hands it nothing and wakes it
    /// to fetch instead (a send before "v2" would read the lease's token as the
    /// 500th delivery; one before "v3" would hand it one job and clear a
    /// registration this worker takes as good for more; see hand_off in
    /// lib.lua).
    fn registration(&self, queue: &str, worker: &str, lease: Duration) -> String {
        format!(
            "v3 {} {} {queue}",
            crate::contract::backend::clamped_ms(lease),
            self.ns.handoff(worker)
        )
    }

    /// fetch.lua, with the worker's hand-off registration `reg` if any: good
    /// for up to its `usize` jobs, less those the fetch leases.
    async fn fetch_registering(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        reg: Option<(&str, usize)>,
    ) -> Result<Fetched> {
        let k = self.ns.queue_shared(queue);
        let mut levels = self.prioritized(queue);
        let mut adopted = false;
        loop {
            let mut cmd = if levels {
                eval(&scripts::FETCH, &k.fetch_all())
            } else {
                eval(&scripts::FETCH, &k.fetch())
            };
            // (a count Redis takes: more than any queue holds)
            cmd.arg(max.clamp(1, i32::MAX as usize))
                .arg(crate::contract::backend::clamped_ms(lease));
            if let Some((reg, hands)) = reg {
                cmd.arg(reg).arg(hands.max(1));
            }
            let v = run(&mut self.con.clone(), &scripts::FETCH, &cmd).await?;
            match replies::fetched(v, max)? {
                Ok(f) => return Ok(f),
                Err(Again::Levels) if !levels => {
                    levels = true;
                    self.lock_prioritized().insert(queue.to_owned());
                }
                Err(Again::Adopt) if !adopted => {
                    adopted = true;
                    // an RSMQ client made the queue: once, what its
                    // deleteQueue of the name left (see adopt.lua)
                    let mut keys = vec![k.hash.clone(), k.unique.clone()];
                    keys.extend(k.levels());
                    keys.push(k.zset.clone());
                    let cmd = eval(&scripts::ADOPT, &keys);
                    run(&mut self.con.clone(), &scripts::ADOPT, &cmd).await?;
                }
                Err(again) => {
                    return Err(Error::Protocol(format!("fetch asked twice: {again:?}")));
                }
            }
        }
    }

    /// Runs calls of one script: alone in one round trip, or pipelined.
    async fn run_all(
        &self,
        script: &redis::Script,
        loaded: &AtomicBool,
        mut cmds: Vec<redis::Cmd>,
    ) -> Result<Vec<redis::Value>> {
        let mut con = self.con.clone();
        if cmds.len() == 1 {
            let cmd = cmds.pop().expect("one command");
            return Ok(vec![run(&mut con, script, &cmd).await?]);
        }
        let mut pipe = redis::pipe();
        for cmd in cmds {
            pipe.add_command(cmd);
        }
        pipelines::run_pipeline(&mut con, &[(script, loaded)], pipe).await
    }
}

impl Backend for RedisBackend {
    async fn send(
        &self,
        queue: &str,
        msgs: &[SendMessage],
        create: &QueueOptions,
    ) -> Result<Vec<Sent>> {
        crate::contract::backend::send_creating(&self.rsmq, queue, msgs, create).await
    }

    async fn now_ms(&self) -> Result<u64> {
        self.rsmq.now_ms().await
    }

    async fn watch_finish(
        &self,
        queue: &str,
        id: &JobId,
        within: Duration,
    ) -> Result<crate::contract::backend::FinishWatch> {
        self.watch_finish_on(queue, id, within).await
    }

    async fn batch_open(&self, spec: &crate::contract::batches::BatchSpec) -> Result<()> {
        self.rsmq.open_batch(spec).await
    }

    async fn batch_seal(&self, id: &crate::contract::batches::BatchId, total: u64) -> Result<()> {
        self.rsmq.seal_batch(id, total).await
    }

    async fn batch_status(
        &self,
        id: &crate::contract::batches::BatchId,
    ) -> Result<Option<crate::contract::batches::BatchStatus>> {
        self.rsmq.status_of_batch(id).await
    }

    async fn batch_settled(&self, queue: &str, members: &[String]) -> Result<()> {
        self.rsmq.settled_batches(queue, members).await
    }

    async fn batch_recover(&self, queue: &str) -> Result<()> {
        self.rsmq.recover_batches(queue).await.map(|_| ())
    }

    async fn batch_mark(&self, queue: &str, until: Duration) -> Result<()> {
        self.rsmq.mark_batches(queue, until).await
    }

    async fn batches(
        &self,
        before_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<crate::contract::batches::BatchStatus>> {
        self.rsmq.list_batches(before_ms, limit).await
    }

    async fn batch_dead(
        &self,
        id: &crate::contract::batches::BatchId,
        limit: usize,
    ) -> Result<Vec<(String, JobId)>> {
        self.rsmq.dead_of_batch(id, limit).await
    }

    async fn flow_wait(
        &self,
        queue: &str,
        id: &JobId,
        batch: &crate::contract::batches::BatchId,
        body: &[u8],
    ) -> Result<()> {
        self.rsmq.wait_flow(queue, id, batch, body).await
    }

    async fn flow_after(
        &self,
        queue: &str,
        id: &JobId,
        r: &crate::contract::batches::BatchRef,
    ) -> Result<()> {
        self.rsmq.flow_after(queue, id, r).await
    }

    async fn batch_results(
        &self,
        id: &crate::contract::batches::BatchId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        self.rsmq.results_of_batch(id, from, limit).await
    }

    async fn batch_sweep(&self) -> Result<()> {
        // the trim whatever the marks' sweep met
        let swept = self.rsmq.sweep_batches().await;
        let trimmed = self.trim_batch_index().await;
        swept.and(trimmed)
    }

    async fn batch_add(
        &self,
        id: &crate::contract::batches::BatchId,
        jobs: &[(String, SendMessage)],
    ) -> Result<()> {
        self.rsmq.add_to_batch(id, jobs).await
    }

    async fn batch_cancel(&self, id: &crate::contract::batches::BatchId) -> Result<bool> {
        self.rsmq.cancel_batch(id).await
    }

    async fn cancelled_batches(
        &self,
        after: u64,
    ) -> Result<Vec<(crate::contract::batches::BatchId, u64)>> {
        self.rsmq.cancelled_batches(after).await
    }

    async fn unique_started(&self, queue: &str, id: &JobId) -> Result<()> {
        let (mut con, k) = self.rsmq.parts(queue);
        let mut cmd = scripts::eval(&scripts::UNIQUE_START, &[&k.unique]);
        cmd.arg(id.as_str());
        scripts::run(&mut con, &scripts::UNIQUE_START, &cmd).await?;
        Ok(())
    }

    async fn cancel_job(&self, queue: &str, id: &JobId, by: &str) -> Result<bool> {
        let c = crate::contract::inspect::Inspect::cancel_by(self, queue, id, by).await?;
        Ok(c != crate::contract::inspect::Cancelled::NotFound)
    }

    async fn tick(
        &self,
        queue: &str,
        tick: &Tick<'_>,
        msg: &SendMessage,
        create: &QueueOptions,
    ) -> Result<Ticked> {
        crate::contract::backend::creating(&self.rsmq, queue, create, || {
            self.rsmq.tick(queue, tick, msg)
        })
        .await
    }

    async fn tick_many(
        &self,
        queue: &str,
        ticks: &[(Tick<'_>, &SendMessage)],
        create: &QueueOptions,
    ) -> Result<Vec<Result<Ticked>>> {
        crate::contract::backend::creating(&self.rsmq, queue, create, || {
            self.rsmq.tick_many(queue, ticks)
        })
        .await
    }

    async fn beat(
        &self,
        id: &str,
        beat: &[u8],
        ttl: Duration,
    ) -> Result<crate::contract::admin::BeatReply> {
        let (reply, gone) = self.rsmq.beat(id, beat, ttl).await?;
        self.forget_handed(&gone).await;
        Ok(reply)
    }

    async fn init_settings(
        &self,
        queue: &str,
        s: &QueueSettings,
        by: &str,
    ) -> Result<QueueSettings> {
        super::settings::call(&self.rsmq, queue, super::settings::Mode::Default, s, by)
            .await
            .map(|(stored, _)| stored)
    }

    async fn touch(&self, id: &str, _ttl: Duration, since: Duration) -> Result<bool> {
        self.rsmq.touch(id, since).await
    }

    async fn serve(&self, digest: &str, serves: &[u8]) -> Result<()> {
        self.rsmq.serve(digest, serves).await
    }

    async fn trim_history(&self, queue: &str) -> Result<()> {
        super::inspect::trim_history(&self.rsmq, queue).await
    }

    async fn sizes(&self, queue: &str) -> Result<crate::contract::inspect::StateCounts> {
        crate::contract::inspect::Inspect::counts(self, queue).await
    }

    async fn stats(&self, queue: &str) -> Result<QueueStats> {
        crate::contract::queues::validate::queue_name(queue)?;
        let k = self.ns.queue(queue);
        // by name: the hash holds the per-minute ring too (see complete.lua)
        let [processed, failed, retried, dead]: [Option<u64>; 4] = redis::cmd("HMGET")
            .arg(&k.stats)
            .arg(&["processed", "failed", "retried", "dead"])
            .query_async(&mut self.con.clone())
            .await?;
        Ok(QueueStats {
            processed: processed.unwrap_or(0),
            failed: failed.unwrap_or(0),
            retried: retried.unwrap_or(0),
            dead: dead.unwrap_or(0),
        })
    }

    async fn run_times(&self, queue: &str) -> Result<Vec<crate::contract::runtimes::RunTimes>> {
        crate::contract::queues::validate::queue_name(queue)?;
        let k = self.ns.queue(queue);
        let mut con = self.con.clone();
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(&k.stats)
            .query_async(&mut con)
            .await?;
        let fields: Vec<&String> = fields.iter().filter(|f| f.starts_with("rt:")).collect();
        if fields.is_empty() {
            return Ok(Vec::new());
        }
        let counts: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(&k.stats)
            .arg(&fields)
            .query_async(&mut con)
            .await?;
        Ok(crate::contract::runtimes::collect(
            fields
                .iter()
                .zip(counts)
                .filter_map(|(f, n)| Some((f.as_str(), n?))),
        ))
    }

    async fn minutes(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        let (now, ring) = self
            .ring(queue, 'm', crate::contract::stats::MINUTES)
            .await?;
        Ok(crate::contract::stats::last_hour(
            now,
            ring.into_iter().map(crate::contract::stats::ring_minute),
        ))
    }

    async fn hours(&self, queue: &str) -> Result<Vec<MinuteStats>> {
        let (now, ring) = self.ring(queue, 'h', crate::contract::stats::HOURS).await?;
        Ok(crate::contract::stats::last_week(
            now,
            ring.into_iter().map(crate::contract::stats::ring_hour),
        ))
    }

    async fn dead_letters(&self, queue: &str, limit: usize) -> Result<Vec<DeadLetter>> {
        crate::contract::queues::validate::queue_name(queue)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let k = self.ns.queue(queue);
        let mut con = self.con.clone();
        let ids: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(&k.dead)
            .arg(0)
            .arg(limit.min(crate::contract::inspect::MAX_PAGE) - 1)
            .arg("WITHSCORES")
            .query_async(&mut con)
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&k.dead_hash);
        for (id, _) in &ids {
            let id = String::from_utf8_lossy(id);
            cmd.arg(&*id)
                .arg(format!("{id}:err"))
                .arg(format!("{id}:n"));
        }
        let vals: Vec<Option<Vec<u8>>> = cmd.query_async(&mut con).await?;
        ids.iter()
            .zip(vals.chunks(3))
            .map(|((id, died), v)| {
                let text = |i: usize| {
                    let b = v.get(i).and_then(|b| b.as_deref()).unwrap_or_default();
                    String::from_utf8_lossy(b).into_owned()
                };
                Ok(DeadLetter {
                    id: JobId::from_bytes(id)?,
                    body: v.first().cloned().flatten().unwrap_or_default(),
                    error: text(1),
                    attempts: text(2).parse().unwrap_or(0),
                    died_at_ms: *died as u64,
                })
            })
            .collect()
    }

    async fn fetch(&self, queue: &str, max: usize, lease: Duration) -> Result<Fetched> {
        self.fetch_registering(queue, max, lease, None).await
    }

    async fn fetch_waiting(
        &self,
        queue: &str,
        max: usize,
        lease: Duration,
        worker: &str,
        hands: usize,
    ) -> Result<Fetched> {
        // a Cluster's PUBLISH cannot tell whether the worker listens (it counts
        // the node's own subscribers only), so no hand-offs there
        if self.ns.is_cluster() {
            return self.fetch(queue, max, lease).await;
        }
        let reg = self.registration(queue, worker, lease);
        self.fetch_registering(queue, max, lease, Some((&reg, hands)))
            .await
    }

    async fn withdraw_handoffs(
        &self,
        queues: &[String],
        worker: &str,
        lease: Duration,
    ) -> Result<()> {
        if self.ns.is_cluster() || queues.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for q in queues {
            let reg = self.registration(q, worker, lease);
            pipe.add_command(
                eval(&scripts::WITHDRAW, &[self.ns.queue(q).hash])
                    .arg(reg)
                    .clone(),
            );
        }
        let loaded = &self.shared.withdraw_loaded;
        pipelines::run_pipeline(&mut self.con.clone(), &[(&scripts::WITHDRAW, loaded)], pipe)
            .await?;
        Ok(())
    }

    async fn extend(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> Result<Vec<Option<Token>>> {
        // a lease given twice is extended once, both answered alike
        if let Some((once, place)) = crate::contract::leases::once(leases) {
            let got = self.extend_each(queue, &once, lease).await?;
            return Ok(place.iter().map(|&p| got[p]).collect());
        }
        self.extend_each(queue, leases, lease).await
    }

    async fn settle(&self, queue: &str, batch: &Settle) -> Result<Settled> {
        if batch.is_empty() {
            return Ok(Settled::default());
        }
        let k = self.ns.queue_shared(queue);
        let parts = batch.by_priority();
        let mut con = self.con.clone();
        let replies = if let [(p, part)] = &parts[..]
            && con.has_lanes()
        {
            // one part (one priority, as mostly): packed by hand for a lane
            let mut packed = complete_packed(&k, *p, part);
            let pipeline = || {
                let mut pipe = redis::pipe();
                pipe.add_command(complete_cmd(&k, *p, part));
                pipe
            };
            let bytes = packed.finish(b"");
            vec![scripts::run_packed(&mut con, &scripts::COMPLETE, bytes, pipeline).await?]
        } else {
            let cmds = parts
                .iter()
                .map(|(p, part)| complete_cmd(&k, *p, part))
                .collect();
            self.run_all(&scripts::COMPLETE, &self.shared.complete_loaded, cmds)
                .await?
        };
        let mut total = Settled::default();
        for v in &replies {
            let s = replies::settled(v)?;
            total.acked += s.acked;
            total.rescheduled += s.rescheduled;
            total.dead += s.dead;
            total.gone.extend(s.gone);
            total.batched.extend(s.batched);
        }
        Ok(total)
    }

    async fn scores(&self, queue: &str, held: &[(JobId, Token)]) -> Result<Vec<Option<Token>>> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.ns.queue(queue);
        let groups = by_priority(held, |(_, t)| t.priority());
        let mut pipe = redis::pipe();
        for (p, idx) in &groups {
            pipe.cmd("ZMSCORE")
                .arg(k.level(*p))
                .arg(idx.iter().map(|&i| held[i].0).collect::<Vec<_>>());
        }
        let replies: Vec<Vec<Option<f64>>> = pipe.query_async(&mut self.con.clone()).await?;
        let mut out = vec![None; held.len()];
        for ((p, idx), scores) in groups.iter().zip(replies) {
            for (&i, s) in idx.iter().zip(scores) {
                out[i] = s.and_then(|s| Token::from_score(s, *p));
            }
        }
        Ok(out)
    }

    async fn warnings(&self) -> Result<Vec<String>> {
        let info: redis::Value = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut self.con.clone())
            .await?;
        let infos = info_replies(info, "INFO memory")?;
        let mut warnings = Vec::new();
        let version = self.server_version().await?;
        if version != "unknown" && version_key(version) < (6, 2) {
            warnings.push(format!(
                "this server is Redis {version}: redjob needs Redis 6.2 or newer (its scripts call ZMSCORE), and topics 7.0"
            ));
        }
        let mut policies: Vec<&str> = infos
            .iter()
            .filter_map(|i| {
                i.lines()
                    .find_map(|l| l.strip_prefix("maxmemory_policy:"))
                    .map(str::trim)
            })
            .filter(|p| *p != "noeviction")
            .collect();
        policies.sort_unstable();
        policies.dedup();
        warnings.extend(policies.into_iter().map(|p| format!(
                "Redis's maxmemory-policy is {p}: at maxmemory Redis may evict queued jobs without a trace; set it to noeviction"
        )));
        Ok(warnings)
    }

    async fn listen(
        &self,
        queues: &[String],
        wake: &(dyn Fn(&str) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
    ) -> Result<()> {
        let never = tokio_util::sync::CancellationToken::new();
        self.listen_on(queues, None, wake, subscribed, &never).await
    }

    fn real_time(&self) -> bool {
        true
    }

    async fn due_soon(&self, queues: &[String], within: Duration) -> Result<Vec<bool>> {
        self.poll_queues(queues, within).await
    }

    async fn check_layout(&self) -> Result<u32> {
        self.rsmq.check_layout().await
    }

    async fn listen_handoff(
        &self,
        queues: &[String],
        worker: &str,
        wake: &(dyn Fn(&str) + Send + Sync),
        handed: &(dyn Fn(Handed) + Send + Sync),
        subscribed: &(dyn Fn() + Send + Sync),
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<()> {
        // a Cluster's sends hand off nothing (see fetch_waiting), but its
        // PUBLISH reaches a subscriber on any node: control notices come
        let on = super::listen::Own {
            channel: self.ns.handoff(worker),
            control: crate::contract::admin::control_wake(worker),
            handed: (!self.ns.is_cluster()).then_some(handed),
        };
        let on = Some(on);
        self.listen_on(queues, on, wake, subscribed, stop).await
    }
}

impl RedisBackend {
    /// Redis's clock (Unix ms) and the entries of a ring of the queue's
    /// counters hash: fields `<prefix>0` .. `<prefix><n - 1>`, in one round
    /// trip.
    async fn ring(
        &self,
        queue: &str,
        prefix: char,
        n: usize,
    ) -> Result<(u64, Vec<(u64, u64, u64)>)> {
        crate::contract::queues::validate::queue_name(queue)?;
        let k = self.ns.queue(queue);
        let slots: Vec<String> = (0..n).map(|s| format!("{prefix}{s}")).collect();
        let (time, ring): ((u64, u64), Vec<Option<String>>) = redis::pipe()
            .cmd("TIME")
            .cmd("HMGET")
            .arg(&k.stats)
            .arg(&slots)
            .query_async(&mut self.con.clone())
            .await?;
        let now = time.0 * 1000 + time.1 / 1000;
        let ring = ring.iter().flatten().filter_map(|v| replies::minute(v));
        Ok((now, ring.collect()))
    }
}

impl RedisBackend {
    /// [`Backend::extend`] of leases given once each (extend.lua).
    async fn extend_each(
        &self,
        queue: &str,
        leases: &[(JobId, Token)],
        lease: Duration,
    ) -> Result<Vec<Option<Token>>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let k = self.ns.queue_shared(queue);
        let groups = by_priority(leases, |(_, t)| t.priority());
        let cmds: Vec<_> = groups
            .iter()
            .map(|(p, idx)| {
                let mut cmd = eval(&scripts::EXTEND, &[&k.level(*p), &k.leases]);
                cmd.arg(crate::contract::backend::clamped_ms(lease));
                for &i in idx {
                    let (id, token) = &leases[i];
                    cmd.arg(id).arg(token);
                }
                cmd
            })
            .collect();
        let replies = self
            .run_all(&scripts::EXTEND, &self.shared.extend_loaded, cmds)
            .await?;
        let mut out = vec![None; leases.len()];
        for ((p, idx), v) in groups.iter().zip(&replies) {
            let tokens = replies::tokens(v)?;
            for (&i, t) in idx.iter().zip(tokens) {
                out[i] = t.map(|t| t.at_priority(*p));
            }
        }
        Ok(out)
    }
}
