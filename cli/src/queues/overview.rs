//! `queues` and `stats`: the overview of the queues, one line each.

use std::time::Duration;

use clap::Args;
use redjob::inspect::Inspect;
use redjob::ops::{Admin, Overview, OverviewQuery, OverviewSort, QueueLine};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::show::{self, table};
use crate::{Ctx, Failure, Outcome};

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
pub(super) fn line_json(l: &QueueLine) -> Value {
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
pub(super) fn line_row(l: &QueueLine) -> Vec<String> {
    let c = &l.counts;
    let mut row = vec![l.name.clone()];
    row.extend([c.ready, c.scheduled, c.in_flight, c.dead].map(|n| n.to_string()));
    row.push(latency_ms(l).map_or("-".into(), show::wait));
    row.extend([l.stats.processed, l.stats.failed].map(|n| n.to_string()));
    row.push(if l.paused { "yes" } else { "no" }.into());
    row
}

pub(super) const HEAD: [&str; 9] = [
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
pub(super) async fn line(ctx: &Ctx, name: &str) -> Result<QueueLine, Failure> {
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
