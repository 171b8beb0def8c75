//! [`Inspect`] on Redis: one script call per operation (`counts.lua`, `peek.lua`,
//! `job.lua`, `list.lua`, `cancel.lua`).

use redis::Value;

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::contract::history::{Entry, History, HistoryEvent};
use crate::contract::inspect::{
    Cancelled, Cursor, Inspect, JobInfo, JobState, Page, StateCounts, page_size, queued,
};
use crate::contract::leases::Token;
use crate::contract::queues::{Keyed, validate};
use crate::{Error, JobId, Result};

/// Runs an inspection script with the queue's keys (every level and the dead
/// letters) and `args`.
async fn call(rsmq: &Rsmq, script: &redis::Script, queue: &str, args: &[&str]) -> Result<Value> {
    validate::queue_name(queue)?;
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(script, &k.inspection());
    cmd.arg(args);
    scripts::run(&mut con, script, &cmd).await
}

/// The reply of a script answering `{-1}` for a missing queue, else `{now, ...}`.
fn start<'a>(queue: &str, v: &'a Value) -> Result<(u64, Reply<'a>)> {
    let (now, r) = Reply::status(v)?;
    if now < 0 {
        return Err(Error::QueueNotFound { name: queue.into() });
    }
    Ok((now as u64, r))
}

/// A score as thousandths of a ms: one no redjob or RSMQ client writes (below 0,
/// past 9e12 ms, not a number) is cut into that range rather than failing the
/// whole answer.
fn thousandths(score: &[u8]) -> u64 {
    let s = std::str::from_utf8(score)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(0.0);
    if s >= 9.0e12 {
        9_000_000_000_000_000
    } else {
        Token::from_score(s.max(0.0), 0).map_or(0, Token::score)
    }
}

/// A row's count (a number, or 0) and error fields (see `with_fields` in
/// lib.lua).
fn count_and_error(r: &mut Reply<'_>) -> Result<(u64, Option<String>)> {
    let count = r
        .opt_bytes()?
        .and_then(|b| std::str::from_utf8(b).ok()?.parse::<u64>().ok())
        .unwrap_or(0);
    let error = r
        .opt_bytes()?
        .map(|b| String::from_utf8_lossy(b).into_owned());
    Ok((count, error))
}

/// Rows `priority, id, score, body, count, error` (see `with_fields` in lib.lua)
/// with their scores in thousandths; dead rows when `dead`, and where the last
/// row read stands (a page's cursor). A member whose id no RSMQ client writes
/// (a raw ZADD) is skipped, as a fetch skips it; so is a queued member
/// without a body (an RSMQ client's deleteMessage of a job at a priority
/// other than 0 leaves its id in the level's set), which is no job, as for
/// `job`, a unique send or a fetch (it was listed with an empty body): it
/// still moves the cursor, so that the next page neither reads it again
/// nor stops before the live jobs after it.
fn rows(r: &mut Reply<'_>, now: u64, dead: bool) -> Result<(Vec<JobInfo>, Option<Cursor>)> {
    let (mut jobs, mut last) = (Vec::new(), None);
    while !r.is_empty() {
        let p = r.int()?.clamp(-128, 127) as i8;
        let raw = r.bytes()?;
        let score = thousandths(r.bytes()?);
        let body = r.opt_bytes()?.map(<[u8]>::to_vec);
        let (count, error) = count_and_error(r)?;
        let Ok(id) = JobId::from_bytes(raw) else {
            tracing::error!(id = %String::from_utf8_lossy(raw), "skipped a message whose id is not an RSMQ id; delete it");
            continue;
        };
        last = Some(Cursor {
            priority: p,
            score,
            id,
            key: None,
        });
        let body = match body {
            Some(b) => b,
            None if dead => Vec::new(),
            None => continue,
        };
        jobs.push(if dead {
            JobInfo {
                id,
                state: JobState::Dead,
                priority: p,
                attempts: count.min(999) as u32,
                due_ms: score / 1000,
                body,
                last_error: error,
                runs: Vec::new(),
                finished: None,
                key: None,
                result: None,
                waits_for: None,
            }
        } else {
            queued(id, p, score, count, now, body, error)
        });
    }
    Ok((jobs, last))
}

/// A page of blocked jobs (blocked.lua), by key, then due time.
async fn blocked_page(rsmq: &Rsmq, queue: &str, after: Option<&Cursor>, n: usize) -> Result<Page> {
    validate::queue_name(queue)?;
    let n = page_size(n);
    let (mut con, k) = rsmq.parts(queue);
    let mut cmd = scripts::eval(&scripts::BLOCKED, &[&k.hash, &k.keyed, &k.keys]);
    cmd.arg(n)
        .arg(after.and_then(Cursor::keyed_member).unwrap_or_default());
    let v = scripts::run(&mut con, &scripts::BLOCKED, &cmd).await?;
    let (now, mut r) = start(queue, &v)?;
    let (mut jobs, mut read, mut last) = (Vec::new(), 0, None);
    while !r.is_empty() {
        let key = String::from_utf8_lossy(r.bytes()?).into_owned();
        let per_key = std::str::from_utf8(r.bytes()?)
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(1);
        let score = thousandths(r.bytes()?);
        let raw = r.bytes()?;
        let body = r.opt_bytes()?.map(<[u8]>::to_vec);
        let (rc, error) = count_and_error(&mut r)?;
        read += 1;
        let Ok(id) = JobId::from_bytes(raw) else {
            continue;
        };
        last = Some(Cursor::blocked(&key, score, id));
        // a member whose job is gone (no body) is dropped at its key's next fill
        let Some(body) = body else { continue };
        let mut job = queued(id, 0, score, rc, now, body, error);
        job.state = JobState::Blocked;
        job.key = Some(Keyed { key, per_key });
        jobs.push(job);
    }
    Ok(Page {
        jobs,
        next: last.filter(|_| n > 0 && read >= n),
    })
}

impl Inspect for Rsmq {
    fn actor(&self) -> &str {
        &self.actor
    }

    async fn counts(&self, queue: &str) -> Result<StateCounts> {
        let v = call(self, &scripts::COUNTS, queue, &[]).await?;
        let (_, mut r) = start(queue, &v)?;
        let n = |r: &mut Reply<'_>| r.int().map(|v| v.max(0) as u64);
        let (ready, scheduled, in_flight, dead) = (n(&mut r)?, n(&mut r)?, n(&mut r)?, n(&mut r)?);
        let blocked = if r.is_empty() { 0 } else { n(&mut r)? };
        Ok(StateCounts {
            ready,
            scheduled,
            in_flight,
            dead,
            blocked,
        })
    }

    async fn latency(&self, queue: &str) -> Result<Option<std::time::Duration>> {
        let v = call(self, &scripts::LATENCY, queue, &[]).await?;
        let (_, mut r) = start(queue, &v)?;
        let ms = r.int()?;
        Ok((ms >= 0).then(|| std::time::Duration::from_millis(ms as u64)))
    }

    async fn peek(&self, queue: &str, n: usize) -> Result<Vec<JobInfo>> {
        let n = page_size(n);
        let v = call(self, &scripts::PEEK, queue, &[&n.to_string()]).await?;
        let (now, mut r) = start(queue, &v)?;
        Ok(rows(&mut r, now, false)?.0)
    }

    async fn job(&self, queue: &str, id: &JobId) -> Result<Option<JobInfo>> {
        let default = History::default().encode();
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let mut keys = k.inspection();
        keys.push(k.keys.clone());
        let mut cmd = scripts::eval(&scripts::JOB, &keys);
        cmd.arg(id.as_ref()).arg(&default);
        let v = scripts::run(&mut con, &scripts::JOB, &cmd).await?;
        let (now, mut r) = start(queue, &v)?;
        if r.is_empty() {
            return Ok(None);
        }
        let place = r.bytes()?;
        if place == b"w" {
            let v = r.bytes()?;
            let nl = v.iter().position(|&c| c == b'\n').unwrap_or(v.len());
            let batch = std::str::from_utf8(&v[..nl])
                .ok()
                .and_then(|b| b.parse().ok());
            return Ok(batch.map(|b| {
                crate::contract::inspect::waiting(*id, b, v.get(nl + 1..).unwrap_or_default())
            }));
        }
        if place == b"h" {
            let entry = r.bytes()?;
            let shown = r.int()? == 1;
            return Ok(Entry::decode(entry).map(|(e, body)| {
                crate::contract::inspect::finished_info(e, *id, body.filter(|_| shown))
            }));
        }
        let dead = place == b"d";
        let log = r.opt_bytes()?.map(crate::contract::attempts::parse);
        let key = r.opt_bytes()?.and_then(Keyed::decode);
        let mut job = rows(&mut r, now, dead)?.0.pop();
        if let Some(job) = &mut job {
            job.runs = log.unwrap_or_default();
            job.key = key;
            if place == b"k" {
                job.state = JobState::Blocked;
            }
        }
        Ok(job)
    }

    async fn list(
        &self,
        queue: &str,
        state: JobState,
        after: Option<&Cursor>,
        n: usize,
    ) -> Result<Page> {
        if state == JobState::Dead {
            let order = crate::contract::admin::DeadOrder::OldestFirst;
            return crate::contract::admin::Admin::dead_page(self, queue, order, after, n).await;
        }
        if state == JobState::Finished {
            return history_page(self, queue, after, n).await;
        }
        if state == JobState::Blocked {
            return blocked_page(self, queue, after, n).await;
        }
        if state == JobState::Waiting {
            validate::queue_name(queue)?;
            return Ok(Page::default());
        }
        let n = page_size(n);
        let (p, s, id) = match after {
            Some(c) => (
                c.priority.to_string(),
                format!("{}.{:03}", c.score / 1000, c.score % 1000),
                c.id.to_string(),
            ),
            None => ("0".into(), String::new(), String::new()),
        };
        let args = [state.as_str(), &n.to_string(), &p, &s, &id];
        let v = call(self, &scripts::LIST, queue, &args).await?;
        let (now, mut r) = start(queue, &v)?;
        // where a page that passed over rows of the other kind ended early
        let (rp, rs, rid) = (r.bytes()?, r.bytes()?, r.bytes()?);
        let resume = if rid.is_empty() {
            None
        } else {
            let p = std::str::from_utf8(rp)
                .ok()
                .and_then(|p| p.parse::<i8>().ok());
            let id = JobId::from_bytes(rid).ok();
            p.zip(id).map(|(priority, id)| Cursor {
                priority,
                score: thousandths(rs),
                id,
                key: None,
            })
        };
        // rows read, counting those skipped as unreadable
        let read = match &v {
            Value::Array(items) => items.len().saturating_sub(4) / 6,
            _ => 0,
        };
        let (jobs, last) = rows(&mut r, now, false)?;
        // a full page goes on after its last row read, one skipped too
        let next = resume.or(last.filter(|_| n > 0 && read >= n));
        Ok(Page { jobs, next })
    }

    async fn history_events(&self, queue: &str) -> Result<Vec<HistoryEvent>> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let (exists, events): (bool, Option<String>) = redis::pipe()
            .cmd("HEXISTS")
            .arg(&k.hash)
            .arg("vt")
            .cmd("HGET")
            .arg(&k.history_hash)
            .arg("~events")
            .query_async(&mut con)
            .await?;
        if !exists {
            return Err(Error::QueueNotFound { name: queue.into() });
        }
        Ok(HistoryEvent::parse_all(events.as_deref().unwrap_or("")))
    }

    async fn cancel_by(&self, queue: &str, id: &JobId, by: &str) -> Result<Cancelled> {
        validate::queue_name(queue)?;
        let (mut con, k) = self.parts(queue);
        let mut keys = k.with_leases(k.all_levels_unique());
        keys.extend(k.history_keys());
        keys.extend(k.keyed_wake_keys());
        keys.push(k.awaited.clone());
        keys.push(k.bout.clone());
        keys.push(k.deps.clone());
        let mut cmd = scripts::eval(&scripts::CANCEL, &keys);
        let by = crate::contract::history::actor_line(by);
        cmd.arg(id)
            .arg(&by)
            .arg(History::default().encode())
            .arg(&k.realtime);
        let mut items = cancel_call(&mut con, &cmd).await?;
        if matches!(items.first().map(scripts::int).transpose()?, Some(0) | None) {
            // a flow's parent waiting for its children is no message yet;
            // one that no longer waits may have been sent meanwhile
            if self.cancel_waiting_parent(queue, id, &by).await? {
                return Ok(Cancelled::Removed);
            }
            items = cancel_call(&mut con, &cmd).await?;
        }
        let cancelled = match items.first().map(scripts::int).transpose()? {
            Some(-1) => return Err(Error::QueueNotFound { name: queue.into() }),
            Some(0) | None => return Ok(Cancelled::NotFound),
            Some(1) => Cancelled::Removed,
            _ => Cancelled::Cancelling,
        };
        // a running job's place under a global concurrency is free, and its
        // worker stops it now
        super::settings::wake_held(self, queue).await;
        if cancelled == Cancelled::Cancelling {
            let (mut con, ns, _) = self.ns_parts();
            super::queues::tell_gone(&mut con, ns, queue).await;
        }
        // a batch's job, or one flows wait for: counted cancelled now
        self.count_removed(queue, items.get(1..).unwrap_or_default())
            .await;
        Ok(cancelled)
    }
}

/// cancel.lua's reply.
async fn cancel_call(
    con: &mut crate::backend::redis::connection::Connection,
    cmd: &redis::Cmd,
) -> Result<Vec<Value>> {
    match scripts::run(con, &scripts::CANCEL, cmd).await? {
        Value::Array(items) => Ok(items),
        _ => Err(Error::Protocol("cancel reply".into())),
    }
}

/// Trims the history as a page read does, reading none (history.lua).
pub(crate) async fn trim_history(rsmq: &Rsmq, queue: &str) -> Result<()> {
    history_page(rsmq, queue, None, 0).await.map(|_| ())
}

/// A page of the history, newest first (history.lua).
async fn history_page(rsmq: &Rsmq, queue: &str, after: Option<&Cursor>, n: usize) -> Result<Page> {
    validate::queue_name(queue)?;
    let n = page_size(n);
    let (s, id) = match after {
        Some(c) => ((c.score / 1000).to_string(), c.id.to_string()),
        None => (String::new(), String::new()),
    };
    let (mut con, k) = rsmq.parts(queue);
    let [hl, hh] = k.history_keys();
    let mut cmd = scripts::eval(&scripts::HISTORY, &[&k.hash, &hl, &hh, &k.history_legacy]);
    cmd.arg(n).arg(s).arg(id).arg(History::default().encode());
    let v = scripts::run(&mut con, &scripts::HISTORY, &cmd).await?;
    let (_, mut r) = start(queue, &v)?;
    let mut jobs = Vec::new();
    let mut rows = 0;
    // the cursor after the last row, shown or not
    let mut last = None;
    while !r.is_empty() {
        rows += 1;
        let raw = r.bytes()?;
        let at = r.int()?;
        let entry = r.opt_bytes()?;
        let shown = r.int()?;
        let Ok(id) = JobId::from_bytes(raw) else {
            tracing::warn!(id = %String::from_utf8_lossy(raw), "skipped a history entry that cannot be read");
            continue;
        };
        last = Some(Cursor::dead_at(at.max(0) as u64, id));
        // an entry of a job requeued and entered again since: no row
        if shown < 0 {
            continue;
        }
        let Some((entry, body)) = entry.and_then(Entry::decode) else {
            tracing::warn!(%id, "skipped a history entry that cannot be read");
            continue;
        };
        jobs.push(crate::contract::inspect::finished_info(
            entry,
            id,
            body.filter(|_| shown == 1),
        ));
    }
    let next = (n > 0 && rows >= n).then_some(last).flatten();
    Ok(Page { jobs, next })
}
