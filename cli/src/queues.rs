//! `queues`, `queue ...`, `stats` and `drain`.

use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use redjob::inspect::{Inspect, StateCounts};
use redjob::ops::{Admin, Overview, OverviewQuery, OverviewSort, QueueLine};
use redjob::queue::Queues;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::settings;
use crate::show::{self, table};
use crate::{Ctx, Failure, Outcome};

#[derive(Subcommand)]
pub enum QueueCommand {
    /// Settings, jobs by state, counters and pause state of one queue.
    Show {
        /// The queue.
        queue: String,
    },
    /// Stops workers from starting its jobs (sends still go in).
    Pause {
        /// The queue.
        queue: String,
    },
    /// Lets workers start its jobs again, at once.
    Resume {
        /// The queue.
        queue: String,
    },
    /// Ends the throttle a handler put on the queue (a job's
    /// `JobError::rate_limited`), at once; a pause stays.
    Unthrottle {
        /// The queue.
        queue: String,
    },
    /// Its concurrency keys: each key's places, running, holding and blocked
    /// jobs (a page of keys, or one with --key).
    Keys {
        /// The queue.
        queue: String,
        /// One key only.
        #[arg(long)]
        key: Option<String>,
        /// Where to go on from (the `next` a page printed).
        #[arg(long)]
        after: Option<String>,
        /// About how many keys, 1 to 1000.
        #[arg(long, default_value_t = 100, value_parser = show::page_size())]
        limit: usize,
    },
    /// Creates a queue (RSMQ's createQueue): jobs can be enqueued to it.
    Create {
        /// The queue's name: up to 160 letters, digits, `-` and `_`.
        queue: String,
        /// How long a message received by an RSMQ client stays hidden (its
        /// visibility timeout), 0s to 9999999s.
        #[arg(long, default_value = "30s", value_parser = show::whole_seconds)]
        vt: Duration,
        /// How long a new message waits before it is due, 0s to 9999999s.
        #[arg(long, default_value = "0s", value_parser = show::whole_seconds)]
        delay: Duration,
        /// The largest body in bytes, 1024 to 65536, or -1 for no limit.
        #[arg(long, default_value_t = 65536, allow_negative_numbers = true)]
        maxsize: i64,
    },
    /// Deletes every job in it, waiting or running (not its dead letters):
    /// those counted when it asks, none sent since.
    Purge {
        /// The queue.
        queue: String,
        #[command(flatten)]
        confirm: show::Confirm,
    },
    /// The queue's settings in force for every worker (stored with the
    /// queue, else the defaults), and changing them: its limits across the
    /// fleet (concurrency per worker and in all, rate limit), how many dead
    /// letters and finished jobs (the history) it keeps and for how long.
    Settings(settings::SettingsArgs),
    /// Deletes the queue with its jobs, dead letters and counters.
    Delete {
        /// The queue.
        queue: String,
        #[command(flatten)]
        confirm: show::Confirm,
    },
}

#[derive(Args)]
pub struct StatsArgs {
    #[command(flatten)]
    list: ListArgs,
    /// Refresh until interrupted, with rates per second.
    #[arg(long)]
    watch: bool,
    /// Time between two refreshes (at least 100ms).
    #[arg(long, default_value = "2s", value_parser = show::refresh)]
    interval: Duration,
    /// Processed and failed runs hour by hour over the matching queues: the
    /// last N hours (default 24; kept for 7 days, so at most 169). With
    /// --json: the queues as without it, and "hours".
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "24",
          value_parser = clap::value_parser!(u16).range(1..=169), conflicts_with = "watch")]
    hours: Option<u16>,
}

#[derive(Args)]
pub struct DrainArgs {
    /// The queue.
    queue: String,
    /// Give up (exit code 1) after this long.
    #[arg(long, value_parser = show::duration)]
    timeout: Option<Duration>,
    /// Wait on a paused queue too (else a paused queue is an error: its jobs
    /// would wait until it is resumed).
    #[arg(long)]
    even_if_paused: bool,
    /// Exit 0 even when some jobs were dead-lettered meanwhile (else 1).
    #[arg(long)]
    allow_dead: bool,
}

/// Which queues `queues` and `stats` show, in what order.
#[derive(Args, Clone)]
pub struct ListArgs {
    /// Only queues whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// The column to sort by: name, ready, scheduled, in_flight, dead,
    /// latency, processed, failed, paused.
    #[arg(long, default_value = "name", value_parser = sort_column)]
    sort: OverviewSort,
    /// Largest first.
    #[arg(long)]
    desc: bool,
    /// At most this many queues (after the sort), 1 or more; all without it.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    limit: Option<usize>,
}

fn sort_column(s: &str) -> Result<OverviewSort, String> {
    s.parse().map_err(|e: redjob::Error| e.to_string())
}

impl ListArgs {
    fn query(&self) -> OverviewQuery {
        let mut q = OverviewQuery::default().sort(self.sort);
        if let Some(f) = &self.filter {
            q = q.filter(f.clone());
        }
        if self.desc {
            q = q.descending();
        }
        if let Some(n) = self.limit {
            q = q.page(0, n);
        }
        q
    }
}

/// `stats --hours`: the last `n` hours of the matching queues, added up;
/// `--json` prints `stats --json`'s object (the queues' list under
/// `"queues"`, as without `--hours`) with `"hours"`.
async fn hours(ctx: &Ctx, list: &ListArgs, n: usize) -> Outcome {
    let all = ctx.client.overview(&list.query().with_hours()).await?;
    let week = redjob::backend::last_week(
        all.now_ms,
        all.lines.iter().flat_map(|l| l.hours.iter().copied()),
    );
    let last = &week[week.len().saturating_sub(n)..];
    if ctx.json {
        let hours: Vec<Value> = last
            .iter()
            .map(|h| json!({"start_ms": h.start_ms, "processed": h.processed, "failed": h.failed}))
            .collect();
        warn(&all);
        let mut v = overview_json(&all, line_json);
        v["hours"] = hours.into();
        return show::json(&v);
    }
    let rows: Vec<Vec<String>> = last
        .iter()
        .map(|h| {
            vec![
                show::hour_utc(h.start_ms),
                h.processed.to_string(),
                h.failed.to_string(),
            ]
        })
        .collect();
    table(&["HOUR (UTC)", "PROCESSED", "FAILED"], &rows);
    let (p, f) = last
        .iter()
        .fold((0, 0), |(p, f), h| (p + h.processed, f + h.failed));
    println!(
        "\n{} of {} queues; {p} processed, {f} failed in {n} hours",
        all.lines.len(),
        all.matched
    );
    warn(&all);
    Ok(())
}

/// How long the oldest ready job has waited, in ms (`None`: none ready).
fn latency_ms(l: &QueueLine) -> Option<u64> {
    l.latency
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One queue's line of `queues`, `queue show` and `stats` as JSON.
fn line_json(l: &QueueLine) -> Value {
    let c = &l.counts;
    json!({
        "queue": l.name,
        "ready": c.ready,
        "scheduled": c.scheduled,
        "in_flight": c.in_flight,
        "dead": c.dead,
        "blocked": c.blocked,
        "latency_ms": latency_ms(l),
        "processed": l.stats.processed,
        "failed": l.stats.failed,
        "paused": l.paused,
    })
}

/// One queue's row of the tables.
fn line_row(l: &QueueLine) -> Vec<String> {
    let c = &l.counts;
    let mut row = vec![l.name.clone()];
    row.extend([c.ready, c.scheduled, c.in_flight, c.dead].map(|n| n.to_string()));
    row.push(latency_ms(l).map_or("-".into(), show::wait));
    row.extend([l.stats.processed, l.stats.failed].map(|n| n.to_string()));
    row.push(if l.paused { "yes" } else { "no" }.into());
    row
}

const HEAD: [&str; 9] = [
    "QUEUE",
    "READY",
    "SCHEDULED",
    "IN FLIGHT",
    "DEAD",
    "LATENCY",
    "PROCESSED",
    "FAILED",
    "PAUSED",
];

/// Queue `name`'s line; a clear error when there is no such queue.
async fn line(ctx: &Ctx, name: &str) -> Result<QueueLine, Failure> {
    let o = ctx
        .client
        .overview(&OverviewQuery::default().named(name))
        .await?;
    match o.lines.into_iter().find(|l| l.name == name) {
        Some(l) => Ok(l),
        // why not: a name no queue can have, or no such queue
        None => Err(ctx
            .client
            .counts(name)
            .await
            .err()
            .unwrap_or(redjob::Error::QueueNotFound { name: name.into() })
            .into()),
    }
}

/// Names the entries of the set of queues that are no valid queue names
/// (skipped) on stderr, if any.
fn warn(o: &Overview) {
    if o.skipped.is_empty() {
        return;
    }
    let names: Vec<String> = o.skipped.iter().map(|n| format!("{n:?}")).collect();
    eprintln!(
        "warning: skipped {} entries of the namespace's set of queues that are not valid queue names: {}",
        names.len(),
        names.join(", ")
    );
}

/// `{"queues": [...], "matched": n, "skipped": n, "skipped_names": [...]}`,
/// each queue's object through `each`.
fn overview_json(o: &Overview, each: impl Fn(&QueueLine) -> Value) -> Value {
    json!({
        "queues": o.lines.iter().map(each).collect::<Vec<_>>(),
        "matched": o.matched,
        "skipped": o.skipped.len(),
        "skipped_names": o.skipped,
    })
}

pub async fn list(ctx: &Ctx, args: &ListArgs) -> Outcome {
    let o = ctx.client.overview(&args.query()).await?;
    warn(&o);
    if ctx.json {
        return show::json(&overview_json(&o, line_json));
    }
    table(&HEAD, &o.lines.iter().map(line_row).collect::<Vec<_>>());
    if o.lines.len() < o.matched {
        println!("\n{} of {} queues", o.lines.len(), o.matched);
    }
    Ok(())
}

pub async fn queue(ctx: &Ctx, cmd: QueueCommand) -> Outcome {
    let c = &ctx.client;
    match cmd {
        QueueCommand::Show { queue } => {
            let l = line(ctx, &queue).await?;
            let a = c.queues().attributes(&queue).await?;
            let settings = json!({
                "vt_s": a.vt,
                "delay_s": a.delay,
                "maxsize": a.maxsize,
                "created": a.created,
                "modified": a.modified,
                "totalsent": a.totalsent,
                "totalrecv": a.totalrecv,
            });
            let stored = c.settings(&queue).await?;
            let times = c.run_times(&queue).await?;
            let ms =
                |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            if ctx.json {
                let mut v = line_json(&l);
                v["settings"] = settings;
                let mut s = settings::json(&stored);
                v["settings"]["dead_letters"] = s["dead_letters"].take();
                v["settings"]["history"] = s["history"].take();
                v["settings"]["concurrency"] = s["concurrency"].take();
                v["settings"]["rate_limit"] = s["rate_limit"].take();
                v["settings"]["usage"] = settings::usage_json(&c.limit_usage(&queue).await?);
                v["run_times"] = times
                    .iter()
                    .map(|t| {
                        json!({
                            "type": t.job_type,
                            "count": t.count(),
                            "p50_ms": ms(t.quantile(0.5)),
                            "p99_ms": ms(t.quantile(0.99)),
                        })
                    })
                    .collect();
                return show::json(&v);
            }
            table(&HEAD, &[line_row(&l)]);
            println!();
            for (k, v) in settings.as_object().into_iter().flatten() {
                // times as people read them (seconds in --json, as RSMQ keeps them)
                match (k.as_str(), v.as_u64()) {
                    ("created" | "modified", Some(s)) => {
                        println!("{k:<10}{} ({s})", show::when(s.saturating_mul(1000)))
                    }
                    _ => println!("{k:<10}{v}"),
                }
            }
            println!();
            let usage = c.limit_usage(&queue).await?;
            for line in settings::lines(&stored)
                .into_iter()
                .chain(settings::usage_lines(&usage))
            {
                println!("{}", show::escaped(&line));
            }
            if !times.is_empty() {
                // each figure is its bucket's upper bound
                let text = |d: Option<Duration>| match d {
                    Some(Duration::MAX) => "> 1000s".to_string(),
                    Some(d) => format!("<= {}", redjob::ops::duration_text(d)),
                    None => "-".into(),
                };
                let rows: Vec<Vec<String>> = times
                    .iter()
                    .map(|t| {
                        vec![
                            t.job_type.clone(),
                            t.count().to_string(),
                            text(t.quantile(0.5)),
                            text(t.quantile(0.99)),
                        ]
                    })
                    .collect();
                println!();
                table(&["TYPE", "RUNS", "P50", "P99"], &rows);
            }
            Ok(())
        }
        QueueCommand::Create {
            queue,
            vt,
            delay,
            maxsize,
        } => {
            let opts = redjob::queue::QueueOptions {
                vt: vt.as_secs(),
                delay: delay.as_secs(),
                maxsize,
            };
            c.queues().create_queue(&queue, opts).await?;
            done(ctx, json!({ "queue": queue, "created": true }), "created")
        }
        QueueCommand::Pause { queue } => {
            c.pause(&queue).await?;
            done(ctx, json!({ "queue": queue, "paused": true }), "paused")
        }
        QueueCommand::Resume { queue } => {
            c.resume(&queue).await?;
            done(ctx, json!({ "queue": queue, "paused": false }), "resumed")
        }
        QueueCommand::Keys {
            queue,
            key,
            after,
            limit,
        } => {
            let page = match key {
                Some(k) => {
                    let mut p = redjob::ops::KeyPage::default();
                    p.keys.push(c.key_usage(&queue, &k).await?);
                    p
                }
                None => c.keys(&queue, after.as_deref(), limit).await?,
            };
            if ctx.json {
                let keys: Vec<Value> = page
                    .keys
                    .iter()
                    .map(|k| {
                        json!({
                            "key": k.key,
                            "per_key": k.per_key,
                            "running": k.running,
                            "holding": k.holding,
                            "blocked": k.blocked,
                            "throttled_until_ms": k.throttled_until_ms,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    json!({ "queue": queue, "keys": keys, "next": page.next })
                );
            } else {
                let rows: Vec<Vec<String>> = page
                    .keys
                    .iter()
                    .map(|k| {
                        vec![
                            k.key.clone(),
                            k.per_key.to_string(),
                            k.running.to_string(),
                            k.holding.to_string(),
                            k.blocked.to_string(),
                            k.throttled_until_ms.map_or("-".into(), show::when),
                        ]
                    })
                    .collect();
                show::table(
                    &[
                        "KEY",
                        "PER KEY",
                        "RUNNING",
                        "HOLDING",
                        "BLOCKED",
                        "THROTTLED UNTIL",
                    ],
                    &rows,
                );
                if let Some(next) = &page.next {
                    println!("more: --after {next}");
                }
            }
            Ok(())
        }
        QueueCommand::Unthrottle { queue } => {
            let ended = c.end_throttle(&queue).await?;
            let said = if ended {
                "throttle ended"
            } else {
                "not throttled"
            };
            done(ctx, json!({ "queue": queue, "ended": ended }), said)
        }
        QueueCommand::Purge { queue, confirm } => {
            let n = c.count_purge(&queue).await?;
            let what = format!(
                "delete {} of {queue:?}",
                show::count(n.count, "job", "jobs")
            );
            let v = json!({"queue": queue, "count": n.count, "upto_ms": n.upto_ms});
            if !confirm.ask(ctx, &what, v)? {
                return Ok(());
            }
            let n = c.purge_queue_upto(&queue, n.upto_ms).await?;
            done(
                ctx,
                json!({ "queue": queue, "deleted": n }),
                &format!("deleted {n} jobs"),
            )
        }
        QueueCommand::Settings(args) => settings::settings(ctx, args).await,
        QueueCommand::Delete { queue, confirm } => {
            let n = c.counts(&queue).await?;
            let jobs = n.ready + n.scheduled + n.in_flight + n.blocked;
            let what = format!(
                "delete queue {queue:?} with its {} and {}",
                show::count(jobs, "job", "jobs"),
                show::count(n.dead, "dead letter", "dead letters")
            );
            let v = json!({"queue": queue, "jobs": jobs, "dead": n.dead});
            if !confirm.ask(ctx, &what, v)? {
                return Ok(());
            }
            c.queues().delete_queue(&queue).await?;
            done(ctx, json!({ "queue": queue, "deleted": true }), "deleted")
        }
    }
}

/// Reports a change: `v` as JSON, or `text`.
pub fn done(ctx: &Ctx, v: Value, text: &str) -> Outcome {
    if ctx.json {
        return show::json(&v);
    }
    println!("{text}");
    Ok(())
}

pub async fn stats(ctx: &Ctx, args: StatsArgs) -> Outcome {
    if let Some(n) = args.hours {
        return hours(ctx, &args.list, usize::from(n)).await;
    }
    if !args.watch {
        return list(ctx, &args.list).await;
    }
    let query = args.list.query();
    let mut before: Option<(Instant, Vec<QueueLine>)> = None;
    loop {
        let now = Instant::now();
        let all = ctx.client.overview(&query).await?;
        let lines = &all.lines;
        let rate = |l: &QueueLine, f: fn(&QueueLine) -> u64| -> String {
            let Some((at, old)) = &before else {
                return "-".into();
            };
            let Some(o) = old.iter().find(|o| o.name == l.name) else {
                return "-".into();
            };
            let per_s = f(l).saturating_sub(f(o)) as f64 / now.duration_since(*at).as_secs_f64();
            format!("{per_s:.1}")
        };
        if ctx.json {
            let v = overview_json(&all, |l| {
                let mut v = line_json(l);
                v["processed_per_s"] = rate(l, |l| l.stats.processed).into();
                v["failed_per_s"] = rate(l, |l| l.stats.failed).into();
                v
            });
            println!("{}", serde_json::to_string(&v)?);
            warn(&all);
        } else {
            // clear the screen, then the table
            print!("\x1b[2J\x1b[H");
            let mut head = HEAD.to_vec();
            head.extend(["PROCESSED/S", "FAILED/S"]);
            let rows: Vec<Vec<String>> = lines
                .iter()
                .map(|l| {
                    let mut row = line_row(l);
                    row.push(rate(l, |l| l.stats.processed));
                    row.push(rate(l, |l| l.stats.failed));
                    row
                })
                .collect();
            table(&head, &rows);
            warn(&all);
            println!("\nevery {:?}; Ctrl-C to stop", args.interval);
        }
        before = Some((now, all.lines));
        tokio::select! {
            _ = tokio::time::sleep(args.interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

pub async fn drain(ctx: &Ctx, args: DrainArgs) -> Outcome {
    let c = &ctx.client;
    let left = |n: StateCounts| n.ready + n.scheduled + n.in_flight + n.blocked;
    let start = Instant::now();
    let mut total = left(c.counts(&args.queue).await?);
    if c.is_paused(&args.queue).await? && !args.even_if_paused && total > 0 {
        return Err(Failure(format!(
            "{:?} is paused: its {total} jobs wait until it is resumed (redjob queue resume {}); --even-if-paused waits anyway",
            args.queue, args.queue
        )));
    }
    // what became of them: the queue's counters from now
    let before = c.stats(&args.queue).await?;
    let bar = if ctx.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} jobs out of the queue, {per_sec}, {elapsed} {msg}",
        )
        .map_err(|e| Failure(e.to_string()))?,
    );
    loop {
        let remaining = left(c.counts(&args.queue).await?);
        // jobs sent meanwhile count as more to do
        total = total.max(remaining + bar.position());
        bar.set_length(total);
        bar.set_position(total - remaining);
        if remaining == 0 {
            bar.finish();
            let secs = start.elapsed().as_secs_f64();
            let after = c.stats(&args.queue).await?;
            let succeeded = after.processed.saturating_sub(before.processed);
            let dead = after.dead.saturating_sub(before.dead);
            let v = json!({ "queue": args.queue, "drained": total, "succeeded": succeeded,
                            "dead": dead, "seconds": secs });
            done(
                ctx,
                v,
                &format!(
                    "{:?} is empty: {succeeded} succeeded, {dead} dead-lettered",
                    args.queue
                ),
            )?;
            if dead > 0 && !args.allow_dead {
                return Err(Failure(format!(
                    "{dead} jobs of {:?} were dead-lettered (redjob dead list {}); --allow-dead exits 0 all the same",
                    args.queue, args.queue
                )));
            }
            return Ok(());
        }
        if args.timeout.is_some_and(|t| start.elapsed() >= t) {
            bar.abandon();
            return Err(Failure(format!(
                "{remaining} jobs left in {:?} after {:?}",
                args.queue,
                args.timeout.unwrap_or_default()
            )));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = tokio::signal::ctrl_c() => {
                bar.abandon();
                return Err(Failure(format!("interrupted with {remaining} jobs left")));
            }
        }
    }
}
