//! `queues`, `queue ...`, `stats` and `drain`.

use std::time::Duration;

use clap::Subcommand;
use redjob::inspect::Inspect;
use redjob::ops::Admin;
use redjob::queue::Queues;
use serde_json::{Value, json};

use crate::settings;
use crate::show::{self, table};
use crate::{Ctx, Outcome};

mod drain;
mod overview;

pub use drain::{DrainArgs, drain};
use overview::{HEAD, line, line_json, line_row};
pub use overview::{ListArgs, StatsArgs, list, stats};

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
