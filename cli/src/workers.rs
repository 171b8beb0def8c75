//! `redjob workers`: the live worker processes, and the controls an operator
//! sets on them through Redis (quiet, resume, stop).

use redjob::ops::{Admin, WorkerControl, WorkerInfo};
use serde_json::json;

use crate::show::{self, table, when};
use crate::{Ctx, Failure, Outcome};

#[derive(clap::Args)]
pub struct WorkersArgs {
    #[command(subcommand)]
    command: Option<WorkersCommand>,
}

/// Which workers an action is for.
#[derive(clap::Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// Worker ids, or unique beginnings of them (as `redjob workers` lists).
    ids: Vec<String>,
    /// Every live worker.
    #[arg(long)]
    all: bool,
    /// Every live worker on this host.
    #[arg(long)]
    host: Option<String>,
}

#[derive(clap::Subcommand)]
pub enum WorkersCommand {
    /// Quiets workers: they take no more work (no fetch, no topic event) and
    /// finish what they run; reversible with `resume`. Stored in Redis with
    /// who set it; the workers follow at once.
    Quiet(Which),
    /// Resumes quiet workers: they take work again.
    Resume(Which),
    /// Stops workers gracefully: they take no more work, finish (or, after
    /// their grace period, release) what they run and leave; their
    /// `Worker::run` returns, and the application's process decides what
    /// follows.
    Stop(Which),
}

/// The live workers, or a control set on some of them.
pub async fn workers(ctx: &Ctx, args: WorkersArgs) -> Outcome {
    let (which, control) = match args.command {
        None => return list(ctx).await,
        Some(WorkersCommand::Quiet(w)) => (w, Some(WorkerControl::Quiet)),
        Some(WorkersCommand::Resume(w)) => (w, None),
        Some(WorkersCommand::Stop(w)) => (w, Some(WorkerControl::Stop)),
    };
    let live = ctx.client.workers().await?;
    let ids = pick(&live, &which)?;
    let mut done = Vec::new();
    for id in ids {
        // one that left meanwhile is reported, the others go on
        let set = ctx.client.control_worker(&id, control).await?;
        done.push((id, set));
    }
    let what = control.map_or("resume", WorkerControl::as_str);
    if ctx.json {
        let v: Vec<_> = done
            .iter()
            .map(|(id, set)| json!({"id": id, "control": what, "set": set}))
            .collect();
        return show::json(&json!(v));
    }
    let word = match control {
        Some(WorkerControl::Quiet) => "quiet",
        Some(WorkerControl::Stop) => "stopping",
        _ => "resumed",
    };
    let mut gone = 0;
    for (id, set) in &done {
        if *set {
            println!("{id}: {word}");
        } else {
            gone += 1;
            println!("{id}: left before the {what}");
        }
    }
    if gone == done.len() {
        return Err(Failure(format!("no worker took the {what}")));
    }
    Ok(())
}

/// The ids of the live workers `which` names: each id given matches one
/// worker, exactly or by a unique beginning.
fn pick(live: &[WorkerInfo], which: &Which) -> Result<Vec<String>, Failure> {
    if which.all {
        if live.is_empty() {
            return Err(Failure("no live worker".into()));
        }
        return Ok(live.iter().map(|w| w.id.clone()).collect());
    }
    if let Some(host) = &which.host {
        let ids: Vec<String> = live
            .iter()
            .filter(|w| &w.host == host)
            .map(|w| w.id.clone())
            .collect();
        if ids.is_empty() {
            return Err(Failure(format!("no live worker on host {host:?}")));
        }
        return Ok(ids);
    }
    let mut out = Vec::new();
    for given in &which.ids {
        let matching: Vec<&WorkerInfo> = match live.iter().find(|w| &w.id == given) {
            Some(w) => vec![w],
            None => live
                .iter()
                .filter(|w| w.id.starts_with(given.as_str()))
                .collect(),
        };
        match matching.as_slice() {
            [w] => {
                if !out.contains(&w.id) {
                    out.push(w.id.clone());
                }
            }
            [] => {
                return Err(Failure(format!(
                    "no live worker {given:?} (see `redjob workers`)"
                )));
            }
            many => {
                let ids: Vec<&str> = many.iter().map(|w| w.id.as_str()).collect();
                return Err(Failure(format!(
                    "{given:?} names {} workers: {}",
                    many.len(),
                    ids.join(", ")
                )));
            }
        }
    }
    Ok(out)
}

/// What a worker does: `running`, `quiet`, `stopping`, with who asked; a
/// control it has not yet followed says so.
fn state(w: &WorkerInfo) -> String {
    match &w.control {
        None if w.quiet => "resuming".into(),
        None => "running".into(),
        Some(c) => {
            let what = match c.what {
                WorkerControl::Quiet if !w.quiet => "quieting",
                WorkerControl::Quiet => "quiet",
                _ => "stopping",
            };
            format!("{what} (by {}, {})", c.by, when(c.at_ms))
        }
    }
}

/// The live workers: one row each, then (in tables) the jobs each one runs.
async fn list(ctx: &Ctx) -> Outcome {
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
                state(w),
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
            "STATE",
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
