//! `queues`, `queue ...`, `stats` and `drain`.

use std::time::Duration;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use redjob::inspect::{Inspect, StateCounts};
use redjob::ops::Admin;
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
    /// Deletes every job in it, waiting or running (not its dead letters).
    Purge {
        /// The queue.
        queue: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
    /// The queue's settings in force for every worker (stored with the
    /// queue, else the defaults), and changing them: how many dead letters it
    /// keeps and for how long.
    Settings(settings::SettingsArgs),
    /// Deletes the queue with its jobs, dead letters and counters.
    Delete {
        /// The queue.
        queue: String,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Args)]
pub struct StatsArgs {
    /// Refresh until interrupted, with rates per second.
    #[arg(long)]
    watch: bool,
    /// Time between two refreshes.
    #[arg(long, default_value = "2s", value_parser = show::duration)]
    interval: Duration,
}

#[derive(Args)]
pub struct DrainArgs {
    /// The queue.
    queue: String,
    /// Give up (exit code 1) after this long.
    #[arg(long, value_parser = show::duration)]
    timeout: Option<Duration>,
}

/// One queue's line of `queues` and `stats`.
struct Line {
    name: String,
    counts: StateCounts,
    processed: u64,
    failed: u64,
    paused: bool,
}

impl Line {
    fn json(&self) -> Value {
        let c = &self.counts;
        json!({
            "queue": self.name,
            "ready": c.ready,
            "scheduled": c.scheduled,
            "in_flight": c.in_flight,
            "dead": c.dead,
            "processed": self.processed,
            "failed": self.failed,
            "paused": self.paused,
        })
    }

    fn row(&self) -> Vec<String> {
        let c = &self.counts;
        let mut row: Vec<String> = [
            c.ready,
            c.scheduled,
            c.in_flight,
            c.dead,
            self.processed,
            self.failed,
        ]
        .iter()
        .map(u64::to_string)
        .collect();
        row.insert(0, self.name.clone());
        row.push(if self.paused { "yes" } else { "no" }.into());
        row
    }
}

const HEAD: [&str; 8] = [
    "QUEUE",
    "READY",
    "SCHEDULED",
    "IN FLIGHT",
    "DEAD",
    "PROCESSED",
    "FAILED",
    "PAUSED",
];

async fn line(ctx: &Ctx, name: &str) -> Result<Line, Failure> {
    let c = &ctx.client;
    let stats = c.stats(name).await?;
    Ok(Line {
        name: name.into(),
        counts: c.counts(name).await?,
        processed: stats.processed,
        failed: stats.failed,
        paused: c.is_paused(name).await?,
    })
}

/// Every queue's line, and the entries of the set of queue names that are no
/// valid queue names (skipped, with a warning on stderr).
struct Lines {
    lines: Vec<Line>,
    skipped: Vec<String>,
}

impl Lines {
    /// Names the skipped entries on stderr, if any.
    fn warn(&self) {
        if self.skipped.is_empty() {
            return;
        }
        let names: Vec<String> = self.skipped.iter().map(|n| format!("{n:?}")).collect();
        eprintln!(
            "warning: skipped {} entries of the namespace's set of queues that are not valid queue names: {}",
            names.len(),
            names.join(", ")
        );
    }

    /// `{"queues": [...], "skipped": n, "skipped_names": [...]}`, each queue's
    /// object through `each`.
    fn json(&self, each: impl Fn(&Line) -> Value) -> Value {
        json!({
            "queues": self.lines.iter().map(each).collect::<Vec<_>>(),
            "skipped": self.skipped.len(),
            "skipped_names": self.skipped,
        })
    }
}

async fn lines(ctx: &Ctx) -> Result<Lines, Failure> {
    let listing = ctx.client.queues().queue_listing().await?;
    let mut names = listing.names;
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        match line(ctx, &name).await {
            Ok(l) => out.push(l),
            // deleted between the listing and its read
            Err(_) if !ctx.client.queues().list_queues().await?.contains(&name) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Lines {
        lines: out,
        skipped: listing.skipped,
    })
}

pub async fn list(ctx: &Ctx) -> Outcome {
    let all = lines(ctx).await?;
    all.warn();
    if ctx.json {
        return show::json(&all.json(Line::json));
    }
    table(&HEAD, &all.lines.iter().map(Line::row).collect::<Vec<_>>());
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
                let mut v = l.json();
                v["settings"] = settings;
                let mut s = settings::json(&stored);
                v["settings"]["dead_letters"] = s["dead_letters"].take();
                v["settings"]["history"] = s["history"].take();
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
            table(&HEAD, &[l.row()]);
            println!();
            for (k, v) in settings.as_object().into_iter().flatten() {
                println!("{k:<10}{v}");
            }
            println!();
            for line in settings::lines(&stored) {
                println!("{line}");
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
        QueueCommand::Pause { queue } => {
            c.pause(&queue).await?;
            done(ctx, json!({ "queue": queue, "paused": true }), "paused")
        }
        QueueCommand::Resume { queue } => {
            c.resume(&queue).await?;
            done(ctx, json!({ "queue": queue, "paused": false }), "resumed")
        }
        QueueCommand::Purge { queue, yes } => {
            let n = c.counts(&queue).await?;
            let waiting = n.ready + n.scheduled + n.in_flight;
            show::confirm(yes, &format!("delete the {waiting} jobs of {queue:?}"))?;
            let n = c.purge_queue(&queue).await?;
            done(
                ctx,
                json!({ "queue": queue, "deleted": n }),
                &format!("deleted {n} jobs"),
            )
        }
        QueueCommand::Settings(args) => settings::settings(ctx, args).await,
        QueueCommand::Delete { queue, yes } => {
            c.queues().attributes(&queue).await?;
            show::confirm(
                yes,
                &format!("delete queue {queue:?} with its jobs and dead letters"),
            )?;
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
    if !args.watch {
        return list(ctx).await;
    }
    let mut before: Option<(Instant, Vec<Line>)> = None;
    loop {
        let now = Instant::now();
        let all = lines(ctx).await?;
        let lines = &all.lines;
        let rate = |l: &Line, f: fn(&Line) -> u64| -> String {
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
            let v = all.json(|l| {
                let mut v = l.json();
                v["processed_per_s"] = rate(l, |l| l.processed).into();
                v["failed_per_s"] = rate(l, |l| l.failed).into();
                v
            });
            println!("{}", serde_json::to_string(&v)?);
            all.warn();
        } else {
            // clear the screen, then the table
            print!("\x1b[2J\x1b[H");
            let mut head = HEAD.to_vec();
            head.extend(["PROCESSED/S", "FAILED/S"]);
            let rows: Vec<Vec<String>> = lines
                .iter()
                .map(|l| {
                    let mut row = l.row();
                    row.push(rate(l, |l| l.processed));
                    row.push(rate(l, |l| l.failed));
                    row
                })
                .collect();
            table(&head, &rows);
            all.warn();
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
    let left = |n: StateCounts| n.ready + n.scheduled + n.in_flight;
    let start = Instant::now();
    let mut total = left(c.counts(&args.queue).await?);
    let bar = if ctx.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} jobs done, {per_sec}, {elapsed} {msg}")
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
            let v = json!({ "queue": args.queue, "drained": total, "seconds": secs });
            return done(ctx, v, &format!("{:?} is empty", args.queue));
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
