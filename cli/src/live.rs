//! `redjob workers` and `redjob periodic`: the live worker processes and the
//! periodic schedules they tick.

use redjob::ops::Admin;
use serde_json::{Value, json};

use crate::show::{self, table, when};
use crate::{Ctx, Outcome};

/// "-" for none, else `when`.
fn maybe_when(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".into(), when)
}

/// The live workers: one row each, then (in tables) the jobs each one runs.
pub async fn workers(ctx: &Ctx) -> Outcome {
    let workers = ctx.client.workers().await?;
    if ctx.json {
        return show::json(&serde_json::to_value(&workers)?);
    }
    let rows: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            vec![
                w.id.clone(),
                w.host.clone(),
                w.pid.to_string(),
                w.queues.join(","),
                format!("{}/{}", w.running.len(), w.concurrency),
                w.subscribers
                    .iter()
                    .map(|s| format!("{}@{}", s.subscriber, s.topic))
                    .collect::<Vec<_>>()
                    .join(","),
                w.job_types.len().to_string(),
                when(w.started_at_ms),
                when(w.last_beat_ms),
                w.version.clone(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "HOST",
            "PID",
            "QUEUES",
            "BUSY",
            "SUBSCRIBERS",
            "TYPES",
            "STARTED",
            "BEAT",
            "VERSION",
        ],
        &rows,
    );
    let running: Vec<Vec<String>> = workers
        .iter()
        .flat_map(|w| {
            w.running.iter().map(|r| {
                vec![
                    w.id.get(..8).unwrap_or(&w.id).to_string(),
                    r.queue.clone(),
                    r.id.clone(),
                    r.job.clone().unwrap_or_else(|| "?".into()),
                    when(r.started_at_ms),
                ]
            })
        })
        .collect();
    if !running.is_empty() {
        println!();
        table(&["WORKER", "QUEUE", "JOB ID", "TYPE", "STARTED"], &running);
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct PeriodicArgs {
    #[command(subcommand)]
    command: Option<PeriodicCommand>,
}

#[derive(clap::Subcommand)]
pub enum PeriodicCommand {
    /// Enqueues a run of a schedule now (its next tick runs as planned).
    Run {
        /// The queue its jobs go to.
        queue: String,
        /// The schedule's name.
        name: String,
    },
    /// Pauses a schedule for every worker that ticks it: its ticks pass and
    /// enqueue nothing until it is resumed.
    Pause {
        /// The queue its jobs go to.
        queue: String,
        /// The schedule's name.
        name: String,
    },
    /// Resumes a paused schedule: its next tick runs.
    Resume {
        /// The queue its jobs go to.
        queue: String,
        /// The schedule's name.
        name: String,
    },
}

/// The periodic schedules live workers tick, with their last and next tick;
/// or an action on one.
pub async fn periodic(ctx: &Ctx, args: PeriodicArgs) -> Outcome {
    let c = &ctx.client;
    match args.command {
        None => {}
        Some(PeriodicCommand::Run { queue, name }) => {
            let id = c.run_schedule_now(&queue, &name).await?;
            return crate::queues::done(
                ctx,
                json!({"queue": queue, "name": name, "id": id.to_string()}),
                id.as_ref(),
            );
        }
        Some(PeriodicCommand::Pause { queue, name }) => {
            // a typo would pause nothing that runs: say so
            let live = c.schedules().await?;
            if !live.iter().any(|s| s.queue == queue && s.name == name) {
                eprintln!(
                    "warning: no live worker ticks {name:?} of {queue:?}: paused all the same, for workers to come"
                );
            }
            let changed = c.pause_schedule(&queue, &name).await?;
            let text = if changed { "paused" } else { "paused already" };
            return crate::queues::done(
                ctx,
                json!({"queue": queue, "name": name, "paused": true, "changed": changed}),
                text,
            );
        }
        Some(PeriodicCommand::Resume { queue, name }) => {
            let changed = c.resume_schedule(&queue, &name).await?;
            let text = if changed { "resumed" } else { "not paused" };
            return crate::queues::done(
                ctx,
                json!({"queue": queue, "name": name, "paused": false, "changed": changed}),
                text,
            );
        }
    }
    let schedules = ctx.client.schedules().await?;
    if ctx.json {
        let v: Vec<Value> = schedules
            .iter()
            .map(|s| {
                let mut v = serde_json::to_value(s).unwrap_or(Value::Null);
                v["last"] = json!(s.last_ms.map(when));
                v["next"] = json!(s.next_ms.map(when));
                v
            })
            .collect();
        return show::json(&Value::Array(v));
    }
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .map(|s| {
            vec![
                s.queue.clone(),
                s.name.clone(),
                s.job.clone(),
                s.schedule.clone(),
                maybe_when(s.last_ms),
                maybe_when(s.next_ms),
                s.workers.to_string(),
                s.paused
                    .as_ref()
                    .map_or("no".into(), |p| format!("by {} {}", p.by, when(p.at_ms))),
            ]
        })
        .collect();
    table(
        &[
            "QUEUE", "NAME", "JOB", "SCHEDULE", "LAST", "NEXT", "WORKERS", "PAUSED",
        ],
        &rows,
    );
    Ok(())
}
