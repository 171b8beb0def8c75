//! [`Backend`] on Redis: sends, fetches and hand-offs, lease renewals, settles,
//! counters, wake-ups and heartbeats, each one script call per batch.

use super::keys::QueueKeys;
use super::packed::{Args, Packed};
use super::replies;
use super::scripts::{self, eval, run};
use super::{RedisBackend, info_replies, version_key};
use crate::contract::admin::{Tick, Ticked};
use crate::contract::attempts::{Attempt, RunBy, bound_error};
use crate::contract::backend::Backend;
use crate::contract::leases::{Fetched, Handed, Settle, Settled, Token};
use crate::contract::queues::{QueueOptions, SendMessage, Sent};
use crate::contract::settings::QueueSettings;
use crate::contract::stats::{DeadLetter, MinuteStats, QueueStats};
use crate::{Error, JobId, Result};
use std::fmt::Write as _;
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
        loop {
            let mut cmd = if levels {
                eval(&scripts::FETCH, &k.fetch_all())
            } else {
                eval(&scripts::FETCH, &k.fetch())
            };
            cmd.arg(max.max(1))
                .arg(crate::contract::backend::clamped_ms(lease));
            if let Some((reg, hands)) = reg {
                cmd.arg(reg).arg(hands.max(1));
            }
            let v = run(&mut self.con.clone(), &scripts::FETCH, &cmd).await?;
            match replies::fetched(v, max)? {
                Some(f) => return Ok(f),
                None if !levels => {
                    levels = true;
                    self.lock_prioritized().insert(queue.to_owned());
                }
                None => return Err(Error::Protocol("fetch asked for level keys twice".into())),
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
        scripts::run_pipeline(&mut con, &[(script, loaded)], &pipe).await
    }
}

/// complete.lua's keys for a part whose sorted set is `level`.
fn complete_keys<'a>(k: &'a QueueKeys, level: &'a String) -> [&'a String; 16] {
    [
        level,
        &k.hash,
        &k.dead,
        &k.dead_hash,
        &k.stats,
        &k.unique,
        &k.leases,
        &k.history,
        &k.history_hash,
        &k.keyed,
        &k.keys,
        &k.kwake,
        &k.awaited,
        &k.bout,
        &k.bres,
        &k.deps,
    ]
}

/// Room for a settle part's arguments beside its keys and a few short ones:
/// how many more, and their bytes (an ack's id, span and body; a retry's
/// seven, with its record), so that its command is not grown an argument at
/// a time.
fn complete_room(part: &Settle) -> (usize, usize) {
    let others = part.reschedules.len() + part.throttles.len() + part.dead.len();
    let args = 3 * part.acks.len() + 7 * others + 2 * part.results.len();
    let bytes = 80 * part.acks.len()
        + part.ack_bodies.iter().map(|b| b.1.len()).sum::<usize>()
        + 384 * others
        + part.results.iter().map(|r| 40 + r.1.len()).sum::<usize>();
    (args, bytes)
}

/// complete.lua's arguments for `part` (at priority `p`), after its keys,
/// written into `a`: a command for the multiplexer or one packed by hand,
/// the same arguments either way.
fn complete_args<A: Args>(a: &mut A, k: &QueueKeys, p: i8, part: &Settle) {
    let (keep, max_age) = part.retention.limits();
    // "<acks>b": each ack carries its body (complete.lua)
    let bodies = !part.ack_bodies.is_empty();
    let acks = part.acks.len().to_string();
    a.arg(if bodies { acks + "b" } else { acks })
        .arg(part.reschedules.len() + part.throttles.len())
        .arg(part.dead.len())
        .arg(p)
        .arg(keep)
        .arg(max_age)
        .arg(&k.realtime)
        .arg(part.by.as_ref().map_or(String::new(), RunBy::members))
        .arg(part.history.encode());
    let runs = part.runs();
    // the run-time codes: the types named once, the codes
    // counted after every entry (see complete.lua)
    let codes = RunTimeCodes::of(part, &runs);
    a.arg(codes.types.len()).arg(&codes.types);
    // the acks in runs of one token (a fetch's jobs share theirs:
    // each token is sent once for its run), each ack with its
    // span: its run's times as its attempt record's members,
    // written into one buffer; then, when the caller passed
    // bodies, its body as delivered (in the acks' order), else ""
    // (complete.lua reads it)
    let mut token_runs: Vec<(Token, usize)> = Vec::new();
    for (_, t) in &part.acks {
        match token_runs.last_mut() {
            Some((last, n)) if last == t => *n += 1,
            _ => token_runs.push((*t, 1)),
        }
    }
    if !part.acks.is_empty() {
        a.arg(token_runs.len());
    }
    let mut span = String::new();
    let mut sent = part.ack_bodies.iter().peekable();
    let mut acks = part.acks.iter();
    for (token, n) in &token_runs {
        a.arg(token).arg(*n);
        for (id, _) in acks.by_ref().take(*n) {
            span.clear();
            if let Some(r) = runs.get(id) {
                span.push_str(r#","start":"#);
                super::convert::push_decimal(&mut span, r.started_ms);
                span.push_str(r#","end":"#);
                super::convert::push_decimal(&mut span, r.ended_ms);
            }
            a.arg(id).arg(span.as_str());
            if bodies {
                let body = sent.next_if(|(b, _)| b == id).map_or(&[][..], |b| &b.1[..]);
                a.arg(body);
            }
        }
    }
    let by = part.by.as_ref();
    let record = |id: &JobId, token: Token, error: Option<&str>| {
        Attempt::settled(token.attempt(), runs.get(id).copied(), error, by).line()
    };
    for r in &part.reschedules {
        let error = r.error.as_deref().map(bound_error);
        let rec = if r.release {
            String::new()
        } else {
            record(&r.id, r.token, Some(error.as_deref().unwrap_or("")))
        };
        a.arg(r.id)
            .arg(r.token)
            .arg(crate::contract::backend::clamped_ms(r.delay))
            .arg(r.deliveries.min(crate::contract::leases::MAX_COUNT))
            .arg(if r.release { "l" } else { "r" })
            .arg(error.as_deref().unwrap_or(""))
            .arg(rec);
    }
    // a throttle: "t<limit>", the delivery given back unless the
    // job was throttled that many times in a row (complete.lua)
    // ("k<limit>" for a key's throttle)
    let (throttle, key_throttle) = if part.throttles.is_empty() {
        Default::default()
    } else {
        let allowed = part.throttles_allowed();
        (format!("t{allowed}"), format!("k{allowed}"))
    };
    for t in &part.throttles {
        let error = bound_error(&t.error);
        a.arg(t.id)
            .arg(t.token)
            .arg(crate::contract::backend::clamped_ms(t.delay))
            .arg(
                t.token
                    .attempt()
                    .saturating_sub(1)
                    .min(crate::contract::leases::MAX_COUNT),
            )
            .arg(if t.key { &key_throttle } else { &throttle })
            .arg(&error)
            .arg(
                Attempt::throttled(t.token.attempt(), runs.get(&t.id).copied(), &error, by).line(),
            );
    }
    for d in &part.dead {
        let error = bound_error(&d.error);
        a.arg(d.id)
            .arg(d.token)
            .arg(&error)
            .arg(record(&d.id, d.token, Some(&error)));
    }
    let counted = codes.counted();
    a.arg(counted.len());
    for (code, n) in counted {
        a.arg(code).arg(n);
    }
    a.arg(codes.each());
    // the acks' results, when some returned one; then the
    // entries' batches, when some belong to one
    if !part.results.is_empty() || !part.batched.is_empty() {
        a.arg(part.results.len());
        for (id, r) in &part.results {
            a.arg(id).arg(&r[..]);
        }
    }
    if !part.batched.is_empty() {
        let groups = batch_groups(part);
        a.arg(groups.len());
        for (b, finishes, places) in &groups {
            a.arg(b.as_str()).arg(finishes).arg(places);
        }
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
        self.rsmq.sweep_batches().await
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
        super::settings::call(&self.rsmq, queue, super::settings::Mode::Default, s, by).await
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
            .arg(limit.min(i64::MAX as usize) - 1)
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
        scripts::run_pipeline(
            &mut self.con.clone(),
            &[(&scripts::WITHDRAW, loaded)],
            &pipe,
        )
        .await?;
        Ok(())
    }

    async fn extend(
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

    async fn settle(&self, queue: &str, batch: &Settle) -> Result<Settled> {
        if batch.is_empty() {
            return Ok(Settled::default());
        }
        let k = self.ns.queue_shared(queue);
        let parts = batch.by_priority();
        // the command of one part, for the multiplexer or a pipeline
        let cmd = |p: i8, part: &Settle| {
            let level = k.level(p);
            let (args, bytes) = complete_room(part);
            let mut cmd =
                scripts::eval_sized(&scripts::COMPLETE, &complete_keys(&k, &level), args, bytes);
            complete_args(&mut cmd, &k, p, part);
            cmd
        };
        let replies = if let [(p, part)] = &parts[..] {
            // one part (one priority, as mostly): packed by hand for a lane
            let level = k.level(*p);
            let keys = complete_keys(&k, &level);
            let mut packed = Packed::with_capacity(64 + 48 * keys.len() + complete_room(part).1);
            packed
                .arg("EVALSHA")
                .arg(scripts::COMPLETE.get_hash())
                .arg(keys.len())
                .arg(&keys[..]);
            complete_args(&mut packed, &k, *p, part);
            let bytes = packed.finish(b"");
            let pipeline = || {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd(*p, part));
                pipe
            };
            vec![
                scripts::run_packed(&mut self.con.clone(), &scripts::COMPLETE, bytes, pipeline)
                    .await?,
            ]
        } else {
            let cmds = parts.iter().map(|(p, part)| cmd(*p, part)).collect();
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

/// A settle's batch finishes for complete.lua, by batch in order of first
/// finish: (batch, `<index>a,<index>r,<index>d<id>,...` ("r": an ack with a
/// result), the entries' places among
/// all the call's entries, from 1, `<k>,<k>,...`).
fn batch_groups(part: &Settle) -> Vec<(crate::contract::batches::BatchId, String, String)> {
    let refs: std::collections::HashMap<JobId, crate::contract::batches::BatchRef> =
        part.batched.iter().copied().collect();
    let mut groups: Vec<(crate::contract::batches::BatchId, String, String)> = Vec::new();
    let with_result: std::collections::HashSet<JobId> =
        part.results.iter().map(|(id, _)| *id).collect();
    let dead_from = part.acks.len() + part.reschedules.len() + part.throttles.len();
    let entries = part
        .acks
        .iter()
        .enumerate()
        .map(|(k, (id, _))| (k + 1, *id, None))
        .chain(
            part.dead
                .iter()
                .enumerate()
                .map(|(k, d)| (dead_from + k + 1, d.id, Some(d.id))),
        );
    for (place, id, dead) in entries {
        let Some(r) = refs.get(&id) else { continue };
        let i = match groups.iter().position(|g| g.0 == r.batch) {
            Some(i) => i,
            None => {
                groups.push((r.batch, String::new(), String::new()));
                groups.len() - 1
            }
        };
        let (_, finishes, places) = &mut groups[i];
        if !finishes.is_empty() {
            finishes.push(',');
            places.push(',');
        }
        let _ = match dead {
            None if with_result.contains(&id) => write!(finishes, "{}r", r.index),
            None => write!(finishes, "{}a", r.index),
            Some(id) => write!(finishes, "{}d{id}", r.index),
        };
        let _ = write!(places, "{place}");
    }
    groups
}

/// A settle's run-time codes for complete.lua: the job types it names, and
/// per entry (acks, reschedules, throttles, dead letters, in order) `32 x
/// (type index from 1) + bucket`, or none for a release or a run whose type or
/// times are not known.
struct RunTimeCodes<'a> {
    types: Vec<&'a str>,
    /// Each entry's code, `None` (sent as "-") when unknown or a release.
    codes: Vec<Option<usize>>,
}

impl<'a> RunTimeCodes<'a> {
    fn of(
        part: &'a Settle,
        runs: &std::collections::HashMap<
            JobId,
            &'a crate::contract::attempts::Ran,
            crate::id::IdHash,
        >,
    ) -> Self {
        let mut types: Vec<&'a str> = Vec::new();
        let mut code = |id: &JobId, counted: bool| -> Option<usize> {
            let r = runs.get(id).filter(|_| counted)?;
            let t = r.job_type.as_deref()?;
            let at = match types.iter().position(|x| *x == t) {
                Some(i) => i,
                None => {
                    types.push(t);
                    types.len() - 1
                }
            };
            let bucket =
                crate::contract::runtimes::bucket_of(r.ended_ms.saturating_sub(r.started_ms));
            Some((at + 1) * 32 + bucket)
        };
        let mut codes = Vec::with_capacity(
            part.acks.len() + part.reschedules.len() + part.throttles.len() + part.dead.len(),
        );
        for (id, _) in &part.acks {
            codes.push(code(id, true));
        }
        for r in &part.reschedules {
            codes.push(code(&r.id, !r.release));
        }
        // a throttle's run is timed as any other
        for t in &part.throttles {
            codes.push(code(&t.id, true));
        }
        for d in &part.dead {
            codes.push(code(&d.id, true));
        }
        RunTimeCodes { types, codes }
    }

    /// The distinct codes and how many entries have each, in first-seen order.
    fn counted(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        for code in self.codes.iter().flatten() {
            match out.iter_mut().find(|(c, _)| c == code) {
                Some((_, n)) => *n += 1,
                None => out.push((*code, 1)),
            }
        }
        out
    }

    /// Every entry's code in order, separated by spaces, "-" for none.
    fn each(&self) -> String {
        let mut out = String::with_capacity(self.codes.len() * 4);
        for (k, code) in self.codes.iter().enumerate() {
            if k > 0 {
                out.push(' ');
            }
            match code {
                Some(c) => {
                    let _ = write!(out, "{c}");
                }
                None => out.push('-'),
            }
        }
        out
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Args, Packed, complete_args, complete_keys, complete_room};
    use crate::backend::redis::keys::Namespace;
    use crate::backend::redis::scripts;
    use crate::contract::attempts::{Ran, RunBy};
    use crate::contract::batches::BatchRef;
    use crate::contract::leases::{DeadLetterEntry, Reschedule, Settle, Throttle, Token};
    use crate::inspect::AttemptOutcome;

    /// A settle's call packed by hand and built as a `redis` command.
    fn both(p: i8, part: &Settle) -> (Vec<u8>, Vec<u8>) {
        let k = Namespace::new("rsmq", false).queue("mails");
        let level = k.level(p);
        let keys = complete_keys(&k, &level);
        let (args, bytes) = complete_room(part);
        let mut cmd = scripts::eval_sized(&scripts::COMPLETE, &keys, args, bytes);
        complete_args(&mut cmd, &k, p, part);
        let mut packed = Packed::with_capacity(0);
        packed
            .arg("EVALSHA")
            .arg(scripts::COMPLETE.get_hash())
            .arg(keys.len())
            .arg(&keys[..]);
        complete_args(&mut packed, &k, p, part);
        (packed.finish(b"").to_vec(), cmd.get_packed_command())
    }

    #[test]
    fn a_settle_packed_by_hand_is_the_command_redis_packs() {
        let id = |i: u32| {
            format!("mhx3k0vz1qabcdefghijklmnopqr{i:04}")
                .parse()
                .unwrap()
        };
        let token = Token::new(1_790_000_000_123, 2);
        let one = Settle {
            acks: vec![(id(1), token)],
            ..Settle::default()
        };
        let (packed, cmd) = both(0, &one);
        assert_eq!(packed, cmd);
        let many = Settle {
            acks: (0..40).map(|i| (id(i), token)).collect(),
            ack_bodies: (0..20).map(|i| (id(i), b"{\"i\":1}".to_vec())).collect(),
            results: vec![(id(3), b"{\"ok\":true}".to_vec())],
            reschedules: vec![
                Reschedule {
                    id: id(100),
                    token,
                    delay: Duration::from_millis(1500),
                    deliveries: 3,
                    release: false,
                    error: Some("boom".into()),
                },
                Reschedule {
                    id: id(101),
                    token,
                    delay: Duration::ZERO,
                    deliveries: 1,
                    release: true,
                    error: None,
                },
            ],
            dead: vec![DeadLetterEntry {
                id: id(102),
                token,
                error: "é".repeat(5000),
            }],
            throttles: vec![Throttle {
                id: id(103),
                token,
                delay: Duration::from_secs(2),
                error: "slow down".into(),
                key: true,
            }],
            ran: (0..5)
                .map(|i| Ran {
                    id: id(i),
                    started_ms: 1_790_000_000_000,
                    ended_ms: 1_790_000_000_250,
                    outcome: AttemptOutcome::Ok,
                    job_type: Some("mail".into()),
                })
                .collect(),
            by: Some(RunBy {
                worker: "w-1".into(),
                host: "web \"3\"".into(),
            }),
            batched: [1, 2, 102]
                .iter()
                .map(|i| {
                    let batch = "0000000000abcdefghijklmnopqrstuv".parse().unwrap();
                    (
                        id(*i),
                        BatchRef {
                            batch,
                            index: u64::from(*i),
                        },
                    )
                })
                .collect(),
            ..Settle::default()
        };
        for p in [0, -3, 10] {
            let (packed, cmd) = both(p, &many);
            assert!(packed == cmd, "priority {p}");
        }
    }
}
