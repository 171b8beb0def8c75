//! Dead letters on Redis: reading, requeueing and deleting them (`dead.lua`,
//! `dead_requeue.lua`, `dead_delete.lua`), one by one and by query.

use std::time::{Duration, Instant};

use redis::Cmd;

use super::not_found;
use crate::backend::redis::connection::Connection;
use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::admin::{Admin, BulkCount, DeadOrder, DeadQuery, Spread, noted};
use crate::contract::inspect::{self, Cursor, JobInfo, JobState, MAX_PAGE};
use crate::contract::queues::validate;
use crate::{Error, JobId, Result};

/// How long a bulk action waits for Redis's clock to pass its cutoff (a
/// millisecond, unless the clock went back).
const CLOCK_WAIT: Duration = Duration::from_secs(2);

/// `ids` a page at a time, so that no call holds Redis long; one empty chunk
/// for none, so that a missing queue is still reported.
pub(super) fn chunks(ids: &[JobId]) -> Vec<&[JobId]> {
    if ids.is_empty() {
        return vec![ids];
    }
    ids.chunks(inspect::MAX_PAGE).collect()
}

/// dead_delete.lua with `args`: how many were deleted.
pub(super) async fn delete(rsmq: &Rsmq, queue: &str, args: &[&str]) -> Result<u64> {
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
pub(super) fn rows(r: &mut Reply<'_>) -> Result<Vec<JobInfo>> {
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

/// dead_requeue.lua over `ids`, a page at a time; with `cutoff`, only the
/// letters that died by then, once Redis's clock has passed it.
pub(super) async fn requeue(
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
pub(super) async fn dead_clock(rsmq: &Rsmq, queue: &str) -> Result<u64> {
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
pub(super) async fn count_dead_by(
    rsmq: &Rsmq,
    queue: &str,
    query: &DeadQuery,
    now: u64,
) -> Result<BulkCount> {
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
pub(super) async fn each_matching(
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
    pub(super) async fn dead_event(&self, queue: &str, what: &str, n: u64) -> Result<u64> {
        if n > 0 {
            noted(self.add_event(queue, what, n).await, queue);
        }
        Ok(n)
    }
}
