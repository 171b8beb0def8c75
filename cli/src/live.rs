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
                when(w.started_at_ms),
                when(w.last_beat_ms),
                w.version.clone(),
            ]
        })
        .collect();
    table(
        &[
            "ID", "HOST", "PID", "QUEUES", "BUSY", "STARTED", "BEAT", "VERSION",
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

/// The periodic schedules live workers tick, with their last and next tick.
pub async fn periodic(ctx: &Ctx) -> Outcome {
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
            ]
        })
        .collect();
    table(
        &[
            "QUEUE", "NAME", "JOB", "SCHEDULE", "LAST", "NEXT", "WORKERS",
        ],
        &rows,
    );
    Ok(())
}
