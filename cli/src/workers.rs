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
    let what = control.map_or("resume", WorkerControl::as_str);
    let word = match control {
        Some(WorkerControl::Quiet) => "quiet",
        Some(WorkerControl::Stop) => "stopping",
        _ => "resumed",
    };
    // each worker's outcome: "quiet", "stopping", "resumed", "left" (before
    // the control reached it) or "stopping already" (a stop is final)
    let mut done = Vec::new();
    for w in ids {
        let stopping = matches!(&w.control, Some(c) if c.what == WorkerControl::Stop);
        let outcome = if stopping && control != Some(WorkerControl::Stop) {
            "stopping already"
        } else {
            match ctx.client.control_worker(&w.id, control).await {
                Ok(true) => word,
                Ok(false) => "left",
                Err(e) => {
                    // what was done before stays done: say so
                    report(ctx, what, &done);
                    return Err(Failure(format!("{}: {e}", w.id)));
                }
            }
        };
        done.push((w.id.clone(), outcome));
    }
    report(ctx, what, &done);
    if done.iter().all(|(_, o)| *o != word) {
        return Err(Failure(format!("no worker took the {what}")));
    }
    Ok(())
}

/// Prints what each worker made of the control `what`.
fn report(ctx: &Ctx, what: &str, done: &[(String, &str)]) {
    if ctx.json {
        let v: Vec<_> = done
            .iter()
            .map(|(id, outcome)| json!({"id": id, "control": what, "outcome": outcome}))
            .collect();
        // stdout is a pipe or a terminal: nothing to do if it fails
        let _ = show::json(&json!(v));
        return;
    }
    for (id, outcome) in done {
        println!("{}: {outcome}", show::escaped(id));
    }
}

/// The ids of the live workers `which` names: each id given matches one
/// worker, exactly or by a unique beginning.
fn pick<'a>(live: &'a [WorkerInfo], which: &Which) -> Result<Vec<&'a WorkerInfo>, Failure> {
    if which.all {
        if live.is_empty() {
            return Err(Failure("no live worker".into()));
        }
        return Ok(live.iter().collect());
    }
    if let Some(host) = &which.host {
        let ids: Vec<&WorkerInfo> = live.iter().filter(|w| &w.host == host).collect();
        if ids.is_empty() {
            return Err(Failure(format!("no live worker on host {host:?}")));
        }
        return Ok(ids);
    }
    let mut out: Vec<&WorkerInfo> = Vec::new();
    for given in &which.ids {
        if given.is_empty() {
            return Err(Failure("an empty worker id names no worker".into()));
        }
        let matching: Vec<&WorkerInfo> = match live.iter().find(|w| &w.id == given) {
            Some(w) => vec![w],
            None => live
                .iter()
                .filter(|w| w.id.starts_with(given.as_str()))
                .collect(),
        };
        match matching.as_slice() {
            [w] => {
                if !out.iter().any(|o| o.id == w.id) {
                    out.push(w);
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
                busy(w),
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
    let events: Vec<Vec<String>> = workers
        .iter()
        .flat_map(|w| {
            w.events.iter().map(|e| {
                vec![
                    w.id.get(..8).unwrap_or(&w.id).to_string(),
                    e.topic.clone(),
                    e.subscriber.clone(),
                    e.id.clone(),
                    e.event.clone(),
                    when(e.started_at_ms),
                ]
            })
        })
        .collect();
    if !events.is_empty() {
        println!();
        table(
            &[
                "WORKER",
                "TOPIC",
                "SUBSCRIBER",
                "EVENT ID",
                "TYPE",
                "STARTED",
            ],
            &events,
        );
    }
    Ok(())
}

/// Its running slots taken (by jobs and topic events) of its concurrency,
/// and `+n` jobs leased waiting for one (prefetched).
fn busy(w: &WorkerInfo) -> String {
    let busy = format!("{}/{}", w.running.len() + w.events.len(), w.concurrency);
    match w.prefetched {
        0 => busy,
        n => format!("{busy} +{n}"),
    }
}
