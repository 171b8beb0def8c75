//! [`Admin`] on Redis: one script call per operation (`pause.lua`, `dead.lua`,
//! `dead_requeue.lua`, `dead_delete.lua`, `run_now.lua`), a batch per call for
//! the bulk actions (`purge.lua`, and the dead letters matching a query), which
//! each take their cutoff once, from Redis's clock when they start.

mod dead;
mod keys;

use std::time::Duration;

use redis::Value;

use crate::backend::redis::queues::Rsmq;
use crate::backend::redis::scripts::{self, Reply};
use crate::backend::redis::settings::{self, Mode};
use crate::contract::admin::{
    Admin, BulkCount, DeadOrder, DeadQuery, KeyPage, KeyUsage, Overview, OverviewQuery, Spread,
    event_word, noted,
};
use crate::contract::inspect::{self, Cursor, JobState, Page};
use crate::contract::queues::validate;
use crate::contract::settings::QueueSettings;
use crate::{Error, JobId, Result};
use dead::{chunks, count_dead_by, dead_clock, delete, each_matching, requeue, rows};
use keys::read_keys;

/// The latest time (µs) a job id's ten base-36 digits hold.
const MAX_ID_US: u64 = 3_656_158_440_062_975;

/// About how many members one purge.lua call scans.
const PURGE_STEP: i64 = 1000;

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
        settings::call(self, queue, Mode::Get, &QueueSettings::default(), "")
            .await
            .map(|(stored, _)| stored)
    }

    async fn set_settings(&self, queue: &str, s: &QueueSettings) -> Result<QueueSettings> {
        let (set, changed) = settings::call(self, queue, Mode::Set, s, &self.actor).await?;
        if !changed {
            // a change that changes nothing is no operator action: no
            // event, no notice
            return Ok(set);
        }
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

    async fn ticks_of(
        &self,
        asked: &[(&str, Vec<&str>)],
    ) -> Result<Vec<Vec<crate::contract::admin::Ticks>>> {
        self.schedule_ticks_of(asked).await
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
