//! [`Admin`] on Redis: one script call per operation (`pause.lua`, `dead.lua`,
//! `dead_requeue.lua`, `dead_delete.lua`, `run_now.lua`).

use redis::Value;

use super::{Admin, DeadOrder, Spread};
use crate::backend::redis::scripts::{self, Reply};
use crate::inspect::{self, Cursor, JobInfo, JobState, Page};
use crate::queue::{Rsmq, validate};
use crate::{Error, JobId, Result};

/// The most jobs one purge.lua call deletes.
const PURGE_STEP: i64 = 5000;

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
    match scripts::int(&scripts::run(&mut con, &scripts::DEAD_DELETE, &cmd).await?)? {
        -1 => Err(not_found(queue)),
        n => Ok(n.max(0) as u64),
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
        });
    }
    Ok(jobs)
}

impl Admin for Rsmq {
    async fn pause(&self, queue: &str) -> Result<()> {
        pause(self, queue, "1").await.map(drop)
    }

    async fn resume(&self, queue: &str) -> Result<()> {
        pause(self, queue, "0").await.map(drop)
    }

    async fn is_paused(&self, queue: &str) -> Result<bool> {
        pause(self, queue, "").await
    }

    async fn purge_queue(&self, queue: &str) -> Result<u64> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let mut done = 0;
        loop {
            let mut cmd = scripts::eval(&scripts::PURGE, &k.all_levels_unique());
            cmd.arg(PURGE_STEP);
            match scripts::int(&scripts::run(&mut con, &scripts::PURGE, &cmd).await?)? {
                -1 => return Err(not_found(queue)),
                n => {
                    done += n.max(0) as u64;
                    if n < PURGE_STEP {
                        return Ok(done);
                    }
                }
            }
        }
    }

    async fn run_now(&self, queue: &str, id: &JobId) -> Result<Option<JobState>> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let mut cmd = scripts::eval(&scripts::RUN_NOW, &k.all_levels());
        cmd.arg(id).arg(&k.realtime);
        match scripts::int(&scripts::run(&mut con, &scripts::RUN_NOW, &cmd).await?)? {
            -1 => Err(not_found(queue)),
            1 => Ok(Some(JobState::Scheduled)),
            2 => Ok(Some(JobState::Ready)),
            3 => Ok(Some(JobState::InFlight)),
            _ => Ok(None),
        }
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
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let mut done = 0;
        for chunk in chunks(ids) {
            let s = spread.skip(done);
            let mut cmd = scripts::eval(&scripts::DEAD_REQUEUE, &k.all_levels_dead());
            cmd.arg(s.first.as_millis() as u64)
                .arg(s.every.as_micros() as u64)
                .arg(&k.realtime)
                .arg(chunk);
            match scripts::int(&scripts::run(&mut con, &scripts::DEAD_REQUEUE, &cmd).await?)? {
                -1 => return Err(not_found(queue)),
                n => done += n.max(0) as u64,
            }
        }
        Ok(done)
    }

    async fn delete_dead(&self, queue: &str, ids: &[JobId]) -> Result<u64> {
        let mut done = 0;
        for chunk in chunks(ids) {
            let mut args = vec!["ids"];
            args.extend(chunk.iter().map(|id| id.as_ref()));
            done += delete(self, queue, &args).await?;
        }
        Ok(done)
    }

    async fn purge_dead(&self, queue: &str) -> Result<u64> {
        delete(self, queue, &["all"]).await
    }

    async fn workers(&self) -> Result<Vec<super::WorkerInfo>> {
        self.live_workers().await
    }

    async fn ticks(&self, queue: &str, names: &[&str]) -> Result<Vec<super::Ticks>> {
        self.schedule_ticks(queue, names).await
    }
}
