//! [`Admin`] on Redis: one script call per operation (`pause.lua`, `dead.lua`,
//! `dead_requeue.lua`, `dead_delete.lua`, `run_now.lua`), a batch per call for
//! the bulk actions (`purge.lua`, and the dead letters matching a query), which
//! each take their cutoff once, from Redis's clock when they start.

use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use crate::backend::redis::connection::Connection;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::backend::redis::settings::{self, Mode};
use crate::contract::admin::{
    Admin, BulkCount, DeadOrder, DeadQuery, KeyPage, KeyUsage, Overview, OverviewQuery, Spread,
    event_word, noted,
};
use crate::contract::inspect::{self, Cursor, JobInfo, JobState, MAX_PAGE, Page};
use crate::contract::queues::validate;
use crate::contract::settings::QueueSettings;
use crate::{Error, JobId, Result};

/// The latest time (µs) a job id's ten base-36 digits hold.
const MAX_ID_US: u64 = 3_656_158_440_062_975;

/// About how many members one purge.lua call scans.
const PURGE_STEP: i64 = 1000;

/// How long a bulk action waits for Redis's clock to pass its cutoff (a
/// millisecond, unless the clock went back).
const CLOCK_WAIT: Duration = Duration::from_secs(2);

fn not_found(queue: &str) -> Error {
    Error::QueueNotFound { name: queue.into() }
}

/// pause.lua with `arg`: whether the queue is paused after it.
async fn pause(rsmq: &Rsmq, queue: &str, arg: &str) -> Result<bool> {
    validate::queue_name(queue)?;
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::PAUSE, &[&k.zset, &k.hash]);
    cmd.arg(arg).arg(&k.realtime);
    match scripts::int(&scripts::run(&mut con, &scripts::PAUSE, &cmd).await?)? {
        -1 => Err(not_found(queue)),
        n => Ok(n == 1),
    }
}

/// `ids` a page at a time, so that no call holds Redis long; one empty chunk
/// for none, so that a missing queue is still reported.
fn chunks(ids: &[JobId]) -> Vec<&[JobId]> {
    if ids.is_empty() {
        return vec![ids];
    }
    ids.chunks(inspect::MAX_PAGE).collect()
}

/// dead_delete.lua with `args`: how many were deleted.
async fn delete(rsmq: &Rsmq, queue: &str, args: &[&str]) -> Result<u64> {
    validate::queue_name(queue)?;
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::DEAD_DELETE, &[&k.hash, &k.dead, &k.dead_hash]);
    cmd.arg(args);
    match after_cutoff(&mut con, &scripts::DEAD_DELETE, &cmd).await? {
        -1 => Err(not_found(queue)),
        n => Ok(n.max(0) as u64),
    }
}

/// Runs `cmd`, a call of `script` (dead_requeue.lua, dead_delete.lua) that
/// refuses with -2 while Redis's clock has not passed its cutoff, until it
/// does not; its integer reply.
async fn after_cutoff(con: &mut Connection, script: &redis::Script, cmd: &Cmd) -> Result<i64> {
    let start = Instant::now();
    loop {
        match scripts::int(&scripts::run(con, script, cmd).await?)? {
            -2 if start.elapsed() < CLOCK_WAIT => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            -2 => {
                return Err(Error::Protocol(
                    "Redis's clock did not pass the bulk action's start or a letter's death".into(),
                ));
            }
            n => return Ok(n),
        }
    }
}

/// dead.lua's rows: id, score, body, deliveries, error, priority. A member whose
/// id no client writes is skipped.
fn rows(r: &mut Reply<'_>) -> Result<Vec<JobInfo>> {
    let mut jobs = Vec::new();
    while !r.is_empty() {
        let raw = r.bytes()?;
        let died = std::str::from_utf8(r.bytes()?)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|f| f.is_finite())
            .map_or(0, |f| f.clamp(0.0, 9.0e12) as u64);
        let body = r.opt_bytes()?.unwrap_or_default().to_vec();
        let attempts = r
            .opt_bytes()?
            .and_then(|b| std::str::from_utf8(b).ok()?.parse::<u64>().ok())
            .map_or(0, |n| n.min(999) as u32);
        let error = r
            .opt_bytes()?
            .map(|b| String::from_utf8_lossy(b).into_owned());
        let priority = r
            .opt_bytes()?
            .and_then(|b| std::str::from_utf8(b).ok()?.parse::<i8>().ok())
            .unwrap_or(0);
        let Ok(id) = JobId::from_bytes(raw) else {
            tracing::error!(id = %String::from_utf8_lossy(raw), "skipped a dead letter whose id is not an RSMQ id");
            continue;
        };
        jobs.push(JobInfo {
            id,
            state: JobState::Dead,
            priority,
            attempts,
            due_ms: died,
            body,
            last_error: error,
            runs: Vec::new(),
            finished: None,
            key: None,
            result: None,
            waits_for: None,
        });
    }
    Ok(jobs)
}

impl Admin for Rsmq {
    async fn pause(&self, queue: &str) -> Result<()> {
        pause(self, queue, "1").await?;
        noted(self.add_event(queue, "paused", 0).await, queue);
        Ok(())
    }

    async fn resume(&self, queue: &str) -> Result<()> {
        pause(self, queue, "0").await?;
        noted(self.add_event(queue, "resumed", 0).await, queue);
        Ok(())
    }

    async fn end_throttle(&self, queue: &str) -> Result<bool> {
        let ended = pause(self, queue, "t").await?;
        if ended {
            noted(self.add_event(queue, "unthrottled", 0).await, queue);
        }
        Ok(ended)
    }

    async fn settings(&self, queue: &str) -> Result<QueueSettings> {
        settings::call(self, queue, Mode::Get, &QueueSettings::default(), "").await
    }

    async fn set_settings(&self, queue: &str, s: &QueueSettings) -> Result<QueueSettings> {
        let set = settings::call(self, queue, Mode::Set, s, &self.actor).await?;
        // every worker reads them again now (a version not moved on waits
        // for the workers' full beats and rechecks)
        if let Err(e) = self.settings_changed().await {
            tracing::warn!(queue = %queue, error = %e, "the settings are stored, but the workers could not be told: they follow within two minutes");
        }
        noted(self.add_event(queue, "settings", 0).await, queue);
        Ok(set)
    }

    async fn overview(&self, query: &OverviewQuery) -> Result<Overview> {
        self.read_overview(query).await
    }

    async fn limit_usage(&self, queue: &str) -> Result<crate::contract::settings::LimitUsage> {
        settings::usage(self, queue).await
    }

    async fn key_usage(&self, queue: &str, key: &str) -> Result<KeyUsage> {
        // the queue's name first, as every admin call checks it
        validate::queue_name(queue)?;
        crate::contract::queues::Keyed::new(key).check()?;
        let mut page = read_keys(self, queue, &["key", key]).await?;
        Ok(page.keys.pop().unwrap_or_default())
    }

    async fn keys(&self, queue: &str, after: Option<&str>, n: usize) -> Result<KeyPage> {
        let n = n.clamp(1, crate::contract::inspect::MAX_PAGE).to_string();
        // a page's `next` here is an HSCAN cursor, which Redis refuses unless
        // it is a number: anything else is no page's, and refused as such
        let after = after.unwrap_or("0");
        if after.parse::<u64>().is_err() {
            validate::queue_name(queue)?;
            return Err(Error::InvalidValue {
                what: "key page",
                reason: format!("{after:?} is no page's `next` (a cursor this backend gave)"),
            });
        }
        read_keys(self, queue, &["page", after, &n]).await
    }

    async fn add_event(&self, queue: &str, what: &str, count: u64) -> Result<()> {
        validate::queue_name(queue)?;
        event_word(what, count)?;
        let (mut con, k) = self.parts(queue);
        let mut cmd = scripts::eval(&scripts::HISTORY_EVENT, &[&k.hash, &k.history_hash]);
        cmd.arg(what)
            .arg(count)
            .arg(&*self.actor)
            .arg(crate::contract::history::History::default().encode());
        match scripts::int(&scripts::run(&mut con, &scripts::HISTORY_EVENT, &cmd).await?)? {
            -1 => Err(not_found(queue)),
            _ => Ok(()),
        }
    }

    async fn is_paused(&self, queue: &str) -> Result<bool> {
        pause(self, queue, "").await
    }

    async fn count_purge(&self, queue: &str) -> Result<BulkCount> {
        validate::queue_name(queue)?;
        let (line, now) = self.queue_line(queue).await?;
        let c = line.counts;
        Ok(BulkCount {
            count: c.ready + c.scheduled + c.in_flight + c.blocked,
            upto_ms: now,
        })
    }

    async fn count_dead(&self, queue: &str, query: &DeadQuery) -> Result<BulkCount> {
        validate::queue_name(queue)?;
        let now = dead_clock(self, queue).await?;
        // once Redis's clock has passed `now`, no letter dies at or before
        // it: the count is of every letter the cutoff takes
        tokio::time::sleep(Duration::from_millis(1)).await;
        count_dead_by(self, queue, query, now).await
    }

    async fn purge_queue_by(&self, queue: &str, by: &str, upto_ms: Option<u64>) -> Result<u64> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        // the id prefix of the last µs of `upto_ms`: purge.lua deletes the
        // jobs whose ids sort up to it
        let cutoff = upto_ms.map_or(Vec::new(), |ms| {
            // ten base-36 digits hold µs up to 36^10 - 1 (the year 2085);
            // purge.lua takes a later cutoff as its clock's now
            let us = ms.saturating_mul(1000).saturating_add(999);
            let id = JobId::make(us.min(MAX_ID_US), &[b'0'; 22]);
            id.as_str().as_bytes()[..10].to_vec()
        });
        let (mut done, mut cutoff, mut at, mut cursor) = (0, cutoff, 1, b"0".to_vec());
        // the count of keyed jobs gone back to wait when the pass began (see
        // purge.lua): none before the first call
        let mut moves = Vec::new();
        // how many passes ended (purge.lua ends after 10)
        let mut passes = Vec::new();
        let mut keys = k.with_leases(k.all_levels_unique());
        keys.push(k.history_hash.clone());
        keys.extend(k.keyed_wake_keys());
        keys.push(k.bout.clone());
        keys.push(k.deps.clone());
        // a sweep counts the purged jobs' finishes should this caller stop
        // before it does
        self.mark_batches(queue, std::time::Duration::from_secs(10))
            .await?;
        let by = crate::contract::history::actor_line(by);
        let default = crate::contract::history::History::default().encode();
        loop {
            let mut cmd = scripts::eval(&scripts::PURGE, &keys);
            cmd.arg(PURGE_STEP)
                .arg(&cutoff)
                .arg(at)
                .arg(&cursor)
                .arg(done)
                .arg(&by)
                .arg(&default)
                .arg(&moves)
                .arg(&passes);
            let v = scripts::run(&mut con, &scripts::PURGE, &cmd).await?;
            let (n, mut r) = Reply::status(&v)?;
            if n < 0 {
                return Err(not_found(queue));
            }
            done += n as u64;
            cutoff = r.bytes()?.to_vec();
            at = r.int()?;
            cursor = r.bytes()?.to_vec();
            moves = r.int()?.to_string().into_bytes();
            passes = r.int()?.to_string().into_bytes();
            let finishes = r.rest();
            if !finishes.is_empty() {
                self.count_removed(queue, finishes).await;
            }
            if at == 0 {
                if done > 0 {
                    // running jobs' places under a global concurrency are
                    // free, and their workers stop them now
                    settings::wake_held(self, queue).await;
                    let (mut con, ns, _) = self.ns_parts();
                    crate::backend::redis::queues::tell_gone(&mut con, ns, queue).await;
                }
                return Ok(done);
            }
        }
    }

    async fn run_now(&self, queue: &str, id: &JobId) -> Result<Option<JobState>> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let mut keys = k.all_levels();
        keys.extend(k.keyed_keys());
        let mut cmd = scripts::eval(&scripts::RUN_NOW, &keys);
        cmd.arg(id).arg(&k.realtime);
        let code = scripts::int(&scripts::run(&mut con, &scripts::RUN_NOW, &cmd).await?)?;
        let was = match code {
            -1 => return Err(not_found(queue)),
            1 => Some(JobState::Scheduled),
            2 => Some(JobState::Ready),
            3 => Some(JobState::InFlight),
            // waiting for its key's place: made due now (4) or due already
            4 | 5 => Some(JobState::Blocked),
            _ => None,
        };
        if code == 1 || code == 4 {
            noted(self.add_event(queue, "run_now", 1).await, queue);
        }
        Ok(was)
    }

    async fn dead_page(
        &self,
        queue: &str,
        order: DeadOrder,
        after: Option<&Cursor>,
        n: usize,
    ) -> Result<Page> {
        validate::queue_name(queue)?;
        let n = inspect::page_size(n);
        let (s, id) = match after {
            Some(c) => ((c.score / 1000).to_string(), c.id.to_string()),
            None => (String::new(), String::new()),
        };
        let order = match order {
            DeadOrder::OldestFirst => "asc",
            DeadOrder::NewestFirst => "desc",
        };
        let (mut con, k) = self.parts(queue);
        let mut cmd = scripts::eval(&scripts::DEAD, &[&k.hash, &k.dead, &k.dead_hash]);
        cmd.arg(order).arg(n).arg(s).arg(id);
        let v = scripts::run(&mut con, &scripts::DEAD, &cmd).await?;
        let (now, mut r) = Reply::status(&v)?;
        if now < 0 {
            return Err(not_found(queue));
        }
        // rows read, counting those skipped as unreadable
        let read = match &v {
            Value::Array(items) => items.len().saturating_sub(1) / 6,
            _ => 0,
        };
        let jobs = rows(&mut r)?;
        Ok(inspect::dead_page(jobs, n > 0 && read >= n))
    }

    async fn requeue_dead(&self, queue: &str, ids: &[JobId], spread: Spread) -> Result<u64> {
        let n = requeue(self, queue, ids, spread, None).await?;
        self.dead_event(queue, "dead_requeued", n).await
    }

    async fn delete_dead(&self, queue: &str, ids: &[JobId]) -> Result<u64> {
        let mut done = 0;
        for chunk in chunks(ids) {
            let mut args = vec!["ids"];
            args.extend(chunk.iter().map(|id| id.as_ref()));
            done += delete(self, queue, &args).await?;
        }
        self.dead_event(queue, "dead_deleted", done).await
    }

    async fn purge_dead(&self, queue: &str) -> Result<u64> {
        let n = delete(self, queue, &["all"]).await?;
        self.dead_event(queue, "dead_deleted", n).await
    }

    async fn requeue_dead_matching(
        &self,
        queue: &str,
        query: &DeadQuery,
        per_second: Option<u32>,
    ) -> Result<u64> {
        let spread = per_second.map_or(Spread::NOW, Spread::per_second);
        let n = each_matching(self, queue, query, Some(spread)).await?;
        self.dead_event(queue, "dead_requeued", n).await
    }

    async fn delete_dead_matching(&self, queue: &str, query: &DeadQuery) -> Result<u64> {
        let n = each_matching(self, queue, query, None).await?;
        self.dead_event(queue, "dead_deleted", n).await
    }

    async fn workers(&self) -> Result<Vec<crate::contract::admin::WorkerInfo>> {
        self.live_workers().await
    }

    async fn ticks(
        &self,
        queue: &str,
        names: &[&str],
    ) -> Result<Vec<crate::contract::admin::Ticks>> {
        self.schedule_ticks(queue, names).await
    }

    async fn pause_schedule(&self, queue: &str, name: &str) -> Result<bool> {
        self.schedule(queue, name, true).await
    }

    async fn resume_schedule(&self, queue: &str, name: &str) -> Result<bool> {
        self.schedule(queue, name, false).await
    }

    async fn control_worker(
        &self,
        id: &str,
        control: Option<crate::contract::admin::WorkerControl>,
    ) -> Result<bool> {
        crate::contract::admin::check_worker_id(id)?;
        self.control(id, control).await
    }
}

/// dead_requeue.lua over `ids`, a page at a time; with `cutoff`, only the
/// letters that died by then, once Redis's clock has passed it.
async fn requeue(
    rsmq: &Rsmq,
    queue: &str,
    ids: &[JobId],
    spread: Spread,
    cutoff: Option<u64>,
) -> Result<u64> {
    validate::queue_name(queue)?;
    let (mut con, k) = rsmq.parts(queue);
    let cutoff = cutoff.map_or(String::new(), |c| c.to_string());
    let mut done = 0;
    for chunk in chunks(ids) {
        let s = spread.skip(done);
        let mut keys = k.all_levels_dead();
        keys.extend(k.keyed_wake_keys());
        keys.push(k.unique.clone());
        keys.push(k.exact.clone());
        let mut cmd = scripts::eval(&scripts::DEAD_REQUEUE, &keys);
        // (skip keeps the first within MAX_DELAY; a step over it puts every
        // letter after the first at MAX_DELAY, which dead_requeue.lua caps)
        let every = s.every.min(crate::contract::queues::MAX_DELAY);
        cmd.arg(s.first.as_millis() as u64)
            .arg(every.as_micros() as u64)
            .arg(&k.realtime)
            .arg(&cutoff)
            .arg(chunk);
        match after_cutoff(&mut con, &scripts::DEAD_REQUEUE, &cmd).await? {
            -1 => return Err(not_found(queue)),
            n => done += n.max(0) as u64,
        }
    }
    Ok(done)
}

/// Redis's clock (Unix ms) as the node holding `queue` reads it: dead.lua
/// asked for no rows.
async fn dead_clock(rsmq: &Rsmq, queue: &str) -> Result<u64> {
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::DEAD, &[&k.hash, &k.dead, &k.dead_hash]);
    cmd.arg("asc").arg(0).arg("").arg("");
    let v = scripts::run(&mut con, &scripts::DEAD, &cmd).await?;
    match Reply::status(&v)?.0 {
        now if now < 0 => Err(not_found(queue)),
        now => Ok(now as u64),
    }
}

/// How many dead letters of `queue` match `query` and died by `now` (Redis's
/// clock) and the query's own cutoff: without a filter one `ZCOUNT`, else a
/// page at a time, oldest first.
async fn count_dead_by(rsmq: &Rsmq, queue: &str, query: &DeadQuery, now: u64) -> Result<BulkCount> {
    let upto_ms = query.died_by_ms.map_or(now, |by| by.min(now));
    let query = DeadQuery {
        order: DeadOrder::OldestFirst,
        died_by_ms: Some(upto_ms),
        ..query.clone()
    };
    if unfiltered(&query) {
        let (mut con, k) = rsmq.parts(queue);
        let count: u64 = redis::cmd("ZCOUNT")
            .arg(&k.dead)
            .arg("-inf")
            .arg(upto_ms)
            .query_async(&mut con)
            .await?;
        return Ok(BulkCount { count, upto_ms });
    }
    let (mut count, mut after) = (0, None);
    loop {
        let page = rsmq
            .dead_page(queue, DeadOrder::OldestFirst, after.as_ref(), MAX_PAGE)
            .await?;
        for job in &page.jobs {
            if job.due_ms > upto_ms {
                return Ok(BulkCount { count, upto_ms });
            }
            after = Some(Cursor::dead(job));
            count += u64::from(query.matches(job));
        }
        if page.next.is_none() {
            return Ok(BulkCount { count, upto_ms });
        }
    }
}

/// Whether `query` selects by time alone (no type, no error text).
fn unfiltered(query: &DeadQuery) -> bool {
    query.job_type.is_none() && query.error_contains.is_none()
}

/// Deletes the dead letters of `queue` that died by `cutoff`, oldest first,
/// 1,000 a call by their scores (dead_delete.lua's "oldest": ids only, no
/// bodies read); returns how many.
async fn delete_oldest(rsmq: &Rsmq, queue: &str, cutoff: u64) -> Result<u64> {
    let cutoff = cutoff.to_string();
    let mut done = 0;
    loop {
        match delete(rsmq, queue, &["oldest", cutoff.as_str(), "1000"]).await? {
            0 => return Ok(done),
            n => done += n,
        }
    }
}

/// Requeues (with `spread`) or deletes (without) the dead letters of `queue`
/// that match `query` and died by the cutoff, Redis's clock when it starts, a
/// page at a time; returns how many. The scripts act once Redis's clock has
/// passed the cutoff, so that a letter requeued here that dies again dies
/// after it, and is left.
async fn each_matching(
    rsmq: &Rsmq,
    queue: &str,
    query: &DeadQuery,
    spread: Option<Spread>,
) -> Result<u64> {
    validate::queue_name(queue)?;
    let now = dead_clock(rsmq, queue).await?;
    let cutoff = query.died_by_ms.map_or(now, |by| by.min(now));
    // spares the scripts' refusal in the cutoff's ms
    tokio::time::sleep(Duration::from_millis(1)).await;
    if spread.is_none() && unfiltered(query) {
        return delete_oldest(rsmq, queue, cutoff).await;
    }
    let oldest_first = query.order == DeadOrder::OldestFirst;
    // newest first, from the cutoff down: the letters that died after it
    // (maybe many, since a confirmation's count) are not read at all
    let mut after = (!oldest_first).then(|| Cursor::dead_at(cutoff.saturating_add(1), JobId::MIN));
    let mut done = 0;
    loop {
        let page = rsmq
            .dead_page(queue, query.order, after.as_ref(), MAX_PAGE)
            .await?;
        let (mut ids, mut past) = (Vec::new(), false);
        for job in &page.jobs {
            // oldest first, the rest died later (newest first starts below
            // the cutoff)
            if job.due_ms > cutoff && oldest_first {
                past = true;
                break;
            }
            after = Some(Cursor::dead(job));
            if job.due_ms <= cutoff && query.matches(job) {
                ids.push(job.id);
            }
        }
        if !ids.is_empty() {
            done += match spread {
                Some(s) => requeue(rsmq, queue, &ids, s.skip(done), Some(cutoff)).await?,
                None => {
                    let cutoff = cutoff.to_string();
                    let mut args = vec!["upto", cutoff.as_str()];
                    args.extend(ids.iter().map(|id| id.as_ref()));
                    delete(rsmq, queue, &args).await?
                }
            };
        }
        if past || page.next.is_none() {
            return Ok(done);
        }
    }
}

impl Rsmq {
    /// Records a dead-letter operation that took `n` letters (none: nothing
    /// to record) in the queue's history; returns `n`.
    async fn dead_event(&self, queue: &str, what: &str, n: u64) -> Result<u64> {
        if n > 0 {
            noted(self.add_event(queue, what, n).await, queue);
        }
        Ok(n)
    }
}

/// keys.lua's reply as a page.
async fn read_keys(rsmq: &Rsmq, queue: &str, args: &[&str]) -> Result<KeyPage> {
    validate::queue_name(queue)?;
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::KEYS, &[&k.zset, &k.hash, &k.keyed, &k.keys]);
    cmd.arg(args);
    let v = scripts::run(&mut con, &scripts::KEYS, &cmd).await?;
    parse_keys(queue, &v)
}

/// keys.lua's reply: the next cursor, then six values per key.
fn parse_keys(queue: &str, v: &redis::Value) -> Result<KeyPage> {
    let redis::Value::Array(items) = v else {
        return Err(Error::Protocol(format!("keys reply {v:?}")));
    };
    if matches!(items.first(), Some(redis::Value::Int(-1))) {
        return Err(not_found(queue));
    }
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Ok(s.clone()),
        v => Err(Error::Protocol(format!("keys reply item {v:?}"))),
    };
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => Ok((*n).max(0) as u64),
        v => Err(Error::Protocol(format!("keys reply item {v:?}"))),
    };
    let next = items
        .first()
        .map(text)
        .transpose()?
        .filter(|s| !s.is_empty());
    let mut keys = Vec::new();
    for row in items[1..].chunks(6) {
        let [key, per, running, holding, blocked, until] = row else {
            return Err(Error::Protocol(format!("keys reply row {row:?}")));
        };
        keys.push(KeyUsage {
            key: text(key)?,
            per_key: int(per)? as u32,
            running: int(running)?,
            holding: int(holding)?,
            blocked: int(blocked)?,
            throttled_until_ms: Some(int(until)?).filter(|t| *t > 0),
        });
    }
    Ok(KeyPage { keys, next })
}
