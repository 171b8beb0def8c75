//! `redjob periodic`: the periodic schedules live workers tick, and the
//! actions on them.

use redjob::ops::Admin;
use serde_json::{Value, json};

use crate::show::{self, table, when};
use crate::{Ctx, Failure, Outcome};

/// "-" for none, else `when`.
fn maybe_when(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".into(), when)
}

/// Fails when no live worker ticks `name` of `queue`: a resume that found
/// nothing paused under a name nothing ticks names no schedule (a typo of a
/// paused one's name, which stays paused).
async fn unknown(c: &redjob::Client, queue: &str, name: &str) -> Outcome {
    let live = c.schedules().await?;
    if live.iter().any(|s| s.queue == queue && s.name == name) {
        return Ok(());
    }
    Err(Failure(format!(
        "{name:?} of {queue:?} is not paused and no live worker ticks it: nothing to resume"
    )))
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
    /// Resumes a paused schedule: its next tick runs. Fails when nothing is
    /// paused under the name and no live worker ticks it.
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
            if !changed {
                unknown(c, &queue, &name).await?;
            }
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
